"""layouts.yml end to end (no host contacted): the example inventory's layouts land in <artifacts>/layouts.json and
layouts.md, ranked for the target the operator passes."""
import json

from tests.helpers.runner import failed_tasks, run_playbook

API_KEY_ENV = {"KIMI_K3_API_KEY": "unit-test-placeholder"}


def test_gb300_dep16_inventory_lists_its_layouts(tmp_path):
    target = {"max_model_len": 131072, "concurrency": 64, "objective": "throughput"}
    r = run_playbook("layouts.yml", "inventories/gb300-dep16",
                     extravars={"kimi_k3_artifacts_dir": str(tmp_path), "kimi_k3_target": target}, envvars=API_KEY_ENV)
    assert r.status == "successful", failed_tasks(r)
    report = json.loads((tmp_path / "layouts.json").read_text())
    assert report["hardware"] == {"accelerator": "gb300", "nodes": 4, "gpus_per_node": 4, "interconnect": "nvlink"}
    assert report["target"] == target and len(report["layouts"]) == 24
    assert report["best"]["layout"] == "multi_node_dep" and report["best"]["admitted_at_target"] == 695.34
    pd = [row for row in report["layouts"] if row["layout"] == "PD multi_node_tep x2 + multi_node_dep x2"][0]
    assert "needs a vllm_router host" in pd["reason"]  # gb300-dep16 has no router group
    assert (tmp_path / "layouts.md").read_text().startswith("# Kimi-K3 layouts: 4 x gb300")


def test_a_malformed_target_fails_with_the_variable_named(tmp_path):
    r = run_playbook("layouts.yml", "inventories/gb300-dep16",
                     extravars={"kimi_k3_artifacts_dir": str(tmp_path), "kimi_k3_target": {"objective": "fast"}},
                     envvars=API_KEY_ENV)
    assert r.status == "failed"
    [(_host, task, msg)] = failed_tasks(r)
    assert task == "Render the plan once per layout and rank them"
    assert "kimi_k3_target: objective is 'fast', not one of latency, throughput." in msg
