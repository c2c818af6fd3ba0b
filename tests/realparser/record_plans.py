"""pytest plugin: record every plan the unit tests render, for the real-parser stage (scripts/realparser.sh).

    KIMI_K3_RECORD_PLANS=plans.json python -m pytest -p tests.realparser.record_plans tests/unit/...

Wraps topology.build_cluster_plan for the session. Each accepted plan (result "ok") rendered from the shipped
recipe and the shipped flag snapshots is recorded with the test that rendered it: its host, vLLM version,
vllm_args and env. Plans rendered from a recipe or snapshots a test built itself are counted, not recorded: the
collection never ships them. Refused inventories (the mistake corpus's mistakes) render no plan.
"""
import json
import os

import pytest

_STATE = {"records": [], "index": {}, "fabricated": 0, "refused": 0, "calls": 0, "test": None}


def _shipped_inputs():
    from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data
    return recipe_data.load_recipe(), recipe_data.load_snapshots()


def record(result, recipe, snapshots, shipped, test):
    """Append the plans of one build_cluster_plan result to the recorder state."""
    _STATE["calls"] += 1
    if not result.get("ok"):
        _STATE["refused"] += 1
        return
    ship_recipe, ship_snapshots = shipped
    if recipe != ship_recipe or any(snapshots.get(v) != ship_snapshots.get(v) for v in snapshots):
        _STATE["fabricated"] += 1
        return
    for host, plan in sorted(result.get("plans", {}).items()):
        if plan.get("role") == "router":  # vllm-router's argv, not vllm serve's (data/router_flags/)
            continue
        entry = {"source": test or "(collection)", "host": host, "vllm_version": plan.get("vllm_version"),
                 "vllm_args": list(plan.get("vllm_args") or []), "env": dict(plan.get("env") or {}), "renders": 1}
        key = json.dumps([entry["vllm_version"], entry["vllm_args"], sorted(entry["env"].items())])
        if key in _STATE["index"]:  # the same argv from another test (or a property test's repeat): count it
            _STATE["records"][_STATE["index"][key]]["renders"] += 1
            continue
        _STATE["index"][key] = len(_STATE["records"])
        _STATE["records"].append(entry)


def pytest_configure(config):
    if not os.environ.get("KIMI_K3_RECORD_PLANS"):
        return
    from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import topology
    original = topology.build_cluster_plan
    shipped = _shipped_inputs()

    def recording_build_cluster_plan(nodes, recipe, snapshots, routers=None):
        result = original(nodes, recipe, snapshots, routers)
        record(result, recipe, snapshots, shipped, _STATE["test"])
        return result

    topology.build_cluster_plan = recording_build_cluster_plan
    config.add_cleanup(lambda: setattr(topology, "build_cluster_plan", original))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    _STATE["test"] = item.nodeid
    yield
    _STATE["test"] = None


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("KIMI_K3_RECORD_PLANS")
    if not path:
        return
    with open(path, "w") as handle:
        json.dump({"records": _STATE["records"], "calls": _STATE["calls"], "refused": _STATE["refused"],
                   "fabricated": _STATE["fabricated"], "pytest_exit": int(exitstatus)}, handle, indent=1)
