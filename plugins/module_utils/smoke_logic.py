# -*- coding: utf-8 -*-
"""Pure helpers of the smoke and capacity modules: statistics, Prometheus parsing, log parsing, OCR check,
GPU memory summary, fail policy and Markdown report. No network I/O here.
"""
from __future__ import annotations

import math
import re

try:
    from prometheus_client.parser import text_string_to_metric_families

    HAS_PROMETHEUS = True
except ImportError:  # pragma: no cover
    HAS_PROMETHEUS = False

# ---------------------------------------------------------------------------------------------------- statistics


def percentile(values, pct):
    """Linear-interpolated percentile (same as ``numpy.percentile`` default); None for no values."""
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    if len(vals) == 1:
        return vals[0]
    rank = (len(vals) - 1) * (pct / 100.0)
    lo = int(math.floor(rank))
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (rank - lo)


def stats(values, digits=6):
    """``{"n", "mean", "p50", "p90", "p99", "min", "max"}`` of ``values`` (None when empty)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return {"n": 0, "mean": None, "p50": None, "p90": None, "p99": None, "min": None, "max": None}

    def r(x):
        return None if x is None else round(x, digits)

    return {"n": len(vals), "mean": r(sum(vals) / len(vals)), "p50": r(percentile(vals, 50)),
            "p90": r(percentile(vals, 90)), "p99": r(percentile(vals, 99)), "min": r(min(vals)), "max": r(max(vals))}


# ---------------------------------------------------------------------------------------------------- /metrics

_COUNTERS = ("vllm:num_preemptions", "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success",
             "vllm:prefix_cache_queries", "vllm:prefix_cache_hits")
_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
           "vllm:gpu_cache_usage_perc")
_HISTOGRAMS = ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
               "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds")


def _num(text):
    """'1,234,567' / '1.18' / '' -> int/float/None."""
    if text is None:
        return None
    s = str(text).replace(",", "").strip()
    if not s or s.lower() in ("none", "null", "nan"):
        return None
    try:
        f = float(s)
    except ValueError:
        return None
    return int(f) if f.is_integer() and "." not in s and "e" not in s.lower() else f


def parse_metrics(text, source=None):
    """Parse one ``/metrics`` body into a per-engine snapshot.

    Returns ``{"engines": {engine: {...}}, "source": source}``; each engine dict has ``counters`` (name without
    ``_total`` -> value, summed over other labels), ``gauges``, ``histograms`` (name -> {"sum", "count"}) and
    ``cache_config`` (the ``vllm:cache_config_info`` labels, numbers converted). Series without an ``engine`` label
    go to engine ``"0"``. Both ``vllm:num_preemptions`` and ``vllm:num_preemptions_total`` are understood.
    """
    engines = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            name = s.name
            eng = engines.setdefault(str(s.labels.get("engine", "0")),
                                     {"counters": {}, "gauges": {}, "histograms": {}, "cache_config": {}})
            base = name[:-6] if name.endswith("_total") else name
            if base == "vllm:cache_config_info":
                eng["cache_config"] = {k: (_num(v) if _num(v) is not None else v)
                                       for k, v in s.labels.items() if k not in ("engine", "model_name")}
            elif base in _COUNTERS:
                eng["counters"][base] = eng["counters"].get(base, 0.0) + s.value
            elif name in _GAUGES:
                eng["gauges"][name] = eng["gauges"].get(name, 0.0) + s.value
            else:
                for h in _HISTOGRAMS:
                    if name in (h + "_sum", h + "_count"):
                        slot = eng["histograms"].setdefault(h, {"sum": 0.0, "count": 0.0})
                        slot[name[len(h) + 1:]] += s.value
    return {"engines": engines, "source": source}


def merge_snapshots(snapshots):
    """Merge snapshots of several nodes. The same engine index seen twice (a URL listed twice) counts once."""
    engines = {}
    for snap in snapshots:
        for key, eng in snap.get("engines", {}).items():
            engines.setdefault(key, eng)
    return {"engines": engines, "sources": [s.get("source") for s in snapshots]}


def summarise_snapshot(snap):
    """Cluster-wide view of a (merged) snapshot: sums over engines, max of KV usage, KV capacity totals."""
    engines = snap.get("engines", {})
    out = {"engines": len(engines), "num_requests_running": 0.0, "num_requests_waiting": 0.0,
           "kv_cache_usage_perc_max": None, "num_preemptions": 0.0, "prompt_tokens": 0.0, "generation_tokens": 0.0,
           "kv_cache_size_tokens": None, "kv_cache_max_concurrency": None, "num_gpu_blocks": None,
           "block_size": None, "cache_config": {}}
    for key in sorted(engines):
        eng = engines[key]
        g = eng["gauges"]
        out["num_requests_running"] += g.get("vllm:num_requests_running", 0.0)
        out["num_requests_waiting"] += g.get("vllm:num_requests_waiting", 0.0)
        usage = g.get("vllm:kv_cache_usage_perc", g.get("vllm:gpu_cache_usage_perc"))
        if usage is not None:
            out["kv_cache_usage_perc_max"] = max(usage, out["kv_cache_usage_perc_max"] or 0.0)
        for c in ("num_preemptions", "prompt_tokens", "generation_tokens"):
            out[c] += eng["counters"].get("vllm:" + c, 0.0)
        cc = eng["cache_config"]
        if cc:
            out["cache_config"][key] = cc
            for f in ("kv_cache_size_tokens", "kv_cache_max_concurrency", "num_gpu_blocks"):
                if isinstance(cc.get(f), (int, float)):
                    out[f] = (out[f] or 0) + cc[f]
            if isinstance(cc.get("block_size"), (int, float)):
                out["block_size"] = cc["block_size"]
    if isinstance(out["kv_cache_max_concurrency"], float):
        out["kv_cache_max_concurrency"] = round(out["kv_cache_max_concurrency"], 4)
    return out


def snapshot_delta(before, after):
    """Counter and histogram differences between two merged snapshots (per cluster, summed over engines)."""
    def tot(snap, kind, name, field=None):
        total = 0.0
        for eng in snap.get("engines", {}).values():
            v = eng[kind].get(name)
            if v is None:
                continue
            total += v[field] if field else v
        return total

    out = {}
    for c in _COUNTERS:
        out[c.split(":", 1)[1]] = tot(after, "counters", c) - tot(before, "counters", c)
    for h in _HISTOGRAMS:
        ds = tot(after, "histograms", h, "sum") - tot(before, "histograms", h, "sum")
        dc = tot(after, "histograms", h, "count") - tot(before, "histograms", h, "count")
        out[h.split(":", 1)[1] + "_mean"] = round(ds / dc, 6) if dc > 0 else None
    return out


# ---------------------------------------------------------------------------------------------------- logs

KV_SIZE_RE = re.compile(r"(?:GPU|DEVICE) KV cache size:\s*([\d,]+)\s*tokens")
KV_CONC_RE = re.compile(r"Maximum concurrency for\s*([\d,]+)\s*tokens per request:\s*([\d.]+)x")
SEVERITY_RE = re.compile(r"\b(WARN(?:ING)?|ERROR|CRITICAL|FATAL)\b|Traceback \(most recent call last\)")
SIGNATURES = (
    (re.compile(r"Error extracting K3 tool calls"), "k3_tool_parser_error"),
    (re.compile(r"Token buffer exceeded"), "k2_tool_parser_buffer"),
    (re.compile(r"EngineDeadError|EngineCore .*died|Engine core .*failed", re.I), "engine_dead"),
    (re.compile(r"out of memory|OutOfMemoryError|HIP out of memory", re.I), "out_of_memory"),
    (re.compile(r"preempt", re.I), "preemption"),
    (re.compile(r"NCCL (?:WARN|error)|ncclInternalError|ncclSystemError"), "nccl"),
    (re.compile(r"Traceback \(most recent call last\)"), "traceback"),
)


def parse_kv_log(text):
    """KV-cache figures from vLLM start-up logs (last occurrence wins; one-line and two-line forms)."""
    size = conc = conc_len = None
    for m in KV_SIZE_RE.finditer(text or ""):
        size = _num(m.group(1))
    for m in KV_CONC_RE.finditer(text or ""):
        conc_len, conc = _num(m.group(1)), float(m.group(2))
    return {"kv_cache_size_tokens": size, "max_concurrency": conc, "max_concurrency_for_tokens": conc_len}


def _lines(text_or_lines):
    if text_or_lines is None:
        return []
    if isinstance(text_or_lines, (list, tuple)):
        return [str(x) for x in text_or_lines]
    return str(text_or_lines).splitlines()


def log_findings(logs_by_host, max_lines=50):
    """Warning/error lines per host with known signatures tagged.

    ``logs_by_host``: ``{host: text or [lines]}``. Returns ``{host: {"warnings", "errors", "signatures": {tag: n},
    "lines": [...first max_lines matching lines]}}``.
    """
    out = {}
    for host in sorted(logs_by_host or {}):
        res = {"warnings": 0, "errors": 0, "signatures": {}, "lines": []}
        for line in _lines(logs_by_host[host]):
            m = SEVERITY_RE.search(line)
            tags = [tag for rx, tag in SIGNATURES if rx.search(line)]
            if not m and not tags:
                continue
            level = (m.group(1) or "ERROR") if m else "ERROR"
            if level.startswith("WARN"):
                res["warnings"] += 1
            else:
                res["errors"] += 1
            for tag in tags:
                res["signatures"][tag] = res["signatures"].get(tag, 0) + 1
            if len(res["lines"]) < max_lines:
                res["lines"].append(line[:500])
        out[host] = res
    return out


# ---------------------------------------------------------------------------------------------------- vision

def normalise_text(text):
    """Upper-case and drop everything except letters, digits and '.' (so '4471 - K3' matches '4471-K3')."""
    return re.sub(r"[^0-9A-Z.]", "", (text or "").upper())


def ocr_check(answer, required_tokens):
    """``{"ok", "missing", "found"}``: which required tokens occur in the normalised answer."""
    norm = normalise_text(answer)
    missing = [t for t in required_tokens if normalise_text(t) not in norm]
    return {"ok": not missing and bool(required_tokens), "missing": missing,
            "found": [t for t in required_tokens if t not in missing]}


# ---------------------------------------------------------------------------------------------------- GPU memory

_USED_KEYS = ("memory_used_mib", "memory_used_mb", "memory.used", "mem_used_mib", "vram_used_mb", "memory_used")
_TOTAL_KEYS = ("memory_total_mib", "memory_total_mb", "memory.total", "mem_total_mib", "vram_total_mb",
               "memory_total")


def _first(d, keys):
    for k in keys:
        if isinstance(d, dict) and d.get(k) is not None:
            return _num(d[k])
    return None


def gpu_memory_summary(node_probes):
    """``{host: {"gpus": n, "used_mib", "total_mib", "used_frac", "per_gpu": [...]}}`` from node_probe facts.

    Tolerant of the probe layout: looks for a list under ``gpus`` (or ``gpu.devices``) whose items carry memory
    used/total in MiB under one of several common key names.
    """
    out = {}
    for host in sorted(node_probes or {}):
        probe = node_probes[host] or {}
        if isinstance(probe, dict) and "node_probe" in probe:
            probe = probe["node_probe"]
        gpus = probe.get("gpus") if isinstance(probe, dict) else None
        if gpus is None and isinstance(probe, dict) and isinstance(probe.get("gpu"), dict):
            gpus = probe["gpu"].get("devices")
        per = []
        for g in gpus or []:
            per.append({"index": g.get("index") if isinstance(g, dict) else None,
                        "used_mib": _first(g, _USED_KEYS), "total_mib": _first(g, _TOTAL_KEYS)})
        used_vals = [p["used_mib"] for p in per if p["used_mib"] is not None]
        used = sum(used_vals) if used_vals else None  # the probe may report totals only
        total = sum(p["total_mib"] for p in per if p["total_mib"] is not None)
        out[host] = {"gpus": len(per), "used_mib": used, "total_mib": total,
                     "used_frac": round(used / total, 4) if total and used is not None else None, "per_gpu": per}
    return out


# ---------------------------------------------------------------------------------------------------- policy/report

def evaluate_policy(facts, policy):
    """Violations of the fail policy (list of strings; empty = pass).

    policy keys: ``fail_on_group_failure`` (bool), ``min_tool_call_success_rate`` (0..1, compared with the
    tool_calling group's ``attempt_success_rate``), ``max_ttft_s`` (0 = off; mean TTFT of any group),
    ``fail_on_log_errors`` (bool), ``fail_on_preemptions`` (bool).
    """
    policy = policy or {}
    out = []
    groups = facts.get("groups", {})
    if policy.get("fail_on_group_failure", True):
        for name in sorted(groups):
            if groups[name].get("status") != "ok":
                out.append("group %s failed: %s" % (name, (groups[name].get("error") or "")[:300]))
    tc = groups.get("tool_calling")
    min_rate = policy.get("min_tool_call_success_rate")
    if tc and min_rate is not None and tc.get("tool_calls"):
        rate = tc["tool_calls"].get("attempt_success_rate")
        if rate is None or rate < float(min_rate):
            out.append("tool-call success rate %s below %s" % (rate, min_rate))
    max_ttft = float(policy.get("max_ttft_s") or 0)
    if max_ttft > 0:
        for name in sorted(groups):
            ttft = (groups[name].get("ttft_s") or {}).get("mean")
            if ttft is not None and ttft > max_ttft:
                out.append("group %s mean TTFT %.3fs above %.3fs" % (name, ttft, max_ttft))
    if policy.get("fail_on_log_errors"):
        for host, f in sorted((facts.get("log_findings") or {}).items()):
            if f.get("errors"):
                out.append("%d error line(s) in the container log of %s" % (f["errors"], host))
    if policy.get("fail_on_preemptions"):
        pre = (facts.get("server") or {}).get("window", {}).get("num_preemptions")
        if pre:
            out.append("%d preemption(s) during the smoke window" % pre)
    return out


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


SUMMARY_HEADER = ["group", "status", "ttft mean s", "ttft p99 s", "itl p50 s", "itl p99 s", "tok/s", "out tok",
                  "retries", "error"]


def markdown_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _col in header) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in r) + " |")
    return "\n".join(lines)


def text_table(header, rows):
    cols = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cols) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cols)


def render_markdown(facts, violations=None):
    s = facts.get("server") or {}
    lines = ["# Kimi-K3 smoke report", "",
             "- endpoint: `%s`, model: `%s`, vLLM %s" % (facts.get("base_url"), facts.get("model"), s.get("version")),
             "- max_model_len: %s; KV cache: %s tokens, max concurrency %s (at max_model_len)" % (
                 s.get("max_model_len"), s.get("kv_cache_size_tokens"), s.get("kv_cache_max_concurrency")),
             "- started: %s, duration %s s" % (facts.get("started_at"), facts.get("duration_s")),
             "- timing definitions: TTFT = request sent -> first chunk with content or reasoning text; "
             "ITL = gaps between token-carrying chunks (per SSE chunk, vLLM style); tokens/s = usage "
             "completion_tokens / end-to-end time", "",
             "## Groups", "", markdown_table(SUMMARY_HEADER, summary_rows(facts)), ""]
    tc = (facts.get("groups", {}).get("tool_calling") or {}).get("tool_calls")
    if tc:
        lines += ["## Tool calls", "",
                  "- cases %s, attempts %s, attempt success rate %s, first-attempt %s, final %s" % (
                      tc.get("cases"), tc.get("attempts"), tc.get("attempt_success_rate"),
                      tc.get("first_attempt_success_rate"), tc.get("final_success_rate")),
                  "- failures per class: %s" % (tc.get("failures") or {}),
                  "- retries per class: %s" % (tc.get("retries") or {}), ""]
    win = s.get("window") or {}
    if win:
        lines += ["## Server during the smoke window", "",
                  markdown_table(["metric", "value"], [[k, _fmt(v, 4)] for k, v in sorted(win.items())]), ""]
    gm = facts.get("gpu_memory") or {}
    if gm:
        lines += ["## GPU memory", "", markdown_table(
            ["host", "gpus", "used MiB", "total MiB", "used"],
            [[h, v["gpus"], v["used_mib"], v["total_mib"], _fmt(v["used_frac"], 3)] for h, v in sorted(gm.items())]),
            ""]
    lf = facts.get("log_findings") or {}
    if lf:
        lines += ["## Container logs (warnings/errors)", ""]
        for host, f in sorted(lf.items()):
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
