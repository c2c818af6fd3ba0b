"""Multi-node rendezvous of the stand-in: JSON lines over TCP.

TP/PP (`--nnodes`): rank 0 listens on master_addr:master_port, ranks > 0 connect.
DP: the head (start rank 0) listens on data_parallel_address:data_parallel_rpc_port, followers connect and announce
their DP ranks. Connections stay open; EOF on either side means the peer died.
"""
import json
import os
import socket
import threading
import time

from . import vlog
from .tcp import serve_tcp


def _send(sock, obj):
    sock.sendall((json.dumps(obj) + "\n").encode())


class LineReader(object):
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def read(self):
        while b"\n" not in self.buf:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.buf += data
        line, _sep, self.buf = self.buf.partition(b"\n")
        return json.loads(line.decode())


class Head(object):
    """Listens for followers; `ready` is set once every expected peer has joined and finished loading."""

    def __init__(self, dep, on_peer_lost):
        self.dep = dep
        self.on_peer_lost = on_peer_lost
        self.lock = threading.Lock()
        self.joined = {}
        self.loaded = set()
        self.peers_ready = threading.Event()
        self.conns = []
        if dep.kind == "tp_head":
            self.mode = "tp"
            self.addr = (dep.master_addr, dep.master_port)
            self.expected = set(range(1, dep.nnodes))
        else:
            self.mode = "dp"
            self.addr = (dep.dp_address, dep.dp_rpc_port)
            self.expected = set(range(dep.dp)) - set(range(dep.dp_start_n, dep.dp_start_n + dep.dp_local_n))
        if not self.expected:
            self.peers_ready.set()

    def start(self):
        self.srv = serve_tcp(self.addr, 64, self._serve_peer)
        what = "TP/PP rendezvous (master)" if self.mode == "tp" else "DP RPC"
        vlog.info("parallel_state.py:1124" if self.mode == "tp" else "core_client.py:1027",
                  "%s listening on %s:%d, waiting for %s" % (
                      what, self.addr[0], self.addr[1],
                      ("node ranks %s" if self.mode == "tp" else "DP ranks %s") % _ranges(sorted(self.expected))))

    def _serve_peer(self, conn, peer):
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = LineReader(conn)
        try:
            hello = reader.read()
        except (OSError, ValueError):
            conn.close()
            return
        if not hello:
            conn.close()
            return
        err, ranks = self._check_hello(hello)
        if err:
            vlog.warning("core.py:812", "Rejected peer %s:%d: %s" % (peer[0], peer[1], err))
            try:
                _send(conn, {"error": err})
            finally:
                conn.close()
            return
        desc = ("node rank %d" % hello["node_rank"]) if self.mode == "tp" else ("DP ranks %s" % _ranges(ranks))
        with self.lock:
            for r in ranks:
                self.joined[r] = conn
            self.conns.append(conn)
        vlog.info("core.py:830", "%s joined from %s:%d (%d/%d peers)" % (
            desc, peer[0], peer[1], len(set(self.joined) & self.expected), len(self.expected)))
        _send(conn, {"ack": True})
        try:
            while True:
                msg = reader.read()
                if msg is None:
                    break
                if msg.get("loaded"):
                    with self.lock:
                        self.loaded.update(ranks)
                        if self.expected <= self.loaded:
                            self.peers_ready.set()
        except (OSError, ValueError):
            pass
        self.on_peer_lost(desc)

    def _check_hello(self, h):
        d = self.dep
        if h.get("mode") != self.mode:
            return "mode mismatch (peer %s, head %s)" % (h.get("mode"), self.mode), None
        if self.mode == "tp":
            if h.get("nnodes") != d.nnodes or h.get("world") != d.tp * d.pp:
                return "nnodes/world size mismatch (peer %s/%s, head %d/%d)" % (
                    h.get("nnodes"), h.get("world"), d.nnodes, d.tp * d.pp), None
            ranks = [int(h["node_rank"])]
        else:
            if h.get("dp_size") != d.dp or h.get("tp") != d.tp:
                return "data_parallel_size/tp mismatch (peer %s/%s, head %d/%d)" % (
                    h.get("dp_size"), h.get("tp"), d.dp, d.tp), None
            ranks = [int(r) for r in h.get("ranks", [])]
        with self.lock:
            bad = [r for r in ranks if r not in self.expected or r in self.joined]
        if bad or not ranks:
            return "unexpected or duplicate rank(s) %s" % bad, None
        return None, ranks

    def broadcast_ready(self):
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            try:
                _send(c, {"ready": True})
            except OSError:
                pass


class Follower(object):
    """Connects to the head (retrying until the ready timeout) and keeps the connection open."""

    def __init__(self, dep, on_head_lost):
        self.dep = dep
        self.on_head_lost = on_head_lost
        self.ready = threading.Event()
        if dep.kind == "tp_follower":
            self.mode = "tp"
            self.addr = (dep.master_addr, dep.master_port)
            self.hello = {"mode": "tp", "node_rank": dep.node_rank, "nnodes": dep.nnodes, "world": dep.tp * dep.pp}
        else:
            self.mode = "dp"
            self.addr = (dep.dp_address, dep.dp_rpc_port)
            self.hello = {"mode": "dp", "ranks": list(range(dep.dp_start_n, dep.dp_start_n + dep.dp_local_n)),
                          "dp_size": dep.dp, "tp": dep.tp}

    def connect(self, deadline):
        vlog.info("parallel_state.py:1139", "Connecting to %s %s:%d" % (
            "master" if self.mode == "tp" else "DP head", self.addr[0], self.addr[1]))
        last = None
        while time.monotonic() < deadline:
            try:
                s = self._dial()
                s.settimeout(None)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                _send(s, self.hello)
                self.reader = LineReader(s)
                reply = self.reader.read()
                if reply is None:
                    raise OSError("connection closed by head")
                if reply.get("error"):
                    raise RuntimeError(reply["error"])
                self.sock = s
                vlog.info("parallel_state.py:1150", "Joined head %s:%d" % self.addr)
                return True
            except RuntimeError:
                raise
            except OSError as exc:
                if str(exc) != str(last):
                    vlog.info("parallel_state.py:1147", "Head %s:%d not reachable yet (%s), retrying" % (
                        self.addr[0], self.addr[1], exc))
                last = exc
                time.sleep(0.2)
        return False

    def _dial(self):
        host = self.dep.host
        if host and host not in ("0.0.0.0", "::", "") and ":" not in host:
            try:
                return socket.create_connection(self.addr, timeout=2.0, source_address=(host, 0))
            except OSError as exc:
                if getattr(exc, "errno", None) not in (99,):  # EADDRNOTAVAIL: host is not a local address
                    raise
        return socket.create_connection(self.addr, timeout=2.0)

    def start_monitor(self):
        threading.Thread(target=self._monitor, daemon=True).start()

    def send_loaded(self):
        _send(self.sock, {"loaded": True})

    def _monitor(self):
        try:
            while True:
                msg = self.reader.read()
                if msg is None:
                    break
                if msg.get("ready"):
                    self.ready.set()
        except (OSError, ValueError):
            pass
        self.on_head_lost()


def _ranges(nums):
    if not nums:
        return "[]"
    out = []
    start = prev = nums[0]
    for n in nums[1:]:
        if n == prev + 1:
            prev = n
            continue
        out.append(str(start) if start == prev else "%d-%d" % (start, prev))
        start = prev = n
    out.append(str(start) if start == prev else "%d-%d" % (start, prev))
    return "[" + ", ".join(out) + "]"


def engine_ready_timeout():
    try:
        return float(os.environ.get("VLLM_ENGINE_READY_TIMEOUT_S", "600"))
    except ValueError:
        return 600.0
