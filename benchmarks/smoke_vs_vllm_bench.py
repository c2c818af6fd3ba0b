#!/usr/bin/env python3
"""The module's latency/throughput figures side by side with vLLM's own `vllm bench serve`, on the real engine.

Against a deployment of the rehearsal cpu cluster (vLLM's CPU build, `inventories/sim-cpu` or `sim-cpu-single`,
deployed first), per concurrency C the modules' request path and `vllm bench serve` alternate, `--repeats` runs
each, N = `--requests-per-stream` x C streaming requests of the same prompt (so the engine's prefix cache serves
both alike) with `ignore_eos` and a fixed output length, no metrics sampling beside either;
medians are compared; target |difference| <= 5 % (or 10 ms for latencies). `vllm bench serve` is the one shipped
in the engine image (the same vLLM package), run in a container of that image on the sim's control engine with
host networking:

    vllm bench serve --backend openai-chat --endpoint /v1/chat/completions --base-url URL --model M
      --tokenizer <the model's snapshot> --dataset-name custom --dataset-path prompts.jsonl --skip-chat-template
      --custom-output-len T --num-prompts N --max-concurrency C --ignore-eos --save-result

`--skip-chat-template`: without it the custom dataset renders the model's chat template client-side and the chat
endpoint renders it again, so vllm bench's requests carry a longer prompt than the module's (39 client-side
tokens against the 22 the server counts for the module's request) and its TTFT reads higher.

| module | vllm bench serve | meaning |
| --- | --- | --- |
| `throughput_tok_s` | `output_throughput` | output tokens / run wall time |
| TTFT mean, median | `mean_ttft_ms`, `median_ttft_ms` | request sent -> first token |
| ITL (mean of per-chunk gaps) | `mean_itl_ms` | gap between token-carrying chunks |
| TPOT ((e2e - ttft) / (tokens - 1)) | `mean_tpot_ms` | per-request time per output token |

Client CPU per request (printed, not judged): the module's process time over its timed run; vllm bench's main
process (read from /proc on the host) from its "Starting main benchmark run" line to its result table. Client and
engine share this machine's cores, so a heavier client leaves the engine less.

A benchmark: it prints numbers and asserts nothing.

usage: .venv/bin/python benchmarks/smoke_vs_vllm_bench.py [--base http://127.0.0.61:8000/v1]
       [--concurrency 1 4 16] [--repeats 2] [--tokens 32] [--json build/bench/vs_vllm_bench.json]
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

import smoke_vs_guidellm as svg  # noqa: E402  (module_run, summarise, med)
import smoke_client_overhead as sco  # noqa: E402

REPO = sco.REPO
OUT = os.path.join(REPO, "build", "bench", "vllm_bench")
CONTROL_SOCK = "unix:///run/kimi-sim/control/docker.sock"
MODEL_DIR = "/var/lib/kimi-sim/models-cpu"
PROMPT = "Say something."
# The module's TTFT starts when the request leaves its send gate (the gate wait is its own figure,
# client_queue_s); vllm bench's starts before its HTTP post, so a request's wait for the client is in it. The judged
# TTFT rows put the gate wait back in; the module's own TTFT is printed beside them, not judged.
PAIRS = [("output tok/s", "tok_s", "tok_s", True), ("TTFT mean ms", "ttft_call_mean_ms", "ttft_mean_ms", True),
         ("TTFT median ms", "ttft_call_p50_ms", "ttft_p50_ms", True),
         ("ITL mean ms", "itl_mean_ms", "itl_mean_ms", True), ("TPOT mean ms", "tpot_mean_ms", "tpot_mean_ms", True),
         ("(module TTFT mean ms)", "ttft_mean_ms", None, False), ("(module gate wait ms)", "queue_mean_ms", None, False),
         ("(client CPU ms/request)", "client_cpu_ms_per_req", "client_cpu_ms_per_req", False)]


def engine_image():
    with open(os.path.join(REPO, "sim", ".state", "engine_images.json")) as fh:
        return json.load(fh)["engine_image"]


def snapshot_dir():
    snaps = os.path.join(MODEL_DIR, "hub", "models--moonshotai--Kimi-K3", "snapshots")
    return os.path.join(snaps, sorted(os.listdir(snaps))[0])


def module_run(base, c, n, tokens):
    """The modules' request path (client, warm-up, ``smoke_shards.run_streams``, ``smoke_measure.aggregate``) on
    the prompt `vllm bench serve` sends, ``n`` times, ``c`` at a time, after one untimed request as vllm bench
    makes its own. No metrics sampling beside it: the bench tool scrapes nothing either."""
    async def go():
        endpoint = svg.ss.Endpoint.at(base, None, 600)
        client = sco.sc.make_client(endpoint, c)
        body = sco.sc.request_body(tokens, None, {"ignore_eos": True, "min_tokens": tokens})
        spec = {"endpoint": endpoint, "model": sco.MODEL, "body": body}
        try:
            await sco.sc.warm_up(client, c)
            await sco.ss.run_streams(client, spec, [[{"role": "user", "content": PROMPT}]], 1)
            cpu0 = time.process_time()
            out = await sco.ss.run_streams(client, spec, [[{"role": "user", "content": PROMPT}]] * n, c)
            return out, time.process_time() - cpu0
        finally:
            await client.close()

    (results, wall), cpu_s = asyncio.run(go())
    agg = sco.sm.aggregate(results, wall_s=wall)
    from_call = [(r["ttft_s"] + (r.get("client_queue_s") or 0.0)) * 1000 for r in results
                 if r["ok"] and r.get("ttft_s") is not None]
    return {"tok_s": agg["tokens_per_s"], "ttft_mean_ms": agg["ttft_s"]["mean"] * 1000,
            "ttft_call_mean_ms": statistics.mean(from_call), "ttft_call_p50_ms": statistics.median(from_call),
            "queue_mean_ms": agg["client_queue_s"]["mean"] * 1000, "client_cpu_ms_per_req": cpu_s * 1000 / n,
            "ttft_p50_ms": agg["ttft_s"]["p50"] * 1000, "itl_mean_ms": agg["itl_s"]["mean"] * 1000,
            "tpot_mean_ms": agg["tpot_s"]["mean"] * 1000, "failed": agg["failed_requests"],
            "load": round(os.getloadavg()[0], 2)}


def bench_pylib():
    """pandas for the image's Python 3.11: `vllm bench serve` reads a custom dataset with pandas, which the
    engine image (vLLM's runtime dependencies only) does not carry. Installed once beside the results, mounted
    read-only into the bench container."""
    lib = os.path.join(REPO, "build", "bench", "pylib")
    if not os.path.isdir(os.path.join(lib, "pandas")):
        subprocess.run(["python3.11", "-m", "pip", "install", "-q", "--target", lib, "--no-deps", "pandas<3",
                        "python-dateutil", "pytz", "tzdata"], check=True)
    return lib


def bench_run(base, c, n, tokens, tag):
    os.makedirs(OUT, exist_ok=True)
    data = os.path.join(OUT, "prompts.jsonl")
    with open(data, "w") as fh:
        for _row in range(max(n, 16)):
            fh.write(json.dumps({"prompt": PROMPT}) + "\n")
    name = "c%d-%s.json" % (c, tag)
    container = "kimi-vllm-bench-%s-c%d" % (tag, c)
    cmd = ["docker", "run", "--rm", "--name", container, "-e", "PYTHONUNBUFFERED=1", "--network", "host",
           "-v", "%s:%s:ro" % (MODEL_DIR, MODEL_DIR),
           "-v", "%s:/bench" % OUT, "-v", "%s:/benchlib:ro" % bench_pylib(), "-e", "PYTHONPATH=/opt/vllm/site:/benchlib",
           "-e", "HF_HUB_OFFLINE=1", "--entrypoint", "vllm", engine_image(),
           "bench", "serve", "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
           "--base-url", base[:-3], "--model", sco.MODEL, "--tokenizer", snapshot_dir(),
           "--dataset-name", "custom", "--dataset-path", "/bench/prompts.jsonl", "--skip-chat-template",
           "--custom-output-len", str(tokens),
           "--num-prompts", str(n), "--max-concurrency", str(c), "--ignore-eos", "--save-result",
           "--result-dir", "/bench", "--result-filename", name]
    t0 = time.time()
    rc, log, cpu_s = run_timed_container(cmd, container)
    out = os.path.join(OUT, name)
    if rc != 0 or not os.path.exists(out):
        raise RuntimeError("vllm bench serve rc=%s: %s" % (rc, log[-2000:]))
    with open(out) as fh:
        m = json.load(fh)
    return {"tok_s": m["output_throughput"], "ttft_mean_ms": m["mean_ttft_ms"], "ttft_p50_ms": m["median_ttft_ms"],
            "itl_mean_ms": m["mean_itl_ms"], "tpot_mean_ms": m["mean_tpot_ms"], "failed": n - m["completed"],
            "wall_s": round(time.time() - t0, 1), "load": round(os.getloadavg()[0], 2),
            "client_cpu_ms_per_req": cpu_s * 1000 / n if cpu_s is not None else None}


def _process_cpu_s(container):
    """CPU seconds (user + system, every thread) of the container's main process, read on the host."""
    p = subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", container], capture_output=True, text=True,
                       check=False, env=dict(os.environ, DOCKER_HOST=CONTROL_SOCK))
    with open("/proc/%s/stat" % p.stdout.strip()) as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_timed_container(cmd, container):
    """Run the bench container (``cmd`` names it ``container``, unbuffered), its output streamed; -> (rc, output,
    CPU seconds the client spent from "Starting main benchmark run" to its result table, or None when either line
    is missing)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, DOCKER_HOST=CONTROL_SOCK))
    lines, marks = [], []
    for line in proc.stdout:
        lines.append(line)
        if "Starting main benchmark run" in line or "Serving Benchmark Result" in line:
            marks.append(_process_cpu_s(container))
    rc = proc.wait(timeout=1800)
    return rc, "".join(lines), (marks[1] - marks[0]) if len(marks) == 2 else None


def agrees(v):
    """Within 5 %, or 10 ms for a latency."""
    if not v["judged"]:
        return True
    a, b = v["module"][0], v["vllm_bench"][0]
    if a is None or b is None:
        return False
    return abs(v["diff_pct"]) <= 5 or (not v["label"].startswith("output") and abs(a - b) <= 10)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="http://127.0.0.61:8000/v1")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--requests-per-stream", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()
    results = {}
    for c in args.concurrency:
        n = max(c * args.requests_per_stream, 4)
        rows = {"module": [], "vllm_bench": []}
        for i in range(args.repeats):
            rows["module"].append(module_run(args.base, c, n, args.tokens))
            rows["vllm_bench"].append(bench_run(args.base, c, n, args.tokens, str(i)))
        summ, _ok = svg.summarise(rows, "vllm_bench", PAIRS)
        for label, v in summ.items():
            v["label"] = label
        ok = all(agrees(v) for v in summ.values())
        results[c] = {"rows": rows, "summary": summ, "agrees": ok}
        print("\nconcurrency %d, %d requests per run, %d runs each (median (min..max)); load %s" % (
            c, n, args.repeats, "/".join(str(r["load"]) for r in rows["module"] + rows["vllm_bench"])))
        print("  %-20s %-26s %-26s %8s" % ("figure", "module", "vllm bench serve", "diff %"))
        for label, v in summ.items():
            diff = "%+.2f" % v["diff_pct"] if v["diff_pct"] is not None else ""
            print("  %-20s %-26s %-26s %8s" % (label, svg._cell(v["module"]), svg._cell(v["vllm_bench"]), diff))
        sys.stdout.flush()
    print("\nmodule vs vllm bench serve within 5 %% (or 10 ms): %s" % ", ".join(
        "c=%d %s" % (c, "yes" if r["agrees"] else "NO") for c, r in results.items()))
    sco.write_json(args.json, {"args": vars(args), "results": results})


if __name__ == "__main__":
    main()
