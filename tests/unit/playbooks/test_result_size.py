"""What the plan and the preflight judgement write to files is not also carried in their registered results
(every later task's variables, the register step and the callback walk those results; at 1,152 nodes the
launch scripts alone are 2.3 MB). Without a destination the same content is returned instead."""
import glob
import os

from tests.helpers.runner import failed_tasks, run_playbook, task_results

API_KEY_ENV = {"KIMI_K3_API_KEY": "unit-test-placeholder"}
PLAYBOOK = """
- name: Plan and judge without contacting a node
  hosts: vllm_cluster
  gather_facts: false
  tasks:
    - name: Plan to files
      gpufleet.kimi_k3.cluster_plan:
        dest: "{{ out }}/plan"
      run_once: true
      delegate_to: localhost
    - name: Plan returned
      gpufleet.kimi_k3.cluster_plan: {}
      register: plan_result
      run_once: true
      delegate_to: localhost
    - name: Report to files
      gpufleet.kimi_k3.preflight_report:
        dest: "{{ out }}/report"
      run_once: true
      delegate_to: localhost
    - name: Report returned
      gpufleet.kimi_k3.preflight_report: {}
      run_once: true
      delegate_to: localhost
"""


def _one(runner, task):
    results = task_results(runner, task)
    assert len(results) == 1, (task, sorted(results))
    return next(iter(results.values()))


def test_written_content_is_not_returned_and_returned_content_equals_the_files(tmp_path):
    playbook = tmp_path / "p.yml"
    playbook.write_text(PLAYBOOK)
    r = run_playbook(str(playbook), "inventories/gb300-cluster", extravars={"out": str(tmp_path)},
                     envvars=API_KEY_ENV)
    assert r.status == "successful", failed_tasks(r)
    written, returned = _one(r, "Plan to files"), _one(r, "Plan returned")
    assert "scripts" not in written and written["plans"] and written["written"]
    scripts = sorted(glob.glob(str(tmp_path / "plan" / "*.sh")))
    assert sorted(returned["scripts"]) == sorted(os.path.basename(p)[:-3] for p in scripts)
    for path in scripts:
        with open(path) as handle:
            assert returned["scripts"][os.path.basename(path)[:-3]] == handle.read()
    # no probe ran: every node is reported as not probed, with or without files
    report_written, report_returned = _one(r, "Report to files"), _one(r, "Report returned")
    assert report_written["ok"] is False and report_written["report"]["summary"] == report_returned["report"]["summary"]
    assert "json" not in report_written and "markdown" not in report_written
    with open(tmp_path / "report" / "preflight-report.json") as handle:
        assert handle.read() == report_returned["json"]
    with open(tmp_path / "report" / "preflight-report.md") as handle:
        assert handle.read() == report_returned["markdown"]
