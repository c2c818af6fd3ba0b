"""The deployment_state action moves the state record along the rollout table and refuses an illegal move through
Ansible with the table's message, leaving state.json as it was; check mode reports the move and writes nothing."""
import json

from tests.helpers.runner import run_playbook, task_results

PLAYBOOK = """
- name: Move the record along the rollout table
  hosts: localhost
  gather_facts: false
  connection: local
  tasks:
    - name: Begin in check mode
      gpufleet.kimi_k3.deployment_state: {plan_dir: "{{ plan_dir }}", op: upgrade_begin, from_image: img@a,
                                          to_image: img@b, from_plan_id: p1, to_plan_id: p2}
      check_mode: true
    - name: Begin
      gpufleet.kimi_k3.deployment_state: {plan_dir: "{{ plan_dir }}", op: upgrade_begin, from_image: img@a,
                                          to_image: img@b, from_plan_id: p1, to_plan_id: p2}
    - name: Smoke before launch
      gpufleet.kimi_k3.deployment_state: {plan_dir: "{{ plan_dir }}", op: upgrade_stage, stage: smoke}
      ignore_errors: true
    - name: Launch
      gpufleet.kimi_k3.deployment_state: {plan_dir: "{{ plan_dir }}", op: upgrade_stage, stage: launch}
    - name: Pull again
      gpufleet.kimi_k3.deployment_state: {plan_dir: "{{ plan_dir }}", op: upgrade_stage, stage: pull}
      ignore_errors: true
    - name: A stage without its name
      gpufleet.kimi_k3.deployment_state: {plan_dir: "{{ plan_dir }}", op: upgrade_stage}
      ignore_errors: true
"""


def test_the_action_follows_the_table(tmp_path):
    playbook = tmp_path / "rollout.yml"
    playbook.write_text(PLAYBOOK)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {"localhost": {"ansible_python_interpreter": "auto_silent"}}}}))
    plan_dir = tmp_path / "plans"
    r = run_playbook(str(playbook), str(inventory), extravars={"plan_dir": str(plan_dir)})
    assert r.status == "successful"
    res = dict((name, task_results(r, name)["localhost"])
               for name in ("Begin in check mode", "Begin", "Smoke before launch", "Launch", "Pull again",
                            "A stage without its name"))
    assert res["Begin in check mode"]["changed"] is True and res["Begin in check mode"]["rollout_state"] == "pull"
    # the check-mode begin wrote nothing: the real one still starts from idle
    assert res["Begin"]["changed"] is True and res["Begin"]["rollout_state"] == "pull"
    assert res["Smoke before launch"]["msg"] == (
        "deployment_state: Refused to note the smoke stage (smoke) in rollout state pull: an upgrade was noted and "
        "the new digest is being pulled; nothing was stopped yet. Allowed from pull: supersede, launch, recover. "
        "Another run may be changing this deployment, or the state record was edited: playbooks/status.yml shows "
        "the record and every node.")
    assert res["Launch"]["rollout_state"] == "launch"
    assert "value of stage must be one of: launch, smoke, rollback" in res["Pull again"]["msg"]
    assert res["A stage without its name"]["msg"] == (
        "deployment_state: op=upgrade_stage needs stage (launch, smoke or rollback)")
    state = json.loads((plan_dir / "state.json").read_text())
    assert state["upgrade"]["stage"] == "launch" and state["upgrade"]["to_image"] == "img@b"


OUTCOME = """
- name: Read the outcome from the hosts' facts
  hosts: all
  gather_facts: false
  connection: local
  tasks:
    - name: A failed rolling step on one host, a replaced deployment on the other
      ansible.builtin.set_fact:
        upgrade_rolling_failure: {deployment: replica-2, host: h2, task: Smoke, msg: "gate failed\\nmore", rolled_back: true}
      when: inventory_hostname == 'h2'
    - name: Note the replaced deployment
      ansible.builtin.set_fact:
        upgrade_rolling_done: replica-1
      when: inventory_hostname == 'h1'
    - name: Outcome
      ansible.builtin.set_fact:
        outcome: "{{ groups['all'] | map('extract', hostvars) | gpufleet.kimi_k3.upgrade_outcome('img@b', 'img@a') }}"
      run_once: true
    - name: A record read that was skipped (no plan directory)
      gpufleet.kimi_k3.deployment_state:
        plan_dir: /nonexistent
      register: upgrade_state
      when: false
    - name: Rollback target without a record
      ansible.builtin.set_fact:
        target: "{{ upgrade_state.state | default(none) | gpufleet.kimi_k3.upgrade_rollback_target(head.image | default(none)) }}"
      vars:
        head: {image: img@x}
      run_once: true
"""


def test_the_outcome_filter_reads_hostvars(tmp_path):
    playbook = tmp_path / "outcome.yml"
    playbook.write_text(OUTCOME)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": dict((h, {"ansible_python_interpreter": "auto_silent"})
                                                           for h in ("h1", "h2"))}}))
    r = run_playbook(str(playbook), str(inventory))
    assert r.status == "successful"
    got = task_results(r, "Outcome")["h1"]["ansible_facts"]["outcome"]
    assert got["rolling_failed"] is True and got["rollback"] is False and got["replaced"] == ["replica-1"]
    assert task_results(r, "Rollback target without a record")["h1"]["ansible_facts"]["target"] == {
        "image": "img@x", "plan_id": ""}
    assert got["rolling_message"].startswith(
        'Rolling upgrade to img@b stopped at deployment replica-2 (h2, task "Smoke"): gate failed. replica-2 was '
        "rolled back to img@a and serves again; replaced with the new digest: replica-1; ")
