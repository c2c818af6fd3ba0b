"""plan.yml end to end (no host contacted): example inventories plan cleanly, invalid ones are refused."""
import glob
import json
import os

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import vllm_flags
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data
from tests.helpers.runner import REPO, failed_tasks, run_playbook

SNAP = recipe_data.load_snapshots()
# The examples read the API key from the controller's environment; without one the plan refuses them (test below).
API_KEY_ENV = {"KIMI_K3_API_KEY": "unit-test-placeholder"}
EXAMPLES = ["inventories/gb300-cluster", "inventories/gb300-dep16", "inventories/mi355x-cluster",
            "inventories/mi355x-rdma-2node", "inventories/gb300-pd", "inventories/gb300-fleet"]


@pytest.mark.parametrize("inventory", EXAMPLES)
def test_example_inventory_plans_are_accepted_by_their_vllm_version(inventory, tmp_path):
    r = run_playbook("plan.yml", inventory, extravars={"plan_dir": str(tmp_path)}, envvars=API_KEY_ENV)
    assert r.status == "successful", failed_tasks(r)
    plans = sorted(glob.glob(str(tmp_path / "*.json")))
    scripts = sorted(glob.glob(str(tmp_path / "*.sh")))
    assert plans and len(plans) == len(scripts)
    heads, deployments = 0, set()
    for path in plans:
        with open(path) as handle:
            p = json.load(handle)
        if p["role"] == "router":  # the vllm-router host of a fleet or PD cluster (no vllm serve argv)
            assert "@sha256:" in p["image"] and p["router"]["argv"][0] == "vllm-router"
            continue
        deployments.add(p["deployment"])
        for key in ("role", "node_rank", "image", "env", "container", "vllm_args"):
            assert key in p
        assert "@sha256:" in p["image"]
        assert all(isinstance(v, str) for v in p["env"].values())
        assert vllm_flags.check_argv(p["vllm_args"], SNAP[p["vllm_version"]]) == []
        heads += p["role"] == "head"
    assert heads == len(deployments)  # one head per deployment
    # Nothing on the runner's side touched a node: every event is for a task delegated to localhost or skipped.
    for ev in r.events:
        data = ev.get("event_data", {})
        assert ev.get("event") != "runner_on_unreachable"
        res = data.get("res", {})
        if ev.get("event") in ("runner_on_ok", "runner_item_on_ok") and "results" not in res and \
                data.get("task_action") not in ("ansible.builtin.validate_argument_spec", "validate_argument_spec",
                                                "ansible.builtin.include_role", "include_role"):
            delegated = data.get("res", {}).get("_ansible_delegated_vars", {})
            assert delegated.get("ansible_connection") == "local", data.get("task")


def test_second_run_changes_nothing(tmp_path):
    run_playbook("plan.yml", EXAMPLES[0], extravars={"plan_dir": str(tmp_path)}, envvars=API_KEY_ENV)
    r = run_playbook("plan.yml", EXAMPLES[0], extravars={"plan_dir": str(tmp_path)}, envvars=API_KEY_ENV)
    assert r.status == "successful"
    assert sum(h for h in r.stats["changed"].values()) == 0


def test_diff_after_changing_one_value_shows_the_changed_flag(tmp_path):
    """--diff shows the files the plan rewrites: --max-model-len's old and new value in each node's .json, .sh
    and plan.md; the API key the inventory holds is in none of them. A second run with --diff shows nothing."""
    extravars = {"plan_dir": str(tmp_path)}
    key = {"KIMI_K3_API_KEY": "zQcanary-diff-key"}
    run_playbook("plan.yml", EXAMPLES[0], extravars=extravars, envvars=key)
    assert (tmp_path / "plan.md").is_file() and (tmp_path / "plan.md").stat().st_mode & 0o777 == 0o600
    r = run_playbook("plan.yml", EXAMPLES[0], extravars=dict(extravars, kimi_k3_max_model_len=131072), envvars=key,
                     diff=True)
    assert r.status == "successful", failed_tasks(r)
    (res,) = [ev["event_data"]["res"] for ev in r.events if ev.get("event") == "runner_on_ok"
              and ev["event_data"].get("task_action") == "gpufleet.kimi_k3.cluster_plan"]
    shown = dict((os.path.basename(d["after_header"]), d) for d in res["diff"])
    assert "plan.md" in shown and any(n.endswith(".sh") for n in shown) and any(n.endswith(".json") for n in shown)
    for d in shown.values():
        assert "131072" in d["after"] and "131072" not in d["before"], d["after_header"]
    sh = [d for n, d in shown.items() if n.endswith(".sh")][0]
    assert "--max-model-len 131072" in sh["after"] and "--max-model-len 131072" not in sh["before"]
    assert "zQcanary" not in json.dumps(res) and "zQcanary" not in (tmp_path / "plan.md").read_text()
    again = run_playbook("plan.yml", EXAMPLES[0], extravars=dict(extravars, kimi_k3_max_model_len=131072),
                         envvars=key, diff=True)
    (res,) = [ev["event_data"]["res"] for ev in again.events if ev.get("event") == "runner_on_ok"
              and ev["event_data"].get("task_action") == "gpufleet.kimi_k3.cluster_plan"]
    assert not res.get("diff") and not res["changed"]


@pytest.mark.parametrize("variable, leaf", [("kimi_k3_extra_args", '"--x"'),
                                            ("image_registry_credentials", "{registry: docker.io, username: u, password: p}")])
def test_an_alias_bomb_in_the_inventory_is_refused_by_its_size(tmp_path, variable, leaf):
    """A variable built from nested YAML aliases (10^6 leaves from seven lines) is refused naming the variable; the
    action hands the value over untemplated (templating it took 38 s here), so the run stays short."""
    import shutil
    inv = tmp_path / "inv"
    shutil.copytree(os.path.join(REPO, EXAMPLES[0]), str(inv))
    anchors = ['  - &l0 [%s]' % ", ".join([leaf] * 10)]
    anchors += ["  - &l%d [%s]" % (i, ", ".join(["*l%d" % (i - 1)] * 10)) for i in range(1, 6)]
    with open(str(inv / "group_vars" / "vllm_cluster.yml"), "a") as handle:
        handle.write("operator_anchors:\n%s\n%s: *l5\n" % ("\n".join(anchors), variable))
    r = run_playbook("plan.yml", str(inv), extravars={"plan_dir": str(tmp_path / "plan")}, envvars=API_KEY_ENV)
    assert r.status == "failed"
    msgs = " ".join(m for _h, _t, m in failed_tasks(r))
    assert "%s: holds more than 10000 items" % variable in msgs and "refused before it is expanded" in msgs
    assert not (tmp_path / "plan").exists()


def test_invalid_inventory_refused_with_every_problem_and_no_files(tmp_path):
    inv = os.path.join(REPO, "tests/unit/fixtures/inventories/invalid-gb300")
    out = tmp_path / "plan"
    r = run_playbook("plan.yml", inv, extravars={"plan_dir": str(out)})
    assert r.status == "failed" and r.rc != 0
    msgs = " ".join(m for _h, _t, m in failed_tasks(r))
    for fragment in ("kimi_k3_image", "not pinned by digest", "kimi_k3_gpus_per_node", "single_node_tp runs on one node"):
        assert fragment in msgs
    assert not out.exists()


def test_example_without_api_key_is_refused_naming_the_variable(tmp_path):
    r = run_playbook("plan.yml", EXAMPLES[0], extravars={"plan_dir": str(tmp_path / "plan")},
                     envvars={"KIMI_K3_API_KEY": ""})
    assert r.status == "failed"
    msgs = " ".join(m for _h, _t, m in failed_tasks(r))
    assert "kimi_k3_api_key" in msgs and "kimi_k3_allow_unauthenticated_api" in msgs and "gb300-tray01" in msgs


def test_a_later_plan_play_keeps_the_plan_an_earlier_play_made(tmp_path):
    """smoke.yml (imported by deploy.yml after the plan) plans only when no plan exists: its skipped plan must not
    replace plan_result on any host, the router host of a fleet included (a `roles:` entry with `when` did)."""
    import yaml
    with open(os.path.join(REPO, "playbooks", "smoke.yml")) as handle:
        smoke_plan_play = yaml.safe_load(handle)[0]
    plays = [
        {"name": "plan", "hosts": "vllm_cluster:vllm_router", "gather_facts": False,
         "roles": [{"role": "gpufleet.kimi_k3.plan", "run_once": True}]},
        smoke_plan_play,
        {"name": "check", "hosts": "vllm_cluster:vllm_router", "gather_facts": False, "tasks": [
            {"name": "Every host still has its plan", "ansible.builtin.assert": {
                "that": ["plan_result.plans is defined", "inventory_hostname in plan_result.plans"]}}]},
    ]
    playbook = tmp_path / "pb.yml"
    playbook.write_text(yaml.safe_dump(plays, sort_keys=False))
    r = run_playbook(str(playbook), "inventories/gb300-fleet", extravars={"plan_dir": str(tmp_path / "plans")},
                     envvars=API_KEY_ENV)
    assert r.status == "successful", failed_tasks(r)
    checked = [ev["event_data"]["host"] for ev in r.events if ev.get("event") == "runner_on_ok"
               and ev.get("event_data", {}).get("task") == "Every host still has its plan"]
    assert "kimi-router01" in checked and len(checked) == 5, checked  # 2 replicas x 2 trays + the router


def test_plan_playbook_plans_once_and_returns_the_count_not_the_plans(tmp_path):
    """plan.yml includes the role once (no per-host role_complete step) and leaves the plans in the
    files: its plan_result carries the node count, the summary and the cluster, not plan_result.plans. A --limit
    to one worker still plans (and writes) every node."""
    r = run_playbook("plan.yml", EXAMPLES[1], extravars={"plan_dir": str(tmp_path)}, envvars=API_KEY_ENV,
                     limit="gb300-tray02")
    assert r.status == "successful", failed_tasks(r)
    planned = [ev["event_data"] for ev in r.events if ev.get("event") == "runner_on_ok"
               and ev["event_data"].get("task_action") == "gpufleet.kimi_k3.cluster_plan"]
    assert len(planned) == 1
    res = planned[0]["res"]
    files = sorted(glob.glob(str(tmp_path / "*.json")))
    assert "plans" not in res and res["nodes"] == len(files) == 4
    assert res["cluster"]["head"] and res["summary"]
    summary = [ev["event_data"]["res"]["msg"] for ev in r.events if ev.get("event") == "runner_on_ok"
               and ev["event_data"].get("task") == "What was written and what to look at next"]
    assert any("(4 node(s))" in line for line in summary[0]), summary
