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
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.capacity import runner as cr  # noqa: E402
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import client as sc  # noqa: E402
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import metrics as sl  # noqa: E402
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import server as ss  # noqa: E402

REPO = sco.REPO
OUT = os.path.join(REPO, "build", "bench", "guidellm")


def module_run(base, c, n, tokens):
    async def go():
        endpoint = ss.Endpoint.at(base, None, 600)
        client = sc.make_client(endpoint, c)
        await sc.warm_up(client, c)
        body = sc.request_body(tokens, None, {"ignore_eos": True, "min_tokens": tokens})
        try:
            spec = {"endpoint": endpoint, "model": sco.MODEL, "body": body}
            ctx = cr.step_context(client, spec, [base[:-3] + "/metrics"], 0.5, 8)
            return await cr.run_step(ctx, c, n)
        finally:
            await client.close()

    step = asyncio.run(go())
    return {"tok_s": step["throughput_tok_s"], "ttft_mean_ms": step["ttft_s"]["mean"] * 1000,
            "ttft_p50_ms": step["ttft_s"]["p50"] * 1000, "itl_mean_ms": step["itl_s"]["mean"] * 1000,
            "tpot_mean_ms": step["tpot_s"]["mean"] * 1000, "failed": step["failed_requests"],
            "queue_mean_ms": (step["client_queue_s"]["mean"] or 0) * 1000,
            "ttft_from_issue_mean_ms": ((step["ttft_s"]["mean"] or 0) + (step["client_queue_s"]["mean"] or 0)) * 1000,
            "server_ttft_ms": (step.get("server_ttft_mean_s") or 0) * 1000, "load": round(os.getloadavg()[0], 2)}


def run_tool_process(name, cmd, base, out, cwd, timeout):
    """Run the other tool (niced like this process) between two scrapes of the stand-in's /metrics.
    -> (metrics delta over the run, start time). Raises when it fails or wrote no ``out``."""
    metrics = [base[:-3] + "/metrics"]
    before = ss.scrape(metrics)
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                       preexec_fn=lambda: sco.set_nice(-10), check=False)
    delta = sl.snapshot_delta(before, ss.scrape(metrics))
    if p.returncode != 0 or not os.path.exists(out):
        raise RuntimeError("%s rc=%s: %s" % (name, p.returncode, (p.stdout + p.stderr)[-1500:]))
    return delta, t0


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
    delta, t0 = run_tool_process("guidellm", cmd, base, out, OUT, timeout=900)
    with open(out) as fh:
        m = json.load(fh)["benchmarks"][0]["metrics"]

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


def summarise(rows, tool, pairs):
    """``pairs``: (label, module key, tool key or None, judged). -> ({label: {module, <tool>, diff_pct, judged}},
    all judged figures within 5 %)."""
    summ = {}
    for label, km, kt, judged in pairs:
        a = med(rows["module"], km)
        b = med(rows[tool], kt) if kt else (None, None, None)
        summ[label] = {"module": a, tool: b, "diff_pct": diff(a[0], b[0]), "judged": judged}
    ok = all(v["diff_pct"] is not None and abs(v["diff_pct"]) <= 5 for v in summ.values() if v["judged"])
    return summ, ok


def _cell(v):
    return "%.1f (%.1f..%.1f)" % v if v[0] is not None else "-"


def compare(args, tool, run_tool, pairs, footer=None):
    """Stand-in up (pinned with ``args.pin``); per concurrency alternate the module and ``run_tool(base, c, n,
    tokens, tag)``, ``args.repeats`` runs each; print the medians side by side; ``args.json`` gets everything."""
    if getattr(args, "gate_width", None):
        sc.SEND_GATE_WIDTH = args.gate_width
    nice = sco.set_nice(-10)
    port = sco.free_port()
    base = "http://%s:%d/v1" % (sco.HOST, port)
    load0 = os.getloadavg()
    server_cpus = sco.pin_clients(args.pin, "clients")
    proc = sco.start_standin(port, args.ttft_ms, args.itl_ms, cpus=server_cpus)
    results = {}
    try:
        print("stand-in TTFT %.0f ms, ITL %.0f ms, %d output tokens; client niceness %d; send gate width %d; "
              "load at start %.2f" % (args.ttft_ms, args.itl_ms, args.tokens, nice, sc.SEND_GATE_WIDTH, load0[0]))
        for c in args.concurrency:
            n = max(c * args.requests_per_stream, 4 if c == 1 else c)
            rows = {"module": [], tool: []}
            for i in range(args.repeats):
                rows["module"].append(module_run(base, c, n, args.tokens))
                time.sleep(args.pause)
                rows[tool].append(run_tool(base, c, n, args.tokens, str(i)))
                time.sleep(args.pause)
            summ, ok = summarise(rows, tool, pairs)
            results[c] = {"rows": rows, "summary": summ, "within_5pct": ok}
            print("\nconcurrency %d, %d requests per run, %d runs each (median (min..max)); load %s" % (
                c, n, args.repeats, "/".join(str(r["load"]) for r in rows["module"] + rows[tool])))
            print("  %-36s %-26s %-26s %8s" % ("figure", "module", tool, "diff %"))
            for label, v in summ.items():
                print("  %-36s %-26s %-26s %8s%s" % (
                    label, _cell(v["module"]), _cell(v[tool]),
                    "%+.2f" % v["diff_pct"] if v["diff_pct"] is not None else "",
                    "" if v["judged"] else "  (not judged)"))
            if footer:
                footer(rows)
            sys.stdout.flush()
    finally:
        sco.stop(proc)
    print("\nload average at end %.2f/%.2f/%.2f" % os.getloadavg())
    print("module vs %s within 5 %%: %s" % (tool, ", ".join(
        "c=%d %s" % (c, "yes" if r["within_5pct"] else "NO") for c, r in results.items())))
    sco.write_json(args.json, {"args": vars(args), "loadavg_start": load0, "results": results})
    return results


def common_args(ap, repeats=2, requests_per_stream=2, pause=1.0):
    ap.add_argument("--ttft-ms", type=float, default=500)
    ap.add_argument("--itl-ms", type=float, default=50)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 64, 256])
    ap.add_argument("--repeats", type=int, default=repeats)
    ap.add_argument("--requests-per-stream", type=int, default=requests_per_stream)
    ap.add_argument("--pause", type=float, default=pause, help="seconds between runs")
    ap.add_argument("--gate-width", type=int, help="override smoke_client.SEND_GATE_WIDTH (exploration)")
    ap.add_argument("--json")
    ap.add_argument("--pin", action="store_true",
                    help="stand-in on the last CPU, this process and the other tool (inherits the mask) on the others")


# (label, module key, GuideLLM key, judged): GuideLLM's inter_token_latency is a per-request TPOT.
PAIRS = [("output tok/s", "tok_s", "tok_s", True), ("TTFT mean ms", "ttft_mean_ms", "ttft_mean_ms", True),
         ("TTFT median ms", "ttft_p50_ms", "ttft_p50_ms", True),
         ("ITL per chunk (mod) / ITL (gl) ms", "itl_mean_ms", "itl_mean_ms", True),
         ("TPOT (mod) / ITL (gl) ms", "tpot_mean_ms", "itl_mean_ms", True),
         ("server-side TTFT mean ms (stand-in)", "server_ttft_ms", "server_ttft_ms", False)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(ap)
    ap.add_argument("--guidellm", default=os.path.join(REPO, "build", "bench-venv", "bin", "guidellm"))
    args = ap.parse_args()
    if not os.path.exists(args.guidellm):
        raise SystemExit("guidellm not found at %s (see the install lines in this script's docstring)" % args.guidellm)

    def footer(rows):
        gt = med(rows["guidellm"], "tpot_incl_first_ms")
        print("  (guidellm time_per_output_token incl. first token: %.1f ms -- not comparable)" % gt[0])

    compare(args, "guidellm", lambda base, c, n, tokens, tag: guidellm_run(args.guidellm, base, c, n, tokens, tag),
            PAIRS, footer)


if __name__ == "__main__":
    main()
