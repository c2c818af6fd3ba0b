# -*- coding: utf-8 -*-
"""Pure functions of the max-model-len capacity curve (llm-serving-measurement.md §7.3): sweep plan, saturation
detection, restart decision, curve assembly and Markdown. No I/O.
"""
from __future__ import annotations

import math

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.common import tables
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import capacity_check


def curve_values(values, running=None):
    """The max-model-len values in the order the curve measures them: integers, deduplicated, the value the engine
    serves now first (measured without a relaunch: each relaunch reloads the weights), then the rest ascending."""
    ordered = sorted({int(v) for v in values})
    if running is not None and int(running) in ordered:
        ordered.remove(int(running))
        ordered.insert(0, int(running))
    return ordered


def running_max_model_len(status, body):
    """``max_model_len`` the server reports on ``/v1/models`` (None: no 200 answer, or no model listed)."""
    if status != 200 or not isinstance(body, dict):
        return None
    data = body.get("data") or []
    if not data or not isinstance(data[0], dict) or data[0].get("max_model_len") in (None, ""):
        return None
    try:
        return int(data[0]["max_model_len"])
    except (TypeError, ValueError, OverflowError):
        return None


def restart_decision(status, body, wanted):
    """Whether measuring ``wanted`` needs a relaunch: only when the running max_model_len differs (or is unknown)."""
    wanted = int(wanted)
    running = running_max_model_len(status, body)
    if running == wanted:
        reason = "already serving max_model_len %d" % wanted
    elif running is None:
        reason = "the running max_model_len is unknown (/v1/models answered %s)" % (status or "nothing")
    else:
        reason = "serving max_model_len %d, the point needs %d" % (running, wanted)
    return {"running": running, "wanted": wanted, "restart": running != wanted, "reason": reason}


def theoretical_concurrency(kv_tokens, max_model_len, max_num_seqs=None):
    """Requests of full ``max_model_len`` that fit in the KV pool (``kv_tokens / L``), capped at max_num_seqs."""
    if not kv_tokens or not max_model_len:
        return None
    c = float(kv_tokens) / float(max_model_len)
    if max_num_seqs:
        c = min(c, float(max_num_seqs))
    return round(c, 4)


def sweep_levels(max_concurrency=64, theoretical=None, start=1, factor=2.0):
    """Concurrency levels: geometric from ``start`` by ``factor`` up to ``max_concurrency``; when the theoretical
    concurrency is known the sweep stops at ~2x of it (past that the server can only queue) and contains
    floor/ceil of it so the knee is measured."""
    cap = int(max_concurrency)
    if theoretical:
        cap = max(1, min(cap, int(math.ceil(2 * float(theoretical)))))
    levels = set()
    c = float(max(1, int(start)))
    while int(c) <= cap:
        levels.add(int(c))
        c *= float(factor)
    levels.add(cap)
    if theoretical:
        for v in (int(math.floor(theoretical)), int(math.ceil(theoretical))):
            if 1 <= v <= cap:
                levels.add(v)
    return sorted(levels)


def prompt_tokens_for(max_model_len, output_tokens, fraction=1.0, margin=256, cap=None):
    """Prompt length for a point: about ``fraction * (L - output) - margin`` tokens (at least 16)."""
    n = int(fraction * (int(max_model_len) - int(output_tokens))) - int(margin)
    if cap:
        n = min(n, int(cap))
    return max(16, n)


def saturation_reasons(step, previous=None, ttft_limit_s=None, plateau_gain=0.05):
    """Why a step counts as saturated (empty list = not saturated).

    - ``ttft_p99`` above ``ttft_limit_s``;
    - requests waiting on the server (peak ``num_requests_waiting`` > 0) or preemptions during the step;
    - failed requests;
    - throughput plateau: throughput gained less than ``plateau_gain`` (relative) over the previous step although
      concurrency went up.
    """
    out = []
    ttft = (step.get("ttft_s") or {}).get("p99")
    if ttft_limit_s and ttft is not None and ttft > float(ttft_limit_s):
        out.append("ttft_p99 %.3fs > %.3fs" % (ttft, float(ttft_limit_s)))
    if (step.get("num_requests_waiting_max") or 0) > 0:
        out.append("requests waiting (peak %g)" % step["num_requests_waiting_max"])
    if (step.get("preemptions") or 0) > 0:
        out.append("%g preemption(s)" % step["preemptions"])
    if step.get("failed_requests"):
        out.append("%d failed request(s)" % step["failed_requests"])
    if previous and previous.get("throughput_tok_s") and step.get("throughput_tok_s") is not None \
            and step["concurrency"] > previous["concurrency"]:
        gain = step["throughput_tok_s"] / previous["throughput_tok_s"] - 1.0
        if gain < plateau_gain:
            out.append("throughput plateau (+%.1f%% from concurrency %d to %d)" % (
                100 * gain, previous["concurrency"], step["concurrency"]))
    return out


def dead_levels(steps):
    """Why a sweep measured nothing: one line per step whose every request failed (empty list: the server answered).

    A level where a few requests fail is a saturation reason; a level where none got an answer means the server
    stopped serving (an engine that died on its first request), and a curve built on it would be empty figures.
    """
    out = []
    for s in steps:
        if s.get("requests") and s.get("failed_requests") == s["requests"]:
            errors = s.get("errors") or ["no error text"]
            out.append("concurrency %d: all %d requests failed (%s)" % (s["concurrency"], s["requests"], errors[0]))
    return out


def max_sustainable(steps):
    """Highest concurrency of the unsaturated steps below the first saturated one (None if the first saturates)."""
    best = None
    for s in sorted(steps, key=lambda x: x["concurrency"]):
        if s.get("saturation"):
            break
        best = s["concurrency"]
    return best


def point_summary(max_model_len, steps, kv, restarted):
    """One point of the curve from its sweep steps and KV figures (metrics and/or log)."""
    kv = kv or {}
    sustainable = max_sustainable(steps)
    best = max([s.get("throughput_tok_s") or 0 for s in steps] or [0]) or None
    theo = kv.get("kv_cache_max_concurrency")
    if theo is None:
        theo = theoretical_concurrency(kv.get("kv_cache_size_tokens"), max_model_len)
    return {
        "max_model_len": int(max_model_len),
        "restarted": bool(restarted),
        "kv_cache_size_tokens": kv.get("kv_cache_size_tokens"),
        "theoretical_max_concurrency": theo,
        "measured_max_concurrency": sustainable,
        "peak_throughput_tok_s": best,
        "kv_cache_usage_perc_peak": max([s.get("kv_cache_usage_perc_max") or 0 for s in steps] or [0]),
        "steps": steps,
    }


def _served(point):
    """What the engine did at a point: served, refused (predicted or not), or not launched."""
    r = point.get("refusal") or {}
    predicted = {True: "predicted refused", False: "predicted served"}.get(r.get("refused"), "no prediction")
    return "%s (%s)" % (r.get("observed") or "served", predicted)


def render_markdown(curve):
    rows = []
    for p in curve["points"]:
        rows.append([p["max_model_len"], p.get("kv_cache_size_tokens") or "-",
                     p.get("theoretical_max_concurrency") or "-", p.get("measured_max_concurrency") or "-",
                     "%.1f" % p["peak_throughput_tok_s"] if p.get("peak_throughput_tok_s") else "-",
                     "%.2f" % p["kv_cache_usage_perc_peak"] if p.get("kv_cache_usage_perc_peak") is not None else "-",
                     "yes" if p.get("restarted") else "no", _served(p)])
    lines = ["# Kimi-K3 max-model-len capacity curve", "",
             "- restarts: %s (the running max_model_len first, without a relaunch, then the values ascending)" %
             curve.get("restarts"),
             "- theoretical max concurrency = KV cache size tokens / max_model_len (vllm:cache_config_info or the "
             "start-up log line); measured = highest swept concurrency with no queue, no preemption, no failed "
             "request, p99 TTFT within %s s and no throughput plateau" % curve.get("ttft_limit_s"), "",
             tables.markdown_table(["max_model_len", "KV tokens", "theoretical conc.", "measured conc.",
                                    "peak tok/s", "peak KV use", "restarted", "engine"], rows), ""]
    lines += capacity_check.refusal_markdown(curve.get("refusal"))
    for p in curve["points"]:
        if (p.get("refusal") or {}).get("observed") not in (None, "served"):
            continue  # refused or not launched: no sweep
        lines += ["## max_model_len %d" % p["max_model_len"], "", tables.markdown_table(
            ["concurrency", "requests", "tok/s", "ttft p50", "ttft p99", "itl p50", "itl p99", "waiting max",
             "preempt", "kv use max", "saturation"],
            [[s["concurrency"], s["requests"], s.get("throughput_tok_s"), (s.get("ttft_s") or {}).get("p50"),
              (s.get("ttft_s") or {}).get("p99"), (s.get("itl_s") or {}).get("p50"),
              (s.get("itl_s") or {}).get("p99"), s.get("num_requests_waiting_max"), s.get("preemptions"),
              s.get("kv_cache_usage_perc_max"), "; ".join(s.get("saturation") or []) or "-"]
             for s in p["steps"]]), ""]
    return "\n".join(lines)
