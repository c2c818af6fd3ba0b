# -*- coding: utf-8 -*-
"""The smoke groups (vision, text, long_context, tool_calling; the full profile adds correctness, api and
tool_verifier, ``smoke_groups``) and the run that assembles ``vllm_smoke`` facts.

Groups run one after another (so their timings do not disturb each other); inside a group requests run concurrently
up to ``concurrency``. Every failure ends up as ``status: failed`` with ``error`` text; nothing here raises.
"""
from __future__ import annotations

import asyncio
import base64
import os
import time

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import client as sc
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import correctness as smoke_correctness
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import image as smoke_image
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import finalise as smoke_finalise
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import groups as smoke_groups
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import pd as smoke_pd
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import quick as smoke_quick
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import metrics as smoke_metrics
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import server as smoke_server
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import shards as smoke_shards
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import vision as smoke_vision
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import measure as sm
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import tool_validation as tv

QUICK_GROUPS = ("vision", "text", "long_context", "tool_calling")
GROUPS = QUICK_GROUPS + smoke_groups.FULL_GROUPS
PROFILES = ("quick", "full")
# Requests the correctness group sends at once per target (and parallel tool_verifier cases): vllm_smoke's default,
# which the smoke role leaves in place unless smoke_correctness_concurrency is set. Its DOCUMENTATION repeats it
# (ansible-doc reads no code); test_smoke_module.py checks that the two agree.
CORRECTNESS_CONCURRENCY = 32

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Weather forecast for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 1, "maxLength": 64, "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        }}},
    {"type": "function", "function": {
        "name": "lookup_order",
        "description": "Look up a shop order by its id.",
        "parameters": {
            "type": "object",
            "properties": {
                "order_id": {"type": "string", "minLength": 1, "maxLength": 32},
                "include_items": {"type": "boolean"},
            },
            "required": ["order_id"],
            "additionalProperties": False,
        }}},
]
TOOL_CASES = [
    ("Use the get_weather tool: 3-day forecast for Oslo in celsius.", "get_weather"),
    ("Use the lookup_order tool to look up order B-2041 including its items.", "lookup_order"),
    ("Use the get_weather tool: the forecast for Lisbon in fahrenheit for the next 5 days.", "get_weather"),
    ("Use the lookup_order tool: order A-77, without its items.", "lookup_order"),
    ("Use the get_weather tool: tomorrow's weather in Nairobi, in celsius.", "get_weather"),
    ("Use the lookup_order tool to find order ZX-900 with its items.", "lookup_order"),
]
# Tool cases of one round at least: the first-attempt rate is gated by its Wilson interval (smoke_policy), and
# below a dozen cases that interval is too wide to fail on anything but a broken parser.
QUICK_TOOL_CASES = 12
TOOL_MODES = ("stream", "non_stream")
NEEDLE = "K3-7731"
NO_IMAGE_STRINGS = ("vision: a custom image (smoke_image) came without the strings its text must contain "
                    "(smoke_image_expected_strings): a non-empty answer proves nothing, so the group is refused")
VISION_PROMPT = smoke_vision.PROMPT
FILLER = smoke_correctness.FILLER
# Two short probes (the shortest context in use, 2,048 tokens, holds the longer one with room to spare).
PROBE_REPS = (2, 8)
FILLER_TOKENS = 22  # rough token count of FILLER for typical BPE vocabularies (checked against usage afterwards)


def long_context_prompt(target_tokens, needle=None, reps=None):
    """A prompt of roughly ``target_tokens`` tokens (``reps`` filler repetitions when calibrated) with a needle in
    the middle."""
    reps = reps or max(1, int(target_tokens) // FILLER_TOKENS)
    return smoke_correctness.needle_prompt(reps, needle or NEEDLE)


def image_url(image):
    """Data URL (or pass-through URL) for the ``image`` option; None -> the shipped sample."""
    if not image:
        return "data:%s;base64,%s" % (smoke_image.SAMPLE_MIME, "".join(smoke_image.SAMPLE_PNG_B64.split()))
    if image.startswith(("http://", "https://", "data:")):
        return image
    if os.path.isfile(image):
        with open(image, "rb") as fh:
            data = base64.b64encode(fh.read()).decode("ascii")
        mime = "image/jpeg" if image.lower().endswith((".jpg", ".jpeg")) else "image/png"
        return "data:%s;base64,%s" % (mime, data)
    raise ValueError("image must be a URL, a data: URL or an existing file on the controller: %r" % image)


def _failed(error, **extra):
    out = {"status": "failed", "error": error, "retries": {}}
    out.update(extra)
    return out


def _finish(results, wall, check_error=None, **extra):
    agg = sm.aggregate(results, wall_s=wall)
    errors = list(agg.pop("errors"))
    if check_error:
        errors.insert(0, check_error)
    status = "ok" if not errors and not agg["failed_requests"] else "failed"
    out = dict(agg, status=status, error="; ".join(errors) or None, retries={})
    out.update(extra)
    return out


def _empty_content_error(results):
    for r in results:
        if r["ok"] and not r["content"].strip():
            why = "reasoning used the budget?" if r["reasoning"] else "no reasoning either"
            return "empty content (finish_reason=%s, output_tokens=%s; %s)" % (
                r.get("finish_reason"), r.get("output_tokens"), why)
    return None


async def group_text(ctx):
    n = max(1, ctx["concurrency"])
    items = smoke_quick.text_items(n, ctx["correctness_seed"])
    msgs = [[{"role": "user", "content": item["prompt"]}] for item in items]
    results, wall = await smoke_shards.run_streams(ctx["client"], ctx["spec"], msgs, n)
    verdict = smoke_quick.judge_text(items, results, ctx["judge_accuracy"], ctx["expected_served_name"])
    err = _empty_content_error(results) or smoke_quick.summary_error(verdict["problems"])
    return _finish(results, wall, err, answers=verdict)


async def group_vision(ctx):
    try:
        url = image_url(ctx["image"])
    except ValueError as exc:
        return _failed(str(exc))
    tokens = ctx["image_expected_tokens"]
    if not ctx["image"] and tokens is None:
        tokens = smoke_image.SAMPLE_REQUIRED_TOKENS
    if not tokens:
        # a non-empty answer proves nothing about a vision tower (the plan refuses this too, role_variables)
        return _failed(NO_IMAGE_STRINGS)
    msgs = [{"role": "user", "content": [{"type": "text", "text": VISION_PROMPT},
                                         {"type": "image_url", "image_url": {"url": url}}]}]
    t0 = time.perf_counter()
    res = await sc.stream_chat(ctx["client"], ctx["model"], msgs, **ctx["body"])
    wall = time.perf_counter() - t0
    check = smoke_vision.ocr_check(res["content"], tokens)
    err = _empty_content_error([res])
    if not err and res["ok"] and not check["ok"]:
        err = "vision: OCR answer misses %s (answer: %r)" % (check["missing"], res["content"][:200])
    if not err and res["ok"]:
        err = smoke_quick.summary_error(smoke_quick.response_problems("vision", VISION_PROMPT, res,
                                                                      ctx["expected_served_name"], text_only=False))
    return _finish([res], wall, err, ocr=check)


async def calibrated_reps(ctx, target):
    """Filler repetitions for a prompt of ``target`` tokens as the server counts them: two short probes'
    usage.prompt_tokens give the tokens per repetition and the chat template's overhead (a tokenizer with a small
    vocabulary spends twice the tokens of the rough estimate). None when the probes fail."""
    a, b = PROBE_REPS
    try:
        per, overhead = smoke_correctness.fit_tokens_per_rep(
            a, await smoke_groups.probe_tokens(ctx["client"], ctx, a), b,
            await smoke_groups.probe_tokens(ctx["client"], ctx, b))
    except (RuntimeError, ValueError):
        return None
    return max(1, int((target - overhead) // per))


async def group_long_context(ctx):
    max_len = ctx["max_model_len"]
    target = int(ctx["long_context_tokens"])
    if max_len:
        target = min(target, int(max_len) - int(ctx["body"]["max_tokens"]) - 512)
    if target < 1024:
        return _failed("max_model_len %s leaves no room for a long-context prompt" % max_len)
    prompt = long_context_prompt(target, NEEDLE, reps=await calibrated_reps(ctx, target))
    t0 = time.perf_counter()
    res = await sc.stream_chat(ctx["client"], ctx["model"], [{"role": "user", "content": prompt}], **ctx["body"])
    wall = time.perf_counter() - t0
    err = _empty_content_error([res])
    pt = res.get("prompt_tokens")
    if not err and res["ok"] and pt is not None and pt < 0.5 * target:
        err = "long_context: server counted only %s prompt tokens for a ~%s-token prompt" % (pt, target)
    if not err and res["ok"]:
        problems = [smoke_quick.needle_problem(res["content"], NEEDLE, pt)] if ctx["judge_accuracy"] else []
        problems += smoke_quick.response_problems("long_context", prompt, res, ctx["expected_served_name"])
        err = smoke_quick.summary_error([p for p in problems if p])
    return _finish([res], wall, err, target_prompt_tokens=target, needle_judged=ctx["judge_accuracy"],
                   needle_found=smoke_correctness.normalise_name(NEEDLE) in smoke_correctness.normalise_name(
                       res["content"]))


def tool_case_plan(modes, rounds=1, minimum=QUICK_TOOL_CASES):
    """``[(prompt, expected tool, mode)]`` of the tool_calling group: every prompt of ``TOOL_CASES`` in every mode
    of ``modes`` (stream before non_stream), repeated until a round holds at least ``minimum`` cases (an inventory
    that restricts the modes still sends that many), then ``rounds`` times over."""
    one = [(prompt, tool, mode) for prompt, tool in TOOL_CASES for mode in TOOL_MODES if mode in (modes or ())]
    if not one:
        return []
    return one * (-(-int(minimum) // len(one))) * max(1, int(rounds))


async def group_tool_calling(ctx):
    toolset = tv.ToolSet(TOOLS)
    raw = []

    def make_case(prompt, expected, stream):
        msgs = [{"role": "user", "content": prompt}]
        body = dict(ctx["body"], tools=TOOLS, tool_choice=ctx["tool_choice"])

        async def attempt():
            fn = sc.stream_chat if stream else sc.plain_chat
            res = await fn(ctx["client"], ctx["model"], msgs, **body)
            raw.append(res)
            if not res["ok"]:
                return {"status": "error", "classes": ["error"], "error": res["error"], "calls": [], "leaks": []}
            return tv.classify_turn(toolset, res["content"], res["reasoning"], res["tool_calls"], expected)

        async def case():
            out = await tv.run_with_retries_async(attempt, ctx["tool_call_retries"])
            out["mode"] = "stream" if stream else "non_stream"
            out["expected_tool"] = expected
            return out

        return case

    factories = [make_case(prompt, expected, mode == "stream")
                 for prompt, expected, mode in tool_case_plan(ctx["tool_call_modes"], ctx["tool_call_rounds"])]
    t0 = time.perf_counter()
    # all cases at once: parallel tool calls are where streamed parsers lose deltas (vllm#54701)
    cases = await sc.gather_limited(factories, max(1, len(factories)))
    wall = time.perf_counter() - t0
    summary = tv.summarise_cases(cases)
    summary["by_mode"] = {m: tv.summarise_cases([c for c in cases if c["mode"] == m]) for m in TOOL_MODES}
    agg = sm.aggregate([r for r in raw if r["stream"]], wall_s=wall)
    agg.pop("errors")
    failed = [c for c in cases if c["status"] != tv.OK]
    errors = []
    for c in failed:
        last = c["results"][-1]
        errors.append("%s/%s: %s" % (c["mode"], c["expected_tool"], (last.get("error") or last["status"])[:200]))
    if failed:
        # the contract: every case ends valid within its retries; a case that never does fails the group
        errors.insert(0, "%d of %d tool case(s) still invalid after %d retries" % (
            len(failed), len(cases), ctx["tool_call_retries"]))
    out = dict(agg, status="ok" if not failed else "failed", error="; ".join(errors[:6]) or None,
               retries=summary["retries"], tool_calls=summary)
    out["requests"] = len(raw)
    out["failed_requests"] = sum(1 for r in raw if not r["ok"])
    return out


GROUP_FUNCS = {"vision": group_vision, "text": group_text, "long_context": group_long_context,
               "tool_calling": group_tool_calling}
GROUP_FUNCS.update(smoke_groups.GROUP_FUNCS)


def effective_groups(groups, profile):
    """The groups to run: ``groups``, plus the full profile's correctness, api and tool_verifier groups."""
    names = list(groups or [])
    if profile == "full":
        names += [g for g in smoke_groups.FULL_GROUPS if g not in names]
    return [g for g in GROUPS if g in names]


def decode_metrics_urls(backends):
    """/metrics of the decode backends (PD) from the ``backends`` option."""
    return [b["url"].rstrip("/") + "/metrics" for b in backends or [] if b.get("kind") == "decode"]


def _image_url_or_none(image):
    try:
        return image_url(image)
    except ValueError:
        return None


def _context(p, endpoint, client, model, info):
    body = sc.request_body(p["max_tokens"], p.get("reasoning_effort"), p.get("extra_body"))
    return {
        "client": client, "model": model, "concurrency": int(p["concurrency"]), "body": body,
        "spec": {"endpoint": endpoint, "model": model, "body": body},
        "max_model_len": info["max_model_len"], "long_context_tokens": p["long_context_tokens"],
        "image": p.get("image"), "image_expected_tokens": p.get("image_expected_tokens"),
        "tool_call_retries": int(p["tool_call_retries"]), "tool_choice": p.get("tool_choice") or "auto",
        "tool_call_modes": list(p.get("tool_call_modes") or ("stream", "non_stream")),
        "tool_call_rounds": int(p.get("tool_call_rounds") or 1),
        "info": info, "image_url": _image_url_or_none(p.get("image")),
        "correctness_concurrency": int(p.get("correctness_concurrency") or CORRECTNESS_CONCURRENCY),
        "tool_verifier_concurrency": int(p.get("correctness_concurrency") or CORRECTNESS_CONCURRENCY),
        "correctness_seed": int(p.get("correctness_seed") or 0),
        "backends": list(p.get("backends") or []), "judge_accuracy": p.get("judge_accuracy", True) is not False,
        "expected_served_name": p.get("expected_served_name"), "expected_version": p.get("expected_version"),
        "reasoning_key": p.get("reasoning_key") or "reasoning",
        "needle_token_budget": int(p.get("needle_token_budget", 131072)),
        "previous_tool_figures": p.get("previous_tool_figures"),
    }


async def _run_groups(ctx, names, info):
    groups = {}
    for name in [g for g in GROUPS if g in names]:
        if not ctx["model"]:
            groups[name] = _failed("no model: /v1/models unavailable (%s)" % "; ".join(info["errors"]))
            continue
        try:
            groups[name] = await GROUP_FUNCS[name](ctx)
        except Exception as exc:  # noqa: BLE001 - a group failure never crashes the module
            groups[name] = _failed(sc.describe_error(exc))
    return groups


def server_facts(info, before, after, peaks, metrics_urls):
    """The ``server`` part of the facts from /version + /v1/models (``info``) and the snapshots around the run."""
    summ = smoke_metrics.summarise_snapshot(after)
    window = smoke_metrics.snapshot_delta(before, after)
    window.update(peaks)
    return {
        "version": info["version"], "models": info["models"], "max_model_len": info["max_model_len"],
        "kv_cache_size_tokens": summ["kv_cache_size_tokens"],
        "kv_cache_max_concurrency": summ["kv_cache_max_concurrency"],
        "num_gpu_blocks": summ["num_gpu_blocks"], "block_size": summ["block_size"],
        "cache_config": summ["cache_config"], "engines": summ["engines"],
        "kv_cache_usage_perc": summ["kv_cache_usage_perc_max"],
        "preemptions_total": summ["num_preemptions"], "preemptions": window.get("num_preemptions"),
        "window": window, "metrics_urls": metrics_urls,
        "errors": info["errors"] + before.get("errors", []) + after.get("errors", []),
    }


async def _measure(p, endpoint, model, info, metrics_urls):
    """Warm up, then run the groups inside the server-side window -> (groups, before, after, peaks)."""
    client = sampler = before = None
    tls = endpoint.tls
    local = min(int(p["concurrency"]), smoke_shards.SHARD_STREAMS)  # streams this process runs itself
    try:
        # pools wide enough for the tool_calling group's cases, which all go at once
        client = sc.make_client(endpoint, max(local, QUICK_TOOL_CASES))
        # before the "before" scrape, so the warm-up GETs stay out of the server-side window
        await sc.warm_up(client, local)
        before = await asyncio.to_thread(smoke_server.scrape, metrics_urls, 10.0, tls)
        sampler = smoke_server.GaugeSampler(metrics_urls, interval=p.get("metrics_interval", 0.5), tls=tls)
        sampler.start()
        groups = await _run_groups(_context(p, endpoint, client, model, info),
                                   effective_groups(p["groups"], p.get("profile")), info)
    finally:
        peaks = await sampler.stop() if sampler is not None else {}
        if client is not None:
            await client.close()
    after = await asyncio.to_thread(smoke_server.scrape, metrics_urls, 10.0, tls)
    return groups, before if before is not None else after, after, peaks


async def run_smoke_async(p):
    """Run the smoke. ``p``: the module's parameters (dict). Returns the ``vllm_smoke`` facts."""
    started = time.time()
    endpoint = smoke_server.endpoint_of(p)
    info = await asyncio.to_thread(smoke_server.server_info, endpoint)
    model = p.get("model") or info["model"]
    metrics_urls = p.get("metrics_urls") or [endpoint.root + "/metrics"]
    decode_urls = decode_metrics_urls(p.get("backends"))
    pd_before = await asyncio.to_thread(smoke_groups.pd_scrape, decode_urls, endpoint.tls)
    groups, before, after, peaks = await _measure(p, endpoint, model, info, metrics_urls)
    pd_after = await asyncio.to_thread(smoke_groups.pd_scrape, decode_urls, endpoint.tls)
    reproduction = dict(p.get("reproduction") or {})
    reproduction.setdefault("vllm_version", info["version"])
    reproduction.setdefault("model", model)
    reproduction.setdefault("max_model_len", info["max_model_len"])
    facts = {
        "base_url": endpoint.api, "model": model,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "started_epoch": int(started),
        "duration_s": round(time.time() - started, 3),
        "groups": groups, "server": server_facts(info, before, after, peaks, metrics_urls),
        "pd": _pd_facts(decode_urls, pd_before, pd_after, p),
        "reproduction": reproduction,
        "settings": {"max_tokens": p["max_tokens"], "reasoning_effort": p.get("reasoning_effort"),
                     "concurrency": p["concurrency"], "long_context_tokens": p["long_context_tokens"],
                     "tool_call_retries": p["tool_call_retries"], "groups": list(p["groups"]),
                     "profile": p.get("profile") or "quick",
                     "correctness_concurrency": p.get("correctness_concurrency"),
                     "judge_accuracy": p.get("judge_accuracy", True) is not False},
    }
    return smoke_finalise.finalise(facts, reproduction=p.get("reproduction"), fail_policy=p.get("fail_policy"))


def _pd_facts(decode_urls, before, after, p):
    """The prefill/decode verdict (None without decode backends)."""
    if not decode_urls:
        return None
    limits = p.get("pd_limits") or {}
    verdict = smoke_pd.judge_pd(before, after,
                                float(limits.get("max_recompute_fraction", smoke_pd.DEFAULT_MAX_RECOMPUTE_FRACTION)),
                                int(limits.get("max_kv_transfer_failures", 0)))
    missing = [u for u in decode_urls if u not in before and u not in after]
    verdict["errors"] += ["%s: /metrics unreadable before and after the window" % u for u in missing]
    verdict["decode_metrics_urls"] = list(decode_urls)
    return verdict


def run_smoke(p):
    return asyncio.run(run_smoke_async(p))
