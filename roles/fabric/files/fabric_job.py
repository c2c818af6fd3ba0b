# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fabric rehearsal job: runs inside the pulled serving image on every node of one deployment.

Usage: ``python3 fabric_job.py SPEC.json --out RESULT.json`` (the spec is built on the controller by
``plugins/plugin_utils/fabric/specs.py`` from the plan). Standard library, plus torch when the image has it.

Phases, all bounded by the spec's ``timeout_s``:
1. interfaces (every ``*_SOCKET_IFNAME`` exists and carries this node's address) and names (every name the plan
   uses, resolved here);
2. ports: a listener on each of this node's planned ports (bound to the node's address) answers a one-line
   handshake, and this node connects to every peer's ports (a TCP connect from the other side); the head's
   master-port listener is also the start barrier: it sends ``GO`` once every peer has connected, so nobody
   dials the torch rendezvous while the listener still holds that port;
3. provenance: vLLM, torch and its CUDA / HIP build read in this image; with ``image_check`` in the spec
   (kimi_k3_vllm_version: image) the image's own ``vllm serve`` parser judges the node's argv and its vllm/envs.py
   the plan's VLLM_* names (before the timeout's clock starts, like provenance);
4. collective: one torch.distributed group with the plan's layout (one process per local rank, each killed at
   the deadline), an all-reduce and an all-to-all at the plan's sizes, pairwise send/recv between node leaders;
   "not run: no torch in image" where torch is absent;
5. expert-parallel kernel tests (DeepEP / MoRI) where the image carries them, else what was not tested.

The result is one JSON document (``--out``, and the last stdout line prefixed ``FABRIC_RESULT``).
"""
from __future__ import absolute_import, division, print_function

import argparse
import array
import errno
import fcntl
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time

PROTOCOL = "kimi-k3-fabric/1"
HELLO = "KIMIFAB1"
SIOCGIFCONF = 0x8912
GO_WAIT_S = 2.0
RESULT_PREFIX = "FABRIC_RESULT "
# Lines the job prints as it goes: the role's wait shows PROGRESS lines; a rank's STAGE lines tell its parent where it
# was when it had to be killed.
PROGRESS_PREFIX = "FABRIC_PROGRESS "
STAGE_PREFIX = "FABRIC_STAGE "
RANK_KEYS = ("local_rank", "rank", "status", "stage", "phase", "peer", "attempts", "join_s", "error", "stderr")
# A rank reports by the deadline; its parent kills it this much later (a report is worth more than a kill).
KILL_GRACE_S = 5.0
# Backoff between two rendezvous attempts: doubling from the first to the cap.
BACKOFF_FIRST_S = 0.5
BACKOFF_CAP_S = 5.0
# No attempt is started with less time than this left (it could not connect anyway).
MIN_ATTEMPT_S = 1.0
# A busy or slow peer refuses (listener not up yet), resets (backlog full, store restarting) or times out: worth
# another attempt inside the deadline. Anything else (a bad address, a library error) is final at once.
RETRY_ERRNOS = (errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.ETIMEDOUT, errno.EPIPE,
                errno.EADDRINUSE)
RETRY_WORDS = ("connection refused", "connection reset", "reset by peer", "timed out", "timeout", "broken pipe",
               "address already in use", "failed to connect")
JOINED_KEY = "kimi-k3-fabric/joined/%d"


def progress(text, stream=None):
    """One progress line on stdout, flushed at once (the container's log is what the role's wait reads)."""
    stream = stream or sys.stdout
    stream.write(PROGRESS_PREFIX + text + "\n")
    stream.flush()


def _line(sock, limit=512):
    """One newline-terminated line from ``sock`` (without the newline); '' on EOF."""
    data = b""
    while not data.endswith(b"\n") and len(data) < limit:
        chunk = sock.recv(1)
        if not chunk:
            break
        data += chunk
    return data.decode("utf-8", "replace").strip()


# ----------------------------------------------------------------------------- interfaces and names


def ipv4_addresses(count=256):
    """{interface: [IPv4 address, ...]} from SIOCGIFCONF (every address, aliases included)."""
    size = 40 if struct.calcsize("P") == 8 else 32  # sizeof(struct ifreq)
    buf = array.array("B", b"\0" * (size * count))
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        out = fcntl.ioctl(sock.fileno(), SIOCGIFCONF, struct.pack("iL", size * count, buf.buffer_info()[0]))
    finally:
        sock.close()
    raw = buf.tobytes()[:struct.unpack("iL", out)[0]]
    result = {}
    for offset in range(0, len(raw), size):
        name = raw[offset:offset + 16].split(b"\0", 1)[0].decode("ascii", "replace").split(":", 1)[0]
        result.setdefault(name, []).append(socket.inet_ntoa(raw[offset + 20:offset + 24]))
    return result


def ipv6_addresses(path="/proc/net/if_inet6"):
    """{interface: [IPv6 address, ...]} from /proc/net/if_inet6 ({} where absent)."""
    result = {}
    try:
        with open(path) as handle:
            for row in handle:
                parts = row.split()
                if len(parts) >= 6:
                    packed = bytes(bytearray.fromhex(parts[0]))
                    result.setdefault(parts[5], []).append(socket.inet_ntop(socket.AF_INET6, packed))
    except (IOError, OSError, ValueError):
        pass
    return result


def interface_names():
    try:
        return sorted(name for _index, name in socket.if_nameindex())
    except (OSError, AttributeError):
        return []


def carries(ifname, address, addresses):
    """Whether ``ifname`` carries ``address`` (loopback carries all of 127.0.0.0/8, as Linux routes it)."""
    if address in addresses.get(ifname, []):
        return True
    return ifname == "lo" and address.startswith("127.") and "127.0.0.1" in addresses.get("lo", [])


def interface_checks(spec, addresses=None, names=None):
    """One entry per ``*_SOCKET_IFNAME`` of the spec: exists, carries the node's address, what does carry it."""
    addresses = addresses if addresses is not None else _all_addresses()
    names = names if names is not None else interface_names()
    address = spec["address"]
    holders = sorted(i for i in addresses if carries(i, address, addresses))
    checks = []
    for variable in sorted(spec.get("ifnames") or {}):
        listed = spec["ifnames"][variable]
        listed = [listed] if isinstance(listed, str) else list(listed)
        exists = [i for i in listed if i in names or i in addresses]
        ok = any(carries(i, address, addresses) for i in exists)
        checks.append({"variable": variable, "ifnames": listed, "missing": [i for i in listed if i not in exists],
                       "carries_address": ok, "address": address,
                       "interface_addresses": sorted(a for i in exists for a in addresses.get(i, [])),
                       "address_on": holders, "status": "ok" if ok else "failed"})
    return checks


def _all_addresses():
    merged = {}
    for table in (ipv4_addresses(), ipv6_addresses()):
        for name, addrs in table.items():
            merged.setdefault(name, []).extend(addrs)
    return merged


def resolve_names(names):
    """{name: {"addresses": [...], "error": None | text}} as this node's resolver answers."""
    answers = {}
    for name in names:
        try:
            infos = socket.getaddrinfo(name, None, 0, socket.SOCK_STREAM)
            found = []
            for info in infos:
                if info[4][0] not in found:
                    found.append(info[4][0])
            answers[name] = {"addresses": found, "error": None}
        except (socket.gaierror, UnicodeError) as exc:
            answers[name] = {"addresses": [], "error": str(exc)}
    return answers


# ----------------------------------------------------------------------------- ports


class Listener(object):
    """One planned port of this node: bound to the node's address, answers ``KIMIFAB1 <host> <port>``."""

    def __init__(self, host, address, entry, expected_peers, barrier=False):
        self.host, self.address, self.entry = host, address, entry
        self.expected = set(expected_peers)
        self.seen = set()
        self.barrier = barrier
        self.waiting = []
        self.error = None
        self.sock = None
        self.lock = threading.Lock()
        self.done = threading.Event()

    def bind(self):
        family = socket.AF_INET6 if ":" in self.address else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.address, self.entry["port"]))
            sock.listen(64)
        except (OSError, socket.error) as exc:
            sock.close()
            self.error = _bind_error(exc, self.address, self.entry["port"])
            self.done.set()
            return False
        sock.settimeout(0.2)
        self.sock = sock
        if not self.expected:
            self.done.set()
        return True

    def serve(self, deadline):
        while self.sock is not None and not self.done.is_set() and time.time() < deadline:
            try:
                conn, _peer = self.sock.accept()
            except socket.timeout:
                continue
            except (OSError, socket.error):
                break
            self._answer(conn)
        self.release("go")

    def _answer(self, conn):
        conn.settimeout(5)
        try:
            words = _line(conn).split()
            if len(words) < 2 or words[0] != HELLO:
                conn.close()
                return
            conn.sendall(("%s %s %d\n" % (HELLO, self.host, self.entry["port"])).encode("utf-8"))
        except (OSError, socket.error):
            conn.close()
            return
        with self.lock:
            self.seen.add(words[1])
            if self.barrier:
                self.waiting.append(conn)
            else:
                conn.close()
            if self.expected <= self.seen:
                self.done.set()

    def release(self, word):
        """Close the port; barrier connections get ``word`` first (the peers may now dial the rendezvous)."""
        with self.lock:
            for conn in self.waiting:
                try:
                    conn.sendall((word + "\n").encode("utf-8"))
                except (OSError, socket.error):
                    pass
                conn.close()
            self.waiting = []
            if self.sock is not None:
                self.sock.close()
                self.sock = None
        self.done.set()

    def report(self):
        return {"port": self.entry["port"], "name": self.entry["name"], "address": self.address,
                "bound": self.error is None, "error": self.error,
                "peers_seen": sorted(self.seen), "peers_missing": sorted(self.expected - self.seen)}


def _bind_error(exc, address, port):
    code = getattr(exc, "errno", None)
    if code == errno.EADDRINUSE:
        return "port %d is already in use on %s (another process listens there)" % (port, address)
    if code == errno.EADDRNOTAVAIL:
        return "address %s is not on this node (cannot bind %s:%d)" % (address, address, port)
    return "cannot bind %s:%d: %s" % (address, port, exc)


def connect_pair(me, target, entry, deadline, barrier=False):
    """TCP connect from this node to ``target``'s planned port until it answers or ``deadline`` passes."""
    started, last = time.time(), "no attempt"
    while time.time() < deadline:
        try:
            return _handshake(me, target, entry, deadline, barrier, started)
        except socket.timeout:
            last = "timeout"
        except (OSError, socket.error) as exc:
            last = _connect_error(exc)
            time.sleep(0.2)
    return {"from": me, "to": target["host"], "address": target["address"], "port": entry["port"],
            "name": entry["name"], "status": last if last in ("refused", "unreachable", "timeout") else "error",
            "connect_ms": None, "detail": "no answer within the timeout (last: %s)" % last, "go": False}


def _connect_error(exc):
    code = getattr(exc, "errno", None)
    if code == errno.ECONNREFUSED:
        return "refused"
    if code in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return "unreachable"
    if code == errno.ETIMEDOUT:
        return "timeout"
    return str(exc)


def _handshake(me, target, entry, deadline, barrier, started):
    t0 = time.time()
    sock = socket.create_connection((target["address"], entry["port"]), timeout=max(0.5, min(5, deadline - t0)))
    connect_ms = (time.time() - t0) * 1000.0
    try:
        sock.sendall(("%s %s\n" % (HELLO, me)).encode("utf-8"))
        words = _line(sock).split()
        answered = words[1] if len(words) >= 2 and words[0] == HELLO else None
        go = False
        if barrier and answered == target["host"]:
            sock.settimeout(max(0.5, deadline - time.time() + GO_WAIT_S))
            go = _line(sock) == "go"
    finally:
        sock.close()
    status = "ok" if answered == target["host"] else "wrong_peer"
    detail = ("answered by %s" % answered) if answered else "no handshake (another program listens there)"
    return {"from": me, "to": target["host"], "address": target["address"], "port": entry["port"],
            "name": entry["name"], "status": status, "connect_ms": round(connect_ms, 3),
            "detail": None if status == "ok" else detail, "go": go, "waited_s": round(time.time() - started, 3)}


def port_phase(spec, deadline):
    """Listeners on this node's ports, connects to every peer's ports; the master port is the start barrier."""
    me, nodes = spec["host"], spec["nodes"]
    mine = [n for n in nodes if n["host"] == me][0]
    peers = [n["host"] for n in nodes if n["host"] != me]
    listeners = [Listener(me, spec["address"], e, peers, barrier=_is_barrier(spec, mine, e)) for e in mine["ports"]]
    threads = []
    for lst in listeners:
        if lst.bind():
            threads.append(_start(lst.serve, deadline))
    pairs, lock = [], threading.Lock()

    def dial(target, entry):
        result = connect_pair(me, target, entry, deadline, barrier=_is_barrier(spec, target, entry))
        with lock:
            pairs.append(result)

    dialers = [_start(dial, n, e) for n in nodes if n["host"] != me for e in n["ports"]]
    for thread in dialers + threads:
        thread.join(max(0.1, deadline - time.time() + GO_WAIT_S + 1))
    for lst in listeners:
        lst.release("go")
    pairs.sort(key=lambda p: (p["to"], p["port"]))
    return [lst.report() for lst in listeners], pairs


def _is_barrier(spec, node, entry):
    return node["host"] == spec["master_host"] and entry["port"] == spec["master_port"]


def _start(target, *args):
    thread = threading.Thread(target=target, args=args)
    thread.daemon = True
    thread.start()
    return thread


# ----------------------------------------------------------------------------- provenance


def provenance(spec, runner=None):
    """vLLM / torch versions and torch's CUDA / HIP build, read in this image."""
    runner = runner or _run
    info = {"python": "%d.%d.%d" % sys.version_info[:3], "vllm": None, "vllm_source": None, "torch": None,
            "torch_cuda": None, "torch_hip": None, "collect_env": None, "errors": []}
    try:
        import vllm  # pylint: disable=import-error
        info["vllm"], info["vllm_source"] = str(vllm.__version__), "vllm.__version__"
    except Exception as exc:  # pylint: disable=broad-except  # any import failure is a finding, not a crash
        info["errors"].append("import vllm: %s" % str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
        code, out = runner(["vllm", "--version"], 30)
        if code == 0 and out.strip():
            info["vllm"], info["vllm_source"] = out.strip().splitlines()[-1].strip(), "vllm --version"
    build = torch_build_info()
    if build is not None:
        info["torch"], info["torch_cuda"], info["torch_hip"] = build
    if spec.get("collect_env"):
        code, out = runner(["vllm", "collect-env"], 120)
        info["collect_env"] = _collect_env_summary(out) if code == 0 else None
    return info


def _collect_env_summary(text, keys=("PyTorch version", "Is debug build", "CUDA used to build PyTorch",
                                     "ROCM used to build PyTorch", "vLLM Version", "Python version",
                                     "GPU models and configuration", "Nvidia driver version")):
    summary = {}
    for row in text.splitlines():
        if ":" in row:
            key, value = row.split(":", 1)
            if key.strip() in keys:
                summary[key.strip()] = value.strip()
    return summary


def _run(argv, timeout):
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, check=False)
        return proc.returncode, proc.stdout.decode("utf-8", "replace")
    except (OSError, subprocess.SubprocessError) as exc:
        return 127, str(exc)


def torch_build_info(find_spec=None):
    """(torch.__version__, torch.version.cuda, torch.version.hip) read from torch/version.py without importing
    torch (seconds per import; only the rank processes need it); None when the image has no torch."""
    import importlib.util
    spec = (find_spec or importlib.util.find_spec)("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
    names = {}
    try:
        with open(path) as handle:
            exec(compile(handle.read(), path, "exec"), names)  # nosec B102 - the image's own generated constants
    except Exception:  # pylint: disable=broad-except  # an unusual torch: import it after all
        torch = _torch()
        return None if torch is None else (str(torch.__version__), getattr(torch.version, "cuda", None),
                                           getattr(torch.version, "hip", None))
    return str(names.get("__version__")), names.get("cuda"), names.get("hip")


def _torch():
    try:
        import torch  # pylint: disable=import-error
        return torch
    except Exception:  # pylint: disable=broad-except  # absent or broken: the collective says so
        return None


# ----------------------------------------------------------------------------- collective (torch)


def collective_phase(spec, deadline, torch_present=None):
    """One process per local rank (killed at the deadline); their reports merged into this node's result."""
    present = torch_build_info() is not None if torch_present is None else torch_present
    if not present:
        return {"status": "not_run", "reason": "no torch in image", "backend": spec["backend"]}
    budget = deadline - time.time()
    if budget < 1:
        return {"status": "not_run", "reason": "the port phase used the whole timeout", "backend": spec["backend"]}
    progress("collective: %d local rank(s) join %s over %s, %.0fs left" % (
        spec["local_ranks"], rendezvous_peer(spec), spec["backend"], budget))
    procs = [_spawn_worker(spec, local, deadline) for local in range(spec["local_ranks"])]
    reports = [_collect_worker(proc, local, deadline) for local, proc in enumerate(procs)]
    return _merge_workers(spec, reports)


def rendezvous_peer(spec):
    """The peer every rank dials first: the head's store (torch's TCPStore on the master address and port)."""
    return "%s (%s:%d)" % (spec["master_host"], spec["master_addr"], spec["master_port"])


def worker_command(spec, local_rank, deadline, base_env, executable=None):
    """(argv, env) of one rank process. The env is the container's (the plan's NCCL_* / RCCL_* / GLOO_* settings
    reach the library unchanged) plus the spec, so the rank reads nothing else."""
    env = dict(base_env)
    env["KIMI_FABRIC_SPEC"] = json.dumps(spec, sort_keys=True)
    if spec["backend"] == "nccl":
        # Without it NCCL says only "unhandled system error"; its WARN lines name the cause (errno 524 and the like).
        env.setdefault("NCCL_DEBUG", "WARN")
    # The absolute deadline, not a budget: the rank's clock then does not restart after its torch import (seconds,
    # tens of seconds on a loaded machine), so it reports before its parent kills it.
    argv = [executable or sys.executable, os.path.abspath(__file__), "--worker", str(local_rank),
            "--deadline", "%.3f" % deadline]
    return argv, env


def _spawn_worker(spec, local_rank, deadline):
    argv, env = worker_command(spec, local_rank, deadline, os.environ)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def _collect_worker(proc, local_rank, deadline):
    try:
        out, err = proc.communicate(timeout=max(1.0, deadline - time.time() + KILL_GRACE_S))
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return killed_report(out, err, local_rank)
    return parse_worker_output(out, err, proc.returncode, local_rank)


def killed_report(out, err, local_rank):
    """A rank killed at the deadline: where it was, from its last ``FABRIC_STAGE <phase> <peer>`` line."""
    report = {"local_rank": local_rank, "status": "timeout", "stage": "killed at the deadline", "phase": None,
              "peer": None, "stderr": output_tail(out, err)}
    text = out.decode("utf-8", "replace") if isinstance(out, bytes) else (out or "")
    stages = [r[len(STAGE_PREFIX):].split(" ", 1) for r in text.splitlines() if r.startswith(STAGE_PREFIX)]
    if stages:
        report["phase"] = stages[-1][0]
        report["peer"] = stages[-1][1] if len(stages[-1]) > 1 else None
    return report


def output_tail(out, err):
    """The last lines a rank printed besides its report: NCCL writes its WARN lines to stdout, Python to stderr."""
    rows = [r for r in _tail(out, 1000).splitlines() if not r.startswith((RESULT_PREFIX, STAGE_PREFIX))]
    return _tail("\n".join(rows + _tail(err).splitlines()))


def parse_worker_output(out, err, returncode, local_rank):
    """A rank's report: its last ``FABRIC_RESULT {...}`` line, else a failure with the exit status and stderr's tail
    (a rank killed by NCCL's abort or a segfault prints no report; a garbled line is a failure, not a crash)."""
    rows = (out.decode("utf-8", "replace") if isinstance(out, bytes) else (out or "")).splitlines()
    output = output_tail(out, err)
    for row in reversed(rows):
        if row.startswith(RESULT_PREFIX):
            try:
                report = json.loads(row[len(RESULT_PREFIX):])
            except ValueError as exc:
                return {"local_rank": local_rank, "status": "failed", "stage": "unreadable report (%s)" % exc,
                        "stderr": output}
            if isinstance(report, dict):
                if "status" not in report:
                    return {"local_rank": local_rank, "status": "failed", "stage": "unreadable report (no status)",
                            "stderr": output}
                if report.get("status") != "ok" and output:
                    report.setdefault("stderr", output)
                return report
    return {"local_rank": local_rank, "status": "failed", "stage": "exited %s without a report" % returncode,
            "stderr": output}


def _tail(data, lines=12):
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else (data or "")
    return "\n".join(text.strip().splitlines()[-lines:])


def _merge_workers(spec, reports):
    bad = [r for r in reports if r.get("status") != "ok"]
    merged = {"status": bad[0]["status"] if bad else "ok", "backend": spec["backend"],
              "world_size": spec["world_size"], "local_ranks": spec["local_ranks"],
              "ranks": [dict((k, r.get(k)) for k in RANK_KEYS if k in r) for r in reports]}
    if bad:
        merged["reason"] = rank_reason(bad[0])
        merged["phase"], merged["peer"] = bad[0].get("phase"), bad[0].get("peer")
    # Every rank reads the library's version before it joins, so a group that hangs still reports it.
    library = [r["library"] for r in reports if isinstance(r.get("library"), dict)]
    if library:
        merged["library"] = library[0]
    lead = [r for r in reports if r.get("local_rank") == 0 and r.get("status") == "ok"]
    if lead:
        for key in ("join_s", "latency_us", "all_reduce", "all_to_all", "pairs"):
            merged[key] = lead[0].get(key)
    return merged


def rank_reason(report):
    """One line for a failed rank; its phase and peer are kept beside it (the report names them)."""
    what = report.get("error") if report.get("phase") and report.get("error") else None
    return "local rank %s: %s" % (report.get("local_rank"), what or report.get("stage") or report.get("error"))


def stage(report, name, peer=None, stream=None):
    """Note the rank's stage in its report and on stdout (its parent reads the last one if it has to kill it)."""
    report["stage"], report["phase"], report["peer"] = name, PHASES.get(name, name), peer
    stream = stream or sys.stdout
    stream.write(STAGE_PREFIX + report["phase"] + (" " + peer if peer else "") + "\n")
    stream.flush()


# The rank's stages and the phase each one is reported as.
PHASES = {"import torch": "import", "rendezvous": "rendezvous", "join": "join", "measure": "collective",
          "pairs": "pairs"}


def worker_main(local_rank, deadline):
    """One rank: join, measure, report on stdout (``FABRIC_RESULT {...}``)."""
    spec = json.loads(os.environ["KIMI_FABRIC_SPEC"])
    rank = spec["node_rank"] * spec["local_ranks"] + local_rank
    report = {"local_rank": local_rank, "rank": rank, "status": "failed"}
    try:
        stage(report, "import torch")
        import torch  # pylint: disable=import-error
        import torch.distributed as dist  # pylint: disable=import-error
        if spec["backend"] == "nccl":
            report["library"] = collective_library(torch)
        device = _device(torch, spec, local_rank)
        report["join_s"], report["attempts"] = _join(torch, dist, spec, rank, deadline, device, report)
        stage(report, "measure", group_peer(spec))
        report.update(_measure(torch, dist, spec, rank, device))
        stage(report, "pairs", group_peer(spec))
        report["pairs"] = _leader_pairs(torch, dist, spec, rank, local_rank, device)
        report["status"], report["stage"], report["phase"], report["peer"] = "ok", None, None, None
        dist.destroy_process_group()
    except JoinFailure as exc:
        report.update(phase=exc.phase, peer=exc.peer, attempts=exc.attempts, error=str(exc)[:600],
                      status="timeout" if is_timeout(exc.cause) else "failed")
    except Exception as exc:  # pylint: disable=broad-except  # every failure is reported, never a traceback only
        report["error"] = ("%s: %s" % (type(exc).__name__, exc))[:600]
        report["status"] = "timeout" if is_timeout(exc) else "failed"
    sys.stdout.write(RESULT_PREFIX + json.dumps(report) + "\n")
    sys.stdout.flush()
    return 0


def is_timeout(exc):
    text = str(exc).lower()
    return "timed out" in text or "timeout" in text or isinstance(exc, socket.timeout)


def nccl_version_text(value):
    """torch.cuda.nccl.version() as 'MAJOR.MINOR.PATCH': a tuple on current torch; an int on older torch
    (NCCL_VERSION_CODE: major x 10000 + minor x 100 + patch from NCCL 2.9 on, major x 1000 + ... before);
    None when it is neither."""
    if isinstance(value, (tuple, list)) and len(value) >= 3 and all(isinstance(p, int) for p in value[:3]):
        return "%d.%d.%d" % tuple(value[:3])
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        if value >= 20900:
            return "%d.%d.%d" % (value // 10000, value // 100 % 100, value % 100)
        return "%d.%d.%d" % (value // 1000, value // 100 % 10, value % 100)
    return None


def collective_library(torch):
    """{"library": nccl | rccl, "version", "error"} of the library torch's "nccl" backend runs (RCCL on ROCm)."""
    library = "rccl" if getattr(getattr(torch, "version", None), "hip", None) else "nccl"
    try:
        raw = torch.cuda.nccl.version()
    except Exception as exc:  # pylint: disable=broad-except  # a build without NCCL: the version is unknown
        return {"library": library, "version": None, "error": ("%s: %s" % (type(exc).__name__, exc))[:200]}
    text = nccl_version_text(raw)
    return {"library": library, "version": text, "error": None if text else "unreadable version %r" % (raw,)}


def device_choice(spec, local_rank):
    """("cuda", local_rank): one GPU per rank for NCCL / RCCL; ("cpu", None) for gloo."""
    return ("cuda", local_rank) if spec["backend"] == "nccl" else ("cpu", None)


def _device(torch, spec, local_rank):
    kind, index = device_choice(spec, local_rank)
    if kind == "cuda":
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


def init_arguments(spec, rank, budget):
    """torch.distributed.init_process_group's arguments (``timeout_s`` becomes its timedelta; NCCL also gets
    ``device_id``, which binds the communicator to the rank's GPU at once instead of at the first collective)."""
    return {"backend": spec["backend"], "rank": rank, "world_size": spec["world_size"],
            "init_method": "tcp://%s:%d" % (_url_host(spec["master_addr"]), spec["master_port"]),
            "timeout_s": max(1.0, budget), "device_id": spec["backend"] == "nccl"}


class JoinFailure(Exception):
    """A rank gave up joining: in which phase, waiting for which peer, after how many attempts and seconds."""

    def __init__(self, phase, peer, attempts, waited_s, cause):
        self.phase, self.peer, self.attempts, self.waited_s, self.cause = phase, peer, attempts, waited_s, cause
        Exception.__init__(self, "%s with %s failed after %d attempt(s) in %.1fs: %s: %s" % (
            phase, peer, attempts, waited_s, type(cause).__name__, str(cause).strip().splitlines()[0][:300]
            if str(cause).strip() else ""))


def retryable(exc):
    """Whether ``exc`` is a busy or slow peer (refused, reset, timed out) rather than a final error."""
    if getattr(exc, "errno", None) in RETRY_ERRNOS or isinstance(exc, (ConnectionError, socket.timeout)):
        return True
    text = str(exc).lower()  # torch's DistNetworkError / DistStoreError carry the cause only in their text
    return any(word in text for word in RETRY_WORDS)


def retry_until(attempt, deadline, phase, peer, clock=time.time, sleep=time.sleep, note=None):
    """(``attempt(seconds left)``'s value, attempts): tried again after a refused, reset or timed-out connection,
    with backoff, until the deadline; a JoinFailure naming ``phase`` and ``peer`` otherwise."""
    began, tries, delay = clock(), 0, BACKOFF_FIRST_S
    while True:
        tries += 1
        try:
            return attempt(max(MIN_ATTEMPT_S, deadline - clock())), tries
        except Exception as exc:  # pylint: disable=broad-except  # judged here: retried or reported with its phase
            left = deadline - clock()
            if not retryable(exc) or left < delay + MIN_ATTEMPT_S:
                raise JoinFailure(phase, peer, tries, clock() - began, exc)
            (note or _stderr_note)("%s: attempt %d with %s: %s: %s; again in %.1fs" % (
                phase, tries, peer, type(exc).__name__, str(exc).strip()[:200], delay))
            sleep(delay)
            delay = min(delay * 2, BACKOFF_CAP_S)


def _stderr_note(text):
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def open_store(dist, spec, rank, seconds):
    """The rendezvous store: rank 0 serves it on the master address and port, every other rank dials it. Nobody
    waits here for the others (wait_for_workers=False): the group's join below waits for them."""
    import datetime
    return dist.TCPStore(spec["master_addr"], spec["master_port"], spec["world_size"], rank == 0,
                         timeout=datetime.timedelta(seconds=seconds), wait_for_workers=False)


def group_peer(spec):
    """The peers of a group-wide step: every node of the deployment."""
    return "the group (%s)" % ", ".join("%s %s" % (n["host"], n["address"]) for n in spec["nodes"])


def missing_peers(store, spec):
    """The nodes whose ranks never reached the store (each rank marks itself there before the join); None when
    the store cannot say (the head's rank, which serves it, is gone)."""
    missing = []
    try:
        for rank in range(spec["world_size"]):
            if not store.check([JOINED_KEY % rank]):
                node = spec["nodes"][rank // spec["local_ranks"]]
                missing.append("%s %s (rank %d)" % (node["host"], node["address"], rank))
    except Exception:  # pylint: disable=broad-except  # the store itself failed: the caller names the group
        return None
    return ", ".join(missing) or None


def _join(torch, dist, spec, rank, deadline, device, report, clock=time.time, sleep=time.sleep):
    """(seconds, rendezvous attempts): the store first (retried while the head is busy or slow), then the group,
    whose join waits for slow peers up to the deadline; a JoinFailure names the phase and the peer otherwise."""
    started = clock()
    peer = rendezvous_peer(spec)
    stage(report, "rendezvous", peer)
    store, tries = retry_until(lambda left: open_store(dist, spec, rank, left), deadline, "rendezvous", peer,
                               clock, sleep)
    stage(report, "join", group_peer(spec))
    try:
        store.set(JOINED_KEY % rank, spec["host"])
        kwargs = init_arguments(spec, rank, deadline - clock())
        kwargs.pop("init_method")
        kwargs["store"] = store
        _init_group(torch, dist, kwargs, device)
    except Exception as exc:  # pylint: disable=broad-except  # reported with the peers that never came
        raise JoinFailure("join", missing_peers(store, spec) or group_peer(spec), tries, clock() - started, exc)
    return round(clock() - started, 4), tries


def _init_group(torch, dist, kwargs, device):
    import datetime
    kwargs["timeout"] = datetime.timedelta(seconds=kwargs.pop("timeout_s"))
    if kwargs.pop("device_id"):
        kwargs["device_id"] = device
    dist.init_process_group(**kwargs)
    one = torch.ones(1, device=device)
    dist.all_reduce(one)  # NCCL connects lazily: the first collective is part of joining
    _sync(torch, device)


def _url_host(address):
    return "[%s]" % address if ":" in address else address


def _sync(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(torch, device, fn, iterations):
    """Median seconds of ``fn`` over ``iterations`` after one warm-up call."""
    fn()
    _sync(torch, device)
    times = []
    for _iteration in range(iterations):
        t0 = time.time()
        fn()
        _sync(torch, device)
        times.append(time.time() - t0)
    times.sort()
    return times[len(times) // 2]


def _measure(torch, dist, spec, rank, device):
    """Latency (4-byte all-reduce), all-reduce and all-to-all at the spec's sizes, with their results checked."""
    world, iters = spec["world_size"], spec["sizes"]["iterations"]
    small = torch.ones(1, device=device)
    latency = _timed(torch, device, lambda: dist.all_reduce(small), iters)
    numel = max(1, spec["sizes"]["all_reduce"] // 4)
    data = torch.full((numel,), float(rank + 1), device=device)
    work = data.clone()

    def all_reduce():
        work.copy_(data)
        dist.all_reduce(work)

    t_ar = _timed(torch, device, all_reduce, iters)
    expected = world * (world + 1) / 2.0
    ar_ok = bool(torch.all(work == expected).item())
    chunk = max(1, spec["sizes"]["all_to_all"] // 4 // world)
    send = torch.cat([torch.full((chunk,), float(rank * world + j), device=device) for j in range(world)])
    recv = torch.empty_like(send)
    t_a2a = _timed(torch, device, lambda: dist.all_to_all_single(recv, send), iters)
    want = torch.cat([torch.full((chunk,), float(i * world + rank), device=device) for i in range(world)])
    a2a_ok = bool(torch.equal(recv, want))
    return {"latency_us": round(latency * 1e6, 1),
            "all_reduce": _figures(numel * 4, t_ar, 2.0 * (world - 1) / world, ar_ok, expected),
            "all_to_all": _figures(chunk * 4 * world, t_a2a, float(world - 1) / world, a2a_ok, None)}


def _figures(nbytes, seconds, factor, correct, expected):
    algbw = nbytes / seconds / 1e9 if seconds > 0 else 0.0
    out = {"bytes": nbytes, "time_us": round(seconds * 1e6, 1), "algbw_gbps": round(algbw, 4),
           "busbw_gbps": round(algbw * factor, 4), "correct": correct}
    if expected is not None:
        out["expected_value"] = expected
    return out


def _leader_pairs(torch, dist, spec, rank, local_rank, device):
    """Send/recv between every two node leaders (local rank 0), one pair at a time in a fixed order."""
    nodes, per = spec["nodes"], spec["local_ranks"]
    results = []
    if local_rank == 0:
        me = rank // per
        for i in range(len(nodes)):
            for j in range(i + 1, len(nodes)):
                if me in (i, j):
                    res = _ping_pong(torch, dist, spec, i * per, j * per, me == i, device)
                    if res is not None:
                        results.append(dict(res, **{"from": nodes[i]["host"], "to": nodes[j]["host"]}))
    dist.barrier()
    return results


def _ping_pong(torch, dist, spec, a, b, leader, device):
    """Round-trip latency and one-way bandwidth between global ranks a and b, as seen by a (None on b)."""
    iters, peer = spec["sizes"]["iterations"], b if leader else a
    small = torch.zeros(1, device=device)
    big = torch.zeros(max(1, spec["sizes"]["pair"] // 4), device=device)

    def exchange(outbound, reply):
        """One round: the leader sends ``outbound`` and waits for ``reply``; its peer mirrors it."""
        if leader:
            dist.send(outbound, peer)
            dist.recv(reply, peer)
        else:
            dist.recv(outbound, peer)
            dist.send(reply, peer)

    t_rtt = _timed(torch, device, lambda: exchange(small, small), iters)
    t_bulk = _timed(torch, device, lambda: exchange(big, small), iters)
    if not leader:
        return None
    # Bytes over the whole bulk round (its one small acknowledgement included): a lower bound that noise in the
    # latency sample cannot inflate.
    return {"latency_us": round(t_rtt / 2.0 * 1e6, 1), "bytes": big.numel() * 4,
            "bandwidth_gbps": round(big.numel() * 4 / max(t_bulk, 1e-9) / 1e9, 4)}


# ----------------------------------------------------------------------------- expert-parallel kernels


def ep_kernel_phase(spec, deadline, runner=None, exists=os.path.exists):
    """DeepEP / MoRI's own tests where the image carries them; otherwise exactly what was not tested."""
    kernel = spec.get("ep_kernel")
    if not kernel:
        return None
    runner = runner or _run
    code, out = runner([sys.executable, "-c", "import %s" % kernel["module"]], 60)
    if code != 0:
        return {"backend": kernel["backend"], "status": "not_tested",
                "detail": "the image has no %s package (import %s failed: %s): the %s kernels were not tested"
                          % (kernel["module"], kernel["module"], _tail(out, 1), kernel["backend"])}
    tests = [p for p in kernel.get("tests") or [] if exists(p)]
    if not kernel.get("tests"):
        return {"backend": kernel["backend"], "status": "not_tested",
                "detail": "no test of its own is known for %s (FlashInfer ships none in its wheel): the %s dispatch "
                          "and combine were not tested" % (kernel["module"], kernel["backend"])}
    if not tests:
        return {"backend": kernel["backend"], "status": "not_tested",
                "detail": "%s is installed but its tests are not in the image (looked for %s): the %s dispatch "
                          "and combine were not tested" % (kernel["module"], ", ".join(kernel.get("tests") or []),
                                                           kernel["backend"])}
    budget = max(1, int(deadline - time.time()))
    command = [sys.executable, "-m", "pytest", "-x", "-q", tests[0]] if kernel.get("runner") == "pytest" \
        else [sys.executable, tests[0]]
    code, out = runner(["env", "MASTER_ADDR=%s" % spec["master_addr"], "MASTER_PORT=%d" % spec["master_port"],
                        "WORLD_SIZE=%d" % spec["nnodes"], "RANK=%d" % spec["node_rank"]] + command, budget)
    return {"backend": kernel["backend"], "status": "ok" if code == 0 else "failed", "test": tests[0],
            "detail": None if code == 0 else "exit %s: %s" % (code, _tail(out, 6))}


# ----------------------------------------------------------------------------- the image judges its own flags
# With kimi_k3_vllm_version: image (a development build such as the kimi-k3 images) the plan cannot know the image's
# release: the image's own `vllm serve` parser judges every node's final argv here, before any vLLM container starts.
# The parser is built as `vllm` builds it (vllm/entrypoints/cli/main.py: a FlexibleArgumentParser from
# vllm/utils/argparse_utils.py - vllm/utils/__init__.py before 0.28 - with the subcommands added;
# ServeSubcommand.subparser_init in vllm/entrypoints/cli/serve.py adds make_arg_parser's flags, from
# vllm/entrypoints/openai/cli_args.py, vllm/entrypoints/launchers/cli_args.py in 0.32), and ServeSubcommand.validate
# (validate_parsed_serve_args) runs after the parse, as main.py does before it dispatches. The same steps as the
# realparser stage (tests/realparser/parse_plans.py). The engine is never started. It runs in a child process: the
# import takes seconds to a minute, and a hang is cut at the spec's timeout_s.


def serve_cli():
    """(top-level parser, ServeSubcommand) of the image's vLLM, as `vllm serve` builds them."""
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser  # pylint: disable=import-error
    except ImportError:  # releases before the argparse helpers moved
        from vllm.utils import FlexibleArgumentParser  # pylint: disable=import-error
    from vllm.entrypoints.cli.serve import ServeSubcommand  # pylint: disable=import-error
    top = FlexibleArgumentParser(prog="vllm", description="vLLM CLI")
    subparsers = top.add_subparsers(required=False, dest="subparser")
    command = ServeSubcommand()
    command.subparser_init(subparsers)
    return top, command


def parse_argv(top, command, argv):
    """(accepted, message): argparse's own refusal line ("vllm serve: error: unrecognized arguments: --x") or
    validate()'s exception, never a SystemExit."""
    import contextlib
    import io
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = top.parse_args(["serve"] + list(argv))
            command.validate(args)
    except SystemExit as exc:
        lines = [row for row in err.getvalue().splitlines() if "error:" in row] or err.getvalue().splitlines()
        return False, (lines[-1].strip() if lines else "exit %s" % exc.code)
    except Exception as exc:  # pylint: disable=broad-except  # validate() raises TypeError/ValueError with the reason
        return False, ("%s: %s" % (type(exc).__name__, exc))[:600]
    return True, None


def unknown_env(names, known):
    """The plan's VLLM_* names the image's vllm/envs.py does not read (vLLM itself only logs such a name)."""
    return sorted(n for n in names if n.startswith("VLLM_") and n not in known)


def _platform():
    """The image's platform; where it resolves none (no accelerator visible) the CPU one, as vLLM's own `vllm bench`
    entry point does: the parser cannot be built without a platform, and which flags exist does not depend on it."""
    from vllm import platforms  # pylint: disable=import-error
    if platforms.current_platform.is_unspecified():
        from vllm.platforms.cpu import CpuPlatform  # pylint: disable=import-error
        platforms.current_platform = CpuPlatform()
    return type(platforms.current_platform).__name__


def image_check_main():
    """The child process: the image's version, its parser's verdict on the argv, the env names it does not know."""
    check = json.loads(os.environ["KIMI_FABRIC_SPEC"])["image_check"]
    report = {"status": "failed", "stage": "import vllm", "version": None}
    try:
        import vllm  # pylint: disable=import-error
        report["version"] = str(vllm.__version__)
        report["stage"] = "platform"
        report["platform"] = _platform()
        report["stage"] = "build the vllm serve parser"
        began = time.time()
        top, command = serve_cli()
        report["build_s"] = round(time.time() - began, 2)
        report["parser"] = "vllm.entrypoints.cli.serve.ServeSubcommand"
        report["stage"] = "parse"
        report["accepted"], report["error"] = parse_argv(top, command, check["argv"])
        report["stage"] = "env names"
        from vllm import envs  # pylint: disable=import-error
        known = set(getattr(envs, "environment_variables", None) or {})
        report["env_known"] = len(known)
        report["unknown_env"] = unknown_env(check.get("env_names") or [], known) if known else []
        report["status"], report["stage"] = "ok", None
    except Exception as exc:  # pylint: disable=broad-except  # reported with its stage, never a bare traceback
        report["error"] = ("%s: %s" % (type(exc).__name__, exc))[:600]
    sys.stdout.write(RESULT_PREFIX + json.dumps(report) + "\n")
    sys.stdout.flush()
    return 0


def image_check_command(spec, base_env, executable=None):
    """(argv, env) of the child: the container's env (the plan's VLLM_* settings reach the parser) plus the spec."""
    env = dict(base_env)
    env["KIMI_FABRIC_SPEC"] = json.dumps(spec, sort_keys=True)
    return [executable or sys.executable, os.path.abspath(__file__), "--image-check"], env


def parse_image_check(out, returncode, timeout_s=None):
    """The child's report: its last ``FABRIC_RESULT {...}`` line, else a failure with the exit status and the
    output's tail (``returncode`` None: killed at ``timeout_s``)."""
    text = out.decode("utf-8", "replace") if isinstance(out, bytes) else (out or "")
    for row in reversed(text.splitlines()):
        if row.startswith(RESULT_PREFIX):
            try:
                report = json.loads(row[len(RESULT_PREFIX):])
            except ValueError as exc:
                return {"status": "failed", "error": "unreadable report (%s)" % exc}
            if isinstance(report, dict):
                return report
    if returncode is None:
        return {"status": "timeout", "error": "the image's parser gave no verdict within %ss: %s" % (
            timeout_s, _tail(text, 3))}
    return {"status": "failed", "error": "exited %s without a report: %s" % (returncode, _tail(text, 6))}


def image_check_phase(spec, runner=None):
    """The image's own judgement of the argv and env names (None when the plan pinned a release)."""
    check = spec.get("image_check")
    if not check:
        return None
    argv, env = image_check_command(spec, os.environ)
    code, out = (runner or _run_with_env)(argv, env, float(check.get("timeout_s") or 180))
    return parse_image_check(out, code, check.get("timeout_s"))


def _run_with_env(argv, env, timeout):
    """(exit status or None when killed at ``timeout``, stdout and stderr together)."""
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=timeout,
                              check=False)
        return proc.returncode, proc.stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as exc:
        return None, (exc.stdout or b"").decode("utf-8", "replace")
    except (OSError, subprocess.SubprocessError) as exc:
        return 127, str(exc)


# ----------------------------------------------------------------------------- main


def interface_veto(spec, interfaces):
    """The collective's "not run" when a pinned interface fails: it would bind the wrong network (or none) and wait
    out the whole timeout for peers it cannot reach; the interface finding already says what to set."""
    failed = sorted(c["variable"] for c in interfaces if c["status"] != "ok")
    if not failed:
        return None
    return {"status": "not_run", "reason": "%s failed its interface check" % ", ".join(failed),
            "backend": spec["backend"]}


def run_job(spec):
    """Every phase in order; the whole result document."""
    began = time.time()
    result = {"protocol": PROTOCOL, "host": spec["host"], "deployment": spec["deployment"],
              "node_rank": spec["node_rank"], "address": spec["address"]}
    # First, as it imports torch (seconds): the timeout then counts from when every node can answer its peers.
    progress("provenance: reading vLLM and torch in the image")
    result["provenance"] = provenance(spec)
    # Also before the clock: building the image's parser imports vLLM's engine arguments (seconds to a minute).
    if spec.get("image_check"):
        progress("image check: the image's vllm serve parser judges the argv")
    result["image_check"] = image_check_phase(spec)
    started = time.time()
    marks = [("provenance", started - began)]
    deadline = started + float(spec["timeout_s"])
    port_deadline = started + float(spec["timeout_s"]) * float(spec.get("port_share", 0.5))
    result["interfaces"] = interface_checks(spec)
    result["names"] = resolve_names(spec.get("names") or [])
    progress("ports: listening on this node's ports and dialling every peer's, %.0fs" % (port_deadline - started))
    result["listen"], result["pairs"] = port_phase(spec, port_deadline)
    progress(ports_summary(result["pairs"]))
    marks.append(("ports", time.time() - started))
    result["collective"] = interface_veto(spec, result["interfaces"]) or collective_phase(spec, deadline)
    marks.append(("collective", time.time() - started - marks[-1][1]))
    result["ep_kernel"] = ep_kernel_phase(spec, deadline + float(spec.get("ep_timeout_s", 0)))
    result["duration_s"] = round(time.time() - began, 3)
    result["phases_s"] = dict((name, round(value, 3)) for name, value in marks)
    progress("done in %.0fs: collective %s" % (result["duration_s"], (result["collective"] or {}).get("status")))
    return result


def ports_summary(pairs):
    """The progress line after the port phase: how many peer ports answered, and the first that did not."""
    bad = [p for p in pairs if p["status"] != "ok"]
    line = "ports: %d of %d peer ports answered" % (len(pairs) - len(bad), len(pairs))
    if bad:
        line += " (%s:%d %s: %s)" % (bad[0]["to"], bad[0]["port"], bad[0]["name"], bad[0]["status"])
    return line


def main(argv=None):
    parser = argparse.ArgumentParser(description="Kimi-K3 fabric rehearsal job (one node)")
    parser.add_argument("spec", nargs="?")
    parser.add_argument("--out")
    parser.add_argument("--worker", type=int)
    parser.add_argument("--deadline", type=float)
    parser.add_argument("--image-check", action="store_true")
    args = parser.parse_args(argv)
    if args.image_check:
        return image_check_main()
    if args.worker is not None:
        return worker_main(args.worker, args.deadline or time.time() + 60.0)
    with open(args.spec) as handle:
        spec = json.load(handle)
    if spec.get("protocol") != PROTOCOL:
        sys.stderr.write("fabric_job: spec protocol %r, this job speaks %s\n" % (spec.get("protocol"), PROTOCOL))
        return 2
    try:
        result = run_job(spec)
    except Exception as exc:  # pylint: disable=broad-except  # the controller gets the defect, not a bare exit code
        import traceback
        result = {"protocol": PROTOCOL, "host": spec.get("host"), "deployment": spec.get("deployment"),
                  "error": "%s: %s | %s" % (type(exc).__name__, exc, " / ".join(
                      traceback.format_exc().strip().splitlines()[-4:]))}
    text = json.dumps(result, sort_keys=True)
    if args.out:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as handle:
            handle.write(text + "\n")
        os.rename(tmp, args.out)
    sys.stdout.write(RESULT_PREFIX + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
