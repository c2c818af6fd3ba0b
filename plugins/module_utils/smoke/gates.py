# -*- coding: utf-8 -*-
"""Fail-policy criteria of the full smoke profile. No I/O. Every violation starts with its gate's name
(``correctness:``, ``api:``, ``pd:``, ``tool_verifier:``) so a fault can be traced to the one gate it breaks.

Policy keys (role variables ``smoke_<key>``, docs/smoke.md):

- ``min_accuracy`` (0..1, default 1.0): every target's share of correct answers; a missed needle fails too;
- ``min_agreement`` (0..1, default 1.0): every backend's agreement with the endpoint's answers;
- ``fail_on_api_behaviour`` (bool, default true): every check of the ``api`` group;
- ``fail_on_pd`` (bool, default true): the prefill/decode verdict (recompute, KV transfer failures);
- ``min_schema_accuracy`` (the role passes the recipe's ``smoke_pass_marks.schema_accuracy``; 1.0, the official
  API's score in K2-Vendor-Verifier, when none is given), judged by the interval rule of
  ``smoke_verifier.interval_gate`` (fails when the upper bound of the 95 % Wilson interval is below the mark), and
  ``min_tool_call_f1`` (default 0.73, its K2-thinking pass mark; a harmonic mean, no binomial rate, so compared as
  it is), over the ``tool_verifier`` group's first attempts;
- ``max_tool_call_failure_rate`` (0..1, off when absent or negative): no failure class above it;
- ``max_regression`` (off when absent or negative): no verifier figure below the previous run's by more than this.

Criteria whose group did not run (or whose judgement is off, ``judge_accuracy: false``) are not applied.
"""
from __future__ import annotations

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import verifier as smoke_verifier

DEFAULTS = {"min_accuracy": 1.0, "min_agreement": 1.0, "fail_on_api_behaviour": True, "fail_on_pd": True,
            "min_schema_accuracy": smoke_verifier.SCHEMA_ACCURACY_PASS_MARK,
            "min_tool_call_f1": smoke_verifier.F1_PASS_MARK}


def _get(policy, key):
    value = policy.get(key)
    return DEFAULTS.get(key) if value is None else value


def _group(facts, name, key):
    return ((facts.get("groups") or {}).get(name) or {}).get(key)


def _correctness(facts, policy):
    c = _group(facts, "correctness", "correctness")
    if not c or not c.get("judged"):
        return []
    out, min_acc, min_agr = [], float(_get(policy, "min_accuracy")), float(_get(policy, "min_agreement"))
    for target, t in sorted(c["targets"].items()):
        acc = t["accuracy"]
        if acc["rate"] is None or acc["rate"] < min_acc:
            out.append("correctness: %s answered %s/%s checkable prompts right (%s < %s; wrong: %s)"
                       % (target, acc["k"], acc["n"], acc["rate"], min_acc, ", ".join(t["wrong"][:5])))
        if not t["needle"]["ok"]:
            out.append("correctness: %s: %s" % (target, t["needle"]["error"]))
        agr = t.get("agreement")
        if agr is not None and (agr["rate"] is None or agr["rate"] < min_agr):
            out.append("correctness: %s agreed with the endpoint on %s/%s answers (%s < %s)"
                       % (target, agr["k"], agr["n"], agr["rate"], min_agr))
    return out


def _api(facts, policy):
    a = _group(facts, "api", "api")
    if not a or not _get(policy, "fail_on_api_behaviour"):
        return []
    return ["api: %s" % e for e in a["errors"]]


def _pd(facts, policy):
    pd = facts.get("pd")
    if not pd or not _get(policy, "fail_on_pd"):
        return []
    return ["pd: %s" % e for e in pd["errors"]]


def _below(name, value, limit):
    if value is None or value < limit:
        return ["tool_verifier: %s %s below %s" % (name, value, limit)]
    return []


def _schema_accuracy(t, mark):
    """schema_accuracy under the interval rule (smoke_verifier.interval_gate): valid calls of the responses that
    ended in tool calls, failing only when the Wilson upper bound is below the pass mark."""
    k2vv = t.get("k2vv") or {}
    gate = smoke_verifier.interval_gate(k2vv.get("successful_tool_call_count") or 0,
                                        k2vv.get("finish_tool_calls") or 0, mark)
    if gate["passed"]:
        return []
    return ["tool_verifier: schema_accuracy %s (%s/%s, 95 %% Wilson interval %s..%s) below %s"
            % (t.get("schema_accuracy"), gate["k"], gate["n"], gate["ci95"][0], gate["ci95"][1], mark)]


def _tool_verifier(facts, policy):
    t = _group(facts, "tool_verifier", "tool_verifier")
    if not t:
        return []
    out = _schema_accuracy(t, float(_get(policy, "min_schema_accuracy")))
    out += _below("tool_call_f1", t["tool_call_f1"], float(_get(policy, "min_tool_call_f1")))
    max_rate = policy.get("max_tool_call_failure_rate")
    if max_rate is not None and float(max_rate) >= 0:
        for cls, r in sorted(t["failure_rates"].items()):
            if r["rate"] is not None and r["rate"] > float(max_rate):
                out.append("tool_verifier: %s in %s/%s attempts (%s, 95 %% CI %s..%s) above %s"
                           % (cls, r["k"], r["n"], r["rate"], r["ci95"][0], r["ci95"][1], max_rate))
    max_reg = policy.get("max_regression")
    if max_reg is not None and float(max_reg) >= 0:
        for key, cmp in sorted((t.get("comparison") or {}).items()):
            if cmp["delta"] is not None and cmp["delta"] < -float(max_reg):
                out.append("tool_verifier: %s fell from %s to %s (more than %s)"
                           % (key, cmp["before"], cmp["after"], max_reg))
    return out


CHECKS = (_correctness, _api, _pd, _tool_verifier)
