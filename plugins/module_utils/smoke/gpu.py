# -*- coding: utf-8 -*-
"""GPU memory per host: read by ``node_gpu_memory`` during the smoke window (what the report shows), or from
``node_probe`` facts (before the launch; kept for callers that pass only those). No I/O."""
from __future__ import annotations

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import stats as smoke_stats

_USED_KEYS = ("memory_used_mib", "memory_used_mb", "memory.used", "mem_used_mib", "vram_used_mb", "memory_used")
_TOTAL_KEYS = ("memory_total_mib", "memory_total_mb", "memory.total", "mem_total_mib", "vram_total_mb",
               "memory_total")


def _first(d, keys):
    for k in keys:
        if isinstance(d, dict) and d.get(k) is not None:
            return smoke_stats.parse_number(d[k])
    return None


def _summary(per, **extra):
    used_vals = [p["used_mib"] for p in per if p["used_mib"] is not None]
    used = sum(used_vals) if used_vals else None  # the probe may report totals only
    total = sum(p["total_mib"] for p in per if p["total_mib"] is not None)
    out = {"gpus": len(per), "used_mib": used, "total_mib": total,
           "used_frac": round(used / total, 4) if total and used is not None else None, "per_gpu": per}
    out.update(extra)
    return out


def gpu_memory_summary(node_probes):
    """``{host: {"gpus": n, "used_mib", "total_mib", "used_frac", "per_gpu": [...], "source"}}`` from node_probe
    facts (read before the launch: ``source`` says so).

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
        out[host] = _summary(per, source=PROBE)
    return out


PROBE, SMOKE_WINDOW = "node probe (before the launch)", "read during the smoke window"


def gpu_memory_from_reads(results):
    """``{host: summary + "read_at", "errors", "source"}`` from the registered loop results of the role's
    ``node_gpu_memory`` task (``item``: the host), read while the engine served. A read that failed, was skipped
    or came from an unreachable node gives its host no GPU and the reason in ``errors``."""
    out = {}
    for r in results or []:
        if not isinstance(r, dict) or not r.get("item"):
            continue
        gm = r.get("gpu_memory") if isinstance(r.get("gpu_memory"), dict) else {}
        errors = list(gm.get("errors") or [])
        if not gm:
            errors.append(str(r.get("msg") or ("skipped" if r.get("skipped") else "no answer"))[:300])
        per = [{"index": g.get("index"), "used_mib": smoke_stats.parse_number(g.get("memory_used_mib")),
                "total_mib": smoke_stats.parse_number(g.get("memory_total_mib"))}
               for g in gm.get("gpus") or [] if isinstance(g, dict)]
        out[str(r["item"])] = _summary(per, read_at=gm.get("read_at"), errors=errors, source=SMOKE_WINDOW,
                                       engine_memory=gm.get("engine_memory"))
    return out
