# -*- coding: utf-8 -*-
# Copyright: gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node's read-only peer server: verified blobs of one model repository, to the cluster's other nodes.

``GET /manifest`` answers ``{"verified": [etag...], "refused": [etag...]}``; ``GET /blobs/<etag>`` (Range
``bytes=N-`` resumes) serves a blob only while the verified manifest lists it with the size and mtime it has now,
so a blob that changed on disk after its verification, a partial download or any other file is never served.
No token is involved: peers receive only content whose hash the receiving node checks again.

The server runs as a detached process (``start``), bound to the node's cluster-internal address, until ``stop``
or ``lifetime_s``; its pid file sits beside the manifest.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import signal
import threading
import time

try:  # Python 3
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
except ImportError:  # pragma: no cover - Python 2 is not supported on nodes
    BaseHTTPRequestHandler = ThreadingHTTPServer = object

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.weights import integrity

PID_NAME = ".kimi-k3-peer.pid"
SEND_CHUNK = 1024 * 1024
ETAG_RE = re.compile(r"^/blobs/([0-9a-f]{40}|[0-9a-f]{64})\Z")
RANGE_RE = re.compile(r"^bytes=(\d+)-\Z")


def servable(repo_dir, etag):
    """The blob's path when the manifest lists it verified with its current size and mtime, else None."""
    manifest = integrity.load_manifest(repo_dir)
    entry = manifest["blobs"].get(etag)
    path = os.path.join(repo_dir, "blobs", etag)
    if not entry or integrity.stat_key(path) != (entry.get("size"), entry.get("mtime_ns")):
        return None
    return path


def manifest_view(repo_dir):
    manifest = integrity.load_manifest(repo_dir)
    verified = [e for e in sorted(manifest["blobs"]) if servable(repo_dir, e)]
    state = manifest["state"]
    return {"verified": verified, "refused": sorted(manifest["refused"]), "state": state.get("state"),
            "run": state.get("run")}


def handler_for(repo_dir, counters):
    class PeerHandler(BaseHTTPRequestHandler):
        server_version = "kimi-k3-weights-peer"
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # the node's journal gets nothing per request
            pass

        def do_GET(self):
            counters["last_request"] = time.monotonic()
            if self.path == "/manifest":
                return self._send(200, json.dumps(manifest_view(repo_dir)).encode("utf-8"),
                                  "application/json")
            m = ETAG_RE.match(self.path)
            path = servable(repo_dir, m.group(1)) if m else None
            if path is None:
                return self._send(404, b"not a verified blob of this node\n", "text/plain")
            size = os.path.getsize(path)
            rng = RANGE_RE.match(self.headers.get("Range") or "")
            start = int(rng.group(1)) if rng else 0
            if start > size:
                return self._send(416, b"range beyond the blob\n", "text/plain")
            self.send_response(206 if rng else 200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(size - start))
            if rng:
                self.send_header("Content-Range", "bytes %d-%d/%d" % (start, max(size - 1, start), size))
            self.end_headers()
            with open(path, "rb") as handle:
                handle.seek(start)
                while True:
                    data = handle.read(SEND_CHUNK)
                    if not data:
                        break
                    self.wfile.write(data)
                    counters["bytes_served"] = counters.get("bytes_served", 0) + len(data)

        def _send(self, code, body, ctype):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):  # read-only
            self._send(405, b"read-only\n", "text/plain")

        do_PUT = do_DELETE = do_POST

    return PeerHandler


def make_server(repo_dir, address, port):
    """The server (not yet serving); port 0 picks a free one (tests)."""
    counters = {"bytes_served": 0, "last_request": time.monotonic()}
    server = ThreadingHTTPServer((address, int(port)), handler_for(repo_dir, counters))
    server.daemon_threads = True
    server.counters = counters
    return server


def pid_path(repo_dir):
    return os.path.join(repo_dir, PID_NAME)


def _read_pid(repo_dir):
    try:
        with open(pid_path(repo_dir)) as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) and isinstance(data.get("pid"), int) else None
    except (IOError, OSError, ValueError):
        return None


def _proc_start(pid):
    """The process's start time (field 22 of /proc/<pid>/stat): a recycled pid has another one."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (IOError, OSError, IndexError):
        return None


def running(repo_dir):
    """The pid record of this repository's peer server when that very process still runs, else None."""
    rec = _read_pid(repo_dir)
    if rec and rec.get("start") and _proc_start(rec["pid"]) == rec["start"]:
        return rec
    return None


def start(repo_dir, address, port, lifetime_s=21600):
    """Start the detached server unless one with the same address and port runs. Returns (changed, record)."""
    os.makedirs(os.path.join(repo_dir, "blobs"), exist_ok=True)
    rec = running(repo_dir)
    if rec and rec.get("address") == address and rec.get("port") == int(port):
        return False, rec
    if rec:
        stop(repo_dir)
    server = make_server(repo_dir, address, port)  # bind here: an occupied port is the caller's error
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write_fd)
        server.server_close()
        with os.fdopen(read_fd) as pipe:
            child = pipe.read().strip()
        os.waitpid(pid, 0)
        rec = {"pid": int(child), "start": _proc_start(int(child)), "address": address, "port": int(port)}
        with open(pid_path(repo_dir), "w") as handle:
            json.dump(rec, handle)
        return True, rec
    # first child: a new session, then the server's own process, so nothing waits for it or shares its terminal
    os.close(read_fd)
    os.setsid()
    if os.fork():
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.write(write_fd, ("%d\n" % os.getpid()).encode())
    os.close(write_fd)
    _serve(server, lifetime_s)
    os._exit(0)


def _serve(server, lifetime_s):
    """Serve until SIGTERM or ``lifetime_s`` (a play that died before its stop task leaves no server for ever)."""
    def _end(*_args):
        threading.Thread(target=server.shutdown).start()
    signal.signal(signal.SIGTERM, _end)
    timer = threading.Timer(lifetime_s, _end)
    timer.daemon = True
    timer.start()
    server.serve_forever(poll_interval=0.5)
    server.server_close()


def stop(repo_dir, wait_s=10):
    """Stop this repository's peer server. Returns whether one was running."""
    rec = running(repo_dir)
    if rec:
        try:
            os.kill(rec["pid"], signal.SIGTERM)
        except OSError:
            pass
        deadline = time.monotonic() + wait_s
        while _proc_start(rec["pid"]) == rec["start"] and time.monotonic() < deadline:
            time.sleep(0.1)
    try:
        os.unlink(pid_path(repo_dir))
    except OSError:
        pass
    return rec is not None
