"""scripts/demo.sh exits non-zero when a deploy (or any other step) fails, and prints its timing table either way.
Run against a copy of the script with stand-ins for the host tools, scripts/setup.sh, sim/simctl and the venv's
ansible-playbook / ansible-inventory."""
import os
import shutil
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RECORD = """#!/bin/sh
echo "$(basename "$0") $*" >> "$CALLS"
"""
# ansible-playbook stand-in: fails (exit 2) on the inventory named in $DEPLOY_FAIL
PLAYBOOK = RECORD + """case "$3" in *"${DEPLOY_FAIL:-none}"*) exit 2 ;; esac
exit 0
"""
INVENTORY = """#!/bin/sh
printf '@vllm_head:\\n  |--head0\\n'
"""
SETUP = RECORD + 'exit "${SETUP_RC:-0}"\n'
SIMCTL = RECORD + '[ "$1" = down ] && exit "${DOWN_RC:-0}"\nexit 0\n'
HOST_TOOLS = {"id": "#!/bin/sh\necho 0\n", "python3": "#!/bin/sh\nexit 0\n"}
HOST_TOOLS.update(dict((name, "#!/bin/sh\nexit 0\n") for name in ("dockerd", "debootstrap", "docker-registry", "make")))


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


def _repo(tmp_path):
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(os.path.join(REPO, "scripts", "demo.sh"), str(repo / "scripts" / "demo.sh"))
    for rel, text in (("scripts/setup.sh", SETUP), ("sim/simctl", SIMCTL), (".venv/bin/ansible-playbook", PLAYBOOK),
                      (".venv/bin/ansible-inventory", INVENTORY)):
        _write(repo / rel, text)
    for name, text in HOST_TOOLS.items():
        _write(tmp_path / "bin" / name, text)
    return repo


def _run(tmp_path, *args, **env):
    repo = _repo(tmp_path)
    calls = tmp_path / "calls"
    e = dict(os.environ, CALLS=str(calls), PATH="%s:%s" % (tmp_path / "bin", os.environ["PATH"]), **env)
    p = subprocess.run(["bash", str(repo / "scripts" / "demo.sh")] + list(args), cwd=str(repo), env=e,
                       capture_output=True, text=True, timeout=60, check=False)
    return p, calls.read_text().splitlines() if calls.exists() else []


def _timing(stdout):
    table = stdout.split("==> timing\n", 1)[1].splitlines()
    return [row.rsplit(None, 1)[0].strip() for row in table]


def test_every_deploy_passing_exits_zero_with_the_timing_table(tmp_path):
    p, calls = _run(tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert _timing(p.stdout) == ["python venv + collection link", "rehearsal cluster gb300 up",
                                 "deploy.yml on inventories/sim-gb300", "total"]
    assert [c.split()[0] for c in calls] == ["setup.sh", "simctl", "ansible-playbook"]


def test_a_failed_deploy_exits_non_zero_after_the_other_clusters_and_the_table(tmp_path):
    p, calls = _run(tmp_path, "--cluster", "all", DEPLOY_FAIL="sim-mi355x")
    assert p.returncode == 2, p.stdout + p.stderr
    # the clusters after the failed one are still deployed
    assert [c.split()[3] for c in calls if c.startswith("ansible-playbook")] == [
        "inventories/sim-gb300", "inventories/sim-mi355x", "inventories/sim-cpu"]
    assert _timing(p.stdout)[4:] == ["deploy.yml on inventories/sim-gb300",
                                     "deploy.yml on inventories/sim-mi355x (FAILED, exit 2)",
                                     "deploy.yml on inventories/sim-cpu", "total"]
    assert "demo: a step failed (exit 2)" in p.stderr


def test_a_failed_setup_step_stops_the_demo_and_still_prints_the_table(tmp_path):
    p, calls = _run(tmp_path, SETUP_RC="3")
    assert p.returncode == 3
    assert _timing(p.stdout) == ["python venv + collection link (FAILED, exit 3)", "total"]
    assert calls == ["setup.sh "]


@pytest.mark.parametrize("deploy_fail,want", [("none", 4), ("sim-gb300", 2)])
def test_a_failed_teardown_fails_the_demo_and_the_deploys_status_comes_first(tmp_path, deploy_fail, want):
    p, _calls = _run(tmp_path, "--down", DOWN_RC="4", DEPLOY_FAIL=deploy_fail)
    assert p.returncode == want
    assert _timing(p.stdout)[-2] == "rehearsal cluster down (FAILED, exit 4)"
