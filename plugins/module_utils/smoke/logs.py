# -*- coding: utf-8 -*-
"""vLLM container logs: KV-cache start-up figures, warning/error lines, known failure signatures. No I/O."""
from __future__ import annotations

import re

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import stats as smoke_stats

# "GPU KV cache size" on CUDA/ROCm, "CPU KV cache size" on vLLM's CPU build (vllm/v1/core/kv_cache_utils.py names
# the platform's device type), "DEVICE" in some releases' wording.
KV_SIZE_RE = re.compile(r"(?:GPU|CPU|XPU|DEVICE) KV cache size:\s*([\d,]+)\s*tokens")
KV_CONC_RE = re.compile(r"Maximum concurrency for\s*([\d,]+)\s*tokens per request:\s*([\d.]+)x")
# the KV budget vLLM's GPU worker found after profiling (v1/worker/gpu_worker.py), per GPU
AVAILABLE_KV_RE = re.compile(r"Available KV cache memory:\s*(\d+(?:\.\d+)?)\s*GiB")
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
    """KV-cache figures from vLLM start-up logs (last occurrence wins; one-line and two-line forms), and the KV
    memory per GPU the worker found (``available_kv_gib``)."""
    size = conc = conc_len = None
    for m in KV_SIZE_RE.finditer(text or ""):
        size = smoke_stats.parse_number(m.group(1))
    for m in KV_CONC_RE.finditer(text or ""):
        conc_len, conc = smoke_stats.parse_number(m.group(1)), float(m.group(2))
    available = [float(m.group(1)) for m in AVAILABLE_KV_RE.finditer(text or "")]
    return {"kv_cache_size_tokens": size, "max_concurrency": conc, "max_concurrency_for_tokens": conc_len,
            "available_kv_gib": available[-1] if available else None}


def _lines(text_or_lines):
    if text_or_lines is None:
        return []
    if isinstance(text_or_lines, (list, tuple)):
        return [str(x) for x in text_or_lines]
    return str(text_or_lines).splitlines()


def host_findings(text_or_lines, max_lines=50):
    """Warning/error lines of one log with known signatures tagged: ``{"readable": True, "warnings", "errors",
    "signatures": {tag: n}, "lines": [first max_lines matching lines]}``."""
    res = {"readable": True, "warnings": 0, "errors": 0, "signatures": {}, "lines": []}
    for line in _lines(text_or_lines):
        m = SEVERITY_RE.search(line)
        tags = [tag for rx, tag in SIGNATURES if rx.search(line)]
        if not m and not tags:
            continue
        level = m.group(1) if m else None  # None: a Traceback line or a tagged line without a level (an error)
        warning = level is not None and level.startswith("WARN")
        res["warnings" if warning else "errors"] += 1
        for tag in tags:
            res["signatures"][tag] = res["signatures"].get(tag, 0) + 1
        if len(res["lines"]) < max_lines:
            res["lines"].append(line[:500])
    return res


def log_findings(logs_by_host, unreadable=None, max_lines=50):
    """``{host: host_findings(...)}`` for ``logs_by_host`` (``{host: text or [lines]}``), plus
    ``{"readable": False, "error": why, "warnings": None, "errors": None, ...}`` for every host of ``unreadable``
    (``{host: why}``): a log that could not be read is reported as such, never as a clean log."""
    out = {host: host_findings(text, max_lines) for host, text in (logs_by_host or {}).items()}
    for host, why in (unreadable or {}).items():
        out[host] = {"readable": False, "error": why, "warnings": None, "errors": None, "signatures": {},
                     "lines": []}
    return dict(sorted(out.items()))


def _read_failure(result):
    """Why one loop result of the role's ``vllm_container_log`` task has no log (None: it has one)."""
    if result.get("skipped"):
        return "not collected (%s)" % (result.get("skip_reason") or "task skipped")
    if result.get("unreachable"):
        return "host unreachable: %s" % (result.get("msg") or "")[:300]
    rc = result.get("rc")
    if rc != 0 or result.get("failed"):
        why = (result.get("stderr") or "").strip() or result.get("msg") or "no message"
        return "vllm_container_log rc %s: %s" % (rc, why[:300])
    return None


def logs_from_script_results(results):
    """The registered loop results of the smoke role's log task -> ``(logs_by_host, unreadable_by_host)``.

    Each result carries the host in ``item`` and the log on ``stdout``; a skipped, unreachable or failed read (any
    ``rc`` other than 0, see the ``vllm_container_log`` module) goes to ``unreadable`` with the reason."""
    logs, unreadable = {}, {}
    for r in results or []:
        host = str(r.get("item"))
        why = _read_failure(r)
        if why is None:
            logs[host] = r.get("stdout") or ""
        else:
            unreadable[host] = why
    return logs, unreadable
