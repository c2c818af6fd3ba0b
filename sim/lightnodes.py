"""Lightweight rehearsal nodes for controller benchmarks (`simctl up --cluster light --nodes N`, docs/sim.md).

One host sshd per node on its own address in 127.0.3.0/24 (node i -> 127.0.3.(10+i)), no container, no Docker
engine: a node is an sshd config, a rendered profile (the faked GPU tools of sim/nodetools read it through
KIMI_SIM_PROFILE, set by sshd's SetEnv) and a private bin directory holding exactly the tools the profile has
(sim-node-init --root <node dir>). Every node shares the host's file system, so host-level facts (disk, /dev/shm,
no engine socket) are the machine's: good for measuring the controller, not a faithful node.

State lives in /run/kimi-sim-light only (never the main rehearsal cluster's /run/kimi-sim, /var/lib/kimi-sim or
sim/.state); the sshd daemons run in the cpuacct cgroup `kimi-sim-light`, so benchmarks can read the nodes' CPU
(benchmarks/fleet_scale.py). `down` stops only the sshd PIDs it recorded (checked against their command line).
"""
import concurrent.futures as cf
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

# kimisim, its sibling package: whoever imports this module has sim/ on the path already (sim/simctl,
# benchmarks/fleet_scale.py, tests/conftest.py), as the module itself is found there.
from kimisim import nodes as sim_nodes
from kimisim.inventories import host_groups
from kimisim.settings import SIM_MODEL_REVISION
from kimisim.util import locked, read_pid

SIM_DIR = os.path.dirname(os.path.realpath(__file__))
REPO = os.path.dirname(SIM_DIR)
DEFAULT_STATE = "/run/kimi-sim-light"
STATE = os.environ.get("KIMI_SIM_LIGHT_STATE", DEFAULT_STATE)
INVENTORY = os.path.join(REPO, "inventories", "sim-light")
ADDRESS_PREFIX = "127.0.3."
ADDRESS_OFFSET = 10
MAX_NODES = 240
NAME_PREFIX = "light-node"
PROFILE = "gb300"
CGROUP = "/sys/fs/cgroup/cpuacct/kimi-sim-light"
SSHD = "/usr/sbin/sshd"
NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def log(msg):
    print("simctl: " + msg, file=sys.stderr, flush=True)


def _run(cmd, **kw):
    return subprocess.run(cmd, check=False, capture_output=True, text=True, **kw)


def _locked():
    return locked(STATE)


def nodes(n):
    return [{"name": "%s%02d" % (NAME_PREFIX, i), "address": "%s%d" % (ADDRESS_PREFIX, ADDRESS_OFFSET + i)}
            for i in range(1, n + 1)]


def node_dir(name):
    return os.path.join(STATE, "nodes", name)


def _write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.chmod(path + ".tmp", mode)
    os.replace(path + ".tmp", path)


def _keys():
    """Client key (the inventory's) and one host key shared by every light node, made once per state dir."""
    d = os.path.join(STATE, "ssh")
    os.makedirs(d, mode=0o700, exist_ok=True)
    for name in ("id_ed25519", "ssh_host_ed25519_key"):
        if not os.path.exists(os.path.join(d, name)):
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "kimi-sim-light", "-f", os.path.join(d, name)])
    return client_key_path(), os.path.join(d, "ssh_host_ed25519_key")


def _profile_helper():
    """sim/nodetools/profile.py, loaded by path as the main cluster's nodes load it (on sys.path it would be named
    ``profile``, the standard library's profiler)."""
    return sim_nodes.profile_helper()


def _render(node, index, all_nodes):
    prof = _profile_helper().render_node_profile(PROFILE, node["name"], index, [], address=node["address"],
                                                 domain_nodes=[n["address"] for n in all_nodes])
    d = node_dir(node["name"])
    _write(os.path.join(d, "profile.json"), json.dumps(prof, indent=2, sort_keys=True) + "\n")
    env = dict(os.environ, KIMI_SIM_PROFILE=os.path.join(d, "profile.json"))
    p = _run([sys.executable, os.path.join(SIM_DIR, "nodetools", "sim-node-init"), "--root",
              os.path.join(d, "root")], env=env)
    if p.returncode:
        raise RuntimeError("sim-node-init for %s failed: %s" % (node["name"], p.stderr.strip()))


def sshd_config(node, client_key, host_key):
    d = node_dir(node["name"])
    env = {"KIMI_SIM_PROFILE": os.path.join(d, "profile.json"), "SIM_NODE_NAME": node["name"],
           "SIM_NODE_ADDRESS": node["address"], "SIM_CLUSTER": "light",
           "PATH": os.path.join(d, "root", "usr", "local", "bin") + ":" + NODE_PATH}
    return "\n".join([
        "# kimi-sim light node %s (sim/lightnodes.py)" % node["name"],
        "ListenAddress %s:22" % node["address"], "HostKey %s" % host_key, "PidFile %s" % os.path.join(d, "sshd.pid"),
        "AuthorizedKeysFile %s.pub" % client_key, "PermitRootLogin prohibit-password", "PubkeyAuthentication yes",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
        "MaxStartups 400:30:800", "MaxSessions 400", "UseDNS no", "PrintMotd no", "LogLevel ERROR",
        "SetEnv " + " ".join("%s=%s" % kv for kv in sorted(env.items())),
        "Subsystem sftp /usr/lib/openssh/sftp-server", ""])


def _ours(pid, config):
    """The PID is an sshd started with this node's config (never kill anything else)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv = f.read().decode(errors="replace").split("\0")
    except OSError:
        return False
    return bool(argv) and os.path.basename(argv[0]).startswith("sshd") and config in argv


def _cgroup():
    with contextlib.suppress(OSError):
        os.makedirs(CGROUP, exist_ok=True)
        return CGROUP
    return None


def _into_cgroup():
    with contextlib.suppress(OSError):
        with open(os.path.join(CGROUP, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))


def _start(node, client_key, host_key):
    d = node_dir(node["name"])
    cfg = os.path.join(d, "sshd_config")
    _write(cfg, sshd_config(node, client_key, host_key))
    pid = read_pid(os.path.join(d, "sshd.pid"))
    if pid and _ours(pid, cfg):
        return False
    p = subprocess.run([SSHD, "-f", cfg], check=False, capture_output=True, text=True, preexec_fn=_into_cgroup)
    if p.returncode:
        raise RuntimeError("sshd for %s (%s) did not start: %s" % (node["name"], node["address"], p.stderr.strip()))
    return True


def client_key_path():
    """The inventory's client key (made by _keys)."""
    return os.path.join(STATE, "ssh", "id_ed25519")


def ssh_command(node, remote, options=()):
    """A plain ssh login to a light node as the inventory makes it (client key, no host-key checks), ``options``
    first, then ``remote`` run there."""
    return (["ssh"] + list(options) + ["-i", client_key_path(), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                                       "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
                                       "root@" + node["address"], remote])


def _login_ok(node):
    p = _run(ssh_command(node, "nvidia-smi -L >/dev/null && /usr/bin/python3 -c 'import json'",
                         ["-o", "ConnectTimeout=5"]), timeout=20)
    return p.returncode == 0


def _wait_login(node, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        if _login_ok(node):
            return
        time.sleep(0.3)
    raise RuntimeError("ssh login to light node %s (%s) failed for %ss" % (node["name"], node["address"], timeout))


def write_inventory(all_nodes, key):
    lines = ["# Generated by `sim/simctl up --cluster light --nodes %d` - gitignored, do not edit." % len(all_nodes),
             "# Lightweight bench nodes (sim/lightnodes.py): host sshds on 127.0.3.0/24, faked GPU tools, NO engine.",
             "all:", "  children:", "    vllm_cluster:", "      vars:",
             "        kimi_k3_accelerator: gb300", "        kimi_k3_gpus_per_node: 4",
             "        kimi_k3_strategy: %s" % ("multi_node_dep" if len(all_nodes) > 1 else "single_node_tp"),
             "        kimi_k3_interconnect: nvlink", '        kimi_k3_vllm_version: "0.28.0"',
             "        kimi_k3_socket_ifname: lo", "        kimi_k3_memlock: 8388608", "        kimi_k3_shm_size: 1g",
             "        kimi_k3_model_revision: " + SIM_MODEL_REVISION,
             "        kimi_k3_image: vllm/vllm-openai@sha256:" + "c" * 64,
             "        kimi_k3_allow_unauthenticated_api: true",
             "        ansible_user: root", "        ansible_ssh_private_key_file: %s" % key,
             "        ansible_host_key_checking: false",
             "        ansible_ssh_common_args: -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
             "        ansible_python_interpreter: /usr/bin/python3",
             "      children:", "        vllm_head:", "          hosts:"]

    lines += host_groups(all_nodes)
    _write(os.path.join(INVENTORY, "hosts.yml"), "\n".join(lines) + "\n")


def _stop(name):
    d = node_dir(name)
    cfg = os.path.join(d, "sshd_config")
    pid = read_pid(os.path.join(d, "sshd.pid"))
    if pid and _ours(pid, cfg):
        os.kill(pid, signal.SIGTERM)
        end = time.time() + 5
        while _ours(pid, cfg) and time.time() < end:
            time.sleep(0.05)
    shutil.rmtree(d, ignore_errors=True)


def _end_sessions():
    """SIGTERM the sessions the light sshds left (e.g. ControlPersist): exactly the PIDs in our cgroup."""
    try:
        with open(os.path.join(CGROUP, "cgroup.procs")) as f:
            pids = [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    end = time.time() + 5
    while time.time() < end and any(os.path.exists("/proc/%d" % p) for p in pids):
        time.sleep(0.05)


def _recorded():
    try:
        with open(os.path.join(STATE, "cluster.json")) as f:
            return json.load(f)["nodes"]
    except (OSError, ValueError, KeyError):
        return []


def up(n=None):
    """Bring the light cluster to n nodes (default: its current size, else 64); idempotent."""
    t0 = time.time()
    n = int(n or len(_recorded()) or 64)
    if not 1 <= n <= MAX_NODES:
        raise RuntimeError("--nodes must be 1..%d for the light cluster" % MAX_NODES)
    if not os.path.exists(SSHD):
        raise RuntimeError("%s missing (openssh-server): run sim/install.sh" % SSHD)
    with _locked():
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
        client_key, host_key = _keys()
        _cgroup()
        want = nodes(n)
        for old in _recorded():
            if old["name"] not in {w["name"] for w in want}:
                _stop(old["name"])
        with cf.ThreadPoolExecutor(max_workers=4) as ex:
            list(ex.map(lambda i: _render(want[i], i, want), range(n)))
            started = list(ex.map(lambda w: _start(w, client_key, host_key), want))
        _write(os.path.join(STATE, "cluster.json"), json.dumps({"nodes": want}, indent=2) + "\n")
        write_inventory(want, client_key)
        with cf.ThreadPoolExecutor(max_workers=8) as ex:
            list(ex.map(_wait_login, want))
    log("up: light cluster, %d node(s) (%d started) ready in %.1fs; inventory %s"
        % (n, sum(started), time.time() - t0, os.path.relpath(INVENTORY, REPO)))


def down():
    """Stop the recorded sshds, remove the state dir, the cgroup and the generated inventory."""
    t0 = time.time()
    if not os.path.isdir(STATE):
        log("down: light cluster is not up")
        return
    with _locked():
        names = [n["name"] for n in _recorded()]
        if os.path.isdir(os.path.join(STATE, "nodes")):
            names = sorted(set(names) | set(os.listdir(os.path.join(STATE, "nodes"))))
        with cf.ThreadPoolExecutor(max_workers=8) as ex:
            list(ex.map(_stop, names))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(INVENTORY, "hosts.yml"))
        with contextlib.suppress(OSError):
            os.rmdir(INVENTORY)
        _end_sessions()
        with contextlib.suppress(OSError):
            os.rmdir(CGROUP)
    shutil.rmtree(STATE, ignore_errors=True)
    log("down: removed the light cluster (%d node(s)) in %.1fs" % (len(names), time.time() - t0))


def cpu_seconds():
    """CPU seconds used so far by every light node (the sshd daemons and all their sessions), None if unknown."""
    try:
        with open(os.path.join(CGROUP, "cpuacct.usage")) as f:
            return int(f.read()) / 1e9
    except (OSError, ValueError):
        return None
