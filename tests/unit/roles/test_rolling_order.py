"""roles/upgrade/tasks/rolling.yml replaces the deployments in its loop's order, never in the order hosts answered.

Ansible turns a looped include into one include file per distinct item and orders those files by the first host
result that names them. With a per-host `when` on the include, each deployment's step was named only by its own
hosts' results, so whichever replica's node answered first went down first (CI: replica-2 replaced before
replica-1). Every host must include every step and the host condition must sit on the step's outer block.
"""
import os

import yaml

from tests.helpers.runner import REPO

TASKS = os.path.join(REPO, "roles", "upgrade", "tasks")


def _load(name):
    with open(os.path.join(TASKS, name)) as handle:
        return yaml.safe_load(handle)


def test_every_host_includes_every_step_in_loop_order():
    (include,) = [t for t in _load("rolling.yml") if "ansible.builtin.include_tasks" in t]
    assert include["ansible.builtin.include_tasks"] == "rolling_step.yml"
    assert "when" not in include, "a per-host condition on the looped include orders the steps by host answers"
    assert "sort(attribute='start_phase')" in include["loop"]


def test_the_step_runs_only_on_its_deployments_hosts():
    step = _load("rolling_step.yml")
    assert len(step) == 1 and "block" in step[0]
    assert step[0]["when"] == "inventory_hostname in upgrade_rolling_deployment.hosts"
    names = [t["name"] for t in step[0]["block"]]
    assert names == ["Replace this deployment", "Roll back this deployment alone, or note it as replaced"]
