# -*- coding: utf-8 -*-
"""The ``tool_verifier`` smoke group: every case of ``smoke_toolcases`` streaming and non-streaming, retried at
application level, judged per attempt, and the figures of ``smoke_verifier``.

Per attempt the classes are those of ``tool_validation.classify_turn`` (for cases that expect a call) plus
``bad_id`` (an id that is not ``functions.<name>:<n>``), ``wrong_tool`` (not the expected tool(s)) and
``unexpected_call`` (a call where the case expects a direct answer). K2-Vendor-Verifier's ``schema_accuracy`` and
``tool_call_f1`` are computed over first attempts only: the verifier tallies a response, it never re-samples a bad
one (it retries transport errors only).
"""
from __future__ import annotations

import time

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import client as sc
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import toolcases as cases_mod
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import verifier as ver
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import tool_validation as tv

BAD_ID, WRONG_TOOL, UNEXPECTED = "bad_id", "wrong_tool", "unexpected_call"
CLASSES = tv.FAILURE_CLASSES + (BAD_ID, WRONG_TOOL, UNEXPECTED, "error")


def judge_attempt(case, res, mode):
    """One response of one case -> ``{"status", "classes", "finish_reason", "k2vv_valid", "error"}``."""
    if not res["ok"]:
        return {"status": "error", "classes": ["error"], "finish_reason": None, "k2vv_valid": None,
                "error": res["error"], "http_ok": False}
    # K2VV's stream handler reads a missing finish_reason as "stop"
    finish = res.get("finish_reason") or ("stop" if mode == "stream" else None)
    calls = [c for c in res["tool_calls"] if c.get("name") or (c.get("arguments") or "").strip()]
    classes, errors = [], []
    if case["expect_call"]:
        turn = tv.classify_turn(tv.ToolSet(case["tools"]), res["content"], res["reasoning"], calls)
        classes += turn["classes"]
        errors += [turn["error"]] if turn["error"] else []
        if calls and [c["name"] for c in calls] != case["expected_tools"]:
            classes.append(WRONG_TOOL)
            errors.append("called %s, expected %s" % ([c["name"] for c in calls], case["expected_tools"]))
    elif calls or finish == ver.TOOL_CALLS:
        classes.append(UNEXPECTED)
        errors.append("a tool call where a direct answer was expected: %s" % [c["name"] for c in calls])
    id_errors = cases_mod.id_format_errors(calls, case["messages"])
    if id_errors:
        classes.append(BAD_ID)
        errors += id_errors
    return {"status": classes[0] if classes else "ok", "classes": classes, "finish_reason": finish,
            # the verifier judges the calls as they came, empty entries included
            "k2vv_valid": ver.k2vv_tool_calls_valid(finish, res["tool_calls"], case["tools"]),
            "error": "; ".join(errors),
            "http_ok": True}


def _factory(ctx, case, mode):
    body = dict(ctx["body"], tools=case["tools"], tool_choice=ctx["tool_choice"])

    async def attempt():
        fn = sc.stream_chat if mode == "stream" else sc.plain_chat
        return judge_attempt(case, await fn(ctx["client"], ctx["model"], case["messages"], **body), mode)

    async def run_case():
        out = await tv.run_with_retries_async(attempt, ctx["tool_call_retries"])
        out.update(id=case["id"], kind=case["kind"], mode=mode, expect_call=case["expect_call"])
        return out

    return run_case


def figures(cases):
    """The verifier figures of the case results (``run_with_retries_async`` outputs with id/mode/expect_call)."""
    first = [c["results"][0] for c in cases if c["results"]]
    k2vv = ver.k2vv_summary([{"status": "success" if r["http_ok"] else "failed", "finish_reason": r["finish_reason"],
                              "tool_calls_valid": r["k2vv_valid"]} for r in first])
    trigger = ver.trigger_counts([(c["expect_call"], c["results"][0]["finish_reason"]) for c in cases
                                  if c["results"]])
    f1 = ver.tool_call_f1(trigger)
    retry = ver.retry_rates(cases)
    attempts = [r["classes"] for c in cases for r in c["results"]]
    return {"cases": len(cases), "attempts": len(attempts), "k2vv": k2vv,
            "schema_accuracy": k2vv["schema_accuracy"], "trigger": trigger, "tool_call_precision": f1["precision"],
            "tool_call_recall": f1["recall"], "tool_call_f1": f1["f1"],
            "first_attempt_success": retry["first_attempt"]["rate"], "after_retry_success": retry["after_retry"]["rate"],
            "retry_rates": retry, "failure_rates": ver.class_failure_rates(attempts, CLASSES)}


async def run(ctx):
    factories = [_factory(ctx, case, mode) for case in cases_mod.build_cases() for mode in ("stream", "non_stream")]
    t0 = time.perf_counter()
    cases = await sc.gather_limited(factories, ctx["tool_verifier_concurrency"])
    wall = round(time.perf_counter() - t0, 3)
    out = figures(cases)
    out["by_mode"] = {m: {k: v for k, v in figures([c for c in cases if c["mode"] == m]).items()
                          if k in ("cases", "schema_accuracy", "tool_call_f1", "first_attempt_success",
                                   "after_retry_success")} for m in ("stream", "non_stream")}
    out["comparison"] = ver.compare_with_previous(out, ctx["previous_tool_figures"])
    out["failed_cases"] = [{"id": c["id"], "mode": c["mode"], "classes": c["results"][-1]["classes"],
                            "error": (c["results"][-1]["error"] or "")[:200]}
                           for c in cases if c["status"] != "ok"][:20]
    errored = sum(1 for c in cases for r in c["results"] if not r["http_ok"])
    return {"status": "failed" if errored else "ok", "wall_s": wall, "requests": out["attempts"],
            "failed_requests": errored, "retries": {}, "error": "%d request(s) failed" % errored if errored else None,
            "tool_verifier": out}
