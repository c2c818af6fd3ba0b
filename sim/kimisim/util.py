"""Process, file, hashing and waiting helpers."""
import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

try:
    import yaml
except ImportError:  # pragma: no cover - install.sh installs python3-yaml
    yaml = None

from kimisim.settings import RUN, VERBOSE


def log(msg):
    print("simctl: " + msg, file=sys.stderr, flush=True)


def die(msg, code=1):
    log("error: " + msg)
    sys.exit(code)


def sh(cmd, check=True, capture=True, env=None, input=None, timeout=None):
    if VERBOSE:
        log("+ " + " ".join(cmd))
    p = subprocess.run(cmd, check=False, text=True, env=env, input=input, timeout=timeout,
                       stdout=subprocess.PIPE if capture else None,
                       stderr=subprocess.PIPE if capture else None)
    if check and p.returncode != 0:
        raise RuntimeError("command failed (%d): %s\n%s%s"
                           % (p.returncode, " ".join(cmd), p.stdout or "", p.stderr or ""))
    return p


def docker_bin():
    return shutil.which("docker") or die("no docker client (run sim/install.sh)")


def sock(engine):
    return os.path.join(RUN, engine, "docker.sock")


def dk(engine, *args, check=True, capture=True, build=False, timeout=None):
    env = dict(os.environ, DOCKER_HOST="unix://" + sock(engine))
    env.pop("DOCKER_CONTEXT", None)
    if build:
        env["DOCKER_BUILDKIT"] = "0"  # legacy builder: no buildx needed, works with any client
    return sh([docker_bin(), *args], check=check, capture=capture, env=env, timeout=timeout)


def read_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def write_file(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def write_in_place(path, text):
    """Rewrite a file keeping its inode (it is bind-mounted as a single file into a container)."""
    if not os.path.exists(path):
        write_file(path, text)
        return
    with open(path, "r+") as f:
        f.seek(0)
        f.write(text)
        f.truncate()
        f.flush()
        os.fsync(f.fileno())


def write_json(path, data):
    write_file(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def pid_alive(pid):
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except (OSError, ValueError):
        return False
    try:  # zombie?
        with open("/proc/%d/stat" % int(pid)) as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def process_name(pid):
    """The executable name of a running process (empty when it is gone)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return os.path.basename(f.read().split(b"\0")[0].decode(errors="replace"))
    except OSError:
        return ""


def terminate(pid, grace):
    """SIGTERM a process we started, SIGKILL it if it is still there after ``grace`` seconds."""
    os.kill(pid, signal.SIGTERM)
    end = time.time() + grace
    while pid_alive(pid) and time.time() < end:
        time.sleep(0.1)
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL)


def read_pid(path):
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def load_yaml(path):
    with open(path) as f:
        text = f.read()
    if yaml is not None:
        return yaml.safe_load(text)
    die("python3-yaml missing (run sim/install.sh)")


@contextlib.contextmanager
def locked(run_dir=None):
    """Hold the lock of a cluster's run directory (default: the rehearsal cluster's) for a whole command."""
    run_dir = run_dir or RUN
    os.makedirs(run_dir, exist_ok=True)
    fd = os.open(os.path.join(run_dir, ".lock"), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def tcp_open(host, port, timeout=0.5):
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for(pred, timeout, what, interval=0.2):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(interval)
    raise RuntimeError("timed out after %ss waiting for %s" % (timeout, what))
