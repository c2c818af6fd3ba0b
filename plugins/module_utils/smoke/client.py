# -*- coding: utf-8 -*-
"""Measuring client for vLLM's OpenAI-compatible API (openai SDK, asyncio). Used by the ``vllm_smoke`` and
``vllm_capacity_step`` modules and by ``benchmarks/smoke_client_overhead.py``.

The figures (TTFT, ITL, E2E, token counts; definitions in ``smoke_measure``) come from the SSE events
(``smoke_sse``) with one ``perf_counter()`` per socket read. The SDK's own retries are off (``max_retries=0``) so
that timings are honest; errors become results, never raise.

How the client keeps its own overhead out of the figures (measured in ``benchmarks/smoke_client_overhead.py``):

- The SDK sends the request (auth, body, HTTP errors -> ``APIStatusError``), but the streamed body is read through
  ``with_streaming_response`` and its SSE events are decoded by ``smoke_sse`` into plain dicts; the timestamp
  is taken once per socket read, before any parsing. The SDK's per-chunk pydantic ``ChatCompletionChunk``
  construction cost ~0.2 ms per chunk, which at 64+ streams queued every chunk behind the others' parsing.
- ``warm_up`` resolves the SDK's lazily imported resources and opens the keep-alive connections the run will use
  (``concurrency`` of them), so first-request costs (imports, connection set-up) are not inside a measured TTFT.
"""
from __future__ import annotations

import asyncio
import contextvars
import ssl
import time

try:
    import openai
    from openai import AsyncOpenAI

    HAS_OPENAI = True
    OPENAI_IMPORT_ERROR = None
except ImportError as exc:  # pragma: no cover - exercised only without openai
    HAS_OPENAI = False
    OPENAI_IMPORT_ERROR = exc

try:  # openai 3.x ships httpx2, 1.x/2.x httpx
    import httpx2 as _httpx
except ImportError:  # pragma: no cover
    try:
        import httpx as _httpx
    except ImportError:
        _httpx = None

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import measure as sm
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import server as smoke_server
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import sse
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import tool_validation as tv


# Connections per httpx pool: httpcore's pool scans all of its connections and queued requests on every
# acquire/release, so one pool of 256 connections costs ~1 ms of CPU per request start and end; several smaller pools
# behind one round-robin transport keep that scan short.
POOL_SHARD_SIZE = 16

# Requests allowed between create() and "body written" at the same time (see ``_SendGate``).
SEND_GATE_WIDTH = 4

# The release function of the current request's send gate (see ``stream_chat``), per asyncio task.
_SEND_RELEASE = contextvars.ContextVar("kimi_k3_smoke_send_release", default=None)


async def _trace(name, info):
    """httpcore ``trace`` extension: the request body is on the socket -> let the next request start sending."""
    if name.endswith("send_request_body.complete") or name.endswith("send_request_body.failed"):
        release = _SEND_RELEASE.get()
        if release is not None:
            release()


async def _install_trace(request):
    request.extensions["trace"] = _trace


if _httpx is not None:
    class _ShardedTransport(_httpx.AsyncBaseTransport):
        """Round-robin over several connection pools (each a plain ``AsyncHTTPTransport``)."""

        def __init__(self, shards):
            self._shards = list(shards)
            self._next = 0

        async def handle_async_request(self, request):
            shard = self._shards[self._next]
            self._next = (self._next + 1) % len(self._shards)
            return await shard.handle_async_request(request)

        async def aclose(self):
            for shard in self._shards:
                await shard.aclose()


def _ssl_context(validate_certs=True, ca_path=None):
    """What httpx's ``verify`` gets: an SSL context checking against the system bundle (or only the PEM file
    ``ca_path``), or no check at all with ``validate_certs`` false."""
    if not validate_certs:
        return False
    if ca_path:
        return ssl.create_default_context(cafile=ca_path)
    return _httpx.create_ssl_context()  # one for all shards (loading the CA bundle takes ~80 ms)


def make_client(endpoint, concurrency=16):
    """AsyncOpenAI for an ``smoke_server.Endpoint`` (its base URL, token, timeout and TLS settings) with
    ``max_retries=0`` and connection pools sized to ``concurrency``.

    The pools are split into shards of ``POOL_SHARD_SIZE`` connections (round-robin), every request carries an
    httpcore trace hook that opens the client's send gate once its body is written, and the client gets a
    ``_smoke_send_gate`` lock used by ``stream_chat``/``plain_chat``.
    """
    timeout, tls = endpoint.timeout, endpoint.tls
    kwargs = {"base_url": endpoint.api, "api_key": endpoint.api_key or "EMPTY", "max_retries": 0,
              "timeout": openai.Timeout(float(timeout), connect=min(10.0, float(timeout)))}
    gate = False
    if _httpx is not None and hasattr(openai, "DefaultAsyncHttpxClient"):
        n = max(int(concurrency), 1)
        shards = max(1, -(-n // POOL_SHARD_SIZE))
        per = -(-n // shards)
        verify = _ssl_context(*(tls or smoke_server.DEFAULT_TLS))
        transports = [_httpx.AsyncHTTPTransport(verify=verify,
                                                limits=_httpx.Limits(max_connections=n + 4,
                                                                     max_keepalive_connections=per + 4))
                      for _shard in range(shards)]
        kwargs["http_client"] = openai.DefaultAsyncHttpxClient(
            transport=transports[0] if shards == 1 else _ShardedTransport(transports),
            event_hooks={"request": [_install_trace]})
        gate = True
    client = AsyncOpenAI(**kwargs)
    client._smoke_send_gate = asyncio.Semaphore(SEND_GATE_WIDTH) if gate else None
    return client


class _SendGate(object):
    """Lets at most ``SEND_GATE_WIDTH`` requests at a time go from ``create()`` to "body written".

    In one event loop, N simultaneous ``create()`` calls otherwise interleave at every await: request k's headers go
    out, then every other request's set-up runs (the SDK's ~2 ms of CPU each) before k's body follows, so with 256
    streams the bodies reached the server hundreds of ms after the clock had started. Width 1 serialises the sends
    completely, but each hand-over waits for an event-loop pass, and at 256 streams on one client core the gate
    itself became the limit (requests waited 0.65-0.94 s for it on average and the client kept fewer streams in
    flight: 2,600-2,900 tok/s where AIPerf drove 3,000). Width 4 (default) keeps TTFT within 0.9-2.6 % of the
    server's at 256 and sustains 2,970-3,140 tok/s (benchmarks/smoke_client_overhead.py and smoke_vs_aiperf.py,
    ``--gate-width``). Waiting for the gate happens before the clock starts and is reported separately as
    ``client_queue_s``.
    """

    def __init__(self, client):
        self.lock = getattr(client, "_smoke_send_gate", None)
        self.held = False
        self.token = None
        self.queue_s = 0.0

    async def __aenter__(self):
        if self.lock is not None:
            q0 = time.perf_counter()
            await self.lock.acquire()
            self.queue_s = time.perf_counter() - q0
            self.held = True
            self.token = _SEND_RELEASE.set(self.release)
        return self

    def release(self):
        if self.held:
            self.held = False
            self.lock.release()

    async def __aexit__(self, *exc):
        self.release()
        if self.token is not None:
            _SEND_RELEASE.reset(self.token)
            self.token = None
        return False


_SDK_WARM = []
_MOCK_SSE = (
    b'data: {"id":"w","object":"chat.completion.chunk","created":0,"model":"w","choices":[{"index":0,"delta":'
    b'{"role":"assistant","content":"w"},"finish_reason":"length"}]}\n\n'
    b'data: {"id":"w","object":"chat.completion.chunk","created":0,"model":"w","choices":[],"usage":'
    b'{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}\n\ndata: [DONE]\n\n')
_MOCK_JSON = (
    b'{"id":"w","object":"chat.completion","created":0,"model":"w","choices":[{"index":0,"message":'
    b'{"role":"assistant","content":"w","tool_calls":[]},"finish_reason":"length"}],'
    b'"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}')


async def _warm_sdk_paths():
    """Run ``stream_chat``/``plain_chat`` once per process against an in-memory transport (``httpx.MockTransport``):
    the SDK's first ``create()`` costs ~0.2 s of one-off work (lazy imports, request-transform type caches) that
    otherwise lands in the first measured request. Nothing goes over the network."""
    if _SDK_WARM or _httpx is None or not hasattr(_httpx, "MockTransport"):
        return
    _SDK_WARM.append(True)

    def handler(request):
        if b'"stream":true' in request.content.replace(b" ", b""):
            return _httpx.Response(200, headers={"content-type": "text/event-stream"}, content=_MOCK_SSE)
        return _httpx.Response(200, headers={"content-type": "application/json"}, content=_MOCK_JSON)

    mock = AsyncOpenAI(base_url="http://warm-up.invalid/v1", api_key="EMPTY", max_retries=0,
                       http_client=openai.DefaultAsyncHttpxClient(transport=_httpx.MockTransport(handler)))
    try:
        msgs = [{"role": "user", "content": "warm-up"}]
        await stream_chat(mock, "w", msgs, **request_body(1, "low", {"ignore_eos": True}))
        await plain_chat(mock, "w", msgs, **request_body(1, "low"))
    except Exception:  # noqa: BLE001 - best effort
        pass
    finally:
        await mock.close()


async def warm_up(client, connections=1):
    """Take first-request costs out of the measured window; errors are ignored (the requests will report them).

    - resolves ``client.chat.completions.with_streaming_response`` and runs the request paths once in memory
      (``_warm_sdk_paths``): the SDK's first ``create()`` in a process costs ~0.2 s, which would otherwise land
      in the first measured TTFT;
    - opens ``connections`` keep-alive connections with concurrent untimed ``GET /v1/models`` (the pool of
      ``make_client(concurrency=...)`` keeps them), so connection set-up is not inside the streams' TTFT. No chat
      request is sent, so the server's request counters and histograms see only the measured requests.
    """
    _resource = client.chat.completions.with_streaming_response
    await _warm_sdk_paths()
    n = max(1, int(connections or 1))

    async def one_get():
        try:
            await client.models.list()
        except Exception:  # noqa: BLE001
            pass

    await asyncio.gather(*(one_get() for _conn in range(n)))


async def gather_limited(factories, concurrency):
    """Await every factory's coroutine with at most ``concurrency`` running at once, results in order."""
    sem = asyncio.Semaphore(max(1, int(concurrency)))

    async def one(factory):
        async with sem:
            return await factory()

    return await asyncio.gather(*(one(f) for f in factories))


def describe_error(exc):
    """Short, secret-free text for an SDK/transport exception."""
    if HAS_OPENAI and isinstance(exc, openai.APIStatusError):
        body = exc.body if isinstance(exc.body, (str, dict)) else None
        msg = body.get("message") if isinstance(body, dict) else body
        return "HTTP %s: %s" % (exc.status_code, (msg or exc.message or "")[:400])
    if HAS_OPENAI and isinstance(exc, openai.APITimeoutError):
        return "timeout: %s" % exc
    if HAS_OPENAI and isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        return "connection error: %s%s" % (exc, (" (%s)" % cause) if cause else "")
    # the streamed body is read by this module, so transport errors while streaming arrive as httpx exceptions
    if _httpx is not None and isinstance(exc, _httpx.TimeoutException):
        return "timeout: %s: %s" % (type(exc).__name__, str(exc)[:400])
    if _httpx is not None and isinstance(exc, _httpx.TransportError):
        return "connection error: %s: %s" % (type(exc).__name__, str(exc)[:400])
    return "%s: %s" % (type(exc).__name__, str(exc)[:400])


def _reasoning_of(obj):
    if obj is None:
        return None
    r = getattr(obj, "reasoning", None)
    if not r:
        r = getattr(obj, "reasoning_content", None)
    if not r and getattr(obj, "model_extra", None):
        r = obj.model_extra.get("reasoning") or obj.model_extra.get("reasoning_content")
    return r or None


def request_body(max_tokens, reasoning_effort=None, extra_body=None, tools=None, tool_choice=None):
    """Keyword arguments for ``chat.completions.create`` shared by every request."""
    kw = {"max_tokens": int(max_tokens)}
    if reasoning_effort:
        kw["reasoning_effort"] = reasoning_effort
    if extra_body:
        kw["extra_body"] = dict(extra_body)
    if tools:
        kw["tools"] = tools
        kw["tool_choice"] = tool_choice or "auto"
    return kw


async def stream_chat(client, model, messages, **kw):
    """One streaming chat request. Returns a result dict (``ok`` False with ``error`` on any failure).

    The body is read as raw bytes; ``perf_counter()`` is taken right after each read returns and applies to every
    SSE event completed by that read (``smoke_sse``); the figures come from those events (``smoke_measure``).
    """
    create = client.chat.completions.with_streaming_response.create  # resolved (lazy imports) before the clock
    gate = _SendGate(client)
    await gate.__aenter__()
    events = []
    error = None
    t0 = time.perf_counter()
    try:
        async with create(model=model, messages=messages, stream=True, stream_options={"include_usage": True},
                          **kw) as response:
            gate.release()  # response headers are in, so the body is out (in case the trace hook did not fire)
            await _read_events(response.http_response, events)
    except Exception as exc:  # noqa: BLE001 - reported, never raised
        error = describe_error(exc)
    finally:
        await gate.__aexit__(None, None, None)
    res = sm.measure_stream(t0, events, end=time.perf_counter(), error=error)
    res["client_queue_s"] = gate.queue_s
    return res


async def _read_events(http, events):
    """Append the body's events (with their read times) to ``events``, to the end of the body (so the connection can
    be reused)."""
    # raw body reads (two async-generator layers fewer per chunk) unless the body is content-encoded
    body_iter = http.aiter_bytes() if http.headers.get("content-encoding", "identity") != "identity" \
        else http.aiter_raw()
    decoder = sse.SSEDecoder()
    async for raw in body_iter:
        now = time.perf_counter()
        events.extend(decoder.feed(raw, now))
    events.extend(decoder.close(time.perf_counter()))


async def plain_chat(client, model, messages, **kw):
    """One non-streaming chat request (same result shape; no TTFT/ITL)."""
    res = sm.new_result(False)
    create = client.chat.completions.create
    async with _SendGate(client) as gate:
        res["client_queue_s"] = gate.queue_s
        t0 = time.perf_counter()
        try:
            resp = await create(model=model, messages=messages, stream=False, **kw)
            res["e2e_s"] = time.perf_counter() - t0
        except Exception as exc:  # noqa: BLE001
            resp = exc
    if isinstance(resp, Exception):
        res["error"] = describe_error(resp)
        res["e2e_s"] = time.perf_counter() - t0
        return res
    try:
        res["model"] = getattr(resp, "model", None)
        if resp.usage is not None:
            res["prompt_tokens"] = resp.usage.prompt_tokens
            res["output_tokens"] = resp.usage.completion_tokens
        if resp.choices:
            msg = resp.choices[0].message
            res["finish_reason"] = resp.choices[0].finish_reason
            res["content"] = msg.content or ""
            res["reasoning"] = _reasoning_of(msg) or ""
            res["tool_calls"] = tv.normalise_tool_calls(msg.tool_calls)
        res["ok"] = True
    except Exception as exc:  # noqa: BLE001
        res["error"] = describe_error(exc)
        res["e2e_s"] = time.perf_counter() - t0
    return res
