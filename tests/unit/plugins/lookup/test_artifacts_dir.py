"""gpufleet.kimi_k3.artifacts_dir: where plans and reports go (docs/install.md "Where the artifacts go")."""
import os

import pytest
from ansible.errors import AnsibleLookupError

from tests.helpers import cli
from tests.helpers.cli import tool
from ansible_collections.gpufleet.kimi_k3.plugins.lookup.artifacts_dir import artifacts_dir

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


def test_default_is_the_working_directory(tmp_path):
    assert artifacts_dir(str(tmp_path)) == os.path.join(str(tmp_path), "artifacts")


@pytest.mark.parametrize("configured, expected", [
    ("/srv/kimi/artifacts", "/srv/kimi/artifacts"),
    ("out/run1", "{cwd}/out/run1"),
    ("./out/../reports", "{cwd}/reports"),
])
def test_configured_path_wins_relative_to_cwd(tmp_path, configured, expected):
    assert artifacts_dir(str(tmp_path), configured) == expected.format(cwd=str(tmp_path))


def test_home_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert artifacts_dir("/", "~/kimi") == os.path.join(str(tmp_path), "kimi")


def test_refuses_cwd_inside_an_installed_collection(tmp_path):
    root = tmp_path / "ansible_collections" / "gpufleet" / "kimi_k3"
    (root / "playbooks").mkdir(parents=True)
    with pytest.raises(AnsibleLookupError, match="inside the installed collection.*kimi_k3_artifacts_dir"):
        artifacts_dir(str(root / "playbooks"), collection_root=str(root))
    # a configured path is the operator's decision
    assert artifacts_dir(str(root), "/srv/a", collection_root=str(root)) == "/srv/a"
    # a source checkout (not under ansible_collections/) is a working tree, not an installed copy
    assert artifacts_dir(str(tmp_path), collection_root=str(tmp_path)) == os.path.join(str(tmp_path), "artifacts")


def _playbook(tmp_path, extra):
    pb = tmp_path / "pb.yml"
    pb.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n"
                  "    - ansible.builtin.debug:\n        msg: \"ART={{ lookup('gpufleet.kimi_k3.artifacts_dir') }}\"\n")
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, "build", "collections"), PWD="/stale")
    run = tmp_path / "run"
    run.mkdir()
    p = cli.run([tool("ansible-playbook"), str(pb)] + extra, cwd=run, env=env, timeout=120)
    return [ln.split("ART=", 1)[1].strip().strip('"') for ln in p.stdout.splitlines() if "ART=" in ln][0], run


def test_lookup_in_a_play_follows_cwd_not_pwd_or_playbook_dir(tmp_path):
    got, run = _playbook(tmp_path, [])
    assert got == os.path.join(str(run), "artifacts")


def test_lookup_templates_the_configured_variable(tmp_path):
    got, run = _playbook(tmp_path, ["-e", "base=/srv", "-e", "kimi_k3_artifacts_dir={{ base }}/k3"])
    assert got == "/srv/k3"
