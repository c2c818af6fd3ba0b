"""An operator's first deployment from an empty directory (docs/install.md):

build the collection tarball, install it into an empty collections path (community.docker from the venv's `ansible`
package, as an operator's pip install of `ansible` provides it), create a site with
`ansible-playbook gpufleet.kimi_k3.site_init -e site_dir=...`, add the rehearsal cluster's inventory to it (the
installed collection does not ship it) and point it at the cluster (the operator's "edit the inventory" step: the
SSH key path and the image digest `simctl up` wrote, the nodes' host keys into a known_hosts file - the site
keeps host key checking on), then exactly `ansible-playbook deploy.yml -i inventories/sim-gb300` from the site
directory. The artifacts must land in the site directory and nothing may be written into the installed collection.

Needs `sim/simctl up --cluster gb300` (under the machine-wide sim lock).
"""
import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import cli
pytestmark = pytest.mark.sim

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
SIM_KEY_LINE = '"{{ inventory_dir }}/../../sim/.state/ssh/id_ed25519"'


def _env(coll, **more):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=str(coll), ANSIBLE_NOCOLOR="1", PATH=BIN + os.pathsep + env.get("PATH", ""))
    env.update(more)
    return env


def _run(cmd, cwd, env, timeout=300):
    p = cli.run(cmd, cwd=cwd, env=env, timeout=timeout, check=False)
    return p.returncode, p.stdout if p.returncode == 0 else cli.failure(p)


def _ok(cmd, cwd, env, timeout=300):
    rc, out = _run(cmd, cwd, env, timeout)
    assert rc == 0, "%s (rc %s)\n%s" % (" ".join(cmd), rc, out[-6000:])
    return out


def _point_at_sim(site_inv, sim, known_hosts):
    """What the operator edits: key path, image digest, host keys."""
    gv = os.path.join(site_inv, "group_vars", "vllm_cluster.yml")
    with open(gv) as f:
        text = f.read()
    assert SIM_KEY_LINE in text, "sim inventory changed: adapt this test"
    with open(gv, "w") as f:
        f.write(text.replace(SIM_KEY_LINE, json.dumps(os.path.join(REPO, "sim", ".state", "ssh", "id_ed25519"))))
    os.makedirs(os.path.join(site_inv, "group_vars", "all"), exist_ok=True)
    shutil.copy(os.path.join(sim.inventory, "group_vars", "all", "sim_image.yml"),
                os.path.join(site_inv, "group_vars", "all", "sim_image.yml"))
    keys = subprocess.run(["ssh-keyscan", "-T", "10"] + [n["address"] for n in sim.nodes], capture_output=True,
                          text=True, timeout=60, check=False).stdout
    assert keys.strip(), "ssh-keyscan found no host key on %s" % [n["address"] for n in sim.nodes]
    with open(known_hosts, "w") as f:
        f.write(keys)


def test_install_site_init_deploy_from_an_empty_directory(tmp_path, sim_cluster):
    sim = sim_cluster("gb300")
    dist, coll, work = tmp_path / "dist", tmp_path / "collections", tmp_path / "work"
    for d in (dist, coll, work):
        d.mkdir()
    env = _env(coll)
    # README install steps, from the tarball
    _ok(["ansible-galaxy", "collection", "build", "--output-path", str(dist), REPO], work, env)
    tarball = glob.glob(str(dist / "gpufleet-kimi_k3-*.tar.gz"))[0]
    _ok(["ansible-galaxy", "collection", "install", "--offline", "-p", str(coll), tarball], work, env)
    installed = coll / "ansible_collections" / "gpufleet" / "kimi_k3"
    before = sorted(os.path.relpath(os.path.join(r, f), str(installed))
                    for r, _dirs, fs in os.walk(str(installed)) for f in fs)

    # the site-creation command, by FQCN from the installed copy
    site = work / "kimi-site"
    out = _ok(["ansible-playbook", "gpufleet.kimi_k3.site_init", "-e", "site_dir=%s" % site], work, env)
    assert "deploy.yml -i inventories/" in out, out
    for f in ("ansible.cfg", "deploy.yml", "monitoring.yml", "requirements.yml", "inventories/gb300-cluster/hosts.yml"):
        assert (site / f).is_file(), f
    assert "host_key_checking = True" in (site / "ansible.cfg").read_text()
    # the installed collection ships no rehearsal inventory: the operator brings the cluster's own (here the
    # checkout's sim-gb300, the inventory of the cluster at hand)
    assert not [n for n in os.listdir(str(site / "inventories")) if n.startswith("sim")]
    shutil.copytree(os.path.join(REPO, "inventories", "sim-gb300"), str(site / "inventories" / "sim-gb300"),
                    ignore=shutil.ignore_patterns("sim_image.yml"))

    known_hosts = tmp_path / "known_hosts"
    _point_at_sim(str(site / "inventories" / "sim-gb300"), sim, str(known_hosts))
    # the operator's own known_hosts file stands in for ~/.ssh/known_hosts (left untouched here)
    denv = _env(coll, ANSIBLE_SSH_EXTRA_ARGS="-o UserKnownHostsFile=%s" % known_hosts)
    rc, out = _run(["ansible-playbook", "deploy.yml", "-i", "inventories/sim-gb300"], site, denv, timeout=900)
    assert rc == 0, out[-8000:]

    art = site / "artifacts"
    plans = sorted(os.path.basename(p) for p in glob.glob(str(art / "plan" / "*.json")))
    # one plan per node, and the deployment state record the launch role keeps next to them
    assert plans == ["gb300-tray01.json", "gb300-tray02.json", "state.json"], plans
    assert json.load(open(str(art / "plan" / "state.json")))["deployed"]["plan_id"]
    assert (art / "preflight-report.json").is_file()
    assert glob.glob(str(art / "smoke" / "smoke-gb300-tray01.json"))
    # deploy.yml ends with the monitoring role: the scrape configuration of the deployed endpoint is there too
    with open(str(art / "monitoring" / "targets" / "vllm.json")) as f:
        assert [t["targets"] for t in json.load(f)] == [["127.0.0.11:8000"]]
    assert (art / "monitoring" / "grafana" / "kimi-k3-dashboard.json").is_file()
    with open(str(art / "plan" / "gb300-tray01.json")) as f:
        assert json.load(f)["host"] == "gb300-tray01"
    after = sorted(os.path.relpath(os.path.join(r, f), str(installed))
                   for r, _dirs, fs in os.walk(str(installed)) for f in fs if "__pycache__" not in r)
    assert [f for f in after if f not in before] == [], "written into the installed collection"
    assert not (installed / "artifacts").exists()
