"""Faked AMD tools: amd-smi, rocm-smi, rocminfo. Formats: shared/reference/gpu-node-probes.md section 3."""
import csv
import io
import json
import sys

import simcommon


def _out(text):
    sys.stdout.write(text)


def _err(text):
    sys.stderr.write(text)


def amd_smi_major(profile):
    try:
        return int(str(profile["rocm"]["amd_smi_tool"]).split(".", maxsplit=1)[0])
    except (KeyError, ValueError):
        return 26


def _vu(value, unit):
    return {"value": value, "unit": unit}


def amdgpu_version_field(profile):
    """amdgpu version as amd-smi reports it: the DKMS version, else the squeezed kernel banner (3.1)."""
    rocm = profile["rocm"]
    if rocm.get("amdgpu_dkms", True):
        return rocm["amdgpu_version"]
    kernel = rocm.get("kernel_release", "6.8.0-79-generic")
    banner = rocm.get("kernel_banner") or (
        "Linux version %s (buildd@lcy02-amd64-049) (x86_64-linux-gnu-gcc-13 (Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0, "
        "GNU ld (GNU Binutils for Ubuntu) 2.42) #79-Ubuntu SMP PREEMPT_DYNAMIC Tue Aug 12 14:42:46 UTC 2025" % kernel)
    return banner.replace(" ", "")


# ------------------------------------------------------------------------------------------ amd-smi

def _gpu_sections(profile, g, used):
    rocm = profile["rocm"]
    bus = {"bdf": g["bdf"], "max_pcie_width": g.get("max_pcie_width", 16),
           "max_pcie_speed": _vu(g.get("max_pcie_speed_gts", 32), "GT/s"), "pcie_interface_version":
           g.get("pcie_interface_version", "Gen 5"), "slot_type": g.get("slot_type", "OAM")}
    return {
        "asic": {
            "market_name": g["name"], "vendor_id": g.get("vendor_id", "0x1002"),
            "vendor_name": g.get("vendor_name", "Advanced Micro Devices Inc. [AMD/ATI]"),
            "subvendor_id": g.get("subvendor_id", "0x1002"), "device_id": g["device_id"],
            "subsystem_id": g.get("subsystem_id", g["device_id"]), "rev_id": g.get("rev_id", "0x00"),
            "asic_serial": g.get("asic_serial", "N/A"), "oam_id": g.get("oam_id", "N/A"),
            "num_compute_units": g.get("num_compute_units", 256),
            "target_graphics_version": g.get("target_graphics_version", "gfx950"),
        },
        "bus": bus,
        "ifwi": {k: (g.get("ifwi") or {}).get(k, "N/A") for k in ("name", "build_date", "part_number", "version")},
        "driver": {"name": "amdgpu", "version": amdgpu_version_field(profile)},
        "board": {"model_number": (g.get("board") or {}).get("model_number", "N/A"),
                  "product_serial": g.get("asic_serial", "N/A"),
                  "fru_id": (g.get("board") or {}).get("fru_id", "N/A"),
                  "product_name": (g.get("board") or {}).get("product_name", "N/A"),
                  "manufacturer_name": (g.get("board") or {}).get("manufacturer_name", "AMD")},
        "vram": {"type": "HBM3E", "vendor": "N/A", "size": _vu(g["memory_total_mib"], "MB")},
    }


STATIC_FLAGS = {"-a": "asic", "--asic": "asic", "-b": "bus", "--bus": "bus", "-I": "ifwi", "--ifwi": "ifwi",
                "-V": "ifwi", "--vbios": "ifwi", "-d": "driver", "--driver": "driver", "-B": "board",
                "--board": "board", "-v": "vram", "--vram": "vram"}
SECTION_ORDER = ["asic", "bus", "ifwi", "driver", "board", "vram"]


def _parse_amd_args(argv, flags):
    """-> (sections, json, gpu indices or None); raises ValueError on unknown args."""
    sections, as_json, gpus = [], False, None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--json":
            as_json = True
        elif a in ("-g", "--gpu"):
            gpus = []
            while i + 1 < len(argv) and argv[i + 1].isdigit():
                i += 1
                gpus.append(int(argv[i]))
            if not gpus:
                raise ValueError(a)
        elif a.startswith("--gpu="):
            gpus = [int(x) for x in a.split("=", 1)[1].split(",")]
        elif a in flags:
            if flags[a] not in sections:
                sections.append(flags[a])
        else:
            raise ValueError(a)
        i += 1
    return sections, as_json, gpus


def _selected(profile, idx):
    if idx is None:
        return list(profile["gpus"])
    by = {g["index"]: g for g in profile["gpus"]}
    if any(i not in by for i in idx):
        return None
    return [by[i] for i in idx]


def _wrap(profile, items):
    return {"gpu_data": items} if amd_smi_major(profile) >= 26 else items


def _text_value(v):
    if isinstance(v, dict) and "value" in v:
        return "%s %s" % (v["value"], v["unit"])
    return v


def _text_gpu(gpu_index, sections):
    lines = ["GPU: %d" % gpu_index]
    for name, body in sections:
        lines.append("    %s:" % name.upper())
        if isinstance(body, dict):
            for k, v in body.items():
                lines.append("        %s: %s" % (k.upper(), _text_value(v)))
    return "\n".join(lines) + "\n"


def amd_smi_version(profile, as_json):
    rocm = profile["rocm"]
    major = amd_smi_major(profile)
    tool, lib, rv = rocm["amd_smi_tool"], rocm["amd_smi_library"], rocm["version"]
    amdgpu, hsmp = amdgpu_version_field(profile), rocm.get("hsmp_version", "N/A")
    if as_json:
        data = {"tool": "AMDSMI Tool", "version": tool, "amdsmi_library_version": lib, "rocm_version": rv}
        if major >= 25:
            data["amdgpu_version"] = amdgpu
            data["amd_hsmp_driver_version"] = hsmp
        _out(json.dumps(data, indent=4) + "\n")
        return 0
    line = "AMDSMI Tool: %s | AMDSMI Library version: %s | ROCm version: %s" % (tool, lib, rv)
    if major == 25:
        line += " | amdgpu version: %s | amd_hsmp version: %s" % (amdgpu, hsmp)
    elif major >= 26:
        line += " | amdgpu version: %s | hsmp version: %s" % (amdgpu, hsmp)
    _out(line + "\n")
    return 0


METRIC_FLAGS = {"-m": "mem_usage", "--mem-usage": "mem_usage", "-u": "usage", "--usage": "usage"}


def _gpus_or_raise(profile, idx):
    gpus = _selected(profile, idx)
    if gpus is None:
        raise LookupError
    return gpus


def _emit_sections(profile, items, as_json):
    """Per-GPU sections [(gpu index, [(section, data)])] as amd-smi prints them (JSON or text)."""
    if as_json:
        data = [dict([("gpu", i)] + secs) for i, secs in items]
        _out(json.dumps(_wrap(profile, data), indent=4) + "\n")
    else:
        _out("\n".join(_text_gpu(i, secs) for i, secs in items))
    return 0


def _amd_version(profile, rest, used):
    _s, as_json, _g = _parse_amd_args(rest, {})
    return amd_smi_version(profile, as_json)


def _amd_list(profile, rest, used):
    _s, as_json, idx = _parse_amd_args(rest, {})
    gpus = _gpus_or_raise(profile, idx)
    rows = [{"gpu": g["index"], "bdf": g["bdf"], "uuid": g["uuid"], "kfd_id": g["kfd_id"],
             "node_id": g["node_id"], "partition_id": (g.get("partition") or {}).get("id", 0)} for g in gpus]
    if as_json:
        _out(json.dumps(rows, indent=4) + "\n")
    else:
        _out("".join("GPU: %d\n    BDF: %s\n    UUID: %s\n    KFD_ID: %s\n    NODE_ID: %s\n"
                     "    PARTITION_ID: %s\n\n" % (
                         r["gpu"], r["bdf"], r["uuid"], r["kfd_id"], r["node_id"], r["partition_id"])
                     for r in rows))
    return 0


def _amd_static(profile, rest, used):
    sections, as_json, idx = _parse_amd_args(rest, STATIC_FLAGS)
    gpus = _gpus_or_raise(profile, idx)
    wanted = [s for s in SECTION_ORDER if s in sections] or SECTION_ORDER
    items = []
    for g in gpus:
        allsec = _gpu_sections(profile, g, used[g["index"]])
        items.append((g["index"], [(s, allsec[s]) for s in wanted]))
    return _emit_sections(profile, items, as_json)


def _metric_sections(g, u):
    total = g["memory_total_mib"]
    return {
        "usage": {"gfx_activity": _vu(g.get("gpu_util_pct", 0), "%"), "umc_activity": _vu(0, "%"),
                  "mm_activity": _vu(0, "%")},
        "mem_usage": {"total_vram": _vu(total, "MB"), "used_vram": _vu(u, "MB"),
                      "free_vram": _vu(total - u, "MB"), "total_visible_vram": _vu(total, "MB"),
                      "used_visible_vram": _vu(u, "MB"), "free_visible_vram": _vu(total - u, "MB"),
                      "total_gtt": _vu(1547872, "MB"), "used_gtt": _vu(21, "MB"),
                      "free_gtt": _vu(1547851, "MB")},
    }


def _amd_metric(profile, rest, used):
    sections, as_json, idx = _parse_amd_args(rest, METRIC_FLAGS)
    gpus = _gpus_or_raise(profile, idx)
    wanted = [s for s in ("usage", "mem_usage") if s in sections] or ["usage", "mem_usage"]
    items = []
    for g in gpus:
        sec = _metric_sections(g, used[g["index"]])
        items.append((g["index"], [(s, sec[s]) for s in wanted]))
    return _emit_sections(profile, items, as_json)


AMD_SMI_COMMANDS = {"version": _amd_version, "list": _amd_list, "static": _amd_static, "metric": _amd_metric}


def amd_smi(profile, argv):
    if not argv or argv[0] in ("-h", "--help"):
        _out("usage: amd-smi [-h] {version,list,static,metric} ...  (kimi-sim fake)\n")
        return 0
    cmd, rest = argv[0], argv[1:]
    used = simcommon.memory_used(profile)
    if cmd not in AMD_SMI_COMMANDS:
        _err("amd-smi: error: argument command: invalid choice: '%s'\n" % cmd)
        return 2
    try:
        return AMD_SMI_COMMANDS[cmd](profile, rest, used)
    except ValueError as exc:
        _err("amd-smi: error: unrecognized arguments: %s\n" % exc)
        return 2
    except LookupError:
        _err("amd-smi: error: GPU index out of range (valid: 0-%d)\n" % (len(profile["gpus"]) - 1))
        return 2


# ------------------------------------------------------------------------------------------ rocm-smi

def _title(text):
    pad = 124 - len(text) - 2
    left = pad // 2
    return "=" * left + " " + text + " " + "=" * (pad - left)


def rocm_smi_concise(profile, used):
    out = [_title("ROCm System Management Interface"), _title("Concise Info"),
           "Device  Node  IDs              Temp        Power     Partitions          SCLK     MCLK     Fan  Perf  "
           "PwrCap   VRAM%  GPU%  ",
           "              (DID,     GUID)  (Junction)  (Socket)  (Mem, Compute, ID)                                "
           "                     ",
           "=" * 124]
    for g in profile["gpus"]:
        part = g.get("partition") or {}
        vram_pct = int(round(100.0 * used[g["index"]] / g["memory_total_mib"]))
        cols = [
            (str(g["index"]), 8), (str(g["node_id"]), 6), (g["device_id"] + ",", 10), (str(g["guid"]), 7),
            ("%.1f\u00b0C" % g.get("temperature_c", 44.0), 12), ("%.1fW" % g.get("power_w", 250.0), 10),
            ("%s, %s, %s" % (part.get("memory", "NPS1"), part.get("compute", "SPX"), part.get("id", 0)), 20),
            ("%dMhz" % g.get("sclk_mhz", 800), 9), ("%dMhz" % g.get("mclk_mhz", 2000), 9),
            ("%d%%" % g.get("fan_pct", 0), 5), (g.get("perf_level", "auto"), 6), ("%.1fW" % g.get("power_cap_w", 1400), 9),
            ("%d%%" % vram_pct, 7), ("%d%%" % g.get("gpu_util_pct", 0), 6)]
        out.append("".join(v.ljust(w) for v, w in cols))
    out += ["=" * 124, _title("End of ROCm SMI Log")]
    _out("\n".join(out) + "\n")
    return 0


def _product(profile, g):
    return {"Device Name": g["name"], "Device ID": g["device_id"], "Device Rev": g.get("rev_id", "0x00"),
            "Subsystem ID": g.get("subsystem_id", g["device_id"]), "GUID": str(g["guid"]),
            "Card Series": g["name"], "Card Model": g["device_id"],
            "Card Vendor": "Advanced Micro Devices, Inc. [AMD/ATI]", "Card SKU": g.get("card_sku", "N/A"),
            "Node ID": str(g["node_id"]), "GFX Version": g.get("target_graphics_version", "gfx950")}


ROCM_SMI_KNOWN = {"--showproductname", "-i", "--showid", "--showdriverversion", "--showmeminfo", "vram", "--json",
                  "--csv", "--alldevices"}


def _rocm_cards(profile, used, product, mem):
    cards = {}
    for g in profile["gpus"]:
        card = {}
        if product:
            card.update(_product(profile, g))
        if mem:
            card["VRAM Total Memory (B)"] = str(g["memory_total_mib"] * 1024 * 1024)
            card["VRAM Total Used Memory (B)"] = str(used[g["index"]] * 1024 * 1024)
        cards["card%d" % g["index"]] = card
    return cards


def _rocm_json(cards, system):
    data = {k: v for k, v in cards.items() if v}
    if system:
        data["system"] = system
    _out(json.dumps(data) + "\n")
    return 0


def _rocm_csv(cards, system):
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if any(cards.values()):
        keys = list(next(iter(cards.values())).keys())
        w.writerow(["device"] + keys)
        for name, card in cards.items():
            w.writerow([name] + [card[k] for k in keys])
    if system:
        w.writerow(["system", "Driver version"])
        w.writerow(["system", system["Driver version"]])
    _out(buf.getvalue())
    return 0


def _rocm_text(cards, system, product, mem):
    out = [_title("ROCm System Management Interface")]
    if product or mem:
        out.append(_title("Product Info" if product else "Memory Usage (Bytes)"))
        for name, card in cards.items():
            for k, v in card.items():
                out.append("GPU[%s]\t\t: %s: %s" % (name[4:], k, v))
        out.append("=" * 124)
    if system:
        out.append(_title("Version of System Component"))
        out.append("Driver version: %s" % system["Driver version"])
        out.append("=" * 124)
    out.append(_title("End of ROCm SMI Log"))
    _out("\n".join(out) + "\n")
    return 0


def rocm_smi(profile, argv):
    used = simcommon.memory_used(profile)
    bad = [a for a in argv if a not in ROCM_SMI_KNOWN]
    if bad:
        _out("usage: rocm-smi [-h] ... (kimi-sim fake)\nrocm-smi: error: unrecognized arguments: %s\n" % " ".join(bad))
        return 2
    as_json, as_csv = "--json" in argv, "--csv" in argv
    product = "--showproductname" in argv or "-i" in argv or "--showid" in argv
    driver = "--showdriverversion" in argv
    mem = "--showmeminfo" in argv
    if mem and "vram" not in argv:
        _out("rocm-smi: error: argument --showmeminfo: expected at least one argument\n")
        return 2
    if not (product or driver or mem):
        if as_json or as_csv:
            _out("WARNING: No JSON data to report\n")
            return 0
        return rocm_smi_concise(profile, used)
    cards = _rocm_cards(profile, used, product, mem)
    system = {"Driver version": profile["rocm"]["amdgpu_version"]} if driver else None
    if as_json:
        return _rocm_json(cards, system)
    if as_csv:
        return _rocm_csv(cards, system)
    return _rocm_text(cards, system, product, mem)


# ------------------------------------------------------------------------------------------ rocminfo

def _kv(key, value, indent=2):
    return " " * indent + (key + ":").ljust(25) + str(value)


def rocminfo(profile, argv):
    rocm = profile["rocm"]
    out = ["ROCk module version %s is loaded" % rocm["amdgpu_version"] if rocm.get("amdgpu_dkms", True)
           else "ROCk module is loaded",
           "=====================", "HSA System Attributes", "=====================",
           _kv("Runtime Version", rocm.get("hsa_runtime_version", "1.18"), 0),
           _kv("Runtime Ext Version", rocm.get("hsa_runtime_ext_version", "1.15"), 0),
           _kv("System Timestamp Freq.", "1000.000000MHz", 0),
           _kv("Sig. Max Wait Duration", "18446744073709551615 (0xFFFFFFFFFFFFFFFF) (timestamp count)", 0),
           _kv("Machine Model", "LARGE", 0), _kv("System Endianness", "LITTLE", 0),
           _kv("Mwaitx", "DISABLED", 0), _kv("XNACK enabled", "NO", 0), _kv("DMAbuf Support", "YES", 0),
           _kv("VMM Support", "YES", 0), "", "==========", "HSA Agents", "=========="]
    agent = 0
    for k, cpu in enumerate(profile.get("cpus") or []):
        agent += 1
        out += ["*******", "Agent %d" % agent, "*******",
                _kv("Name", cpu["name"]), _kv("Uuid", "CPU-XX"), _kv("Marketing Name", cpu["name"]),
                _kv("Vendor Name", "CPU"), _kv("Feature", "None specified"), _kv("Profile", "FULL_PROFILE"),
                _kv("Float Round Mode", "NEAR"), _kv("Max Queue Number", "0(0x0)"), _kv("Queue Min Size", "0(0x0)"),
                _kv("Queue Max Size", "0(0x0)"), _kv("Queue Type", "MULTI"), _kv("Node", k),
                _kv("Device Type", "CPU"), "  Cache Info:", _kv("L1", "49152(0xc000) KB", 4),
                _kv("Chip ID", "0(0x0)"), _kv("Max Clock Freq. (MHz)", cpu.get("max_clock_mhz", 3300)),
                _kv("BDFID", 0), _kv("Internal Node ID", k), _kv("Compute Unit", cpu.get("compute_units", 128)),
                "  ISA Info:"]
    for g in sorted(profile["gpus"], key=lambda x: (x.get("node_id", 0), x["index"])):
        agent += 1
        gfx = g.get("target_graphics_version", "gfx950")
        did = int(g["device_id"], 16)
        bus = int(g["bdf"].split(":")[1], 16)
        generic = "gfx9-4-generic" if gfx.startswith("gfx9") else gfx
        out += ["*******", "Agent %d" % agent, "*******",
                _kv("Name", gfx), _kv("Uuid", g.get("hsa_uuid", "GPU-XX")), _kv("Marketing Name", g["name"]),
                _kv("Vendor Name", "AMD"), _kv("Feature", "KERNEL_DISPATCH"), _kv("Profile", "BASE_PROFILE"),
                _kv("Float Round Mode", "NEAR"), _kv("Max Queue Number", "128(0x80)"),
                _kv("Queue Min Size", "64(0x40)"), _kv("Queue Max Size", "131072(0x20000)"),
                _kv("Queue Type", "MULTI"), _kv("Node", g.get("node_id", agent - 1)), _kv("Device Type", "GPU"),
                "  Cache Info:", _kv("L1", "32(0x20) KB", 4), _kv("L2", "4096(0x1000) KB", 4),
                _kv("L3", "262144(0x40000) KB", 4),
                _kv("Chip ID", "%d(0x%x)" % (did, did)), _kv("ASIC Revision", "1(0x1)"),
                _kv("Cacheline Size", "128(0x80)"), _kv("Max Clock Freq. (MHz)", 2400),
                _kv("BDFID", bus << 8), _kv("Internal Node ID", g.get("node_id", agent - 1)),
                _kv("Compute Unit", g.get("num_compute_units", 256)), _kv("SIMDs per CU", 4),
                _kv("Shader Engines", 32), _kv("Shader Arrs. per Eng.", 1),
                "  ISA Info:", "    ISA 1", _kv("Name", "amdgcn-amd-amdhsa--%s:sramecc+:xnack-" % gfx, 6),
                "    ISA 2", _kv("Name", "amdgcn-amd-amdhsa--%s:sramecc+:xnack-" % generic, 6)]
    out.append("*** Done ***")
    _out("\n".join(out) + "\n")
    return 0
