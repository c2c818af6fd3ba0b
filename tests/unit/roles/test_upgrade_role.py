"""roles/upgrade and the playbooks that run it: every write of the deployment state record in the role's task files
is a move of the rollout table (plugins/plugin_utils/rollout/transitions.py), and each path an upgrade can take
through the
phases (passed, rolled back after the launch or the smoke stage, rolling behind a router, interrupted and
recovered) is a legal sequence that ends idle. upgrade.yml and recover.yml are role lists; the task names and
messages the integration drills and the chaos soak match are where they look for them."""
import os

import pytest
import yaml

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.rollout import transitions as R
from tests.helpers.runner import REPO

TASKS = os.path.join(REPO, "roles", "upgrade", "tasks")
PHASES = ["pull", "launch", "smoke", "finish", "recover"]


def _load(*parts):
    with open(os.path.join(REPO, *parts)) as handle:
        return yaml.safe_load(handle)


def _walk(tasks):
    for task in tasks or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _walk(task.get(key))


def record_events(name):
    """The rollout events the task file ``name`` writes, in file order."""
    out = []
    for task in _walk(_load("roles", "upgrade", "tasks", name + ".yml")):
        args = task.get("gpufleet.kimi_k3.deployment_state")
        if args is not None and args.get("op", "read") not in ("read", "ready", "failed"):
            out.append(R.event_of(args["op"], args.get("stage")))
    return out


def test_each_task_file_writes_its_moves_in_order():
    assert {name: record_events(name) for name in PHASES + ["rollback", "rolling", "rolling_step"]} == {
        "pull": ["begin", "supersede"],  # exclusive: idle record / an interrupted one the operator ignored
        "launch": ["launch"], "smoke": ["smoke"], "finish": ["end"], "recover": ["recover"],
        "rollback": ["rollback", "end"], "rolling": [], "rolling_step": []}


@pytest.mark.parametrize("path, start", [
    (["pull:0", "launch", "smoke", "finish"], "idle"),                      # the smoke gate passed
    (["pull:0", "launch", "rollback"], "idle"),                            # the launch failed
    (["pull:0", "launch", "smoke", "rollback"], "idle"),                   # the smoke gate failed
    (["pull:0", "launch", "finish"], "idle"),                              # rolling behind a router
    (["pull:1", "launch", "smoke", "finish"], "launch"),                   # over an ignored interrupted upgrade
    (["recover"], "pull"), (["recover"], "launch"), (["recover"], "smoke"), (["recover"], "rollback"),
])
def test_every_path_through_the_phases_is_legal_and_ends_idle(path, start):
    state = start
    for step in path:
        name, _sep, index = step.partition(":")
        events = record_events(name)
        for event in [events[int(index)]] if index else events:
            state = R.transition(state, event)
    assert state == "idle"


def test_the_phases_the_spec_offers_are_the_task_files():
    spec = _load("roles", "upgrade", "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert spec["upgrade_phase"]["choices"] == PHASES
    assert all(os.path.isfile(os.path.join(TASKS, p + ".yml")) for p in PHASES)


@pytest.mark.parametrize("playbook, phases", [
    ("upgrade.yml", ["pull", "launch", "smoke", "finish"]),
    ("recover.yml", ["recover"]),
])
def test_the_playbooks_are_role_lists(playbook, phases):
    plays = _load("playbooks", playbook)
    with_tasks = [p["name"] for p in plays if "tasks" in p]
    # recover.yml plans only when no earlier play of the run did: a task condition, not a role list
    assert with_tasks == (["Plan the deployment (contacts no host)"] if playbook == "recover.yml" else [])
    got = [r["upgrade_phase"] for p in plays for r in p.get("roles", []) if r["role"] == "gpufleet.kimi_k3.upgrade"]
    assert got == phases


def _names(name):
    return [t.get("name") for t in _walk(_load("roles", "upgrade", "tasks", name + ".yml"))]


@pytest.mark.parametrize("task_file, name", [
    ("rollback", "Fail the upgrade after a successful rollback"),                       # drills a, test_c, real d
    ("finish", "Fail the rolling upgrade after rolling back the deployment that failed"),  # router fleet
    ("pull", "Pre-pull the new digest on every node"),                                  # chaos soak marker
    ("launch", "Launch"), ("smoke", "Smoke"),
])
def test_the_task_names_the_drills_match(task_file, name):
    assert name in _names(task_file)


def test_recover_still_says_what_it_found_and_finishes_the_rollback():
    (say,) = [t for t in _walk(_load("roles", "upgrade", "tasks", "recover.yml")) if t.get("name") == "Say what was found"]
    assert "'Finishing the rollback to '" in say["ansible.builtin.debug"]["msg"]
    assert "upgrade_recover_state.interrupted" in say["ansible.builtin.debug"]["msg"]
