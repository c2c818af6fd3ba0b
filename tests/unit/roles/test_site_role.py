"""gpufleet.kimi_k3.site_init (roles/site): the operator site it writes, a second run changes nothing, and bad
input gets a refusal naming the variable (docs/install.md "Create a site")."""
import os
import re
import sys

import pytest
import yaml

from tests.helpers import cli
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
# every playbook of the collection except the one that creates the site
OPERATOR_PLAYBOOKS = ("capacity", "deploy", "fabric", "image", "launch", "layouts", "monitoring", "plan", "preflight",
                      "recover", "smoke", "status", "teardown", "upgrade", "weights")
EXAMPLES = ["gb300-cluster", "gb300-dep16", "gb300-fleet", "gb300-pd", "mi355x-cluster", "mi355x-rdma-2node"]


def _site_init(tmp_path, *extra):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, "build", "collections"))
    p = cli.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
                 os.path.join(REPO, "playbooks", "site_init.yml")] + list(extra), cwd=tmp_path, env=env, timeout=180,
                check=False)
    return p.returncode, p.stdout if p.returncode == 0 else cli.failure(p)


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
    assert sorted(os.listdir(str(s))) == [".gitignore", "README.md", "ansible.cfg", "capacity.yml", "deploy.yml", "fabric.yml",
                                          "image.yml", "inventories", "launch.yml", "layouts.yml", "monitoring.yml",
                                          "plan.yml", "preflight.yml",
                                          "recover.yml", "requirements.yml", "smoke.yml", "status.yml",
                                          "teardown.yml", "upgrade.yml", "weights.yml"]
    assert os.listdir(str(s / "inventories")) == ["gb300-cluster"]
    assert (s / "inventories" / "gb300-cluster" / "group_vars" / "vllm_cluster.yml").is_file()
    deploy = yaml.safe_load((s / "deploy.yml").read_text())
    assert deploy == [{"name": "Deploy with gpufleet.kimi_k3",
                       "ansible.builtin.import_playbook": "gpufleet.kimi_k3.deploy"}]
    for name in OPERATOR_PLAYBOOKS:
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
    ignored = [line for line in (s / ".gitignore").read_text().splitlines() if line and not line.startswith("#")]
    assert ignored[:3] == ["/artifacts/", "/collections/", "*.retry"] and ".vault_pass*" in ignored
    # the next-steps message may be wrapped where the site path is long (pytest-xdist's temporary directories)
    assert "deploy.yml -i inventories/gb300-cluster" in " ".join(out.split())


def test_second_run_changes_nothing_and_keeps_edits(site):
    s, tmp = site[0], site[2]
    edited = s / "inventories" / "gb300-cluster" / "hosts.yml"
    edited.write_text(edited.read_text() + "# operator edit\n")
    rc, out = _site_init(tmp, "-e", "site_dir=%s" % s, "-e", '{"site_inventories": ["gb300-cluster"]}')
    assert rc == 0, out
    assert _recap_changed(out) == 0, out
    assert edited.read_text().endswith("# operator edit\n")


def test_the_gitignore_keeps_artifacts_and_secrets_out_of_git(site, tmp_path):
    """git itself reads the site's .gitignore: the artifacts (plans, state, reports), retry files and vault password
    files are ignored; the inventories, wrappers and the site's own files are not."""
    import shutil
    import subprocess
    git = shutil.which("git")
    if not git:
        pytest.skip("no git")
    s = tmp_path / "s"
    shutil.copytree(str(site[0]), str(s))
    for rel in ("artifacts/plan/gb300-tray01.json", "artifacts/plan/state.json", "deploy.retry", ".vault_pass",
                "collections/ansible_collections/x/MANIFEST.json"):
        (s / rel).parent.mkdir(parents=True, exist_ok=True)
        (s / rel).write_text("x")
    subprocess.run([git, "init", "-q", str(s)], check=True)
    out = subprocess.run([git, "-C", str(s), "status", "--porcelain", "--untracked-files=all"], check=True,
                         stdout=subprocess.PIPE, universal_newlines=True).stdout
    listed = sorted(line[3:] for line in out.splitlines())
    assert ".gitignore" in listed and "deploy.yml" in listed and "inventories/gb300-cluster/hosts.yml" in listed
    assert not [p for p in listed if p.startswith(("artifacts/", "collections/")) or p in ("deploy.retry", ".vault_pass")]


def test_check_mode_shows_the_site_and_writes_nothing(tmp_path):
    rc, out = _site_init(tmp_path, "-e", "site_dir=%s" % (tmp_path / "s"), "-e", '{"site_inventories": ["gb300-cluster"]}',
                         "--check", "--diff")
    assert rc == 0, out
    assert _recap_changed(out) == 1, out
    assert "+++ after: %s" % (tmp_path / "s" / "deploy.yml") in out and "+forks = 64" in out, out
    assert not (tmp_path / "s").exists()


def test_site_dir_required(tmp_path):
    rc, out = _site_init(tmp_path)
    assert rc != 0
    assert "site_dir is not set" in out


def test_unknown_inventory_refused(tmp_path):
    rc, out = _site_init(tmp_path, "-e", "site_dir=%s" % tmp_path, "-e", '{"site_inventories": ["gb999"]}')
    assert rc != 0
    assert "site_inventories names gb999" in out and "gb300-cluster" in out
    assert not (tmp_path / "inventories").exists()


def _cfg(path):
    import configparser
    cp = configparser.ConfigParser()
    cp.read(str(path))
    return cp


def test_ansible_cfg_is_read_by_ansible_with_the_fleet_settings(site, tmp_path):
    """The controller settings large sites use (docs/install.md): one wave, no facts, pipelining, one reused SSH
    connection per node, the main process polling its workers every 10 ms instead of every 1 ms; the key exchange stays
    OpenSSH's unless site_ssh_kex_algorithms says otherwise."""
    cfg = _cfg(site[0] / "ansible.cfg")
    assert cfg.get("defaults", "forks") == "64" and cfg.get("defaults", "gathering") == "explicit"
    assert cfg.get("defaults", "internal_poll_interval") == "0.01"
    assert not cfg.has_option("defaults", "strategy")                     # linear: run_once steps need every node
    assert cfg.getboolean("ssh_connection", "pipelining") is True
    ssh_args = cfg.get("ssh_connection", "ssh_args").split()
    assert "ControlMaster=auto" in ssh_args and "ControlPersist=30m" in ssh_args
    assert not [a for a in ssh_args if a.startswith("KexAlgorithms")]
    rc, out = _site_init(tmp_path, "-e", "site_dir=%s" % (tmp_path / "s"), "-e",
                         '{"site_inventories": ["gb300-cluster"], "site_forks": 300, '
                         '"site_internal_poll_interval": 0.05, '
                         '"site_ssh_kex_algorithms": "curve25519-sha256,sntrup761x25519-sha512@openssh.com"}')
    assert rc == 0, out
    fast = _cfg(tmp_path / "s" / "ansible.cfg")
    assert fast.get("defaults", "forks") == "300"
    assert "KexAlgorithms=curve25519-sha256,sntrup761x25519-sha512@openssh.com" in fast.get(
        "ssh_connection", "ssh_args").split()
    env = dict(os.environ, ANSIBLE_CONFIG=str(tmp_path / "s" / "ansible.cfg"))
    p = cli.run([os.path.join(os.path.dirname(sys.executable), "ansible-config"), "dump", "--only-changed",
                 "-t", "all"], env=env, timeout=120)
    assert re.search(r"DEFAULT_FORKS.*= 300", p.stdout) and re.search(r"DEFAULT_GATHERING.*= explicit", p.stdout)
    # the key is one ansible-core reads (from ansible.cfg only; ANSIBLE_INTERNAL_POLL_INTERVAL does nothing)
    assert re.search(r"DEFAULT_INTERNAL_POLL_INTERVAL.*= 0\.05", p.stdout), p.stdout
    assert "KexAlgorithms=curve25519-sha256" in p.stdout


def test_every_operator_playbook_gets_a_wrapper():
    with open(os.path.join(REPO, "roles", "site", "defaults", "main.yml")) as f:
        wrapped = sorted(yaml.safe_load(f)["site_playbooks"])
    shipped = sorted(os.path.splitext(n)[0] for n in os.listdir(os.path.join(REPO, "playbooks")) if n.endswith(".yml"))
    assert wrapped == list(OPERATOR_PLAYBOOKS)
    assert sorted(wrapped + ["site_init"]) == shipped


def test_default_site_gets_the_examples_but_not_the_rehearsal_inventories(tmp_path):
    rc, out = _site_init(tmp_path, "-e", "site_dir=%s" % (tmp_path / "s"))
    assert rc == 0, out
    assert sorted(os.listdir(str(tmp_path / "s" / "inventories"))) == EXAMPLES
    readme = (tmp_path / "s" / "README.md").read_text()
    assert "Inventories here: %s." % ", ".join(EXAMPLES) in readme
    assert ["`%s.yml`" % n for n in OPERATOR_PLAYBOOKS if "`%s.yml`" % n not in readme] == []


def test_rehearsal_inventories_only_when_asked(tmp_path):
    rc, out = _site_init(tmp_path, "-e", "site_dir=%s" % (tmp_path / "s"), "-e", "site_rehearsal_inventories=true")
    assert rc == 0, out
    got = sorted(os.listdir(str(tmp_path / "s" / "inventories")))
    assert got == sorted(EXAMPLES + ["sim-cpu", "sim-cpu-auto", "sim-cpu-fleet", "sim-cpu-single", "sim-gb300", "sim-gb300-fleet",
                                     "sim-gb300-pd", "sim-mi355x"])
    # the fleet's cluster-wide variables are the pair's, through a link that holds in the site too
    with open(str(tmp_path / "s" / "inventories" / "sim-cpu-fleet" / "group_vars" / "vllm_cluster.yml")) as f:
        assert "kimi_k3_accelerator: cpu" in f.read()


def test_rehearsal_inventories_refused_where_none_ship(tmp_path):
    """An installed collection has no inventories/sim-*: asking for them is refused with what to do instead."""
    coll = tmp_path / "coll" / "ansible_collections" / "gpufleet" / "kimi_k3"
    coll.mkdir(parents=True)
    for name in ("galaxy.yml", "roles", "playbooks", "plugins", "meta"):
        os.symlink(os.path.join(REPO, name), str(coll / name))
    (coll / "inventories").mkdir()
    os.symlink(os.path.join(REPO, "inventories", "gb300-cluster"), str(coll / "inventories" / "gb300-cluster"))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "coll"))
    p = cli.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "gpufleet.kimi_k3.site_init",
                 "-e", "site_dir=%s" % (tmp_path / "s"), "-e", "site_rehearsal_inventories=true"],
                cwd=tmp_path, env=env, timeout=180, check=False)
    assert p.returncode != 0, cli.failure(p)
    # the refusal is the play's failed task: ansible-playbook prints it on stdout
    assert "has no inventories/sim-*" in " ".join(p.stdout.split()), cli.failure(p)
    assert not (tmp_path / "s" / "inventories").exists()
