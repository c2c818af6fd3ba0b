#!/usr/bin/env python3
"""Capture the preflight reports of the rehearsal faults, to compare two versions of the preflight code path.

For each case (healthy, then one fault on one node, the cases of tests/integration/test_preflight_sim.py) it runs
`playbooks/preflight.yml` on the main rehearsal cluster (inventories/sim-gb300, sim-mi355x; it must be up, so run
this under the sim lock, see docs/dev/testing.md) and writes <out>/<cluster>-<fault>.json: the report with the
run-dependent values (timestamps, durations) replaced by a placeholder. `diff -r before/ after/` must be empty.

Usage: flock /tmp/kimi-sim.lock bash -c 'sim/simctl up --cluster all && \
           .venv/bin/python benchmarks/preflight_fault_reports.py --out /tmp/reports-before; sim/simctl down'
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIMCTL = os.path.join(REPO, "sim", "simctl")
LIMITS = {"preflight_min_free_disk_gb": 1, "preflight_min_shm": "32m", "preflight_max_gpu_memory_used_pct": 100,
          "preflight_fail_on_error": False}
CASES = [("gb300", None, None), ("mi355x", None, None),
         ("gb300", 1, "old_driver"), ("gb300", 1, "imex_down"), ("gb300", 0, "missing_gpu"),
         ("gb300", 1, "fabric_not_completed"), ("gb300", 1, "no_nvidia_smi"), ("mi355x", 1, "ib_port_down"),
         ("mi355x", 1, "rocm_old"), ("gb300", 1, "gpu_busy"), ("mi355x", 0, "no_python_requests"),
         ("gb300", 1, "socket_ifname_down"), ("gb300", 1, "socket_mtu_mismatch"),
         ("mi355x", 1, "socket_ifname_missing"), ("gb300", 1, "driver_not_loaded"),
         ("gb300", 0, "internode_port_exposed")]
NODES = {"gb300": ["gb300-tray01", "gb300-tray02"], "mi355x": ["mi355x-node01", "mi355x-node02"]}
VOLATILE = ("seconds", "_at", "time", "duration", "timestamp", "clock", "epoch")


def scrub(value, key=""):
    """The report without values that differ from run to run (durations, clocks)."""
    if isinstance(value, dict):
        return dict((k, scrub(v, k)) for k, v in value.items())
    if isinstance(value, list):
        return [scrub(v, key) for v in value]
    if isinstance(value, (int, float, str)) and not isinstance(value, bool) and any(
            v in key.lower() for v in VOLATILE):
        return "<volatile>"
    return value


def run_case(cluster, fault_node, fault):
    extra = dict(LIMITS, preflight_artifacts_dir=tempfile.mkdtemp(prefix="pf-fault-"))
    if fault == "gpu_busy":
        extra["preflight_max_gpu_memory_used_pct"] = 5
    node = NODES[cluster][fault_node] if fault else None
    if fault:
        subprocess.run([SIMCTL, "fault", node, fault], check=True, capture_output=True, timeout=120)
    try:
        p = subprocess.run([os.path.join(REPO, ".venv", "bin", "ansible-playbook"), "playbooks/preflight.yml", "-i",
                            "inventories/sim-%s" % cluster, "-e", json.dumps(extra)], cwd=REPO, capture_output=True,
                           text=True, timeout=900, check=False)
    finally:
        if fault:
            subprocess.run([SIMCTL, "fault", node, "--clear"], check=False, capture_output=True, timeout=120)
    path = os.path.join(extra["preflight_artifacts_dir"], "preflight-report.json")
    if not os.path.exists(path):
        sys.exit("%s %s: no report (rc %d):\n%s" % (cluster, fault, p.returncode, p.stdout[-3000:]))
    with open(path) as f:
        return scrub(json.load(f)), p.returncode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for cluster, idx, fault in CASES:
        report, rc = run_case(cluster, idx, fault)
        name = "%s-%s.json" % (cluster, fault or "healthy")
        with open(os.path.join(args.out, name), "w") as f:
            json.dump(report, f, indent=1, sort_keys=True)
        failing = sorted({(x["host"], x["check"]) for x in report.get("findings", []) if x.get("status") == "fail"})
        print("%-40s rc=%d failing=%s" % (name, rc, failing), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
