#!/usr/bin/env python3
"""Benchmark: wall time of `playbooks/preflight.yml` on 2, 8 and 32 simulated nodes.

For each size N it brings the bench cluster to N nodes (`sim/simctl up --cluster bench --nodes N`; GB300 profile,
inventories/sim-bench), runs `ansible-playbook playbooks/preflight.yml` as an operator would (forks >= N; the
ansible.posix.json callback instead of the default one, so the timings can be read back), and prints:

- wall time of the whole playbook (seconds),
- the probe task's duration (first host started -> last host done),
- the controller-side judge/report tasks' time,
- the number of probe calls (must equal N: one call per node),
- the probe's own time on the node (``node_probe.probe_seconds``, median and max over hosts),
- CPU accounting: the controller's CPU seconds (ansible-playbook and its ssh children) and the simulated nodes'
  CPU seconds (cgroup cpuacct of the node containers; n/a when unreadable), and from them
  ``cpu floor = (controller + nodes) / cores`` - the shortest wall time this machine could give that much CPU
  work - and ``wall - nodes/cores``: the wall time with the simulated nodes' CPU taken out, i.e. what remains
  when every node computes on its own CPU, as real nodes do.

Expectation: nearly flat - the probes run in parallel (forks) and the judging runs once on the controller. On the
2-core rehearsal machine all N simulated nodes share the same two cores (every node's probe is an ssh session, a
Python interpreter running the module and the faked vendor tools, about 0.5 s of CPU), so the wall time follows
the CPU floor; the column without the nodes' CPU is the one that has to stay flat.

Usage: .venv/bin/python benchmarks/preflight_fanout.py [--sizes 2,8,32] [--repeat 1] [--no-up]
The bench cluster is separate from the gb300/mi355x clusters; it is left up at the last size.
"""
import argparse
import datetime
import glob
import os
import resource
import json
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_BIN = os.path.join(REPO, ".venv", "bin")
SIMCTL = os.path.join(REPO, "sim", "simctl")
PROBE_TASK = "Probe the node (read-only; runs in check mode too)"
# The judgement and both report files are one controller task (the preflight_report action); then the table and
# the per-host fail task (a skipped conditional on healthy nodes).
JUDGE_TASKS = ("Judge all nodes together and write the report", "Show the preflight report",
               "Stop here when any node fails a check")
# Sim limits (see tests/integration/test_preflight_sim.py); the run must not stop early for the timing.
EXTRA = {"preflight_min_free_disk_gb": 1, "preflight_min_shm": "32m", "preflight_fail_on_error": False}


def _ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")) if s else None


def task_seconds(result, task):
    for play in result.get("plays", []):
        for t in play.get("tasks", []):
            if t["task"]["name"].endswith(task):
                d = t["task"].get("duration") or {}
                if d.get("start") and d.get("end"):
                    return (_ts(d["end"]) - _ts(d["start"])).total_seconds(), t["hosts"]
    return None, {}


def run_preflight(n, artifacts):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", ""))
    cmd = [os.path.join(VENV_BIN, "ansible-playbook"), "playbooks/preflight.yml", "-i", "inventories/sim-bench",
           "--forks", str(max(n, 5)), "-e", json.dumps(dict(EXTRA, preflight_artifacts_dir=artifacts))]
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800, check=False)
    wall = time.monotonic() - t0
    try:
        result = json.loads(p.stdout)
    except ValueError:
        sys.exit("preflight.yml printed no JSON (rc %s):\n%s" % (p.returncode, (p.stderr or p.stdout)[-3000:]))
    return wall, p.returncode, result


def _rusage_cpu():
    ch, me = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
    return ch.ru_utime + ch.ru_stime + me.ru_utime + me.ru_stime


def node_container_ids():
    env = dict(os.environ, DOCKER_HOST="unix:///run/kimi-sim/control/docker.sock")
    p = subprocess.run(["docker", "ps", "-q", "--no-trunc", "--filter", "name=kimi-sim-bench-"], env=env,
                       capture_output=True, text=True, check=False)
    return p.stdout.split() if p.returncode == 0 else []


def nodes_cpu_s(ids):
    """Sum of the node containers' CPU seconds (cgroup v1 cpuacct or v2 cpu.stat), None when unreadable."""
    total = 0.0
    for cid in ids:
        v1 = glob.glob("/sys/fs/cgroup/cpuacct*/docker/%s/cpuacct.usage" % cid)
        v2 = glob.glob("/sys/fs/cgroup/system.slice/docker-%s.scope/cpu.stat" % cid) + glob.glob(
            "/sys/fs/cgroup/docker/%s/cpu.stat" % cid)
        try:
            if v1:
                with open(v1[0]) as f:
                    total += int(f.read()) / 1e9
            elif v2:
                with open(v2[0]) as f:
                    total += int(dict(line.split() for line in f)["usage_usec"]) / 1e6
            else:
                return None
        except (OSError, ValueError, KeyError):
            return None
    return total


def probe_seconds(host_results):
    out = []
    for res in host_results.values():
        v = ((res.get("ansible_facts") or {}).get("node_probe") or {}).get("probe_seconds")
        if v is not None:
            out.append(float(v))
    return out


def bring_up(n):
    p = subprocess.run([SIMCTL, "up", "--cluster", "bench", "--nodes", str(n)], capture_output=True, text=True,
                       timeout=3600, check=False)
    if p.returncode != 0:
        sys.exit("simctl up --cluster bench --nodes %d failed:\n%s" % (n, p.stderr[-2000:]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="2,8,32")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--no-up", action="store_true", help="use the bench cluster as it is (inventories/sim-bench)")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    rows = []
    cores = os.cpu_count() or 1
    for n in sizes:
        if not args.no_up:
            bring_up(n)
        ids = node_container_ids()
        for _run in range(args.repeat):
            art = tempfile.mkdtemp(prefix="pf-bench-")
            cpu0, node0 = _rusage_cpu(), nodes_cpu_s(ids)
            wall, rc, result = run_preflight(n, art)
            ctrl = _rusage_cpu() - cpu0
            node1 = nodes_cpu_s(ids)
            node = (node1 - node0) if node0 is not None and node1 is not None else None
            probe_span, hosts = task_seconds(result, PROBE_TASK)
            judge = sum((task_seconds(result, t)[0] or 0.0) for t in JUDGE_TASKS)
            ps = probe_seconds(hosts)
            row = {"n": n, "wall": wall, "span": probe_span, "judge": judge, "calls": len(hosts), "rc": rc,
                   "probe_med": statistics.median(ps) if ps else None, "probe_max": max(ps) if ps else None,
                   "ctrl": ctrl, "node": node, "floor": (ctrl + node) / cores if node is not None else None,
                   "own_cpu": wall - node / cores if node is not None else None}
            rows.append(row)
            print("nodes=%-3d wall=%6.2fs probe_task=%6.2fs node_probe_s=%s/%s judge+report=%5.2fs calls=%d "
                  "ctrl_cpu=%5.2fs nodes_cpu=%s rc=%s" % (
                      n, wall, probe_span or -1, _f(row["probe_med"]), _f(row["probe_max"]), judge, len(hosts), ctrl,
                      _f(node), rc), flush=True)
    print()
    print("cores: %d" % cores)
    print("| nodes | wall (s) | probe task (s) | probe on the node, median / max (s) | judge + report (s) "
          "| probe calls | controller CPU (s) | nodes' CPU (s) | CPU floor (s) | wall - nodes' CPU / cores (s) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for w in rows:
        print("| %d | %.2f | %.2f | %s / %s | %.2f | %d | %.2f | %s | %s | %s |" % (
            w["n"], w["wall"], w["span"] or -1, _f(w["probe_med"]), _f(w["probe_max"]), w["judge"], w["calls"],
            w["ctrl"], _f(w["node"]), _f(w["floor"]), _f(w["own_cpu"])))


def _f(v):
    return "n/a" if v is None else "%.2f" % v


if __name__ == "__main__":
    main()
