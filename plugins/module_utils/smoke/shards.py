# -*- coding: utf-8 -*-
"""Many simultaneous streams: in this process up to ``SHARD_STREAMS``, above that spread over client processes.

One asyncio process cannot use more than one core, and at a few hundred streams the client's own work (SDK request
set-up, reading and decoding the chunks) queues chunks behind each other and inflates the measured TTFT/ITL
(llm-serving-measurement.md §8.3-8.4; GuideLLM, AIPerf and inference-perf shard over processes too). Above
``SHARD_STREAMS`` streams, ``run_streams`` starts ``ceil(streams / SHARD_STREAMS)`` fresh Python processes (this
module run with ``-m``, the parent's ``sys.path`` as ``PYTHONPATH`` so the collection imports the same way, also from
an AnsiballZ payload). Each gets its job on stdin (the API key never appears in a process list or environment), builds
its own client, warms it up (connections opened, SDK paths run once) and answers ``ready``; when every shard is
ready the parent sends ``go`` to all of them, so the streams start together and set-up costs stay outside the
clock. Each shard returns its request results and its wall time as JSON on stdout; the step's wall time is the
longest shard's.
"""
from __future__ import annotations

import asyncio
import functools
import json
import os
import sys
import time

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import client as sc
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import measure as sm
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import server as smoke_server

# Streams one client process handles; above it the streams are shared out over several processes.
SHARD_STREAMS = 128


def plan_shards(n_requests, concurrency, per_shard=SHARD_STREAMS):
    """``[(request indexes, concurrency)]`` per client process: ``ceil(concurrency / per_shard)`` shards, requests
    dealt round-robin, the concurrency split as evenly as possible."""
    k = max(1, -(-int(concurrency) // max(1, int(per_shard))))
    k = min(k, max(1, int(n_requests)))
    base, extra = divmod(int(concurrency), k)
    return [(list(range(i, int(n_requests), k)), base + (1 if i < extra else 0)) for i in range(k)]


async def run_local(client, model, body, messages_list, concurrency):
    """The requests in this process, at most ``concurrency`` at a time -> (results, wall_s)."""
    factories = [functools.partial(sc.stream_chat, client, model, msgs, **body) for msgs in messages_list]
    t0 = time.perf_counter()
    results = await sc.gather_limited(factories, concurrency)
    return list(results), time.perf_counter() - t0


def _failed_results(n, error):
    out = []
    for _req in range(n):
        res = sm.new_result(True)
        res["error"] = error
        out.append(res)
    return out


async def _start(job):
    """A client process with its job on stdin -> (process, ready); (None, False) when it cannot be started."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", __name__, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env)
    except OSError:
        return None, False
    try:
        proc.stdin.write(json.dumps(job).encode() + b"\n")
        await proc.stdin.drain()
        ready = await proc.stdout.readline()
    except (BrokenPipeError, ConnectionResetError):
        ready = b""
    return proc, ready.strip() == b"ready"


async def _finish(proc, ready, n):
    """One shard's (results, wall_s) once it was told to go; a broken shard gives failed results, never raises."""
    if proc is None:
        return _failed_results(n, "client process could not be started (%s)" % sys.executable), 0.0
    out, err = await proc.communicate()
    try:
        data = json.loads(out) if ready and proc.returncode == 0 else None
    except ValueError:
        data = None
    if not data:
        why = (err or b"").decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        return _failed_results(n, "client process failed (rc %s): %s" % (proc.returncode, why[0][:300])), 0.0
    return data["results"], data["wall_s"]


async def run_sharded(spec, messages_list, concurrency, per_shard=SHARD_STREAMS):
    """The requests spread over client processes (see the module doc) -> (results in request order, wall_s)."""
    shards = plan_shards(len(messages_list), concurrency, per_shard)
    started = await asyncio.gather(*(_start(dict(spec, messages=[messages_list[i] for i in idx], concurrency=conc))
                                     for idx, conc in shards))
    for proc, ready in started:
        if ready:
            proc.stdin.write(b"go\n")
    done = await asyncio.gather(*(_finish(proc, ready, len(idx)) for (proc, ready), (idx, _c)
                                  in zip(started, shards)))
    results = [None] * len(messages_list)
    for (idx, _conc), (res, _wall) in zip(shards, done):
        for i, r in zip(idx, res):
            results[i] = r
    return results, max(wall for _res, wall in done)


async def run_streams(client, spec, messages_list, concurrency, per_shard=SHARD_STREAMS):
    """Stream every request of ``messages_list``, ``concurrency`` at a time -> (results, wall_s).

    ``spec``: ``endpoint`` (``smoke_server.Endpoint``), ``model``, ``body`` (what a client process needs to
    build its own client); ``client`` (already warmed up) serves the in-process case."""
    if int(concurrency) <= per_shard:
        return await run_local(client, spec["model"], spec["body"], messages_list, concurrency)
    return await run_sharded(spec, messages_list, concurrency, per_shard)


async def _serve(job):
    """A client process: build and warm up the client, say ``ready``, wait for ``go``, run, print the results."""
    client = sc.make_client(smoke_server.Endpoint.from_json(job["endpoint"]), job["concurrency"])
    try:
        await sc.warm_up(client, job["concurrency"])
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        if (await asyncio.to_thread(sys.stdin.readline)).strip() != "go":
            return
        results, wall = await run_local(client, job["model"], job["body"], job["messages"], job["concurrency"])
    finally:
        await client.close()
    sys.stdout.write(json.dumps({"results": results, "wall_s": wall}))
    sys.stdout.flush()


def main():
    asyncio.run(_serve(json.loads(sys.stdin.readline())))


if __name__ == "__main__":
    main()
