#!/usr/bin/env python3
"""Client overhead of the smoke/capacity measuring client against the stand-in with a known TTFT/ITL.

Starts `sim/standin/bin/vllm serve` on 127.0.0.5 as its own process (niced to -5 when run as root; access log off)
with VLLM_STANDIN_TTFT_MS / VLLM_STANDIN_ITL_MS, and at each concurrency C runs `--repeats` rounds of C
simultaneous streaming requests (`--tokens` output tokens, `ignore_eos`) through the module's own code path:
`smoke_client.make_client` -> `warm_up` -> `smoke_shards.run_streams` (above `--per-shard` streams, default 128,
spread over client processes like the modules do) -> `smoke_measure.aggregate`. The measuring process raises its own
priority to `--nice` (default -10, root only), since the machine is shared.

Per round it records the client's TTFT (mean, p50) and ITL (mean of all per-chunk gaps, p50), throughput (output
tokens / round wall time), the client process's CPU share, the stand-in's own view (mean of
Δ`vllm:time_to_first_token_seconds` / Δ`vllm:inter_token_latency_seconds` over the round) and the 1-minute load
average. Printed per concurrency: the median over the rounds and the spread (min..max), and the error of the median
against the configured values; target: |error| <= 5 % for TTFT mean, TTFT p50 and ITL mean.

usage: .venv/bin/python benchmarks/smoke_client_overhead.py [--ttft-ms 500] [--itl-ms 50] [--tokens 32]
       [--concurrency 1 64 256] [--repeats 5] [--json build/bench/smoke_overhead.json]
"""
import argparse
import asyncio
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "build", "collections"))

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import client as sc  # noqa: E402
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import measure as sm  # noqa: E402
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import metrics as sl  # noqa: E402
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import server as ssrv  # noqa: E402
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import shards as ss  # noqa: E402

HOST = "127.0.0.5"
MODEL = "moonshotai/Kimi-K3"
PROMPT = "Say something."


def free_port(host=HOST):
    s = socket.socket()
    s.bind((host, 0))
    p = s.getsockname()[1]
    s.close()
    return p


def set_nice(value):
    """Absolute niceness for this process (negative needs root); returns the niceness in force."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, int(value))
    except (PermissionError, OSError):
        pass
    return os.getpriority(os.PRIO_PROCESS, 0)


def start_standin(port, ttft_ms, itl_ms, nice=-5, host=HOST, cpus=None):
    """The stand-in as its own process (stdout/stderr discarded, access log off), optionally pinned to ``cpus``.
    Returns the Popen."""

    def prepare():
        set_nice(nice)
        if cpus:
            os.sched_setaffinity(0, cpus)

    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    env.update({"VLLM_STANDIN_LOAD_S": "0", "VLLM_STANDIN_TTFT_MS": str(ttft_ms), "VLLM_STANDIN_ITL_MS": str(itl_ms),
                "VLLM_STANDIN_ACCESS_LOG": "0"})
    proc = subprocess.Popen(
        [sys.executable, os.path.join(REPO, "sim", "standin", "bin", "vllm"), "serve", MODEL,
         "--host", host, "--port", str(port), "--max-model-len", "32768", "--trust-remote-code",
         "--tensor-parallel-size", "8", "--max-num-seqs", "1024"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=prepare)
    for _attempt in range(300):
        try:
            if urllib.request.urlopen("http://%s:%d/health" % (host, port), timeout=1).status == 200:
                return proc
        except Exception:  # noqa: BLE001
            time.sleep(0.2)
    proc.terminate()
    raise SystemExit("stand-in did not become healthy")


def pin_clients(pin, who="client"):
    """With ``pin``: keep the last CPU for the stand-in (returned as its CPU set) and move this process (and what it
    starts later) to the others. Without: None (no pinning)."""
    if not pin:
        return None
    cpus = sorted(os.sched_getaffinity(0))
    server_cpus = {cpus[-1]}
    os.sched_setaffinity(0, set(cpus[:-1]) or set(cpus))
    print("pinned: stand-in on CPU %s, %s on CPU %s" % (sorted(server_cpus), who, sorted(os.sched_getaffinity(0))))
    return server_cpus


def write_json(path, payload):
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as fh:
            json.dump(payload, fh, indent=2, default=str)


def stop(proc):
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def _cpu_s():
    """CPU seconds of this process plus its finished children (the client processes of a sharded round)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + ru.ru_utime + ru.ru_stime


async def run_round(base_url, concurrency, tokens, preopen=True, per_shard=None):
    """One round of `concurrency` simultaneous streams through the module's client code (`smoke_shards.run_streams`:
    in this process up to `per_shard` streams, above that spread over client processes, as the modules do)."""
    per_shard = per_shard or ss.SHARD_STREAMS
    metrics = [base_url[:-3] + "/metrics"]
    before = await asyncio.to_thread(ssrv.scrape, metrics)
    local = min(concurrency, per_shard)
    endpoint = ssrv.Endpoint.at(base_url, None, 600)
    client = sc.make_client(endpoint, local)
    await sc.warm_up(client, local if preopen else 1)
    body = sc.request_body(tokens, None, {"ignore_eos": True, "min_tokens": tokens})
    spec = {"endpoint": endpoint, "model": MODEL, "body": body}
    msgs = [[{"role": "user", "content": PROMPT}]] * concurrency
    cpu0 = _cpu_s()
    t0 = time.perf_counter()
    results, wall = await ss.run_streams(client, spec, msgs, concurrency, per_shard=per_shard)
    elapsed = time.perf_counter() - t0
    cpu = _cpu_s() - cpu0
    await client.close()
    after = await asyncio.to_thread(ssrv.scrape, metrics)
    delta = sl.snapshot_delta(before, after)
    agg = sm.aggregate(results, wall_s=wall)
    return {"ttft_mean_s": agg["ttft_s"]["mean"], "ttft_p50_s": agg["ttft_s"]["p50"],
            "ttft_p99_s": agg["ttft_s"]["p99"],
            "itl_mean_s": agg["itl_s"]["mean"], "itl_p50_s": agg["itl_s"]["p50"],
            "tpot_mean_s": agg["tpot_s"]["mean"], "e2e_mean_s": agg["e2e_s"]["mean"],
            "client_queue_max_s": (agg.get("client_queue_s") or {}).get("max"),
            "tokens_per_s": agg["tokens_per_s"], "output_tokens": agg["output_tokens"], "wall_s": round(wall, 4),
            "client_processes": len(ss.plan_shards(concurrency, concurrency, per_shard)),
            "client_cpu_frac": round(cpu / elapsed, 3) if elapsed else None,
            "server_ttft_mean_s": delta.get("time_to_first_token_seconds_mean"),
            "server_itl_mean_s": delta.get("inter_token_latency_seconds_mean"),
            "failed": agg["failed_requests"], "errors": agg["errors"][:2],
            "loadavg_1m": round(os.getloadavg()[0], 2)}


def pct(measured, configured):
    return None if measured is None else round(100.0 * (measured - configured) / configured, 2)


def summarise(rounds, key):
    vals = [r[key] for r in rounds if r.get(key) is not None]
    if not vals:
        return {"median": None, "min": None, "max": None}
    return {"median": round(statistics.median(vals), 6), "min": round(min(vals), 6), "max": round(max(vals), 6)}


def measure(base_url, concurrencies, tokens, repeats, ttft_s, itl_s, label="", pause=1.0, preopen=True,
            per_shard=None):
    """Rounds at every concurrency; prints a table; returns {concurrency: summary}."""
    out = {}
    print("%s configured TTFT %.1f ms, ITL %.1f ms, %d output tokens, %d rounds per level" % (
        label, ttft_s * 1000, itl_s * 1000, tokens, repeats))
    print("%5s %4s | %-22s %7s | %-22s %7s | %-22s %7s | %-21s %7s | %8s %5s %6s %4s %6s" % (
        "conc", "proc", "TTFT mean med (min..max)", "err%", "TTFT p50 med (min..max)", "err%",
        "ITL mean med (min..max)", "err%", "server TTFT / ITL", "srv err", "tok/s", "cpu", "load", "fail",
        "queue"))
    for c in concurrencies:
        rounds = []
        for _rep in range(repeats):
            rounds.append(asyncio.run(run_round(base_url, c, tokens, preopen, per_shard)))
            time.sleep(pause)
        s = {k: summarise(rounds, k) for k in ("ttft_mean_s", "ttft_p50_s", "ttft_p99_s", "itl_mean_s", "itl_p50_s",
                                               "tpot_mean_s", "tokens_per_s", "client_cpu_frac", "client_queue_max_s",
                                               "server_ttft_mean_s", "server_itl_mean_s", "loadavg_1m")}
        s["err_pct"] = {"ttft_mean": pct(s["ttft_mean_s"]["median"], ttft_s),
                        "ttft_p50": pct(s["ttft_p50_s"]["median"], ttft_s),
                        "itl_mean": pct(s["itl_mean_s"]["median"], itl_s),
                        "server_ttft": pct(s["server_ttft_mean_s"]["median"], ttft_s),
                        "server_itl": pct(s["server_itl_mean_s"]["median"], itl_s)}
        s["within_5pct"] = all(v is not None and abs(v) <= 5.0 for k, v in s["err_pct"].items()
                               if not k.startswith("server"))
        s["failed"] = sum(r["failed"] for r in rounds)
        s["rounds"] = rounds
        out[c] = s
        e = s["err_pct"]

        def rng(k, scale=1000.0, fmt="%.1f"):
            d = s[k]
            if d["median"] is None:
                return "-"
            return (fmt + " (" + fmt + ".." + fmt + ")") % (d["median"] * scale, d["min"] * scale, d["max"] * scale)

        row = (c, rounds[0]["client_processes"], rng("ttft_mean_s"), e["ttft_mean"] or 0, rng("ttft_p50_s"),
               e["ttft_p50"] or 0, rng("itl_mean_s", fmt="%.2f"), e["itl_mean"] or 0,
               (s["server_ttft_mean_s"]["median"] or 0) * 1000, (s["server_itl_mean_s"]["median"] or 0) * 1000,
               e["server_ttft"] or 0, s["tokens_per_s"]["median"] or 0, s["client_cpu_frac"]["median"] or 0,
               s["loadavg_1m"]["median"] or 0, s["failed"], s["client_queue_max_s"]["median"] or 0)
        print("%5d %4d | %-22s %+7.2f | %-22s %+7.2f | %-22s %+7.2f | %9.1f / %-9.2f %+7.2f | %8.1f %5.2f %6.2f %4d "
              "%6.3f" % row)
        sys.stdout.flush()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ttft-ms", type=float, default=500)
    ap.add_argument("--itl-ms", type=float, default=50)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 64, 256])
    ap.add_argument("--nice", type=int, default=-10, help="niceness of this measuring process (root only)")
    ap.add_argument("--server-nice", type=int, default=-5, help="niceness of the stand-in process (root only)")
    ap.add_argument("--no-preopen", action="store_true",
                    help="warm up one connection only (each stream then opens its own inside the measured window)")
    ap.add_argument("--gate-width", type=int, help="override smoke_client.SEND_GATE_WIDTH (exploration)")
    ap.add_argument("--pin", action="store_true",
                    help="pin the stand-in to the last CPU and this client to the others (separate cores, as a real "
                         "client and server would be)")
    ap.add_argument("--per-shard", type=int, default=ss.SHARD_STREAMS,
                    help="streams per client process (smoke_shards.SHARD_STREAMS); a large value runs every stream "
                         "in one process, as before the sharding")
    ap.add_argument("--json", help="write all rounds and summaries here")
    args = ap.parse_args()
    if args.gate_width and hasattr(sc, "SEND_GATE_WIDTH"):
        sc.SEND_GATE_WIDTH = args.gate_width
    nice = set_nice(args.nice)
    port = free_port()
    base = "http://%s:%d/v1" % (HOST, port)
    load0 = os.getloadavg()
    server_cpus = pin_clients(args.pin)
    proc = start_standin(port, args.ttft_ms, args.itl_ms, nice=args.server_nice, cpus=server_cpus)
    try:
        print("client niceness %d, stand-in niceness %d, load average at start %.2f/%.2f/%.2f, %d cores" % (
            nice, os.getpriority(os.PRIO_PROCESS, proc.pid), load0[0], load0[1], load0[2], os.cpu_count()))
        levels = measure(base, args.concurrency, args.tokens, args.repeats, args.ttft_ms / 1000, args.itl_ms / 1000,
                         preopen=not args.no_preopen, per_shard=args.per_shard)
    finally:
        stop(proc)
    load1 = os.getloadavg()
    print("load average at end %.2f/%.2f/%.2f" % load1)
    print("within 5 %% (TTFT mean, TTFT p50, ITL mean): %s" % ", ".join(
        "c=%d %s" % (c, "yes" if s["within_5pct"] else "NO") for c, s in levels.items()))
    write_json(args.json, {"configured": {"ttft_s": args.ttft_ms / 1000, "itl_s": args.itl_ms / 1000,
                                          "tokens": args.tokens, "repeats": args.repeats},
                           "nice": nice, "loadavg_start": load0, "loadavg_end": load1, "levels": levels})


if __name__ == "__main__":
    main()
