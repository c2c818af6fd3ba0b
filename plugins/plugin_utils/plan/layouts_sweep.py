# -*- coding: utf-8 -*-
# Copyright (c) 2026 gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The layouts table proven by measuring: which rows a sweep launches, what each one measured, the verdict.

Controller-only and pure: the rows come from layouts.json (layouts.plain), each measurement from the capacity
report of that layout's launch (capacity.json, one point at the target's max-model-len). The driver that launches,
measures and tears down is benchmarks/layouts_sweep.py; docs/layouts.md "Proving the choice" reads the output.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import capacity_check

# The engine's concurrency (its KV tokens / max-model-len) against the plan's: within this, the prediction holds.
CONCURRENCY_TOLERANCE_PCT = 2.0
# The layout `auto` picks holds if its measured goodput is within this of the best measured one.
GOODPUT_TOLERANCE_PCT = 10.0


def layout_of(deployments):
    """The layouts table's name for the deployments a plan renders (``cluster.deployments``): one deployment is its
    strategy, k equal replicas are ``"k x <strategy>"``, a prefill/decode split ``"PD <p> x<n> + <d> x<m>"`` (the
    names of plugin_utils.plan.layouts.candidates); None for any other mix."""
    deps = [d for d in deployments or [] if isinstance(d, dict)]
    kinds = [d.get("kind") for d in deps]
    if kinds == ["single"]:
        return deps[0].get("strategy")
    if len(deps) > 1 and set(kinds) == {"replica"} and \
            len({(d.get("strategy"), d.get("nnodes")) for d in deps}) == 1:
        return "%d x %s" % (len(deps), deps[0].get("strategy"))
    if sorted(kinds) == ["decode", "prefill"]:
        pre, dec = sorted(deps, key=lambda d: d["kind"] != "prefill")
        return "PD %s x%s + %s x%s" % (pre.get("strategy"), pre.get("nnodes"), dec.get("strategy"), dec.get("nnodes"))
    return None


def _runnable(row, laid_out):
    """None when a sweep can launch ``row`` (a single deployment by extra vars, any other layout by an inventory
    that lays the nodes out so), else why not."""
    if row.get("status") != "ok":
        return "refused by the plan"
    if row.get("kind") != "single" and row.get("layout") not in laid_out:
        return ("a %s layout: needs an inventory that lays the nodes out as %s, with a router host "
                "(--layout-inventory)" % (row.get("kind"), row.get("layout")))
    return None


def choose(report, top, laid_out=None):
    """``(runs, skipped)``: the rendering rows in rank order that the sweep launches (at most ``top``), and
    ``[(layout, why)]`` for the ones it does not. ``laid_out``: ``{layout: inventory}`` of the inventories given
    for layouts that extra vars cannot make (fleets, prefill/decode splits)."""
    laid_out = laid_out or {}
    runs, skipped = [], []
    for row in report.get("layouts", []):
        why = _runnable(row, laid_out)
        if why is None and len(runs) < top:
            runs.append(row)
        elif why is None:
            skipped.append((row["layout"], "beyond the top %d" % top))
        elif row.get("status") == "ok":
            skipped.append((row["layout"], why))
    return runs, skipped


def extra_vars(row, max_model_len):
    """The variables that launch ``row`` at ``max_model_len``: a single deployment over every node also gets its
    strategy; a layout of several deployments comes from its own inventory, which names theirs."""
    out = {"kimi_k3_max_model_len": int(max_model_len)}
    if row.get("kind") == "single":
        (_deployment, _kind, strategy, _count), = row["groups"]
        out["kimi_k3_strategy"] = strategy
    return out


def _point(capacity, max_model_len):
    for point in capacity.get("points", []):
        if point.get("max_model_len") == max_model_len:
            return point
    return None


def _engine_concurrency(point):
    kv = point.get("kv") or {}
    value = kv.get("kv_cache_max_concurrency")
    return value if value is not None else point.get("theoretical_max_concurrency")


def _within_slo(step, slo):
    ttft, tpot = _p(step, "ttft_s", "p99"), _p(step, "tpot_s", "p99")
    return (not step.get("failed_requests") and ttft is not None and tpot is not None
            and ttft <= slo["ttft_s"] and tpot <= slo["tpot_s"])


def goodput(steps, slo):
    """The best output throughput (tokens/s) of a step whose every request succeeded with p99 TTFT and p99 TPOT
    within ``slo`` ({"ttft_s", "tpot_s"}), and that step; ``(0.0, None)`` when no step meets it."""
    good = [s for s in steps if _within_slo(s, slo)]
    if not good:
        return 0.0, None
    best = max(good, key=lambda s: (s.get("throughput_tok_s") or 0.0, -s.get("concurrency", 0)))
    return float(best.get("throughput_tok_s") or 0.0), best


def measured(row, capacity, slo):
    """One layout's result: the plan's predicted concurrency and KV tokens against the engine's, and goodput."""
    length = row["max_model_len"]
    point = _point(capacity, length)
    out = {"layout": row["layout"], "rank": row.get("rank"), "max_model_len": length,
           "predicted_concurrency": row.get("concurrency_at_target"),
           "predicted_kv_tokens": _kv_tokens(row), "measured": point is not None}
    if point is None:
        out["error"] = "the capacity report has no point at max-model-len %d" % length
        return out
    value, step = goodput(point.get("steps", []), slo)
    engine = _engine_concurrency(point)
    out.update({"engine_concurrency": engine, "engine_kv_tokens": point.get("kv_cache_size_tokens"),
                # the plan's figure against the engine's: the engine is the reference here
                "concurrency_error_pct": capacity_check.error_pct(engine, out["predicted_concurrency"]),
                "goodput_tok_s": round(value, 3), "peak_throughput_tok_s": point.get("peak_throughput_tok_s"),
                "at_concurrency": step.get("concurrency") if step else None,
                "ttft_p50_s": _p(step, "ttft_s", "p50"), "ttft_p99_s": _p(step, "ttft_s", "p99"),
                "itl_p50_s": _p(step, "itl_s", "p50"), "itl_p99_s": _p(step, "itl_s", "p99")})
    out["prediction_holds"] = out["concurrency_error_pct"] is not None and \
        abs(out["concurrency_error_pct"]) <= CONCURRENCY_TOLERANCE_PCT
    return out


def _p(step, key, which):
    return (step.get(key) or {}).get(which) if step else None


def _kv_tokens(row):
    """The KV tokens of every serving engine together (what the engines' /metrics add up to)."""
    caps = [d["capacity"] for d in row.get("deployments", []) if d.get("capacity")]
    if not caps or any(c.get("kv_tokens_per_engine") is None for c in caps):
        return None
    return sum(c["kv_tokens_per_engine"] * (c.get("engines") or 1) for c in caps)


def verdict(results, auto_layout):
    """``{"best", "auto", "auto_goodput_pct_of_best", "auto_holds", "predictions_hold"}`` over the measured
    results; ``auto_layout`` is the layout the plan renders for ``kimi_k3_strategy: auto``."""
    done = [r for r in results if r.get("measured")]
    best = max(done, key=lambda r: r["goodput_tok_s"]) if done else None
    auto = next((r for r in done if r["layout"] == auto_layout), None)
    share = None
    if best and auto and best["goodput_tok_s"] > 0:
        share = round(auto["goodput_tok_s"] * 100.0 / best["goodput_tok_s"], 2)
    return {"best": best["layout"] if best else None, "auto": auto_layout,
            "auto_goodput_pct_of_best": share,
            "auto_holds": share is not None and share >= 100.0 - GOODPUT_TOLERANCE_PCT,
            "predictions_hold": bool(done) and all(r["prediction_holds"] for r in done)}


def _num(value, digits=2):
    if value is None:
        return "-"
    return ("{:,.%df}" % digits).format(value) if isinstance(value, float) else "{:,}".format(value)


def markdown(report):
    """layouts-sweep.md: one row per measured layout, the skipped ones, and the verdict in words."""
    v, slo = report["verdict"], report["slo"]
    lines = ["# Kimi-K3 layouts, measured", "",
             "max-model-len %s; goodput: the best output tokens/s of a load step whose requests all succeeded "
             "with p99 TTFT <= %s s and p99 TPOT <= %s s." % (_num(report["max_model_len"]), slo["ttft_s"],
                                                              slo["tpot_s"]), "",
             "| rank | layout | predicted concurrency | engine concurrency | error % | predicted KV tokens | "
             "engine KV tokens | goodput tok/s | at concurrency | TTFT p50 / p99 s | ITL p50 / p99 s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["results"]:
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s / %s |" % (
            _num(r.get("rank")), r["layout"], _num(r.get("predicted_concurrency")),
            _num(r.get("engine_concurrency")), _num(r.get("concurrency_error_pct"), 3),
            _num(r.get("predicted_kv_tokens")), _num(r.get("engine_kv_tokens")), _num(r.get("goodput_tok_s")),
            _num(r.get("at_concurrency")), _num(r.get("ttft_p50_s"), 3), _num(r.get("ttft_p99_s"), 3),
            _num(r.get("itl_p50_s"), 4), _num(r.get("itl_p99_s"), 4)) if r.get("measured")
            else "| %s | %s | not measured: %s |" % (_num(r.get("rank")), r["layout"], r.get("error")))
    lines += [""] + ["- %s: not launched, %s" % (name, why) for name, why in report["skipped"]]
    lines += ["", "Best measured: %s. `kimi_k3_strategy: auto` picks %s: %s %% of the best goodput (holds if "
              ">= %s %%: %s). Predicted concurrency within %s %% of the engine's on every layout: %s." % (
                  v["best"], v["auto"], _num(v["auto_goodput_pct_of_best"]), _num(100.0 - GOODPUT_TOLERANCE_PCT, 0),
                  "yes" if v["auto_holds"] else "no", _num(CONCURRENCY_TOLERANCE_PCT, 0),
                  "yes" if v["predictions_hold"] else "no"), ""]
    return "\n".join(lines)
