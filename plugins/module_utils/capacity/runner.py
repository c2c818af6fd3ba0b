# -*- coding: utf-8 -*-
"""One concurrency sweep against a live endpoint (used by the ``vllm_capacity_step`` module)."""
from __future__ import annotations

import asyncio
import time

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.capacity import curve as cap
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import client as sc
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import logs as smoke_logs
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import metrics as smoke_metrics
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import server as smoke_server
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import shards as smoke_shards
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import measure as sm
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke.runner import FILLER, FILLER_TOKENS


def unique_prompt(tokens, nonce, filler_tokens=FILLER_TOKENS):
    """~``tokens`` tokens starting with a unique nonce so prefix caching cannot flatter the numbers.

    ``filler_tokens`` is how many tokens the server's tokenizer makes of one FILLER (see calibrate_filler).
    """
    reps = max(1, int(int(tokens) / max(1.0, float(filler_tokens))))
    return ("Request %s. " % nonce) + FILLER * reps + "\nSummarise the text above in one sentence."


async def calibrate_filler(client, model, body, low=4, high=12):
    """Tokens per FILLER by the server's own tokenizer: two short requests, difference of usage.prompt_tokens.

    Prompts near max-model-len must not overshoot (HTTP 400) because the client guessed another tokenizer.
    Returns (tokens per filler, note); falls back to FILLER_TOKENS when the server reports no usage.
    """
    kw = dict(body, max_tokens=1)
    extra = dict((k, v) for k, v in (body.get("extra_body") or {}).items() if k not in ("min_tokens", "ignore_eos"))
    kw.pop("extra_body", None)
    if extra:
        kw["extra_body"] = extra
    counts = []
    for reps in (low, high):
        msgs = [{"role": "user", "content": unique_prompt(reps * FILLER_TOKENS, "calibration")}]
        res = await sc.plain_chat(client, model, msgs, **kw)
        counts.append(res.get("prompt_tokens"))
    if all(isinstance(c, int) for c in counts) and counts[1] > counts[0]:
        per = (counts[1] - counts[0]) / float(high - low)
        return per, "calibrated: %.1f tokens per filler (usage.prompt_tokens)" % per
    return float(FILLER_TOKENS), "not calibrated (no usage in the response): assumed %d tokens per filler" % FILLER_TOKENS


def step_context(client, spec, metrics_urls, interval, prompt_tokens, filler_tokens=FILLER_TOKENS):
    """What ``run_step`` needs: the warmed-up ``client``, the ``spec`` of ``smoke_shards.run_streams`` (endpoint,
    model, body), the metrics URLs and sampling interval, the prompt length."""
    return {"client": client, "spec": spec, "metrics_urls": metrics_urls, "interval": interval,
            "nonce": "%x" % int(time.time() * 1000), "prompt_tokens": prompt_tokens, "filler_tokens": filler_tokens}


async def run_step(ctx, concurrency, requests):
    """One level: ``requests`` streams of unique ~``ctx["prompt_tokens"]``-token prompts, ``concurrency`` at a time
    (spread over client processes above ``smoke_shards.SHARD_STREAMS``), with the server read around it."""
    urls, tls = ctx["metrics_urls"], ctx["spec"]["endpoint"].tls
    nonce = "%s-%d-" % (ctx["nonce"], concurrency)
    msgs = [[{"role": "user", "content": unique_prompt(ctx["prompt_tokens"], nonce + str(i), ctx["filler_tokens"])}]
            for i in range(requests)]
    before = await asyncio.to_thread(smoke_server.scrape, urls, 10.0, tls)
    sampler = smoke_server.GaugeSampler(urls, interval=ctx["interval"], tls=tls)
    sampler.start()
    results, wall = await smoke_shards.run_streams(ctx["client"], ctx["spec"], msgs, concurrency)
    peaks = await sampler.stop()
    after = await asyncio.to_thread(smoke_server.scrape, urls, 10.0, tls)
    agg = sm.aggregate(results, wall_s=wall)
    delta = smoke_metrics.snapshot_delta(before, after)
    return {
        "concurrency": concurrency, "requests": requests, "failed_requests": agg["failed_requests"],
        "wall_s": round(wall, 4), "throughput_tok_s": agg["tokens_per_s"],
        "request_throughput_rps": agg["request_throughput_rps"],
        "output_tokens": agg["output_tokens"], "prompt_tokens": agg["prompt_tokens"],
        "ttft_s": agg["ttft_s"], "itl_s": agg["itl_s"], "tpot_s": agg["tpot_s"], "e2e_s": agg["e2e_s"],
        "client_queue_s": agg["client_queue_s"],
        "client_processes": len(smoke_shards.plan_shards(requests, concurrency)),
        "num_requests_waiting_max": peaks.get("num_requests_waiting_max"),
        "num_requests_running_max": peaks.get("num_requests_running_max"),
        "kv_cache_usage_perc_max": peaks.get("kv_cache_usage_perc_max"),
        "preemptions": delta.get("num_preemptions"),
        "server_ttft_mean_s": delta.get("time_to_first_token_seconds_mean"),
        "errors": agg["errors"],
    }


def kv_figures(summary, log_kv):
    """KV budget from ``vllm:cache_config_info`` (``summary``), else from the start-up log line."""
    return {
        "kv_cache_size_tokens": summary["kv_cache_size_tokens"] or log_kv["kv_cache_size_tokens"],
        "kv_cache_max_concurrency": summary["kv_cache_max_concurrency"] or log_kv["max_concurrency"],
        "source": "metrics" if summary["kv_cache_size_tokens"] else (
            "log" if log_kv["kv_cache_size_tokens"] else None),
        "from_metrics": {k: summary[k] for k in ("kv_cache_size_tokens", "kv_cache_max_concurrency",
                                                 "num_gpu_blocks", "block_size")},
        "from_log": log_kv,
    }


async def _sweep(p, ctx, levels, out):
    """Run the levels in order; stop one level past the knee when ``stop_on_saturation``."""
    prev = None
    for level in levels:
        n = max(level, int(p["requests_per_level"] * level))
        step = await run_step(ctx, level, n)
        step["saturation"] = cap.saturation_reasons(step, prev, p.get("ttft_limit_s"), p["plateau_gain"])
        out["steps"].append(step)
        prev = step
        if step["saturation"] and p["stop_on_saturation"] and sum(1 for s in out["steps"] if s["saturation"]) >= 2:
            break


async def run_sweep_async(p):
    endpoint = smoke_server.endpoint_of(p)
    info = await asyncio.to_thread(smoke_server.server_info, endpoint)
    model = p.get("model") or info["model"]
    metrics_urls = p.get("metrics_urls") or [endpoint.root + "/metrics"]
    snap = await asyncio.to_thread(smoke_server.scrape, metrics_urls, 10.0, endpoint.tls)
    kv = kv_figures(smoke_metrics.summarise_snapshot(snap), smoke_logs.parse_kv_log(p.get("log_text") or ""))
    max_len = info["max_model_len"] or p.get("max_model_len")
    out = {"base_url": p["base_url"], "model": model, "max_model_len": max_len, "version": info["version"],
           "kv": kv, "steps": [], "errors": list(info["errors"]) + snap.get("errors", [])}
    if not model or not max_len:
        out["errors"].append("cannot sweep: model or max_model_len unknown")
        return out
    theo = kv["kv_cache_max_concurrency"] or cap.theoretical_concurrency(kv["kv_cache_size_tokens"], max_len)
    levels = p.get("concurrency_levels") or cap.sweep_levels(p["max_concurrency"], theo)
    prompt_tokens = cap.prompt_tokens_for(max_len, p["output_tokens"], p["prompt_fraction"],
                                          cap=p.get("max_prompt_tokens"))
    out.update({"theoretical_max_concurrency": theo, "levels": levels, "prompt_tokens": prompt_tokens})
    body = sc.request_body(p["output_tokens"], p.get("reasoning_effort"),
                           dict({"ignore_eos": True, "min_tokens": p["output_tokens"]}, **(p.get("extra_body") or {})))
    local = min(max(levels), smoke_shards.SHARD_STREAMS)  # streams this process runs itself
    client = sc.make_client(endpoint, local)
    try:
        await sc.warm_up(client, local)
        spec = {"endpoint": endpoint, "model": model, "body": body}
        filler_tokens, out["prompt_calibration"] = await calibrate_filler(client, model, body)
        ctx = step_context(client, spec, metrics_urls, p["metrics_interval"], prompt_tokens, filler_tokens)
        await _sweep(p, ctx, levels, out)
    finally:
        await client.close()
    out["point"] = cap.point_summary(max_len, out["steps"], kv, restarted=p.get("restarted", False))
    return out


def run_sweep(p):
    return asyncio.run(run_sweep_async(p))
