"""Deploy, smoke and tear down as a non-root operator with sudo (docs/access.md), on sim/simctl up --cluster gb300.

The node image has `kimi-ops` (passwordless sudo) and `kimi-docker` (docker group only, no sudo), both logging in
with the sim's key. The test copies the sim inventory and adds host_vars that connect as kimi-ops with
ansible_become: true (the usual site setup), then runs playbooks/deploy.yml end to end with an API key, so the
secret files (0400, in a root-only 0700 directory under launch_env_dir) are written and removed by teardown. The docker-group user is
refused by the access check (plugins/module_utils/probe/access.py), run with its real observations.
"""
import json
import os
import shutil

import pytest

from tests.helpers.runner import REPO, failed_tasks, run_playbook, task_results

pytestmark = pytest.mark.sim

SUDO_USER = "kimi-ops"
DOCKER_USER = "kimi-docker"
KEY = os.path.join(REPO, "sim", ".state", "ssh", "id_ed25519")
API_KEY = "sim-nonroot-key"


@pytest.fixture
def gb300(sim_cluster):
    return sim_cluster("gb300")


# launch_env_dir of the sim inventories (inventories/sim-gb300/group_vars/vllm_cluster.yml): node-local in effect
SECRETS_DIR = "/var/lib/kimi-sim/models/.secrets/%s"


def _inventory_as(sim, tmp_path, user, become):
    inv = tmp_path / ("inv-" + user)
    shutil.copytree(sim.inventory, str(inv))
    (inv / "host_vars").mkdir()
    for n in sim.nodes:
        (inv / "host_vars" / (n["name"] + ".yml")).write_text(
            "ansible_user: %s\nansible_become: %s\nansible_ssh_private_key_file: %s\n"
            % (user, "true" if become else "false", KEY))
    return str(inv)


def _ssh_as(node, user, command):
    import subprocess
    return subprocess.run(["ssh", "-i", KEY, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                           "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "%s@%s" % (user, node["address"]),
                           command], capture_output=True, text=True, timeout=60, check=False)


PROBE_PLAYBOOK = """
- name: Probe one node the way preflight does, as the inventory's user
  hosts: "{{ probe_node }}"
  gather_facts: false
  tasks:
    - name: Probe
      gpufleet.kimi_k3.node_probe:
        docker_host: unix:///var/run/docker.sock
        model_cache_dir: /var/lib/kimi-sim/models
        access_paths: [/etc/kimi-k3]
"""


def _access(sim, tmp_path, node, user, sudo=False):
    """node_probe run on the node through Ansible (module packaging, login as ``user``, become when ``sudo``), its
    ``access`` observations -> preflight_access.check_access(), as preflight judges them."""
    from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.probe import access as pa
    inv = _inventory_as(sim, tmp_path / ("%s-%s" % (user, sudo)), user, become=sudo)
    playbook = tmp_path / "probe.yml"
    playbook.write_text(PROBE_PLAYBOOK)
    r = run_playbook(str(playbook), inv, extravars={"probe_node": node["name"]})
    assert r.status == "successful", failed_tasks(r)
    obs = task_results(r, "Probe")[node["name"]]["ansible_facts"]["node_probe"]["access"]
    return obs, pa.check_access(node["name"], obs)


def test_operator_users_exist_with_the_intended_rights(gb300):
    node = gb300.nodes[0]
    who = _ssh_as(node, SUDO_USER, "id -un")
    assert who.stdout.strip() == SUDO_USER, who.stderr
    assert _ssh_as(node, SUDO_USER, "sudo -n id -u").stdout.strip() == "0"
    assert _ssh_as(node, SUDO_USER, "touch /etc/kimi-k3-probe").returncode != 0, "kimi-ops writes /etc without sudo"
    assert _ssh_as(node, DOCKER_USER, "sudo -n true").returncode != 0, "kimi-docker must have no sudo"
    assert _ssh_as(node, DOCKER_USER, "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); "
                                      "s.connect('/var/run/docker.sock')\"").returncode == 0


def test_access_check_refuses_the_docker_group_user_and_passes_under_become(gb300, tmp_path):
    node = gb300.nodes[0]
    obs, finding = _access(gb300, tmp_path, node, DOCKER_USER)
    assert obs["socket_rw"] is True and "docker" in obs["groups"] and obs["euid"] != 0
    assert finding["status"] == "fail"
    assert "kimi-docker (uid 1002) without become" in finding["observed"]
    assert "engine socket usable" in finding["observed"] and "/etc/kimi-k3" in finding["observed"]
    assert "ansible_become: true" in finding["fix"] and "docker-group user without sudo is not supported" in finding["fix"]
    _obs, plain = _access(gb300, tmp_path, node, SUDO_USER)
    assert plain["status"] == "fail" and "engine socket /var/run/docker.sock not usable" in plain["observed"]
    _obs, become = _access(gb300, tmp_path, node, SUDO_USER, sudo=True)
    assert become["status"] == "pass" and become["observed"] == "modules run as root (uid 0)"


def test_deploy_smoke_and_teardown_as_a_sudo_user_with_become(gb300, tmp_path):
    inv = _inventory_as(gb300, tmp_path, SUDO_USER, become=True)
    container = {n["name"]: "vllm-kimi-k3" for n in gb300.nodes}
    artifacts = str(tmp_path / "artifacts")
    extra = {"kimi_k3_api_key": API_KEY, "kimi_k3_artifacts_dir": artifacts, "smoke_report_dir": artifacts}
    try:
        deploy = run_playbook("deploy.yml", inv, extravars=extra)
        assert deploy.status == "successful", failed_tasks(deploy)
        for n in gb300.nodes:
            # secrets are files (0400) in a root-only directory (0700) that the container mounts read-only
            secrets = "%s/%s.secrets" % (SECRETS_DIR % n["name"], container[n["name"]])
            st = gb300.ssh(n["name"], "stat -c '%U %a' " + secrets + " " + secrets + "/*")
            modes = st.stdout.split()
            assert modes[:2] == ["root", "700"] and len(modes) >= 4, (n["name"], st.stdout, st.stderr)
            assert all(m == ("root", "400") for m in zip(modes[2::2], modes[3::2])), (n["name"], st.stdout)
            running = gb300.docker(n["name"], "inspect", "--format", "{{.State.Running}}", container[n["name"]])
            assert running.stdout.strip() == "true"
        with open(os.path.join(artifacts, "smoke-%s.json" % gb300.nodes[0]["name"])) as f:
            repro = json.load(f)["reproduction"]
        assert repro["pulled_image"] == repro["image"] == gb300.images["standin-a"]
        again = run_playbook("deploy.yml", inv, extravars=extra, tags="image,launch")
        assert again.status == "successful", failed_tasks(again)
        assert {h: c for h, c in again.stats.get("changed", {}).items() if c} == {}
    finally:
        down = run_playbook("teardown.yml", inv, extravars=extra)
    assert down.status == "successful", failed_tasks(down)
    for n in gb300.nodes:
        assert gb300.docker(n["name"], "inspect", container[n["name"]], check=False).returncode != 0
        gone = gb300.ssh(n["name"], "test -e %s/%s.secrets" % (SECRETS_DIR % n["name"], container[n["name"]]))
        assert gone.returncode != 0
