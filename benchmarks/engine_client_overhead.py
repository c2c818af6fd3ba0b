#!/usr/bin/env python3
"""Cost of asking the node's engine through community.docker's client (engine_api) instead of a bare
http.client-over-unix-socket GET: import time of the module_utils in a fresh interpreter (every module run on a
node pays it once; vllm_wait runs vllm_node_status once per round) and the time per GET against a fake engine on a
unix socket (a new client per call, as the modules do).

usage: benchmarks/engine_client_overhead.py [--calls N] [--imports N]
Prints medians and spreads; nothing is asserted (speed targets live here, not in tests)."""
import argparse
import http.client
import http.server
import os
import socket
import socketserver
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "build", "collections"))

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine import api as engine_api  # noqa: E402

BODY = b'{"Version": "29.7.2", "ApiVersion": "1.54"}'


class _Engine(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args):
        pass


class _UnixEngine(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        return self.socket.accept()[0], ("local", 0)


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        http.client.HTTPConnection.__init__(self, "localhost", timeout=5)
        self.path_ = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path_)


def bare_get(path):
    conn = _UnixHTTP(path)
    try:
        conn.request("GET", "/version", headers={"Host": "docker"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def per_call(fn, calls):
    times = []
    for _call in range(calls):
        start = time.perf_counter()
        status, _body = fn()
        times.append(time.perf_counter() - start)
        assert status == 200
    return times


def import_seconds(statement, runs):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "build", "collections"))
    code = "import time; t = time.perf_counter(); %s; print(time.perf_counter() - t)" % statement
    return [float(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                 check=True).stdout) for _run in range(runs)]


def show(label, values, unit=1000.0, suffix="ms"):
    print("%-44s median %8.2f %s  (min %.2f, max %.2f, n=%d)" % (
        label, statistics.median(values) * unit, suffix, min(values) * unit, max(values) * unit, len(values)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--imports", type=int, default=10)
    args = ap.parse_args(argv)
    path = os.path.join(tempfile.mkdtemp(prefix="engine-bench-"), "docker.sock")
    srv = _UnixEngine(path, _Engine)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = "unix://" + path
        show("GET /version, bare http.client", per_call(lambda: bare_get(path), args.calls))
        show("GET /version, engine_api (community.docker)", per_call(lambda: engine_api.engine_get(url, "/version"),
                                                                     args.calls))
    finally:
        srv.shutdown()
        srv.server_close()
    show("import http.client (fresh interpreter)", import_seconds("import http.client", args.imports))
    show("import engine_api (fresh interpreter)", import_seconds(
        "from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.engine import api as engine_api", args.imports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
