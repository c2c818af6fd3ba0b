# -*- coding: utf-8 -*-
"""The smoke and capacity figures, computed from timestamped SSE events (``smoke_sse``). No I/O, no clock.

Definitions (``vllm bench serve`` is the reference, llm-serving-measurement.md §1):

- a *token event* is an SSE event whose first choice's delta carries content, reasoning text (``reasoning``,
  falling back to ``reasoning_content``) or tool-call fragments. The role-only first chunk, a finish-only chunk and
  the usage chunk are not token events.
- ``ttft_s`` = first token event - ``t0`` (``t0``: ``perf_counter()`` taken as the last step before the request is
  sent); ``ttft_content_s`` / ``ttft_reasoning_s`` the same for the first content / reasoning text.
- ``itl_s`` = gaps between successive token events (per SSE chunk, so a K3 tool call delivered in one delta is one
  gap).
- ``e2e_s`` = last token event - ``t0`` (a failed request: the time it failed).
- ``output_tokens`` / ``prompt_tokens`` from the usage chunk (reasoning tokens included).
- TPOT per request = ``(e2e_s - ttft_s) / (output_tokens - 1)``, defined for ``output_tokens > 1``.
- group throughput = sum of ``output_tokens`` / group wall time; request throughput = completed requests / wall.

A stream counts as completed (``ok``) when it had no error event, carried at least one token event and ended with
a ``finish_reason`` or ``[DONE]``; otherwise ``ok`` is false and ``error`` says why (a stream that stops without
either was cut).
"""
from __future__ import annotations

import json

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import sse as smoke_sse
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import stats as smoke_stats
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import tool_validation as tv


def stream_error_text(payload):
    """``{"error": ...}`` inside the stream -> message text."""
    err = payload.get("error")
    msg = err.get("message") if isinstance(err, dict) else err
    return msg if isinstance(msg, str) and msg else "An error occurred during streaming"


def _typed(value, types):
    return value is None or isinstance(value, types)


def chunk_shape_error(payload):
    """What is wrong with the shape of one chunk object (None when the fields the figures read have their types):
    ``choices`` a list of objects, ``delta`` and ``usage`` objects, text as strings, ``tool_calls`` a list."""
    choices = payload.get("choices")
    if not _typed(choices, list) or not all(isinstance(c, dict) for c in choices or []):
        return "choices is not a list of objects"
    if not _typed(payload.get("usage"), dict):
        return "usage is not an object"
    delta = choices[0].get("delta") if choices else None
    if not _typed(delta, dict):
        return "delta is not an object"
    for key in ("content", "reasoning", "reasoning_content"):
        if not _typed((delta or {}).get(key), str):
            return "delta.%s is not a string" % key
    if not _typed((delta or {}).get("tool_calls"), list):
        return "delta.tool_calls is not a list"
    return None


def new_result(stream):
    """The result shape shared by streaming and non-streaming requests."""
    return {"ok": False, "error": None, "stream": bool(stream), "ttft_s": None, "ttft_content_s": None,
            "ttft_reasoning_s": None, "e2e_s": None, "itl_s": [], "chunks": 0, "content": "", "reasoning": "",
            "tool_calls": [], "prompt_tokens": None, "output_tokens": None, "finish_reason": None,
            "client_queue_s": None, "done": False, "reasoning_keys": [], "model": None}


class StreamMeasure(object):
    """Takes one request's events in order (``event``) and gives its result (``result``)."""

    def __init__(self, t0):
        self.t0 = t0
        self.res = new_result(True)
        self.last = None
        self.content = []
        self.reasoning = []
        self.calls = {}
        self.error = None

    def event(self, now, payload):
        """One event; returns False once the stream is over (``[DONE]`` or an error)."""
        if payload == smoke_sse.DONE:
            self.res["done"] = True
            return False
        if isinstance(payload, smoke_sse.InvalidEvent):
            self.error = "stream error: event is not JSON: %s" % payload.text
            return False
        if not isinstance(payload, dict):
            return True
        if payload.get("error"):
            self.error = "stream error: %s" % stream_error_text(payload)[:400]
            return False
        bad = chunk_shape_error(payload)
        if bad:
            self.error = "stream error: malformed chunk (%s): %s" % (bad, json.dumps(payload)[:200])
            return False
        self.res["chunks"] += 1
        if payload.get("model") and self.res["model"] is None:
            self.res["model"] = payload["model"]  # the served name the response carries (judged by smoke_quick)
        usage = payload.get("usage")
        if usage:
            self.res["prompt_tokens"] = usage.get("prompt_tokens")
            self.res["output_tokens"] = usage.get("completion_tokens")
        choices = payload.get("choices")
        if choices:
            self._choice(now, choices[0])
        return True

    def _choice(self, now, choice):
        if choice.get("finish_reason"):
            self.res["finish_reason"] = choice["finish_reason"]
        delta = choice.get("delta") or {}
        c = delta.get("content") or ""
        r = delta.get("reasoning") or delta.get("reasoning_content") or ""
        for key in ("reasoning", "reasoning_content"):
            if delta.get(key) and key not in self.res["reasoning_keys"]:
                self.res["reasoning_keys"].append(key)
        tcs = delta.get("tool_calls") or []
        if not (c or r or tcs):
            return
        res = self.res
        if c:
            self.content.append(c)
            if res["ttft_content_s"] is None:
                res["ttft_content_s"] = now - self.t0
        if r:
            self.reasoning.append(r)
            if res["ttft_reasoning_s"] is None:
                res["ttft_reasoning_s"] = now - self.t0
        if tcs:
            tv.accumulate_stream_tool_calls(self.calls, tcs)
        if self.last is None:
            res["ttft_s"] = now - self.t0
        else:
            res["itl_s"].append(now - self.last)
        self.last = now

    def _verdict(self):
        res = self.res
        if self.error is not None:
            return self.error
        if self.last is None:
            return "no token in the stream (finish_reason=%s, completion_tokens=%s)" % (
                res["finish_reason"], res["output_tokens"])
        if not (res["done"] or res["finish_reason"]):
            return "stream cut: ended after %d token chunk(s) without finish_reason or [DONE]" % (
                len(res["itl_s"]) + 1)
        return None

    def result(self, end, error=None):
        """The request's result; ``end`` is when the body ended (or the request failed), ``error`` a transport or
        HTTP error text."""
        res = self.res
        res["content"] = "".join(self.content)
        res["reasoning"] = "".join(self.reasoning)
        res["tool_calls"] = tv.stream_calls_list(self.calls)
        res["error"] = error or self._verdict()
        res["ok"] = res["error"] is None
        res["e2e_s"] = (self.last if res["ok"] else end) - self.t0
        return res


def measure_stream(t0, events, end=None, error=None):
    """Result of one streaming request from its events ``[(now, payload), ...]`` (pure form of ``StreamMeasure``).

    ``end`` defaults to the last event's time (or ``t0``)."""
    m = StreamMeasure(t0)
    for now, payload in events:
        if not m.event(now, payload):
            break
    if end is None:
        end = events[-1][0] if events else t0
    return m.result(end, error)


def request_tpot(res):
    """``(e2e - ttft) / (output_tokens - 1)`` of one completed request; None unless ``output_tokens > 1``."""
    n = res.get("output_tokens")
    if res.get("ttft_s") is None or not n or n < 2:
        return None
    return (res["e2e_s"] - res["ttft_s"]) / (n - 1)


def aggregate(results, wall_s=None):
    """Group-level figures from request results: statistics of TTFT/ITL/TPOT/E2E, token totals, throughput.

    Only completed requests (``ok``) enter the figures; ``wall_s`` (the group's wall time) defaults to the longest
    E2E of them."""
    ok = [r for r in results if r["ok"]]
    itl = [g for r in ok for g in r["itl_s"]]
    wall = wall_s if wall_s is not None else max([r["e2e_s"] or 0 for r in ok] or [0])
    total_out = sum(r["output_tokens"] for r in ok if r.get("output_tokens") is not None)
    return {
        "requests": len(results),
        "failed_requests": len(results) - len(ok),
        "ttft_s": smoke_stats.stats([r.get("ttft_s") for r in ok]),
        "ttft_content_s": smoke_stats.stats([r.get("ttft_content_s") for r in ok]),
        "itl_s": smoke_stats.stats(itl),
        "tpot_s": smoke_stats.stats([request_tpot(r) for r in ok]),
        "e2e_s": smoke_stats.stats([r.get("e2e_s") for r in ok]),
        "client_queue_s": smoke_stats.stats([r.get("client_queue_s") for r in ok]),
        "output_tokens": total_out,
        "prompt_tokens": sum(r["prompt_tokens"] for r in ok if r.get("prompt_tokens") is not None),
        "tokens_per_s": round(total_out / wall, 3) if wall and total_out else None,
        "request_throughput_rps": round(len(ok) / wall, 4) if wall else None,
        "wall_s": round(wall, 6) if wall else None,
        "errors": sorted({r["error"] for r in results if r.get("error")})[:10],
    }
