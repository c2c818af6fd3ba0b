"""simctl - the local rehearsal cluster for gpufleet.kimi_k3 (see docs/sim.md).

    simctl up [--cluster gb300|mi355x|all|gb300pd|fleet|cpu|cpufleet|bench] [--nodes N]   start (idempotent; second run fast)
    simctl up --cluster light [--nodes N]                       N host-sshd bench nodes, no engine (own lock/state)
    simctl down [--cluster NAME]                                remove everything simctl created (or one cluster)
    simctl status [--json]                                      engines, registry, nodes, images
    simctl fault NODE FAULT... | simctl fault NODE --clear      rewrite the node profile in place
    simctl hf-fault [throttle=BPS] [tamper=PATH]... | --clear   the HF mirror's fault proxy (127.0.0.1:8089)
    simctl hf-repo [--shards 8] [--shard-mib 256]               a larger stand-in checkpoint beside the default one
    simctl hf-repo --snapshot DIR --repo ORG/NAME               a model snapshot published on the HF mirror
    simctl check [--cluster ...]                                GPU/ROCm container self-check on node engines
    simctl env NODE                                             print DOCKER_HOST=... for the node's engine
    simctl prefetch-engine                                      only the cpu cluster's engine site (no Docker)
    simctl images                                               registry, control engine, every cluster's images
                                                                (no node started: a later `up` only starts nodes)

Everything real except GPUs and the model: one dockerd per node (own data-root/exec-root/socket), a control
dockerd running the node containers (sshd on the node's loopback IP), Debian's docker-registry on
127.0.0.1:5000 holding the stand-in vLLM images, pulled by digest.
"""
import argparse

from kimisim.check import cmd_check
from kimisim.down import cmd_down
from kimisim.engine_image import cmd_prefetch_engine
from kimisim.faults import cmd_fault, find_node
from kimisim.hfmirror import cmd_hf_fault, cmd_hf_repo
from kimisim.status import cmd_status
from kimisim.up import cmd_images, cmd_up
from kimisim.util import die, sock


def cmd_env(a):
    c, n = find_node(a.node)
    print("export DOCKER_HOST=unix://%s" % sock(n["engine"]))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="simctl", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sp = ap.add_subparsers(dest="cmd", required=True)
    p = sp.add_parser("up")
    p.add_argument("--cluster", default="all",
                   help="gb300 | mi355x | all (= gb300 + mi355x) | gb300pd | fleet | cpu | cpufleet (the cpu pair's "
                        "router: after cpu) | bench | light")
    p.add_argument("--nodes", type=int, help="bench (<= 32) and light (<= 240) only: number of nodes")
    p = sp.add_parser("down")
    p.add_argument("--cluster", default="all", help="all (everything but light) or one cluster name (only its nodes/engines)")
    p = sp.add_parser("status")
    p.add_argument("--json", action="store_true")
    p = sp.add_parser("fault")
    p.add_argument("node")
    p.add_argument("faults", nargs="*")
    p.add_argument("--clear", action="store_true")
    p = sp.add_parser("hf-fault")
    p.add_argument("faults", nargs="*")
    p.add_argument("--clear", action="store_true")
    p = sp.add_parser("hf-repo")
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--shard-mib", type=int, default=256)
    p.add_argument("--snapshot", help="publish this model snapshot directory instead (with --repo)")
    p.add_argument("--repo", help="ORG/NAME of the published snapshot")
    p = sp.add_parser("check")
    p.add_argument("--cluster", default="all")
    p = sp.add_parser("env")
    p.add_argument("node")
    sp.add_parser("prefetch-engine")
    sp.add_parser("images")
    a = ap.parse_args(argv)
    try:
        rc = {"up": cmd_up, "down": cmd_down, "status": cmd_status, "fault": cmd_fault, "hf-fault": cmd_hf_fault, "hf-repo": cmd_hf_repo,
              "check": cmd_check,
              "env": cmd_env, "prefetch-engine": cmd_prefetch_engine,
              "images": cmd_images}[a.cmd](a)
    except RuntimeError as e:
        die(str(e))
    return rc or 0
