# -*- coding: utf-8 -*-
"""Tool-call figures the way the vendor verifiers define them, plus the interval arithmetic of the smoke gates.
Pure functions, no I/O.

K2-Vendor-Verifier (MoonshotAI/K2-Vendor-Verifier, ``src/kimi_vendor_verifier/tool_calls_eval.py`` and its
README, "Evaluation Metrics"):

- A response's tool calls are *valid* when its ``finish_reason`` is ``"tool_calls"``, it carries at least one call,
  and every call names an offered tool whose ``parameters`` schema is non-empty, its ``arguments`` (a string) pass
  ``json.loads`` and the result passes ``jsonschema.validate`` against that schema (draft chosen from ``$schema``,
  no format checking). Any exception means invalid (``validate_tool_call``; ``process_request`` leaves
  ``tool_calls_valid`` unset for an empty list, which ``compute_summary`` counts as a schema error).
- ``schema_accuracy = successful_tool_call_count / finish_tool_calls`` (responses with
  ``finish_reason == "tool_calls"``).
- ``tool_call_f1``: per request, the trigger is ``finish_reason == "tool_calls"``; TP = both the reference and the
  response trigger, FP = only the response, FN = only the reference; precision TP/(TP+FP), recall TP/(TP+FN), F1
  their harmonic mean. The verifier's reference is the official API's response; here it is each case's expected
  trigger. A streamed response without a ``finish_reason`` counts as ``"stop"`` (``_handle_stream_request``), a failed
  request has none (neither trigger).
- Pass marks published in its README: ``tool_call_f1`` >= 0.73 (K2-thinking) / >= 0.80 (K2-0905); the official API's
  ``schema_accuracy`` is 100 %.

Wilson score interval: ``(p + z^2/2n -+ z*sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)``.

The gates on a rate (:func:`interval_gate`) fail only when the interval's UPPER bound is below the pass mark: a
small sample cannot fail on one unlucky draw, a large one with a real defect rate can. The interval is the usual
two-sided 95 % one (z = 1.96), so a gate fails when the true rate is below the mark with 97.5 % confidence. At
the tool-call gate's 0.9: 3 of 4 first attempts right passes (upper bound 0.954), 40 of 50 fails (0.888).
"""
from __future__ import annotations

import json
import math

try:
    from jsonschema.validators import validator_for
except ImportError:  # pragma: no cover - jsonschema is a requirement of the smoke module
    validator_for = None

TOOL_CALLS = "tool_calls"
Z95 = 1.959963984540054
F1_PASS_MARK = 0.73
SCHEMA_ACCURACY_PASS_MARK = 1.0


def wilson_interval(k, n, z=Z95):
    """Wilson score interval of ``k`` successes in ``n`` trials -> ``(low, high)``; ``(None, None)`` for n = 0."""
    if n <= 0:
        return None, None
    if k < 0 or k > n:
        raise ValueError("k must be within 0..n, got k=%s n=%s" % (k, n))
    p = float(k) / n
    z2 = z * z
    centre = p + z2 / (2.0 * n)
    half = z * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n))
    denom = 1.0 + z2 / n
    # the bounds are exactly 0 at k = 0 and 1 at k = n; floating point would land a hair off
    low = 0.0 if k == 0 else (centre - half) / denom
    high = 1.0 if k == n else (centre + half) / denom
    return low, high


def _schema_of(tools, name):
    for tool in tools or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and fn.get("name") == name:
            return fn.get("parameters")
    return None


def k2vv_call_valid(call, tools):
    """One call (``{"name", "arguments"}`` or the OpenAI ``{"function": {...}}`` shape) judged as K2VV does."""
    try:
        fn = call.get("function", call)
        schema = _schema_of(tools, fn["name"])
        if not schema:
            return False
        args = fn["arguments"]
        if isinstance(args, str):
            args = json.loads(args)
        cls = validator_for(schema)
        cls.check_schema(schema)
        return cls(schema).is_valid(args)
    except Exception:  # noqa: BLE001 - the verifier counts any exception as an invalid call
        return False


def k2vv_tool_calls_valid(finish_reason, tool_calls, tools):
    """``tool_calls_valid`` of one response: None unless it triggered with calls, else all calls valid."""
    if finish_reason != TOOL_CALLS or not tool_calls:
        return None
    return all(k2vv_call_valid(c, tools) for c in tool_calls)


def k2vv_summary(records):
    """K2VV's ``compute_summary`` over ``[{"status": "success"|"failed", "finish_reason", "tool_calls_valid"}]``,
    plus ``schema_accuracy`` (None without any ``tool_calls`` response)."""
    s = {"success_count": 0, "failure_count": 0, "finish_stop": 0, "finish_tool_calls": 0, "finish_others": 0,
         "finish_others_detail": {}, "schema_validation_error_count": 0, "successful_tool_call_count": 0}
    for r in records:
        s["success_count" if r.get("status") == "success" else "failure_count"] += 1
        reason = r.get("finish_reason")
        if reason == "stop":
            s["finish_stop"] += 1
        elif reason == TOOL_CALLS:
            s["finish_tool_calls"] += 1
            key = "successful_tool_call_count" if r.get("tool_calls_valid") else "schema_validation_error_count"
            s[key] += 1
        elif reason:
            s["finish_others"] += 1
            s["finish_others_detail"][reason] = s["finish_others_detail"].get(reason, 0) + 1
    s["schema_accuracy"] = (round(s["successful_tool_call_count"] / float(s["finish_tool_calls"]), 6)
                            if s["finish_tool_calls"] else None)
    return s


def trigger_counts(pairs):
    """``[(expected_trigger: bool, finish_reason)]`` -> ``{"tp", "fp", "fn", "tn"}``."""
    out = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
    for expected, reason in pairs:
        got = reason == TOOL_CALLS
        key = ("tp" if got else "fn") if expected else ("fp" if got else "tn")
        out[key] += 1
    return out


def tool_call_f1(counts):
    """``{"precision", "recall", "f1"}`` from trigger counts. A ratio with a zero denominator is None; F1 is 0.0 when
    precision or recall is 0 or undefined while some trigger was expected or produced, None when none was."""
    tp, fp, fn = counts["tp"], counts["fp"], counts["fn"]
    precision = tp / float(tp + fp) if tp + fp else None
    recall = tp / float(tp + fn) if tp + fn else None
    if tp + fp + fn == 0:
        f1 = None
    elif not precision or not recall:
        f1 = 0.0
    else:
        f1 = 2 * precision * recall / (precision + recall)
    return {"precision": _round(precision), "recall": _round(recall), "f1": _round(f1)}


def _round(v):
    return None if v is None else round(v, 6)


def rate_with_interval(k, n):
    """``{"k", "n", "rate", "ci95": [low, high]}`` (rate and bounds rounded to 6 places; None for n = 0)."""
    lo, hi = wilson_interval(k, n)
    return {"k": k, "n": n, "rate": _round(k / float(n)) if n else None, "ci95": [_round(lo), _round(hi)]}


def interval_gate(k, n, threshold):
    """``rate_with_interval(k, n)`` plus ``threshold`` and ``passed``: the rate passes unless the upper bound of its
    95 % Wilson interval is below ``threshold``; nothing measured (n = 0) does not pass."""
    out = rate_with_interval(k, n)
    out.update(threshold=threshold, passed=bool(n) and out["ci95"][1] >= threshold)
    return out


def class_failure_rates(attempt_classes, classes):
    """Failure rate per class over all attempts, each with its Wilson 95 % interval.

    ``attempt_classes``: one list of failure classes per attempt (empty for a passing attempt)."""
    n = len(attempt_classes)
    return {cls: rate_with_interval(sum(1 for a in attempt_classes if cls in a), n) for cls in classes}


def retry_rates(cases):
    """First-attempt and after-retry success of ``[{"results": [{"status"}, ...]}]`` (``ok`` = success)."""
    n = len(cases)
    first = sum(1 for c in cases if c["results"] and c["results"][0]["status"] == "ok")
    final = sum(1 for c in cases if c["results"] and c["results"][-1]["status"] == "ok")
    return {"first_attempt": rate_with_interval(first, n), "after_retry": rate_with_interval(final, n)}


COMPARED = ("schema_accuracy", "tool_call_f1", "first_attempt_success", "after_retry_success")


def compare_with_previous(current, previous):
    """``{metric: {"before", "after", "delta"}}`` for the figures of two runs (``previous`` None -> {})."""
    if not previous:
        return {}
    out = {}
    for key in COMPARED:
        before, after = previous.get(key), current.get(key)
        delta = None if before is None or after is None else round(after - before, 6)
        out[key] = {"before": before, "after": after, "delta": delta}
    return out
