"""The controller-side actions validate their arguments against the one spec their module file documents
(plugin_utils/actions/specs.py): defaults applied, choices and unknown names refused before anything runs."""
import json

from tests.helpers.runner import failed_tasks, run_playbook, task_results

PLAYBOOK = """
- name: Call the actions with good and bad arguments
  hosts: localhost
  gather_facts: false
  connection: local
  tasks:
    - name: Read an empty state record (op defaults to read)
      gpufleet.kimi_k3.deployment_state:
        plan_dir: "{{ plan_dir }}"
    - name: An op that does not exist
      gpufleet.kimi_k3.deployment_state:
        plan_dir: "{{ plan_dir }}"
        op: deploy
      ignore_errors: true
    - name: An empty plan_dir (present, so the spec's required lets it through)
      gpufleet.kimi_k3.deployment_state:
        plan_dir: ""
      ignore_errors: true
    - name: An argument that does not exist
      gpufleet.kimi_k3.vllm_wait:
        container: vllm-kimi-k3
        stall_timout: 10
      ignore_errors: true
    - name: A plan with a group name that is not a string
      gpufleet.kimi_k3.cluster_plan:
        group: [vllm_cluster]
      ignore_errors: true
"""


def _failed(runner, task):
    """The msg of the (ignored) failure of ``task``, None when it did not fail."""
    for ev in runner.events:
        data = ev.get("event_data", {})
        if ev.get("event") == "runner_on_failed" and data.get("task") == task:
            return data["res"].get("msg", "")
    return None


def test_actions_apply_defaults_and_refuse_bad_arguments(tmp_path):
    playbook = tmp_path / "actions.yml"
    playbook.write_text(PLAYBOOK)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {"localhost": {"ansible_python_interpreter": "auto_silent"}}}}))
    r = run_playbook(str(playbook), str(inventory), extravars={"plan_dir": str(tmp_path / "plans")})
    assert r.status == "successful", failed_tasks(r)
    read = task_results(r, "Read an empty state record (op defaults to read)")["localhost"]
    assert read.get("failed") is not True and read["changed"] is False and "state" in read
    assert _failed(r, "Read an empty state record (op defaults to read)") is None
    assert "value of op must be one of: read, ready" in _failed(r, "An op that does not exist")
    assert "plan_dir is required" in _failed(r, "An empty plan_dir (present, so the spec's required lets it through)")
    assert "stall_timout" in _failed(r, "An argument that does not exist")
    assert "group" in _failed(r, "A plan with a group name that is not a string")
