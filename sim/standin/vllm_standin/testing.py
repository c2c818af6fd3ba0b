"""Helpers to run the stand-in as a subprocess (used by tests/unit/sim and usable by other test suites)."""
import http.client
import os
import random
import socket
import subprocess
import sys
import time

STANDIN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VLLM_BIN = os.path.join(STANDIN_DIR, "bin", "vllm")


def loopback_ip():
    return "127.0.%d.%d" % (random.randint(1, 250), random.randint(2, 250))


def free_port(host="127.0.0.1"):
    s = socket.socket()
    s.bind((host, 0))
    port = s.getsockname()[1]
    s.close()
    return port


def fast_env(**extra):
    env = dict(os.environ)
    env.update({"VLLM_STANDIN_LOAD_S": "0", "VLLM_STANDIN_TTFT_MS": "5", "VLLM_STANDIN_ITL_MS": "1",
                "VLLM_STANDIN_DEAD_GRACE_S": "0.5", "VLLM_ENGINE_READY_TIMEOUT_S": "20",
                "PYTHONUNBUFFERED": "1"})
    for k in [k for k in env if k.startswith("VLLM_STANDIN_TOOL_FAULT") or k in ("VLLM_API_KEY", "VLLM_STANDIN_FAULT")]:
        if k not in extra:
            env.pop(k, None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _die_with_parent():
    """Linux: SIGTERM this stand-in when the process that started it exits (pytest-forked test children,
    as ansible-test units runs them, end with os._exit and never run fixture teardown)."""
    try:
        import ctypes
        import signal
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Proc(object):
    """A running `vllm serve` stand-in; output goes to a log file readable with .log()."""

    def __init__(self, args, env=None, log_path=None):
        self.log_path = log_path or "/tmp/vllm-standin-%d-%d.log" % (os.getpid(), random.randint(0, 1 << 30))
        self.fh = open(self.log_path, "wb")
        self.p = subprocess.Popen([sys.executable, VLLM_BIN] + list(args), stdout=self.fh, stderr=subprocess.STDOUT,
                                  env=env or fast_env(), preexec_fn=_die_with_parent)

    def log(self):
        with open(self.log_path, "rb") as fh:
            return fh.read().decode("utf-8", "replace")

    def wait(self, timeout=20):
        return self.p.wait(timeout)

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(5)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(5)
        self.fh.close()
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


def http_status(host, port, path="/health", timeout=1.0):
    """HTTP status of GET path, or None when nothing listens."""
    try:
        c = http.client.HTTPConnection(host, port, timeout=timeout)
        c.request("GET", path)
        r = c.getresponse()
        r.read()
        c.close()
        return r.status
    except OSError:
        return None


def wait_status(host, port, want=200, timeout=15.0, proc=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = http_status(host, port)
        if st == want:
            return True
        if proc is not None and proc.p.poll() is not None:
            return False
        time.sleep(0.05)
    return False
