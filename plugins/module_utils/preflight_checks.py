# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Cluster preflight checks as pure functions.

``run_checks(probes, expected, thresholds)``:

- ``probes``: ``{host: node_probe facts or None}`` (None = unreachable / probe failed);
- ``expected``: ``{host: {accelerator, gpus_per_node, interconnect, nnodes, role, api_port, master_port, dp_rpc_port,
  model_cache_dir, memlock, shm_size, api_host, internal_address}}`` (built by the preflight role from inventory);
- ``thresholds``: see ``DEFAULT_THRESHOLDS`` (role defaults ``preflight_*``).

Returns ``{"findings": [...], "drift": {...}, "summary": {...}}``; each finding is
``{host, check, status: pass|warn|fail, observed, expected, fix}``. Every check of every host is evaluated, so one
run lists all problems of the whole cluster.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils import probe_parsers as P

CLUSTER = "(cluster)"
STATUSES = ("fail", "warn", "pass")

ACCELERATOR_VENDOR = {"gb300": "nvidia", "gb200": "nvidia", "b300": "nvidia", "b200": "nvidia", "h200": "nvidia",
                      "mi355x": "amd", "mi350x": "amd"}
DEFAULT_GPUS_PER_NODE = {"gb300": 4, "gb200": 4}

DEFAULT_THRESHOLDS = {
    "min_driver": "580",            # the K3 image is cu130 only -> r580 or newer
    "min_cuda": "13.0",             # CUDA driver API the driver must serve
    "min_rocm": "7.0",              # ROCm 7.x: AMD SMI 26, gfx950 support of the rocm K3 image (PyTorch / HIP 7.2)
    "min_free_disk_gb": 1700,       # ~1.56 TB checkpoint + headroom (decimal GB); skipped when weights are present
    "min_shm": None,                # bytes or size string; None -> the container's kimi_k3_shm_size
    "min_gpu_memory_mib": {         # per GPU; tells an NVL72 GB300 (284208) from a DGX Station GB300 (256703)
        "gb300": 280000, "gb200": 180000, "b300": 270000, "b200": 180000, "h200": 140000,
        "mi355x": 290000, "mi350x": 290000,
    },
    "max_gpu_memory_used_pct": 5,  # vLLM reserves ~90-95 % of each GPU: memory held by others breaks it
    "rdma_min_active_ports": 1,
    "rdma_allow_down_ports": False,
    "require_time_sync": False,     # unsynchronised / unknown clock: warn (true: fail)
    "require_gpudirect": False,     # no peermem / DMA-BUF path on RDMA clusters: warn (true: fail)
    "drift_fatal": ["driver_version", "cuda_version", "rocm_version", "gpu_model", "gpu_count"],
}

DRIFT_ATTRS = ("driver_version", "cuda_version", "rocm_version", "gpu_model", "gpu_count", "kernel",
               "engine_version")

FIX = {
    "probe": "Make the node reachable over SSH with Python >= 3.9 and re-run; see the probe task's error above.",
    "vendor": "Fix kimi_k3_accelerator in the inventory, or install the vendor driver and tools on the node.",
    "gpu_tools": "Install/repair the vendor tool (nvidia-smi ships with the driver; amd-smi with ROCm). "
                 "'driver_not_loaded': load the module or reboot; 'driver_library_mismatch': reboot after the "
                 "driver upgrade.",
    "gpu_driver": "Install NVIDIA driver r580 or newer (open kernel module) and reboot; the K3 image is cu130 only.",
    "cuda_version": "Upgrade the driver to one that serves CUDA 13 (r580+); 'not found' means libcuda "
                    "(user-mode driver) is missing.",
    "rocm_version": "Upgrade ROCm (amdgpu DKMS + user space) to the floor; keep all nodes on one release.",
    "gpu_model": "Put the node in an inventory whose kimi_k3_accelerator matches, or replace the node.",
    "gpu_count": "A GPU is missing: check `nvidia-smi -L` / `amd-smi list`, dmesg (Xid / fallen off the bus), "
                 "reseat or RMA; or lower kimi_k3_gpus_per_node.",
    "gpu_busy": "Something else holds GPU memory: find it (`nvidia-smi --query-compute-apps=pid,used_memory "
                "--format=csv`, `amd-smi process`) and stop it, or stop the old vLLM container (teardown).",
    "gpu_memory": "GPU reports less memory than the model needs (wrong SKU, MIG/partition mode, or ECC retired "
                  "pages); disable MIG / use SPX-NPS1 or replace the node.",
    "fabric": "NVLink fabric registration incomplete: check the NVLink switch trays (NMX-Controller / Global FM), "
              "wait for 'In Progress' to finish, then `nvidia-smi -q | grep -A10 Fabric`.",
    "nvlink_domain": "All nodes of one deployment must be in one NVL72 NVLink domain (same ClusterUUID and "
                     "CliqueId): pick trays from the same rack/partition.",
    "imex": "Start nvidia-imex on every tray (`systemctl restart nvidia-imex`), list every tray's IP in "
            "/etc/nvidia-imex/nodes_config.cfg, open TCP 50000 between trays; `nvidia-imex-ctl -N` must say "
            "Domain State: UP.",
    "imex_channel": "Create the IMEX channel: `mknod /dev/nvidia-caps-imex-channels/channel0 c <major> 0` "
                    "(major from /proc/devices, nvidia-caps-imex-channels); it does not survive a reboot.",
    "rdma": "Bring the RDMA ports up (cable/switch/subnet manager; `ibv_devinfo`, `rdma link`), install rdma-core "
            "(ibverbs-utils), or set preflight_rdma_allow_down_ports if a rail is intentionally unused.",
    "gpudirect": "Enable GPUDirect RDMA: load nvidia_peermem (`modprobe nvidia_peermem`) or use DMA-BUF "
                 "(open kernel module, recent rdma-core).",
    "engine": "Start the container engine and make kimi_k3_docker_host point to its socket.",
    "engine_gpu": "Make the engine GPU-capable: NVIDIA Container Toolkit (`nvidia-ctk runtime configure "
                  "--runtime=docker`) or a CDI spec (`nvidia-ctk cdi generate`); AMD: /dev/kfd and /dev/dri "
                  "(amdgpu driver loaded).",
    "shm": "Enlarge /dev/shm (mount -o remount,size=...) or lower kimi_k3_shm_size / preflight_min_shm.",
    "memlock": "Raise the memlock limit to unlimited (limits.d `* - memlock unlimited`, systemd "
               "LimitMEMLOCK=infinity for dockerd) or adjust kimi_k3_memlock.",
    "disk": "Free space on the model cache filesystem (or point kimi_k3_model_cache_dir elsewhere), or "
            "pre-download the weights there.",
    "ports": "Stop whatever listens on the port (`ss -ltnp`) or change kimi_k3_api_port / kimi_k3_master_port / "
             "kimi_k3_dp_rpc_port; 'not_local' means the address is not configured on this node "
             "(kimi_k3_internal_address / kimi_k3_api_host).",
    "time_sync": "Enable NTP (chronyd or systemd-timesyncd) and wait for synchronisation.",
    "probe_errors": "Look at the listed probe errors; install the missing tools where they matter.",
    "drift": "Bring all nodes to the same version (drivers, ROCm, kernel, engine) before deploying.",
}


def merge_thresholds(thresholds):
    out = dict(DEFAULT_THRESHOLDS)
    for k, v in (thresholds or {}).items():
        if v is None and k != "min_shm":
            continue
        if k == "min_gpu_memory_mib" and isinstance(v, dict):
            merged = dict(DEFAULT_THRESHOLDS["min_gpu_memory_mib"])
            merged.update(v)
            v = merged
        out[k] = v
    return out


def _f(host, check, status, observed, expected, fix_key=None):
    return {"host": host, "check": check, "status": status, "observed": _s(observed), "expected": _s(expected),
            "fix": "" if status == "pass" else FIX.get(fix_key or check, "")}


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
    """"head" or "worker": the expectation's role, else membership of vllm_head (head when groups are unknown)."""
    if exp.get("role"):
        return exp["role"]
    groups = exp.get("groups")
    if groups is None:
        return "head"
    return "head" if "vllm_head" in groups else "worker"


def _gpus_per_node(exp):
    n = P.to_int(exp.get("gpus_per_node"))
    if n:
        return n
    return DEFAULT_GPUS_PER_NODE.get(exp.get("accelerator"), 8)


def _multi_node(exp):
    return (P.to_int(exp.get("nnodes")) or 1) > 1


# --------------------------------------------------------------------------------------------- per host

def check_host(host, facts, exp, th):
    """All single-node findings of ``host``."""
    out = []
    if not facts:
        out.append(_f(host, "probe", "fail", "no node_probe facts (host unreachable or probe failed)",
                      "node_probe facts"))
        return out
    acc = exp.get("accelerator")
    want_vendor = ACCELERATOR_VENDOR.get(acc)
    vendor = facts.get("vendor")
    interconnect = exp.get("interconnect")
    multi = _multi_node(exp)

    # vendor / tools
    if want_vendor is None:
        out.append(_f(host, "vendor", "fail", "kimi_k3_accelerator=%s" % acc, " | ".join(sorted(ACCELERATOR_VENDOR))))
    elif vendor != want_vendor:
        out.append(_f(host, "vendor", "fail", vendor or "no GPU stack found", want_vendor))
    else:
        out.append(_f(host, "vendor", "pass", vendor, want_vendor))
    tools = facts.get("tools") or {}
    if want_vendor == "nvidia":
        status = (facts.get("nvidia") or {}).get("smi_status")
        if tools.get("nvidia-smi") is None:
            out.append(_f(host, "gpu_tools", "fail", "nvidia-smi not found", "nvidia-smi working"))
        elif status not in ("ok", "csv_only"):
            out.append(_f(host, "gpu_tools", "fail", "nvidia-smi: %s" % status, "nvidia-smi working"))
        else:
            out.append(_f(host, "gpu_tools", "pass", "nvidia-smi %s" % status, "nvidia-smi working"))
    elif want_vendor == "amd":
        src = (facts.get("amd") or {}).get("source")
        out.append(_f(host, "gpu_tools", "pass" if src else "fail", src or "amd-smi/rocm-smi missing or failing",
                      "amd-smi (or rocm-smi) working"))

    # driver / runtime versions
    if want_vendor == "nvidia":
        drv = facts.get("driver_version")
        ok = P.version_ge(drv, th["min_driver"])
        out.append(_f(host, "gpu_driver", "pass" if ok else "fail", drv, ">= %s" % th["min_driver"]))
        kdrv = (facts.get("nvidia") or {}).get("driver_version_kernel")
        if drv and kdrv and drv != kdrv:
            out.append(_f(host, "gpu_driver", "fail", "kernel module %s, user space %s" % (kdrv, drv),
                          "same version (reboot after upgrade)"))
        cuda = facts.get("cuda_version")
        ok = P.version_ge(cuda, th["min_cuda"])
        out.append(_f(host, "cuda_version", "pass" if ok else "fail", cuda or "not found", ">= %s" % th["min_cuda"]))
    elif want_vendor == "amd":
        rocm = facts.get("rocm_version")
        ok = P.version_ge(rocm, th["min_rocm"])
        out.append(_f(host, "rocm_version", "pass" if ok else "fail", rocm or "not found", ">= %s" % th["min_rocm"]))

    # GPUs
    model = facts.get("gpu_model")
    out.append(_f(host, "gpu_model", "pass" if model == acc else "fail",
                  "%s (%s)" % (model, ", ".join(facts.get("gpu_names") or []) or "no GPUs"), acc))
    want = _gpus_per_node(exp)
    count = facts.get("gpu_count") or 0
    if count < want:
        out.append(_f(host, "gpu_count", "fail", count, want))
    elif count > want:
        out.append(_f(host, "gpu_count", "warn", "%d (only %d used)" % (count, want), want))
    else:
        out.append(_f(host, "gpu_count", "pass", count, want))
    floor = (th.get("min_gpu_memory_mib") or {}).get(acc)
    if floor and facts.get("gpus"):
        small = [g for g in facts["gpus"] if (g.get("memory_total_mib") or 0) < floor]
        if small:
            obs = ", ".join("GPU %s: %s MiB" % (g.get("index"), g.get("memory_total_mib") or "unknown")
                            for g in small)
            out.append(_f(host, "gpu_memory", "fail", obs, ">= %d MiB per GPU" % floor))
        else:
            out.append(_f(host, "gpu_memory", "pass", "min %s MiB" % facts.get("gpu_memory_mib_min"),
                          ">= %d MiB per GPU" % floor))

        pct = float(th.get("max_gpu_memory_used_pct") or 0)
        busy = [g for g in facts["gpus"] if g.get("memory_used_mib") and g.get("memory_total_mib")
                and 100.0 * g["memory_used_mib"] / g["memory_total_mib"] > pct]
        held = (facts.get("deployment") or {}).get("running")
        if busy and held:
            out.append(_f(host, "gpu_busy", "pass", "held by the running deployment (container %s)"
                          % facts["deployment"].get("container"), "<= %g %% used per GPU" % pct))
        elif busy:
            obs = ", ".join("GPU %s: %s of %s MiB used" % (g.get("index"), g["memory_used_mib"],
                                                           g["memory_total_mib"]) for g in busy)
            out.append(_f(host, "gpu_busy", "fail", obs, "<= %g %% used per GPU" % pct))
        else:
            out.append(_f(host, "gpu_busy", "pass", "idle", "<= %g %% used per GPU" % pct))

    # interconnect
    if multi and interconnect == "nvlink":
        fab = facts.get("fabric") or {}
        if facts.get("mnnvl"):
            out.append(_f(host, "fabric", "pass", "Completed, ClusterUUID %s, CliqueId %s" % (
                fab.get("cluster_uuid"), fab.get("clique_id")), "MNNVL: Completed/Success/Healthy, non-zero "
                                                                "ClusterUUID on every GPU"))
        else:
            out.append(_f(host, "fabric", "fail", "; ".join(fab.get("reasons") or []) or "not MNNVL",
                          "MNNVL: Completed/Success/Healthy, non-zero ClusterUUID on every GPU"))
        imex = facts.get("imex") or {}
        if not imex.get("present"):
            out.append(_f(host, "imex", "fail", "nvidia-imex-ctl not found", "IMEX Domain State: UP"))
        elif imex.get("up"):
            out.append(_f(host, "imex", "pass", "Domain State: UP, %d nodes READY" % len(imex.get("nodes") or []),
                          "IMEX Domain State: UP"))
        else:
            bad = ["%s %s" % (n.get("address"), n.get("state")) for n in imex.get("nodes") or []
                   if n.get("state") != "READY"]
            obs = "Domain State: %s" % (imex.get("domain_state") or "unknown")
            if bad:
                obs += "; not READY: " + ", ".join(bad)
            if imex.get("matrix_ok") is False:
                obs += "; connectivity matrix not all C"
            if imex.get("error"):
                obs += "; " + imex["error"]
            out.append(_f(host, "imex", "fail", obs, "IMEX Domain State: UP"))
        chan = (facts.get("devices") or {}).get("imex_channel")
        out.append(_f(host, "imex_channel", "pass" if chan else "fail",
                      "/dev/nvidia-caps-imex-channels/channel0 %s" % ("present" if chan else "missing"),
                      "channel0 present"))
    if multi and interconnect == "rdma":
        rdma = facts.get("rdma") or {}
        ports = rdma.get("ports") or []
        down = ["%s/%s %s" % (p.get("device"), p.get("port"), p.get("state") or "unknown") for p in ports
                if p.get("state") != "ACTIVE"]
        active = rdma.get("active_ports") or 0
        obs = "%d of %d ports ACTIVE (%s)" % (active, len(ports), rdma.get("source") or "no RDMA devices found")
        if down:
            obs += "; not active: " + ", ".join(down)
        exp_txt = ">= %d ACTIVE port(s)%s" % (
            th["rdma_min_active_ports"], "" if th["rdma_allow_down_ports"] else ", none down")
        bad = active < th["rdma_min_active_ports"] or (down and not th["rdma_allow_down_ports"])
        out.append(_f(host, "rdma", "fail" if bad else "pass", obs, exp_txt))
        if want_vendor == "nvidia":
            gd = facts.get("gpudirect") or {}
            mode = gd.get("mode") or "none"
            st = "pass" if mode != "none" else ("fail" if th["require_gpudirect"] else "warn")
            out.append(_f(host, "gpudirect", st, mode, "nvidia_peermem loaded or DMA-BUF (open kernel module)"))

    # container engine
    eng = facts.get("engine") or {}
    if eng.get("reachable"):
        out.append(_f(host, "engine", "pass", "%s via %s" % (eng.get("version"), eng.get("source")),
                      "engine reachable at %s" % (exp.get("docker_host") or eng.get("docker_host"))))
    else:
        out.append(_f(host, "engine", "fail", eng.get("error") or "not reachable",
                      "engine reachable at %s" % (exp.get("docker_host") or eng.get("docker_host"))))
    gs = eng.get("gpu_support") or {}
    want_gpu = "NVIDIA runtime/hook or CDI spec" if want_vendor == "nvidia" else "/dev/kfd and /dev/dri/renderD*"
    out.append(_f(host, "engine_gpu", "pass" if gs.get("ok") else "fail",
                  ", ".join(gs.get("via") or []) or "no GPU support found", want_gpu))

    # host resources
    min_shm = th.get("min_shm")
    min_shm = P.parse_size(min_shm if min_shm not in (None, "") else exp.get("shm_size"))
    shm = facts.get("shm_bytes")
    if min_shm is None or min_shm <= 0:
        out.append(_f(host, "shm", "pass", fmt_bytes(shm), "no minimum"))
    else:
        out.append(_f(host, "shm", "pass" if shm is not None and shm >= min_shm else "fail", fmt_bytes(shm),
                      ">= %s" % fmt_bytes(min_shm)))
    want_ml = P.parse_size(exp.get("memlock") if exp.get("memlock") is not None else -1)
    ml = facts.get("memlock")
    ok = ml == -1 or (want_ml is not None and want_ml != -1 and ml is not None and ml >= want_ml)
    out.append(_f(host, "memlock", "pass" if ok else "fail", fmt_bytes(ml), ">= %s" % fmt_bytes(want_ml)))
    disk = facts.get("disk") or {}
    weights = facts.get("weights") or {}
    min_disk = int(float(th["min_free_disk_gb"]) * 1000 ** 3)
    if weights.get("present"):
        obs = "weights present at %s (%s)" % (weights.get("path"), fmt_bytes(weights.get("bytes")))
        out.append(_f(host, "disk", "pass", obs, ">= %s GB free or weights present" % th["min_free_disk_gb"]))
    else:
        free = disk.get("free_bytes")
        where = disk.get("path") if disk.get("exists") else "%s (missing; measured on %s)" % (
            disk.get("path"), disk.get("checked_path"))
        out.append(_f(host, "disk", "pass" if free is not None and free >= min_disk else "fail",
                      "%.0f GB free on %s" % ((free or 0) / 1000.0 ** 3, where) if free is not None else "unknown",
                      ">= %s GB free or weights present" % th["min_free_disk_gb"]))

    # ports
    for p in facts.get("ports") or []:
        st = p.get("state")
        label = "%s %s:%s" % (p.get("name"), p.get("address"), p.get("port"))
        if st == "free":
            out.append(_f(host, "ports", "pass", "%s free" % label, "free"))
        elif st == "in_use" and (facts.get("deployment") or {}).get("running"):
            out.append(_f(host, "ports", "pass", "%s in use by the running deployment (container %s)"
                          % (label, facts["deployment"].get("container")), "free or held by this deployment"))
        elif st == "in_use":
            severity = "fail" if role_of(exp) == "head" or p.get("name") == "api" else "warn"
            out.append(_f(host, "ports", severity, "%s in use" % label, "free"))
        elif st == "not_local":
            out.append(_f(host, "ports", "fail", "%s: address not configured on this node" % label, "free"))
        else:
            out.append(_f(host, "ports", "warn", "%s: %s" % (label, st), "free"))

    # time, probe errors
    ts = facts.get("time_sync") or {}
    if ts.get("synchronized") is True:
        out.append(_f(host, "time_sync", "pass", "synchronized (%s)" % ts.get("source"), "synchronized"))
    else:
        obs = "not synchronized (%s)" % ts.get("source") if ts.get("synchronized") is False else \
            "unknown (no timedatectl/chronyc)"
        out.append(_f(host, "time_sync", "fail" if th["require_time_sync"] else "warn", obs, "synchronized"))
    if facts.get("errors"):
        out.append(_f(host, "probe_errors", "warn", "; ".join(facts["errors"]), "no probe errors"))
    return out


# --------------------------------------------------------------------------------------------- cluster

def _attr(facts, name):
    if name == "engine_version":
        return (facts.get("engine") or {}).get("version")
    return facts.get(name)


def drift_table(probes, hosts):
    """{attr: {value: [hosts]}} over hosts with facts."""
    table = {}
    for attr in DRIFT_ATTRS:
        values = {}
        for h in hosts:
            facts = probes.get(h)
            if not facts:
                continue
            v = _attr(facts, attr)
            # Unknown values are not drift: the per-host checks already fail them (missing tool, no GPUs).
            if v is None or v == "unknown" or (attr == "gpu_count" and not v):
                continue
            if attr in ("cuda_version",) and facts.get("vendor") != "nvidia":
                continue
            if attr in ("rocm_version",) and facts.get("vendor") != "amd":
                continue
            values.setdefault(_s(v), []).append(h)
        if values:
            table[attr] = values
    return table


def check_drift(table, th):
    out = []
    for attr in DRIFT_ATTRS:
        values = table.get(attr) or {}
        if len(values) <= 1:
            if values:
                out.append(_f(CLUSTER, "drift_" + attr, "pass", "all %s" % next(iter(values)), "identical"))
            continue
        obs = "; ".join("%s: %s" % (v, ", ".join(hs)) for v, hs in sorted(values.items(), key=lambda x: -len(x[1])))
        status = "fail" if attr in (th.get("drift_fatal") or []) else "warn"
        out.append(_f(CLUSTER, "drift_" + attr, status, obs, "identical on every node", "drift"))
    return out


def check_nvlink_domain(probes, expected, hosts):
    """Every NVLink node of the deployment in one fabric: same ClusterUUID and CliqueId. The reference domain is
    the one of most nodes (the head's on a tie); nodes elsewhere fail."""
    nv_hosts = [h for h in hosts if probes.get(h) and expected.get(h, {}).get("interconnect") == "nvlink"
                and _multi_node(expected.get(h, {}))]
    if not nv_hosts:
        return []
    groups = {}
    for h in nv_hosts:
        fab = probes[h].get("fabric") or {}
        key = (fab.get("cluster_uuid"), fab.get("clique_id"))
        groups.setdefault(key, []).append(h)
    heads = [h for h in nv_hosts if role_of(expected.get(h, {})) == "head"]

    def rank(item):
        key, hs = item
        valid = key[0] not in (None, P.ZERO_UUID)
        return (valid, len(hs), any(h in heads for h in hs))

    ref_key, ref_hosts = sorted(groups.items(), key=rank, reverse=True)[0]
    ref_txt = "ClusterUUID %s, CliqueId %s (%s)" % (ref_key[0], ref_key[1], ", ".join(ref_hosts))
    out = []
    for h in nv_hosts:
        fab = probes[h].get("fabric") or {}
        key = (fab.get("cluster_uuid"), fab.get("clique_id"))
        obs = "ClusterUUID %s, CliqueId %s" % key
        if key == ref_key and ref_key[0] not in (None, P.ZERO_UUID):
            out.append(_f(h, "nvlink_domain", "pass", obs, ref_txt))
        else:
            out.append(_f(h, "nvlink_domain", "fail", obs, ref_txt))
    return out


def check_imex_membership(probes, expected, hosts):
    """Warn when a deployment node's internal address is missing from another node's IMEX node list."""
    out = []
    nv_hosts = [h for h in hosts if probes.get(h) and expected.get(h, {}).get("interconnect") == "nvlink"
                and _multi_node(expected.get(h, {}))]
    addrs = dict((h, expected.get(h, {}).get("internal_address")) for h in nv_hosts)
    for h in nv_hosts:
        imex = probes[h].get("imex") or {}
        listed = set(n.get("address") for n in imex.get("nodes") or [])
        if not listed:
            continue
        missing = ["%s (%s)" % (o, a) for o, a in sorted(addrs.items()) if a and a not in listed]
        if missing:
            out.append(_f(h, "imex_nodes", "warn", "IMEX node list lacks " + ", ".join(missing),
                          "every deployment node in nodes_config.cfg", "imex"))
    return out


def _sort_key(order):
    def key(f):
        return (STATUSES.index(f["status"]), order.get(f["host"], -1), f["check"])
    return key


def run_checks(probes, expected, thresholds=None, hosts=None):
    """Evaluate every check for every host; see module docstring."""
    th = merge_thresholds(thresholds)
    hosts = list(hosts or sorted(set(expected) | set(probes)))
    findings = []
    for h in hosts:
        findings.extend(check_host(h, probes.get(h), expected.get(h) or {}, th))
    findings.extend(check_nvlink_domain(probes, expected, hosts))
    findings.extend(check_imex_membership(probes, expected, hosts))
    table = drift_table(probes, hosts)
    findings.extend(check_drift(table, th))
    order = dict((h, i) for i, h in enumerate([CLUSTER] + hosts))
    findings.sort(key=_sort_key(order))
    return {"findings": findings, "drift": table, "summary": summarize(findings, hosts)}


def summarize(findings, hosts):
    counts = dict((s, sum(1 for f in findings if f["status"] == s)) for s in STATUSES)
    failed_hosts = sorted(set(f["host"] for f in findings if f["status"] == "fail" and f["host"] != CLUSTER))
    return {"hosts": len(hosts), "ok": counts["fail"] == 0, "fail": counts["fail"], "warn": counts["warn"],
            "pass": counts["pass"], "failed_hosts": failed_hosts,
            "failed_checks": sorted(set("%s:%s" % (f["host"], f["check"]) for f in findings
                                        if f["status"] == "fail"))}


def expected_for_host(hostvars, groups=None, nnodes=None, defaults=None):
    """Build one host's ``expected`` dict from its (inventory) variables. ``defaults`` supplies fallbacks
    (the role defaults); the role normally passes the already-resolved ``preflight_*`` values."""
    d = dict(defaults or {})
    v = dict(hostvars or {})

    def pick(name, fallback=None):
        val = v.get(name)
        return val if val not in (None, "") else d.get(name, fallback)

    return {
        "accelerator": pick("kimi_k3_accelerator"),
        "gpus_per_node": pick("kimi_k3_gpus_per_node"),
        "interconnect": pick("kimi_k3_interconnect"),
        "nnodes": nnodes,
        "role": "head" if "vllm_head" in (groups or []) else "worker",
        "api_port": pick("kimi_k3_api_port", 8000),
        "master_port": pick("kimi_k3_master_port", 29501),
        "dp_rpc_port": pick("kimi_k3_dp_rpc_port", 29550),
        "model_cache_dir": pick("kimi_k3_model_cache_dir", "/data/hf-cache"),
        "memlock": pick("kimi_k3_memlock", -1),
        "shm_size": pick("kimi_k3_shm_size", "64g"),
        "api_host": pick("kimi_k3_api_host", "0.0.0.0"),
        "internal_address": pick("kimi_k3_internal_address") or v.get("ansible_host"),
    }
