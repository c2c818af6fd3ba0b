# -*- coding: utf-8 -*-
"""The smoke report: summary rows, plain-text and Markdown tables, the Markdown report. No I/O."""
from __future__ import annotations

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.common.tables import markdown_table
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import capacity_check
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import report_sections as smoke_report_sections


def _fmt(v, digits=3):
    if v is None:
        return "-"
    if isinstance(v, float):
        return ("%%.%df" % digits) % v
    return str(v)


def summary_rows(facts):
    """Rows of the summary table: group, status, TTFT mean/p99, ITL p50/p99, tokens/s, output tokens, retries."""
    rows = []
    for name in sorted(facts.get("groups", {})):
        g = facts["groups"][name]
        rows.append([name, g.get("status"), _fmt((g.get("ttft_s") or {}).get("mean")),
                     _fmt((g.get("ttft_s") or {}).get("p99")), _fmt((g.get("itl_s") or {}).get("p50"), 4),
                     _fmt((g.get("itl_s") or {}).get("p99"), 4), _fmt(g.get("tokens_per_s"), 1),
                     _fmt(g.get("output_tokens")), sum((g.get("retries") or {}).values()) or 0,
                     (g.get("error") or "")[:80]])
    return rows


# The serve flags that decide how tool calls and reasoning reach the client: the report names them beside the
# figures, so a tool-call rate is read against the parser that produced it.
PARSER_FLAGS = ("--tool-call-parser", "--reasoning-parser", "--tool-strict-level")


def served_parsers(vllm_args):
    """``{flag without dashes and with underscores: value}`` of :data:`PARSER_FLAGS` in a ``vllm serve`` argv (the
    ``--flag value`` and ``--flag=value`` forms; the last occurrence wins, as in argparse)."""
    out = {}
    args = list(vllm_args or [])
    for i, arg in enumerate(args):
        flag, eq, value = str(arg).partition("=")
        if flag not in PARSER_FLAGS:
            continue
        if not eq:
            if i + 1 >= len(args):
                continue
            value = str(args[i + 1])
        out[flag.lstrip("-").replace("-", "_")] = value
    return out


def _mode_line(tc):
    parts = []
    for mode, m in sorted((tc.get("by_mode") or {}).items()):
        if m.get("cases"):
            parts.append("%s %s/%s cases valid (attempts %s, first-attempt %s)" % (
                mode, m.get("final_ok"), m.get("cases"), m.get("attempts"), m.get("first_attempt_success_rate")))
    return "- by stream mode: %s" % ("; ".join(parts) or "no case sent")


def _parser_line(rep):
    if not any(rep.get(k) for k in ("tool_call_parser", "reasoning_parser")):
        return []
    return ["- server parsers: tool `%s`%s, reasoning `%s`" % (
        rep.get("tool_call_parser") or "none",
        " (strict level %s)" % rep["tool_strict_level"] if rep.get("tool_strict_level") else "",
        rep.get("reasoning_parser") or "none")]


SUMMARY_HEADER = ["group", "status", "ttft mean s", "ttft p99 s", "itl p50 s", "itl p99 s", "tok/s", "out tok",
                  "retries", "error"]


def _full_profile_sections(facts):
    return smoke_report_sections.render(facts)


def _memory_lines(gm):
    """The GPU memory table and, for nodes without GPUs, the engine container's host memory."""
    if not gm:
        return []
    lines = ["## GPU memory", "", markdown_table(
        ["host", "gpus", "used MiB", "total MiB", "used", "read", "note"],
        [[h, v["gpus"], v["used_mib"], v["total_mib"], _fmt(v["used_frac"], 3), v.get("read_at") or
          v.get("source") or "", "; ".join(v.get("errors") or [])] for h, v in sorted(gm.items())]), ""]
    engine = [(h, v["engine_memory"], v.get("read_at")) for h, v in sorted(gm.items()) if v.get("engine_memory")]
    if engine:
        lines += ["## Engine memory (nodes without GPUs: weights and KV cache in host memory)", "", markdown_table(
            ["host", "container", "used MiB", "limit MiB", "read"],
            [[h, e.get("container"), e.get("used_mib"), e.get("limit_mib"), at or ""] for h, e, at in engine]), ""]
    return lines


def render_markdown(facts, violations=None):
    s = facts.get("server") or {}
    lines = ["# Kimi-K3 smoke report", "",
             "- endpoint: `%s`, model: `%s`, vLLM %s" % (facts.get("base_url"), facts.get("model"), s.get("version")),
             "- max_model_len: %s; KV cache: %s tokens, max concurrency %s (at max_model_len)" % (
                 s.get("max_model_len"), s.get("kv_cache_size_tokens"), s.get("kv_cache_max_concurrency")),
             "- started: %s, duration %s s" % (facts.get("started_at"), facts.get("duration_s")),
             "- timing definitions: TTFT = request sent -> first chunk with content or reasoning text; "
             "ITL = gaps between token-carrying chunks (per SSE chunk, vLLM style); tokens/s = usage "
             "completion_tokens / end-to-end time"]
    if (facts.get("settings") or {}).get("judge_accuracy") is False:
        lines.append("- answers: NOT judged for accuracy - the plan marks this model's weights as not meaningful "
                     "(judge_accuracy: false, e.g. the rehearsal model's, which carry no knowledge); timing, KV, "
                     "metrics, protocol, parsers and tool-call schemas are")
    lines += ["", "## Groups", "", markdown_table(SUMMARY_HEADER, summary_rows(facts)), ""]
    tc = (facts.get("groups", {}).get("tool_calling") or {}).get("tool_calls")
    if tc:
        lines += ["## Tool calls", "",
                  "- cases %s, attempts %s, attempt success rate %s, first-attempt %s, final %s" % (
                      tc.get("cases"), tc.get("attempts"), tc.get("attempt_success_rate"),
                      tc.get("first_attempt_success_rate"), tc.get("final_success_rate")),
                  "- first attempts right %s/%s, 95 %% Wilson interval %s (the gate fails only when its upper bound "
                  "is below smoke_min_tool_call_success_rate)" % (
                      (tc.get("first_attempt") or {}).get("k"), (tc.get("first_attempt") or {}).get("n"),
                      "..".join(str(b) for b in (tc.get("first_attempt") or {}).get("ci95") or [])),
                  _mode_line(tc)]
        lines += _parser_line(facts.get("reproduction") or {})
        lines += ["- failures per class: %s" % (tc.get("failures") or {}),
                  "- retries per class: %s" % (tc.get("retries") or {}), ""]
    lines += _full_profile_sections(facts)
    win = s.get("window") or {}
    if win:
        lines += ["## Server during the smoke window", "",
                  markdown_table(["metric", "value"], [[k, _fmt(v, 4)] for k, v in sorted(win.items())]), ""]
    lines += capacity_check.markdown_lines(facts.get("kv_check"))
    lines += _memory_lines(facts.get("gpu_memory") or {})
    lf = facts.get("log_findings") or {}
    if lf:
        lines += ["## Container logs (warnings/errors)", ""]
        for host, f in sorted(lf.items()):
            if not f.get("readable", True):
                lines.append("- %s: NOT READ: %s" % (host, f.get("error")))
                continue
            lines.append("- %s: %d warning(s), %d error(s) %s" % (
                host, f["warnings"], f["errors"], f["signatures"] or ""))
        lines.append("")
    rep = facts.get("reproduction") or {}
    if rep:
        lines += ["## Reproduction", "", markdown_table(["key", "value"], [[k, v] for k, v in sorted(rep.items())]),
                  ""]
    if violations is not None:
        lines += ["## Policy", "", "PASS" if not violations else "FAIL"]
        lines += ["- " + v for v in violations]
        lines.append("")
    return "\n".join(lines)
