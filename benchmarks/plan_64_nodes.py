#!/usr/bin/env python3
"""Benchmark: render and validate the plan of a 64-node inventory.

Prints the wall time of (a) the pure renderer (plugin_utils.plan.topology, in process) and (b) the whole
`ansible-playbook playbooks/plan.yml` run on a generated 64-tray GB300 DEP inventory (writes 128 files).
Target: under 5 s for 64 nodes on a 2-core machine.

Usage: .venv/bin/python benchmarks/plan_64_nodes.py [--nodes 64] [--repeat 5]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "build", "collections"))

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import topology  # noqa: E402
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data  # noqa: E402

IMAGE = "vllm/vllm-openai@sha256:" + "c" * 64


def cluster_vars():
    return {"kimi_k3_accelerator": "gb300", "kimi_k3_strategy": "multi_node_dep", "kimi_k3_interconnect": "nvlink",
            "kimi_k3_socket_ifname": "bond0", "kimi_k3_image": IMAGE, "kimi_k3_vllm_version": "0.28.0",
            # the plan refuses an API without a key and remote code at no pinned revision
            "kimi_k3_model_revision": "4c1d7e2a9b3f5d6e8a0c2b4d6f8e1a3c5b7d9f0e", "kimi_k3_api_key": "bench-placeholder-key"}


def write_inventory(folder, n):
    os.makedirs(os.path.join(folder, "group_vars"))
    with open(os.path.join(folder, "hosts.yml"), "w") as f:
        f.write("vllm_cluster:\n  children:\n    vllm_head:\n      hosts:\n        tray000: {ansible_host: 10.50.0.1}\n")
        f.write("    vllm_workers:\n      hosts:\n")
        for i in range(1, n):
            f.write("        tray%03d: {ansible_host: 10.50.%d.%d}\n" % (i, i // 200, i % 200 + 1))
    with open(os.path.join(folder, "group_vars", "vllm_cluster.yml"), "w") as f:
        for k, v in cluster_vars().items():
            f.write("%s: %s\n" % (k, v))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    recipe, snaps = recipe_data.load_recipe(), recipe_data.load_snapshots()
    nodes = [{"host": "tray%03d" % i, "head": i == 0, "vars": dict(cluster_vars(), ansible_host="10.50.0.%d" % i)}
             for i in range(args.nodes)]
    times = []
    for _run in range(args.repeat):
        t0 = time.perf_counter()
        r = topology.build_cluster_plan(nodes, recipe, snaps)
        times.append(time.perf_counter() - t0)
        assert r["ok"], r["errors"][:3]
    print("renderer: %d nodes, best %.3f s, median %.3f s over %d runs"
          % (args.nodes, min(times), sorted(times)[len(times) // 2], args.repeat))
    with tempfile.TemporaryDirectory() as tmp:
        inv = os.path.join(tmp, "inv")
        write_inventory(inv, args.nodes)
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
        t0 = time.perf_counter()
        proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
                               os.path.join(REPO, "playbooks", "plan.yml"), "-i", inv,
                               "-e", "plan_dir=%s" % os.path.join(tmp, "plan")],
                              cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
        wall = time.perf_counter() - t0
        files = len(os.listdir(os.path.join(tmp, "plan"))) if proc.returncode == 0 else 0
        print("plan.yml: %d nodes, %.2f s wall, rc=%d, %d files written" % (args.nodes, wall, proc.returncode, files))
        if proc.returncode:
            print(proc.stdout[-3000:])
            print(proc.stderr[-3000:])
            return 1
    print("target: < 5 s for 64 nodes -> %s" % ("met" if wall < 5 else "NOT met"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
