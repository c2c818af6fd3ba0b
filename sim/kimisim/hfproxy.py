"""The Hugging Face mirror's fault proxy: olah behind a small HTTP proxy that can throttle and tamper.

`simctl up` starts it on HF_FAULT_PROXY (127.0.0.1:8089) in front of olah (HF_MIRROR); the weights tests use it as
their endpoint. Faults are read from sim/.state/hf/faults.json on every request, so `simctl hf-fault` changes them
at once, without a restart:

    simctl hf-fault throttle=4000000          the whole endpoint serves at most 4 MB/s (all connections together)
    simctl hf-fault tamper=config.json        that file's content changes in one byte, same size (a bit flipped
                                              in the middle), as a compromised mirror or a bad cache would serve it
    simctl hf-fault --clear

`GET /_sim/stats` answers what the proxy sent: {"bytes": N, "by_path": {path: N}, "requests": N}; `DELETE
/_sim/stats` zeroes it. Standard library only; unit tests: tests/unit/sim/test_hfproxy.py.
"""
import argparse
import http.client
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RESOLVE_RE = re.compile(r"^/[^/]+/[^/]+/resolve/[^/]+/(.+?)(\?.*)?$")
CHUNK = 64 * 1024
FAULT_RE = re.compile(r"^(throttle|tamper)=(.+)$")


def parse_faults(words):
    """``throttle=<bytes/s>`` and ``tamper=<path>`` (repeatable) -> {"throttle_bps": int or None, "tamper": [..]}.
    Raises ValueError naming the word."""
    out = {"throttle_bps": None, "tamper": []}
    for w in words:
        m = FAULT_RE.match(w)
        if not m:
            raise ValueError("unknown hf fault %r (throttle=<bytes/s>, tamper=<path>)" % w)
        if m.group(1) == "throttle":
            try:
                bps = int(m.group(2))
            except ValueError:
                raise ValueError("throttle=%s is not a whole number of bytes per second" % m.group(2))
            if bps <= 0:
                raise ValueError("throttle=%s must be positive" % m.group(2))
            out["throttle_bps"] = bps
        else:
            out["tamper"].append(m.group(2).lstrip("/"))
    return out


def load_faults(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {"throttle_bps": None, "tamper": []}
    return {"throttle_bps": data.get("throttle_bps"), "tamper": list(data.get("tamper") or [])}


def tamper_offset(size):
    """The byte a tampered file has changed: its middle one (inside the content, not a header or trailing newline)."""
    return size // 2


def tamper_chunk(chunk, pos, target):
    """``chunk`` (file bytes from offset ``pos``) with the bit 0x01 of byte ``target`` flipped when it lies inside."""
    if pos <= target < pos + len(chunk):
        i = target - pos
        return chunk[:i] + bytes([chunk[i] ^ 0x01]) + chunk[i + 1:]
    return chunk


class Throttle(object):
    """One token bucket for the whole endpoint: every connection's bytes share ``bps`` (a WAN link, not a per-
    connection cap, so N nodes pulling at once get 1/N each)."""

    def __init__(self, clock=time.monotonic, sleep=time.sleep):
        self.clock, self.sleep, self.lock = clock, sleep, threading.Lock()
        self.next_free = 0.0

    def take(self, n, bps):
        """Wait until ``n`` more bytes fit under ``bps``; returns the seconds waited."""
        if not bps:
            return 0.0
        with self.lock:
            now = self.clock()
            start = max(now, self.next_free)
            self.next_free = start + n / float(bps)
            wait = start - now
        if wait > 0:
            self.sleep(wait)
        return wait


class Stats(object):
    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        self.bytes, self.by_path, self.requests = 0, {}, 0

    def add(self, path, n):
        with self.lock:
            self.bytes += n
            self.by_path[path] = self.by_path.get(path, 0) + n

    def view(self):
        with self.lock:
            return {"bytes": self.bytes, "by_path": dict(self.by_path), "requests": self.requests}


class Proxy(BaseHTTPRequestHandler):
    """Forwards GET/HEAD to olah (``server.upstream``), applying ``server.faults_path``'s faults to file bodies."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_DELETE(self):
        if self.path == "/_sim/stats":
            with self.server.stats.lock:
                self.server.stats.reset()
            return self._reply(200, b"{}")
        return self._reply(405, b"read-only")

    def do_HEAD(self):
        self._forward("HEAD")

    def do_GET(self):
        if self.path == "/_sim/stats":
            return self._reply(200, json.dumps(self.server.stats.view()).encode())
        with self.server.stats.lock:
            self.server.stats.requests += 1
        self._forward("GET")

    def _reply(self, code, body):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _head(self, r, method):
        body_len = r.getheader("Content-Length")
        self.send_response(r.status, r.reason)
        for k, v in r.getheaders():
            if k.lower() not in ("connection", "transfer-encoding", "keep-alive"):
                self.send_header(k, v)
        if body_len is None and method == "GET":
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        cr = re.match(r"bytes (\d+)-\d+/(\d+)", r.getheader("Content-Range") or "")
        if r.status == 206 and cr:
            return int(cr.group(1)), int(cr.group(2))
        return 0, (int(body_len) if body_len is not None else None)

    def _forward(self, method):
        faults = load_faults(self.server.faults_path)
        m = RESOLVE_RE.match(self.path)
        file_path = m.group(1) if m else None
        headers = dict((k, v) for k, v in self.headers.items() if k.lower() not in ("host", "connection"))
        conn = http.client.HTTPConnection(self.server.upstream[0], self.server.upstream[1], timeout=120)
        try:
            conn.request(method, self.path, headers=headers)
            r = conn.getresponse()
            pos, size = self._head(r, method)
            if method == "HEAD":
                return
            tamper = file_path in faults["tamper"] and r.status in (200, 206)
            whole = None
            if tamper and size is None:
                # olah streams some files without a length: read the whole (small) file to find its middle byte
                whole = r.read()
                size = pos + len(whole)
            target = tamper_offset(size) if tamper else -1
            for chunk in [whole] if whole is not None else iter(lambda: r.read(CHUNK), b""):
                if tamper:
                    chunk = tamper_chunk(chunk, pos, target)
                self.server.throttle.take(len(chunk), faults["throttle_bps"])
                self.wfile.write(chunk)
                pos += len(chunk)
                if file_path:
                    self.server.stats.add(file_path, len(chunk))
        except (OSError, http.client.HTTPException):
            self.close_connection = True
        finally:
            conn.close()


def make_server(listen, upstream, faults_path, clock=time.monotonic, sleep=time.sleep):
    host, port = listen.rsplit(":", 1)
    up_host, up_port = upstream.rsplit(":", 1)
    server = ThreadingHTTPServer((host, int(port)), Proxy)
    server.daemon_threads = True
    server.upstream, server.faults_path = (up_host, int(up_port)), faults_path
    server.throttle, server.stats = Throttle(clock, sleep), Stats()
    return server


def main(argv=None):
    ap = argparse.ArgumentParser(prog="hfproxy")
    ap.add_argument("--listen", required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--faults", required=True)
    a = ap.parse_args(argv)
    server = make_server(a.listen, a.upstream, a.faults)
    server.serve_forever()


if __name__ == "__main__":
    main()
