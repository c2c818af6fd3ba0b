"""Fixtures for tests that need the local rehearsal cluster (sim/simctl, docs/sim.md).

Every test in tests/integration/ is marked `sim`. When the sim is not up, tests that use `sim_cluster`
skip with the reason, unless KIMI_SIM_AUTO_UP is set: `1`/`yes` brings up the cluster the test asks for,
`all` brings up gb300 + mi355x.

Fixtures:
    sim_cluster(name="gb300") -> SimCluster   (factory; raises Skipped when not up)
    SimCluster.nodes          [{"name", "address", "engine"}], head first (inventory order)
    SimCluster.images         {"standin-a": "127.0.0.1:5000/...@sha256:...", "standin-b": ..., "standin-broken": ...}
    SimCluster.inventory      absolute path of inventories/sim-<name>
    SimCluster.docker(node, *args, check=True, timeout=120) -> CompletedProcess  (DOCKER_HOST of the node's engine)
    SimCluster.ssh(node, command, timeout=60) -> CompletedProcess             (root@node ip with the sim key)
"""
import json
import os
import shutil
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIMCTL = os.path.join(REPO, "sim", "simctl")
SSH_KEY = os.path.join(REPO, "sim", ".state", "ssh", "id_ed25519")


# scripts/test.sh runs this suite as two pytest processes side by side, one per cluster group (`--sim-group`): the
# router clusters' files (fleet, gb300pd; `pytest.mark.sim_group(routed.ROUTER_GROUP)` in their pytestmark) and
# every other file (gb300, mi355x: group NODES_GROUP). Each process runs its tests one at a time in file order, so
# no two tests ever share a node; the groups share only the registries and the HF mirror, which the router tests
# only read. (pytest-xdist's loadgroup would do this in one process, but with pytest 9 it ignores the groups.)
NODES_GROUP = "nodes"


def sim_group(item):
    mark = item.get_closest_marker("sim_group")
    return mark.args[0] if mark and mark.args else NODES_GROUP


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(os.path.abspath(__file__))
    wanted = config.getoption("--sim-group", default=None)
    keep, drop = [], []
    for item in items:
        if str(item.fspath).startswith(here + os.sep):
            item.add_marker(pytest.mark.sim)
            if wanted and sim_group(item) != wanted:
                drop.append(item)
                continue
        keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _status():
    if not os.path.exists(SIMCTL):
        return None, "sim/simctl is missing"
    if os.geteuid() != 0:
        return None, "the rehearsal cluster needs root"
    try:
        p = subprocess.run([SIMCTL, "status", "--json"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, "simctl status failed: %s" % e
    try:
        return json.loads(p.stdout), None
    except ValueError:
        return None, "simctl status printed no JSON: %s" % (p.stderr or p.stdout)[-300:]


def _cluster_ready(st, name):
    if not st or name not in st.get("clusters", {}):
        return False
    c = st["clusters"][name]
    engines = {n["engine"] for n in c["nodes"].values()} | {"control"}
    return (st["registry"]["up"] and all(st["engines"].get(e, {}).get("up") for e in engines)
            and all(n["container"] == "running" and n["ssh"] for n in c["nodes"].values()))


class SimCluster(object):
    def __init__(self, name, status):
        self.name = name
        c = status["clusters"][name]
        self.inventory = os.path.join(REPO, c["inventory"])
        self.nodes = [dict(v, name=k) for k, v in c["nodes"].items()]
        vendor = c.get("vendor") or ("rocm" if name == "mi355x" else "nvidia")
        self.vendor = vendor
        # the real engine's images (cpu) are recorded apart from the stand-in's
        self.images = dict((status.get("engine_images") or {}) if vendor == "cpu" else status["images"][vendor])
        self._docker = shutil.which("docker")

    def node(self, name_or_index):
        if isinstance(name_or_index, int):
            return self.nodes[name_or_index]
        return next(n for n in self.nodes if n["name"] == name_or_index)

    def docker_env(self, node):
        n = self.node(node)
        env = dict(os.environ, DOCKER_HOST="unix:///run/kimi-sim/%s/docker.sock" % n["engine"])
        env.pop("DOCKER_CONTEXT", None)
        return env

    def docker(self, node, *args, check=True, timeout=120):
        p = subprocess.run([self._docker, *args], capture_output=True, text=True, timeout=timeout,
                           env=self.docker_env(node), check=False)
        if check and p.returncode != 0:
            raise AssertionError("docker %s on %s failed (%d): %s" % (
                " ".join(args), self.node(node)["name"], p.returncode, p.stderr.strip()))
        return p

    def ssh(self, node, command, timeout=60):
        n = self.node(node)
        return subprocess.run(
            ["ssh", "-i", SSH_KEY, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
             "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10",
             "root@" + n["address"], command], capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="session")
def sim_cluster():
    cache = {}

    def get(name="gb300"):
        if name in cache:
            return cache[name]
        st, why = _status()
        if not _cluster_ready(st, name):
            auto = os.environ.get("KIMI_SIM_AUTO_UP", "").strip().lower()
            if not auto or auto in ("0", "no", "false"):
                pytest.skip("rehearsal cluster %r is not up (%s); run `sim/simctl up --cluster %s` or set "
                            "KIMI_SIM_AUTO_UP=1" % (name, why or "simctl status: not ready", name))
            if why and st is None and not os.path.exists(SIMCTL):
                pytest.skip(why)
            p = subprocess.run([SIMCTL, "up", "--cluster", "all" if auto == "all" else name],
                               capture_output=True, text=True, timeout=1800, check=False)
            if p.returncode != 0:
                pytest.fail("simctl up --cluster %s failed:\n%s" % (name, p.stderr[-3000:]))
            st, why = _status()
            if not _cluster_ready(st, name):
                pytest.fail("simctl up succeeded but cluster %s is not ready: %s" % (name, why))
        cache[name] = SimCluster(name, st)
        return cache[name]

    return get
