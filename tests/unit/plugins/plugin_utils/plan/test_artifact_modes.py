"""Issue #39 finding 4: every artifact the collection writes on the controller is 0600, every directory it makes
for them 0700 - the plan files and state record, the report actions' files, the monitoring tree, the capacity
report module, and the files the roles write with ansible.builtin.copy/file."""
import glob
import json
import os
import stat

import pytest
import yaml

from ansible_collections.gpufleet.kimi_k3.plugins.action import cluster_layouts
from ansible_collections.gpufleet.kimi_k3.plugins.action import fabric_report
from ansible_collections.gpufleet.kimi_k3.plugins.action import monitoring_config
from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.common import artifacts
from ansible_collections.gpufleet.kimi_k3.plugins.modules import vllm_capacity_report
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import files as plan_files
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.rollout import state as deploy_state
from tests.helpers.runner import REPO

PLANS = {"t1": {"host": "t1", "container": {"labels": {}}}}


def _mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def _walk_modes(root):
    """{relative path: mode} of every file and directory under root (symlinks left out: their mode is not theirs)."""
    out = {}
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(base, name)
            if not os.path.islink(path):
                out[os.path.relpath(path, root)] = _mode(path)
    return out


def test_every_controller_writer_makes_owner_only_files_and_directories(tmp_path):
    old = os.umask(0o022)  # the usual umask: without the explicit modes, 0644 files and 0755 directories
    try:
        art = tmp_path / "artifacts"
        plan_dir = str(art / "plan")
        pid = plan_files.write_plan(plan_dir, {"t1.json": ("{}\n", 0o600), "plan.md": ("# plan\n", 0o600)}, PLANS)[0]
        plan_files.write_state(plan_dir, dict(deploy_state.empty(), deployed={"plan_id": pid}))
        plan_files.write_files(str(art), {"preflight-report.json": ("{}\n", 0o600), "preflight-report.md": ("", 0o600)})
        # the fabric action's files merged into an existing preflight report, as ReportAction writes them
        plan_files.write_files(str(art), fabric_report._files(str(art), fabric_report.R.build_report({}, {})))
        plan_files.write_files(str(art), {"layouts.json": ("{}\n", cluster_layouts.REPORT_MODE)})
        monitoring_config.write_tree(str(art / "monitoring"), monitoring_config.serialize(
            {"prometheus.yml": {"global": {}}, "targets/vllm.json": [], "grafana/dash.json": {}}), False)
        capacity = str(art / "capacity")
        artifacts.make_dirs(capacity)
        assert vllm_capacity_report._write(os.path.join(capacity, "capacity.json"), b"{}\n", False)
        modes = _walk_modes(str(tmp_path))
    finally:
        os.umask(old)
    dirs = dict((p, m) for p, m in modes.items() if os.path.isdir(os.path.join(str(tmp_path), p)))
    files = dict((p, m) for p, m in modes.items() if p not in dirs)
    for expected in ("artifacts/plan/state.json", "artifacts/plan/plan.md", "artifacts/plan/plans/%s/t1.json" % pid,
                     "artifacts/monitoring/prometheus.yml", "artifacts/monitoring/grafana/dash.json",
                     "artifacts/capacity/capacity.json", "artifacts/fabric-report.json", "artifacts/layouts.json"):
        assert expected in files, sorted(files)
    assert set(files.values()) == {0o600}, files
    assert "artifacts" in dirs and "artifacts/plan/plans" in dirs and "artifacts/monitoring/targets" in dirs
    assert set(dirs.values()) == {0o700}, dirs


def test_a_file_an_earlier_release_wrote_0644_is_made_0600(tmp_path):
    path = tmp_path / "capacity.json"
    path.write_bytes(b"{}\n")
    os.chmod(str(path), 0o644)
    assert vllm_capacity_report._write(str(path), b"{}\n", False) and _mode(str(path)) == 0o600
    assert not vllm_capacity_report._write(str(path), b"{}\n", False)  # the second run changes nothing
    (tmp_path / "report.md").write_text("x")
    os.chmod(str(tmp_path / "report.md"), 0o644)
    assert plan_files.write_files(str(tmp_path), {"report.md": ("x", plan_files.ARTIFACT_FILE_MODE)}) == ["report.md"]
    assert _mode(str(tmp_path / "report.md")) == 0o600


def test_an_existing_directory_keeps_its_mode(tmp_path):
    os.chmod(str(tmp_path), 0o755)
    plan_files.write_files(str(tmp_path), {"a.json": ("{}", 0o600)})
    assert _mode(str(tmp_path)) == 0o755


# role and playbook tasks that write on the controller: their dest/path is under one of these variables
CONTROLLER_DIRS = ("artifacts_dir", "smoke_report_dir", "plan_dir", "capacity_report_dir", "monitoring_dir")


def _tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always", "tasks"):
            yield from _tasks(node.get(key) or [])


def _writers():
    out = []
    for path in sorted(glob.glob(os.path.join(REPO, "roles", "*", "tasks", "*.yml")) +
                       glob.glob(os.path.join(REPO, "playbooks", "*.yml"))):
        with open(path) as handle:
            for task in _tasks(yaml.safe_load(handle) or []):
                for action in ("ansible.builtin.copy", "ansible.builtin.template", "ansible.builtin.file"):
                    args = task.get(action)
                    where = json.dumps(args) if isinstance(args, dict) else ""
                    if any(d in where for d in CONTROLLER_DIRS) and (args.get("state") in (None, "directory")):
                        out.append((os.path.relpath(path, REPO), task.get("name"), action, args))
    return out


WRITERS = _writers()


def test_the_role_writers_are_found():
    names = set(t for _p, t, _a, _args in WRITERS)
    assert {"Write status.json", "Write the JSON report", "Write the router status report",
            "Write each node's log tail to the artifacts directory"} <= names, names


@pytest.mark.parametrize("path, name, action, args", WRITERS, ids=["%s: %s" % (w[0], w[1]) for w in WRITERS])
def test_every_role_task_writing_an_artifact_sets_owner_only_mode(path, name, action, args):
    directory = action == "ansible.builtin.file"
    assert str(args.get("mode")) == ("0700" if directory else "0600"), (path, name)
