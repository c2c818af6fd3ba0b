# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Gather everything ``node_probe`` reports, through an injectable I/O object.

Standard library only, Python >= 3.9 (runs on the managed node). ``collect(io, options)`` calls tools through
``io`` only, so unit tests replay fixture nodes (``tests/unit/fixtures/probes/``) and the module passes an
``AnsibleModule``-backed implementation. A missing tool is never an exception: it is recorded in ``tools``
(``None``) and, when it matters, in ``errors``.

Kernel state (paths under ``/proc`` and ``/sys``: loaded modules, NVIDIA driver parameters, module parameters,
sysfs RDMA devices) is read below ``ProbeIO(root=...)``, the node_probe option ``probe_root`` (environment
``KIMI_K3_PROBE_ROOT``; default ``/``). Real nodes read the real paths; the rehearsal cluster's nodes share the
host's kernel, so their profile's kernel state is written below a root of their own (sim/nodetools/sim-node-init)
and the sim inventories point ``preflight_probe_root`` at it.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import glob
import json
import os
import re
import socket
import time

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine import api as engine_api
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.probe import access as preflight_access
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.probe import parsers as P
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.probe import weight_read

SCHEMA_VERSION = 1

TOOLS = ("nvidia-smi", "nvidia-imex-ctl", "nvidia-ctk", "amd-smi", "rocm-smi", "ibv_devinfo", "docker",
         "timedatectl", "chronyc", "timeout", "ip")
IP_ADDR_CMD = ["ip", "-j", "addr", "show"]

NVIDIA_XML_CMD = ["nvidia-smi", "-q", "-x"]
NVIDIA_CSV_CMD = ["nvidia-smi", "--query-gpu=" + ",".join(P.NVIDIA_QUERY_FIELDS), "--format=csv,noheader,nounits"]
IMEX_CMD = ["nvidia-imex-ctl", "-N"]
AMD_STATIC_CMD = ["amd-smi", "static", "--asic", "--bus", "--vram", "--driver", "--json"]
AMD_LIST_CMD = ["amd-smi", "list", "--json"]
AMD_VERSION_CMD = ["amd-smi", "version", "--json"]
AMD_MEM_CMD = ["amd-smi", "metric", "--mem-usage", "--json"]
ROCM_SMI_CMD = ["rocm-smi", "--showproductname", "--showdriverversion", "--json"]
IBV_CMD = ["ibv_devinfo"]
DOCKER_VERSION_ARGS = ["version", "--format", "{{json .}}"]
DOCKER_INFO_ARGS = ["info", "--format", "{{json .}}"]
TIMEDATECTL_CMD = ["timedatectl", "show", "-p", "NTPSynchronized", "--value"]
CHRONYC_CMD = ["chronyc", "-n", "tracking"]

NVIDIA_HOOKS = ("nvidia-container-runtime-hook", "nvidia-container-runtime", "nvidia-container-toolkit")
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
KERNEL_DIRS = ("/proc/", "/sys/")
NVIDIA_PARAMS = "/proc/driver/nvidia/params"


# Where vendor tools live besides the PATH (sbin for root-only installs, ROCm's own bin).
TOOL_DIRS = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/sbin", "/opt/rocm/bin"]


def module_io(module, root="/"):
    """A ``ProbeIO`` for a module running on the node: commands through ``module.run_command`` in the C locale (the
    parsers read English tool output), tools found on the PATH and in ``TOOL_DIRS``."""
    def run(argv):
        return module.run_command(argv, check_rc=False, environ_update={"LC_ALL": "C", "LANG": "C"})

    def which(name):
        return module.get_bin_path(name, opt_dirs=TOOL_DIRS)

    return ProbeIO(run=run, which=which, root=root or "/")


class ProbeIO(object):
    """Real node I/O. ``run`` is supplied by the caller (AnsibleModule.run_command in the module)."""

    def __init__(self, run=None, which=None, command_timeout=30, root="/"):
        self._run = run
        self._which = which
        self.command_timeout = command_timeout
        self.root = root or "/"

    def kpath(self, path):
        """``path`` as read on this node: kernel state (/proc, /sys) below the probe root."""
        if self.root == "/" or not path.startswith(KERNEL_DIRS):
            return path
        return os.path.join(self.root, path.lstrip("/"))

    # --- commands
    def which(self, name):
        if self._which is not None:
            return self._which(name)
        for d in os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin").split(os.pathsep) + [
                "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin", "/opt/rocm/bin"]:
            p = os.path.join(d, name)
            if os.path.isfile(p) and os.access(p, os.X_OK):
                return p
        return None

    def run(self, argv):
        """-> (rc, stdout, stderr); never raises."""
        try:
            return self._run(argv)
        except Exception as exc:  # pylint: disable=broad-except
            return 127, "", str(exc)

    # --- filesystem
    def read(self, path):
        try:
            with open(self.kpath(path), "r") as f:
                return f.read()
        except (IOError, OSError, UnicodeDecodeError):
            return None

    def exists(self, path):
        return os.path.exists(self.kpath(path))

    def glob(self, pattern):
        return sorted(glob.glob(self.kpath(pattern)))

    def listdir(self, path):
        try:
            return sorted(os.listdir(self.kpath(path)))
        except OSError:
            return []

    def statvfs(self, path):
        """-> {'total': bytes, 'free': bytes} of the filesystem holding ``path`` or None."""
        try:
            st = os.statvfs(path)
        except OSError:
            return None
        return {"total": st.f_frsize * st.f_blocks, "free": st.f_frsize * st.f_bavail}

    def file_size(self, path):
        try:
            return os.stat(path).st_size
        except OSError:
            return None

    # --- process and kernel
    def python_module(self, name):
        """(interpreter, version, path of module ``name`` or None) for the Python running the probe - the node's
        ansible_python_interpreter, the one community.docker's modules will run with."""
        import importlib.util
        import sys
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        origin = getattr(spec, "origin", None) if spec is not None else None
        return sys.executable, "%d.%d.%d" % sys.version_info[:3], origin

    def memlock(self):
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        inf = resource.RLIM_INFINITY
        return (-1 if soft == inf else soft), (-1 if hard == inf else hard)

    def access(self, docker_host, paths):
        """Who the probe runs as and what it may write (preflight_access.observe_access)."""
        return preflight_access.observe_access(docker_host, paths)

    def uname(self):
        u = os.uname()
        return {"kernel": u.release, "arch": u.machine, "hostname": u.nodename}

    # --- network
    def http_get(self, engine, path, timeout=5.0):
        """GET ``path`` from the engine ``engine`` names (an engine URL, or engine_api's client options: unix://,
        tcp:// with or without TLS, ssh://) -> (status, body text)."""
        status, body = engine_api.engine_get(engine, path, timeout=timeout)
        return status, body.decode("utf-8", "replace")

    def port_state(self, address, port):
        """Try to bind ``address:port`` (TCP). -> 'free' | 'in_use' | 'not_local' | 'error: ...'."""
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        s = socket.socket(family, socket.SOCK_STREAM)
        try:
            # Same as uvicorn/torch: TIME_WAIT leftovers do not count as taken, listeners do.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((address, int(port)))
            return "free"
        except socket.error as exc:
            if exc.errno == errno.EADDRINUSE:
                return "in_use"
            if exc.errno == errno.EADDRNOTAVAIL:
                return "not_local"
            return "error: %s" % exc
        finally:
            s.close()


# ============================================================================================= collectors

class _Ctx(object):
    def __init__(self, io, options):
        self.io = io
        self.options = options
        self.tools = {}
        self.errors = []
        self.commands = []
        for t in TOOLS:
            self.tools[t] = io.which(t)

    def have(self, tool):
        return self.tools.get(tool) is not None

    def run(self, argv):
        tool = argv[0]
        path = self.tools.get(tool)
        if path is None:
            return 127, "", "%s not found" % tool
        cmd = [path] + list(argv[1:])
        timeout = self.options.get("command_timeout")
        if timeout and self.tools.get("timeout"):
            cmd = [self.tools["timeout"], str(int(timeout))] + cmd
        t0 = time.monotonic()
        rc, out, err = self.io.run(cmd)
        self.commands.append({"command": " ".join(argv[:2]), "rc": rc, "seconds": round(time.monotonic() - t0, 3)})
        if rc == 124 and timeout and self.tools.get("timeout"):
            self.error("%s timed out after %ss" % (" ".join(argv), timeout))
        return rc, out or "", err or ""

    def error(self, msg):
        if msg not in self.errors:
            self.errors.append(msg)


def _norm_bus_id(bus_id):
    """``00000008:06:00.0`` / ``0008:06:00.0`` -> ``0008:06:00.0`` (lower case)."""
    if not bus_id:
        return None
    m = re.match(r"^([0-9a-fA-F]+):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-9a-fA-F])\Z", bus_id.strip())
    if not m:
        return bus_id.strip().lower()
    return "%04x:%s:%s.%s" % (int(m.group(1), 16), m.group(2).lower(), m.group(3).lower(), m.group(4).lower())


def collect_nvidia(ctx):
    io = ctx.io
    res = {"present": False, "smi_status": None, "driver_version": None, "driver_version_kernel": None,
           "cuda_version": None, "open_module": None, "gpus": []}
    proc = io.read("/proc/driver/nvidia/version")
    if proc:
        pv = P.parse_proc_driver_version(proc)
        res["driver_version_kernel"] = pv["driver_version"]
        res["open_module"] = pv["open_module"]
        res["present"] = True
    if ctx.have("nvidia-smi"):
        res["present"] = True
        _nvidia_smi_xml(ctx, res)
        _nvidia_smi_csv(ctx, res)
    elif res["present"] or io.exists("/dev/nvidiactl"):
        res["present"] = True
        ctx.error("nvidia-smi not found although the NVIDIA driver is present")
        res["smi_status"] = "missing"
    if res["driver_version"] is None:
        res["driver_version"] = res["driver_version_kernel"]
    if not res["gpus"] and res["present"] and res["smi_status"] != "ok":
        # Fallback count from the kernel driver's per-GPU directories.
        dirs = io.listdir("/proc/driver/nvidia/gpus")
        res["gpus"] = [{"index": i, "name": None, "uuid": None, "pci_bus_id": d, "memory_total_mib": None,
                        "compute_cap": None, "fabric": {}} for i, d in enumerate(dirs)]
    for g in res["gpus"]:
        g["model"] = P.normalize_model(g.get("name"), g.get("memory_total_mib"), g.get("pci_device_id"))
    return res


def _nvidia_smi_xml(ctx, res):
    """``nvidia-smi -q -x`` into ``res``: driver, CUDA and the GPU list, or the failure's class."""
    rc, out, err = ctx.run(NVIDIA_XML_CMD)
    if rc != 0:
        res["smi_status"] = P.classify_nvidia_smi_failure(rc, out + err)
        ctx.error("nvidia-smi -q -x failed (rc %s): %s" % (rc, (out + err).strip()[:300]))
        return
    x = P.parse_nvidia_smi_xml(out)
    if x.get("error"):
        res["smi_status"] = "unparsable"
        ctx.error("nvidia-smi -q -x: %s" % x["error"])
        return
    res["smi_status"] = "ok"
    res["driver_version"] = x["driver_version"]
    res["cuda_version"] = x["cuda_version"]
    res["gpus"] = x["gpus"]


def _nvidia_smi_csv(ctx, res):
    """The CSV query completes the XML's GPUs (index, compute capability, UUID), or is the GPU list without it."""
    rc, out, _err = ctx.run(NVIDIA_CSV_CMD)
    if rc != 0:
        return
    rows = P.gpus_from_csv(out)
    by_bus = dict((_norm_bus_id(r["pci_bus_id"]), r) for r in rows)
    if res["gpus"]:
        for g in res["gpus"]:
            r = by_bus.get(_norm_bus_id(g.get("pci_bus_id")))
            if r:
                g["index"] = r["index"] if r["index"] is not None else g["index"]
                g["compute_cap"] = r["compute_cap"]
                g["uuid"] = g.get("uuid") or r["uuid"]
    else:
        # XML unavailable but CSV works: still a full GPU list.
        res["gpus"] = [dict(r, fabric={}) for r in rows]
        if rows and res["driver_version"] is None:
            res["driver_version"] = rows[0].get("driver_version")
        if rows and res["smi_status"] in (None, "unparsable"):
            res["smi_status"] = "csv_only"
    for g in res["gpus"]:
        g.pop("driver_version", None)


def collect_imex(ctx):
    res = {"present": False, "domain_state": None, "up": False, "nodes": [], "all_ready": None, "matrix_ok": None,
           "channel": ctx.io.exists("/dev/nvidia-caps-imex-channels/channel0")}
    if not ctx.have("nvidia-imex-ctl"):
        return res
    res["present"] = True
    rc, out, err = ctx.run(IMEX_CMD)
    parsed = P.parse_imex_ctl(out)
    res.update(parsed)
    if rc != 0:
        res["up"] = False
        res["error"] = (err or out).strip()[:300] or "rc %s" % rc
    return res


def _amd_memory(ctx, gpus):
    """Used (and, where ``static`` lacked it, total) VRAM per GPU from ``amd-smi metric --mem-usage``."""
    rc, out, err = ctx.run(AMD_MEM_CMD)
    mem = P.parse_amd_smi_metric_mem(out) if rc == 0 else {}
    if rc == 0 and not mem:
        ctx.error("amd-smi metric --mem-usage: output unreadable (%s)" % (out.strip()[:120] or "empty"))
    for g in gpus:
        item = mem.get(g["index"]) or {}
        g["memory_used_mib"] = item.get("used_mib")
        if g.get("memory_total_mib") is None:
            g["memory_total_mib"] = item.get("total_mib")


def collect_amd(ctx):
    io = ctx.io
    res = {"present": False, "gpus": [], "rocm_version": None, "amdgpu_version": None, "source": None,
           "partitioned": False}
    present = ctx.have("amd-smi") or ctx.have("rocm-smi") or io.exists("/dev/kfd")
    if not present:
        return res
    res["present"] = True
    if ctx.have("amd-smi"):
        rc, out, err = ctx.run(AMD_STATIC_CMD)
        gpus = P.parse_amd_smi_static(out) if rc == 0 else []
        if rc != 0 or not gpus:
            rc2, out2, err2 = ctx.run(["amd-smi", "static", "--json"])
            gpus = P.parse_amd_smi_static(out2) if rc2 == 0 else []
            if not gpus:
                ctx.error("amd-smi static failed (rc %s): %s" % (rc, (out + err).strip()[:300]))
        if gpus:
            res["source"] = "amd-smi"
            rc, out, err = ctx.run(AMD_LIST_CMD)
            if rc == 0:
                lst = dict((x["index"], x) for x in P.parse_amd_smi_list(out))
                for g in gpus:
                    item = lst.get(g["index"]) or {}
                    g["uuid"] = g.get("uuid") or item.get("uuid")
                    g["pci_bus_id"] = g.get("pci_bus_id") or item.get("pci_bus_id")
                    if item.get("partition_id"):
                        res["partitioned"] = True
            _amd_memory(ctx, gpus)
            res["gpus"] = gpus
        rc, out, err = ctx.run(AMD_VERSION_CMD)
        if rc == 0:
            v = P.parse_amd_smi_version(out)
            res["rocm_version"] = v["rocm_version"]
            res["amdgpu_version"] = v["amdgpu_version"]
    if not res["gpus"] and ctx.have("rocm-smi"):
        rc, out, err = ctx.run(ROCM_SMI_CMD)
        parsed = P.parse_rocm_smi_productname(out)
        if parsed.get("error") or rc != 0:
            ctx.error("rocm-smi: %s" % (parsed.get("error") or "rc %s" % rc))
        else:
            res["gpus"] = parsed["gpus"]
            res["source"] = "rocm-smi"
            res["amdgpu_version"] = res["amdgpu_version"] or parsed["driver_version"]
    if not ctx.have("amd-smi") and not ctx.have("rocm-smi"):
        ctx.error("neither amd-smi nor rocm-smi found although /dev/kfd exists")
    if res["rocm_version"] is None:
        res["rocm_version"] = P.parse_rocm_version_file(io.read("/opt/rocm/.info/version"))
    if res["amdgpu_version"] is None:
        v = (io.read("/sys/module/amdgpu/version") or "").strip()
        res["amdgpu_version"] = v or None
    if res["amdgpu_version"] is None:
        drv = sorted(set(g.get("driver_version") for g in res["gpus"] if g.get("driver_version")))
        res["amdgpu_version"] = drv[0] if len(drv) == 1 else None
    for g in res["gpus"]:
        g["model"] = P.normalize_model(g.get("name"), g.get("memory_total_mib"), g.get("pci_device_id"),
                                       g.get("gfx"))
        g.setdefault("fabric", {})
    return res


def collect_rdma(ctx):
    io = ctx.io
    res = {"source": None, "ports": [], "active_ports": 0, "uverbs": len(io.glob("/dev/infiniband/uverbs*"))}
    if ctx.have("ibv_devinfo"):
        rc, out, err = ctx.run(IBV_CMD)
        if rc == 0:
            res["ports"] = P.parse_ibv_devinfo(out)
            res["source"] = "ibv_devinfo"
        elif "no ib devices" not in (out + err).lower():
            ctx.error("ibv_devinfo failed (rc %s): %s" % (rc, (out + err).strip()[:200]))
    if res["source"] is None:
        devs = io.listdir("/sys/class/infiniband")
        if devs:
            res["source"] = "sysfs"
        for dev in devs:
            for port in io.listdir("/sys/class/infiniband/%s/ports" % dev):
                base = "/sys/class/infiniband/%s/ports/%s/" % (dev, port)
                res["ports"].append({
                    "device": dev, "port": P.to_int(port),
                    "state": P.parse_ib_sysfs_state(io.read(base + "state")),
                    "link_layer": (io.read(base + "link_layer") or "").strip() or None,
                    "active_mtu": None,
                })
    res["active_ports"] = sum(1 for p in res["ports"] if p.get("state") == "ACTIVE")
    return res


def collect_kernel_state(io):
    """Loaded modules and the NVIDIA driver's parameters (None: no /proc/driver/nvidia/params, module not loaded)."""
    text = io.read("/proc/modules")
    return {"modules_readable": text is not None, "modules": sorted(P.parse_proc_modules(text)),
            "nvidia_params": P.parse_nvidia_params(io.read(NVIDIA_PARAMS))}


def collect_gpudirect(io, nvidia, kernel_state):
    modules = set(kernel_state["modules"])
    peermem = "nvidia_peermem" in modules
    dmabuf = bool(nvidia.get("open_module"))
    mode = "peermem" if peermem else ("dmabuf" if dmabuf else "none")
    return {"peermem_loaded": peermem, "dmabuf_capable": dmabuf, "mode": mode,
            "memory_peers": io.exists("/sys/kernel/mm/memory_peers")}


def collect_engine(ctx, engine):
    """The engine's version, runtimes and CDI devices; ``engine``: an engine URL or engine_api's client options."""
    io = ctx.io
    engine = engine_api.client_options(engine if isinstance(engine, dict) else {"docker_host": engine})
    docker_host = engine["docker_host"]
    res = {"reachable": False, "source": None, "docker_host": docker_host, "version": None, "api_version": None,
           "runtimes": [], "default_runtime": None, "nvidia_runtime": False, "cdi_spec_dirs": [], "cdi_devices": [],
           "nvidia_hook": None, "error": None}
    try:
        st_v, body_v = io.http_get(engine, "/version")
        st_i, body_i = io.http_get(engine, "/info")
        if st_v != 200 or st_i != 200:
            raise ValueError("HTTP %s/%s from the engine API" % (st_v, st_i))
        res.update(P.parse_docker_version(body_v))
        info = P.parse_docker_info(body_i)
        res["source"] = "socket"
        res["reachable"] = True
    except Exception as exc:  # pylint: disable=broad-except
        res["error"] = "engine API at %s: %s" % (docker_host, exc)
        info = None
        if ctx.have("docker"):
            rc, out, err = ctx.run(engine_api.cli_argv(engine, DOCKER_VERSION_ARGS))
            rc2, out2, err2 = ctx.run(engine_api.cli_argv(engine, DOCKER_INFO_ARGS))
            if rc == 0 and rc2 == 0:
                res.update(P.parse_docker_version(out))
                info = P.parse_docker_info(out2)
                res["source"] = "cli"
                res["reachable"] = True
                res["error"] = None
            else:
                res["error"] += "; docker CLI: %s" % (err or err2 or out or out2).strip()[:200]
    if info:
        for k in ("runtimes", "default_runtime", "nvidia_runtime", "cdi_spec_dirs", "cdi_devices"):
            res[k] = info[k]
        res["version"] = res["version"] or info["server_version"]
    else:
        ctx.error(res["error"] or "container engine not reachable")
    for hook in NVIDIA_HOOKS:
        p = io.which(hook)
        if p:
            res["nvidia_hook"] = p
            break
    spec_dirs = res["cdi_spec_dirs"] or list(CDI_DIRS)
    res["cdi_specs"] = [p for d in spec_dirs for p in io.glob(os.path.join(d, "*.yaml")) + io.glob(
        os.path.join(d, "*.json")) if "nvidia" in os.path.basename(p)]
    return res


def collect_deployment(io, engine, name):
    """State of this collection's own vLLM container, so a re-run does not mistake it for a foreign GPU user."""
    res = {"container": name, "exists": False, "running": False, "image": None}
    if not name:
        return res
    try:
        status, body = io.http_get(engine, "/containers/%s/json" % name)
    except Exception:  # pylint: disable=broad-except
        return res
    if status != 200:
        return res
    try:
        info = json.loads(body) if isinstance(body, str) else json.loads(body.decode("utf-8"))
    except (ValueError, AttributeError):
        return res
    res["exists"] = True
    res["running"] = bool((info.get("State") or {}).get("Running"))
    res["image"] = (info.get("Config") or {}).get("Image")
    return res


def collect_time_sync(ctx):
    if ctx.have("timedatectl"):
        rc, out, err = ctx.run(TIMEDATECTL_CMD)
        v = P.parse_timedatectl(out) if rc == 0 else None
        if v is not None:
            return {"synchronized": v, "source": "timedatectl"}
    if ctx.have("chronyc"):
        rc, out, err = ctx.run(CHRONYC_CMD)
        v = P.parse_chronyc_tracking(out) if rc == 0 else None
        if v is not None:
            return {"synchronized": v, "source": "chronyc"}
    return {"synchronized": None, "source": None}


def _existing_ancestor(io, path):
    p = os.path.abspath(path)
    while p and not io.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def _weight_candidates(io, cache_dir, model, revision):
    """Directories that may hold the weights: the model path itself, or the HF cache snapshots - only the
    revision's (``snapshots/<revision>``, or the commit ``refs/<revision>`` points to) when one is pinned."""
    if model.startswith("/"):
        return [model]
    repo = "models--" + model.replace("/", "--")
    out = []
    for base in (os.path.join(cache_dir, "hub", repo), os.path.join(cache_dir, repo)):
        if not revision:
            out.extend(io.glob(os.path.join(base, "snapshots", "*")))
            continue
        commit = (io.read(os.path.join(base, "refs", revision)) or "").strip() or revision
        out.append(os.path.join(base, "snapshots", commit))
    return out


def collect_weights(io, cache_dir, model, revision=None, sample=None):
    """Are the model's weights (at ``revision`` when pinned) already on disk? Looks at ``model`` as a local path,
    then at the HF cache layout ``<cache>/hub/models--<org>--<name>/snapshots/*/`` (and ``<cache>/models--...``).
    Present = a ``model.safetensors.index.json`` whose every shard exists. ``sample``: ``{"mib", "seconds"}`` - read
    that much of the present shards (module_utils.probe.weight_read) and report the throughput as ``read``."""
    res = {"model": model, "revision": revision, "present": False, "path": None, "bytes": None,
           "missing_shards": None, "read": None}
    if not model:
        return res
    for cand in _weight_candidates(io, cache_dir, model, revision):
        index = io.read(os.path.join(cand, "model.safetensors.index.json"))
        if not index:
            continue
        try:
            shards = sorted(set(json.loads(index).get("weight_map", {}).values()))
        except (ValueError, AttributeError):
            continue
        sizes = [io.file_size(os.path.join(cand, s)) for s in shards]
        missing = [s for s, z in zip(shards, sizes) if z is None]
        res.update({"path": cand, "missing_shards": len(missing), "bytes": sum(z for z in sizes if z)})
        if shards and not missing:
            res["present"] = True
            if sample and sample.get("mib"):
                res["read"] = weight_read.sample([os.path.join(cand, s) for s in shards], sample["mib"] * weight_read.MIB,
                                                 sample.get("seconds", 5.0))
            return res
    return res


def _sysfs_interface(io, name):
    """Fallback without iproute2: existence, MTU and flags from /sys/class/net (no addresses)."""
    flags = io.read("/sys/class/net/%s/flags" % name)
    if flags is None:
        return None
    try:
        bits = int(flags.strip(), 16)
    except ValueError:
        bits = 0
    carrier = (io.read("/sys/class/net/%s/carrier" % name) or "").strip() == "1"
    loopback = bool(bits & 0x8)
    return {"up": bool(bits & 0x1) and (loopback or carrier), "loopback": loopback,
            "mtu": P.to_int((io.read("/sys/class/net/%s/mtu" % name) or "").strip()), "operstate": None,
            "addresses": None}


def collect_interfaces(ctx, names, want_all=False):
    """The network interfaces NCCL/Gloo are told to use (the plan's socket ifnames): up, MTU, addresses; with
    ``ip``, every interface's addresses too (``all``; read also without names when ``want_all``)."""
    res = {"source": None, "names": {}}
    if not names and not want_all:
        return res
    links = {}
    if ctx.have("ip"):
        rc, out, _err = ctx.run(IP_ADDR_CMD)
        links = P.parse_ip_addr_json(out) if rc == 0 else {}
        res["source"] = "ip" if links else None
    for name in names:
        info = links.get(name) if res["source"] == "ip" else _sysfs_interface(ctx.io, name)
        if res["source"] is None and info is not None:
            res["source"] = "sysfs"
        res["names"][name] = dict(info, exists=True) if info else {"exists": False}
    res["available"] = sorted(links) if res["source"] == "ip" else None
    # Every interface's addresses: preflight's port_exposure tells the cluster network from the others.
    res["all"] = dict((name, {"up": link["up"], "loopback": link["loopback"], "addresses": link["addresses"]})
                      for name, link in links.items()) if res["source"] == "ip" else None
    return res


def collect_python(io):
    """The node's Python as the collection's node-side modules see it: interpreter, version, and whether the
    ``requests`` library community.docker's modules need is importable."""
    executable, version, origin = io.python_module("requests")
    return {"executable": executable, "version": version, "requests": origin is not None, "requests_path": origin}


def _port_entries(options):
    default_bind = options.get("bind_addresses") or ["0.0.0.0"]
    out = []
    for entry in options.get("ports") or []:
        if isinstance(entry, dict):
            port = P.to_int(entry.get("port"))
            name = entry.get("name") or str(port)
            binds = entry.get("bind") or entry.get("bind_addresses") or default_bind
            if isinstance(binds, str):
                binds = [binds]
        else:
            port, name, binds = P.to_int(entry), str(entry), default_bind
        if port is None:
            continue
        out.append((name, port, binds))
    return out


def collect_ports(io, options):
    res = []
    for name, port, binds in _port_entries(options):
        for addr in binds:
            res.append({"name": name, "port": port, "address": addr, "state": io.port_state(addr, port)})
    return res


def collect_host(ctx, options):
    """Host resources: /dev/shm, memlock, free disk and weights on the model cache, time sync, Python, ports, and
    the probing user's access."""
    io = ctx.io
    shm = io.statvfs("/dev/shm")
    soft, hard = io.memlock()
    cache_dir = options["model_cache_dir"]
    checked = _existing_ancestor(io, cache_dir)
    st = io.statvfs(checked)
    return {
        "shm_bytes": shm["total"] if shm else None,
        "memlock": soft,
        "memlock_hard": hard,
        "disk": {"path": cache_dir, "checked_path": checked, "exists": checked == os.path.abspath(cache_dir),
                 "free_bytes": st["free"] if st else None, "total_bytes": st["total"] if st else None},
        "weights": collect_weights(io, cache_dir, options.get("model"), options.get("model_revision"),
                                   {"mib": options.get("weight_read_sample_mib") or 0,
                                    "seconds": options.get("weight_read_max_seconds") or 5.0}),
        "time_sync": collect_time_sync(ctx),
        "python": collect_python(io),
        "interfaces": collect_interfaces(ctx, options.get("interfaces") or [], options.get("all_interfaces")),
        "ports": collect_ports(io, options),
        "access": io.access(options["docker_host"], [cache_dir] + list(options.get("access_paths") or [])),
    }


def collect(io, options=None):
    """Gather one node. ``options``: docker_host, model_cache_dir, model, ports, bind_addresses,
    command_timeout. Returns the ``node_probe`` fact dict."""
    options = dict(options or {})
    started = time.monotonic()
    ctx = _Ctx(io, options)
    facts = {"schema": SCHEMA_VERSION}
    facts.update(io.uname())
    nvidia, amd = collect_nvidia(ctx), collect_amd(ctx)
    vendor = _vendor_of(ctx, nvidia, amd)
    gpus = nvidia["gpus"] if vendor == "nvidia" else (amd["gpus"] if vendor == "amd" else [])
    facts["kernel_state"] = collect_kernel_state(io)
    facts.update(_gpu_facts(vendor, gpus, nvidia, amd))
    facts.update(_fabric_facts(ctx, vendor, gpus, nvidia, facts["kernel_state"]))
    facts["rdma"] = collect_rdma(ctx)
    facts["devices"] = _device_facts(io)
    engine = engine_api.client_options(options)
    facts["engine"] = collect_engine(ctx, engine)
    facts["engine"]["gpu_support"] = _engine_gpu_support(vendor, facts["engine"], facts["devices"])
    facts["deployment"] = collect_deployment(io, engine, options.get("deployment_container"))
    facts.update(collect_host(ctx, options))
    facts["tools"] = dict(ctx.tools)
    facts["errors"] = ctx.errors
    facts["commands"] = ctx.commands
    facts["probe_seconds"] = round(time.monotonic() - started, 3)
    return facts


def _vendor_of(ctx, nvidia, amd):
    """``nvidia`` (its GPUs win when both drivers answer, unless only AMD lists GPUs), ``amd``, or None (noted)."""
    if nvidia["present"] and (nvidia["gpus"] or not amd["gpus"]):
        return "nvidia"
    if amd["present"]:
        return "amd"
    ctx.error("no GPU driver or tool found (nvidia-smi, /proc/driver/nvidia, amd-smi, rocm-smi, /dev/kfd)")
    return None


def _gpu_facts(vendor, gpus, nvidia, amd):
    """The GPU, driver and toolkit facts of the vendor's collection."""
    models = sorted(set(g.get("model") or "unknown" for g in gpus))
    return {
        "vendor": vendor,
        "gpus": gpus,
        "gpu_count": len(gpus),
        "gpu_model": models[0] if len(models) == 1 else ("unknown" if not models else "mixed:" + ",".join(models)),
        "gpu_names": sorted(set(g.get("name") or "unknown" for g in gpus)),
        "gpu_memory_mib_min": min([g["memory_total_mib"] for g in gpus if g.get("memory_total_mib")] or [0]) or None,
        "driver_version": nvidia["driver_version"] if vendor == "nvidia" else amd["amdgpu_version"],
        "cuda_version": nvidia["cuda_version"] if vendor == "nvidia" else None,
        "rocm_version": amd["rocm_version"] if vendor == "amd" else None,
        "nvidia": {"smi_status": nvidia["smi_status"], "driver_version_kernel": nvidia["driver_version_kernel"],
                   "open_module": nvidia["open_module"]},
        "amd": {"source": amd["source"], "amdgpu_version": amd["amdgpu_version"], "partitioned": amd["partitioned"]},
    }


def _fabric_facts(ctx, vendor, gpus, nvidia, kernel_state):
    """NVLink fabric, MNNVL, IMEX and GPUDirect facts (an AMD or GPU-less node gets their 'absent' form)."""
    if vendor == "nvidia":
        fab = P.fabric_summary(gpus)
        return {"fabric": fab, "mnnvl": bool(fab["mnnvl"]), "imex": collect_imex(ctx),
                "gpudirect": collect_gpudirect(ctx.io, nvidia, kernel_state)}
    return {
        "fabric": {"state": None, "cluster_uuid": None, "clique_id": None, "healthy": None, "mnnvl": False,
                   "reasons": ["not an NVIDIA node"]},
        "mnnvl": False,
        "imex": {"present": ctx.have("nvidia-imex-ctl"), "up": False, "domain_state": None, "nodes": []},
        "gpudirect": {"peermem_loaded": False, "dmabuf_capable": vendor == "amd",
                      "mode": "dmabuf" if vendor == "amd" else "none", "memory_peers": False},
    }


def _device_facts(io):
    """Device nodes a container of this deployment may be given."""
    return {
        "kfd": io.exists("/dev/kfd"),
        "dri_render_nodes": len(io.glob("/dev/dri/renderD*")),
        "nvidia_nodes": len(io.glob("/dev/nvidia[0-9]*")),
        "imex_channel": io.exists("/dev/nvidia-caps-imex-channels/channel0"),
        "infiniband_uverbs": len(io.glob("/dev/infiniband/uverbs*")),
    }


def _engine_gpu_support(vendor, engine, devices):
    """Can the engine hand GPUs to a container? -> {ok, via: [...]}."""
    via = []
    if vendor == "nvidia":
        if engine.get("nvidia_runtime"):
            via.append("nvidia-runtime")
        if engine.get("nvidia_hook"):
            via.append("runtime-hook")
        if any(str(d).startswith("nvidia.com/gpu") for d in engine.get("cdi_devices") or []) or engine.get(
                "cdi_specs"):
            via.append("cdi")
    elif vendor == "amd":
        if devices.get("kfd") and devices.get("dri_render_nodes"):
            via.append("kfd+dri")
    return {"ok": bool(via) and bool(engine.get("reachable")), "via": via}
