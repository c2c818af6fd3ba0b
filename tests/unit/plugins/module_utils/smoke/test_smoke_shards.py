"""Streams spread over client processes above SHARD_STREAMS: the split, and a real sharded run against
the fake vLLM server (per_shard lowered so a few streams already take two processes)."""
import asyncio

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import client as sc
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import measure as sm
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import server as smoke_server
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import shards as ss

from tests.unit.plugins.module_utils.smoke.test_smoke_fake import FakeVLLM


@pytest.mark.parametrize("requests,concurrency,per,expected", [
    (4, 4, 128, [([0, 1, 2, 3], 4)]),
    (256, 256, 128, [(list(range(0, 256, 2)), 128), (list(range(1, 256, 2)), 128)]),
    (5, 5, 2, [([0, 3], 2), ([1, 4], 2), ([2], 1)]),
    (2, 9, 2, [([0], 5), ([1], 4)]),              # never more processes than requests
    (512, 512, 128, [(list(range(i, 512, 4)), 128) for i in range(4)]),
    (10, 129, 128, [(list(range(0, 10, 2)), 65), (list(range(1, 10, 2)), 64)]),
])
def test_plan_shards(requests, concurrency, per, expected):
    assert ss.plan_shards(requests, concurrency, per) == expected


def _run(f, n, concurrency, per_shard, api_key=None):
    body = sc.request_body(4, None, {"ignore_eos": True})
    endpoint = smoke_server.Endpoint.at(f.base_url, api_key, 20.0)
    spec = {"endpoint": endpoint, "model": "m", "body": body}
    msgs = [[{"role": "user", "content": "request %d" % i}] for i in range(n)]

    async def go():
        client = sc.make_client(endpoint, 2)
        try:
            return await ss.run_streams(client, spec, msgs, concurrency, per_shard=per_shard)
        finally:
            await client.close()
    return asyncio.run(go())


def test_sharded_run_returns_every_result_in_request_order():
    with FakeVLLM(ttft=0.05, itl=0.01, tokens=4, api_key="k-secret") as f:
        results, wall = _run(f, 5, 5, 2, api_key="k-secret")
        prompts = [r["messages"][0]["content"] for r in f.requests]
    assert sorted(prompts) == ["request %d" % i for i in range(5)]
    assert [r["ok"] for r in results] == [True] * 5
    assert all(r["ttft_s"] >= 0.05 and r["output_tokens"] == 4 + 2 for r in results)
    assert wall >= max(r["e2e_s"] for r in results)
    agg = sm.aggregate(results, wall)
    assert agg["failed_requests"] == 0 and agg["output_tokens"] == 30


def test_in_process_below_the_threshold():
    with FakeVLLM(tokens=2) as f:
        results, _wall = _run(f, 3, 3, 128)
    assert [r["ok"] for r in results] == [True] * 3


def test_a_broken_shard_gives_failed_results_not_an_exception():
    with FakeVLLM() as f:
        base = f.base_url
    spec = {"endpoint": smoke_server.Endpoint.at(base, None, 2.0, (True, "/nonexistent/ca.pem")), "model": "m",
            "body": {"max_tokens": 2}}
    results, wall = asyncio.run(ss.run_sharded(spec, [[{"role": "user", "content": "x"}]] * 3, 3, per_shard=2))
    assert len(results) == 3 and not any(r["ok"] for r in results) and wall == 0.0
    assert all(r["error"].startswith("client process failed (rc 1): ") for r in results)


def test_a_client_process_that_cannot_start_gives_failed_results(monkeypatch, tmp_path):
    monkeypatch.setattr(ss.sys, "executable", str(tmp_path / "no-python"))
    spec = {"endpoint": smoke_server.Endpoint.at("http://127.0.0.1:9/v1", None, 2.0), "model": "m",
            "body": {"max_tokens": 2}}
    results, wall = asyncio.run(ss.run_sharded(spec, [[{"role": "user", "content": "x"}]] * 4, 4, per_shard=2))
    assert wall == 0.0 and [r["ok"] for r in results] == [False] * 4
    assert results[0]["error"] == "client process could not be started (%s)" % (tmp_path / "no-python")
