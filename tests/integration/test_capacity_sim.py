"""The capacity role on the rehearsal GB300 pair: a point whose max-model-len differs from the running one costs
exactly one relaunch, a point equal to the running one costs none (capacity.restart_decision end to end), the
curve's files are written, and the deployment it leaves behind is torn down again.

Needs `sim/simctl up --cluster gb300` (or KIMI_SIM_AUTO_UP=1).
"""
import json
import os

import pytest
import yaml

from tests.helpers.runner import REPO, failed_tasks, run_playbook, task_results

pytestmark = pytest.mark.sim

with open(os.path.join(REPO, "molecule", "shared", "sim_vars.yml")) as _f:
    SIM_VARS = yaml.safe_load(_f)
SWEEP = {"capacity_max_concurrency": 2, "capacity_requests_per_level": 1, "capacity_output_tokens": 16,
         "capacity_restore": False, "capacity_ready_timeout_s": 120}
DECIDE = "Decide whether the point needs a relaunch, max-model-len 8192"


@pytest.fixture
def deployed(sim_cluster, tmp_path):
    sim = sim_cluster("gb300")
    art = str(tmp_path / "art")
    # a running deployment is what the curve starts from; preflight is proven by test_preflight_sim.py
    r = run_playbook("deploy.yml", sim.inventory, extravars=dict(SIM_VARS, kimi_k3_artifacts_dir=art),
                     skip_tags="preflight", timeout=900)
    assert r.status == "successful", failed_tasks(r)
    try:
        yield sim, art
    finally:
        run_playbook("teardown.yml", sim.inventory, extravars={"kimi_k3_artifacts_dir": art}, timeout=600)


def curve(sim, art):
    r = run_playbook("capacity.yml", sim.inventory, timeout=900,
                     extravars=dict(SIM_VARS, kimi_k3_artifacts_dir=art, capacity_max_model_lens=[8192], **SWEEP))
    assert r.status == "successful", failed_tasks(r)
    with open(os.path.join(art, "capacity", "capacity.json")) as handle:
        return r, json.load(handle)


def test_one_relaunch_for_a_new_value_none_for_the_running_one(deployed):
    sim, art = deployed
    r, report = curve(sim, art)
    head = sim.nodes[0]["name"]
    decision = task_results(r, DECIDE)[head]["ansible_facts"]["capacity_decision"]
    assert decision["restart"] is True and decision["wanted"] == 8192 and decision["running"] != 8192
    assert report["restarts"] == 1 and [p["max_model_len"] for p in report["points"]] == [8192]
    assert report["points"][0]["restarted"] is True and report["points"][0]["kv_cache_size_tokens"]
    for name in ("capacity.json", "capacity.md", "capacity.png"):
        assert os.path.getsize(os.path.join(art, "capacity", name)) > 0
    r, report = curve(sim, art)                                   # 8192 is running now
    decision = task_results(r, DECIDE)[head]["ansible_facts"]["capacity_decision"]
    assert decision == {"running": 8192, "wanted": 8192, "restart": False,
                        "reason": "already serving max_model_len 8192"}
    assert report["restarts"] == 0 and report["points"][0]["restarted"] is False
