"""The smoke client's raw SSE reader: split reads, CRLF, comments, tool calls, in-stream errors, HTTP errors."""
import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import client as sc
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import server as smoke_server


def _event(obj, crlf=False):
    nl = "\r\n" if crlf else "\n"
    return ("data: " + json.dumps(obj) + nl + nl).encode()


def _chunk(delta=None, finish=None, usage=None):
    c = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
         "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage:
        c["usage"] = usage
    return c


SCENARIOS = {
    "split-crlf": [
        b": keep-alive comment\r\n\r\n",
        _event(_chunk({"role": "assistant", "reasoning": "think"}), crlf=True)[:17],   # an event split mid-line
        _event(_chunk({"role": "assistant", "reasoning": "think"}), crlf=True)[17:],
        _event(_chunk({"content": "Hello"}), crlf=True),
        _event(_chunk({"content": " world"}, finish="stop"), crlf=True),
        _event(_chunk(usage={"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}), crlf=True),
        b"data: [DONE]\r\n\r\n",
    ],
    "tool": [
        _event(_chunk({"role": "assistant", "tool_calls": [
            {"index": 0, "id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]}, finish="tool_calls")),
        b"data: [DONE]\n\n",
    ],
    "error-event": [
        _event(_chunk({"content": "partial"})),
        _event({"error": {"message": "engine died mid-stream", "type": "InternalServerError", "code": 500}}),
    ],
    "no-done": [
        _event(_chunk({"content": "only"}, finish="stop")),
    ],
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        scenario = body["model"]
        if scenario == "http-400":
            payload = json.dumps({"error": {"message": "bad reasoning_effort", "type": "BadRequestError",
                                            "code": 400}}).encode()
            self.send_response(400)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        for piece in SCENARIOS[scenario]:
            self.wfile.write(piece)
            self.wfile.flush()
            time.sleep(0.02)


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d/v1" % httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def _run(base_url, scenario):
    async def go():
        client = sc.make_client(smoke_server.Endpoint.at(base_url, None, 30.0), 1)
        try:
            return await sc.stream_chat(client, scenario, [{"role": "user", "content": "hi"}], max_tokens=16)
        finally:
            await client.close()
    return asyncio.run(go())


def test_split_reads_crlf_and_comments(server):
    res = _run(server, "split-crlf")
    assert res["ok"], res["error"]
    assert res["reasoning"] == "think" and res["content"] == "Hello world"
    assert res["finish_reason"] == "stop"
    assert (res["prompt_tokens"], res["output_tokens"]) == (7, 3)
    # TTFT is the first reasoning token; the two content chunks give two inter-token gaps.
    assert res["ttft_s"] == res["ttft_reasoning_s"] and res["ttft_content_s"] > res["ttft_s"]
    assert len(res["itl_s"]) == 2 and all(g > 0 for g in res["itl_s"])


def test_tool_call_delta(server):
    res = _run(server, "tool")
    assert res["ok"], res["error"]
    assert len(res["tool_calls"]) == 1
    call = res["tool_calls"][0]
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Oslo"}


def test_error_event_in_stream_fails_the_request(server):
    res = _run(server, "error-event")
    assert not res["ok"] and "engine died mid-stream" in res["error"]


def test_http_error_is_reported_not_raised(server):
    res = _run(server, "http-400")
    assert not res["ok"] and "400" in res["error"]


def test_stream_without_done_still_completes(server):
    res = _run(server, "no-done")
    assert res["ok"] and res["content"] == "only"


def test_plain_request_error_is_a_failed_result(server):
    async def go():
        client = sc.make_client(smoke_server.Endpoint.at(server, None, 30.0), 1)
        try:
            return await sc.plain_chat(client, "http-400", [{"role": "user", "content": "hi"}], max_tokens=16)
        finally:
            await client.close()
    res = asyncio.run(go())
    assert res["ok"] is False and res["stream"] is False and "HTTP 400" in res["error"]
    assert res["e2e_s"] > 0 and res["client_queue_s"] >= 0
