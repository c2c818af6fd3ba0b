"""HTTP surface of the stand-in (ThreadingHTTPServer, HTTP/1.1, chunked SSE)."""
import dataclasses
import heapq
import json
import os
import queue
import socket
import ssl
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, HTTPServer

from . import faults as faults_mod
from . import solver, vlog
from .chat import RequestError, tokenize
from .engine import Request, render_metrics

GUARDED = ("/v1", "/v2", "/inference", "/cohere")


class Timing(object):
    def __init__(self, ttft_s, prefill_tps, itl_s):
        self.ttft_s = ttft_s
        self.prefill_tps = prefill_tps
        self.itl_s = itl_s

    def prefill(self, prompt_tokens):
        extra = prompt_tokens / self.prefill_tps if self.prefill_tps > 0 else 0.0
        return self.ttft_s + extra


@dataclasses.dataclass
class App(object):
    """What the HTTP handlers serve from: the deployment and its engines, as `vllm serve` configured them."""
    dep: object  # config.Deployment
    kv: object  # config.KVBudget
    chat: object  # chat.ChatBehaviour
    group: object  # engine.EngineGroup
    version: str  # the version /version reports
    timing: Timing
    cache_info: dict  # the labels of vllm:cache_config_info
    access_log: bool
    log_stats: bool
    pd: object = None  # kvtransfer.KVTransfer of a prefill/decode instance (--kv-transfer-config), else None
    faults: object = faults_mod.NONE  # serving faults (faults.py)
    healthy: bool = True
    created: int = dataclasses.field(default_factory=lambda: int(time.time()))

    @property
    def model_name(self):
        return self.dep.served_names[0]


_tls = threading.local()
# Request parsing/preparation runs one request at a time: threads waiting here sleep on a futex instead of
# convoying on the GIL, so the emitter thread gets the interpreter promptly when a deadline is due.
FRONTEND = threading.Lock()


class _Server(HTTPServer):
    """HTTPServer with a growing pool of reusable worker threads (one per open connection).

    The listener thread stamps each connection's accept time (cheap) and hands it to an idle worker, spawning one
    only when none is idle; request timing is measured from that stamp, so thread start-up and request parsing under
    load do not shift TTFT deadlines.
    """
    request_queue_size = 2048
    allow_reuse_address = True
    ssl_context = None

    def server_activate(self):
        HTTPServer.server_activate(self)
        self._q = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        try:
            prespawn = int(os.environ.get("VLLM_STANDIN_HTTP_THREADS", "320"))
        except ValueError:
            prespawn = 320
        for _worker in range(prespawn):
            self._spawn(first_is_reserved=False)

    def _spawn(self, first_is_reserved):
        threading.Thread(target=self._worker, args=(first_is_reserved,), daemon=True).start()

    def serve_forever(self, poll_interval=0.5):
        """Accept loop that drains the whole backlog per wake-up (one GIL acquisition for a burst of connects)."""
        import selectors
        self.socket.setblocking(False)
        with selectors.DefaultSelector() as sel:
            sel.register(self.socket, selectors.EVENT_READ)
            while True:
                sel.select(poll_interval)
                while True:
                    try:
                        conn, addr = self.socket.accept()
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError:
                        break
                    stamp = time.monotonic()
                    conn.setblocking(True)
                    self._dispatch(conn, addr, stamp)

    def process_request(self, request, client_address):
        self._dispatch(request, client_address, time.monotonic())

    def _dispatch(self, request, client_address, stamp):
        with self._lock:
            if self._idle > 0:
                self._idle -= 1
                spawn = False
            else:
                spawn = True
        self._q.put((request, client_address, stamp))
        if spawn:
            self._spawn(first_is_reserved=True)

    def _worker(self, reserved):
        while True:
            if not reserved:
                with self._lock:
                    self._idle += 1
            reserved = False
            request, client_address, stamp = self._q.get()
            _tls.accept_stamp = stamp
            try:
                request = self._handshake(request)
                self.finish_request(request, client_address)
            except Exception:  # noqa: BLE001 - like socketserver: report and keep serving
                self.handle_error(request, client_address)
            finally:
                _tls.accept_stamp = None
                self.shutdown_request(request)

    def _handshake(self, request):
        """TLS on this worker thread (uvicorn's --ssl-keyfile/--ssl-certfile), never on the accept loop."""
        if self.ssl_context is None:
            return request
        return self.ssl_context.wrap_socket(request, server_side=True)

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (BrokenPipeError, ConnectionResetError, socket.timeout, ssl.SSLError)):
            return  # a client that refuses the certificate (wrong CA) aborts the handshake: uvicorn logs nothing
        vlog.error("launcher.py:120", "Exception in ASGI application: %r" % (exc,))


def make_server(app, host, port, ssl_context=None):
    handler = type("BoundHandler", (Handler,), {"app": app})
    cls = _Server
    if ":" in host:
        cls = type("_Server6", (_Server,), {"address_family": socket.AF_INET6})
    httpd = cls((host, port), handler)
    httpd.ssl_context = ssl_context
    return httpd


def tls_context(keyfile, certfile):
    """The server context of vLLM's --ssl-keyfile/--ssl-certfile (None without them); OSError/ssl.SSLError when
    the files are missing or do not match, as uvicorn's start-up fails."""
    if not keyfile and not certfile:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certfile, keyfile)
    return ctx


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    app = None

    def log_message(self, fmt, *args):  # silence BaseHTTPRequestHandler's stderr lines
        pass

    def parse_request(self):
        # arrival = accept time for a connection's first request, else when its request line was read
        stamp = getattr(_tls, "accept_stamp", None)
        _tls.accept_stamp = None
        self.arrival = stamp if stamp is not None else time.monotonic()
        with FRONTEND:
            return BaseHTTPRequestHandler.parse_request(self)

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
            if app.pd is not None and app.log_stats:
                text += app.pd.metrics(app.model_name)
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
        length = int(self.headers.get("Content-Length") or 0)
        self._raw = self.rfile.read(length) if length else b""  # outside the lock: slow senders stall nobody
        with FRONTEND:
            prepared = self._prepare_post()
        source = self._kv_read(prepared[0]) if prepared is not None else None
        if source:
            self._chat(*prepared, source=source)

    def _kv_read(self, body):
        """Decode side of PD: pull the blocks the request's kv_transfer_params name. Returns where the prompt's KV
        comes from (``external_kv_transfer`` or ``local_compute``, vLLM's prompt-token sources), None once refused."""
        pd, params = self.app.pd, body.get("kv_transfer_params")
        if pd is None or not pd.consumes or not isinstance(params, dict) or not params.get("do_remote_prefill"):
            return "local_compute"
        try:
            n = pd.read_remote(params)
        except RequestError as exc:
            vlog.error("nixl_connector.py:1480", "%s (request %s)" % (exc.message, params.get("remote_request_id")))
            self._error(exc.status, exc.message, exc.etype, exc.param)
            return None
        vlog.info("nixl_connector.py:1422", "KV transfer: read %d block(s) of request %s from engine %s at %s:%s"
                  % (n, params.get("remote_request_id"), params.get("remote_engine_id"), params.get("remote_host"),
                     params.get("remote_port")))
        return "local_compute" if self.app.faults.decode_recompute else "external_kv_transfer"

    def _kv_issue(self, body, rid, prompt_tokens):
        """Prefill side of PD: kv_transfer_params for a remote-decode request, else None (as vLLM)."""
        pd, params = self.app.pd, body.get("kv_transfer_params")
        if pd is None or not pd.produces or not isinstance(params, dict) or not params.get("do_remote_decode"):
            return None
        issued = pd.issue(self.headers.get("X-Request-Id") or rid, prompt_tokens)
        vlog.info("nixl_connector.py:1390", "KV transfer: issued %d block(s) of request %s for remote decode"
                  % (len(issued["remote_block_ids"]), issued["remote_request_id"]))
        return issued

    def _prepare_post(self):
        """Everything before admission; returns (body, prompt_tokens, plan) or None once an error was sent."""
        path = self._path()
        raw = self._raw
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
            return self._error(404, "The model `%s` does not exist. Valid aliases: %s." % (
                model, ", ".join(self.app.dep.served_names)), "NotFoundError", "model")
        try:
            prompt_tokens, plan = self.app.chat.prepare(body)
        except RequestError as exc:
            status = self.app.faults.status_of(exc.status)
            if status != exc.status:
                return self._error(status, "Internal Server Error", "InternalServerError")
            return self._error(exc.status, exc.message, exc.etype, exc.param)
        if plan.answer is not None and self.app.faults.answers_wrong(self.app.group.server_load()):
            plan.content = tokenize(solver.corrupt(plan.answer))
        elif plan.needle and self.app.faults.needle_lost(prompt_tokens):
            plan.content = tokenize(solver.NO_NEEDLE)
        return body, prompt_tokens, plan

    # --- chat --------------------------------------------------------------------------------------------------
    def _start_stream(self):
        """The SSE response head, as uvicorn sends it (chunked, no content length)."""
        self.send_response_only(200)
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("cache-control", "no-cache")
        self.end_headers()
        self.wfile.flush()
        self._access(200)

    def _end_stream(self, base, events, plan, usage, include_usage):
        tail = "" if events else _chunk(base, {"role": "assistant", "content": ""}, plan.finish_reason)
        if include_usage:
            d = dict(base)
            d["choices"] = []
            d["usage"] = usage
            tail += "data: " + json.dumps(d) + "\n\n"
        tail += "data: [DONE]\n\n"
        self._write_chunk(tail.encode())
        self.wfile.write(b"0\r\n\r\n")

    def _send_completion(self, body, rid, created, model, st, plan, usage, prompt_tokens):
        resp = {"id": rid, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": _message(st, plan), "logprobs": None,
                             "finish_reason": plan.finish_reason, "stop_reason": None}],
                "service_tier": None, "system_fingerprint": None, "usage": usage,
                "prompt_logprobs": None,
                "kv_transfer_params": self._kv_issue(body, rid, prompt_tokens)}
        self._send(200, resp)

    def _generate(self, events, plan, engine, req, t_first, base, stream):
        """Emit the events at their due times (streamed to the socket when stream); returns the finished Stream."""
        st = Stream(events, plan, engine, req, t_first, self.app.timing.itl_s, base,
                    self.connection if stream else None)
        if events:
            EMITTER.add(st)
            st.done.wait()
        if st.error is not None:
            raise st.error
        return st

    def _chat(self, body, prompt_tokens, plan, source="local_compute"):
        app = self.app
        rid = "chatcmpl-%s" % uuid.uuid4().hex
        created = int(time.time())
        model = body.get("model") or app.model_name
        stream = bool(body.get("stream"))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage")) and stream
        events = _events(plan)
        req = Request(rid, prompt_tokens, len(events), self.arrival)
        req.source = source
        engine = app.group.pick()
        waited = engine.admit(req)
        finished = "abort"
        try:
            # not queued for capacity: prefill counts from arrival; queued: from admission
            t_first = (req.admitted if waited else req.arrival) + app.timing.prefill(prompt_tokens)
            base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model}
            if stream:
                self._start_stream()
            st = self._generate(events, plan, engine, req, t_first, base, stream)
            n = len(events)
            usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + n, "completion_tokens": n,
                     "prompt_tokens_details": None}
            if stream:
                self._end_stream(base, events, plan, usage, include_usage)
            else:
                self._send_completion(body, rid, created, model, st, plan, usage, prompt_tokens)
            finished = plan.finish_reason if plan.finish_reason in ("stop", "length") else "stop"
        except (BrokenPipeError, ConnectionResetError, socket.timeout, OSError):
            self.close_connection = True
        finally:
            engine.release(req, finished)

    def _write_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))


def _events(plan):
    """One event per generated token: reasoning ("r"), content ("c"), tool-call tokens ("h", the last one "t")."""
    events = [("r", p) for p in plan.reasoning] + [("c", p) for p in plan.content]
    if plan.tool_tokens:
        events += [("h", None)] * (plan.tool_tokens - 1) + [("t" if plan.tool_call else "h", None)]
    return events


def _message(st, plan):
    """The assistant message of a non-streamed completion."""
    content, reasoning = st.content, st.reasoning
    msg = {"role": "assistant", "content": "".join(content) if (content or not plan.tool_call) else None,
           "refusal": None, "annotations": None, "audio": None, "function_call": None,
           "tool_calls": []}
    msg["reasoning"] = "".join(reasoning) if reasoning else None
    msg["reasoning_content"] = msg["reasoning"]
    msg["tool_calls"] = [{"id": tc["id"], "type": "function",
                          "function": {"name": tc["name"], "arguments": tc["arguments"]}}
                         for tc in plan.tool_calls]
    return msg


def _chunk(base, delta, finish=None):
    d = dict(base)
    d["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    return "data: " + json.dumps(d) + "\n\n"


class Stream(object):
    """One generating request as seen by the emitter: token k is due at t_first + k * itl."""

    def __init__(self, events, plan, engine, req, t_first, itl, base, sock):
        self.events = events
        self.plan = plan
        self.engine = engine
        self.req = req
        self.t_first = t_first
        self.itl = itl
        self.base = base
        self.sock = sock
        self.k = 0
        self.reasoning = []
        self.content = []
        self.error = None
        self.done = threading.Event()
        if sock is not None:
            # pre-rendered templates: per token only the piece is JSON-encoded
            mark = "\u0000PIECE\u0000"
            qm = json.dumps(mark)
            r = _chunk(base, {"reasoning": mark, "reasoning_content": mark}).split(qm)
            c = _chunk(base, {"content": mark}).split(qm)
            self.r_tpl, self.c_tpl = r, c

    def deadline(self):
        return self.t_first + self.k * self.itl

    def step(self, now):
        """Emit token k; returns True while more tokens remain."""
        kind, piece = self.events[self.k]
        self.engine.token(self.req, now)
        if kind == "r":
            self.reasoning.append(piece)
        elif kind == "c":
            self.content.append(piece)
        last = self.k == len(self.events) - 1
        if self.sock is not None:
            base, plan = self.base, self.plan
            out = _chunk(base, {"role": "assistant", "content": ""}) if self.k == 0 else ""
            if kind == "r":
                if last:
                    out += _chunk(base, {"reasoning": piece, "reasoning_content": piece}, plan.finish_reason)
                else:
                    q = json.dumps(piece)
                    out += self.r_tpl[0] + q + self.r_tpl[1] + q + self.r_tpl[2]
            elif kind == "c":
                if last:
                    out += _chunk(base, {"content": piece}, plan.finish_reason)
                else:
                    out += self.c_tpl[0] + json.dumps(piece) + self.c_tpl[1]
            elif kind == "t":
                for i, tc in enumerate(plan.tool_calls):
                    out += _chunk(base, {"tool_calls": [{"index": i, "id": tc["id"], "type": "function",
                                                         "function": {"name": tc["name"],
                                                                      "arguments": tc["arguments"]}}]})
                out += _chunk(base, {}, plan.finish_reason)
            elif kind == "h" and last:
                out += _chunk(base, {}, plan.finish_reason)
            if out:
                data = out.encode()
                try:
                    self.sock.sendall(b"%x\r\n%s\r\n" % (len(data), data))
                except OSError as exc:
                    self.error = exc
                    return False
        self.k += 1
        return not last


class Emitter(object):
    """Single thread that releases every stream's tokens at their deadlines (like an engine step loop).

    One thread instead of one sleeping thread per stream keeps GIL hand-offs low, so 256+ concurrent streams keep
    accurate TTFT/ITL on two cores. Deadlines are absolute (monotonic clock), so delays never accumulate.
    """

    def __init__(self):
        self.heap = []
        self.seq = 0
        self.cond = threading.Condition()
        self.thread = None

    def add(self, st):
        with self.cond:
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="emitter", daemon=True)
                self.thread.start()
            self.seq += 1
            heapq.heappush(self.heap, (st.deadline(), self.seq, st))
            self.cond.notify()

    def _run(self):
        heap, cond = self.heap, self.cond
        while True:
            with cond:
                while True:
                    if not heap:
                        cond.wait()
                        continue
                    delay = heap[0][0] - time.monotonic()
                    if delay <= 0:
                        break
                    cond.wait(delay)
                now = time.monotonic()
                due = []
                while heap and heap[0][0] <= now:
                    due.append(heapq.heappop(heap)[2])
            again = []
            for st in due:
                try:
                    more = st.step(time.monotonic())
                except Exception as exc:  # noqa: BLE001 - never let one stream kill the emitter
                    st.error = exc
                    more = False
                if more:
                    again.append(st)
                else:
                    st.done.set()
            if again:
                with cond:
                    for st in again:
                        self.seq += 1
                        heapq.heappush(heap, (st.deadline(), self.seq, st))


EMITTER = Emitter()


def serve_in_thread(httpd):
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    t.start()
    return t
