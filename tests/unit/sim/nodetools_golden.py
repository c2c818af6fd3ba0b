"""Every faked node tool's exact output (stdout, stderr, exit code) over every base profile x fault x command
line, and the rendered profile, at a fixed clock: one digest per (base profile, faults), printed as JSON.

Run by test_nodetools_golden.py in a process of its own: the node tools import their siblings by plain name,
`profile` among them, which must come before the standard library's `profile`. Their directory is put ahead of it
the way a program's import roots are, by how it is started (PYTHONPATH), not by this file.
Usage (in the repository root): PYTHONPATH=sim/nodetools python tests/unit/sim/nodetools_golden.py REPO TMPDIR
"""

import contextlib
import hashlib
import io
import json
import os
import sys

import time

REPO, TMP = os.path.abspath(sys.argv[1]), sys.argv[2]
NT = os.path.join(REPO, "sim", "nodetools")
# A fixed clock: nvidia-smi prints the time.
_T = time.localtime(1700000000)
_LT, _ST, _AT = time.localtime, time.strftime, time.asctime
time.time = lambda: 1700000000.25
time.localtime = lambda s=None: _LT(1700000000 if s is None else s)
time.strftime = lambda f, t=None: _ST(f, _T if t is None else t)
time.asctime = lambda t=None: _AT(_T if t is None else t)
import amdtools  # noqa: E402  pylint: disable=wrong-import-position
import nvtools  # noqa: E402  pylint: disable=wrong-import-position
import profile as P  # noqa: E402  pylint: disable=wrong-import-position
import rdmatools  # noqa: E402  pylint: disable=wrong-import-position
import simcommon  # noqa: E402  pylint: disable=wrong-import-position

assert P.__file__.startswith(NT), P.__file__
os.environ["KIMI_SIM_DOCKER_SOCK"] = os.path.join(TMP, "no-docker.sock")
TOOLS = {
    "nvidia-smi": nvtools.nvidia_smi,
    "nvidia-ctk": nvtools.nvidia_ctk,
    "nvidia-imex-ctl": nvtools.nvidia_imex_ctl,
    "amd-smi": amdtools.amd_smi,
    "rocm-smi": amdtools.rocm_smi,
    "rocminfo": amdtools.rocminfo,
    "ibv_devinfo": rdmatools.ibv_devinfo,
    "ibstat": rdmatools.ibstat,
    "rdma": rdmatools.rdma,
}
# The fields the collection's preflight queries.
PREFLIGHT_QUERY = "index,name,uuid,driver_version,memory.total,memory.used,compute_cap,pci.bus_id"
# Every field the fake knows and a repeat.
ALL_FIELDS = (
    "index,name,uuid,pci.bus_id,memory.total,memory.used,memory.free,temperature.gpu,power.draw,"
    "power.limit,clocks.sm,clocks.max.sm,utilization.gpu,persistence_mode,compute_mode,"
    "ecc.errors.uncorrected.volatile.total,fabric.state,fabric.status,fabric.clique_id,"
    "fabric.cluster_uuid,serial,vbios_version,driver_version,compute_cap,mig.mode.current,count,name"
)
ARGS = [
    ("amd-smi", ["list", "--json"]),
    ("amd-smi", ["list"]),
    ("amd-smi", ["metric", "--mem-usage", "--json"]),
    ("amd-smi", ["metric", "--mem-usage"]),
    ("amd-smi", ["metric"]),
    ("amd-smi", ["metric", "--json"]),
    ("amd-smi", ["static", "--asic", "--json", "-g", "0"]),
    ("amd-smi", ["static", "--asic", "--json"]),
    ("amd-smi", ["static", "--bogus"]),
    ("amd-smi", ["static", "--bus", "--ifwi", "--asic", "--board", "--driver", "-g", "0", "1"]),
    ("amd-smi", ["static", "--json"]),
    ("amd-smi", ["static"]),
    ("amd-smi", ["static", "-g", "12"]),
    ("amd-smi", ["version", "--json"]),
    ("amd-smi", ["version"]),
    ("amd-smi", []),
    ("amd-smi", ["bogus"]),
    ("amd-smi", ["firmware"]),
    ("amd-smi", ["firmware", "--json"]),
    ("amd-smi", ["static", "--vram", "--json"]),
    ("amd-smi", ["process"]),
    ("amd-smi", ["topology"]),
    ("amd-smi", ["xgmi"]),
    ("ibstat", ["-l"]),
    ("ibstat", []),
    ("ibstat", ["mlx5_0"]),
    ("ibv_devinfo", ["-d", "mlx5_2"]),
    ("ibv_devinfo", ["-d", "mlx5_9"]),
    ("ibv_devinfo", ["-l"]),
    ("ibv_devinfo", ["-v", "-d", "mlx5_0"]),
    ("ibv_devinfo", ["-v"]),
    ("ibv_devinfo", []),
    ("ibv_devinfo", ["-d"]),
    ("ibv_devinfo", ["--bogus"]),
    ("ibv_devinfo", ["-i", "1"]),
    ("ibv_devinfo", ["-d", "mlx5_0", "-i", "2"]),
    ("nvidia-ctk", ["--version"]),
    ("nvidia-ctk", ["cdi", "list"]),
    ("nvidia-imex-ctl", ["-N"]),
    ("nvidia-imex-ctl", ["-q"]),
    ("nvidia-smi", ["--query-gpu", "memory.total,fan.speed", "--format", "csv,nounits"]),
    ("nvidia-smi", ["--query-gpu=" + PREFLIGHT_QUERY, "--format=csv,noheader,nounits"]),
    ("nvidia-smi", ["--query-gpu=driver_version", "--format=csv,noheader"]),
    ("nvidia-smi", ["--query-gpu=driver_version,name,compute_cap", "--format=csv"]),
    ("nvidia-smi", ["--query-gpu=index"]),
    ("nvidia-smi", ["--query-gpu=index,bogus.field", "--format=csv"]),
    ("nvidia-smi", ["--query-gpu=memory.used", "--format=csv,noheader,nounits"]),
    (
        "nvidia-smi",
        [
            "--query-gpu=" + ALL_FIELDS,
            "--format=csv",
        ],
    ),
    ("nvidia-smi", ["-L"]),
    ("nvidia-smi", ["-i", "2", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"]),
    ("nvidia-smi", ["-i", "9", "-L"]),
    ("nvidia-smi", ["-q"]),
    ("nvidia-smi", ["-q", "-x"]),
    ("nvidia-smi", ["-q", "-i", "1"]),
    ("nvidia-smi", ["-q", "-x", "-i", "1"]),
    ("nvidia-smi", ["-q", "-d", "MEMORY"]),
    ("nvidia-smi", ["nvlink", "--status"]),
    ("nvidia-smi", ["nvlink", "-s"]),
    ("nvidia-smi", ["topo", "-m"]),
    ("nvidia-smi", []),
    ("nvidia-smi", ["--bogus"]),
    ("nvidia-smi", ["-i"]),
    ("nvidia-smi", ["--query-compute-apps=pid,used_memory", "--format=csv"]),
    ("rdma", ["-j", "link", "show", "mlx5_3/1"]),
    ("rdma", ["dev"]),
    ("rdma", ["link", "show"]),
    ("rdma", ["link"]),
    ("rdma", ["-j", "dev"]),
    ("rocm-smi", ["--json"]),
    ("rocm-smi", ["--showproductname", "--csv"]),
    ("rocm-smi", ["--showproductname", "--showdriverversion", "--json"]),
    ("rocm-smi", []),
    ("rocm-smi", ["--showmeminfo", "vram", "--json"]),
    ("rocm-smi", ["--showmeminfo", "vram"]),
    ("rocm-smi", ["--showuse", "--json"]),
    ("rocm-smi", ["--showdriverversion"]),
    ("rocm-smi", ["--showproductname"]),
    ("rocm-smi", ["--bogus"]),
    ("rocm-smi", ["-i"]),
    ("rocm-smi", ["--showhw"]),
    ("rocm-smi", ["--showtemp", "--json"]),
    ("rocm-smi", ["--showtopo"]),
    ("rocm-smi", ["--showpids"]),
    ("rocminfo", []),
    ("nvidia-smi", ["-i0", "-L"]),
    ("nvidia-smi", ["--id=1", "-L"]),
    ("nvidia-smi", ["-qx"]),
    ("nvidia-smi", ["-xq", "-i", "0,1"]),
    ("nvidia-smi", ["--format", "csv", "--query-gpu", "index,name"]),
    ("nvidia-smi", ["topo"]),
    ("nvidia-smi", ["nvlink"]),
    ("nvidia-smi", ["topo", "-m", "-i", "1"]),
    ("nvidia-smi", ["topo", "--matrix"]),
    ("nvidia-smi", ["nvlink", "-m"]),
    ("nvidia-smi", ["-d"]),
    ("nvidia-smi", ["--query-gpu"]),
    ("nvidia-smi", ["-x"]),
    ("nvidia-smi", ["--format=csv"]),
    ("nvidia-smi", ["-L", "-q"]),
    ("nvidia-smi", ["--query-gpu=index", "--format=csv", "-L"]),
    ("nvidia-smi", ["-h"]),
    ("nvidia-smi", ["-i", "GPU-nope", "-L"]),
    ("nvidia-smi", ["--list-gpus", "--id", "0"]),
    ("nvidia-smi", ["-q", "--display", "MEMORY", "-x"]),
    ("amd-smi", ["static", "-g"]),
    ("amd-smi", ["static", "--gpu", "1", "--asic"]),
    ("amd-smi", ["list", "-g", "0"]),
    ("amd-smi", ["metric", "-g", "0", "--mem-usage"]),
    ("amd-smi", ["static", "--csv"]),
    ("amd-smi", ["-h"]),
    ("amd-smi", ["version", "--csv"]),
    ("amd-smi", ["static", "--board", "--json"]),
    ("amd-smi", ["static", "--driver", "--json"]),
    ("amd-smi", ["static", "--vbios"]),
    ("rocm-smi", ["--showproductname", "--showdriverversion"]),
    ("rocm-smi", ["--showdriverversion", "--json"]),
    ("rocm-smi", ["-h"]),
    ("rocm-smi", ["--showmeminfo"]),
    ("rocm-smi", ["--showmeminfo", "vram", "--csv"]),
    ("rocm-smi", ["-d", "0", "--showproductname"]),
    ("rocm-smi", ["--showbus"]),
    ("rocm-smi", ["--showserial", "--json"]),
    ("rocm-smi", ["--showuniqueid"]),
    ("rocm-smi", ["--alldevices"]),
    ("ibv_devinfo", ["-v", "-d", "mlx5_1"]),
    ("rocm-smi", ["--showproductname", "--showmeminfo", "vram"]),
    ("rocm-smi", ["--showmeminfo", "vram", "--showdriverversion", "--csv"]),
    ("rocm-smi", ["--alldevices", "--json"]),
    ("rocm-smi", ["--showid", "--showmeminfo", "vram", "--json"]),
    ("rocm-smi", ["--showdriverversion", "--csv"]),
    ("rocm-smi", ["--showproductname", "--showmeminfo", "vram", "--showdriverversion"]),
    ("rocm-smi", ["--csv"]),
    ("rocm-smi", ["--showmeminfo", "--json"]),
    ("amd-smi", ["metric", "-u"]),
    ("amd-smi", ["metric", "--usage", "--json"]),
    ("amd-smi", ["metric", "-m", "-u", "-g", "1"]),
    ("amd-smi", ["list", "--json", "-g", "9"]),
    ("amd-smi", ["metric", "-g", "9"]),
    ("amd-smi", ["version", "-g", "0"]),
    ("amd-smi", ["list", "--bogus"]),
    ("ibv_devinfo", ["--list"]),
    ("ibv_devinfo", ["-d", "mlx5_0", "-v"]),
    ("ibv_devinfo", ["-ib"]),
    ("ibv_devinfo", ["--ib-dev=mlx5_1"]),
    ("ibv_devinfo", ["--ib-dev", "mlx5_1", "--ib-port", "1"]),
    ("ibv_devinfo", ["-h"]),
]


def run_one(tool, argv):
    so, se = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(so), contextlib.redirect_stderr(se):
        try:
            rc = simcommon.run_tool(tool, TOOLS[tool], list(argv))
        except SystemExit as e:
            rc = "exit %r" % (e.code,)
        except Exception as e:  # pylint: disable=broad-exception-caught
            rc = "EXC %r" % e
    return [rc, so.getvalue(), se.getvalue()]


def outputs():
    with open(os.path.join(NT, "..", "profiles", "faults.json")) as f:
        faults = [k for k in json.load(f) if not k.startswith("_")]
    out = {}
    tmp = os.path.join(TMP, "profile.json")
    os.environ["KIMI_SIM_PROFILE"] = tmp
    for base in ("gb300", "b200", "h200", "mi355x", "cpu"):
        for fs in (
            [[]] + [[f] for f in faults] + [["mixed_model", "gpu_busy"], ["old_driver", "ib_port_down", "no_uverbs"]]
        ):
            key = "%s|%s|" % (base, ",".join(fs))
            try:
                prof = P.render_node_profile(base, base + "-n01", 1, fs)
            except Exception as e:  # pylint: disable=broad-exception-caught
                out[key + "render"] = "EXC %r" % e
                continue
            out[key + "render"] = json.dumps(prof, sort_keys=True)
            with open(tmp, "w") as f:
                json.dump(prof, f)
            for tool, argv in ARGS:
                out["%s%s %s" % (key, tool, " ".join(argv))] = run_one(tool, argv)
    return out


def main():
    out = outputs()
    digests = {}
    for key in sorted(out):
        profile_key = key.rsplit("|", 1)[0]
        digests.setdefault(profile_key, hashlib.sha256())
        digests[profile_key].update((key + "\0" + json.dumps(out[key]) + "\0").encode())
    json.dump({k: h.hexdigest()[:16] for k, h in digests.items()}, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
