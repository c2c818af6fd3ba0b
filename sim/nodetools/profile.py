"""Node profiles of the rehearsal cluster: load a base profile, apply named faults, render per-node values.

Standard library only (runs inside the node containers, Debian bookworm python3 3.11, and on the controller).

Public API (used by the sim controller, documented in docs/sim-profiles.md):

    load_profile(path) -> dict
    apply_faults(profile, names) -> dict
    render_node_profile(base_name, node_name, node_index, faults=(), *, address=None, domain_nodes=None,
                        profiles_dir=None) -> dict
    list_faults(profiles_dir=None) -> dict  (name -> description)
    expand(profile) -> dict  (re-derive the per-node sections of a rendered profile)

A *base profile* (sim/profiles/<name>.json) holds model facts plus per-slot values; a *rendered profile* adds
the node identity (`node`) and the derived per-node sections (`gpus`, `rdma.devices.*.node_guid`, `imex.nodes`,
`cdi_devices`). The faked tools read rendered profiles (/etc/kimi-sim/profile.json or $KIMI_SIM_PROFILE).
"""
import copy
import hashlib
import ipaddress
import json
import os

SCHEMA_VERSION = 1
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_PROFILE_PATH = "/etc/kimi-sim/profile.json"


def _profiles_dir_candidates():
    env = os.environ.get("KIMI_SIM_PROFILES_DIR")
    if env:
        yield env
    # repo layout: sim/nodetools/profile.py -> sim/profiles; image layout: /opt/kimi-sim/{nodetools,profiles}
    yield os.path.join(os.path.dirname(HERE), "profiles")
    yield "/opt/kimi-sim/profiles"


def profiles_dir(explicit=None):
    if explicit:
        return explicit
    for cand in _profiles_dir_candidates():
        if os.path.isdir(cand):
            return cand
    raise FileNotFoundError("no profiles directory found (set KIMI_SIM_PROFILES_DIR)")


def load_profile(path):
    """Read a base or rendered profile (JSON object) from `path`."""
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict):
        raise ValueError("%s: a profile must be a JSON object" % path)
    if data.get("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
        raise ValueError("%s: unsupported schema_version %r" % (path, data.get("schema_version")))
    for key in ("vendor", "accelerator", "gpu_count", "gpu"):
        if key not in data:
            raise ValueError("%s: missing required key %r" % (path, key))
    if data["vendor"] not in ("nvidia", "amd", "cpu"):
        raise ValueError("%s: vendor must be nvidia, amd or cpu" % path)
    return data


def deep_merge(base, patch):
    """Return base updated by patch: dicts merge recursively, everything else (lists, scalars, null) replaces."""
    out = copy.deepcopy(base)
    for key, val in patch.items():
        if isinstance(val, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], val)
        else:
            out[key] = copy.deepcopy(val)
    return out


def _load_fault_table(pdir=None):
    with open(os.path.join(profiles_dir(pdir), "faults.json"), encoding="utf-8") as fh:
        table = json.load(fh)
    return {k: v for k, v in table.items() if not k.startswith("_")}


def list_faults(profiles_dir=None):
    """Fault name -> one-line description."""
    return {name: spec.get("description", "") for name, spec in sorted(_load_fault_table(profiles_dir).items())}


def _fault_patch(name, spec, profile):
    patches = spec.get("patches", {})
    for key in (profile.get("accelerator"), profile.get("vendor"), "*"):
        if key in patches:
            patch = patches[key]
            break
    else:
        raise ValueError("fault %r does not apply to %s/%s (defined for: %s)" % (
            name, profile.get("vendor"), profile.get("accelerator"), ", ".join(sorted(patches))))
    for req in spec.get("requires", []):
        if not profile.get(req):
            raise ValueError("fault %r needs a profile with %r (the %s profile has none)" % (
                name, req, profile.get("accelerator")))
    return patch


def apply_faults(profile, names, profiles_dir=None):
    """Return a copy of `profile` (base or rendered) with the named faults deep-merged in, in order.

    Unknown names raise ValueError listing the valid ones; a fault that has no patch for the profile's
    vendor/accelerator raises ValueError as well. A rendered profile is re-expanded afterwards.
    """
    if isinstance(names, str):
        names = [names]
    table = _load_fault_table(profiles_dir)
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ValueError("unknown fault(s) %s; valid faults: %s" % (
            ", ".join(repr(n) for n in unknown), ", ".join(sorted(table))))
    out = copy.deepcopy(profile)
    for name in names:
        out = deep_merge(out, _fault_patch(name, table[name], out))
        applied = list(out.get("faults", []))
        if name not in applied:
            applied.append(name)
        out["faults"] = applied
    if "node" in out:
        out = expand(out)
    return out


# ---------------------------------------------------------------------------------------------- rendering

def _hex(seed, n):
    out = ""
    i = 0
    while len(out) < n:
        out += hashlib.sha256(("%s/%d" % (seed, i)).encode()).hexdigest()
        i += 1
    return out[:n]


def nvidia_uuid(seed):
    h = _hex(seed, 32)
    return "GPU-%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:32])


def amd_uuid(seed, device_id):
    # MI355X UUIDs embed the device id: 75ff75a3-0000-1000-80xx-xxxxxxxxxxxx (gpu-node-probes.md 3.3)
    did = device_id.lower().replace("0x", "")[-4:]
    h = _hex(seed, 14)
    return "%sff%s-0000-1000-80%s-%s" % (did[:2], did, h[:2], h[2:14])


def _guid(seed):
    h = _hex(seed, 16)
    return "%s:%s:%s:%s" % (h[0:4], h[4:8], h[8:12], h[12:16])


def _node_address(profile, index):
    base = profile.get("node_address_base", "127.0.0.11")
    return str(ipaddress.ip_address(base) + index)


def _nvidia_gpu(p, g, i, seed):
    """NVIDIA per-GPU identity: UUID, minor number, serial, PDI, fabric and platform (tray, fabric GUID)."""
    node = p["node"]
    g.setdefault("uuid", nvidia_uuid(seed))
    g.setdefault("minor_number", i)
    if "serial" not in g:
        # two GPUs of one Grace module share a serial on GB trays (real GB300 capture)
        per = int(p.get("gpus_per_serial", 1))
        g["serial"] = str(int(p.get("serial_base", 1650000000000)) + 1000 * node["index"] + i // per + 1)
    g.setdefault("pdi", "0x" + _hex(seed + "/pdi", 16))
    fabric = p.get("fabric")
    g["fabric"] = deep_merge(fabric, g.get("fabric") or {}) if fabric else None
    if g.get("platform"):
        plat = g["platform"]
        plat["tray_index"] = int(plat.get("tray_index", 0)) + node["index"]
        plat.setdefault("gpu_fabric_guid", "0x" + _hex(seed + "/fguid", 16))


def _amd_gpu(g, i, seed):
    """AMD per-GPU identity: UUID, ASIC serial, KFD id, render minor, HSA UUID."""
    g.setdefault("uuid", amd_uuid(seed, g.get("device_id", "0x75a3")))
    g.setdefault("asic_serial", "0x" + _hex(seed + "/serial", 16).upper())
    g.setdefault("kfd_id", int(_hex(seed + "/kfd", 4), 16))
    g.setdefault("render_minor", 128 + 8 * i)
    g.setdefault("hsa_uuid", "GPU-" + _hex(seed + "/hsa", 16))


def _expand_gpus(p):
    slots = p.get("gpu_slots", [])
    count = int(p["gpu_count"])
    if count > len(slots):
        raise ValueError("gpu_count %d exceeds the %d gpu_slots of the profile" % (count, len(slots)))
    overrides = p.get("gpu_overrides", {}) or {}
    gpus = []
    for i in range(count):
        g = deep_merge(p["gpu"], slots[i])
        g = deep_merge(g, overrides.get(str(i), {}))
        g["index"] = i
        seed = "%s/%s/gpu%d/%s" % (p["accelerator"], p["node"]["name"], i, g.get("name"))
        if p["vendor"] == "nvidia":
            _nvidia_gpu(p, g, i, seed)
        else:
            _amd_gpu(g, i, seed)
        gpus.append(g)
    return gpus


def _expand_rdma(p):
    rdma = p.get("rdma") or {}
    for dev_name, dev in (rdma.get("devices") or {}).items():
        dev.setdefault("node_guid", _guid("%s/%s" % (p["node"]["name"], dev_name)))
        dev.setdefault("sys_image_guid", dev["node_guid"])


def _expand_imex(p):
    imex = p.get("imex")
    if not imex:
        return
    node = p["node"]
    nodes = imex.get("domain_nodes") or [node["address"]]
    statuses = imex.get("node_status") or {}
    rows = []
    for addr in nodes:
        default = "READY" if addr == node["address"] else imex.get("peer_status", "READY")
        rows.append({"address": addr, "status": statuses.get(addr, default)})
    imex["nodes"] = rows
    imex["version"] = imex.get("version_override") or ".".join(p["driver"]["version"].split(".")[:2])


def _cdi_devices(p, gpus):
    ctk = p.get("container_toolkit")
    if not (p["vendor"] == "nvidia" and ctk and ctk.get("cdi_spec", True)):
        return []
    devs = ["nvidia.com/gpu=%d" % g["index"] for g in gpus]
    if ctk.get("cdi_uuid_names", False):
        devs += ["nvidia.com/gpu=%s" % g["uuid"] for g in gpus]
    devs.append("nvidia.com/gpu=all")
    return devs


def expand(profile):
    """Derive the per-node sections of a profile that carries `node` (name, index, address)."""
    p = copy.deepcopy(profile)
    p["gpus"] = _expand_gpus(p)
    _expand_rdma(p)
    _expand_imex(p)
    p["cdi_devices"] = _cdi_devices(p, p["gpus"])
    return p


def render_node_profile(base_name, node_name, node_index, faults=(), *, address=None, domain_nodes=None,
                        profiles_dir=None):
    """Load sim/profiles/<base_name>.json, apply `faults`, fill in the node's own values.

    node_index (0-based) picks the default address (`node_address_base` + index) and seeds nothing else:
    UUIDs, serials and GUIDs are derived from node_name, so they are stable and unique per node.
    `domain_nodes` overrides the IMEX domain's address list (default: the profile's `imex.domain_nodes`).
    """
    pdir = globals()["profiles_dir"](profiles_dir)
    if os.sep in base_name or base_name.startswith("."):
        raise ValueError("base profile must be a name, not a path: %r" % base_name)
    path = os.path.join(pdir, base_name + ".json")
    if not os.path.exists(path):
        valid = sorted(f[:-5] for f in os.listdir(pdir) if f.endswith(".json") and f != "faults.json")
        raise ValueError("unknown base profile %r; valid: %s" % (base_name, ", ".join(valid)))
    prof = load_profile(path)
    prof["profile"] = base_name
    prof["faults"] = []
    prof = apply_faults(prof, list(faults or ()), profiles_dir=pdir)
    prof["node"] = {
        "name": node_name,
        "index": int(node_index),
        "address": address or _node_address(prof, int(node_index)),
    }
    if domain_nodes is not None and prof.get("imex"):
        prof["imex"]["domain_nodes"] = list(domain_nodes)
    return expand(prof)


def current_profile_path():
    return os.environ.get("KIMI_SIM_PROFILE") or DEFAULT_PROFILE_PATH


def load_current():
    """Profile for the faked tools: rendered if it carries `node`, else rendered on the fly for this host."""
    prof = load_profile(current_profile_path())
    if "node" not in prof:
        import socket
        prof["node"] = {"name": socket.gethostname(), "index": 0,
                        "address": os.environ.get("SIM_NODE_ADDRESS") or _node_address(prof, 0)}
    return expand(prof)


def main(argv=None):
    """CLI: python3 profile.py render BASE NODE INDEX [FAULT...]  |  python3 profile.py faults"""
    import sys
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["faults"]:
        for k, v in list_faults().items():
            print("%-22s %s" % (k, v))
        return 0
    if argv[:1] == ["render"] and len(argv) >= 4:
        prof = render_node_profile(argv[1], argv[2], int(argv[3]), argv[4:])
        json.dump(prof, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    sys.stderr.write(main.__doc__ + "\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
