# -*- coding: utf-8 -*-
"""Markdown sections of the full smoke profile: correctness, API behaviour, prefill/decode, tool-call verifier
metrics. No I/O; each function returns a list of lines (empty when its part did not run)."""
from __future__ import annotations

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.common import tables


def _rate(r):
    if not r or r.get("rate") is None:
        return "-"
    lo, hi = r["ci95"]
    return "%s/%s = %.4f (95 %% CI %.4f..%.4f)" % (r["k"], r["n"], r["rate"], lo, hi)


def _group(facts, name):
    return ((facts.get("groups") or {}).get(name) or {}).get(name)


def correctness_section(facts):
    c = _group(facts, "correctness")
    if not c:
        return []
    lines = ["## Correctness", "",
             "- %d checkable prompts, %d requests at once per target, temperature 0; judged by the normalised answer"
             % (c["prompts"], c["concurrency"])]
    if not c["judged"]:
        return lines + ["- " + c["note"], ""]
    rows = []
    for target, t in sorted(c["targets"].items(), key=lambda kv: (kv[0] != "endpoint", kv[0])):
        needle = t["needle"]
        rows.append([target, _rate(t["accuracy"]), _rate(t.get("agreement")) if "agreement" in t else "-",
                     "found" if needle.get("found") else "MISSED", needle.get("fraction"),
                     ", ".join(t["wrong"][:4]) or "-"])
    return lines + ["", tables.markdown_table(
        ["target", "accuracy", "agreement with endpoint", "needle", "needle prompt / context", "wrong"], rows), ""]


def api_section(facts):
    a = _group(facts, "api")
    if not a:
        return []
    rows = [[name, "ok" if v["ok"] else "FAIL", v.get("error") or ""] for name, v in sorted(a["checks"].items())]
    return ["## API behaviour", "", tables.markdown_table(["check", "result", "detail"], rows), ""]


def pd_section(facts):
    pd = facts.get("pd")
    if not pd:
        return []
    rows = [[url, v["recompute_fraction"], v["basis"], v["kv_transfer_failures"] or "-"]
            for url, v in sorted(pd["instances"].items())]
    lines = ["## Prefill/decode", "", tables.markdown_table(
        ["decode /metrics", "prefill recomputed (share of prompt tokens)", "from", "KV transfer failures"], rows)]
    return lines + ["- " + e for e in pd["errors"]] + [""]


def _comparison_rows(comparison):
    return [[k, v["before"], v["after"], v["delta"]] for k, v in sorted(comparison.items())]


def tool_verifier_section(facts):
    t = _group(facts, "tool_verifier")
    if not t:
        return []
    k = t["k2vv"]
    lines = ["## Tool-call verifier metrics", "",
             "- %d cases (streaming and non-streaming), %d attempts" % (t["cases"], t["attempts"]),
             "- schema_accuracy (K2-Vendor-Verifier): %s = %s valid / %s responses with finish_reason tool_calls"
             % (t["schema_accuracy"], k["successful_tool_call_count"], k["finish_tool_calls"]),
             "- tool_call_f1: %s (precision %s, recall %s; TP %s FP %s FN %s TN %s)" % (
                 t["tool_call_f1"], t["tool_call_precision"], t["tool_call_recall"], t["trigger"]["tp"],
                 t["trigger"]["fp"], t["trigger"]["fn"], t["trigger"]["tn"]),
             "- first attempt: %s; after retries: %s" % (_rate(t["retry_rates"]["first_attempt"]),
                                                         _rate(t["retry_rates"]["after_retry"])), ""]
    rows = [[cls, _rate(r)] for cls, r in sorted(t["failure_rates"].items()) if r["k"]]
    lines += [tables.markdown_table(["failure class", "rate over attempts"], rows or [["(none)", "-"]]), ""]
    if t.get("comparison"):
        lines += ["Compared with the previous run:", "",
                  tables.markdown_table(["figure", "before", "after", "delta"],
                                        _comparison_rows(t["comparison"])), ""]
    return lines


SECTIONS = (correctness_section, api_section, pd_section, tool_verifier_section)


def render(facts):
    return [line for section in SECTIONS for line in section(facts)]
