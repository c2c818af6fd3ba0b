#!/usr/bin/env python3
"""The module's throughput/latency figures side by side with GuideLLM's, on the same stand-in.

One stand-in (127.0.0.5, own process, niced to -5 as root, TTFT/ITL as configured, access log off). For each
concurrency C, alternately (`--repeats` times each):

- **module**: `capacity_runner.run_step` (the `vllm_capacity_step` code path: `make_client`, `warm_up`, a semaphore
  of C over N = `--requests-per-stream` x C streaming requests with `ignore_eos`) -> `throughput_tok_s`, TTFT,
  ITL (mean of per-SSE-chunk gaps), TPOT ((e2e - ttft) / (tokens - 1)).
- **guidellm** (`build/bench-venv/bin/guidellm run`, openai_http backend, /v1/chat/completions, streaming,
  `--profile kind=concurrent,streams=C`, `--constraint kind=max_requests,count=N`, prompts from a JSON-lines file
  with `output_tokens_count`, so no tokenizer download) -> `output_tokens_per_second`, `time_to_first_token_ms`,
  `inter_token_latency_ms`, `time_per_output_token_ms`.

Naming traps (docs/smoke.md, reference §1): GuideLLM's `inter_token_latency_ms` is (last - first) / (out - 1) per
request, i.e. what vLLM and this module call TPOT, so it is compared with the module's TPOT *and* its per-chunk ITL
(equal when every chunk carries one token, as with the stand-in); GuideLLM's `time_per_output_token_ms` includes the
first token ((last - start) / out) and has no counterpart here. Throughput: output tokens / wall time of the run on
both sides. Medians over the repeats are compared; target |difference| <= 5 %.

usage: .venv/bin/python benchmarks/smoke_vs_guidellm.py [--concurrency 1 64 256] [--repeats 2]
       [--requests-per-stream 2] [--guidellm build/bench-venv/bin/guidellm] [--json build/bench/vs_guidellm.json]
install GuideLLM (separate venv; its torch dependency is satisfied by the CPU wheel in /opt/wheels, Python 3.11):
       /root/.pyenv/versions/3.11.7/bin/python3 -m venv build/bench-venv
       echo 'torch==2.13.0+cpu' > build/bench-constraints.txt
       build/bench-venv/bin/pip install --no-compile --only-binary=:all: -c build/bench-constraints.txt guidellm
"""
import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import smoke_client_overhead as sco  # noqa: E402  (stand-in start/stop, niceness, sys.path)
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils import capacity_runner as cr  # noqa: E402
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils import smoke_client as sc  # noqa: E402
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils import smoke_logic as sl  # noqa: E402

REPO = sco.REPO
OUT = os.path.join(REPO, "build", "bench", "guidellm")


def module_run(base, c, n, tokens):
    async def go():
        client = sc.make_client(base, None, 600, c)
        await sc.warm_up(client, c)
        body = sc.request_body(tokens, None, {"ignore_eos": True, "min_tokens": tokens})
        try:
            return await cr.run_step(client, sco.MODEL, c, n, 8, body, [base[:-3] + "/metrics"], 0.5,
                                     "%x" % int(time.time() * 1000))
        finally:
            await client.close()

    step = asyncio.run(go())
    return {"tok_s": step["throughput_tok_s"], "ttft_mean_ms": step["ttft_s"]["mean"] * 1000,
            "ttft_p50_ms": step["ttft_s"]["p50"] * 1000, "itl_mean_ms": step["itl_s"]["mean"] * 1000,
            "tpot_mean_ms": step["tpot_s"]["mean"] * 1000, "failed": step["failed_requests"],
            "queue_mean_ms": (step["client_queue_s"]["mean"] or 0) * 1000,
            "ttft_from_issue_mean_ms": ((step["ttft_s"]["mean"] or 0) + (step["client_queue_s"]["mean"] or 0)) * 1000,
            "server_ttft_ms": (step.get("server_ttft_mean_s") or 0) * 1000, "load": round(os.getloadavg()[0], 2)}


def guidellm_run(exe, base, c, n, tokens, tag):
    os.makedirs(OUT, exist_ok=True)
    data = os.path.join(OUT, "prompts-%d.jsonl" % tokens)
    with open(data, "w") as fh:
        for _row in range(max(n, 16)):
            fh.write(json.dumps({"prompt": "Say something.", "output_tokens_count": tokens}) + "\n")
    out = os.path.join(OUT, "c%d-%s.json" % (c, tag))
    cmd = [exe, "run", "--backend", "kind=openai_http,target=%s,model=%s" % (base[:-3], sco.MODEL),
           "--profile", "kind=concurrent,streams=%d" % c, "--constraint", "kind=max_requests,count=%d" % n,
           "--data", "kind=json_file,path=%s" % data, "--output", "kind=json,path=%s" % out,
           "--disable-console-interactive"]
    metrics = [base[:-3] + "/metrics"]
    before = sc.scrape(metrics)
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=OUT,
                       preexec_fn=lambda: sco.set_nice(-10), check=False)
    delta = sl.snapshot_delta(before, sc.scrape(metrics))
    if p.returncode != 0 or not os.path.exists(out):
        raise RuntimeError("guidellm rc=%s: %s" % (p.returncode, (p.stdout + p.stderr)[-800:]))
    m = json.load(open(out))["benchmarks"][0]["metrics"]

    def g(name, stat="mean"):
        return m[name]["successful"][stat]

    return {"tok_s": g("output_tokens_per_second"), "ttft_mean_ms": g("time_to_first_token_ms"),
            "ttft_p50_ms": g("time_to_first_token_ms", "median"), "itl_mean_ms": g("inter_token_latency_ms"),
            "tpot_incl_first_ms": g("time_per_output_token_ms"),
            "requests": m["request_totals"]["successful"] if "request_totals" in m else None,
            "server_ttft_ms": (delta.get("time_to_first_token_seconds_mean") or 0) * 1000,
            "wall_s": round(time.time() - t0, 1), "load": round(os.getloadavg()[0], 2)}


def med(rows, key):
    vals = [r[key] for r in rows if r.get(key) is not None]
    return (statistics.median(vals), min(vals), max(vals)) if vals else (None, None, None)


def diff(a, b):
    return None if a is None or b in (None, 0) else 100.0 * (a - b) / b


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ttft-ms", type=float, default=500)
    ap.add_argument("--itl-ms", type=float, default=50)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 64, 256])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--requests-per-stream", type=int, default=2)
    ap.add_argument("--guidellm", default=os.path.join(REPO, "build", "bench-venv", "bin", "guidellm"))
    ap.add_argument("--json")
    ap.add_argument("--pin", action="store_true",
                    help="stand-in on the last CPU, this process and GuideLLM (inherits the mask) on the others")
    args = ap.parse_args()
    if not os.path.exists(args.guidellm):
        raise SystemExit("guidellm not found at %s (see the install lines in this script's docstring)" % args.guidellm)
    nice = sco.set_nice(-10)
    port = sco.free_port()
    base = "http://%s:%d/v1" % (sco.HOST, port)
    load0 = os.getloadavg()
    server_cpus = None
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        server_cpus = {cpus[-1]}
        os.sched_setaffinity(0, set(cpus[:-1]) or set(cpus))
        print("pinned: stand-in on CPU %s, clients on CPU %s" % (sorted(server_cpus), sorted(os.sched_getaffinity(0))))
    proc = sco.start_standin(port, args.ttft_ms, args.itl_ms, cpus=server_cpus)
    results = {}
    try:
        print("stand-in TTFT %.0f ms, ITL %.0f ms, %d output tokens; client niceness %d; load at start %.2f" % (
            args.ttft_ms, args.itl_ms, args.tokens, nice, load0[0]))
        for c in args.concurrency:
            n = max(c * args.requests_per_stream, 4 if c == 1 else c)
            rows = {"module": [], "guidellm": []}
            for i in range(args.repeats):
                rows["module"].append(module_run(base, c, n, args.tokens))
                time.sleep(1)
                rows["guidellm"].append(guidellm_run(args.guidellm, base, c, n, args.tokens, str(i)))
                time.sleep(1)
            results[c] = rows
            print("\nconcurrency %d, %d requests per run, %d runs each (median (min..max)); load %s" % (
                c, n, args.repeats, "/".join(str(r["load"]) for r in rows["module"] + rows["guidellm"])))
            print("  %-34s %-26s %-26s %8s" % ("figure", "module", "guidellm", "diff %"))
            pairs = [("output tok/s", "tok_s", "tok_s"), ("TTFT mean ms", "ttft_mean_ms", "ttft_mean_ms"),
                     ("TTFT median ms", "ttft_p50_ms", "ttft_p50_ms"),
                     ("ITL per chunk (mod) / ITL (gl) ms", "itl_mean_ms", "itl_mean_ms"),
                     ("TPOT (mod) / ITL (gl) ms", "tpot_mean_ms", "itl_mean_ms"),
                     ("server-side TTFT mean ms (stand-in)", "server_ttft_ms", "server_ttft_ms")]
            summ = {}
            for label, km, kg in pairs:
                a, b = med(rows["module"], km), med(rows["guidellm"], kg)
                d = diff(a[0], b[0])
                summ[label] = {"module": a, "guidellm": b, "diff_pct": d}
                print("  %-34s %-26s %-26s %+8.2f" % (
                    label, "%.1f (%.1f..%.1f)" % a if a[0] is not None else "-",
                    "%.1f (%.1f..%.1f)" % b if b[0] is not None else "-", d if d is not None else 0))
            gt = med(rows["guidellm"], "tpot_incl_first_ms")
            print("  (guidellm time_per_output_token incl. first token: %.1f ms -- not comparable)" % gt[0])
            results[c] = {"rows": rows, "summary": summ,
                          "within_5pct": all(v["diff_pct"] is not None and abs(v["diff_pct"]) <= 5
                                             for k, v in summ.items() if not k.startswith("server"))}
            sys.stdout.flush()
    finally:
        sco.stop(proc)
    print("\nload average at end %.2f/%.2f/%.2f" % os.getloadavg())
    print("module vs guidellm within 5 %%: %s" % ", ".join(
        "c=%d %s" % (c, "yes" if r["within_5pct"] else "NO") for c, r in results.items()))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "loadavg_start": load0, "results": results}, fh, indent=2, default=str)


if __name__ == "__main__":
    main()
