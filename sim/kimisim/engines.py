"""The per-node dockerd engines and the control engine."""
import contextlib
import os
import shutil
import subprocess

from kimisim.settings import ENGINE_ROOT, HOOK, REGISTRY, RUN, STATE
from kimisim.util import dk, pid_alive, process_name, read_pid, sh, sock, terminate, wait_for, write_file, write_json


def engine_paths(engine):
    return {"run": os.path.join(RUN, engine), "sock": sock(engine),
            "exec": os.path.join(RUN, engine, "exec"), "pid": os.path.join(RUN, engine, "docker.pid"),
            "data": os.path.join(ENGINE_ROOT, engine), "log": os.path.join(STATE, "engines", engine + ".log"),
            "config": os.path.join(STATE, "engines", engine + ".daemon.json")}


def ensure_hook():
    bindir = os.path.join(STATE, "bin")
    path = os.path.join(bindir, HOOK)
    if not os.path.exists(path):
        write_file(path, "#!/bin/sh\n# kimi-sim: no-op NVIDIA prestart hook (no GPUs here). Reads the OCI state.\n"
                         "cat >/dev/null 2>&1 || true\nexit 0\n", 0o755)
    return bindir


_DOCKERD_HELP = None


def dockerd_supports(flag):
    global _DOCKERD_HELP
    if _DOCKERD_HELP is None:
        _DOCKERD_HELP = sh(["dockerd", "--help"], check=False).stdout or ""
    return flag in _DOCKERD_HELP


def engine_ready(engine):
    p = engine_paths(engine)
    if not pid_alive(read_pid(p["pid"])) or not os.path.exists(p["sock"]):
        return False
    return dk(engine, "version", "--format", "{{.Server.Version}}", check=False, timeout=20).returncode == 0


def engine_config(vendor):
    """daemon.json of an engine: NVIDIA nodes also get a `nvidia` runtime (a runc wrapper), like a host with
    the NVIDIA Container Toolkit configured (`docker info` lists it; `--runtime nvidia` works)."""
    if vendor != "nvidia":
        return {}
    wrapper = os.path.join(ensure_hook(), "nvidia-container-runtime")
    if not os.path.exists(wrapper):
        write_file(wrapper, "#!/bin/sh\n# kimi-sim: stands in for nvidia-container-runtime (no GPUs): plain runc.\n"
                            "exec runc \"$@\"\n", 0o755)
    return {"runtimes": {"nvidia": {"path": wrapper}}}


def node_shm_wrapper(size):
    """Run dockerd in a mount namespace of its own with a private /dev/shm of ``size``: containers with ipc=host
    (the plan's) then share the node's /dev/shm, not the machine's, as on separate hosts. vLLM tells ranks on one
    node by a shared-memory probe (vllm/distributed/parallel_state.py in_the_same_node_as): with one /dev/shm for
    every simulated node the ranks of two nodes take each other for local readers of an IPC socket that only one
    container can see, and the group hangs joining."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount -t tmpfs -o size=%s,mode=1777 shm /dev/shm && exec "$@"' % size, "sh"]


def start_engine(engine, vendor=None, node_shm=None):
    p = engine_paths(engine)
    if engine_ready(engine):
        return False
    pid = read_pid(p["pid"])
    if pid_alive(pid):
        # started but not answering yet (e.g. concurrent start): wait for it
        wait_for(lambda: engine_ready(engine), 60, "engine %s" % engine, 0.3)
        return False
    for d in (p["run"], p["exec"], p["data"], os.path.dirname(p["log"])):
        os.makedirs(d, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(p["sock"])
    write_json(p["config"], engine_config(vendor))
    bindir = ensure_hook()
    cmd = ["dockerd", "--config-file", p["config"], "--data-root", p["data"], "--exec-root", p["exec"],
           "--pidfile", p["pid"], "--host", "unix://" + p["sock"], "--bridge=none", "--iptables=false",
           "--ip-forward=false", "--ip-masq=false", "--insecure-registry", REGISTRY,
           "--containerd-namespace", "kimi-sim-" + engine,
           "--containerd-plugins-namespace", "kimi-sim-" + engine + "-plugins",
           "--log-level", "warn"]
    if dockerd_supports("--ip6tables"):
        cmd.append("--ip6tables=false")
    if node_shm:
        cmd = node_shm_wrapper(node_shm) + cmd
    env = dict(os.environ, PATH=bindir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    env.pop("DOCKER_HOST", None)
    logf = open(p["log"], "ab")
    proc = subprocess.Popen(cmd, stdout=logf, stderr=logf, stdin=subprocess.DEVNULL, env=env,
                            start_new_session=True, close_fds=True)
    logf.close()
    try:
        wait_for(lambda: proc.poll() is None and engine_ready(engine), 60, "engine %s" % engine, 0.3)
    except RuntimeError:
        tail = open(p["log"], errors="replace").read()[-2000:]
        raise RuntimeError("engine %s did not come up (exit %s):\n%s" % (engine, proc.poll(), tail))
    # our own record of the PID (dockerd's pidfile may be removed on exit)
    write_file(os.path.join(STATE, "engines", engine + ".pid"), "%d\n" % proc.pid)
    return True


def stop_engine(engine):
    p = engine_paths(engine)
    pid = read_pid(os.path.join(STATE, "engines", engine + ".pid")) or read_pid(p["pid"])
    ctd_pid = read_pid(os.path.join(p["exec"], "containerd", "containerd.pid"))
    if pid_alive(pid) and os.path.exists(p["sock"]):
        ids = (dk(engine, "ps", "-aq", check=False, timeout=30).stdout or "").split()
        if ids:
            dk(engine, "rm", "-f", *ids, check=False, timeout=120)
    if pid_alive(pid) and _is_dockerd(pid):
        terminate(pid, 30)
    if pid_alive(ctd_pid) and process_name(ctd_pid).startswith("containerd"):
        terminate(ctd_pid, 10)
    for root in (p["exec"], p["data"]):
        unmount_under(root)
    for d in (p["run"], p["data"]):
        shutil.rmtree(d, ignore_errors=True)


def _is_dockerd(pid):
    return process_name(pid) == "dockerd"


def unmount_under(root):
    root = os.path.realpath(root)
    try:
        with open("/proc/self/mounts") as f:
            mps = [line.split()[1].replace("\\040", " ") for line in f]
    except OSError:
        return
    for mp in sorted((m for m in mps if m == root or m.startswith(root + "/")), key=len, reverse=True):
        sh(["umount", "-l", mp], check=False)
