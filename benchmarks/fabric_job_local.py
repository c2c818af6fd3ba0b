#!/usr/bin/env python3
"""The fabric job (roles/fabric/files/fabric_job.py) as two local processes - the two nodes of a CPU-profile
deployment on 127.0.0.1, gloo over lo - `--runs` times: wall time, each phase (provenance, ports, collective), join
time, latency, all-reduce / all-to-all bus bandwidth and the pair's send/recv bandwidth, at the plan's sizes
(--max-num-batched-tokens `--tokens`, capped at the CPU profile's 1 MiB). Prints numbers, asserts nothing.

Needs a Python with torch: --python, else $KIMI_FABRIC_TORCH_PYTHON, else build/torchvenv/bin/python
(``python3 -m venv build/torchvenv && build/torchvenv/bin/python -m pip install torch==2.13.0``).
"""
import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "build", "collections"))
sys.path.insert(0, REPO)

from tests.unit.roles import test_fabric_job as T  # noqa: E402  (after the path set-up)


def one_run(python, tokens):
    plan = T.cpu_plan()
    for p in plan["plans"].values():
        p["vllm_args"][-1] = str(tokens)
    specs = T.specs_of(plan, timeout=60)
    started = time.monotonic()
    res = T.run_nodes(pathlib.Path(tempfile.mkdtemp(prefix="fabric-bench-")), specs, python, T.gloo_env("lo"))
    wall = time.monotonic() - started
    col = res["n0"]["collective"]
    if col["status"] != "ok":
        return {"wall_s": wall, "failed": col.get("reason")}
    pair = col["pairs"][0]
    return {"wall_s": wall, "provenance_s": res["n0"]["phases_s"]["provenance"], "ports_s": res["n0"]["phases_s"]["ports"],
            "collective_s": res["n0"]["phases_s"]["collective"], "join_s": col["join_s"], "latency_us": col["latency_us"],
            "all_reduce_busbw_gbps": col["all_reduce"]["busbw_gbps"], "all_to_all_busbw_gbps": col["all_to_all"]["busbw_gbps"],
            "pair_latency_us": pair["latency_us"], "pair_bandwidth_gbps": pair["bandwidth_gbps"],
            "bytes": col["all_to_all"]["bytes"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--python", default=T.TORCH_PYTHON)
    args = parser.parse_args()
    if not args.python:
        sys.exit("no Python with torch: see the docstring")
    rows = [one_run(args.python, args.tokens) for _run in range(args.runs)]
    for i, row in enumerate(rows):
        print("run %d: %s" % (i + 1, ", ".join("%s=%s" % (k, round(v, 4) if isinstance(v, float) else v)
                                               for k, v in sorted(row.items()))))
    ok = [r for r in rows if "failed" not in r]
    if ok:
        medians = ["%s=%.4g" % (k, statistics.median(r[k] for r in ok)) for k in sorted(ok[0])]
        print("median of %d: %s" % (len(ok), ", ".join(medians)))
    print("failed runs: %d of %d; load average %s" % (len(rows) - len(ok), len(rows), os.getloadavg()))


if __name__ == "__main__":
    main()
