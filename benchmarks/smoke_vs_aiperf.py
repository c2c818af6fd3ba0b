#!/usr/bin/env python3
"""The module's throughput/latency figures side by side with NVIDIA AIPerf's, on the same stand-in.

Same set-up as benchmarks/smoke_vs_guidellm.py (one stand-in, TTFT/ITL as configured; per concurrency C the module
and AIPerf alternate, `--repeats` runs each, N = `--requests-per-stream` x C streaming requests with `ignore_eos`,
medians compared, target |difference| <= 5 %), with AIPerf as the other client:

    aiperf profile --endpoint-type chat --streaming --concurrency C --request-count N --warmup-request-count C
      --isl 16 --osl T --extra-inputs ignore_eos:true --extra-inputs min_tokens:T --use-server-token-count
      --tokenizer <local word-level tokenizer> --ui none

AIPerf needs a tokenizer to synthesise prompts; with no network the script writes a small word-level tokenizer
(`build/bench/aiperf/tokenizer`, made with the `tokenizers` package of AIPerf's venv) and counts output tokens from
the server's usage (`--use-server-token-count`). Figures read from `profile_export_aiperf.json`:

| module | AIPerf | meaning |
| --- | --- | --- |
| `throughput_tok_s` | `output_token_throughput.avg` | output tokens / run wall time |
| TTFT mean, p50 | `time_to_first_token.avg`, `.p50` | request started -> first token |
| TTFT + client send queue | `time_to_first_token.avg` | request issued -> first token |
| ITL (mean of per-chunk gaps) | `inter_chunk_latency.avg` | gap between SSE chunks |
| TPOT ((e2e - ttft) / (tokens - 1)) | `inter_token_latency.avg` | AIPerf's ITL is this per-request figure |

Where the clock starts: the module starts it when the request passes its send gate (a few requests at a time from
`create()` to "body written") and reports the wait for the gate separately (`client_queue_s`, shown, not judged);
AIPerf stamps `start_perf_ns` in its worker right before the HTTP request, after its timing manager's credit has
reached the worker. Both tools thus have a client-side wait before their clock starts; only the module's is
measured. The judged figures are the ones both tools report: throughput, TTFT mean and median, ITL and TPOT. The
row "TTFT from issue" (the module's TTFT plus its queue wait) is shown for information.

`--pin` puts the stand-in on the last CPU and this script, the module and AIPerf (all its service processes inherit
the mask) on the others.

usage: .venv/bin/python benchmarks/smoke_vs_aiperf.py [--concurrency 1 64 256] [--repeats 2] [--pin]
       [--aiperf build/aiperf-venv/bin/aiperf] [--json build/bench/vs_aiperf.json]
install AIPerf (separate venv, Python >= 3.10; about 2 minutes from PyPI):
       /root/.pyenv/versions/3.12.1/bin/python3 -m venv build/aiperf-venv
       build/aiperf-venv/bin/pip install aiperf==0.13.0
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import smoke_client_overhead as sco  # noqa: E402  (stand-in start/stop, niceness, sys.path)
import smoke_vs_guidellm as svg  # noqa: E402  (module_run, med, diff)
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils import smoke_client as sc  # noqa: E402
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils import smoke_logic as sl  # noqa: E402

REPO = sco.REPO
OUT = os.path.join(REPO, "build", "bench", "aiperf")

MAKE_TOKENIZER = r"""
import json, os, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
words = ["[UNK]"] + ["w%d" % i for i in range(4000)]
tok = Tokenizer(models.WordLevel(vocab=dict((w, i) for i, w in enumerate(words)), unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
tok.decoder = decoders.WordPiece(prefix="##")
tok.save(os.path.join(out, "tokenizer.json"))
with open(os.path.join(out, "tokenizer_config.json"), "w") as fh:
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "model_max_length": 1000000}, fh)
"""


def ensure_tokenizer(aiperf_exe):
    path = os.path.join(OUT, "tokenizer")
    if not os.path.exists(os.path.join(path, "tokenizer.json")):
        python = os.path.join(os.path.dirname(aiperf_exe), "python")
        subprocess.run([python, "-c", MAKE_TOKENIZER, path], check=True, timeout=300)
    return path


def aiperf_run(exe, tokenizer, base, c, n, tokens, tag):
    art = os.path.join(OUT, "c%d-%s" % (c, tag))
    shutil.rmtree(art, ignore_errors=True)
    cmd = [exe, "profile", "--model", sco.MODEL, "--url", base[:-3], "--endpoint-type", "chat", "--streaming",
           "--tokenizer", tokenizer, "--use-server-token-count", "--concurrency", str(c), "--request-count", str(n),
           "--warmup-request-count", str(c), "--isl", "16", "--osl", str(tokens),
           "--extra-inputs", "ignore_eos:true", "--extra-inputs", "min_tokens:%d" % tokens,
           "--ui", "none", "--artifact-dir", art]
    metrics = [base[:-3] + "/metrics"]
    before = sc.scrape(metrics)
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=OUT,
                       preexec_fn=lambda: sco.set_nice(-10), check=False)
    delta = sl.snapshot_delta(before, sc.scrape(metrics))
    out = os.path.join(art, "profile_export_aiperf.json")
    if p.returncode != 0 or not os.path.exists(out):
        raise RuntimeError("aiperf rc=%s: %s" % (p.returncode, (p.stdout + p.stderr)[-1500:]))
    with open(out) as fh:
        m = json.load(fh)
    return {"tok_s": m["output_token_throughput"]["avg"], "ttft_mean_ms": m["time_to_first_token"]["avg"],
            "ttft_p50_ms": m["time_to_first_token"]["p50"], "chunk_ms": m["inter_chunk_latency"]["avg"],
            "itl_mean_ms": m["inter_token_latency"]["avg"], "requests": m["request_count"]["avg"],
            "errors": (m.get("error_request_count") or {}).get("avg", 0),
            "server_ttft_ms": (delta.get("time_to_first_token_seconds_mean") or 0) * 1000,
            "wall_s": round(time.time() - t0, 1), "load": round(os.getloadavg()[0], 2)}


# (label, module key, aiperf key, counts for the 5 % verdict); the server's own figure is a reference.
PAIRS = [("output tok/s", "tok_s", "tok_s", True),
         ("TTFT mean ms", "ttft_mean_ms", "ttft_mean_ms", True),
         ("TTFT from issue mean ms (module)", "ttft_from_issue_mean_ms", "ttft_mean_ms", False),
         ("TTFT median ms", "ttft_p50_ms", "ttft_p50_ms", True),
         ("ITL per chunk ms", "itl_mean_ms", "chunk_ms", True),
         ("TPOT (mod) / ITL (aiperf) ms", "tpot_mean_ms", "itl_mean_ms", True),
         ("server-side TTFT mean ms (stand-in)", "server_ttft_ms", "server_ttft_ms", False),
         ("module's client send queue mean ms", "queue_mean_ms", None, False)]


def summarise(rows):
    summ = {}
    for label, km, ka, judged in PAIRS:
        a = svg.med(rows["module"], km)
        b = svg.med(rows["aiperf"], ka) if ka else (None, None, None)
        summ[label] = {"module": a, "aiperf": b, "diff_pct": svg.diff(a[0], b[0]), "judged": judged}
    ok = all(v["diff_pct"] is not None and abs(v["diff_pct"]) <= 5 for v in summ.values() if v["judged"])
    return summ, ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ttft-ms", type=float, default=500)
    ap.add_argument("--itl-ms", type=float, default=50)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 64, 256])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--requests-per-stream", type=int, default=2)
    ap.add_argument("--pause", type=float, default=3.0,
                    help="seconds between runs (AIPerf's service processes take a moment to exit)")
    ap.add_argument("--aiperf", default=os.path.join(REPO, "build", "aiperf-venv", "bin", "aiperf"))
    ap.add_argument("--gate-width", type=int, help="override smoke_client.SEND_GATE_WIDTH (exploration)")
    ap.add_argument("--json")
    ap.add_argument("--pin", action="store_true",
                    help="stand-in on the last CPU, this process and AIPerf (inherits the mask) on the others")
    args = ap.parse_args()
    if not os.path.exists(args.aiperf):
        raise SystemExit("aiperf not found at %s (see the install lines in this script's docstring)" % args.aiperf)
    if args.gate_width:
        sc.SEND_GATE_WIDTH = args.gate_width
    os.makedirs(OUT, exist_ok=True)
    tokenizer = ensure_tokenizer(args.aiperf)
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
        print("stand-in TTFT %.0f ms, ITL %.0f ms, %d output tokens; client niceness %d; send gate width %d; "
              "load at start %.2f" % (args.ttft_ms, args.itl_ms, args.tokens, nice, sc.SEND_GATE_WIDTH, load0[0]))
        for c in args.concurrency:
            n = max(c * args.requests_per_stream, 4 if c == 1 else c)
            rows = {"module": [], "aiperf": []}
            for i in range(args.repeats):
                rows["module"].append(svg.module_run(base, c, n, args.tokens))
                time.sleep(args.pause)
                rows["aiperf"].append(aiperf_run(args.aiperf, tokenizer, base, c, n, args.tokens, str(i)))
                time.sleep(args.pause)
            summ, ok = summarise(rows)
            results[c] = {"rows": rows, "summary": summ, "within_5pct": ok}
            print("\nconcurrency %d, %d requests per run, %d runs each (median (min..max)); load %s" % (
                c, n, args.repeats, "/".join(str(r["load"]) for r in rows["module"] + rows["aiperf"])))
            print("  %-36s %-26s %-26s %8s" % ("figure", "module", "aiperf", "diff %"))
            for label, v in summ.items():
                a, b, d = v["module"], v["aiperf"], v["diff_pct"]
                print("  %-36s %-26s %-26s %8s%s" % (
                    label, "%.1f (%.1f..%.1f)" % a if a[0] is not None else "-",
                    "%.1f (%.1f..%.1f)" % b if b[0] is not None else "-", "%+.2f" % d if d is not None else "",
                    "" if v["judged"] else "  (not judged)"))
            sys.stdout.flush()
    finally:
        sco.stop(proc)
    print("\nload average at end %.2f/%.2f/%.2f" % os.getloadavg())
    print("module vs aiperf within 5 %%: %s" % ", ".join(
        "c=%d %s" % (c, "yes" if r["within_5pct"] else "NO") for c, r in results.items()))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "loadavg_start": load0, "results": results}, fh, indent=2, default=str)


if __name__ == "__main__":
    main()
