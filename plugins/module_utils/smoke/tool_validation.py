# -*- coding: utf-8 -*-
"""Tool-call validation for Kimi-K3 (and K2) on vLLM: pure functions, no I/O.

A *tool turn* is one chat completion answered with (hopefully) a tool call. :func:`classify_turn` decides whether it
is ``ok`` or which failure class it belongs to:

==========================  ===========================================================================================
class                        meaning
==========================  ===========================================================================================
``leaked_control_tokens``    K3 XTML markers (``<|open|>``, ``<|close|>``, ``<|sep|>``) or K2 markers
                             (``<|tool_call...|>``, ``<|tool_calls_section...|>``) appear in ``content`` or reasoning
                             (vllm#51399, #54273, smg#1983)
``no_call``                  no tool call came back (vllm#53246: empty ``tool_calls``)
``unknown_tool``             the call names a function that was not offered
``empty_arguments``          ``arguments`` is missing/blank, or ``{}`` although the schema requires properties
                             (vllm#54701: empty tool_calls deltas under load)
``invalid_json``             ``arguments`` is not valid JSON (or not a JSON object)
``schema_violation``         valid JSON that fails the tool's JSON Schema (Draft 2020-12, with format checking);
                             the K3 parser falls back to raw strings, so wrong *types* only show up here
==========================  ===========================================================================================

``finish_reason`` is deliberately ignored (it is unreliable for K2/K3, see the measurement reference §6.4).
The order of the table is the precedence when several problems occur in one turn; every class found is listed in
``classes`` and the first one becomes ``status``.
"""
from __future__ import annotations

import json

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import verifier as smoke_verifier

try:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match
except ImportError as exc:  # pragma: no cover - exercised only without jsonschema
    JSONSCHEMA_IMPORT_ERROR = exc
else:
    JSONSCHEMA_IMPORT_ERROR = None
HAS_JSONSCHEMA = JSONSCHEMA_IMPORT_ERROR is None

OK = "ok"
LEAKED = "leaked_control_tokens"
NO_CALL = "no_call"
UNKNOWN_TOOL = "unknown_tool"
EMPTY_ARGS = "empty_arguments"
INVALID_JSON = "invalid_json"
SCHEMA = "schema_violation"
FAILURE_CLASSES = (LEAKED, NO_CALL, UNKNOWN_TOOL, EMPTY_ARGS, INVALID_JSON, SCHEMA)

# K3 XTML structural tokens and K2 tool markers (prefix match covers _begin/_end variants).
LEAK_MARKERS = ("<|open|>", "<|close|>", "<|sep|>", "<|tool_calls_section", "<|tool_call")


def find_leaks(*texts):
    """Sorted list of control markers found in any of ``texts`` (None entries are ignored)."""
    found = set()
    for text in texts:
        if not text:
            continue
        for marker in LEAK_MARKERS:
            if marker in text:
                # "<|tool_call" is a prefix of "<|tool_calls_section"; report the longest marker only
                if marker == "<|tool_call" and text.replace("<|tool_calls_section", "").find(marker) < 0:
                    continue
                found.add(marker)
    return sorted(found)


class ToolSet(object):
    """The tools offered in a request, with one compiled Draft 2020-12 validator per tool.

    ``tools`` uses the OpenAI request shape: ``[{"type": "function", "function": {"name", "parameters", ...}}]``.
    Schemas are checked once (``check_schema``); an invalid schema raises ``jsonschema.SchemaError``.
    """

    def __init__(self, tools):
        if not HAS_JSONSCHEMA:
            raise ImportError("jsonschema is required: %s" % JSONSCHEMA_IMPORT_ERROR)
        self.tools = list(tools)
        self.validators = {}
        self.required = {}
        for tool in self.tools:
            fn = tool.get("function", tool)
            schema = fn.get("parameters") or {"type": "object"}
            Draft202012Validator.check_schema(schema)
            self.validators[fn["name"]] = Draft202012Validator(
                schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
            self.required[fn["name"]] = bool(schema.get("required"))

    @property
    def names(self):
        return sorted(self.validators)


def normalise_tool_calls(tool_calls):
    """Turn SDK objects or dicts (``message.tool_calls``) into ``[{"id", "name", "arguments"}]``."""
    out = []
    for call in tool_calls or []:
        if not isinstance(call, dict):
            call = call.model_dump() if hasattr(call, "model_dump") else dict(vars(call))
        fn = call.get("function") or {}
        if not isinstance(fn, dict):
            fn = fn.model_dump() if hasattr(fn, "model_dump") else dict(vars(fn))
        out.append({"id": call.get("id"), "name": fn.get("name"), "arguments": fn.get("arguments")})
    return out


def accumulate_stream_tool_calls(acc, delta_tool_calls):
    """Merge streamed ``delta.tool_calls`` fragments into ``acc`` (dict index -> call), in place; returns ``acc``.

    Names and ids are taken from the first fragment that carries them; argument fragments are concatenated.
    """
    for frag in normalise_stream_fragments(delta_tool_calls):
        idx = frag["index"]
        slot = acc.setdefault(idx, {"id": None, "name": None, "arguments": None})
        if frag.get("id") and not slot["id"]:
            slot["id"] = frag["id"]
        if frag.get("name") and frag["name"] != slot["name"]:
            # normally the whole name arrives in the first fragment; tolerate servers that split it
            slot["name"] = (slot["name"] or "") + frag["name"]
        if frag.get("arguments") is not None:
            slot["arguments"] = (slot["arguments"] or "") + frag["arguments"]
    return acc


def normalise_stream_fragments(delta_tool_calls):
    out = []
    for pos, frag in enumerate(delta_tool_calls or []):
        if not isinstance(frag, dict):
            frag = frag.model_dump() if hasattr(frag, "model_dump") else dict(vars(frag))
        fn = frag.get("function") or {}
        if not isinstance(fn, dict):
            fn = fn.model_dump() if hasattr(fn, "model_dump") else dict(vars(fn))
        idx = frag.get("index")
        out.append({"index": pos if idx is None else idx, "id": frag.get("id"), "name": fn.get("name"),
                    "arguments": fn.get("arguments")})
    return out


def stream_calls_list(acc):
    """The accumulated calls ordered by index."""
    return [acc[k] for k in sorted(acc)]


def check_call(toolset, call):
    """Validate one normalised call. Returns ``(class_or_ok, message, parsed_arguments)``."""
    name = call.get("name")
    if name not in toolset.validators:
        return UNKNOWN_TOOL, "tool %r was not offered (offered: %s)" % (name, ", ".join(toolset.names)), None
    raw = call.get("arguments")
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return EMPTY_ARGS, "tool %r called with empty arguments" % name, None
    if isinstance(raw, (dict, list)):
        args = raw
    else:
        try:
            args = json.loads(raw)
        except (TypeError, ValueError) as exc:
            return INVALID_JSON, "arguments of %r are not valid JSON: %s" % (name, exc), None
    if not isinstance(args, dict):
        return INVALID_JSON, "arguments of %r are JSON %s, not an object" % (name, type(args).__name__), args
    if not args and toolset.required.get(name):
        return EMPTY_ARGS, "tool %r called with {} although its schema requires properties" % name, args
    errors = list(toolset.validators[name].iter_errors(args))
    if errors:
        err = best_match(errors)
        path = "/".join(str(p) for p in err.absolute_path) or "(root)"
        return SCHEMA, "arguments of %r violate the schema at %s: %s (%d error(s))" % (
            name, path, err.message, len(errors)), args
    return OK, "", args


def classify_turn(toolset, content=None, reasoning=None, tool_calls=None, expected_tool=None):
    """Classify one tool turn.

    ``tool_calls``: normalised calls (see :func:`normalise_tool_calls` / :func:`stream_calls_list`).
    ``expected_tool``: when given, a turn that calls only other (offered) tools is still ``ok`` -- choosing a tool
    is the model's business -- but the fact is reported in ``expected_tool_called``.

    Returns ``{"status", "classes", "error", "calls": [{"name", "status", "error", "arguments"}],
    "leaks", "expected_tool_called"}``.
    """
    classes = []
    messages = []
    leaks = find_leaks(content, reasoning)
    if leaks:
        classes.append(LEAKED)
        messages.append("control tokens leaked into content/reasoning: %s" % " ".join(leaks))
    calls = list(tool_calls or [])
    # a K2-style empty delta may leave an entry with neither name nor arguments: that is no call, not a bad call
    calls = [c for c in calls if c.get("name") or (c.get("arguments") or "").strip()]
    checked = []
    if not calls:
        classes.append(NO_CALL)
        messages.append("no tool call in the response (content: %r)" % ((content or "")[:120],))
    for call in calls:
        cls, msg, args = check_call(toolset, call)
        checked.append({"name": call.get("name"), "status": cls, "error": msg, "arguments": args})
        if cls != OK:
            if cls not in classes:
                classes.append(cls)
            messages.append(msg)
    classes.sort(key=FAILURE_CLASSES.index)
    return {
        "status": classes[0] if classes else OK,
        "classes": classes,
        "error": "; ".join(messages),
        "calls": checked,
        "leaks": leaks,
        "expected_tool_called": None if expected_tool is None else any(
            c["name"] == expected_tool for c in checked),
    }


def _attempt_failed(exc):
    return {"status": "error", "classes": ["error"], "error": "%s: %s" % (type(exc).__name__, exc),
            "calls": [], "leaks": []}


def _retry_summary(results, retry_counts):
    failures = [r["status"] for r in results if r["status"] != OK]
    return {
        "status": results[-1]["status"],
        "attempts": len(results),
        "first_failure_class": failures[0] if failures else None,
        "retries": retry_counts,
        "results": results,
    }


async def run_with_retries_async(attempt, retries):
    """Await ``attempt()`` (a coroutine function returning a :func:`classify_turn` result, or raising) up to
    ``1 + retries`` times.

    Stops at the first ``ok``. Exceptions are recorded as class ``error`` (transport/HTTP problems), which is retried
    too. Returns ``{"status", "attempts", "first_failure_class", "retries": {class: n}, "results": [...]}`` where
    ``retries[cls]`` counts the retries *caused by* a failure of class ``cls``.
    """
    results, retry_counts = [], {}
    retries = max(0, int(retries))
    for n in range(1 + retries):
        try:
            res = await attempt()
        except Exception as exc:  # noqa: BLE001 - any client error is a failed attempt, never a crash
            res = _attempt_failed(exc)
        results.append(res)
        if res["status"] == OK:
            break
        if n < retries:
            retry_counts[res["status"]] = retry_counts.get(res["status"], 0) + 1
    return _retry_summary(results, retry_counts)


def summarise_cases(cases):
    """Aggregate :func:`run_with_retries_async` outputs: totals, success rates and failures/retries per class."""
    attempts = sum(c["attempts"] for c in cases)
    ok_attempts = sum(1 for c in cases for r in c["results"] if r["status"] == OK)
    first_ok = sum(1 for c in cases if c["results"] and c["results"][0]["status"] == OK)
    final_ok = sum(1 for c in cases if c["status"] == OK)
    failures = {}
    retries = {}
    for c in cases:
        for r in c["results"]:
            if r["status"] != OK:
                failures[r["status"]] = failures.get(r["status"], 0) + 1
        for k, v in c["retries"].items():
            retries[k] = retries.get(k, 0) + v
    return {
        "cases": len(cases),
        "attempts": attempts,
        "ok_attempts": ok_attempts,
        "final_ok": final_ok,
        "first_attempt_success_rate": round(first_ok / len(cases), 4) if cases else None,
        # what the policy gates (smoke_policy): first attempts, with their Wilson interval
        "first_attempt": smoke_verifier.rate_with_interval(first_ok, len(cases)),
        "attempt_success_rate": round(ok_attempts / attempts, 4) if attempts else None,
        "final_success_rate": round(final_ok / len(cases), 4) if cases else None,
        "failures": failures,
        "retries": retries,
    }
