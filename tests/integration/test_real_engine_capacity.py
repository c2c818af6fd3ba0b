"""The capacity curve on the real engine (vLLM's CPU build on the rehearsal cpu cluster, TP 2 over two nodes) at
three max-model-len points, one beyond the KV budget: the plan predicts the refusal point before any relaunch and
the engine's own refusal is read and set beside it.

The budget: VLLM_CPU_KVCACHE_SPACE 1 GiB for the tiny MLA model (2 layers x 576 x 2 bytes = 2,304 B per token) in
16-token blocks = 29,127 blocks = 466,032 tokens, the longest max-model-len the engine starts with
(vllm/v1/core/kv_cache_utils.py ``_check_enough_kv_cache_memory``: one sequence of cdiv(L, 16) blocks must fit).
524,288 is beyond it (1.125 GiB for one sequence): vLLM refuses with "ValueError: To serve at least one request
with the model's max seq len (524288), (1.12 GiB KV cache is needed, which is larger than the available KV cache
memory (1.0 GiB). Based on the available memory, the estimated maximum model length is 466016. ..." - its
estimate is one block under the plan's limit (-0.003 %, seen on the rehearsal), the refusal point agrees.

The rehearsal model's own context is 8,192 (max_position_embeddings): vLLM refuses a longer --max-model-len for
that reason first unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, which the curve sets (kimi_k3_extra_env) so that the KV
check is the one that speaks. The refused point is launched on purpose (capacity_probe_refusal) and costs one
start of the engine.

Needs `sim/simctl up --cluster cpu` (or KIMI_SIM_AUTO_UP=1). Group `cpu` (the engines take both cores).
"""
import json
import os
import tempfile

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import capacity_check

from tests.helpers.http import status as _http
from tests.helpers.runner import failed_tasks, run_playbook, task_results

pytestmark = [pytest.mark.sim, pytest.mark.sim_group("cpu")]

HEAD = "cpu-node01"
HEAD_URL = "http://127.0.0.61:8000"
FAST = {"launch_poll_interval_s": 2, "launch_progress_every_s": 15}
LIMIT = 466032                       # 29,127 blocks of 16 tokens
# vLLM 0.32.0's own estimate in its refusal, one block under the plan's limit (seen on the rehearsal: -0.003 %)
ENGINE_LIMIT = 466016
POINTS = [2048, 4096, 524288]        # the last one beyond the KV budget
SWEEP = {"capacity_max_concurrency": 2, "capacity_requests_per_level": 1, "capacity_output_tokens": 16,
         "capacity_prompt_fraction": 0.25, "capacity_ttft_limit_s": 120, "capacity_ready_timeout_s": 600,
         "capacity_probe_refusal": True, "capacity_max_model_lens": POINTS,
         "kimi_k3_extra_env": {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}}
PREDICT = "Predict from the plan's KV budget whether the engine refuses max-model-len %d"


@pytest.fixture(scope="module")
def curve(sim_cluster):
    sim = sim_cluster("cpu")
    art = tempfile.mkdtemp(prefix="real-engine-capacity-")
    r = run_playbook("capacity.yml", sim.inventory, timeout=3600,
                     extravars=dict(FAST, **SWEEP, kimi_k3_artifacts_dir=art))
    try:
        yield sim, art, r
    finally:
        run_playbook("teardown.yml", sim.inventory, extravars={"kimi_k3_artifacts_dir": art}, timeout=600)


def _report(art):
    with open(os.path.join(art, "capacity", "capacity.json")) as handle:
        return json.load(handle)


def test_refusal_predicted_before_the_relaunch(curve):
    _sim, _art, r = curve
    assert r.status == "successful", failed_tasks(r)
    for value, refused in ((2048, False), (4096, False), (524288, True)):
        facts = task_results(r, PREDICT % value)[HEAD]["ansible_facts"]
        assert facts["capacity_prediction"]["limit"] == LIMIT
        assert facts["capacity_prediction"]["refused"] is refused
        assert facts["capacity_launching"] is True


def test_served_points_and_the_engines_refusal(curve):
    _sim, art, _r = curve
    report = _report(art)
    points = {p["max_model_len"]: p for p in report["points"]}
    assert sorted(points) == POINTS and report["restarts"] == 3
    for value in (2048, 4096):
        assert points[value]["refusal"]["observed"] == "served" and points[value]["refusal"]["agrees"] is True
        assert points[value]["kv_cache_size_tokens"] == LIMIT   # the pool does not depend on max-model-len
        assert points[value]["steps"]
    beyond = points[524288]["refusal"]
    assert beyond["observed"] == "refused" and beyond["refused"] is True and beyond["agrees"] is True
    assert beyond["engine_limit"] == ENGINE_LIMIT
    found = capacity_check.parse_refusal(beyond["engine_message"])
    assert found["max_model_len"] == 524288 and found["estimated_max_model_len"] == ENGINE_LIMIT
    assert found["available_gib"] == 1.0
    assert points[524288]["steps"] == []


def test_predicted_and_observed_refusal_point_in_the_report(curve):
    _sim, art, _r = curve
    summary = _report(art)["refusal"]
    assert {k: v for k, v in summary.items() if k != "messages"} == {
        "predicted_limit": LIMIT, "predicted_refused_from": LIMIT + 1, "longest_served": 4096,
        "shortest_refused": 524288, "engine_limit": ENGINE_LIMIT, "limit_error_pct": -0.003, "agrees": True}
    assert len(summary["messages"]) == 1 and "max seq len (524288)" in summary["messages"][0]
    with open(os.path.join(art, "capacity", "capacity.md")) as handle:
        md = handle.read()
    assert "## Refusal point" in md and "| predicted: refused from | 466,033 |" in md
    assert "| engine's own estimate (its refusal) | 466,016 |" in md
    assert "- every launched point as predicted: yes" in md
    assert "the estimated maximum model length is 466016" in md


def test_the_inventorys_length_is_restored(curve):
    _sim, _art, _r = curve
    assert _http(HEAD_URL + "/health") == 200
