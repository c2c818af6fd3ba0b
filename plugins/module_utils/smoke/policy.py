# -*- coding: utf-8 -*-
"""The smoke fail policy: which criteria a smoke result violates. No I/O.

Policy keys (role variables ``smoke_<key>``, docs/smoke.md):

- ``fail_on_group_failure`` (bool, default true): every group that ran must have ``status: ok``;
- ``min_tool_call_success_rate`` (0..1, off when absent): the tool_calling group's first-attempt success rate fails
  it only when the upper bound of its 95 % Wilson interval is below (``smoke_verifier.interval_gate``): the recipe
  expects an occasional malformed call that a retry recovers, so one hiccup in a few cases is no defect, while a
  defect rate shows over many cases. That every case ends valid within its retries is the group's own status;
- ``max_ttft_s`` (seconds, 0 = off): no group's mean TTFT may exceed it;
- ``fail_on_log_errors`` (bool): no error line in any node's container log of the smoke window; a log that could
  not be read (or no log at all) violates it too, because its errors could not be counted;
- ``fail_on_preemptions`` (bool): no preemption on the server during the smoke window;
- the full profile's gates (correctness, API behaviour, prefill/decode, tool-call verifier figures): ``smoke_gates``.
"""
from __future__ import annotations

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import gates as smoke_gates
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import verifier as smoke_verifier


def _group_failures(facts, policy):
    if not policy.get("fail_on_group_failure", True):
        return []
    groups = facts.get("groups") or {}
    return ["group %s failed: %s" % (name, (groups[name].get("error") or "")[:300])
            for name in sorted(groups) if groups[name].get("status") != "ok"]


def _tool_call_rate(facts, policy):
    min_rate = policy.get("min_tool_call_success_rate")
    tc = ((facts.get("groups") or {}).get("tool_calling") or {}).get("tool_calls")
    if min_rate is None or not tc:
        return []
    first = tc.get("first_attempt") or {}
    gate = smoke_verifier.interval_gate(first.get("k") or 0, first.get("n") or 0, float(min_rate))
    if gate["passed"]:
        return []
    return ["group tool_calling: first-attempt tool-call success %s/%s (%s, 95 %% Wilson interval %s..%s): even the "
            "upper bound is below %s" % (gate["k"], gate["n"], gate["rate"], gate["ci95"][0], gate["ci95"][1],
                                         min_rate)]


def _max_ttft(facts, policy):
    limit = float(policy.get("max_ttft_s") or 0)
    if limit <= 0:
        return []
    groups = facts.get("groups") or {}
    out = []
    for name in sorted(groups):
        ttft = (groups[name].get("ttft_s") or {}).get("mean")
        if ttft is not None and ttft > limit:
            out.append("group %s mean TTFT %.3fs above %.3fs" % (name, ttft, limit))
    return out


def _log_errors(facts, policy):
    if not policy.get("fail_on_log_errors"):
        return []
    findings = facts.get("log_findings") or {}
    if not findings:
        return ["no container log was read, so its error lines could not be counted (fail_on_log_errors)"]
    out = []
    for host, f in sorted(findings.items()):
        if not f.get("readable", True):
            out.append("the container log of %s could not be read: %s" % (host, f.get("error")))
        elif f.get("errors"):
            out.append("%d error line(s) in the container log of %s" % (f["errors"], host))
    return out


def _preemptions(facts, policy):
    if not policy.get("fail_on_preemptions"):
        return []
    pre = ((facts.get("server") or {}).get("window") or {}).get("num_preemptions")
    return ["%d preemption(s) during the smoke window" % pre] if pre else []


CHECKS = (_group_failures, _tool_call_rate, _max_ttft, _log_errors, _preemptions) + smoke_gates.CHECKS


def evaluate_policy(facts, policy):
    """Violations of the fail policy (list of strings; empty = pass), in the order of ``CHECKS``."""
    policy = policy or {}
    return [v for check in CHECKS for v in check(facts, policy)]
