"""The fabric_specs filter and the fabric_report action through ansible-playbook on two local "nodes": specs from a
plan, scripted job outcomes (one node's master port dropped), the verdict per host, the files written and the
fabric section put into an existing preflight report."""
import json
import sys

import yaml

from tests.helpers.runner import run_playbook, task_results
from tests.unit.plugins.plugin_utils.fabric.test_fabric import good

PLAYBOOK = """
- hosts: vllm_cluster
  gather_facts: false
  tasks:
    - name: Build the specs
      ansible.builtin.set_fact:
        fabric_plan: "{{ plan_result | gpufleet.kimi_k3.fabric_specs(ansible_play_hosts, {'timeout_s': 30}) }}"
      run_once: true
    - name: Scripted outcome
      ansible.builtin.set_fact:
        fabric_job_outcome: "{{ outcomes[inventory_hostname] }}"
    - name: Judge
      gpufleet.kimi_k3.fabric_report:
        specs: "{{ fabric_plan.specs }}"
        dest: "{{ dest }}"
      register: fabric_outcome
      run_once: true
      delegate_to: localhost
"""


def plan_result():
    plans = {}
    for rank, host in enumerate(("n0", "n1")):
        plans[host] = {"host": host, "role": "head" if rank == 0 else "worker", "node_rank": rank, "vendor": "cpu",
                       "internal_address": "10.0.0.%d" % (rank + 1), "master_port": 29501, "dp_rpc_port": 29550,
                       "vllm_version": "0.32.0", "image": "img@sha256:x", "env": {"GLOO_SOCKET_IFNAME": "eth0"},
                       "vllm_args": ["m"]}
    return {"plans": plans, "cluster": {"gpus_per_node": 1, "head": "n0", "order": ["n0", "n1"]}}


def test_action_judges_writes_and_merges(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"vllm_cluster": {"hosts": {"n0": {}, "n1": {}}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}))
    (tmp_path / "pb.yml").write_text(PLAYBOOK)
    dest = tmp_path / "art"
    dest.mkdir()
    (dest / "preflight-report.json").write_text('{"schema": 1, "summary": {"ok": true}}\n')
    (dest / "preflight-report.md").write_text("# Preflight report\n\nOK\n")
    n1 = good("n1", 1)
    n1["pairs"][0].update(status="timeout", connect_ms=None, detail="no answer within the timeout (last: timeout)")
    outcomes = {"n0": {"result": good("n0", 0), "failure": None}, "n1": {"result": n1, "failure": None}}
    r = run_playbook(str(tmp_path / "pb.yml"), str(inv), extravars={
        "plan_result": plan_result(), "outcomes": outcomes, "dest": str(dest)}, timeout=300)
    assert r.status == "successful"
    res = list(task_results(r, "Judge").values())[0]
    assert res["changed"] is False and res["ok"] is False
    assert res["report"]["summary"]["failed_hosts"] == ["n1"]
    assert res["host_failures"]["n1"].startswith("Fabric failed on n1 - port: n1 -> n0 10.0.0.1:29501 (master): "
                                                 "timeout")
    assert res["hosts"]["n0"]["ok"] is True and res["hosts"]["n1"]["ok"] is False
    assert sorted(res["written"]) == ["fabric-report.json", "fabric-report.md", "preflight-report.json",
                                      "preflight-report.md"]
    merged = json.loads((dest / "preflight-report.json").read_text())
    assert merged["summary"] == {"ok": True} and merged["fabric"]["summary"]["failed_hosts"] == ["n1"]
    md = (dest / "preflight-report.md").read_text()
    assert md.startswith("# Preflight report\n\nOK\n") and "| n1 | n0 | 10.0.0.1 | 29501 | master | timeout |" in md
