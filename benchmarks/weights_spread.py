#!/usr/bin/env python3
"""Benchmark: weight staging on 1 node and on N nodes of a rehearsal cluster through a throttled endpoint - how many
bytes the endpoint served and how long staging took (issue #38: pulled once, spread node to node).

Needs the rehearsal cluster and its HF mirror (`sim/simctl up --cluster fleet`: 4 GB300 trays in vllm_cluster) and
root. The endpoint is the mirror's fault proxy (127.0.0.1:8089) throttled with `simctl hf-fault throttle=BPS` (one
bucket for all connections, like a site's WAN link); every run starts from empty caches. Printed per run: nodes,
endpoint bytes (the proxy's count), bytes from peers (weights-report.json), wall time of the playbook.

A larger checkpoint: --shards N --shard-mib M has `simctl hf-repo` make one beside the default stand-in (8 x 256 MiB:
2 GiB, the issue's "at least 2 GB"); both runs stage it from empty caches.

Usage: .venv/bin/python benchmarks/weights_spread.py [--cluster fleet] [--throttle 8000000] [--nodes 1 4]
       [--shards 8 --shard-mib 256]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from ansible.inventory.manager import InventoryManager  # noqa: E402
from ansible.parsing.dataloader import DataLoader  # noqa: E402

from tests.helpers.runner import failed_tasks, run_playbook  # noqa: E402
from tests.integration import conftest as sim  # noqa: E402

SIMCTL = os.path.join(REPO, "sim", "simctl")
RECORD = os.path.join(REPO, "sim", ".state", "hf", "repo.json")
PROXY = "http://127.0.0.1:8089"


def _simctl(*args):
    p = subprocess.run([SIMCTL] + list(args), capture_output=True, text=True, timeout=120, check=False)
    if p.returncode != 0:
        sys.exit("simctl %s failed: %s" % (" ".join(args), p.stderr.strip()))


def _stats(reset=False):
    req = urllib.request.Request(PROXY + "/_sim/stats", method="DELETE" if reset else "GET")
    return json.loads(urllib.request.urlopen(req, timeout=10).read() or b"{}")


def _inventory_names(cluster):
    """{sim node name: its inventory host name} by address (the fleet inventory names its trays gb300-tray51...)."""
    inventory = InventoryManager(loader=DataLoader(), sources=[cluster.inventory])
    by_address = {h.vars.get("ansible_host"): h.name for h in inventory.get_hosts()}
    return {n["name"]: by_address.get(n["address"], n["name"]) for n in cluster.nodes}


def run(cluster, hf, hosts, throttle):
    names = _inventory_names(cluster)
    for h in hosts:
        cluster.ssh(h, "rm -rf /var/tmp/kimi-weights-%s" % names[h])
    hosts = [names[h] for h in hosts]
    _simctl("hf-fault", "throttle=%d" % throttle)
    _stats(reset=True)
    artifacts = tempfile.mkdtemp(prefix="weights-bench-")
    extra = {"kimi_k3_model": hf["repo"], "kimi_k3_model_revision": hf["revision"],
             "weights_hf_endpoint": hf.get("fault_endpoint") or PROXY, "weights_margin_gb": 0.01,
             "weights_cache_dir": "/var/tmp/kimi-weights-{{ inventory_hostname }}", "weights_round_seconds": 2,
             "weights_artifacts_dir": artifacts}
    t0 = time.monotonic()
    r = run_playbook("weights.yml", cluster.inventory, extravars=extra, limit=",".join(hosts))
    wall = time.monotonic() - t0
    _simctl("hf-fault", "--clear")
    if r.status != "successful":
        sys.exit("staging failed: %s" % failed_tasks(r))
    with open(os.path.join(artifacts, "weights-report.json")) as f:
        report = json.load(f)
    return {"nodes": len(hosts), "endpoint_bytes": _stats()["bytes"], "peer_bytes": report["total"]["bytes_from_peers"],
            "wall_s": round(wall, 1), "endpoint_copies": report["total"]["endpoint_copies"]}


def _checkpoint(shards, shard_mib):
    """The mirror's record of the checkpoint staged: the default stand-in (67 MB), or a larger one simctl makes."""
    if not shards:
        with open(RECORD) as f:
            return json.load(f)
    p = subprocess.run([SIMCTL, "hf-repo", "--shards", str(shards), "--shard-mib", str(shard_mib)],
                       capture_output=True, text=True, timeout=1800, check=False)
    if p.returncode != 0:
        sys.exit("simctl hf-repo failed: %s" % p.stderr.strip())
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="fleet")
    ap.add_argument("--throttle", type=int, default=8000000, help="endpoint bytes/s (all connections together)")
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--shards", type=int, default=0, help="stage a larger stand-in: this many shards (0: the 67 MB one)")
    ap.add_argument("--shard-mib", type=int, default=256, help="MiB per shard of the larger stand-in")
    a = ap.parse_args(argv)
    st, why = sim._status()
    if not sim._cluster_ready(st, a.cluster) or not os.path.exists(RECORD):
        sys.exit("rehearsal cluster %s or its HF mirror is not up (%s): sim/simctl up --cluster %s"
                 % (a.cluster, why or "not ready", a.cluster))
    cluster = sim.SimCluster(a.cluster, st)
    hf = _checkpoint(a.shards, a.shard_mib)
    workers = [n["name"] for n in cluster.nodes if n.get("role", "") != "router" and "router" not in n["name"]]
    rows = [run(cluster, hf, workers[:n], a.throttle) for n in a.nodes if n <= len(workers)]
    print("checkpoint %d bytes, endpoint throttled to %d B/s" % (hf["bytes_total"], a.throttle))
    print("%5s  %15s  %15s  %8s  %14s" % ("nodes", "endpoint bytes", "peer bytes", "wall s", "endpoint copies"))
    for row in rows:
        cells = (row["nodes"], row["endpoint_bytes"], row["peer_bytes"], row["wall_s"], row["endpoint_copies"])
        print("%5d  %15d  %15d  %8.1f  %14.2f" % cells)
    one = next((r for r in rows if r["nodes"] == 1), None)
    for row in rows:
        if one and row is not one:
            print("%d nodes: endpoint bytes %.2f x the checkpoint, wall time %.2f x one node's"
                  % (row["nodes"], row["endpoint_bytes"] / float(hf["bytes_total"]), row["wall_s"] / one["wall_s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
