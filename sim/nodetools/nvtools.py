"""Faked NVIDIA tools: nvidia-smi, nvidia-imex-ctl, nvidia-ctk. Formats: shared/reference/gpu-node-probes.md 1-2."""
import sys
import time

import simcommon

DRIVER_NOT_LOADED = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                     "Make sure that the latest NVIDIA driver is installed and running.")
INVALID_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
NA = "N/A"


def _out(text):
    sys.stdout.write(text)


def driver_major(profile):
    try:
        return int(profile["driver"]["version"].split(".")[0])
    except (KeyError, ValueError, IndexError):
        return 0


def renamed_banner(profile):
    """Driver 610+ prints KMD Version / CUDA UMD Version (gpu-node-probes.md 1.2)."""
    return driver_major(profile) >= 610


def _w(value):
    return "%.2f W" % float(value)


# ------------------------------------------------------------------------------------------ query-gpu

def _bus_parts(g):
    dom, bus, rest = g["pci_bus_id"].split(":")
    dev = rest.split(".")[0]
    return dom, bus, dev


def _gpu_na(v):
    return v is None or v == NA


# field -> (unit or None, getter(profile, gpu, used_mib))
QUERY_FIELDS = {
    "timestamp": (None, lambda p, g, u: time.strftime("%Y/%m/%d %H:%M:%S.000")),
    "driver_version": (None, lambda p, g, u: p["driver"]["version"]),
    "count": (None, lambda p, g, u: str(len(p["gpus"]))),
    "name": (None, lambda p, g, u: g["name"]),
    "serial": (None, lambda p, g, u: g.get("serial", NA)),
    "uuid": (None, lambda p, g, u: g["uuid"]),
    "pci.bus_id": (None, lambda p, g, u: g["pci_bus_id"]),
    "pci.domain": (None, lambda p, g, u: "0x" + _bus_parts(g)[0][-4:]),
    "pci.bus": (None, lambda p, g, u: "0x" + _bus_parts(g)[1]),
    "pci.device": (None, lambda p, g, u: "0x" + _bus_parts(g)[2]),
    "pci.device_id": (None, lambda p, g, u: g["pci_device_id"]),
    "pci.sub_device_id": (None, lambda p, g, u: g.get("pci_sub_system_id", NA)),
    "index": (None, lambda p, g, u: str(g["index"])),
    "vbios_version": (None, lambda p, g, u: g.get("vbios_version", NA)),
    "compute_cap": (None, lambda p, g, u: g["compute_cap"]),
    "persistence_mode": (None, lambda p, g, u: g.get("persistence_mode", "Enabled")),
    "driver_model.current": (None, lambda p, g, u: NA),
    "driver_model.pending": (None, lambda p, g, u: NA),
    "pstate": (None, lambda p, g, u: g.get("performance_state", "P0")),
    "memory.total": ("MiB", lambda p, g, u: str(g["memory_total_mib"])),
    "memory.reserved": ("MiB", lambda p, g, u: str(g.get("memory_reserved_mib", 0))),
    "memory.used": ("MiB", lambda p, g, u: str(u)),
    "memory.free": ("MiB", lambda p, g, u: str(max(0, g["memory_total_mib"] - g.get("memory_reserved_mib", 0) - u))),
    "utilization.gpu": ("%", lambda p, g, u: str(g.get("gpu_util_pct", 0))),
    "utilization.memory": ("%", lambda p, g, u: str(g.get("memory_util_pct", 0))),
    "fan.speed": ("%", lambda p, g, u: g.get("fan_speed", NA)),
    "temperature.gpu": (None, lambda p, g, u: str(g.get("temperature_c", 30))),
    "power.draw": ("W", lambda p, g, u: "%.2f" % g.get("power_draw_w", 0)),
    "power.limit": ("W", lambda p, g, u: "%.2f" % g["power_limit_w"]),
    "enforced.power.limit": ("W", lambda p, g, u: "%.2f" % g["power_limit_w"]),
    "power.default_limit": ("W", lambda p, g, u: "%.2f" % g["power_limit_w"]),
    "power.max_limit": ("W", lambda p, g, u: "%.2f" % g.get("power_limit_max_w", g["power_limit_w"])),
    "power.min_limit": ("W", lambda p, g, u: "%.2f" % g.get("power_limit_min_w", 200.0)),
    "clocks.sm": ("MHz", lambda p, g, u: str(g["clocks_mhz"]["sm"])),
    "clocks.mem": ("MHz", lambda p, g, u: str(g["clocks_mhz"]["mem"])),
    "clocks.gr": ("MHz", lambda p, g, u: str(g["clocks_mhz"]["graphics"])),
    "clocks.max.sm": ("MHz", lambda p, g, u: str(g["max_clocks_mhz"]["sm"])),
    "clocks.max.mem": ("MHz", lambda p, g, u: str(g["max_clocks_mhz"]["mem"])),
    "mig.mode.current": (None, lambda p, g, u: g.get("mig_mode", "Disabled")),
    "mig.mode.pending": (None, lambda p, g, u: g.get("mig_mode", "Disabled")),
    "ecc.mode.current": (None, lambda p, g, u: g.get("ecc_mode", "Enabled")),
    "ecc.mode.pending": (None, lambda p, g, u: g.get("ecc_mode", "Enabled")),
    "compute_mode": (None, lambda p, g, u: g.get("compute_mode", "Default")),
    "display_active": (None, lambda p, g, u: g.get("display_active", "Disabled")),
}
QUERY_ALIASES = {
    "gpu_name": "name", "gpu_serial": "serial", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id",
    "pci.device_id": "pci.device_id", "pci.sub_device_id": "pci.sub_device_id",
    "persistence-mode": "persistence_mode", "performance_state": "pstate", "gpu_temp": "temperature.gpu",
    "temperature.gpu": "temperature.gpu", "power.draw.instant": "power.draw", "power.draw.average": "power.draw",
    "fan.speed": "fan.speed", "memory.total": "memory.total",
}


def query_gpu(profile, gpus, used, fields, fmt):
    opts = [o.strip() for o in fmt.split(",") if o.strip()]
    if not opts or opts[0] != "csv" or any(o not in ("csv", "noheader", "nounits") for o in opts):
        _out(INVALID_ARGS + "\n")
        return 2
    noheader, nounits = "noheader" in opts, "nounits" in opts
    canon = []
    for f in [f.strip() for f in fields.split(",") if f.strip()]:
        c = QUERY_ALIASES.get(f, f)
        if c not in QUERY_FIELDS:
            _out('Field "%s" is not a valid field to query.\n\n' % f)
            return 2
        canon.append(c)
    if not canon:
        _out(INVALID_ARGS + "\n")
        return 2
    lines = []
    if not noheader:
        lines.append(", ".join("%s [%s]" % (c, QUERY_FIELDS[c][0]) if QUERY_FIELDS[c][0] else c for c in canon))
    for g in gpus:
        vals = []
        for c in canon:
            unit, get = QUERY_FIELDS[c]
            v = get(profile, g, used[g["index"]])
            if _gpu_na(v):
                vals.append("[N/A]")
            elif unit and not nounits:
                vals.append("%s %s" % (v, unit))
            else:
                vals.append(v)
        lines.append(", ".join(vals))
    _out("\n".join(lines) + "\n")
    return 0


# ------------------------------------------------------------------------------------------ -L, nvlink

def list_gpus(profile, gpus):
    _out("".join("GPU %d: %s (UUID: %s)\n" % (g["index"], g["name"], g["uuid"]) for g in gpus))
    return 0


def nvlink_status(profile, gpus):
    out = []
    for g in gpus:
        out.append("GPU %d: %s (UUID: %s)\n" % (g["index"], g["name"], g["uuid"]))
        nv = g.get("nvlink") or {}
        links = int(nv.get("links", 0))
        if not links:
            out.append("Device does not have or support Nvlink\n")
            continue
        inactive = set(nv.get("inactive") or [])
        for k in range(links):
            out.append("\t Link %d: %s\n" % (k, "<inactive>" if k in inactive else nv.get("speed", "53.125 GB/s")))
    _out("".join(out))
    return 0


# ------------------------------------------------------------------------------------------ table

_SEP = "+-----------------------------------------+------------------------+----------------------+"
_TABLE_HEAD = (
    "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n"
    "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |\n"
    "|                                         |                        |               MIG M. |\n"
    "|=========================================+========================+======================|\n")
_PROCESSES = (
    "+-----------------------------------------------------------------------------------------+\n"
    "| Processes:                                                                              |\n"
    "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |\n"
    "|        ID   ID                                                               Usage      |\n"
    "|=========================================================================================|\n"
    "|  No running processes found                                                             |\n"
    "+-----------------------------------------------------------------------------------------+\n")


def banner(profile):
    drv = profile["driver"]["version"]
    cuda = profile["driver"].get("cuda_version") or "N/A"
    line = "| NVIDIA-SMI " + drv.ljust(23)
    if renamed_banner(profile):
        line += "KMD Version: " + drv.ljust(14) + "CUDA UMD Version: " + cuda
    else:
        line += "Driver Version: " + drv.ljust(15) + "CUDA Version: " + cuda
    return line.ljust(90) + "|"


def table(profile, gpus, used, now=None):
    out = [time.asctime(now) if now else time.asctime(), "+" + "-" * 89 + "+", banner(profile), _SEP]
    out.append(_TABLE_HEAD.rstrip("\n"))
    for g in gpus:
        left = "%4d  %s" % (g["index"], g["name"])
        right = ("On" if g.get("persistence_mode", "Enabled") == "Enabled" else "Off") + "  "
        c1 = left + " " * max(1, 41 - len(left) - len(right)) + right
        c2 = "%19s %3s " % (g["pci_bus_id"], "Off")
        ecc = "0" if g.get("ecc_mode", "Enabled") == "Enabled" else "N/A"
        c3 = "%21s " % ecc
        out.append("|%s|%s|%s|" % (c1, c2, c3))
        fan = "N/A" if _gpu_na(g.get("fan_speed")) else "%s%%" % g["fan_speed"]
        pwr = "%dW / %dW" % (int(round(g.get("power_draw_w", 0))), int(round(g["power_limit_w"])))
        c1 = "%4s%6s%6s%24s " % (fan, "%dC" % int(g.get("temperature_c", 30)), g.get("performance_state", "P0"), pwr)
        c2 = "%23s " % ("%dMiB / %dMiB" % (used[g["index"]], g["memory_total_mib"]))
        c3 = "%8s%13s " % ("%d%%" % g.get("gpu_util_pct", 0), g.get("compute_mode", "Default"))
        out.append("|%s|%s|%s|" % (c1, c2, c3))
        out.append("|%s|%s|%21s |" % (" " * 41, " " * 24, g.get("mig_mode", "Disabled")))
        out.append(_SEP)
    _out("\n".join(out) + "\n\n" + _PROCESSES)
    return 0


# ------------------------------------------------------------------------------------------ topo -m

_TOPO_LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def topo_matrix(profile, gpus):
    topo = profile.get("topo") or {}
    nics = [name for name, _dev in simcommon.rdma_devices(profile)]
    gg, gn = topo.get("gpu_gpu", "NV18"), topo.get("gpu_nic", "SYS")
    cols = ["GPU%d" % g["index"] for g in gpus] + ["NIC%d" % k for k in range(len(nics))]
    lines = ["\t" + "\t".join(cols + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])]
    for g in gpus:
        cells = [" X " if h["index"] == g["index"] else gg for h in gpus] + [gn] * len(nics)
        lines.append("GPU%d\t" % g["index"] + "\t".join(cells) + "\t%s\t%s\t\t%s" % (
            g.get("cpu_affinity", "N/A"), g.get("numa_affinity", "N/A"), g.get("gpu_numa_id", "N/A")))
    for k in range(len(nics)):
        cells = [gn] * len(gpus) + [" X " if j == k else topo.get("nic_nic", "SYS") for j in range(len(nics))]
        lines.append("NIC%d\t" % k + "\t".join(cells))
    text = "\n".join(lines) + "\n" + _TOPO_LEGEND
    if nics:
        text += "\nNIC Legend:\n\n" + "".join("  NIC%d: %s\n" % (k, n) for k, n in enumerate(nics))
    _out(text)
    return 0


# ------------------------------------------------------------------------------------------ -q text

def _q_lines(items, width, indent=0):
    out = []
    for item in items:
        key, val = item
        if isinstance(val, list):
            out.append(" " * indent + key)
            out.extend(_q_lines(val, width, indent + 4))
        elif val is None:
            continue
        else:
            out.append((" " * indent + key).ljust(width) + ": " + str(val))
    return out


# The sections `-q` and `-q -x` both print, as rows of (-q label, -q -x tag, value); a list value holds the
# section's own rows. _keyed turns them into the (key, value) pairs of either report.
def _keyed(rows, xml):
    return [(tag if xml else label, _keyed(val, xml) if isinstance(val, list) else val) for label, tag, val in rows]


def _identity_rows(g):
    mig = g.get("mig_mode", "Disabled")
    return [
        ("Product Name", "product_name", g["name"]),
        ("Product Brand", "product_brand", g.get("product_brand", "NVIDIA")),
        ("Product Architecture", "product_architecture", g.get("product_architecture", "Blackwell")),
        ("Display Mode", "display_mode", "Requested functionality has been deprecated"),
        ("Display Attached", "display_attached", "Yes"),
        ("Display Active", "display_active", g.get("display_active", "Disabled")),
        ("Persistence Mode", "persistence_mode", g.get("persistence_mode", "Enabled")),
        ("Addressing Mode", "addressing_mode", g.get("addressing_mode")),
        ("MIG Mode", "mig_mode", [("Current", "current_mig", mig), ("Pending", "pending_mig", mig)]),
        ("Accounting Mode", "accounting_mode", "Disabled"),
        ("Accounting Mode Buffer Size", "accounting_mode_buffer_size", "4000"),
        ("Driver Model", "driver_model", [("Current", "current_dm", NA), ("Pending", "pending_dm", NA)]),
        ("Serial Number", "serial", g.get("serial", NA)), ("GPU UUID", "uuid", g["uuid"]),
        ("GPU PDI", "pdi", g.get("pdi")), ("Minor Number", "minor_number", g.get("minor_number", g["index"])),
        ("VBIOS Version", "vbios_version", g.get("vbios_version", NA)), ("MultiGPU Board", "multigpu_board", "No"),
        ("Board ID", "board_id", g.get("board_id", NA)),
        ("Board Part Number", "board_part_number", g.get("board_part_number", NA)),
        ("GPU Part Number", "gpu_part_number", g.get("gpu_part_number", NA)),
        ("FRU Part Number", "gpu_fru_part_number", NA),
    ]


# (-q label, profile key = -q -x tag)
_PLATFORM_INFO = (("Chassis Serial Number", "chassis_serial_number"), ("Slot Number", "slot_number"),
                  ("Tray Index", "tray_index"), ("Host ID", "host_id"), ("Peer Type", "peer_type"),
                  ("Module Id", "module_id"), ("GPU Fabric GUID", "gpu_fabric_guid"))
_FABRIC_HEALTH = (("Summary", "summary"), ("Bandwidth", "bandwidth"),
                  ("Route Recovery in progress", "route_recovery_in_progress"), ("Route Unhealthy", "route_unhealthy"),
                  ("Access Timeout Recovery", "access_timeout_recovery"),
                  ("Incorrect Configuration", "incorrect_configuration"), ("Partition Assigned", "partition_assigned"))


def _platform_rows(plat):
    if not plat:
        return []
    return [("Platform Info", "platformInfo", [(label, key, plat.get(key)) for label, key in _PLATFORM_INFO])]


def _fabric_rows(fab):
    if not fab:
        return []
    health = fab.get("health") or {}
    return [("Fabric", "fabric", [
        ("State", "state", fab.get("state", NA)), ("Status", "status", fab.get("status", NA)),
        ("CliqueId", "cliqueId", fab.get("clique_id", NA)), ("ClusterUUID", "clusterUuid", fab.get("cluster_uuid", NA)),
        ("Health", "health", [(label, key, health.get(key)) for label, key in _FABRIC_HEALTH
                              if health.get(key) is not None])])]


def _gpu_q_items(profile, g, used):
    dom, bus, dev = _bus_parts(g)
    total, reserved = g["memory_total_mib"], g.get("memory_reserved_mib", 0)
    items = _keyed(_identity_rows(g) + _platform_rows(g.get("platform")), xml=False)
    items += [
        ("C2C Mode", g.get("c2c_mode")),
        ("GSP Firmware Version", profile["driver"]["version"]),
        ("PCI", [("Bus", "0x" + bus), ("Device", "0x" + dev), ("Domain", "0x" + dom[-4:]),
                 ("Base Classcode", "0x3"), ("Sub Classcode", "0x2"),
                 ("Device Id", g["pci_device_id"]), ("Bus Id", g["pci_bus_id"]),
                 ("Sub System Id", g.get("pci_sub_system_id", NA))]),
        ("Fan Speed", g.get("fan_speed", NA) if _gpu_na(g.get("fan_speed")) else "%s %%" % g["fan_speed"]),
        ("Performance State", g.get("performance_state", "P0")),
        ("FB Memory Usage", [("Total", "%d MiB" % total), ("Reserved", "%d MiB" % reserved),
                             ("Used", "%d MiB" % used), ("Free", "%d MiB" % max(0, total - reserved - used))]),
        ("Compute Mode", g.get("compute_mode", "Default")),
        ("Utilization", [("GPU", "%d %%" % g.get("gpu_util_pct", 0)), ("Memory", "%d %%" % g.get("memory_util_pct", 0))]),
        ("ECC Mode", [("Current", g.get("ecc_mode", "Enabled")), ("Pending", g.get("ecc_mode", "Enabled"))]),
        ("Temperature", [("GPU Current Temp", "%d C" % g.get("temperature_c", 30))]),
        ("GPU Power Readings", [
            ("Average Power Draw", _w(g.get("power_draw_w", 0))), ("Instantaneous Power Draw", _w(g.get("power_draw_w", 0))),
            ("Current Power Limit", _w(g["power_limit_w"])), ("Requested Power Limit", _w(g["power_limit_w"])),
            ("Default Power Limit", _w(g["power_limit_w"])),
            ("Min Power Limit", _w(g.get("power_limit_min_w", 200.0))),
            ("Max Power Limit", _w(g.get("power_limit_max_w", g["power_limit_w"])))]),
    ]
    items += _keyed(_fabric_rows(g.get("fabric")), xml=False)
    items.append(("Processes", "None"))
    return items


def query_text(profile, gpus, used):
    new = renamed_banner(profile)
    width = 55 if new else 42
    drv = profile["driver"]["version"]
    cuda = profile["driver"].get("cuda_version") or "Not Found"
    head = [("Timestamp", time.strftime("%a %b %e %H:%M:%S %Y"))]
    if new:
        head += [("Driver Version", drv + " [Deprecated; will be removed in CUDA 14.0. Use KMD Version instead]"),
                 ("CUDA Version", cuda + " [Deprecated; will be removed in CUDA 14.0. Use CUDA UMD Version instead]"),
                 ("KMD Version", drv), ("CUDA UMD Version", cuda)]
    else:
        head += [("Driver Version", drv), ("CUDA Version", cuda)]
    out = ["==============NVSMI LOG==============", ""] + _q_lines(head, width) + [""]
    out += _q_lines([("Attached GPUs", len(profile["gpus"]))], width)
    for g in gpus:
        out.append("GPU " + g["pci_bus_id"])
        out += _q_lines(_gpu_q_items(profile, g, used[g["index"]]), width, 4)
        out.append("")
    _out("\n".join(out) + "\n")
    return 0


# ------------------------------------------------------------------------------------------ -q -x

def _esc(v):
    return str(v).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _xml(tag, val, depth, out, attrs=""):
    tabs = "\t" * depth
    if isinstance(val, list):
        out.append("%s<%s%s>" % (tabs, tag, attrs))
        for k, v in val:
            if v is not None:
                _xml(k, v, depth + 1, out)
        out.append("%s</%s>" % (tabs, tag))
    elif val == "":
        out.append("%s<%s%s>\n%s</%s>" % (tabs, tag, attrs, tabs, tag))
    else:
        out.append("%s<%s%s>%s</%s>" % (tabs, tag, attrs, _esc(val), tag))


def _x_pci(g):
    dom, bus, dev = _bus_parts(g)
    return [("pci_bus", bus), ("pci_device", dev), ("pci_domain", dom[-4:]), ("pci_base_class", "3"),
            ("pci_sub_class", "2"), ("pci_device_id", g["pci_device_id"].replace("0x", "")),
            ("pci_bus_id", g["pci_bus_id"]),
            ("pci_sub_system_id", str(g.get("pci_sub_system_id", NA)).replace("0x", ""))]


def _x_memory(g, used):
    total, reserved = g["memory_total_mib"], g.get("memory_reserved_mib", 0)
    return [
        ("fb_memory_usage", [("total", "%d MiB" % total), ("reserved", "%d MiB" % reserved),
                             ("used", "%d MiB" % used), ("free", "%d MiB" % max(0, total - reserved - used))]),
        ("bar1_memory_usage", [("total", "%d MiB" % g.get("bar1_total_mib", 262144)), ("used", "0 MiB"),
                               ("free", "%d MiB" % g.get("bar1_total_mib", 262144))]),
    ]


def _x_health(g):
    return [
        ("compute_mode", g.get("compute_mode", "Default")),
        ("utilization", [("gpu_util", "%d %%" % g.get("gpu_util_pct", 0)),
                         ("memory_util", "%d %%" % g.get("memory_util_pct", 0))]),
        ("ecc_mode", [("current_ecc", g.get("ecc_mode", "Enabled")), ("pending_ecc", g.get("ecc_mode", "Enabled"))]),
        ("ecc_errors", [("volatile", [("dram_correctable", "0"), ("dram_uncorrectable", "0")])]),
        ("remapped_rows", [("remapped_row_corr", "0"), ("remapped_row_unc", "0"), ("remapped_row_pending", "No"),
                           ("remapped_row_failure", "No")]),
        ("temperature", [("gpu_temp", "%d C" % g.get("temperature_c", 30))]),
    ]


def _x_power(g):
    pw = g.get("power_draw_w", 0)
    items = [("gpu_power_readings", [
        ("power_state", g.get("performance_state", "P0")), ("average_power_draw", _w(pw)),
        ("instant_power_draw", _w(pw)), ("current_power_limit", _w(g["power_limit_w"])),
        ("requested_power_limit", _w(g["power_limit_w"])), ("default_power_limit", _w(g["power_limit_w"])),
        ("min_power_limit", _w(g.get("power_limit_min_w", 200.0))),
        ("max_power_limit", _w(g.get("power_limit_max_w", g["power_limit_w"])))])]
    if g.get("module_power_limit_w"):
        m = g["module_power_limit_w"]
        items.append(("module_power_readings", [
            ("power_state", g.get("performance_state", "P0")), ("current_power_limit", _w(m)),
            ("default_power_limit", _w(m)), ("max_power_limit", _w(m))]))
    return items


def _x_clocks(tag, clk):
    if not clk:
        return []
    return [(tag, [("graphics_clock", "%d MHz" % clk["graphics"]), ("sm_clock", "%d MHz" % clk["sm"]),
                   ("mem_clock", "%d MHz" % clk["mem"]), ("video_clock", "%d MHz" % clk["video"])])]


def _gpu_x_items(profile, g, used):
    """The <gpu> element of `nvidia-smi -q -x`, as (tag, value) pairs in the driver's order."""
    items = _keyed(_identity_rows(g) + _platform_rows(g.get("platform")), xml=True)
    items += [
        ("c2c_mode", g.get("c2c_mode")),
        ("gsp_firmware_version", profile["driver"]["version"]),
        ("pci", _x_pci(g)),
        ("fan_speed", NA if _gpu_na(g.get("fan_speed")) else "%s %%" % g["fan_speed"]),
        ("performance_state", g.get("performance_state", "P0")),
    ]
    items += _x_memory(g, used) + _x_health(g) + _x_power(g)
    items += _x_clocks("clocks", g.get("clocks_mhz") or {}) + _x_clocks("max_clocks", g.get("max_clocks_mhz") or {})
    items += _keyed(_fabric_rows(g.get("fabric")), xml=True)
    items += [("processes", ""), ("accounted_processes", "")]
    return items


def query_xml(profile, gpus, used):
    out = ['<?xml version="1.0" ?>', '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">', "<nvidia_smi_log>"]
    _xml("timestamp", time.asctime(), 1, out)
    _xml("driver_version", profile["driver"]["version"], 1, out)
    _xml("cuda_version", profile["driver"].get("cuda_version") or "Not Found", 1, out)
    _xml("attached_gpus", len(profile["gpus"]), 1, out)
    for g in gpus:
        _xml("gpu", _gpu_x_items(profile, g, used[g["index"]]), 1, out, attrs=' id="%s"' % g["pci_bus_id"])
    out += ["", "</nvidia_smi_log>"]
    _out("\n".join(out) + "\n")
    return 0


# ------------------------------------------------------------------------------------------ nvidia-smi main

def _select(profile, ids):
    if ids is None:
        return list(profile["gpus"])
    sel = []
    for tok in ids.split(","):
        tok = tok.strip()
        match = [g for g in profile["gpus"] if tok in (str(g["index"]), g["uuid"], g["pci_bus_id"])]
        if not match:
            return None
        sel.extend(match)
    return sel


# Flags without a value: the options they set.
_SMI_SWITCHES = {"-q": ("q",), "--query": ("q",), "-x": ("x",), "--xml-format": ("x",), "-qx": ("q", "x"),
                 "-xq": ("q", "x"), "-L": ("L",), "--list-gpus": ("L",)}
# Subcommand flags: (subcommand, flag) -> option.
_SMI_SUB_SWITCHES = {("topo", "-m"): "m", ("topo", "--matrix"): "m", ("nvlink", "-s"): "s", ("nvlink", "--status"): "s"}


def _smi_value(args, i, name):
    """The value of the option at args[i] (`--opt=value` or `--opt value`) and the index of its last token."""
    a = args[i]
    if "=" in a and a.startswith("--"):
        return a.split("=", 1)[1], i
    if i + 1 >= len(args):
        raise ValueError(name)
    return args[i + 1], i + 1


def _smi_option(args, i, sub, opts):
    """Apply the option at args[i] to opts; returns the index of its last token. ValueError: not an option here."""
    a = args[i]
    if a in _SMI_SWITCHES:
        for key in _SMI_SWITCHES[a]:
            opts[key] = True
    elif a in ("-i", "--id") or a.startswith("--id="):
        opts["ids"], i = _smi_value(args, i, "id")
    elif a.startswith("-i") and len(a) > 2:
        opts["ids"] = a[2:]
    elif a == "--query-gpu" or a.startswith("--query-gpu="):
        opts["query"], i = _smi_value(args, i, "query-gpu")
    elif a == "--format" or a.startswith("--format="):
        opts["fmt"], i = _smi_value(args, i, "format")
    elif (sub, a) in _SMI_SUB_SWITCHES:
        opts[_SMI_SUB_SWITCHES[(sub, a)]] = True
    elif a in ("-d", "--display"):
        _value, i = _smi_value(args, i, "display")  # accepted, sections are not filtered
    else:
        raise ValueError(a)
    return i


def _smi_args(argv):
    """(subcommand or None, options) of an nvidia-smi command line; ValueError when the driver's tool refuses it."""
    args = list(argv)
    opts = {"q": False, "x": False, "L": False, "ids": None, "query": None, "fmt": None}
    sub = None
    if args and args[0] in ("topo", "nvlink"):
        sub = args.pop(0)
    i = 0
    while i < len(args):
        i = _smi_option(args, i, sub, opts) + 1
    return sub, opts


def _invalid():
    _out(INVALID_ARGS + "\n")
    return 2


def _smi_sub(profile, gpus, sub, opts):
    if sub == "topo":
        return topo_matrix(profile, gpus) if opts.get("m") else _invalid()
    return nvlink_status(profile, gpus) if opts.get("s") else _invalid()


def _smi_report(profile, gpus, opts):
    """The main command's output: a query, the GPU list, the -q report or the table."""
    used = simcommon.memory_used(profile)
    if opts["query"] is not None:
        if opts["fmt"] is None or opts["q"] or opts["L"]:
            return _invalid()
        return query_gpu(profile, gpus, used, opts["query"], opts["fmt"])
    if opts["L"]:
        return list_gpus(profile, gpus)
    if opts["q"]:
        return query_xml(profile, gpus, used) if opts["x"] else query_text(profile, gpus, used)
    if opts["x"] or opts["fmt"]:
        return _invalid()
    return table(profile, gpus, used)


def nvidia_smi(profile, argv):
    if argv[:1] in (["-h"], ["--help"]):
        _out("NVIDIA System Management Interface -- v%s (kimi-sim fake)\n\n"
             "Supported here: -L, -q [-x] [-i ID], --query-gpu=FIELDS --format=csv[,noheader][,nounits], "
             "topo -m, nvlink -s\n" % profile["driver"]["version"])
        return 0
    if not profile["driver"].get("loaded", True):
        _out(DRIVER_NOT_LOADED + "\n")
        return 9
    if not profile["gpus"]:
        _out("No devices were found\n")
        return 6
    try:
        sub, opts = _smi_args(argv)
    except ValueError:
        return _invalid()
    gpus = _select(profile, opts["ids"])
    if gpus is None:
        _out("No devices were found\n")
        return 6
    if sub:
        return _smi_sub(profile, gpus, sub, opts)
    return _smi_report(profile, gpus, opts)


# ------------------------------------------------------------------------------------------ nvidia-imex-ctl

_IMEX_LEGEND = """Connectivity Table Legend:
I - Invalid - Node wasn't reachable, no connection status available
N - Never Connected
R - Recovering - Connection was lost, but clean up has not yet been triggered.
D - Disconnected - Connection was lost, and clean up has been triggreed.
A - Authenticating - If GSSAPI enabled, client has initiated mutual authentication.
!V! - Version mismatch, communication disabled.
!M! - Node map mismatch, communication disabled.
C - Connected - Ready for operation
"""


def imex_nodes_text(profile, now=None):
    imex = profile["imex"]
    t = time.localtime(now) if now is not None else time.localtime()
    ms = int(((now if now is not None else time.time()) % 1) * 1000)
    stamp = "%d/%d/%d %02d:%02d:%02d.%03d" % (t.tm_mon, t.tm_mday, t.tm_year, t.tm_hour, t.tm_min, t.tm_sec, ms)
    lines = [_IMEX_LEGEND, stamp, "Nodes:"]
    nodes = imex["nodes"]
    for k, n in enumerate(nodes):
        lines.append("Node #%s- %s- %s- Version: %s" % (
            str(k).ljust(4), n["address"].ljust(16), n["status"].ljust(21), imex["version"]))
    lines.append("")
    lines.append(" Nodes From\\To  " + "".join(str(k).ljust(4) for k in range(len(nodes))).rstrip())
    for a, na in enumerate(nodes):
        cells = []
        for b, nb in enumerate(nodes):
            ok = a == b or (na["status"] == "READY" and nb["status"] == "READY")
            cells.append(("C" if ok else "N").ljust(4))
        lines.append(str(a).rjust(8) + " " * 8 + "".join(cells).rstrip())
    lines.append("")
    lines.append("Domain State: %s" % imex.get("domain_state", "UP"))
    return "\n".join(lines) + "\n"


def nvidia_imex_ctl(profile, argv):
    if argv in (["-N"], ["--show-nodes"]):
        _out(imex_nodes_text(profile))
        return 0
    sys.stderr.write("nvidia-imex-ctl (kimi-sim fake): supported invocation: nvidia-imex-ctl -N\n")
    return 1


# ------------------------------------------------------------------------------------------ nvidia-ctk

def nvidia_ctk(profile, argv):
    ctk = profile.get("container_toolkit") or {}
    if argv in (["--version"], ["-v"], ["version"]):
        _out("NVIDIA Container Toolkit CLI version %s\ncommit: %s\n" % (
            ctk.get("version", "1.18.0"), ctk.get("commit", "0" * 40)))
        return 0
    if argv[:2] == ["cdi", "list"]:
        devs = profile.get("cdi_devices") or []
        sys.stderr.write("INFO[0000] %-44s \n" % ("Found %d CDI devices" % len(devs)))
        _out("".join(d + "\n" for d in devs))
        return 0
    sys.stderr.write("nvidia-ctk (kimi-sim fake): supported: --version, cdi list\n")
    return 1
