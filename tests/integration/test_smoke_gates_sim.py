"""The smoke profiles on the GB300 rehearsal pair: a healthy deployment passes every gate of both; stand-in serving
faults (sim/standin/README.md, "Serving faults") put on the containers through the inventory fail what they target.

- The default (quick) profile, as deploy.yml runs it: one deploy.yml with four answer faults and half the tool calls
  schema-invalid fails naming each group and what came back; one tool-call hiccup that its retry recovers passes
  with the retry counted. Each fault alone, and the groups it fails and no other, is proven against the same
  stand-in processes by tests/unit/plugins/module_utils/smoke/test_smoke_full_standin.py
  (`test_each_serving_fault_fails_the_default_profile`).
- The full profile: the faults only its gates read (another /version, schema violations under the verifier's
  interval gate) each fail their gate and no other; the other serving faults of the full profile are proven gate by
  gate in the same unit file (`test_each_fault_fails_its_gate_and_no_other`), and wrong answers behind the router on
  test_router_fleet.py's deployment.

A fault is put on the hosts it belongs to by relaunching them with the fault in `kimi_k3_extra_env` (deploy.yml
for the default profile, `launch.yml` otherwise), then the smoke runs (tests/helpers/smoke_gates.py). That relaunch
replaces the hosts' whole extra env, so each fault test starts from exactly its own fault whatever the test before it
left; the healthy test runs first on the module's fresh deployment, which is torn down at the end (no relaunch
without the fault after each test). Suite time (quick and full) is printed, not asserted (speed targets live in
benchmarks). The prefill/decode gates run on test_pd.py's deployment.

Needs `sim/simctl up --cluster gb300` (or KIMI_SIM_AUTO_UP=1).
"""
import tempfile

import pytest

from tests.helpers import routed
from tests.helpers import smoke_gates as sg
from tests.helpers.runner import failed_tasks, run_playbook

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


# every checkable answer wrong, the needle lost, another served name, </think> in content, and half the tool calls
# schema-invalid (more than 2 retries recover)
ANSWER_FAULTS = {"VLLM_STANDIN_WRONG_ANSWERS_ABOVE": "0", "VLLM_STANDIN_NEEDLE_LOST_ABOVE": "2000",
                 "VLLM_STANDIN_SERVED_NAME": "someone/else", "VLLM_STANDIN_REASONING_LEAK": "1",
                 "VLLM_STANDIN_TOOL_FAULT": "schema_violation", "VLLM_STANDIN_TOOL_FAULT_RATE": "0.5"}


def _named(violations, group, text):
    return [v for v in violations if v.startswith("group %s failed" % group) and text in v]


def test_the_default_profile_fails_deploy_naming_each_group_and_what_came_back(gb300, art):
    # deploy.yml relaunches both nodes with the faults (the extra env is part of the plan), then smokes
    run = routed.run(gb300, art, "deploy.yml", {"kimi_k3_extra_env": ANSWER_FAULTS}, skip_tags="preflight")
    violations = sg.facts(art, "gb300-tray01")["policy"]["violations"]
    assert run.status == "failed", violations
    assert _named(violations, "text", "wrong answer to 'What is"), violations
    assert _named(violations, "long_context", "needle K3-7731 not found"), violations
    assert _named(violations, "text", "the response names model 'someone/else', the plan serves"), violations
    assert [v for v in violations if "reasoning markers </think> in content" in v], violations
    assert _named(violations, "tool_calling", "still invalid after"), violations
    msgs = " ".join(m for _h, _t, m in failed_tasks(run))
    assert "group text failed" in msgs and "wrong answer to" in msgs, failed_tasks(run)


def test_one_recovered_tool_hiccup_passes_with_its_retry_counted(gb300, art):
    # seed 7 at rate 0.05 faults the 7th tool request alone among the first 40: one case's first attempt
    sg.launch(gb300, art, "all", {"VLLM_STANDIN_TOOL_FAULT": "schema_violation", "VLLM_STANDIN_TOOL_FAULT_RATE": "0.05",
                                  "VLLM_STANDIN_SEED": "7"})
    run = run_playbook("smoke.yml", gb300.inventory, extravars=dict(sg.SIM, kimi_k3_artifacts_dir=art), timeout=1200)
    facts = sg.facts(art, "gb300-tray01")
    assert run.status == "successful", facts["policy"]
    group = facts["groups"]["tool_calling"]
    first = group["tool_calls"]["first_attempt"]
    assert (first["k"], first["n"]) == (11, 12) and group["tool_calls"]["final_success_rate"] == 1.0, group
    assert group["retries"] == {"schema_violation": 1}, group


@pytest.mark.parametrize("env, gate, text", [
    ({"VLLM_STANDIN_REPORTED_VERSION": "0.27.1"}, "api", "/version reports 0.27.1"),
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
