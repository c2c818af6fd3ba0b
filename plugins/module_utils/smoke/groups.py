# -*- coding: utf-8 -*-
"""The groups of the full smoke profile: ``correctness`` (checkable answers under load and the needle, through the
endpoint and directly against every backend), ``api`` (API behaviour) and ``tool_verifier`` (tool calls at
vendor-verifier scale), plus the prefill/decode window (``pd_scrape``). Requests go through ``smoke_client``; the
judgements are ``smoke_correctness``, ``smoke_api``, ``smoke_pd`` and ``smoke_verifier``. Nothing here raises for a
server fault: it becomes a verdict.

A group's ``status`` is ``failed`` only when requests failed (transport, HTTP); wrong answers, API behaviour,
verifier figures and PD are verdicts of their own that the policy gates (``smoke_gates``), so each fault fails the
gate that targets it and no other.
"""
from __future__ import annotations

import asyncio
import time

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import api as smoke_api
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import client as sc
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import correctness as corr
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import image as smoke_image
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import pd as smoke_pd
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import server as smoke_server
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import toolgroup as smoke_toolgroup
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import vision as smoke_vision

FULL_GROUPS = ("correctness", "api", "tool_verifier")
ENDPOINT = "endpoint"
CALIBRATION_REPS = (40, 120)
NOT_JUDGED = "accuracy not judged: the plan marks this model's weights as not meaningful (judge_accuracy: false)"


def _answer_text(res):
    return res["content"] if res["ok"] else ""


def _messages(item, image_url):
    if item["kind"] == corr.OCR:
        return [{"role": "user", "content": [{"type": "text", "text": smoke_vision.PROMPT},
                                             {"type": "image_url", "image_url": {"url": image_url}}]}]
    return [{"role": "user", "content": item["prompt"]}]


async def _suite(client, ctx, items):
    """Send ``ctx['correctness_concurrency']`` requests at once (cycling over ``items``) -> per request
    ``{"id", "ok", "value", "error"}``."""
    n = max(1, ctx["correctness_concurrency"])
    order = [items[i % len(items)] for i in range(n)]
    body = dict(ctx["body"], extra_body=dict(ctx["body"].get("extra_body") or {}, temperature=0))

    def factory(item):
        async def one():
            res = await sc.stream_chat(client, ctx["model"], _messages(item, ctx["image_url"]), **body)
            verdict = corr.judge(item, _answer_text(res))
            return {"id": item["id"], "ok": verdict["ok"] and res["ok"], "value": verdict["value"] if res["ok"]
                    else None, "error": res["error"]}
        return one

    return await asyncio.gather(*(factory(item)() for item in order))


async def probe_tokens(client, ctx, reps):
    """usage.prompt_tokens of a prompt of ``reps`` filler repetitions (raises RuntimeError when there is none)."""
    body = dict(ctx["body"], max_tokens=1)
    res = await sc.plain_chat(client, ctx["model"], [{"role": "user", "content": corr.FILLER * reps}], **body)
    if not res["ok"] or not res.get("prompt_tokens"):
        raise RuntimeError("needle calibration probe failed: %s" % (res["error"] or "no usage.prompt_tokens"))
    return res["prompt_tokens"]


async def _needle(client, ctx, needle):
    """Calibrate from usage.prompt_tokens, then ask for the needle -> :func:`smoke_correctness.judge_needle`."""
    context = corr.effective_context(ctx["max_model_len"], ctx["needle_token_budget"])
    if not context:
        return {"found": False, "fraction": None, "ok": False, "error": "max_model_len unknown: no needle test"}
    try:
        a, b = CALIBRATION_REPS
        per, overhead = corr.fit_tokens_per_rep(a, await probe_tokens(client, ctx, a), b,
                                                await probe_tokens(client, ctx, b))
    except (RuntimeError, ValueError) as exc:
        return {"found": False, "fraction": None, "ok": False, "error": str(exc)}
    reps = corr.needle_reps(context, per, overhead)
    body = dict(ctx["body"], max_tokens=corr.NEEDLE_ANSWER_TOKENS,
                extra_body=dict(ctx["body"].get("extra_body") or {}, temperature=0))
    res = await sc.stream_chat(client, ctx["model"], [{"role": "user", "content": corr.needle_prompt(reps, needle)}],
                               **body)
    if not res["ok"]:
        return {"found": False, "fraction": None, "ok": False, "error": "needle request failed: %s" % res["error"]}
    out = corr.judge_needle(res["content"], needle, res.get("prompt_tokens"), context)
    out.update(context=context, prompt_tokens=res.get("prompt_tokens"), tokens_per_rep=round(per, 4))
    return out


async def _target(client, ctx, items, needle):
    t0 = time.perf_counter()
    answers = await _suite(client, ctx, items)
    needle_verdict = await _needle(client, ctx, needle)
    return {"answers": answers, "needle": needle_verdict, "wall_s": round(time.perf_counter() - t0, 3),
            "failed_requests": sum(1 for a in answers if a["error"])}


def direct_backends(backends):
    """Backends the suite runs against directly. A PD decode instance is left out: asked directly it prefills the
    prompt itself, which the prefill/decode verdict would count as recompute; its answers are judged through the
    router."""
    return [b for b in backends if b.get("kind") != "decode"]


def _clients(ctx):
    out = [(ENDPOINT, ctx["client"], False)]
    for backend in direct_backends(ctx["backends"]):
        client = sc.make_client(ctx["spec"]["endpoint"].backend(backend["url"]), ctx["correctness_concurrency"])
        out.append((backend["url"], client, True))
    return out


def summarise_targets(raw, judge_accuracy):
    """Per target ``accuracy``, ``needle`` and (backends) ``agreement`` with the endpoint's answers."""
    reference = {i: a["value"] for i, a in enumerate(raw[ENDPOINT]["answers"])}
    out = {}
    for name, r in raw.items():
        entry = {"requests": len(r["answers"]), "failed_requests": r["failed_requests"], "wall_s": r["wall_s"]}
        if judge_accuracy:
            entry["accuracy"] = corr.accuracy(r["answers"])
            entry["needle"] = r["needle"]
            entry["wrong"] = sorted({a["id"] for a in r["answers"] if not a["ok"]})
        if name != ENDPOINT:
            entry["agreement"] = corr.agreement(reference, {i: a["value"] for i, a in enumerate(r["answers"])})
        out[name] = entry
    return out


async def group_correctness(ctx):
    items = corr.build_prompts(seed=ctx["correctness_seed"], ocr_tokens=smoke_image.SAMPLE_REQUIRED_TOKENS
                               if not ctx["image"] else None)
    needle = "K3-%04d" % (7000 + ctx["correctness_seed"] % 1000)
    clients = _clients(ctx)
    raw = {}
    try:
        results = await asyncio.gather(*(_target(c, ctx, items, needle) for _n, c, _own in clients))
        raw = {name: r for (name, _c, _own), r in zip(clients, results)}
    finally:
        for _name, client, own in clients:
            if own:
                await client.close()
    targets = summarise_targets(raw, ctx["judge_accuracy"])
    failed = sum(t["failed_requests"] for t in targets.values())
    errors = sorted({a["error"] for r in raw.values() for a in r["answers"] if a["error"]})[:5]
    return {"status": "failed" if failed else "ok", "error": "; ".join(errors) or None, "retries": {},
            "requests": sum(t["requests"] for t in targets.values()), "failed_requests": failed,
            "wall_s": max([t["wall_s"] for t in targets.values()] or [None]),
            "correctness": {"judged": bool(ctx["judge_accuracy"]), "note": None if ctx["judge_accuracy"]
                            else NOT_JUDGED, "concurrency": ctx["correctness_concurrency"], "prompts": len(items),
                            "targets": targets}}


async def _reasoning_check(ctx):
    body = dict(ctx["body"])
    body.pop("reasoning_effort", None)  # thinking on: the server's default effort
    res = await sc.stream_chat(ctx["client"], ctx["model"], [{"role": "user", "content": "What is 6 * 7?"}], **body)
    if not res["ok"]:
        return {"ok": False, "error": "reasoning request failed: %s" % res["error"]}
    return smoke_api.judge_reasoning_split(res["content"], res["reasoning"], res.get("reasoning_keys"),
                                           ctx["reasoning_key"])


async def _prompt_tokens_check(ctx):
    prompt = corr.FILLER * 20
    res = await sc.plain_chat(ctx["client"], ctx["model"], [{"role": "user", "content": prompt}],
                              **dict(ctx["body"], max_tokens=1))
    if not res["ok"]:
        return {"ok": False, "error": "prompt-token request failed: %s" % res["error"]}
    return smoke_api.judge_prompt_tokens(res.get("prompt_tokens"), len(prompt))


async def _invalid_parameter_check(ctx):
    try:
        await ctx["client"].chat.completions.create(model=ctx["model"], max_tokens=-1,
                                                    messages=[{"role": "user", "content": "hi"}])
        status = 200
    except Exception as exc:  # noqa: BLE001 - the status is the verdict
        status = getattr(exc, "status_code", None)
    return smoke_api.judge_invalid_parameter(status)


def _identity_checks(ctx):
    """Served name and /version of the endpoint and of every backend (a router may not serve /version)."""
    infos = {ENDPOINT: ctx["info"]}
    for backend in ctx["backends"]:
        infos[backend["url"]] = smoke_server.server_info(ctx["spec"]["endpoint"].backend(backend["url"]))
    names = {n: smoke_api.judge_served_name(i["models"], ctx["expected_served_name"]) for n, i in infos.items()}
    versioned = {n: i for n, i in infos.items() if n != ENDPOINT or not ctx["backends"]}
    versions = {n: smoke_api.judge_version(i["version"], ctx["expected_version"]) for n, i in versioned.items()}
    return names, versions


async def group_api(ctx):
    names, versions = await asyncio.to_thread(_identity_checks, ctx)
    checks = {"reasoning_split": await _reasoning_check(ctx), "prompt_tokens": await _prompt_tokens_check(ctx),
              "invalid_parameter": await _invalid_parameter_check(ctx)}
    for target, verdict in names.items():
        checks["served_name@%s" % target] = verdict
    for target, verdict in versions.items():
        checks["version@%s" % target] = verdict
    errors = ["%s: %s" % (k, v["error"]) for k, v in sorted(checks.items()) if not v["ok"]]
    return {"status": "ok", "error": None, "retries": {}, "api": {"checks": checks, "errors": errors}}


async def group_tool_verifier(ctx):
    return await smoke_toolgroup.run(ctx)


GROUP_FUNCS = {"correctness": group_correctness, "api": group_api, "tool_verifier": group_tool_verifier}


def pd_scrape(urls, tls=smoke_server.DEFAULT_TLS, timeout=10.0):
    """``{url: pd_counters}`` of the decode instances' /metrics; an unreadable one is left out (judged missing)."""
    out = {}
    for url in urls or []:
        try:
            status, text = smoke_server.http_get(url, timeout=timeout, tls=tls)
            if status == 200:
                out[url] = smoke_pd.pd_counters(text)
        except Exception:  # noqa: BLE001 - a missing scrape is reported by judge_pd
            continue
    return out
