#!/usr/bin/env python3
"""Measure the stand-in's TTFT / ITL as a streaming client sees them (stdlib asyncio, minimal client overhead).

    python3 sim/standin/bench_timing.py [--concurrency 1,64,256] [--ttft-ms 200] [--itl-ms 20] [--tokens 64]

Starts a stand-in on a free loopback port with the given timings, runs `concurrency` simultaneous streaming
requests (each `--tokens` output tokens, ignore_eos) per level, and prints mean TTFT / ITL and their error
against the configured values. Prints numbers only; asserts nothing.
"""
import argparse
import asyncio
import json
import statistics
import sys
import time

from vllm_standin import testing  # its sibling: a script's own directory is first on the path


async def one(host, port, tokens, results):
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "benchmark"}], "max_tokens": tokens,
                       "ignore_eos": True, "stream": True, "reasoning_effort": "none"}).encode()
    t0 = time.monotonic()
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    stamps = []
    while True:
        line = await reader.readline()
        if not line:
            break
        if line.startswith(b"data: "):
            if line.startswith(b"data: [DONE]"):
                break
            if b'"content": ""' in line:
                continue  # role chunk
            if b'"content"' in line or b'"reasoning"' in line:
                stamps.append(time.monotonic())
    writer.close()
    if stamps:
        itls = [b - a for a, b in zip(stamps, stamps[1:])]
        results.append((stamps[0] - t0, statistics.mean(itls) if itls else 0.0, len(stamps)))


async def level(host, port, conc, tokens):
    results = []
    await asyncio.gather(*[one(host, port, tokens, results) for _unused in range(conc)])
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", default="1,64,256")
    ap.add_argument("--ttft-ms", type=float, default=200.0)
    ap.add_argument("--itl-ms", type=float, default=20.0)
    ap.add_argument("--tokens", type=int, default=64)
    a = ap.parse_args()
    host = testing.loopback_ip()
    port = testing.free_port(host)
    env = testing.fast_env(VLLM_STANDIN_TTFT_MS=a.ttft_ms, VLLM_STANDIN_ITL_MS=a.itl_ms,
                           VLLM_STANDIN_ACCESS_LOG="0")
    proc = testing.Proc(["serve", "m", "-tp", "8", "--host", host, "--port", str(port), "--max-model-len", "32k"],
                        env=env)
    try:
        if not testing.wait_status(host, port, 200, proc=proc):
            print(proc.log())
            return 1
        print("configured: TTFT %.1f ms, ITL %.1f ms, %d tokens/request" % (a.ttft_ms, a.itl_ms, a.tokens))
        for conc in [int(c) for c in a.concurrency.split(",")]:
            res = asyncio.run(level(host, port, conc, a.tokens))
            ttft = statistics.mean(r[0] for r in res) * 1000
            itl = statistics.mean(r[1] for r in res) * 1000
            p99 = sorted(r[0] for r in res)[int(0.99 * (len(res) - 1))] * 1000
            print("concurrency %4d: n=%d  mean TTFT %.2f ms (%+.1f%%, p99 %.1f)  mean ITL %.2f ms (%+.1f%%)" % (
                conc, len(res), ttft, 100 * (ttft - a.ttft_ms) / a.ttft_ms, p99, itl,
                100 * (itl - a.itl_ms) / a.itl_ms))
    finally:
        proc.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
