#!/usr/bin/env python3
"""Benchmark: wall time of `playbooks/preflight.yml` on 2, 8 and 32 simulated nodes.

For each size N it brings the bench cluster to N nodes (`sim/simctl up --cluster bench --nodes N`; GB300 profile,
inventories/sim-bench), runs preflight through ansible-runner with forks >= N, and prints:

- wall time of the whole playbook (seconds),
- the probe task's span (first start -> last end over all hosts) and its per-host median duration,
- the controller-side judge/report tasks' time,
- the number of probe calls (must equal N: one call per node).

Expectation: nearly flat - the probes run in parallel (forks) and the judging runs once on the controller.
On the 2-core rehearsal machine the per-node SSH + Python start-up still competes for CPU, so some growth is
expected at 32 nodes.

Usage: .venv/bin/python benchmarks/preflight_fanout.py [--sizes 2,8,32] [--repeat 1] [--no-up]
The bench cluster is separate from the gb300/mi355x clusters; it is left up at the last size.
"""
import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from tests.helpers.runner import run_playbook  # noqa: E402

SIMCTL = os.path.join(REPO, "sim", "simctl")
PROBE_TASK = "Probe the node (read-only; runs in check mode too)"
JUDGE_TASKS = ("Judge all nodes together", "Show the preflight report", "Write preflight-report.json",
               "Write preflight-report.md")
# Sim limits (see tests/integration/test_preflight_sim.py); the run must not stop early for the timing.
EXTRA = {"preflight_min_free_disk_gb": 1, "preflight_min_shm": "32m", "preflight_fail_on_error": False}


def _ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")) if s else None


def task_span(runner, task):
    starts, ends, durs = [], [], []
    for ev in runner.events:
        d = ev.get("event_data", {})
        if d.get("task") != task or not ev.get("event", "").startswith("runner_on_"):
            continue
        if ev["event"] not in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable"):
            continue
        if d.get("start") and d.get("end"):
            starts.append(_ts(d["start"]))
            ends.append(_ts(d["end"]))
        if d.get("duration") is not None:
            durs.append(float(d["duration"]))
    span = (max(ends) - min(starts)).total_seconds() if starts else None
    return span, (statistics.median(durs) if durs else None), len(durs)


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
    for n in sizes:
        if not args.no_up:
            bring_up(n)
        for _run in range(args.repeat):
            art = tempfile.mkdtemp(prefix="pf-bench-")
            r = run_playbook("preflight.yml", "inventories/sim-bench", extravars=dict(EXTRA, preflight_artifacts_dir=art),
                             forks=max(n, 5), timeout=1800)
            probe_span, probe_median, calls = task_span(r, PROBE_TASK)
            judge = sum((task_span(r, t)[0] or 0.0) for t in JUDGE_TASKS)
            rows.append((n, r.elapsed_s, probe_span, probe_median, judge, calls, r.status))
            print("nodes=%-3d wall=%6.2fs probe_span=%6.2fs probe_median=%5.2fs judge+report=%5.2fs "
                  "probe_calls=%d status=%s" % (n, r.elapsed_s, probe_span or -1, probe_median or -1, judge, calls,
                                                r.status), flush=True)
    print()
    print("| nodes | wall (s) | probe span (s) | probe per host, median (s) | judge + report (s) | probe calls |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for n, wall, span, med, judge, calls, _status in rows:
        print("| %d | %.2f | %.2f | %.2f | %.2f | %d |" % (n, wall, span or -1, med or -1, judge, calls))


if __name__ == "__main__":
    main()
