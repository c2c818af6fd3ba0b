"""The full smoke profile on the rehearsal clusters: a healthy deployment passes every gate, and each stand-in
serving fault (sim/standin/README.md, "Serving faults") fails the gate it targets and no other.

A fault is put on the hosts it belongs to by relaunching only them (`launch.yml --limit`) with the fault in
`kimi_k3_extra_env`, then smoke.yml runs with `smoke_profile=full`. That relaunch replaces the hosts' whole extra
env, so each fault test starts from exactly its own fault whatever the test before it left; the healthy test runs
first on each cluster's fresh deployment, and the module's fixtures tear the clusters down at the end (no relaunch
without the fault after each test). Suite time (quick and full) is printed, not asserted (speed targets live in
benchmarks).

Needs `sim/simctl up --cluster gb300` (single deployment), `--cluster fleet` (two replicas behind the router) and
`--cluster gb300pd` (prefill/decode behind the router), or KIMI_SIM_AUTO_UP=1.
"""
import json
import os
import tempfile

import pytest

from tests.helpers import routed
from tests.helpers.runner import run_playbook

pytestmark = [pytest.mark.sim]
GATES = ("correctness", "api", "pd", "tool_verifier")
# Wrong answers from 2 requests in flight: the client's send gate and the stand-in's quick answers keep fewer than
# 8 in flight at once on a backend (a PD decode instance sees even fewer), so a higher threshold never trips.
WRONG_ABOVE = "2"
SIM = dict(routed.SIM)
TIMES = {}


def _smoke(sim, art, extra=None):
    ev = dict(SIM, kimi_k3_artifacts_dir=art, smoke_profile="full", **(extra or {}))
    return run_playbook("smoke.yml", sim.inventory, extravars=ev, timeout=1200)


def _launch(sim, art, limit, env):
    ev = dict(SIM, kimi_k3_artifacts_dir=art, kimi_k3_extra_env=env)
    return routed.must(run_playbook("launch.yml", sim.inventory, extravars=ev, limit=limit, skip_tags="preflight",
                                    timeout=1200))


def _facts(art, host):
    with open(os.path.join(art, "smoke", "smoke-%s.json" % host)) as f:
        return json.load(f)


def _gates(facts):
    return sorted({v.split(":", 1)[0] for v in facts["policy"]["violations"] if v.split(":", 1)[0] in GATES})


@pytest.fixture(scope="module")
def art():
    return tempfile.mkdtemp(prefix="smoke-gates-art-")


@pytest.fixture(scope="module")
def gb300(sim_cluster, art):
    sim = sim_cluster("gb300")
    routed.must(routed.run(sim, art, "deploy.yml", skip_tags="preflight"))
    yield sim
    routed.run(sim, art, "teardown.yml")
    print("\nsmoke suite times: %s" % TIMES)


def test_healthy_deployment_passes_every_gate_quick_and_full(gb300, art):
    quick = run_playbook("smoke.yml", gb300.inventory, extravars=dict(SIM, kimi_k3_artifacts_dir=art), timeout=1200)
    TIMES["quick_s"] = round(quick.elapsed_s, 1)
    full = _smoke(gb300, art)
    TIMES["full_s"] = round(full.elapsed_s, 1)
    facts = _facts(art, "gb300-tray01")
    TIMES["full_module_s"] = facts["duration_s"]
    assert full.status == "successful" and facts["policy"]["violations"] == [], facts["policy"]
    t = facts["groups"]["tool_verifier"]["tool_verifier"]
    assert (t["schema_accuracy"], t["tool_call_f1"]) == (1.0, 1.0)


@pytest.mark.parametrize("env, gate, text", [
    ({"VLLM_STANDIN_REASONING_LEAK": "1"}, "api", "reasoning markers </think> in content"),
    ({"VLLM_STANDIN_SERVED_NAME": "someone/else"}, "api", "the plan's name is"),
    ({"VLLM_STANDIN_INVALID_PARAM_STATUS": "500"}, "api", "HTTP 500 instead of 400"),
    ({"VLLM_STANDIN_REPORTED_VERSION": "0.27.1"}, "api", "/version reports 0.27.1"),
    ({"VLLM_STANDIN_WRONG_ANSWERS_ABOVE": WRONG_ABOVE}, "correctness", "checkable prompts right"),
    ({"VLLM_STANDIN_TOOL_FAULT": "schema_violation", "VLLM_STANDIN_TOOL_FAULT_RATE": "0.08"}, "tool_verifier",
     "schema_accuracy"),
])
def test_each_fault_fails_its_gate_and_no_other(gb300, art, env, gate, text):
    _launch(gb300, art, "all", env)
    run = _smoke(gb300, art)
    facts = _facts(art, "gb300-tray01")
    assert run.status == "failed" and _gates(facts) == [gate], facts["policy"]
    assert any(text in v for v in facts["policy"]["violations"]), facts["policy"]


def test_tool_parser_failure_rate_is_measured_within_its_interval(gb300, art):
    _launch(gb300, art, "all", {"VLLM_STANDIN_TOOL_FAULT": "schema_violation",
                                "VLLM_STANDIN_TOOL_FAULT_RATE": "0.08", "VLLM_STANDIN_SEED": "29"})
    _smoke(gb300, art, {"smoke_tool_call_retries": 0})
    t = _facts(art, "gb300-tray01")["groups"]["tool_verifier"]["tool_verifier"]
    r = t["failure_rates"]["schema_violation"]
    print("\ninjected 0.08, measured %s/%s = %s, 95 %% CI %s" % (r["k"], r["n"], r["rate"], r["ci95"]))
    assert r["ci95"][0] <= 0.08 <= r["ci95"][1]


@pytest.fixture(scope="module")
def fleet(sim_cluster, art):
    sim = sim_cluster("fleet")
    routed.must(routed.run(sim, art, "deploy.yml", skip_tags="preflight"))
    yield sim
    routed.run(sim, art, "teardown.yml")


@pytest.mark.sim_group(routed.ROUTER_GROUP)
def test_wrong_answers_on_one_replica_fail_correctness_for_that_backend(fleet, art):
    _launch(fleet, art, "gb300-tray53,gb300-tray54", {"VLLM_STANDIN_WRONG_ANSWERS_ABOVE": WRONG_ABOVE})
    _smoke(fleet, art)
    facts = _facts(art, "kimi-router55")
    targets = facts["groups"]["correctness"]["correctness"]["targets"]
    assert targets["http://127.0.0.51:8000"]["accuracy"]["rate"] == 1.0
    assert targets["http://127.0.0.53:8000"]["accuracy"]["rate"] < 1.0
    assert _gates(facts) == ["correctness"], facts["policy"]


@pytest.fixture(scope="module")
def pd(sim_cluster, art):
    sim = sim_cluster("gb300pd")
    routed.must(routed.run(sim, art, "deploy.yml", skip_tags="preflight"))
    yield sim
    routed.run(sim, art, "teardown.yml")


@pytest.mark.sim_group(routed.ROUTER_GROUP)
def test_pd_healthy_transfers_pass(pd, art):
    _smoke(pd, art)
    facts = _facts(art, "kimi-router35")
    assert facts["pd"]["errors"] == [] and facts["policy"]["violations"] == [], facts["policy"]
    assert all(v["recompute_fraction"] <= 0.05 for v in facts["pd"]["instances"].values()), facts["pd"]


@pytest.mark.sim_group(routed.ROUTER_GROUP)
@pytest.mark.parametrize("env, gate", [({"VLLM_STANDIN_DECODE_RECOMPUTE": "1"}, "pd"),
                                       ({"VLLM_STANDIN_WRONG_ANSWERS_ABOVE": WRONG_ABOVE}, "correctness")])
def test_decode_side_faults(pd, art, env, gate):
    _launch(pd, art, "gb300-tray33,gb300-tray34", env)
    _smoke(pd, art)
    facts = _facts(art, "kimi-router35")
    assert _gates(facts) == [gate], facts["policy"]
    if gate == "correctness":  # the prefill instance answers right when asked directly
        assert facts["groups"]["correctness"]["correctness"]["targets"]["http://127.0.0.31:8001"][
            "accuracy"]["rate"] == 1.0
