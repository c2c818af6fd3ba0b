"""The rehearsal cluster itself: per-node engines, pulls by digest, the faked GPU devices, faults in place.

The stand-in's own start-up behaviour is tested where it runs as processes and against the real engine:
multi-node start and a dead rank in tests/unit/sim/test_standin_cluster.py (and the real engine's in
tests/integration/test_real_engine.py), argument errors in tests/unit/sim/test_standin_args.py,
and the broken image through the collection in tests/integration/test_launch_state.py (a) and test_router_fleet.py.

Needs `sim/simctl up --cluster gb300` (or KIMI_SIM_AUTO_UP=1). Uses the docker CLI with DOCKER_HOST per node.
"""
import json
import os
import subprocess

import pytest

pytestmark = pytest.mark.sim

HEAD, FOLLOWER = 0, 1
SIMCTL = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "sim", "simctl")


def _repo_digests(sim, node, ref):
    p = sim.docker(node, "image", "inspect", "--format", "{{json .RepoDigests}}", ref, check=False)
    return json.loads(p.stdout) if p.returncode == 0 else None


def _containers_using(sim, node, ref):
    p = sim.docker(node, "ps", "-aq", "--filter", "ancestor=" + ref, check=False)
    return p.stdout.split()


@pytest.fixture
def gb300(sim_cluster):
    return sim_cluster("gb300")


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


def test_gpu_device_request_and_sim_devices_start(gb300):
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
