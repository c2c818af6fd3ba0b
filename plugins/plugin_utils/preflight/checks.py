# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Cluster preflight checks as pure functions: one function per concern, registered in ``HOST_CHECKS``.

``run_checks(probes, expected, thresholds, hosts)``:

- ``probes``: ``{host: node_probe facts or None}`` (None = unreachable / probe failed);
- ``expected``: ``{host: preflight_expect.expected_from_plan(...)}`` - what the plan runs there and the recipe's
  floors (accelerator, vendor, gpus_per_node, interconnect, nnodes, role, internal_address, docker_host,
  model_cache_dir, shm_size, memlock, imex_channel, min_driver, min_cuda, min_rocm, min_gpu_memory_mib);
- ``thresholds``: operator policy, see ``DEFAULT_THRESHOLDS`` (role defaults ``preflight_*``).

Returns ``{"findings": [...], "drift": {...}, "summary": {...}}``; each finding is
``{host, check, status: fail|warn|skip|pass, observed, expected, fix}``.

Root cause first: every check names the checks it ``needs``. When one of them failed (or was itself skipped), the
check is not evaluated and reports ``skip`` with "depends on <check>", so a node whose driver is not loaded shows
one failure (gpu_tools) with its own fix, not a cascade of consequences with misleading fixes. Every fix text
belongs to its check and failure kind (``FIX``).
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
from collections import namedtuple

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.probe import access as preflight_access
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.probe import parsers as P
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.preflight.fixes import FIX

CLUSTER = "(cluster)"
STATUSES = ("fail", "warn", "skip", "pass")

DEFAULT_THRESHOLDS = {
    "min_free_disk_gb": 1700,       # ~1.56 TB checkpoint + headroom (decimal GB); skipped when weights are present
    "min_shm": None,                # bytes or size string; None -> the plan's container shm_size
    "max_gpu_memory_used_pct": 5,  # vLLM reserves ~90-95 % of each GPU: memory held by others breaks it
    "rdma_min_active_ports": 1,
    "rdma_allow_down_ports": False,
    "require_time_sync": False,     # unsynchronised / unknown clock: warn (true: fail)
    "require_gpudirect": False,     # no peermem / DMA-BUF path on RDMA clusters: warn (true: fail)
    "drift_fatal": ["driver_version", "cuda_version", "rocm_version", "gpu_model", "gpu_count"],
}

# Attribute compared across nodes -> the per-host check that must have passed for its value to mean anything.
DRIFT_ATTRS = (("driver_version", "gpu_tools"), ("cuda_version", "gpu_driver"), ("rocm_version", "gpu_tools"),
               ("gpu_model", "gpu_tools"), ("gpu_count", "gpu_tools"), ("kernel", "probe"),
               ("engine_version", "engine"))

Check = namedtuple("Check", "name needs applies run")


def merge_thresholds(thresholds):
    out = dict(DEFAULT_THRESHOLDS)
    for k, v in (thresholds or {}).items():
        if v is None and k != "min_shm":
            continue
        out[k] = v
    return out


def finding(host, check, status, observed, expected, fix=""):
    return {"host": host, "check": check, "status": status, "observed": _s(observed), "expected": _s(expected),
            "fix": "" if status == "pass" else fix}


def _s(value):
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def fmt_bytes(n):
    if n is None:
        return "unknown"
    if n == -1:
        return "unlimited"
    for unit, size in (("TiB", 1024 ** 4), ("GiB", 1024 ** 3), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if abs(n) >= size:
            return "%.1f %s" % (n / float(size), unit)
    return "%d B" % n


def role_of(exp):
    """"head" or "worker" (the plan's role; head when unknown)."""
    return exp.get("role") or "head"


def worst(findings):
    """The most severe status of a check's findings (``pass`` when it produced none)."""
    return min((f["status"] for f in findings), key=STATUSES.index, default="pass")


class Node(object):
    """What one check sees: the host, its probe facts, what the plan expects there and the policy thresholds."""

    def __init__(self, host, facts, exp, th):
        self.host, self.facts, self.exp, self.th = host, facts or {}, exp, th
        self.probed = facts is not None and bool(facts)

    def get(self, key, default=None):
        value = self.facts.get(key)
        return default if value is None else value

    def f(self, check, status, observed, expected, fix=""):
        return finding(self.host, check, status, observed, expected, fix)

    @property
    def vendor(self):
        return self.exp.get("vendor")

    @property
    def multi(self):
        return (P.to_int(self.exp.get("nnodes")) or 1) > 1


# --------------------------------------------------------------------------------------------- applicability

def _always(_n):
    return True


def _nvidia(n):
    return n.vendor == "nvidia"


def _amd(n):
    return n.vendor == "amd"


def _nvlink_multi(n):
    return n.multi and n.exp.get("interconnect") == "nvlink"


def _rdma_multi(n):
    return n.multi and n.exp.get("interconnect") == "rdma"


def _rdma_nvidia(n):
    return _rdma_multi(n) and _nvidia(n)


def _imex_channel_needed(n):
    return bool(n.exp.get("imex_channel"))


def _rdma_devices_needed(n):
    return bool(n.exp.get("rdma_devices"))


def _socket_ifnames_planned(n):
    return bool(n.exp.get("socket_ifnames")) and "interfaces" in n.facts


def _listeners_exposed(n):
    return bool(n.exp.get("exposed_listeners")) and (n.get("interfaces", {}).get("all") is not None)


def _read_against_plan(n):
    """The node's weights were sample-read and the plan's launch timeouts come from an assumed read rate."""
    read = (n.get("weights", {}) or {}).get("read") or {}
    return bool((n.exp.get("weight_read") or {}).get("mib_s")) and read.get("mib_s") is not None


def _python_reported(n):
    return "python" in n.facts          # probes of an older collection version do not report it


def _gpu_floor_known(n):
    return bool(n.exp.get("min_gpu_memory_mib"))


def prerequisites(n):
    """The recipe's fabric prerequisites of the plan's all2all kernel on this node ({}: none)."""
    return n.exp.get("fabric_prerequisites") or {}


def _ibgda_needed(n):
    pre = prerequisites(n)
    return _nvidia(n) and "kernel_state" in n.facts and bool(pre.get("nvidia_params") or pre.get(
        "nvidia_registry_dwords"))


def _mori_needed(n):
    return _amd(n) and "kernel_state" in n.facts and bool(prerequisites(n).get("rdma_provider_modules"))


def _access_reported(n):
    return "access" in n.facts


# --------------------------------------------------------------------------------------------- the checks

def check_probe(n):
    if n.probed:
        return [n.f("probe", "pass", "node_probe facts", "node_probe facts")]
    return [n.f("probe", "fail", "no node_probe facts (host unreachable or probe failed)", "node_probe facts",
                FIX["probe"])]


def check_vendor(n):
    found = n.facts.get("vendor")
    if found == n.vendor:
        return [n.f("vendor", "pass", found, n.vendor)]
    if found is None:
        return [n.f("vendor", "fail", "no GPU stack found", n.vendor, FIX["vendor.none"] % {"vendor": n.vendor})]
    return [n.f("vendor", "fail", found, n.vendor, FIX["vendor.other"] % {"vendor": n.vendor, "found": found})]


def check_gpu_tools(n):
    want = "nvidia-smi working" if _nvidia(n) else "amd-smi (or rocm-smi) working"
    if _amd(n):
        src = n.get("amd", {}).get("source")
        if src:
            return [n.f("gpu_tools", "pass", src, want)]
        return [n.f("gpu_tools", "fail", "amd-smi/rocm-smi missing or failing", want, FIX["gpu_tools.amd"])]
    status = n.get("nvidia", {}).get("smi_status")
    if n.get("tools", {}).get("nvidia-smi") is None:
        return [n.f("gpu_tools", "fail", "nvidia-smi not found", want, FIX["gpu_tools.not_found"])]
    if status in ("ok", "csv_only"):
        return [n.f("gpu_tools", "pass", "nvidia-smi %s" % status, want)]
    fix = FIX.get("gpu_tools." + str(status), FIX["gpu_tools.failing"])
    return [n.f("gpu_tools", "fail", "nvidia-smi: %s" % status, want, fix)]


def check_gpu_driver(n):
    drv, floor = n.facts.get("driver_version"), n.exp.get("min_driver")
    out = [n.f("gpu_driver", "pass" if P.version_ge(drv, floor) else "fail", drv, ">= %s" % floor,
               FIX["gpu_driver"] % {"min": floor})]
    kdrv = n.get("nvidia", {}).get("driver_version_kernel")
    if drv and kdrv and drv != kdrv:
        out.append(n.f("gpu_driver", "fail", "kernel module %s, user space %s" % (kdrv, drv),
                       "same version (reboot after upgrade)", FIX["gpu_driver.mismatch"]))
    return out


def check_cuda_version(n):
    cuda, floor = n.facts.get("cuda_version"), n.exp.get("min_cuda")
    if cuda is None:
        return [n.f("cuda_version", "fail", "not found", ">= %s" % floor, FIX["cuda_version.missing"])]
    ok = P.version_ge(cuda, floor)
    return [n.f("cuda_version", "pass" if ok else "fail", cuda, ">= %s" % floor, FIX["cuda_version"] % {"min": floor})]


def check_rocm_version(n):
    rocm, floor = n.facts.get("rocm_version"), n.exp.get("min_rocm")
    ok = P.version_ge(rocm, floor)
    return [n.f("rocm_version", "pass" if ok else "fail", rocm or "not found", ">= %s" % floor,
                FIX["rocm_version"] % {"min": floor})]


def check_gpu_model(n):
    model, acc = n.facts.get("gpu_model"), n.exp.get("accelerator")
    obs = "%s (%s)" % (model, ", ".join(n.get("gpu_names", [])) or "no GPUs")
    if model == acc:
        return [n.f("gpu_model", "pass", obs, acc)]
    fix = FIX["gpu_model.unknown"] if model in (None, "unknown") else FIX["gpu_model"] % {"acc": acc, "model": model}
    return [n.f("gpu_model", "fail", obs, acc, fix)]


def check_gpu_count(n):
    want = P.to_int(n.exp.get("gpus_per_node"))
    count = n.get("gpu_count", 0)
    if count < want:
        return [n.f("gpu_count", "fail", count, want, FIX["gpu_count"])]
    if count > want:
        return [n.f("gpu_count", "warn", "%d (only %d used)" % (count, want), want, FIX["gpu_count.more"])]
    return [n.f("gpu_count", "pass", count, want)]


def check_gpu_memory(n):
    floor = n.exp["min_gpu_memory_mib"]
    small = [g for g in n.get("gpus", []) if (g.get("memory_total_mib") or 0) < floor]
    want = ">= %d MiB per GPU" % floor
    if not small:
        return [n.f("gpu_memory", "pass", "min %s MiB" % n.facts.get("gpu_memory_mib_min"), want)]
    obs = ", ".join("GPU %s: %s MiB" % (g.get("index"), g.get("memory_total_mib") or "unknown") for g in small)
    return [n.f("gpu_memory", "fail", obs, want, FIX["gpu_memory"])]


def check_gpu_busy(n):
    pct = float(n.th.get("max_gpu_memory_used_pct") or 0)
    want = "<= %g %% used per GPU" % pct
    busy = [g for g in n.get("gpus", []) if g.get("memory_used_mib") and g.get("memory_total_mib")
            and 100.0 * g["memory_used_mib"] / g["memory_total_mib"] > pct]
    deployment = n.get("deployment", {})
    if busy and deployment.get("running"):
        return [n.f("gpu_busy", "pass", "held by the running deployment (container %s)" % deployment.get("container"),
                    want)]
    if busy:
        obs = ", ".join("GPU %s: %s of %s MiB used" % (g.get("index"), g["memory_used_mib"], g["memory_total_mib"])
                        for g in busy)
        return [n.f("gpu_busy", "fail", obs, want, FIX["gpu_busy"])]
    return [n.f("gpu_busy", "pass", "idle", want)]


def check_fabric(n):
    fab = n.get("fabric", {})
    want = "MNNVL: Completed/Success/Healthy, non-zero ClusterUUID on every GPU"
    if n.facts.get("mnnvl"):
        return [n.f("fabric", "pass", "Completed, ClusterUUID %s, CliqueId %s" % (
            fab.get("cluster_uuid"), fab.get("clique_id")), want)]
    return [n.f("fabric", "fail", "; ".join(fab.get("reasons") or []) or "not MNNVL", want, FIX["fabric"])]


def _imex_observed(imex):
    bad = ["%s %s" % (x.get("address"), x.get("state")) for x in imex.get("nodes") or [] if x.get("state") != "READY"]
    obs = "Domain State: %s" % (imex.get("domain_state") or "unknown")
    if bad:
        obs += "; not READY: " + ", ".join(bad)
    if imex.get("matrix_ok") is False:
        obs += "; connectivity matrix not all C"
    if imex.get("error"):
        obs += "; " + imex["error"]
    return obs


def check_imex(n):
    imex, want = n.get("imex", {}), "IMEX Domain State: UP"
    if not imex.get("present"):
        return [n.f("imex", "fail", "nvidia-imex-ctl not found", want, FIX["imex.missing"])]
    if imex.get("up"):
        return [n.f("imex", "pass", "Domain State: UP, %d nodes READY" % len(imex.get("nodes") or []), want)]
    return [n.f("imex", "fail", _imex_observed(imex), want, FIX["imex"])]


def check_imex_channel(n):
    chan = n.get("devices", {}).get("imex_channel")
    return [n.f("imex_channel", "pass" if chan else "fail",
                "/dev/nvidia-caps-imex-channels/channel0 %s" % ("present" if chan else "missing"),
                "channel0 present (the plan mounts it)", FIX["imex_channel"])]


def check_rdma_devices(n):
    """The verbs devices the plan mounts (/dev/infiniband) exist on the node: without them Docker cannot start the
    container (RDMA multi-node plans, both vendors)."""
    count = n.get("devices", {}).get("infiniband_uverbs") or 0
    return [n.f("rdma_devices", "pass" if count else "fail", "%d /dev/infiniband/uverbs* device(s)" % count,
                ">= 1 /dev/infiniband/uverbs* (the plan mounts /dev/infiniband)", FIX["rdma_devices"])]


def check_rdma(n):
    rdma, th = n.get("rdma", {}), n.th
    ports = rdma.get("ports") or []
    down = ["%s/%s %s" % (p.get("device"), p.get("port"), p.get("state") or "unknown") for p in ports
            if p.get("state") != "ACTIVE"]
    active = rdma.get("active_ports") or 0
    obs = "%d of %d ports ACTIVE (%s)" % (active, len(ports), rdma.get("source") or "no RDMA devices found")
    if down:
        obs += "; not active: " + ", ".join(down)
    want = ">= %d ACTIVE port(s)%s" % (th["rdma_min_active_ports"], "" if th["rdma_allow_down_ports"] else ", none down")
    bad = active < th["rdma_min_active_ports"] or (down and not th["rdma_allow_down_ports"])
    fix = FIX["rdma.none"] if not ports else FIX["rdma"]
    return [n.f("rdma", "fail" if bad else "pass", obs, want, fix)]


def check_gpudirect(n):
    """A GPUDirect RDMA path: required (fail) when the plan's all2all kernel needs it or the policy says so; only
    nvidia_peermem counts when the plan switches DMA-BUF off (NCCL_DMABUF_ENABLE=0)."""
    gd, backend = n.get("gpudirect", {}), n.exp.get("all2all_backend")
    mode = gd.get("mode") or "none"
    needed = bool(prerequisites(n).get("gpudirect"))
    if n.exp.get("gpudirect_peer_only"):
        ok, want, fix = bool(gd.get("peermem_loaded")), "nvidia_peermem loaded (the plan sets NCCL_DMABUF_ENABLE=0)", \
            FIX["gpudirect.peermem"]
        obs = "peermem" if ok else "nvidia_peermem not loaded (%s)" % mode
    else:
        ok, want, obs = mode != "none", "nvidia_peermem loaded or DMA-BUF (open kernel module)", mode
        fix = FIX["gpudirect.required"] % {"backend": backend} if needed else FIX["gpudirect"]
    if needed:
        want += " for %s" % backend
    status = "pass" if ok else ("fail" if needed or n.th["require_gpudirect"] or n.exp.get("gpudirect_peer_only")
                                else "warn")
    return [n.f("gpudirect", status, obs, want, fix)]


def ibgda_settings_off(params, pre):
    """Driver settings of ``pre`` (nvidia_params, nvidia_registry_dwords) not in effect in ``params`` -> texts."""
    off = []
    for name, want in sorted((pre.get("nvidia_params") or {}).items()):
        found = params.get(name)
        if P.param_int(found) != P.param_int(want):
            off.append("%s: %s" % (name, "absent" if found is None else found))
    dwords = P.parse_registry_dwords(params.get("RegistryDwords"))
    for name, want in sorted((pre.get("nvidia_registry_dwords") or {}).items()):
        if P.param_int(dwords.get(name)) != P.param_int(want):
            off.append("RegistryDwords %s" % ("%s=%s" % (name, dwords[name]) if name in dwords else "lacks " + name))
    return off


def _ibgda_wanted(pre):
    items = ["%s: %s" % kv for kv in sorted((pre.get("nvidia_params") or {}).items())]
    items += ["RegistryDwords %s=%s" % kv for kv in sorted((pre.get("nvidia_registry_dwords") or {}).items())]
    return ", ".join(items)


def check_ibgda_driver(n):
    """The NVIDIA driver parameters IBGDA needs (DeepEP / NVSHMEM / NCCL GIN), from /proc/driver/nvidia/params."""
    pre, backend = prerequisites(n), n.exp.get("all2all_backend")
    want = "%s in /proc/driver/nvidia/params (%s)" % (_ibgda_wanted(pre), backend)
    params = n.get("kernel_state", {}).get("nvidia_params")
    if params is None:
        return [n.f("ibgda_driver", "fail", "/proc/driver/nvidia/params unreadable", want,
                    FIX["ibgda_driver.unreadable"])]
    off = ibgda_settings_off(params, pre)
    if not off:
        return [n.f("ibgda_driver", "pass", _ibgda_wanted(pre), want)]
    fix = FIX["ibgda_driver"] % {"backend": backend, "options": pre.get("modprobe_options")}
    cpu = pre.get("cpu_assisted_ibgda") or {}
    if backend in (cpu.get("backends") or []) and cpu.get("module") in n.get("kernel_state", {}).get("modules", []):
        return [n.f("ibgda_driver", "warn", "; ".join(off) + "; %s loaded: CPU-assisted IBGDA (slower)" %
                    cpu["module"], want, fix)]
    return [n.f("ibgda_driver", "fail", "; ".join(off), want, fix)]


def check_mori_rdma(n):
    """MoRI's kernel prerequisites: amdgpu and an RDMA provider MoRI supports, loaded (/proc/modules)."""
    pre, backend, ks = prerequisites(n), n.exp.get("all2all_backend"), n.get("kernel_state", {})
    providers = pre.get("rdma_provider_modules") or {}
    want = "amdgpu and one of %s loaded (%s)" % (", ".join("%s (%s)" % kv for kv in sorted(providers.items())),
                                                 backend)
    if not ks.get("modules_readable"):
        return [n.f("mori_rdma", "fail", "/proc/modules unreadable", want, FIX["kernel_state.unreadable"])]
    loaded = set(ks.get("modules") or [])
    gpu_missing = [m for m in pre.get("gpu_modules") or [] if m not in loaded]
    if gpu_missing:
        return [n.f("mori_rdma", "fail", "%s not loaded" % ", ".join(gpu_missing), want, FIX["mori_rdma.gpu"])]
    found = sorted(m for m in providers if m in loaded)
    if found:
        return [n.f("mori_rdma", "pass", "%s loaded" % ", ".join(found), want)]
    return [n.f("mori_rdma", "fail", "none of %s loaded" % ", ".join(sorted(providers)), want,
                FIX["mori_rdma"] % {"backend": backend})]


def check_access(n):
    """preflight_access: the node-side modules run as root (login or become)."""
    found = preflight_access.check_access(n.host, n.facts.get("access"))
    return [n.f("access", found["status"], found["observed"], found["expected"], found["fix"] or "")]


def check_engine(n):
    eng = n.get("engine", {})
    want = "engine reachable at %s" % (n.exp.get("docker_host") or eng.get("docker_host"))
    if eng.get("reachable"):
        return [n.f("engine", "pass", "%s via %s" % (eng.get("version"), eng.get("source")), want)]
    return [n.f("engine", "fail", eng.get("error") or "not reachable", want, FIX["engine"])]


def check_engine_gpu(n):
    gs = n.get("engine", {}).get("gpu_support") or {}
    want = "NVIDIA runtime/hook or CDI spec" if _nvidia(n) else "/dev/kfd and /dev/dri/renderD*"
    fix = FIX["engine_gpu.nvidia"] if _nvidia(n) else FIX["engine_gpu.amd"]
    return [n.f("engine_gpu", "pass" if gs.get("ok") else "fail", ", ".join(gs.get("via") or []) or
                "no GPU support found", want, fix)]


def check_shm(n):
    min_shm = n.th.get("min_shm")
    min_shm = P.parse_size(min_shm if min_shm not in (None, "") else n.exp.get("shm_size"))
    shm = n.facts.get("shm_bytes")
    if min_shm is None or min_shm <= 0:
        return [n.f("shm", "pass", fmt_bytes(shm), "no minimum")]
    return [n.f("shm", "pass" if shm is not None and shm >= min_shm else "fail", fmt_bytes(shm),
                ">= %s" % fmt_bytes(min_shm), FIX["shm"])]


def check_memlock(n):
    want = P.parse_size(n.exp.get("memlock") if n.exp.get("memlock") is not None else -1)
    ml = n.facts.get("memlock")
    ok = ml == -1 or (want is not None and want != -1 and ml is not None and ml >= want)
    return [n.f("memlock", "pass" if ok else "fail", fmt_bytes(ml), ">= %s" % fmt_bytes(want), FIX["memlock"])]


def weight_read_text(read):
    """The sample read's throughput for the disk finding: the node's value for kimi_k3_weight_read_mib_s."""
    if not read:
        return ""
    if read.get("mib_s") is None:
        return "; weight read sample failed (%s)" % (read.get("error") or "nothing read")
    return "; read %s MiB/s (%s of %d shard(s), %s; kimi_k3_weight_read_mib_s: %d sets the launch timeouts)" % (
        read["mib_s"], fmt_bytes(read.get("bytes")), read.get("files") or 0,
        "direct I/O" if read.get("direct") else "through the page cache, cached pages dropped", int(read["mib_s"]))


def check_disk(n):
    disk, weights, gb = n.get("disk", {}), n.get("weights", {}), n.th["min_free_disk_gb"]
    model = n.exp.get("model") or "the model"
    if n.exp.get("model_revision"):
        model = "%s@%s" % (model, n.exp["model_revision"])
    want = ">= %s GB free or weights of %s present" % (gb, model)
    if weights.get("present"):
        obs = "weights present at %s (%s)" % (weights.get("path"), fmt_bytes(weights.get("bytes")))
        return [n.f("disk", "pass", obs + weight_read_text(weights.get("read")), want)]
    free = disk.get("free_bytes")
    if free is None:
        return [n.f("disk", "fail", "unknown", want, FIX["disk"])]
    where = disk.get("path") if disk.get("exists") else "%s (missing; measured on %s)" % (
        disk.get("path"), disk.get("checked_path"))
    ok = free >= int(float(gb) * 1000 ** 3)
    return [n.f("disk", "pass" if ok else "fail", "%.0f GB free on %s" % (free / 1000.0 ** 3, where), want,
                FIX["disk"])]


def check_weight_read(n):
    """The node's measured read rate against the rate the plan's launch timeouts were derived from: slower than
    assumed eats the timeouts' margin (warn); slower than the margin covers (the recipe's load_factor) cuts the
    weight load off at the engine's start-up limit (fail)."""
    wr, measured = n.exp["weight_read"], float(n.get("weights")["read"]["mib_s"])
    assumed, factor = float(wr["mib_s"]), float(wr.get("load_factor") or 1.0)
    want = ">= %s MiB/s (kimi_k3_weight_read_mib_s: the plan's launch timeouts, engine ready %s s, assume it)" % (
        _num(assumed), wr.get("engine_ready_timeout_s"))
    obs = "read %s MiB/s" % _num(measured)
    if measured >= assumed:
        return [n.f("weight_read", "pass", obs, want)]
    status = "fail" if measured * factor < assumed else "warn"
    obs += " (%.0f %% of the rate the timeouts assume%s)" % (
        100.0 * measured / assumed, "; the load would outrun the engine's start-up limit" if status == "fail" else "")
    return [n.f("weight_read", status, obs, want, FIX["weight_read"] % {"host": n.host, "mib_s": int(measured)})]


def _num(value):
    return ("%d" % value) if float(value).is_integer() else ("%.1f" % value)


def _port_finding(n, p):
    st, label = p.get("state"), "%s %s:%s" % (p.get("name"), p.get("address"), p.get("port"))
    deployment = n.get("deployment", {})
    if st == "free":
        return n.f("ports", "pass", "%s free" % label, "free")
    if st == "in_use" and deployment.get("running"):
        return n.f("ports", "pass", "%s in use by the running deployment (container %s)"
                   % (label, deployment.get("container")), "free or held by this deployment")
    if st == "in_use":
        severity = "fail" if role_of(n.exp) == "head" or p.get("name") == "api" else "warn"
        return n.f("ports", severity, "%s in use" % label, "free", FIX["ports.in_use"])
    if st == "not_local":
        return n.f("ports", "fail", "%s: address not configured on this node" % label, "free", FIX["ports.not_local"])
    return n.f("ports", "warn", "%s: %s" % (label, st), "free", FIX["ports.in_use"])


def check_ports(n):
    return [_port_finding(n, p) for p in n.get("ports", [])]


def check_time_sync(n):
    ts = n.get("time_sync", {})
    if ts.get("synchronized") is True:
        return [n.f("time_sync", "pass", "synchronized (%s)" % ts.get("source"), "synchronized")]
    obs = "not synchronized (%s)" % ts.get("source") if ts.get("synchronized") is False else \
        "unknown (no timedatectl/chronyc)"
    return [n.f("time_sync", "fail" if n.th["require_time_sync"] else "warn", obs, "synchronized", FIX["time_sync"])]


def check_python_requests(n):
    py = n.get("python", {})
    want = "requests importable by %s (community.docker's modules need it)" % (py.get("executable") or "the node's Python")
    if py.get("requests"):
        found = "requests at %s (Python %s)" % (py.get("requests_path"), py.get("version"))
        return [n.f("python_requests", "pass", found, want)]
    return [n.f("python_requests", "fail", "requests not importable by %s (Python %s)" % (
        py.get("executable"), py.get("version")), want, FIX["python_requests"] % {"python": py.get("executable")})]


def carries(info, address):
    """Whether an interface (``interfaces.names[x]`` of the probe) holds ``address``: assigned to it, or inside the
    prefix of a loopback interface (the kernel treats all of 127.0.0.0/8 on ``lo`` as local)."""
    for item in info.get("addresses") or []:
        ip, _sep, plen = str(item).partition("/")
        if ip == address:
            return True
        try:
            if info.get("loopback") and ipaddress.ip_address(address) in ipaddress.ip_network(
                    "%s/%s" % (ip, plen or 32), strict=False):
                return True
        except ValueError:
            continue
    return False


def socket_interface(n):
    """(name, info) of the socket interface that carries the node's internal address, else the first one found."""
    names = n.get("interfaces", {}).get("names") or {}
    found = [(x, names[x]) for x in n.exp.get("socket_ifnames") or [] if (names.get(x) or {}).get("exists")]
    for name, info in found:
        if carries(info, n.exp.get("internal_address")):
            return name, info
    return found[0] if found else (None, None)


def _socket_problem(n, names, addr):
    """(observed, fix) of the first thing wrong with the socket interfaces, or None."""
    seen = n.get("interfaces", {})
    have = seen.get("available")
    missing = [x for x in names if not (seen.get("names", {}).get(x) or {}).get("exists")]
    if missing:
        return ("%s not found on the node%s" % (", ".join(missing), " (has: %s)" % ", ".join(have) if have else ""),
                FIX["socket_ifname.missing"] % {"names": ",".join(names)})
    down = [x for x in names if not seen["names"][x].get("up")]
    if down:
        return ("%s down (operstate %s)" % (", ".join(down), ", ".join(
            str(seen["names"][x].get("operstate")) for x in down)), FIX["socket_ifname.down"] % {"name": down[0]})
    if any(seen["names"][x].get("addresses") is None for x in names):
        return None
    if not any(carries(seen["names"][x], addr) for x in names):
        return ("none of %s carries %s (has %s)" % (", ".join(names), addr, ", ".join(
            a for x in names for a in seen["names"][x].get("addresses") or []) or "no address"),
            FIX["socket_ifname.address"] % {"names": ",".join(names), "address": addr})
    return None


def check_socket_ifname(n):
    names, addr = n.exp["socket_ifnames"], n.exp.get("internal_address")
    want = "%s present, up, one of them carrying %s" % (", ".join(names), addr)
    problem = _socket_problem(n, names, addr)
    if problem:
        return [n.f("socket_ifname", "fail", problem[0], want, problem[1])]
    name, info = socket_interface(n)
    checked = "carries %s" % addr if info.get("addresses") is not None else "address not checked (no iproute2)"
    return [n.f("socket_ifname", "pass", "%s up, MTU %s, %s" % (name, info.get("mtu"), checked), want)]


# Node-local container bridges: only this node's containers reach their addresses.
LOCAL_BRIDGES = ("docker", "br-", "veth", "cni", "flannel", "virbr", "podman")


def _networks(item):
    """The network of an ``a.b.c.d/len`` interface address (None when unparseable)."""
    try:
        return ipaddress.ip_network(str(item), strict=False)
    except ValueError:
        return None


def cluster_networks(n):
    """``[(ifname, network)]`` the node's internal address sits in: the networks of the interfaces carrying it."""
    found = []
    for name, info in sorted((n.get("interfaces", {}).get("all") or {}).items()):
        if carries(info, n.exp.get("internal_address")):
            found += [(name, net) for net in map(_networks, info.get("addresses") or [])
                      if net is not None and not net.is_link_local]
    return found


def outside_addresses(n, networks):
    """``["ifname address/len"]`` of the node's up, non-loopback, non-link-local addresses outside ``networks``
    (container bridges excepted)."""
    out = []
    for name, info in sorted((n.get("interfaces", {}).get("all") or {}).items()):
        if info.get("loopback") or not info.get("up") or name.startswith(LOCAL_BRIDGES):
            continue
        for item in info.get("addresses") or []:
            net = _networks(item)
            ip = ipaddress.ip_address(str(item).partition("/")[0]) if net is not None else None
            if ip is None or ip.is_link_local or ip.is_loopback:
                continue
            if not any(ip in cnet for _ifname, cnet in networks if cnet.version == ip.version):
                out.append("%s %s" % (name, item))
    return out


def check_port_exposure(n):
    """Warn when inter-node ports will listen on every address and the node has addresses outside the cluster
    network: those unauthenticated ports are then reachable from those networks unless a firewall stops them."""
    ports = n.exp["exposed_listeners"]
    listed = ", ".join("%s %s (%s)" % (p["what"], p["port"], p["variable"]) for p in ports)
    networks = cluster_networks(n)
    if not networks:
        return [n.f("port_exposure", "skip", "no interface carries %s" % n.exp.get("internal_address"),
                    "the internal address on one of the node's interfaces")]
    shown = ", ".join(sorted(set("%s (%s)" % (net, name) for name, net in networks)))
    want = "%s reachable only from the cluster network %s" % (listed, shown)
    outside = outside_addresses(n, networks)
    if not outside:
        return [n.f("port_exposure", "pass", "no address outside %s besides loopback" % shown, want)]
    observed = "%s listen on all addresses; %s outside the cluster network %s" % (
        listed, "; ".join(outside), shown)
    return [n.f("port_exposure", "warn", observed, want, FIX["port_exposure"] % {
        "host": n.host, "ports": ", ".join(str(p["port"]) for p in ports),
        "variables": ", ".join(sorted(set(p["variable"] for p in ports))),
        "network": ", ".join(sorted(set(str(net) for _name, net in networks))),
        "outside": ", ".join(sorted(set(o.split(" ")[0] for o in outside)))})]


def check_probe_errors(n):
    if not n.facts.get("errors"):
        return []
    return [n.f("probe_errors", "warn", "; ".join(n.facts["errors"]), "no probe errors", FIX["probe_errors"])]


def _check(name, needs, applies=_always):
    """A row of HOST_CHECKS: the function ``check_<name>`` of this module, run when ``applies(node)`` holds and
    none of ``needs`` failed or was skipped."""
    return Check(name, needs, applies, globals()["check_" + name])


# Order = report order; ``needs`` = checks that must not have failed (or been skipped) for this one to mean anything.
HOST_CHECKS = (
    _check("probe", ()),
    _check("vendor", ("probe",)),
    _check("gpu_tools", ("vendor",)),
    _check("gpu_driver", ("gpu_tools",), _nvidia),
    _check("cuda_version", ("gpu_driver",), _nvidia),
    _check("rocm_version", ("gpu_tools",), _amd),
    _check("gpu_model", ("gpu_tools",)),
    _check("gpu_count", ("gpu_tools",)),
    _check("gpu_memory", ("gpu_model",), _gpu_floor_known),
    _check("gpu_busy", ("gpu_tools",)),
    _check("fabric", ("gpu_tools",), _nvlink_multi),
    _check("imex", ("gpu_tools",), _nvlink_multi),
    _check("imex_channel", ("gpu_tools",), _imex_channel_needed),
    _check("rdma", ("probe",), _rdma_multi),
    _check("rdma_devices", ("probe",), _rdma_devices_needed),
    _check("gpudirect", ("rdma", "gpu_tools"), _rdma_nvidia),
    _check("ibgda_driver", ("gpu_tools",), _ibgda_needed),
    _check("mori_rdma", ("rdma", "gpu_tools"), _mori_needed),
    _check("engine", ("probe",)),
    _check("engine_gpu", ("engine", "gpu_tools")),
    _check("shm", ("probe",)),
    _check("memlock", ("probe",)),
    _check("disk", ("probe",)),
    _check("weight_read", ("disk",), _read_against_plan),
    _check("ports", ("probe",)),
    _check("time_sync", ("probe",)),
    _check("python_requests", ("probe",), _python_reported),
    _check("access", ("probe",), _access_reported),
    _check("socket_ifname", ("probe",), _socket_ifnames_planned),
    _check("port_exposure", ("probe", "socket_ifname"), _listeners_exposed),
    _check("probe_errors", ("probe",)),
)


def skipped(host, check, blocker):
    return finding(host, check, "skip", "not checked: depends on %s" % blocker, "%s to pass first" % blocker)


def blocker_of(needs, states):
    """The first prerequisite that failed or was skipped (None when all passed, warned or did not apply)."""
    for name in needs:
        if states.get(name) in ("fail", "skip"):
            return name
    return None


def not_applicable(host, check, exp):
    """A check the recipe declares meaningless on this kind of node (no GPU on a rehearsal CPU node): said so,
    never failed, and no blocker of the checks that need it."""
    return finding(host, check, "pass", "not applicable on %s nodes" % exp.get("accelerator"),
                   "n/a (recipe node_requirements.vendors.%s.not_applicable)" % exp.get("vendor"))


def check_host(host, facts, exp, th):
    """All single-node findings of ``host`` and ``{check: worst status}`` (the states cluster checks depend on)."""
    node = Node(host, facts, exp, th)
    out, states = [], {}
    for chk in HOST_CHECKS:
        if not chk.applies(node):
            continue
        if chk.name in (exp.get("not_applicable") or ()):
            out.append(not_applicable(host, chk.name, exp))
            continue
        blocker = blocker_of(chk.needs, states)
        found = [skipped(host, chk.name, blocker)] if blocker else chk.run(node)
        states[chk.name] = worst(found)
        out.extend(found)
    return out, states
