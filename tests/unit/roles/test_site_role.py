"""gpufleet.kimi_k3.site_init (roles/site): the operator site it writes, a second run changes nothing, and bad
input gets a refusal naming the variable (docs/install.md "Create a site")."""
import os
import re
import subprocess
import sys

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _site_init(tmp_path, *extra):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, "build", "collections"))
    p = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
                        os.path.join(REPO, "playbooks", "site_init.yml")] + list(extra),
                       cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=180, check=False)
    return p.returncode, p.stdout


def _recap_changed(out):
    return int(re.search(r"localhost\s+: ok=\d+\s+changed=(\d+)", out).group(1))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("site")
    rc, out = _site_init(tmp, "-e", "site_dir=%s" % (tmp / "s"), "-e", '{"site_inventories": ["gb300-cluster"]}')
    assert rc == 0, out
    return tmp / "s", out, tmp


def test_site_files(site):
    s, out = site[0], site[1]
    assert sorted(os.listdir(str(s))) == ["README.md", "ansible.cfg", "deploy.yml", "inventories", "monitoring.yml",
                                          "plan.yml", "preflight.yml", "requirements.yml", "smoke.yml", "teardown.yml"]
    assert os.listdir(str(s / "inventories")) == ["gb300-cluster"]
    assert (s / "inventories" / "gb300-cluster" / "group_vars" / "vllm_cluster.yml").is_file()
    deploy = yaml.safe_load((s / "deploy.yml").read_text())
    assert deploy == [{"name": "Deploy with gpufleet.kimi_k3",
                       "ansible.builtin.import_playbook": "gpufleet.kimi_k3.deploy"}]
    for name in ("plan", "preflight", "smoke", "monitoring", "teardown"):
        assert yaml.safe_load((s / (name + ".yml")).read_text())[0]["ansible.builtin.import_playbook"] == \
            "gpufleet.kimi_k3." + name
    cfg = (s / "ansible.cfg").read_text()
    for line in ("host_key_checking = True", "gathering = explicit", "forks = 64", "pipelining = True",
                 "ControlPersist=30m"):
        assert line in cfg
    with open(os.path.join(REPO, "galaxy.yml")) as f:
        meta = yaml.safe_load(f)
    req = yaml.safe_load((s / "requirements.yml").read_text())
    assert req["collections"] == [{"name": "gpufleet.kimi_k3", "version": meta["version"]},
                                  {"name": "community.docker", "version": meta["dependencies"]["community.docker"]}]
    assert "deploy.yml -i inventories/gb300-cluster" in out


def test_second_run_changes_nothing_and_keeps_edits(site):
    s, tmp = site[0], site[2]
    edited = s / "inventories" / "gb300-cluster" / "hosts.yml"
    edited.write_text(edited.read_text() + "# operator edit\n")
    rc, out = _site_init(tmp, "-e", "site_dir=%s" % s, "-e", '{"site_inventories": ["gb300-cluster"]}')
    assert rc == 0, out
    assert _recap_changed(out) == 0, out
    assert edited.read_text().endswith("# operator edit\n")


def test_site_dir_required(tmp_path):
    rc, out = _site_init(tmp_path)
    assert rc != 0
    assert "site_dir is not set" in out


def test_unknown_inventory_refused(tmp_path):
    rc, out = _site_init(tmp_path, "-e", "site_dir=%s" % tmp_path, "-e", '{"site_inventories": ["gb999"]}')
    assert rc != 0
    assert "site_inventories names gb999" in out and "gb300-cluster" in out
    assert not (tmp_path / "inventories").exists()
