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
import smoke_vs_guidellm as svg  # noqa: E402  (module_run, compare, run_tool_process)

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
    out = os.path.join(art, "profile_export_aiperf.json")
    delta, t0 = svg.run_tool_process("aiperf", cmd, base, out, OUT, timeout=1800)
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    svg.common_args(ap, repeats=2, requests_per_stream=2, pause=3.0)
    ap.add_argument("--aiperf", default=os.path.join(REPO, "build", "aiperf-venv", "bin", "aiperf"))
    args = ap.parse_args()
    if not os.path.exists(args.aiperf):
        raise SystemExit("aiperf not found at %s (see the install lines in this script's docstring)" % args.aiperf)
    os.makedirs(OUT, exist_ok=True)
    tokenizer = ensure_tokenizer(args.aiperf)

    def run(base, c, n, tokens, tag):
        return aiperf_run(args.aiperf, tokenizer, base, c, n, tokens, tag)

    svg.compare(args, "aiperf", run, PAIRS)


if __name__ == "__main__":
    main()
