# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The plan's capacity prediction against the engine's own figures (pure functions, no I/O).

After launch: the engine's KV cache tokens and maximum concurrency at max-model-len (``vllm:cache_config_info``,
else its start-up line "KV cache size: N tokens" / "Maximum concurrency for L tokens per request: Cx") and the
GPU memory in use (node probes, where reported) beside the plan's prediction (``capacity.at_max_model_len`` of
the deployment, plugin_utils.plan.sizing), with the error in % and a warning beyond a tolerance.

On the capacity curve: the max-model-len from which the engine refuses to start (the plan's
``max_model_len_limit`` + 1) beside what the engine did at each point, read from its refusal (vLLM
``vllm/v1/core/kv_cache_utils.py`` ``_check_enough_kv_cache_memory``):

    ValueError: To serve at least one request with the model's max seq len (L), (X GiB KV cache is needed,
    which is larger than the available KV cache memory (Y GiB). Based on the available memory, the estimated
    maximum model length is N. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` ...

(older releases spell it "models's"; N is the largest length vLLM's binary search finds that fits).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

REFUSAL_RE = re.compile(
    r"To serve at least one request with the models?'s max seq len \((\d+)\), \(([\d.]+) GiB KV cache is "
    r"needed, which is larger than the available KV cache memory \(([\d.]+) GiB\)\.(?: Based on the available "
    r"memory, the estimated maximum model length is (\d+)\.)?")
NO_MEMORY_RE = re.compile(r"No available memory for the cache blocks\.")
DEFAULT_TOLERANCE_PCT = 2.0
MIB = 1024 ** 2


def _number(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    return None


def error_pct(predicted, observed):
    """(observed - predicted) / predicted in %, 3 decimals; None when either is missing or predicted is 0."""
    predicted, observed = _number(predicted), _number(observed)
    if predicted is None or observed is None or predicted == 0:
        return None
    return round((observed - predicted) * 100.0 / predicted, 3)


# ----------------------------------------------------------------------------- the plan's side


def deployment_capacity(cluster, deployment=None):
    """The capacity record of one deployment in ``plan_result.cluster`` (None when the plan predicted none)."""
    cluster = cluster if isinstance(cluster, dict) else {}
    deployments = [d for d in cluster.get("deployments") or [] if isinstance(d, dict)]
    for dep in deployments:
        if deployment is not None and dep.get("name") == deployment and isinstance(dep.get("capacity"), dict):
            return dep["capacity"]
    if isinstance(cluster.get("capacity"), dict):
        return cluster["capacity"]
    return next((d["capacity"] for d in deployments if isinstance(d.get("capacity"), dict)), None)


def predicted_figures(cap):
    """Per-engine figures the plan predicts at its max-model-len, and the GPU memory it expects in use."""
    cap = cap if isinstance(cap, dict) else {}
    at = cap.get("at_max_model_len") or {}
    per_gpu = cap.get("per_gpu") or {}
    used = None
    if cap.get("budget_rule") == "gpu_fraction" and _number(per_gpu.get("memory_gib")):
        used = round(per_gpu["memory_gib"] * 1024 * float(cap.get("gpu_memory_utilization") or 0), 1)
    return {"max_model_len": at.get("max_model_len"), "kv_cache_size_tokens": at.get("kv_cache_size_tokens"),
            "max_concurrency": at.get("max_concurrency"), "gpu_memory_used_mib": used,
            "max_model_len_limit": cap.get("max_model_len_limit")}


# ----------------------------------------------------------------------------- the engine's side


def _engine_values(server, field):
    values = []
    for cc in ((server or {}).get("cache_config") or {}).values():
        if isinstance(cc, dict) and _number(cc.get(field)) is not None:
            values.append(cc[field])
    return values


def _concurrency(server, tokens):
    """vLLM's maximum concurrency from its pool when the engine states none: blocks / blocks per request
    (``get_max_concurrency_for_kv_cache_config``), tokens / max-model-len without a block size."""
    server = server or {}
    length, block = _number(server.get("max_model_len")), _number(server.get("block_size"))
    if not length:
        return None
    if block:
        return round((tokens // block) / float(-(-length // block)), 2)
    return round(tokens / float(length), 2)


def observed_figures(server, kv_from_log=None, gpu_memory=None):
    """Per-engine figures the engine reports: ``vllm:cache_config_info`` per engine, else the start-up lines per
    host (the smallest engine counts: it is the one that refuses first); GPU memory in use per GPU (MiB, the mean
    over the GPUs the node probes report)."""
    tokens = _engine_values(server, "kv_cache_size_tokens")
    conc = _engine_values(server, "kv_cache_max_concurrency")
    source = "metrics" if tokens else None
    if not tokens:
        logs = [v for v in (kv_from_log or {}).values() if isinstance(v, dict)]
        tokens = [v["kv_cache_size_tokens"] for v in logs if _number(v.get("kv_cache_size_tokens")) is not None]
        conc = [v["max_concurrency"] for v in logs if _number(v.get("max_concurrency")) is not None]
        source = "log" if tokens else None
    if tokens and not conc:
        conc = [_concurrency(server, t) for t in tokens if _concurrency(server, t) is not None]
    used = [g["used_mib"] / float(g["gpus"]) for g in (gpu_memory or {}).values()
            if isinstance(g, dict) and g.get("gpus") and _number(g.get("used_mib")) is not None]
    return {"source": source, "engines": len(tokens), "kv_cache_size_tokens": min(tokens) if tokens else None,
            "max_concurrency": min(conc) if conc else None,
            "gpu_memory_used_mib": round(sum(used) / len(used), 1) if used else None}


def calibration(cap, kv_from_log=None):
    """The reserve the engine's own budget implies, for the recipe's ``capacity.budget_by_hardware.<acc>.reserve_gib``:
    GPU memory x utilisation - weights per GPU - the KV memory the worker found ("Available KV cache memory", the
    smallest over the hosts). None unless the plan budgets a GPU fraction and a log stated the memory."""
    cap = cap if isinstance(cap, dict) else {}
    g = cap.get("per_gpu") or {}
    found = [v.get("available_kv_gib") for v in (kv_from_log or {}).values() if isinstance(v, dict)]
    found = [v for v in found if _number(v) is not None]
    figures = (g.get("memory_gib"), g.get("weights_gib"), g.get("reserve_gib"), cap.get("gpu_memory_utilization"))
    if cap.get("budget_rule") != "gpu_fraction" or not found or any(_number(v) is None for v in figures):
        return None
    usable = g["memory_gib"] * float(cap["gpu_memory_utilization"])
    implied = round(usable - g["weights_gib"] - min(found), 2)
    return {"available_kv_gib": min(found), "kv_budget_gib_predicted": g.get("kv_budget_gib"),
            "reserve_gib_plan": g["reserve_gib"], "reserve_gib_implied": implied,
            "reserve_error_gib": round(implied - g["reserve_gib"], 2)}


# ----------------------------------------------------------------------------- the comparison

_COMPARED = (("kv_cache_size_tokens", "KV cache size (tokens per engine)"),
             ("max_concurrency", "maximum concurrency at max-model-len"),
             ("gpu_memory_used_mib", "GPU memory in use (MiB per GPU)"))


def compare(cap, server, kv_from_log=None, gpu_memory=None, tolerance_pct=DEFAULT_TOLERANCE_PCT):
    """The ``kv_check`` fact: predicted, observed, error in % per figure, and one warning per figure off by more
    than ``tolerance_pct`` (a warning, never a failure: the prediction is what is being checked)."""
    predicted = predicted_figures(cap)
    observed = observed_figures(server, kv_from_log, gpu_memory)
    tolerance = float(tolerance_pct)
    errors = dict((key, error_pct(predicted[key], observed[key])) for key, _label in _COMPARED)
    running = _number((server or {}).get("max_model_len"))
    notes = []
    if running and predicted["max_model_len"] and running != predicted["max_model_len"]:
        errors["max_concurrency"] = None  # another length than the plan's: its concurrency is not comparable
        notes.append("the engine serves max-model-len %s, the plan predicted for %s: concurrency not compared" % (
            _fmt(running), _fmt(predicted["max_model_len"])))
    warnings = []
    for key, label in _COMPARED:
        if errors[key] is not None and abs(errors[key]) > tolerance:
            warnings.append("%s: the engine reports %s, the plan predicted %s (%+.2f %%, beyond the %.2f %% "
                            "tolerance): recalibrate the hardware's capacity figures in the recipe data "
                            "(capacity.budget_by_hardware) or check the model's config against the plan's." % (
                                label, _fmt(observed[key]), _fmt(predicted[key]), errors[key], tolerance))
    judged = [e for e in errors.values() if e is not None]
    return {"predicted": predicted, "observed": observed, "error_pct": errors, "tolerance_pct": tolerance,
            "within_tolerance": (not warnings) if judged else None, "warnings": warnings, "notes": notes,
            "compared": bool(cap) and bool(judged), "calibration": calibration(cap, kv_from_log)}


def _fmt(value):
    if isinstance(value, float) and not value.is_integer():
        return "{:,.2f}".format(value)
    return "{:,}".format(int(value)) if _number(value) is not None else "-"


def markdown_lines(check):
    """The smoke report's section for a ``kv_check`` fact."""
    if not isinstance(check, dict):
        return []
    lines = ["## Engine figures vs the plan's prediction", ""]
    if not check.get("compared"):
        why = ("the plan predicted no capacity for this deployment" if not check["predicted"].get("kv_cache_size_tokens")
               else "the engine reported no KV figures (metrics or start-up log)")
        return lines + ["- not compared: %s" % why, ""]
    rows = ["| figure | predicted | engine | error |", "| --- | --- | --- | --- |"]
    for key, label in _COMPARED:
        err = check["error_pct"][key]
        rows.append("| %s | %s | %s | %s |" % (label, _fmt(check["predicted"][key]), _fmt(check["observed"][key]),
                                               "-" if err is None else "%+.3f %%" % err))
    verdict = "within" if check["within_tolerance"] else "BEYOND"
    lines += rows + ["", "- source: %s; max-model-len %s; %s the %.2f %% tolerance" % (
        check["observed"]["source"], _fmt(check["predicted"]["max_model_len"]), verdict, check["tolerance_pct"])]
    return lines + ["- warning: %s" % w for w in check["warnings"]] + [
        "- note: %s" % n for n in check.get("notes") or []] + _calibration_lines(check.get("calibration")) + [""]


def _calibration_lines(cal):
    if not cal:
        return []
    return ["- calibration: the engine found %s GiB of KV memory per GPU (the plan budgeted %s GiB): the reserve "
            "it implies is %s GiB against the recipe's %s GiB (%+.2f GiB); with several runs agreeing, set "
            "capacity.budget_by_hardware.<accelerator>.reserve_gib to it" % (
                _fmt(cal["available_kv_gib"]), _fmt(cal["kv_budget_gib_predicted"]), _fmt(cal["reserve_gib_implied"]),
                _fmt(cal["reserve_gib_plan"]), cal["reserve_error_gib"])]


# ----------------------------------------------------------------------------- the refusal point


def parse_refusal(text):
    """The engine's KV refusal in a log (the last one): ``{max_model_len, needed_gib, available_gib,
    estimated_max_model_len, message}``, or None when the log holds none."""
    found = None
    for line in str(text or "").splitlines():
        m = REFUSAL_RE.search(line)
        if m:
            found = {"max_model_len": int(m.group(1)), "needed_gib": float(m.group(2)),
                     "available_gib": float(m.group(3)),
                     "estimated_max_model_len": int(m.group(4)) if m.group(4) else None,
                     "message": line[line.find("ValueError"):] if "ValueError" in line else m.group(0)}
        elif NO_MEMORY_RE.search(line):
            found = {"max_model_len": None, "needed_gib": None, "available_gib": 0.0,
                     "estimated_max_model_len": None, "message": line[line.find("ValueError"):]
                     if "ValueError" in line else NO_MEMORY_RE.search(line).group(0)}
    return found


def predicted_refusal(cap, value):
    """Whether the plan predicts the engine refuses max-model-len ``value``: ``{limit, refused}`` (refused None:
    no prediction)."""
    limit = (cap or {}).get("max_model_len_limit") if isinstance(cap, dict) else None
    limit = limit if _number(limit) is not None else None
    return {"max_model_len": int(value), "limit": limit,
            "refused": None if limit is None else int(value) > limit}


def point_refusal(cap, value, served, log_text=None):
    """One curve point's refusal record: predicted, what the engine did (``served`` True / False, None = not
    launched) and, when it refused, its message and its own estimate of the largest length that fits."""
    out = predicted_refusal(cap, value)
    refusal = parse_refusal(log_text) if served is False else None
    out["observed"] = "served" if served else ("refused" if refusal else (
        "not launched" if served is None else "failed (no KV refusal in the log)"))
    out["engine_message"] = refusal["message"] if refusal else None
    out["engine_limit"] = refusal["estimated_max_model_len"] if refusal else None
    observed_refused = {"served": False, "refused": True}.get(out["observed"])
    out["agrees"] = None if out["refused"] is None or observed_refused is None else out["refused"] == observed_refused
    return out


def curve_refusal(cap, points):
    """The curve's refusal point: predicted (the plan's limit + 1) against observed (the longest length served,
    the shortest refused and the engine's own estimate), and whether every launched point went as predicted."""
    refusals = [p.get("refusal") for p in points or [] if isinstance(p, dict) and isinstance(p.get("refusal"), dict)]
    limit = (cap or {}).get("max_model_len_limit") if isinstance(cap, dict) else None
    served = [r["max_model_len"] for r in refusals if r.get("observed") == "served"]
    refused = [r["max_model_len"] for r in refusals if r.get("observed") == "refused"]
    engine = [r["engine_limit"] for r in refusals if r.get("engine_limit") is not None]
    judged = [r["agrees"] for r in refusals if r.get("agrees") is not None]
    return {"predicted_limit": limit, "predicted_refused_from": limit + 1 if _number(limit) is not None else None,
            "longest_served": max(served) if served else None, "shortest_refused": min(refused) if refused else None,
            "engine_limit": engine[0] if engine else None,
            "limit_error_pct": error_pct(limit, engine[0]) if engine else None,
            "agrees": all(judged) if judged else None,
            "messages": sorted(set(r["engine_message"] for r in refusals if r.get("engine_message")))}


def refusal_markdown(summary):
    """The capacity report's section on the refusal point."""
    if not isinstance(summary, dict) or summary.get("predicted_limit") is None:
        return []
    agrees = {True: "yes", False: "NO", None: "not judged (no point launched on both sides of it)"}
    lines = ["## Refusal point", "",
             "| | max-model-len |", "| --- | --- |",
             "| predicted: longest that starts (the plan) | %s |" % _fmt(summary["predicted_limit"]),
             "| predicted: refused from | %s |" % _fmt(summary["predicted_refused_from"]),
             "| engine's own estimate (its refusal) | %s |" % _fmt(summary["engine_limit"]),
             "| longest served on the curve | %s |" % _fmt(summary["longest_served"]),
             "| shortest refused on the curve | %s |" % _fmt(summary["shortest_refused"]), "",
             "- every launched point as predicted: %s" % agrees[summary["agrees"]]]
    if summary.get("limit_error_pct") is not None:
        lines.append("- error of the predicted limit against the engine's estimate: %+.3f %%"
                     % summary["limit_error_pct"])
    return lines + ["- engine: `%s`" % m for m in summary["messages"]] + [""]
