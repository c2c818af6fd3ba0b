"""A tiny fake of vLLM's OpenAI-compatible server (stdlib), used by the smoke and capacity unit tests.

Written from the documented formats (kimi-k3-on-vllm.md §13, llm-serving-measurement.md §6): /version,
/v1/models (with max_model_len), /metrics (Prometheus text with vllm:cache_config_info and counters), and
/v1/chat/completions (streaming SSE with a role-only first chunk, reasoning deltas, content deltas, one-delta tool
calls like K3, usage chunk). Behaviour knobs are attributes of ``FakeVLLM`` (``tool_fault``, ``status``, ...).
The tests at the bottom check the fake's own wire format so the other tests stand on something verified.
"""
import base64
import json
import re
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


# the stand-in's solver answers the checkable prompts: an implementation independent of the smoke's judges
from vllm_standin import solver


def png_text_chunks(data):
    """tEXt chunks of a PNG as {keyword: text}."""
    out = {}
    pos = 8
    while pos + 8 <= len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        ctype = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if ctype == b"tEXt":
            key, _sep, text = body.partition(b"\0")
            out[key.decode("latin-1")] = text.decode("latin-1")
        elif ctype == b"zTXt":
            key, _sep, rest = body.partition(b"\0")
            out[key.decode("latin-1")] = zlib.decompress(rest[1:]).decode("latin-1")
        pos += 12 + length
    return out


class FakeVLLM(object):
    def __init__(self, ttft=0.02, itl=0.005, tokens=8, reasoning_tokens=2, max_model_len=32768,
                 kv_tokens=262144, tool_fault=None, status=200, api_key=None, with_cache_info=True,
                 max_running=None):
        self.ttft, self.itl, self.tokens, self.reasoning_tokens = ttft, itl, tokens, reasoning_tokens
        self.max_model_len, self.kv_tokens = max_model_len, kv_tokens
        self.tool_fault = tool_fault  # None | no_call | invalid_json | schema_violation | unknown_tool | leak | empty
        self.tool_fault_times = None  # fault only the first N tool requests (None = always)
        self.wrong_answers = False     # checkable prompts get the solver's answer + 1
        self.think_in_content = False  # "</think>" lands in content (reasoning parser not wired)
        self.response_model = None     # the model name responses carry (None: the requested one)
        self.status = status
        self.api_key = api_key
        self.with_cache_info = with_cache_info
        # engine slots: requests beyond max_running queue (num_requests_waiting > 0), like a full batch/KV pool
        self.slots = threading.Semaphore(max_running) if max_running else None
        self.requests = []
        self.lock = threading.Lock()
        self.preemptions = 0
        self.waiting = 0
        self.running = 0
        self.tool_requests = 0
        self.gen_tokens = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _send(self, code, body, ctype="application/json"):
                data = body.encode() if isinstance(body, str) else body
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/version":
                    return self._send(200, json.dumps({"version": "0.28.0"}))
                if self.path == "/metrics":
                    return self._send(200, fake.metrics_text(), "text/plain; version=0.0.4")
                if self.path == "/v1/models":
                    if fake.api_key and self.headers.get("Authorization") != "Bearer " + fake.api_key:
                        return self._send(401, json.dumps({"error": "Unauthorized"}))
                    return self._send(200, json.dumps({"object": "list", "data": [
                        {"id": "moonshotai/Kimi-K3", "object": "model", "max_model_len": fake.max_model_len}]}))
                return self._send(404, "{}")

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                with fake.lock:
                    fake.requests.append(body)
                if fake.api_key and self.headers.get("Authorization") != "Bearer " + fake.api_key:
                    return self._send(401, json.dumps({"error": {"message": "Unauthorized"}}))
                if fake.status != 200:
                    return self._send(fake.status, json.dumps({"object": "error", "message": "engine exploded",
                                                               "code": fake.status}))
                fake.chat(self, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.base_url = "http://127.0.0.1:%d/v1" % self.port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def metrics_text(self):
        lines = [
            "# TYPE vllm:num_requests_running gauge",
            'vllm:num_requests_running{engine="0",model_name="m"} %d' % self.running,
            "# TYPE vllm:num_requests_waiting gauge",
            'vllm:num_requests_waiting{engine="0",model_name="m"} %d' % self.waiting,
            "# TYPE vllm:kv_cache_usage_perc gauge",
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} %.3f' % min(1.0, self.running * 0.1),
            "# TYPE vllm:num_preemptions_total counter",
            'vllm:num_preemptions_total{engine="0",model_name="m"} %d' % self.preemptions,
            "# TYPE vllm:generation_tokens_total counter",
            'vllm:generation_tokens_total{engine="0",model_name="m"} %d' % self.gen_tokens,
        ]
        if self.with_cache_info:
            lines += ["# TYPE vllm:cache_config_info gauge",
                      'vllm:cache_config_info{block_size="16",cache_dtype="fp8",engine="0",kv_cache_max_concurrency='
                      '"%.2f",kv_cache_size_tokens="%d",num_gpu_blocks="%d"} 1.0' % (
                          self.kv_tokens / self.max_model_len, self.kv_tokens, self.kv_tokens // 16)]
        return "\n".join(lines) + "\n"

    def _answer_text(self, body):
        msgs = body.get("messages") or []
        last = msgs[-1]["content"] if msgs else ""
        if isinstance(last, list):
            for part in last:
                if part.get("type") == "image_url":
                    url = part["image_url"]["url"]
                    m = re.match(r"data:[^;]+;base64,(.*)", url, re.S)
                    if m:
                        return png_text_chunks(base64.b64decode(m.group(1))).get("kimi-sim-ocr", "unreadable")
        answer = solver.solve(str(last))
        if answer is not None:
            return solver.corrupt(answer) if self.wrong_answers else answer
        return " ".join("word%d" % i for i in range(self.tokens))

    def _tool_call(self, body):
        with self.lock:
            self.tool_requests += 1
            fault = self.tool_fault
            if self.tool_fault_times is not None and self.tool_requests > self.tool_fault_times:
                fault = None
        prompt = str(body["messages"][-1]["content"])
        if "lookup_order" in prompt:
            name, args = "lookup_order", {"order_id": "B-2041", "include_items": True}
        else:
            name, args = "get_weather", {"city": "Oslo", "unit": "celsius", "days": 3}
        content = ""
        if fault == "no_call":
            return "I would call a tool now.", None
        if fault == "invalid_json":
            return content, (name, '{"city": "Oslo", "unit": ')
        if fault == "schema_violation":
            args = dict(args, days="3") if name == "get_weather" else dict(args, order_id=2041)
        if fault == "unknown_tool":
            name = "get_wether"
        if fault == "empty":
            return content, (name, "")
        if fault == "leak":
            content = "<|close|>message<|sep|>"
        return content, (name, json.dumps(args))

    def chat(self, handler, body):
        if self.slots is not None:
            with self.lock:
                self.waiting += 1
            self.slots.acquire()
            with self.lock:
                self.waiting -= 1
        with self.lock:
            self.running += 1
        try:
            self._chat(handler, body)
        finally:
            with self.lock:
                self.running -= 1
            if self.slots is not None:
                self.slots.release()

    def _chat(self, handler, body):
        tools = body.get("tools")
        content, call = (self._tool_call(body) if tools else (self._answer_text(body), None))
        if self.think_in_content and not tools:
            content = "thinking</think> " + content
        model = self.response_model or body.get("model")
        words = content.split(" ") if content else []
        pieces = [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
        prompt_tokens = max(1, len(json.dumps(body.get("messages"))) // 4)
        out_tokens = self.reasoning_tokens + len(pieces) + (5 if call else 0)
        with self.lock:
            self.gen_tokens += out_tokens
        if not body.get("stream"):
            time.sleep(self.ttft + self.itl * out_tokens)
            msg = {"role": "assistant", "content": content or None, "reasoning": "thinking " * self.reasoning_tokens}
            if call:
                msg["tool_calls"] = [{"id": "call_0", "type": "function",
                                      "function": {"name": call[0], "arguments": call[1]}}]
            resp = {"id": "x", "object": "chat.completion", "created": 0, "model": model,
                    "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls" if call else "stop"}],
                    "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": out_tokens,
                              "total_tokens": prompt_tokens + out_tokens}}
            return handler._send(200, json.dumps(resp))
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Connection", "close")
        handler.end_headers()

        def ev(delta, finish=None, usage=None, choices=True):
            obj = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": model,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if choices else []}
            if usage:
                obj["usage"] = usage
            handler.wfile.write(("data: %s\n\n" % json.dumps(obj)).encode())
            handler.wfile.flush()

        ev({"role": "assistant", "content": ""})
        time.sleep(self.ttft)
        first = True
        for _unused in range(self.reasoning_tokens):
            if not first:
                time.sleep(self.itl)
            first = False
            ev({"reasoning": "thinking "})
        for p in pieces:
            if not first:
                time.sleep(self.itl)
            first = False
            ev({"content": p})
        if call:
            time.sleep(self.itl)
            ev({"tool_calls": [{"index": 0, "id": "call_0", "type": "function",
                                "function": {"name": call[0], "arguments": call[1]}}]})
        ev({}, finish="tool_calls" if call else "stop")
        if (body.get("stream_options") or {}).get("include_usage"):
            ev(None, usage={"prompt_tokens": prompt_tokens, "completion_tokens": out_tokens,
                            "total_tokens": prompt_tokens + out_tokens}, choices=False)
        handler.wfile.write(b"data: [DONE]\n\n")
        handler.wfile.flush()


@pytest.fixture
def fake():
    with FakeVLLM() as f:
        yield f


def test_fake_reads_ocr_chunk_of_shipped_sample():
    from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import image as smoke_image

    png = base64.b64decode("".join(smoke_image.SAMPLE_PNG_B64.split()))
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert png_text_chunks(png)["kimi-sim-ocr"] == smoke_image.SAMPLE_TEXT
    for token in smoke_image.SAMPLE_REQUIRED_TOKENS:
        assert token in smoke_image.SAMPLE_TEXT


def test_fake_stream_wire_format(fake):
    import urllib.request

    req = urllib.request.Request(fake.base_url + "/chat/completions", data=json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True,
         "stream_options": {"include_usage": True}}).encode(), headers={"Content-Type": "application/json"})
    events = [line[6:] for line in urllib.request.urlopen(req).read().decode().split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == fake.tokens + 2
