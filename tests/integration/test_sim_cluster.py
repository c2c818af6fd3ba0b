"""The rehearsal cluster itself: per-node engines, pulls by digest, stand-in multi-node start, failures.

Needs `sim/simctl up --cluster gb300` (or KIMI_SIM_AUTO_UP=1). Uses the docker CLI with DOCKER_HOST per node.
"""
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

pytestmark = pytest.mark.sim

HEAD, FOLLOWER = 0, 1
MODEL = "moonshotai/Kimi-K3"
API_PORT = 8000
MASTER_PORT = 29501
SIMCTL = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "sim", "simctl")


def _port_free(host, port):
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _health(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, OSError):
        return None


def _repo_digests(sim, node, ref):
    p = sim.docker(node, "image", "inspect", "--format", "{{json .RepoDigests}}", ref, check=False)
    return json.loads(p.stdout) if p.returncode == 0 else None


def _containers_using(sim, node, ref):
    p = sim.docker(node, "ps", "-aq", "--filter", "ancestor=" + ref, check=False)
    return p.stdout.split()


@pytest.fixture
def gb300(sim_cluster):
    return sim_cluster("gb300")


@pytest.fixture
def cleanup(gb300):
    names = []
    yield names
    for node, name in names:
        gb300.docker(node, "rm", "-f", name, check=False)


def test_each_node_reaches_its_own_engine_over_ssh(gb300):
    roots = set()
    for n in gb300.nodes:
        p = gb300.ssh(n["name"], "python3 -c \"import json,socket;s=socket.socket(socket.AF_UNIX);"
                                 "s.connect('/var/run/docker.sock');"
                                 "s.sendall(b'GET /info HTTP/1.0\\r\\nHost: d\\r\\n\\r\\n');"
                                 "d=b''.join(iter(lambda: s.recv(65536), b''));"
                                 "print(json.loads(d.split(b'\\r\\n\\r\\n',1)[1])['DockerRootDir'])\"")
        assert p.returncode == 0, p.stderr
        root = p.stdout.strip()
        assert root.endswith("/" + n["engine"]), (n, root)
        roots.add(root)
    assert len(roots) == len(gb300.nodes), "nodes share an engine: %s" % roots


def test_pull_by_digest_is_per_node(gb300):
    ref = gb300.images["standin-b"]
    repo = ref.split("@")[0]
    n1, n2 = gb300.nodes[HEAD]["name"], gb300.nodes[FOLLOWER]["name"]
    for n in (n1, n2):
        if _containers_using(gb300, n, ref):
            pytest.skip("%s is in use by containers on %s (a deployment is running)" % (ref, n))
    for n in (n1, n2):
        gb300.docker(n, "image", "rm", "-f", ref, check=False)
        assert _repo_digests(gb300, n, ref) is None
    gb300.docker(n1, "pull", ref, timeout=300)
    digests = _repo_digests(gb300, n1, ref)
    assert digests is not None and ref in digests, digests
    assert all(d.startswith(repo + "@") for d in digests)
    assert _repo_digests(gb300, n2, ref) is None, "a pull on %s is visible on %s" % (n1, n2)
    gb300.docker(n2, "pull", ref, timeout=300)
    assert ref in (_repo_digests(gb300, n2, ref) or [])


def _run_standin(sim, node, name, args, env=None, extra=()):
    cmd = ["run", "-d", "--name", name, "--network", "host", "--ipc", "host", "--gpus", "all",
           "--ulimit", "memlock=8388608:8388608"]
    for k, v in (env or {}).items():
        cmd += ["-e", "%s=%s" % (k, v)]
    cmd += list(extra) + [sim.images["standin-a"]] + list(args)
    sim.docker(node, "pull", "-q", sim.images["standin-a"], timeout=300)
    sim.docker(node, "rm", "-f", name, check=False)
    return sim.docker(node, *cmd)


def _state(sim, node, name):
    p = sim.docker(node, "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", name, check=False)
    status, code = (p.stdout.split() + ["missing", "0"])[:2]
    return status, int(code)


def test_head_becomes_healthy_only_after_follower_joins(gb300, cleanup):
    head, fol = gb300.nodes[HEAD], gb300.nodes[FOLLOWER]
    for host, port in ((head["address"], API_PORT), (head["address"], MASTER_PORT)):
        if not _port_free(host, port):
            pytest.skip("%s:%d is busy (a deployment is running on the sim)" % (host, port))
    common = [MODEL, "--tensor-parallel-size", "8", "--nnodes", "2", "--master-addr", head["address"],
              "--master-port", str(MASTER_PORT), "--port", str(API_PORT)]
    env = {"VLLM_STANDIN_LOAD_S": "1"}
    cleanup.extend([(head["name"], "kimi-sim-test-head"), (fol["name"], "kimi-sim-test-follower")])
    _run_standin(gb300, head["name"], "kimi-sim-test-head",
                 common + ["--node-rank", "0", "--host", head["address"]], env)
    url = "http://%s:%d/health" % (head["address"], API_PORT)
    # Alone, the head loads and waits for rank 1: never healthy.
    end = time.time() + 8
    while time.time() < end:
        assert _health(url) != 200, "head reported healthy before the follower joined"
        status, code = _state(gb300, head["name"], "kimi-sim-test-head")
        assert status == "running", "head exited (%s): %s" % (
            code, gb300.docker(head["name"], "logs", "kimi-sim-test-head", check=False).stderr[-2000:])
        time.sleep(0.5)
    _run_standin(gb300, fol["name"], "kimi-sim-test-follower",
                 common + ["--node-rank", "1", "--headless", "--host", fol["address"]], env)
    end = time.time() + 90
    code = None
    while time.time() < end:
        code = _health(url)
        if code == 200:
            break
        time.sleep(0.5)
    logs = gb300.docker(head["name"], "logs", "kimi-sim-test-head", check=False)
    assert code == 200, "head not healthy after follower started (last %s):\n%s" % (code, logs.stderr[-3000:])
    assert _state(gb300, fol["name"], "kimi-sim-test-follower")[0] == "running"


def test_unknown_flag_exits_non_zero_with_message(gb300, cleanup):
    node = gb300.nodes[HEAD]
    flag = "--definitely-not-a-vllm-flag"
    cleanup.append((node["name"], "kimi-sim-test-badflag"))
    _run_standin(gb300, node["name"], "kimi-sim-test-badflag",
                 [MODEL, "--port", "18999", "--host", node["address"], flag])
    code = int(gb300.docker(node["name"], "wait", "kimi-sim-test-badflag", timeout=120).stdout.strip())
    logs = gb300.docker(node["name"], "logs", "kimi-sim-test-badflag")
    assert code != 0
    assert flag in logs.stdout + logs.stderr


def test_broken_image_crashes_at_start(gb300, cleanup):
    node = gb300.nodes[HEAD]
    ref = gb300.images["standin-broken"]
    cleanup.append((node["name"], "kimi-sim-test-broken"))
    gb300.docker(node["name"], "pull", "-q", ref, timeout=300)
    gb300.docker(node["name"], "run", "-d", "--name", "kimi-sim-test-broken", "--network", "host", ref,
                 MODEL, "--port", "18998", "--host", node["address"])
    code = int(gb300.docker(node["name"], "wait", "kimi-sim-test-broken", timeout=120).stdout.strip())
    assert code != 0


def test_gpu_device_request_and_sim_devices_start(gb300, cleanup):
    """--gpus all goes through the engine's (no-op) NVIDIA hook; the IMEX channel and uverbs nodes exist."""
    node = gb300.nodes[FOLLOWER]
    ref = gb300.images["standin-a"]
    gb300.docker(node["name"], "pull", "-q", ref, timeout=300)
    p = gb300.docker(node["name"], "run", "--rm", "--network", "host", "--gpus", "all", "--cap-add", "IPC_LOCK",
                     "--device", "/dev/nvidia-caps-imex-channels/channel0", "--device", "/dev/infiniband",
                     "--ulimit", "memlock=8388608:8388608", "--entrypoint", "sh", ref, "-c",
                     "test -c /dev/nvidia-caps-imex-channels/channel0 && echo $NVIDIA_VISIBLE_DEVICES")
    assert p.stdout.strip() == "all"


def test_rocm_devices_start(sim_cluster):
    mi = sim_cluster("mi355x")
    node = mi.nodes[0]
    ref = mi.images["standin-a"]
    mi.docker(node["name"], "pull", "-q", ref, timeout=300)
    p = mi.docker(node["name"], "run", "--rm", "--network", "host", "--device", "/dev/kfd", "--device", "/dev/dri",
                  "--group-add", "video", "--security-opt", "seccomp=unconfined", "--entrypoint", "sh", ref,
                  "-c", "test -c /dev/kfd && ls /dev/dri")
    assert "renderD128" in p.stdout


def test_fault_rewrites_profile_in_place(gb300):
    node = gb300.nodes[FOLLOWER]["name"]
    faults_json = gb300.ssh(node, "cat /opt/kimi-sim/profiles/faults.json")
    if faults_json.returncode != 0:
        pytest.skip("no sim/profiles/faults.json in the node image")
    faults = [k for k in json.loads(faults_json.stdout) if not k.startswith("_")]
    ctl = ["docker", "-H", "unix:///run/kimi-sim/control/docker.sock", "inspect", "--format",
           "{{.State.StartedAt}}", "kimi-sim-" + node]
    started = subprocess.run(ctl, capture_output=True, text=True, check=False).stdout
    before = json.loads(subprocess.run([SIMCTL, "fault", node], capture_output=True, text=True, check=False).stdout)
    inode = gb300.ssh(node, "stat -c %i /etc/kimi-sim/profile.json").stdout
    faults = [f for f in faults if f not in before]
    for fault in faults:
        p = subprocess.run([SIMCTL, "fault", node, fault], capture_output=True, text=True, timeout=60, check=False)
        if p.returncode == 0:
            break
    else:
        pytest.skip("no fault applies to the gb300 profile")
    try:
        prof = json.loads(gb300.ssh(node, "cat /etc/kimi-sim/profile.json").stdout)
        assert fault in prof.get("faults", [])
    finally:  # restore what was there (other tests may share the sim)
        restore = [SIMCTL, "fault", node] + (before or ["--clear"])
        assert subprocess.run(restore, capture_output=True, check=False).returncode == 0
    prof = json.loads(gb300.ssh(node, "cat /etc/kimi-sim/profile.json").stdout)
    assert fault not in prof.get("faults", [])
    assert gb300.ssh(node, "stat -c %i /etc/kimi-sim/profile.json").stdout == inode, "profile file replaced"
    assert subprocess.run(ctl, capture_output=True, text=True, check=False).stdout == started, "node container restarted"
