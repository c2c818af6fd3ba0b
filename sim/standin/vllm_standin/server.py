"""HTTP surface of the stand-in (ThreadingHTTPServer, HTTP/1.1, chunked SSE)."""
import json
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import vlog
from .chat import RequestError
from .engine import Request, render_metrics

GUARDED = ("/v1", "/v2", "/inference", "/cohere")


def sleep_until(deadline):
    while True:
        d = deadline - time.monotonic()
        if d <= 0:
            return
        time.sleep(d)


class Timing(object):
    def __init__(self, ttft_s, prefill_tps, itl_s):
        self.ttft_s = ttft_s
        self.prefill_tps = prefill_tps
        self.itl_s = itl_s

    def prefill(self, prompt_tokens):
        extra = prompt_tokens / self.prefill_tps if self.prefill_tps > 0 else 0.0
        return self.ttft_s + extra


class App(object):
    def __init__(self, dep, kv, chat, group, reported_version, timing, cache_info, access_log, log_stats):
        self.dep = dep
        self.kv = kv
        self.chat = chat
        self.group = group
        self.version = reported_version
        self.timing = timing
        self.cache_info = cache_info
        self.access_log = access_log
        self.log_stats = log_stats
        self.healthy = True
        self.created = int(time.time())
        self.model_name = dep.served_names[0]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 2048
    allow_reuse_address = True


def make_server(app, host, port):
    handler = type("BoundHandler", (Handler,), {"app": app})
    cls = _Server
    if ":" in host:
        cls = type("_Server6", (_Server,), {"address_family": socket.AF_INET6})
    return cls((host, port), handler)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    app = None

    def log_message(self, fmt, *args):  # silence BaseHTTPRequestHandler's stderr lines
        pass

    def _access(self, code):
        if self.app.access_log:
            phrase = self.responses.get(code, ("",))[0]
            vlog.raw('INFO:     %s:%d - "%s %s HTTP/1.1" %d %s' % (
                self.client_address[0], self.client_address[1], self.command, self.path, code, phrase))

    # --- helpers ----------------------------------------------------------------------------------------------
    def _send(self, code, body=b"", ctype="application/json", headers=None):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode()
        self.send_response_only(code)
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")
        self.send_header("content-length", str(len(body)))
        if body or ctype != "application/json":
            self.send_header("content-type", ctype)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)
        self._access(code)

    def _error(self, code, message, etype="BadRequestError", param=None):
        self._send(code, {"error": {"message": message, "type": etype, "param": param, "code": code}})

    def _authorized(self):
        keys = self.app.dep.api_keys
        if not keys or not self.path.startswith(GUARDED):
            return True
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer ") and auth[7:] in keys:
            return True
        self._send(401, {"error": "Unauthorized"})
        return False

    def _path(self):
        return self.path.split("?", 1)[0]

    # --- routes ------------------------------------------------------------------------------------------------
    def do_GET(self):
        path = self._path()
        app = self.app
        if path in ("/health", "/ping"):
            return self._send(200 if app.healthy else 503, b"")
        if path == "/version":
            return self._send(200, {"version": app.version})
        if path == "/load":
            return self._send(200, {"server_load": app.group.server_load()})
        if path == "/metrics":
            text = render_metrics(app.group, app.model_name, app.cache_info) if app.log_stats else ""
            return self._send(200, text, ctype="text/plain; version=0.0.4; charset=utf-8")
        if not self._authorized():
            return
        if path == "/v1/models":
            data = [{"id": n, "object": "model", "created": app.created, "owned_by": "vllm", "root": app.dep.model,
                     "parent": None, "max_model_len": app.kv.max_model_len,
                     "permission": [{"id": "modelperm-%s" % uuid.uuid4().hex, "object": "model_permission",
                                     "created": app.created, "allow_create_engine": False, "allow_sampling": True,
                                     "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                                     "allow_fine_tuning": False, "organization": "*", "group": None,
                                     "is_blocking": False}]}
                    for n in app.dep.served_names]
            return self._send(200, {"object": "list", "data": data})
        return self._send(404, {"detail": "Not Found"})

    do_HEAD = do_GET

    def do_POST(self):
        path = self._path()
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if path == "/ping":
            return self._send(200 if self.app.healthy else 503, b"")
        if not self._authorized():
            return
        if path != "/v1/chat/completions":
            return self._send(404, {"detail": "Not Found"})
        if not self.app.healthy:
            return self._error(503, "The engine is dead (EngineDeadError).", "ServiceUnavailableError")
        try:
            body = json.loads(raw.decode() or "{}")
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
        except ValueError as exc:
            return self._error(400, "Invalid JSON body: %s" % exc)
        model = body.get("model")
        if model is not None and model not in self.app.dep.served_names:
            return self._error(404, "The model `%s` does not exist." % model, "NotFoundError", "model")
        try:
            prompt_tokens, plan = self.app.chat.prepare(body)
        except RequestError as exc:
            return self._error(exc.status, exc.message, exc.etype, exc.param)
        self._chat(body, prompt_tokens, plan)

    # --- chat --------------------------------------------------------------------------------------------------
    def _chat(self, body, prompt_tokens, plan):
        app = self.app
        rid = "chatcmpl-%s" % uuid.uuid4().hex
        created = int(time.time())
        model = body.get("model") or app.model_name
        stream = bool(body.get("stream"))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage")) and stream
        events = [("r", p) for p in plan.reasoning] + [("c", p) for p in plan.content]
        if plan.tool_tokens:
            events += [("h", None)] * (plan.tool_tokens - 1) + [("t" if plan.tool_call else "h", None)]
        req = Request(rid, prompt_tokens, len(events))
        engine = app.group.pick()
        engine.admit(req)
        finished = "abort"
        try:
            t_first = req.admitted + app.timing.prefill(prompt_tokens)
            itl = app.timing.itl_s
            if stream:
                self.send_response_only(200)
                self.send_header("date", self.date_time_string())
                self.send_header("server", "uvicorn")
                self.send_header("content-type", "text/event-stream; charset=utf-8")
                self.send_header("transfer-encoding", "chunked")
                self.send_header("cache-control", "no-cache")
                self.end_headers()
                self._access(200)
            reasoning, content = [], []
            base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model}

            def chunk(delta, finish=None):
                d = dict(base)
                d["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
                return "data: " + json.dumps(d) + "\n\n"

            n = len(events)
            for k, (kind, piece) in enumerate(events):
                sleep_until(t_first + k * itl)
                now = time.monotonic()
                engine.token(req, now)
                if kind == "r":
                    reasoning.append(piece)
                elif kind == "c":
                    content.append(piece)
                if not stream:
                    continue
                last = k == n - 1
                out = ""
                if k == 0:
                    out += chunk({"role": "assistant", "content": ""})
                if kind == "r":
                    out += chunk({"reasoning": piece, "reasoning_content": piece},
                                 plan.finish_reason if last else None)
                elif kind == "c":
                    out += chunk({"content": piece}, plan.finish_reason if last else None)
                elif kind == "t":
                    tc = plan.tool_call
                    out += chunk({"tool_calls": [{"index": 0, "id": tc["id"], "type": "function",
                                                  "function": {"name": tc["name"], "arguments": tc["arguments"]}}]})
                    out += chunk({}, plan.finish_reason)
                elif kind == "h" and last:
                    out += chunk({}, plan.finish_reason)
                if out:
                    self._write_chunk(out.encode())
            usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + n, "completion_tokens": n,
                     "prompt_tokens_details": None}
            if stream:
                tail = ""
                if include_usage:
                    d = dict(base)
                    d["choices"] = []
                    d["usage"] = usage
                    tail += "data: " + json.dumps(d) + "\n\n"
                tail += "data: [DONE]\n\n"
                self._write_chunk(tail.encode())
                self.wfile.write(b"0\r\n\r\n")
            else:
                msg = {"role": "assistant", "content": "".join(content) if (content or not plan.tool_call) else None,
                       "refusal": None, "annotations": None, "audio": None, "function_call": None,
                       "tool_calls": []}
                if reasoning:
                    msg["reasoning"] = "".join(reasoning)
                    msg["reasoning_content"] = msg["reasoning"]
                else:
                    msg["reasoning"] = None
                    msg["reasoning_content"] = None
                if plan.tool_call:
                    tc = plan.tool_call
                    msg["tool_calls"] = [{"id": tc["id"], "type": "function",
                                          "function": {"name": tc["name"], "arguments": tc["arguments"]}}]
                resp = {"id": rid, "object": "chat.completion", "created": created, "model": model,
                        "choices": [{"index": 0, "message": msg, "logprobs": None,
                                     "finish_reason": plan.finish_reason, "stop_reason": None}],
                        "service_tier": None, "system_fingerprint": None, "usage": usage,
                        "prompt_logprobs": None, "kv_transfer_params": None}
                self._send(200, resp)
            finished = plan.finish_reason if plan.finish_reason in ("stop", "length") else "stop"
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            self.close_connection = True
        finally:
            engine.release(req, finished)

    def _write_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))


def serve_in_thread(httpd):
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    t.start()
    return t


def eprint(msg):
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()
