"""The full smoke profile on the GB300 rehearsal pair: a healthy deployment passes every gate, and each stand-in
serving fault (sim/standin/README.md, "Serving faults") fails the gate it targets and no other.

A fault is put on the hosts it belongs to by relaunching only them (`launch.yml --limit`) with the fault in
`kimi_k3_extra_env`, then smoke.yml runs with `smoke_profile=full` (tests/helpers/smoke_gates.py). That relaunch
replaces the hosts' whole extra env, so each fault test starts from exactly its own fault whatever the test before it
left; the healthy test runs first on the module's fresh deployment, which is torn down at the end (no relaunch
without the fault after each test). Suite time (quick and full) is printed, not asserted (speed targets live in
benchmarks).

Behind the router: one replica's wrong answers on a fleet deployment of this module's own (below); the
prefill/decode gates run on test_pd.py's deployment.

Needs `sim/simctl up --cluster gb300` and `--cluster fleet` (or KIMI_SIM_AUTO_UP=1).
"""
import tempfile

import pytest

from tests.helpers import routed
from tests.helpers import smoke_gates as sg
from tests.helpers.runner import run_playbook

pytestmark = [pytest.mark.sim]
TIMES = {}


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
    quick = run_playbook("smoke.yml", gb300.inventory, extravars=dict(sg.SIM, kimi_k3_artifacts_dir=art), timeout=1200)
    TIMES["quick_s"] = round(quick.elapsed_s, 1)
    full = sg.smoke(gb300, art)
    TIMES["full_s"] = round(full.elapsed_s, 1)
    facts = sg.facts(art, "gb300-tray01")
    TIMES["full_module_s"] = facts["duration_s"]
    assert full.status == "successful" and facts["policy"]["violations"] == [], facts["policy"]
    t = facts["groups"]["tool_verifier"]["tool_verifier"]
    assert (t["schema_accuracy"], t["tool_call_f1"]) == (1.0, 1.0)


@pytest.mark.parametrize("env, gate, text", [
    ({"VLLM_STANDIN_REASONING_LEAK": "1"}, "api", "reasoning markers </think> in content"),
    ({"VLLM_STANDIN_SERVED_NAME": "someone/else"}, "api", "the plan's name is"),
    ({"VLLM_STANDIN_INVALID_PARAM_STATUS": "500"}, "api", "HTTP 500 instead of 400"),
    ({"VLLM_STANDIN_REPORTED_VERSION": "0.27.1"}, "api", "/version reports 0.27.1"),
    ({"VLLM_STANDIN_WRONG_ANSWERS_ABOVE": sg.WRONG_ABOVE}, "correctness", "checkable prompts right"),
    ({"VLLM_STANDIN_TOOL_FAULT": "schema_violation", "VLLM_STANDIN_TOOL_FAULT_RATE": "0.2"}, "tool_verifier",
     "schema_accuracy"),
])
def test_each_fault_fails_its_gate_and_no_other(gb300, art, env, gate, text):
    sg.launch(gb300, art, "all", env)
    run = sg.smoke(gb300, art)
    facts = sg.facts(art, "gb300-tray01")
    assert run.status == "failed" and sg.gates(facts) == [gate], facts["policy"]
    assert any(text in v for v in facts["policy"]["violations"]), facts["policy"]


def test_tool_parser_failure_rate_is_measured_within_its_interval(gb300, art):
    sg.launch(gb300, art, "all", {"VLLM_STANDIN_TOOL_FAULT": "schema_violation",
                                  "VLLM_STANDIN_TOOL_FAULT_RATE": "0.08", "VLLM_STANDIN_SEED": "29"})
    sg.smoke(gb300, art, {"smoke_tool_call_retries": 0})
    t = sg.facts(art, "gb300-tray01")["groups"]["tool_verifier"]["tool_verifier"]
    r = t["failure_rates"]["schema_violation"]
    print("\ninjected 0.08, measured %s/%s = %s, 95 %% CI %s" % (r["k"], r["n"], r["rate"], r["ci95"]))
    assert r["ci95"][0] <= 0.08 <= r["ci95"][1]


# On a fleet of its own: run on test_router_fleet's deployment, the smoke it leaves on the router's hosts made that
# module's next deploy report a change on replica-1's head.
@pytest.fixture(scope="module")
def fleet(sim_cluster, art):
    sim = sim_cluster("fleet")
    routed.must(routed.run(sim, art, "deploy.yml", skip_tags="preflight"))
    yield sim
    routed.run(sim, art, "teardown.yml")


@pytest.mark.sim_group(routed.ROUTER_GROUP)
def test_wrong_answers_on_one_replica_fail_correctness_for_that_backend(fleet, art):
    sg.launch(fleet, art, "gb300-tray53,gb300-tray54", {"VLLM_STANDIN_WRONG_ANSWERS_ABOVE": sg.WRONG_ABOVE})
    try:
        sg.smoke(fleet, art)
        facts = sg.facts(art, "kimi-router55")
        targets = facts["groups"]["correctness"]["correctness"]["targets"]
        assert targets["http://127.0.0.51:8000"]["accuracy"]["rate"] == 1.0
        assert targets["http://127.0.0.53:8000"]["accuracy"]["rate"] < 1.0
        assert sg.gates(facts) == ["correctness"], facts["policy"]
    finally:
        sg.launch(fleet, art, "gb300-tray53,gb300-tray54", {})
