# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU memory in use on a node, read now (node side, standard library only, Python >= 3.9).

The smoke reads it while the engine serves (roles/smoke, ``gpu_memory_read``): the preflight probe's figures are from
before the launch (about 0 on a first deploy) and absent when smoke.yml runs alone, so a report that took them
would show what the GPUs held before vLLM started. The same commands as ``node_probe`` (``nvidia-smi``'s CSV query,
``amd-smi metric --mem-usage``) through the same ``ProbeIO``, so the rehearsal's faked tools answer it too.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.probe import collect as C
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.probe import parsers as P


def _nvidia(ctx):
    rc, out, err = ctx.run(C.NVIDIA_CSV_CMD)
    if rc != 0:
        ctx.error("nvidia-smi --query-gpu failed (rc %s): %s" % (rc, (out + err).strip()[:300]))
        return []
    return [{"index": g["index"], "memory_used_mib": g["memory_used_mib"], "memory_total_mib": g["memory_total_mib"]}
            for g in P.gpus_from_csv(out)]


def _amd(ctx):
    rc, out, err = ctx.run(C.AMD_MEM_CMD)
    mem = P.parse_amd_smi_metric_mem(out) if rc == 0 else {}
    if not mem:
        ctx.error("amd-smi metric --mem-usage: %s" % ((out + err).strip()[:300] or "no output (rc %s)" % rc))
    return [{"index": idx, "memory_used_mib": m["used_mib"], "memory_total_mib": m["total_mib"]}
            for idx, m in sorted(mem.items())]


def read(io, clock=time.time, command_timeout=30):
    """``{"read_at", "read_epoch", "vendor", "gpus": [{"index", "memory_used_mib", "memory_total_mib"}], "errors"}``
    of this node; ``read_at`` (UTC, ISO 8601) is when the tool was asked. A node without either tool reports no
    GPU and says so in ``errors``."""
    ctx = C._Ctx(io, {"command_timeout": command_timeout})
    when = clock()
    if ctx.have("nvidia-smi"):
        vendor, gpus = "nvidia", _nvidia(ctx)
    elif ctx.have("amd-smi"):
        vendor, gpus = "amd", _amd(ctx)
    else:
        vendor, gpus = None, []
        ctx.error("neither nvidia-smi nor amd-smi on this node: GPU memory not read")
    return {"read_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when)), "read_epoch": round(when, 3),
            "vendor": vendor, "gpus": gpus, "errors": list(ctx.errors)}


def _mib(value):
    return round(value / 1048576.0, 1) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def container_memory(stats, name):
    """``{"container", "used_mib", "limit_mib"}`` of a Docker stats answer (``GET /containers/<name>/stats``):
    what a node without GPUs holds for the engine (its weights and its KV cache live in host memory). Used is the
    cgroup's usage less its inactive file cache, as ``docker stats`` shows it (cgroup v2: ``inactive_file``, v1:
    ``total_inactive_file``); None where the answer has no figure."""
    mem = stats.get("memory_stats") if isinstance(stats, dict) else None
    mem = mem if isinstance(mem, dict) else {}
    usage, detail = mem.get("usage"), mem.get("stats") if isinstance(mem.get("stats"), dict) else {}
    cache = detail.get("inactive_file", detail.get("total_inactive_file", 0))
    used = usage - cache if isinstance(usage, int) and isinstance(cache, int) and cache <= usage else usage
    return {"container": name, "used_mib": _mib(used), "limit_mib": _mib(mem.get("limit"))}
