# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure parsers for the GPU node tools (text in, dict out).

Standard library only, Python >= 3.9: this file is shipped to the managed nodes with ``node_probe``.
Formats and traps: ``shared/reference/gpu-node-probes.md``. Every parser accepts the documented variants
(driver 610+ banner renames, amd-smi JSON shapes of 24.x/25.x and 26.x, rocm-smi key case, ``[N/A]`` values,
units) and never raises on odd input: unknown values become ``None``.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
import xml.etree.ElementTree as ET

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.common.coerce import version_key

NA_VALUES = frozenset([
    "", "n/a", "[n/a]", "na", "none", "not found", "[not supported]", "not supported",
    "[insufficient permissions]", "insufficient permissions", "unknown", "[unknown error]",
])

ZERO_UUID = "00000000-0000-0000-0000-000000000000"

# Memory floor (MiB) that tells an NVL72 GB300 GPU (284208 MiB) from a DGX Station GB300 (256703 MiB).
GB300_NVL72_MIN_MIB = 280000

_VERSION_RE = re.compile(r"\b(\d+(?:\.\d+)+)\b")
_DEPRECATED_TAIL = re.compile(r"\s*\[deprecated[^\]]*\]\s*$", re.IGNORECASE)


# --------------------------------------------------------------------------------------------- helpers

def na(value):
    """Return ``None`` for the tools' spellings of 'no value' (``[N/A]``, ``N/A``, ``Not Found``...), else the
    stripped string (bracketed deprecation tails of nvidia-smi 610+ removed)."""
    if value is None:
        return None
    if not isinstance(value, str):
        return value
    v = _DEPRECATED_TAIL.sub("", value.strip()).strip()
    if v.lower() in NA_VALUES:
        return None
    return v


def to_int(value):
    """``'284208 MiB'`` / ``'284208'`` / ``284208`` / ``{'value': 294896, 'unit': 'MB'}`` -> int, else None."""
    if isinstance(value, dict):
        value = value.get("value")
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    value = na(value)
    if value is None:
        return None
    m = re.match(r"^\s*(-?\d+(?:\.\d+)?)", str(value))
    if not m:
        return None
    return int(float(m.group(1)))


_UNIT_TO_MIB = {
    "b": 1.0 / (1024 * 1024), "kb": 1.0 / 1024, "kib": 1.0 / 1024,
    # amd-smi labels MiB values "MB" (294896 "MB" on MI355X = 288 GiB): treat MB as MiB on purpose.
    "mb": 1.0, "mib": 1.0, "gb": 1024.0, "gib": 1024.0, "tb": 1024.0 * 1024, "tib": 1024.0 * 1024,
}


def to_mib(value, default_unit="MiB"):
    """Memory quantity -> MiB (int). Accepts ``'284208 MiB'``, ``{'value': 294896, 'unit': 'MB'}``, numbers."""
    unit = default_unit
    if isinstance(value, dict):
        unit = value.get("unit") or default_unit
        value = value.get("value")
    elif isinstance(value, str):
        m = re.match(r"^\s*(-?\d+(?:\.\d+)?)\s*([A-Za-z]+)?", value)
        if not m or na(value) is None:
            return None
        value = float(m.group(1))
        unit = m.group(2) or default_unit
    if isinstance(value, bool) or value is None:
        return None
    try:
        num = float(value)
    except (TypeError, ValueError):
        num = to_int(value)
        if num is None:
            return None
    factor = _UNIT_TO_MIB.get(str(unit).lower())
    if factor is None:
        return None
    return int(round(num * factor))


def version_tuple(version):
    """``'580.105.08'`` / ``'CUDA Version: 13.0'`` -> (580, 105, 8) / (13, 0): the first version in the text, as
    coerce.version_key reads it; None/garbage -> None."""
    if version is None:
        return None
    m = _VERSION_RE.search(str(version)) or re.search(r"\b(\d+)\b", str(version))
    if not m:
        return None
    return version_key(m.group(1))


def version_ge(version, floor):
    """True/False for ``version >= floor`` (component-wise, missing components = 0); None if unparsable."""
    a, b = version_tuple(version), version_tuple(floor)
    if a is None or b is None:
        return None
    n = max(len(a), len(b))
    return a + (0,) * (n - len(a)) >= b + (0,) * (n - len(b))


def _json_load(text):
    if isinstance(text, (dict, list)):
        return text
    if text is None:
        return None
    text = text.strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        # Some tools print warnings before the JSON document; start at the first bracket.
        for opener in ("{", "["):
            idx = text.find(opener)
            if idx > 0:
                try:
                    return json.loads(text[idx:])
                except ValueError:
                    continue
        return None


# --------------------------------------------------------------------------------------------- models

def normalize_model(name=None, memory_mib=None, device_id=None, gfx=None):
    """Map a GPU identity to ``gb300 gb200 b300 b200 h200 mi355x mi350x unknown``.

    NVIDIA: product name (``NVIDIA GB300``) plus memory for GB300 (NVL72 trays report 284208 MiB, a DGX Station
    GB300 256703 MiB) and PCI device id ``0x31C2``. AMD: market name, else device id ``0x75a3``/``0x75a0``, and
    ``gfx950`` (shared by both; memory is the same class) defaults to mi355x only when the name says so.
    """
    n = (name or "").upper()
    dev = (device_id or "").lower().replace("0x", "")
    if dev.endswith("10de") and len(dev) == 8:
        dev = dev[:4]
    if "MI355X" in n or dev == "75a3":
        return "mi355x"
    if "MI350X" in n or dev == "75a0":
        return "mi350x"
    if "GB300" in n or dev == "31c2":
        if memory_mib is not None and memory_mib < GB300_NVL72_MIN_MIB:
            return "unknown"  # DGX Station GB300 (256703 MiB) is not an NVL72 tray
        return "gb300"
    if "GB200" in n or dev == "2941":
        return "gb200"
    if re.search(r"\bB300\b", n):
        return "b300"
    if re.search(r"\bB200\b", n):
        return "b200"
    if re.search(r"\bH200\b", n):
        return "h200"
    if gfx and str(gfx).lower() == "gfx950":
        # amd-smi has shown MI355X as 'AMD Radeon Graphics'; gfx950 alone cannot tell MI355X from MI350X.
        return "unknown"
    return "unknown"


def _xml_text(node, path):
    if node is None:
        return None
    el = node.find(path)
    if el is None or el.text is None:
        return None
    return na(el.text)


def parse_nvidia_smi_xml(text):
    """``nvidia-smi -q -x`` -> {driver_version, cuda_version, attached_gpus, gpus: [...]}.

    Memory comes from ``fb_memory_usage/total`` only (the XML also has bar1 and cc_protected ``<total>`` rows).
    Compute capability is not in the XML (None here; merge the CSV). Unparsable XML -> {'error': ...}.
    """
    out = {"driver_version": None, "cuda_version": None, "attached_gpus": None, "gpus": []}
    if not text or not text.strip():
        out["error"] = "empty output"
        return out
    # Drop the DOCTYPE line: ElementTree does not resolve external DTDs anyway, and some builds emit a bad one.
    cleaned = re.sub(r"<!DOCTYPE[^>]*>", "", text, count=1)
    try:
        root = ET.fromstring(cleaned)
    except ET.ParseError as exc:
        out["error"] = "unparsable XML: %s" % exc
        return out
    out["driver_version"] = _xml_text(root, "driver_version") or _xml_text(root, "kmd_version")
    out["cuda_version"] = _xml_text(root, "cuda_version") or _xml_text(root, "cuda_umd_version")
    out["attached_gpus"] = to_int(_xml_text(root, "attached_gpus"))
    for idx, gpu in enumerate(root.findall("gpu")):
        pci_device_id = _xml_text(gpu, "pci/pci_device_id")
        name = _xml_text(gpu, "product_name")
        mem = to_mib(_xml_text(gpu, "fb_memory_usage/total"))
        fabric = gpu.find("fabric")
        fab = {
            "state": _xml_text(fabric, "state"),
            "status": _xml_text(fabric, "status"),
            "clique_id": _xml_text(fabric, "cliqueId"),
            "cluster_uuid": _xml_text(fabric, "clusterUuid"),
            "health": _xml_text(fabric, "health/summary"),
        } if fabric is not None else {"state": None, "status": None, "clique_id": None, "cluster_uuid": None,
                                      "health": None}
        out["gpus"].append({
            "index": idx,
            "minor_number": to_int(_xml_text(gpu, "minor_number")),
            "name": name,
            "uuid": _xml_text(gpu, "uuid"),
            "pci_bus_id": _xml_text(gpu, "pci/pci_bus_id") or gpu.get("id"),
            "pci_device_id": ("0x" + pci_device_id[:4].lower()) if pci_device_id and len(pci_device_id) >= 4
            else None,
            "memory_total_mib": mem,
            "memory_used_mib": to_mib(_xml_text(gpu, "fb_memory_usage/used")),
            "compute_cap": None,
            "persistence_mode": _xml_text(gpu, "persistence_mode"),
            "mig_mode": _xml_text(gpu, "mig_mode/current_mig"),
            "fabric": fab,
        })
    return out


def parse_nvidia_smi_csv(text, fields):
    """``--query-gpu=<fields> --format=csv,noheader,nounits`` -> list of {field: value or None}.

    Tolerates a header row and unit-bearing values (``--format=csv``), ``[N/A]`` and blank lines. Splits at
    commas (names never contain commas) and trims.
    """
    rows = []
    if not text:
        return rows
    fields = list(fields)
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        cells = [c.strip() for c in line.split(",")]
        if cells and cells[0].split(" [")[0] == fields[0]:
            continue  # header row
        if len(cells) != len(fields):
            continue
        rows.append(dict((f, na(c)) for f, c in zip(fields, cells)))
    return rows


def gpus_from_csv(text):
    """Rows of the probe's own query (``NVIDIA_QUERY_FIELDS``) -> GPU dicts shaped like the XML's."""
    gpus = []
    for row in parse_nvidia_smi_csv(text, NVIDIA_QUERY_FIELDS):
        gpus.append({
            "index": to_int(row.get("index")),
            "name": row.get("name"),
            "uuid": row.get("uuid"),
            "pci_bus_id": row.get("pci.bus_id"),
            "memory_total_mib": to_mib(row.get("memory.total")) if row.get("memory.total") else None,
            "memory_used_mib": to_mib(row.get("memory.used")) if row.get("memory.used") else None,
            "compute_cap": row.get("compute_cap"),
            "driver_version": row.get("driver_version"),
        })
    return gpus


NVIDIA_QUERY_FIELDS = ("index", "name", "uuid", "driver_version", "memory.total", "memory.used", "compute_cap",
                       "pci.bus_id")


def parse_proc_driver_version(text):
    """``/proc/driver/nvidia/version`` -> {driver_version, open_module}. First ``\\d{3}.\\d+(.\\d+)?`` on line 1
    (the word after 'Kernel Module' is 'for' in the open flavour; some versions have two components)."""
    first = (text or "").splitlines()[0] if (text or "").strip() else ""
    m = re.search(r"\b(\d{3}\.\d+(?:\.\d+)?)\b", first)
    return {"driver_version": m.group(1) if m else None, "open_module": "Open Kernel Module" in first}


NVIDIA_SMI_FAILURES = (
    ("couldn't communicate with the nvidia driver", "driver_not_loaded"),
    ("driver/library version mismatch", "driver_library_mismatch"),
    ("no devices were found", "no_devices"),
    ("failed to initialize nvml: unknown error", "nvml_unknown_error"),
    ("failed to initialize nvml", "nvml_init_failed"),
)


def classify_nvidia_smi_failure(rc, output):
    """Non-zero rc / error text of nvidia-smi -> short reason (rc 9 = driver not loaded)."""
    low = (output or "").lower()
    for needle, reason in NVIDIA_SMI_FAILURES:
        if needle in low:
            return reason
    if rc == 9:
        return "driver_not_loaded"
    return "nvidia_smi_failed_rc_%s" % rc


def fabric_summary(gpus):
    """Per-node fabric view from GPU dicts -> {state, cluster_uuid, clique_id, healthy, mnnvl, reasons}.

    ``mnnvl`` is True only when every GPU says Completed/Success, has a ClusterUUID other than all zeros, all GPUs
    share one ClusterUUID + CliqueId, and health (when reported) is Healthy. HGX B200 boards also say Completed
    with the zero UUID: that is not MNNVL.
    """
    res = {"state": None, "cluster_uuid": None, "clique_id": None, "healthy": None, "mnnvl": False, "reasons": []}
    if not gpus:
        res["reasons"].append("no GPUs")
        return res
    fabs = [g.get("fabric") or {} for g in gpus]
    states = sorted(set(str(f.get("state")) for f in fabs))
    uuids = sorted(set(str(f.get("cluster_uuid")) for f in fabs))
    cliques = sorted(set(str(f.get("clique_id")) for f in fabs))
    res["state"] = fabs[0].get("state") if len(states) == 1 else ",".join(states)
    res["cluster_uuid"] = fabs[0].get("cluster_uuid") if len(uuids) == 1 else None
    res["clique_id"] = fabs[0].get("clique_id") if len(cliques) == 1 else None
    healths = [f.get("health") for f in fabs if f.get("health") is not None]
    res["healthy"] = all(h == "Healthy" for h in healths) if healths else None
    for i, f in enumerate(fabs):
        if f.get("state") != "Completed":
            res["reasons"].append("GPU %d fabric state %s" % (i, f.get("state") or "N/A"))
        elif f.get("status") not in (None, "Success"):
            res["reasons"].append("GPU %d fabric status %s" % (i, f.get("status")))
        cu = f.get("cluster_uuid")
        if not cu or cu == ZERO_UUID:
            res["reasons"].append("GPU %d ClusterUUID %s" % (i, cu or "N/A"))
        if f.get("health") not in (None, "Healthy"):
            res["reasons"].append("GPU %d fabric health %s" % (i, f.get("health")))
    if len(uuids) > 1:
        res["reasons"].append("GPUs disagree on ClusterUUID: %s" % ", ".join(uuids))
    if len(cliques) > 1:
        res["reasons"].append("GPUs disagree on CliqueId: %s" % ", ".join(cliques))
    res["mnnvl"] = not res["reasons"]
    return res


def parse_imex_ctl(text):
    """``nvidia-imex-ctl -N`` -> {domain_state, nodes: [{index, address, state, version}], all_ready,
    matrix_ok, up}. ``up`` = Domain State UP, every node READY, only 'C' in the connectivity matrix."""
    out = {"domain_state": None, "nodes": [], "all_ready": None, "matrix_ok": None, "up": False}
    if not text:
        return out
    matrix_cells = []
    in_matrix = False
    for line in text.splitlines():
        m = re.match(r"^\s*Node #\s*(\d+)\s+-\s+(\S+)\s+-\s+(\S+)(?:\s+-\s+Version:\s*(\S+))?", line)
        if m:
            out["nodes"].append({"index": int(m.group(1)), "address": m.group(2), "state": m.group(3),
                                 "version": m.group(4)})
            continue
        m = re.match(r"^\s*Domain State:\s*(\S+)", line)
        if m:
            out["domain_state"] = m.group(1)
            in_matrix = False
            continue
        if re.match(r"^\s*Nodes From\\To", line):
            in_matrix = True
            continue
        if in_matrix:
            parts = line.split()
            if parts and parts[0].isdigit():
                matrix_cells.extend(parts[1:])
    if out["nodes"]:
        out["all_ready"] = all(n["state"] == "READY" for n in out["nodes"])
    if matrix_cells:
        out["matrix_ok"] = all(c == "C" for c in matrix_cells)
    out["up"] = (out["domain_state"] == "UP" and out["all_ready"] is not False and out["matrix_ok"] is not False)
    return out


# --------------------------------------------------------------------------------------------- AMD

def _amd_gpu_list(data):
    """amd-smi JSON of either generation -> list of per-GPU dicts (26.x ``{"gpu_data": [...]}``, 24/25.x list,
    or a single object)."""
    if isinstance(data, dict):
        if isinstance(data.get("gpu_data"), list):
            return [g for g in data["gpu_data"] if isinstance(g, dict)]
        if "gpu" in data or "asic" in data:
            return [data]
        return []
    if isinstance(data, list):
        return [g for g in data if isinstance(g, dict)]
    return []


def _amd_na(value):
    if isinstance(value, str):
        return na(value)
    return value


def parse_amd_smi_static(text):
    """``amd-smi static --json`` (any of ``--asic --bus --vram --driver``) -> list of GPU dicts."""
    gpus = []
    for i, g in enumerate(_amd_gpu_list(_json_load(text))):
        asic = g.get("asic") or {}
        bus = g.get("bus") or {}
        vram = g.get("vram") or {}
        driver = g.get("driver") or {}
        idx = g.get("gpu")
        name = _amd_na(asic.get("market_name"))
        device_id = _amd_na(asic.get("device_id"))
        gfx = _amd_na(asic.get("target_graphics_version"))
        mem = to_mib(vram.get("size")) if vram.get("size") is not None else None
        gpus.append({
            "index": idx if isinstance(idx, int) else i,
            "name": name,
            "uuid": _amd_na(g.get("uuid")) or _amd_na(asic.get("uuid")),
            "pci_bus_id": _amd_na(bus.get("bdf")) or _amd_na(g.get("bdf")),
            "pci_device_id": device_id.lower() if isinstance(device_id, str) else None,
            "gfx": gfx,
            "memory_total_mib": mem,
            "compute_cap": gfx,
            "driver_version": _amd_na(driver.get("version")),
        })
    return gpus


def parse_amd_smi_list(text):
    """``amd-smi list --json`` -> list of {index, pci_bus_id, uuid, partition_id} (plain list or gpu_data)."""
    out = []
    for i, g in enumerate(_amd_gpu_list(_json_load(text))):
        out.append({"index": g.get("gpu", i), "pci_bus_id": _amd_na(g.get("bdf")), "uuid": _amd_na(g.get("uuid")),
                    "partition_id": g.get("partition_id")})
    return out


def parse_amd_smi_metric_mem(text):
    """``amd-smi metric --mem-usage --json`` -> {gpu index: {"total_mib", "used_mib"}} (``used_vram`` /
    ``total_vram``, MB meaning MiB). Unreadable output -> {}; a missing or N/A value -> None."""
    out = {}
    for i, g in enumerate(_amd_gpu_list(_json_load(text))):
        mem = g.get("mem_usage") or g.get("memory_usage") or {}
        if not isinstance(mem, dict):
            continue
        idx = g.get("gpu", i)
        total, used = (_amd_mem(mem.get(k)) for k in ("total_vram", "used_vram"))
        if total is not None or used is not None:
            out[idx if isinstance(idx, int) else i] = {"total_mib": total, "used_mib": used}
    return out


def _amd_mem(value):
    if value is None or isinstance(value, (list, bool)):
        return None
    return to_mib(value, default_unit="MB")


def parse_amd_smi_version(text):
    """``amd-smi version --json`` (dict or one-element list) or the text line (three wordings) ->
    {tool_version, library_version, rocm_version, amdgpu_version}. The in-box driver's kernel-banner pseudo
    version (``Linuxversion6.8.0-...``) becomes None."""
    out = {"tool_version": None, "library_version": None, "rocm_version": None, "amdgpu_version": None}
    data = _json_load(text) if text and text.strip()[:1] in "[{" else None
    if isinstance(data, list):
        data = data[0] if data and isinstance(data[0], dict) else None
    if isinstance(data, dict):
        out["tool_version"] = _amd_na(data.get("version")) or _amd_na(data.get("tool_version"))
        out["library_version"] = _amd_na(data.get("amdsmi_library_version"))
        out["rocm_version"] = _amd_na(data.get("rocm_version"))
        out["amdgpu_version"] = (_amd_na(data.get("amdgpu_version")) or _amd_na(data.get("amdgpu"))
                                 or _amd_na(data.get("driver_version")))
    else:
        pairs = {}
        for part in (text or "").strip().split(" | "):
            key, sep, value = part.partition(": ")
            if sep:
                pairs[key.strip().lower()] = value.strip()
        out["tool_version"] = na(pairs.get("amdsmi tool") or pairs.get("amd smi tool"))
        out["library_version"] = na(pairs.get("amdsmi library version") or pairs.get("amd smi library version"))
        out["rocm_version"] = na(pairs.get("rocm version"))
        out["amdgpu_version"] = na(pairs.get("amdgpu version") or pairs.get("driver version"))
    if out["amdgpu_version"] and not re.match(r"^\d+(\.\d+)+", str(out["amdgpu_version"])):
        out["amdgpu_version"] = None
    return out


def parse_rocm_smi_productname(text):
    """``rocm-smi --showproductname [--showdriverversion] --json`` -> {gpus: [...], driver_version}.

    Keys are looked up case-insensitively (``Card series`` vs ``Card Series``). rocm-smi exits 0 on failure:
    empty output, ``{}`` or ``WARNING: No JSON data to report`` give ``error``."""
    out = {"gpus": [], "driver_version": None}
    data = _json_load(text)
    if not isinstance(data, dict) or not data:
        out["error"] = "rocm-smi returned no JSON data"
        return out
    for card in sorted(k for k in data if k.lower().startswith("card")):
        vals = dict((str(k).lower(), v) for k, v in (data[card] or {}).items())
        name = na(vals.get("card series")) or na(vals.get("device name"))
        out["gpus"].append({
            "index": to_int(card[4:]),
            "name": name,
            "pci_device_id": (na(vals.get("device id")) or "").lower() or None,
            "gfx": na(vals.get("gfx version")),
            "compute_cap": na(vals.get("gfx version")),
            "uuid": None, "pci_bus_id": None, "memory_total_mib": None,
        })
    system = dict((str(k).lower(), v) for k, v in (data.get("system") or {}).items())
    out["driver_version"] = na(system.get("driver version"))
    return out


def parse_rocm_version_file(text):
    """``/opt/rocm/.info/version`` (``6.4.0-47``, ``7.13.0-123-gfx942;gfx950``) -> ``'6.4.0'`` or None."""
    m = re.match(r"^\s*(\d+(?:\.\d+){0,3})(?:-\d+)?", text or "")
    return m.group(1) if m else None


_IB_STATE = re.compile(r"(PORT_[A-Z]+|ACTIVE|DOWN|INIT|ARMED)")


def _norm_port_state(value):
    m = _IB_STATE.search((value or "").upper())
    if not m:
        return None
    return m.group(1).replace("PORT_", "")


def parse_ibv_devinfo(text):
    """``ibv_devinfo`` -> list of {device, port, state (ACTIVE/DOWN/INIT/ARMED), link_layer, active_mtu}."""
    ports = []
    dev = None
    port = None
    for line in (text or "").splitlines():
        m = re.match(r"^hca_id:\s*(\S+)", line)
        if m:
            dev, port = m.group(1), None
            continue
        m = re.match(r"^\s*port:\s*(\d+)", line)
        if m and dev:
            port = {"device": dev, "port": int(m.group(1)), "state": None, "link_layer": None, "active_mtu": None}
            ports.append(port)
            continue
        m = re.match(r"^\s*([a-z_]+):\s+(.*)$", line)
        if m and port is not None:
            key, value = m.group(1), m.group(2).strip()
            if key == "state":
                port["state"] = _norm_port_state(value)
            elif key == "link_layer":
                port["link_layer"] = value
            elif key == "active_mtu":
                port["active_mtu"] = to_int(value)
    return ports


def parse_ib_sysfs_state(text):
    """``/sys/class/infiniband/<dev>/ports/<p>/state`` (``4: ACTIVE``) -> ``'ACTIVE'``."""
    return _norm_port_state(text)


# --------------------------------------------------------------------------------------------- engine

def parse_docker_version(data):
    """Docker API ``GET /version`` JSON (or ``docker version --format '{{json .}}'``) -> {version, api_version}."""
    data = _json_load(data)
    if not isinstance(data, dict):
        return {"version": None, "api_version": None}
    if isinstance(data.get("Server"), dict):  # CLI shape {"Client": {...}, "Server": {...}}
        data = data["Server"]
    return {"version": data.get("Version"), "api_version": data.get("ApiVersion")}


def parse_docker_info(data):
    """Docker API ``GET /info`` JSON -> {runtimes, default_runtime, nvidia_runtime, cdi_spec_dirs,
    cdi_devices, server_version}. Runtimes are an object keyed by name (Docker 29 adds io.containerd.runc.v2)."""
    data = _json_load(data)
    out = {"runtimes": [], "default_runtime": None, "nvidia_runtime": False, "cdi_spec_dirs": [],
           "cdi_devices": [], "server_version": None}
    if not isinstance(data, dict):
        return out
    runtimes = data.get("Runtimes") or {}
    out["runtimes"] = sorted(runtimes) if isinstance(runtimes, dict) else list(runtimes)
    out["default_runtime"] = data.get("DefaultRuntime")
    out["nvidia_runtime"] = "nvidia" in out["runtimes"]
    out["cdi_spec_dirs"] = list(data.get("CDISpecDirs") or [])
    devs = data.get("DiscoveredDevices") or []
    out["cdi_devices"] = [d.get("ID") if isinstance(d, dict) else d for d in devs]
    out["server_version"] = data.get("ServerVersion")
    return out


def parse_ip_addr_json(text):
    """``ip -j addr show`` -> ``{ifname: {up, loopback, mtu, operstate, addresses: ["a.b.c.d/len", ...]}}``.

    ``up``: administratively up (flag ``UP``) with carrier (``LOWER_UP``); loopback has no carrier flag semantics
    and counts as up when ``UP``. Unparseable input -> {}."""
    data = _json_load(text)
    out = {}
    for link in data if isinstance(data, list) else []:
        if not isinstance(link, dict) or not link.get("ifname"):
            continue
        flags = set(link.get("flags") or [])
        loopback = "LOOPBACK" in flags
        addrs = ["%s/%s" % (a.get("local"), a.get("prefixlen")) for a in link.get("addr_info") or []
                 if isinstance(a, dict) and a.get("local")]
        out[str(link["ifname"])] = {"up": "UP" in flags and (loopback or "LOWER_UP" in flags), "loopback": loopback,
                                    "mtu": to_int(link.get("mtu")), "operstate": link.get("operstate"),
                                    "addresses": addrs}
    return out


def parse_timedatectl(text):
    """``timedatectl show -p NTPSynchronized --value`` -> True/False/None."""
    v = (text or "").strip().lower()
    if v in ("yes", "true", "1"):
        return True
    if v in ("no", "false", "0"):
        return False
    m = re.search(r"NTPSynchronized=(\w+)", text or "")
    if m:
        return parse_timedatectl(m.group(1))
    m = re.search(r"System clock synchronized:\s*(\w+)", text or "")
    if m:
        return parse_timedatectl(m.group(1))
    return None


def parse_chronyc_tracking(text):
    """``chronyc tracking`` -> True when ``Leap status : Normal``, False for other statuses, None if absent."""
    m = re.search(r"Leap status\s*:\s*(.+)", text or "")
    if not m:
        return None
    return m.group(1).strip().lower() == "normal"


def parse_proc_modules(text):
    """``/proc/modules`` -> set of loaded module names."""
    return set(line.split()[0] for line in (text or "").splitlines() if line.strip())


_PARAM_LINE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_]*)\s*:\s*(.*?)\s*$")


def parse_nvidia_params(text):
    """``/proc/driver/nvidia/params`` (``EnableStreamMemOPs: 1``, ``RegistryDwords: "PeerMappingOverride=1;"``) ->
    {name: value} with the quotes of string values removed; None when the file is unreadable or holds no
    ``Name: value`` line (the NVIDIA module is not loaded, or the text is not that file)."""
    if not isinstance(text, str):
        return None
    out = {}
    for line in text.splitlines():
        m = _PARAM_LINE.match(line)
        if m:
            value = m.group(2)
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            out[m.group(1)] = value
    return out or None


def parse_registry_dwords(value):
    """``"PeerMappingOverride=1;RMForceX=0x2"`` -> {"PeerMappingOverride": 1, "RMForceX": 2}; values are decimal or
    0x-hex integers (the driver accepts both), anything else is kept as text."""
    out = {}
    for item in str(value or "").split(";"):
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            continue
        raw = raw.strip()
        try:
            out[key.strip()] = int(raw, 16) if raw.lower().startswith("0x") else int(raw)
        except ValueError:
            out[key.strip()] = raw
    return out


def param_int(value):
    """A module parameter value (``1``, ``0x1``, ``Y``/``N`` for booleans) -> int, else None."""
    if isinstance(value, bool):
        return int(value)
    text = str(value if value is not None else "").strip()
    if text in ("Y", "N"):
        return 1 if text == "Y" else 0
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


def parse_size(value):
    """Human size -> bytes: ``64g``/``64G``/``64GiB``/``8m``/``8 MiB``/``-1``/int. Binary multiples (Docker's
    ``shm_size`` and ulimits use 1024). ``-1``/``unlimited`` -> -1; garbage -> None."""
    if value is None:
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value)
    v = str(value).strip().lower()
    if v in ("-1", "unlimited", "infinity"):
        return -1
    m = re.match(r"^(\d+(?:\.\d+)?)\s*([kmgtp]?)(?:i?b)?$", v)
    if not m:
        return None
    mult = {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3, "t": 1024 ** 4, "p": 1024 ** 5}[m.group(2)]
    return int(float(m.group(1)) * mult)
