"""The stand-in's KV figures and GPU memory meet the plan's capacity model for the hardware it stands in for: the
smoke's kv_check on the rehearsal inventories shows no calibration warning that a real cluster would not."""
import json
import os

import pytest
from vllm_standin import config, flags

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils.smoke import capacity_check
from tests.helpers.runner import REPO
from tests.unit.plugins.action.test_plan_golden import plan_inventory


def standin_budget(argv, version):
    snap = flags.Snapshot(flags.load_snapshot(version))
    model, values, _explicit = flags.parse_args(argv, snap)
    return config.KVBudget(config.Deployment(model, values, snap), values)


def server_of(kv):
    return {"max_model_len": kv.max_model_len, "block_size": kv.block_size,
            "cache_config": {"0": {"kv_cache_size_tokens": kv.kv_tokens,
                                   "kv_cache_max_concurrency": round(kv.max_concurrency, 4)}}}


def test_the_gb300_stand_in_reports_what_the_plan_predicts():
    result = plan_inventory("sim-gb300")
    cap, head = result["cluster"]["capacity"], result["plans"]["gb300-tray01"]
    assert not [k for k in head["env"] if k.startswith("VLLM_STANDIN_") and k != "VLLM_STANDIN_LOAD_S"]
    kv = standin_budget(head["vllm_args"], head["vllm_version"])
    kv.check()
    server = server_of(kv)
    # the faked nvidia-smi: the vLLM container's --gpu-memory-utilization share of every GPU (simcommon.memory_used)
    with open(os.path.join(REPO, "sim", "profiles", "gb300.json")) as f:
        profile = json.load(f)
    per_gpu = int(round(kv.gmu * profile["gpu"]["memory_total_mib"]))
    gpu_memory = {"gb300-tray01": {"gpus": 4, "used_mib": 4 * per_gpu}, "gb300-tray02": {"gpus": 4, "used_mib": 4 * per_gpu}}
    check = capacity_check.compare(cap, server, None, gpu_memory, capacity_check.DEFAULT_TOLERANCE_PCT)
    assert check["warnings"] == [], check
    assert (kv.kv_tokens, cap["at_max_model_len"]["kv_cache_size_tokens"]) == (5730331, 5730331)
    assert abs(check["error_pct"]["gpu_memory_used_mib"]) < 0.01


def _deployments(name, monkeypatch):
    """(plan's capacity record, the stand-in's budget) per deployment, with the head's VLLM_STANDIN_* env."""
    result = plan_inventory(name)
    for dep in result["cluster"]["deployments"]:
        head = result["plans"][dep["head"]]
        for key, value in head["env"].items():
            if key.startswith("VLLM_STANDIN_"):
                monkeypatch.setenv(key, value)
        yield dep["name"], dep["capacity"], standin_budget(head["vllm_args"], head["vllm_version"])


def test_the_replicas_of_the_fleet_rehearsal_meet_their_plan(monkeypatch):
    for name, cap, kv in _deployments("sim-gb300-fleet", monkeypatch):
        check = capacity_check.compare(cap, server_of(kv), None, None)
        assert check["warnings"] == [], (name, check)


@pytest.mark.parametrize("name", ["sim-gb300", "sim-gb300-fleet", "sim-gb300-pd", "sim-mi355x"])
def test_every_rehearsal_deployments_stand_in_starts(name, monkeypatch):
    """The stand-in's KV model must not refuse a rehearsal deployment: one sequence of its max-model-len fits."""
    for _name, _cap, kv in _deployments(name, monkeypatch):
        kv.check()
