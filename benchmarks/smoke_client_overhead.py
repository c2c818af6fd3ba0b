#!/usr/bin/env python3
"""Client overhead of the smoke/capacity measuring client against the stand-in with known TTFT/ITL.

Starts `sim/standin/bin/vllm serve` on 127.0.0.5 (VLLM_STANDIN_TTFT_MS / VLLM_STANDIN_ITL_MS), sends streaming
requests through smoke_client.stream_chat at each concurrency and prints measured vs configured TTFT (p50, mean)
and ITL (mean, p50) with the relative error; target: within 5 %. Optionally runs guidellm from a separate venv
(build/bench-venv) against the same server for a side-by-side throughput/latency comparison.

usage: .venv/bin/python benchmarks/smoke_client_overhead.py [--ttft-ms 500] [--itl-ms 50] [--tokens 64]
       [--concurrency 1 64 256] [--guidellm build/bench-venv/bin/guidellm]
"""
import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "build", "collections"))

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils import smoke_client as sc  # noqa: E402


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.5", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start_standin(port, ttft_ms, itl_ms):
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    env.update({"VLLM_STANDIN_LOAD_S": "0", "VLLM_STANDIN_TTFT_MS": str(ttft_ms), "VLLM_STANDIN_ITL_MS": str(itl_ms)})
    proc = subprocess.Popen(
        [sys.executable, os.path.join(REPO, "sim", "standin", "bin", "vllm"), "serve", "moonshotai/Kimi-K3",
         "--host", "127.0.0.5", "--port", str(port), "--max-model-len", "32768", "--trust-remote-code",
         "--tensor-parallel-size", "8", "--max-num-seqs", "1024"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            if urllib.request.urlopen("http://127.0.0.5:%d/health" % port, timeout=1).status == 200:
                return proc
        except Exception:
            time.sleep(0.2)
    proc.terminate()
    raise SystemExit("stand-in did not become healthy")


async def run_level(base_url, concurrency, tokens, rounds):
    client = sc.make_client(base_url, None, 600, concurrency)
    body = sc.request_body(tokens, None, {"ignore_eos": True, "min_tokens": tokens})
    msgs = [{"role": "user", "content": "Say something."}]
    await sc.warm_up(client)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    results = await asyncio.gather(*(sc.stream_chat(client, "moonshotai/Kimi-K3", msgs, **body)
                                     for _ in range(concurrency * rounds)))
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    await client.close()
    agg = sc.aggregate(results, wall_s=wall)
    agg["client_cpu_frac"] = round(cpu / wall, 3)
    return agg


def pct(measured, configured):
    return 100.0 * (measured - configured) / configured


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ttft-ms", type=float, default=500)
    ap.add_argument("--itl-ms", type=float, default=50)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 64, 256])
    ap.add_argument("--guidellm", default=os.path.join(REPO, "build", "bench-venv", "bin", "guidellm"))
    ap.add_argument("--json", help="write results here")
    args = ap.parse_args()
    port = free_port()
    base = "http://127.0.0.5:%d/v1" % port
    proc = start_standin(port, args.ttft_ms, args.itl_ms)
    out = {"configured": {"ttft_s": args.ttft_ms / 1000, "itl_s": args.itl_ms / 1000, "tokens": args.tokens},
           "levels": {}}
    try:
        print("configured TTFT %.1f ms, ITL %.1f ms, %d output tokens" % (args.ttft_ms, args.itl_ms, args.tokens))
        print("%6s %9s %9s %7s %9s %9s %7s %9s %6s %5s" % ("conc", "ttft p50", "ttft mean", "err%", "itl mean",
                                                           "itl p50", "err%", "tok/s", "cpu", "fail"))
        for c in args.concurrency:
            agg = asyncio.run(run_level(base, c, args.tokens, args.rounds))
            t, i = agg["ttft_s"], agg["itl_s"]
            row = {"ttft_p50_s": t["p50"], "ttft_mean_s": t["mean"], "itl_mean_s": i["mean"], "itl_p50_s": i["p50"],
                   "ttft_err_pct": round(pct(t["p50"], args.ttft_ms / 1000), 2) if t["p50"] else None,
                   "itl_err_pct": round(pct(i["mean"], args.itl_ms / 1000), 2) if i["mean"] else None,
                   "tokens_per_s": agg["tokens_per_s"], "client_cpu_frac": agg["client_cpu_frac"],
                   "failed": agg["failed_requests"], "errors": agg["errors"][:2]}
            out["levels"][c] = row
            print("%6d %9.4f %9.4f %+7.2f %9.5f %9.5f %+7.2f %9.1f %6.2f %5d" % (
                c, t["p50"] or 0, t["mean"] or 0, row["ttft_err_pct"] or 0, i["mean"] or 0, i["p50"] or 0,
                row["itl_err_pct"] or 0, agg["tokens_per_s"] or 0, agg["client_cpu_frac"], agg["failed_requests"]))
        if os.path.exists(args.guidellm):
            out["guidellm"] = run_guidellm(args, base)
        else:
            print("guidellm not found at %s (install: python3 -m venv build/bench-venv && "
                  "build/bench-venv/bin/pip install guidellm)" % args.guidellm)
    finally:
        proc.terminate()
        proc.wait(10)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)


def run_guidellm(args, base):
    """guidellm at the same concurrencies; prints its TTFT/ITL medians next to ours."""
    res = {}
    outdir = os.path.join(REPO, "build", "bench-guidellm")
    os.makedirs(outdir, exist_ok=True)
    for c in args.concurrency:
        cmd = [args.guidellm, "benchmark", "--target", base[:-3], "--model", "moonshotai/Kimi-K3",
               "--processor", "gpt2", "--rate-type", "concurrent", "--rate", str(c),
               "--max-requests", str(c * args.rounds),
               "--data", "prompt_tokens=16,output_tokens=%d" % args.tokens,
               "--output-path", os.path.join(outdir, "c%d.json" % c)]
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        res[c] = {"rc": p.returncode, "wall_s": round(time.time() - t0, 1), "tail": (p.stdout + p.stderr)[-1500:]}
        print("guidellm c=%d rc=%d (%s)" % (c, p.returncode, os.path.join(outdir, "c%d.json" % c)))
    return res


if __name__ == "__main__":
    main()
