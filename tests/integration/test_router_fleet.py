"""A fleet of 2 replicas (2 trays each) behind the real vllm-router 0.1.17 on the rehearsal cluster
(docs/deployments.md).

- deploy.yml end to end: each replica launched as its own group, then the router (image by digest from the sim
  registry, started after both replicas are healthy); smoke through the router passes and both replicas served
  smoke requests (the router's metrics); each replica passes its direct check; per-instance reports exist;
- a second deploy changes nothing, check mode predicts nothing;
- killing replica-2's follower: the router stops sending to replica-2 (circuit breaker / health) while requests
  through the router keep succeeding (counted), and `deploy.yml --tags router` fails naming replica-2;
  the next deploy restarts replica-2 alone (replica-1's containers are not restarted);
- a rolling upgrade (upgrade.yml) replaces one replica at a time with a request loop against the router at zero
  failed requests; an upgrade to a crashing image rolls back replica-1 alone and leaves replica-2 untouched;
- one replica relaunched with wrong answers: the full smoke through the router fails the correctness gate alone and
  names that replica's backend (the smoke gate faults of test_smoke_gates_sim.py, behind the router); it runs last,
  because the smoke it leaves on the router's hosts would make a later deploy report a change;
- teardown removes the router first.

Needs `sim/simctl up --cluster fleet` (or KIMI_SIM_AUTO_UP=1).
"""
import time

import pytest

from tests.helpers import routed
from tests.helpers import smoke_gates as sg
from tests.helpers.runner import failed_tasks

pytestmark = [pytest.mark.sim, pytest.mark.sim_group(routed.ROUTER_GROUP)]

ROUTER = "http://127.0.0.55:8000"
METRICS = "http://127.0.0.55:29000/metrics"
R1_HEAD, R1_FOLLOWER = "fleet-r1-tray01", "fleet-r1-tray02"
R2_HEAD, R2_FOLLOWER = "fleet-r2-tray01", "fleet-r2-tray02"
TIMINGS = {}


art, sim, deployed = routed.deployment_fixtures("fleet", TIMINGS)


def _started(sim, node, name):
    return sim.docker(node, "inspect", "--format", "{{.State.StartedAt}}", name).stdout.strip()


def test_deploy_fleet_end_to_end_with_the_real_router(sim, art, deployed):
    status, body = routed.get(ROUTER + "/health")
    assert status == 200, body
    TIMINGS["router_ready_s"] = routed.router_ready_s(sim, "fleet-router")
    ref = sim.docker("fleet-router", "inspect", "--format", "{{.Config.Image}}", "vllm-router").stdout.strip()
    assert "@sha256:" in ref and "/vllm/vllm-router@" in ref
    logs = sim.docker("fleet-router", "logs", "vllm-router").stdout + \
        sim.docker("fleet-router", "logs", "vllm-router").stderr
    assert "Router ready" in logs
    rep = routed.report(art, "router-kimi-router55.json")
    assert [(b["deployment"], b["healthy"]) for b in rep["backends"]] == [("replica-1", True), ("replica-2", True)]
    usage = routed.report(art, "router-usage-kimi-router55.json")
    used = {b["deployment"]: b["requests"] for b in usage["backends"]}
    assert used["replica-1"] > 0 and used["replica-2"] > 0, usage
    # per instance: the smoke through the router and the direct check of each replica's head
    for host in ("kimi-router55", "gb300-tray51", "gb300-tray53"):
        smoke = routed.report(art, "smoke/smoke-%s.json" % host)
        assert smoke, host


def test_second_deploy_changes_nothing_and_check_mode_agrees(sim, art, deployed):
    r = routed.must(routed.run(sim, art, "deploy.yml", skip_tags="preflight", check=True))
    assert routed.changed_hosts(r) == {}
    r = routed.must(routed.run(sim, art, "deploy.yml", skip_tags="preflight"))
    TIMINGS["deploy_converged_s"] = round(r.elapsed_s, 1)
    assert routed.changed_hosts(r) == {}


def test_broken_replica_is_avoided_reported_and_restarted_alone(sim, art, deployed):
    r1_started = _started(sim, R1_HEAD, "vllm-kimi-k3")
    sim.docker(R2_FOLLOWER, "rm", "-f", "vllm-kimi-k3")
    t0 = time.monotonic()
    with routed.RequestLoop(ROUTER) as loop:
        # the router stops sending to replica-2: its circuit breaker opens (or its health check fails)
        def avoided():
            _st, text = routed.get(METRICS, key=None)
            return 'vllm_router_cb_state{worker="http://127.0.0.53:8000"} 1' in text or \
                'vllm_router_worker_health{worker="http://127.0.0.53:8000"} 0' in text
        assert routed.wait_for(avoided, 120), routed.get(METRICS, key=None)[1]
        TIMINGS["router_avoids_broken_replica_s"] = round(time.monotonic() - t0, 1)
        time.sleep(3)
    assert len(loop.results) > 10
    assert loop.failed == [], "%d of %d requests through the router failed" % (len(loop.failed), len(loop.results))
    assert routed.chat(ROUTER) == 200
    # deploy reports the broken replica (the router stage alone: nothing is restarted)
    r = routed.run(sim, art, "deploy.yml", tags="router", extra={"router_settle_s": 5})
    assert r.status == "failed"
    msgs = " ".join(str(m) for _h, _t, m in failed_tasks(r))
    assert "backend replica-2 (worker http://127.0.0.53:8000)" in msgs, msgs
    # the full deploy restarts replica-2 only
    r = routed.must(routed.run(sim, art, "deploy.yml", skip_tags="preflight"))
    assert _started(sim, R1_HEAD, "vllm-kimi-k3") == r1_started
    assert set(routed.changed_hosts(r)) <= {"gb300-tray53", "gb300-tray54"}, routed.changed_hosts(r)
    assert routed.chat(ROUTER) == 200


def _image(sim, node):
    return sim.docker(node, "inspect", "--format", "{{.Config.Image}}", "vllm-kimi-k3").stdout.strip()


def test_rolling_upgrade_keeps_serving_and_rolls_back_a_crashing_replica_alone(sim, art, deployed):
    nodes = (R1_HEAD, R1_FOLLOWER, R2_HEAD, R2_FOLLOWER)
    alt, broken = sim.images["standin-b"], sim.images["standin-broken"]
    with routed.RequestLoop(ROUTER) as loop:
        r = routed.run(sim, art, "upgrade.yml", extra={"kimi_k3_image": alt})
    assert r.status == "successful", failed_tasks(r)
    TIMINGS["rolling_upgrade_s"] = round(r.elapsed_s, 1)
    TIMINGS["rolling_upgrade_requests"] = "%d failed of %d" % (len(loop.failed), len(loop.results))
    assert [_image(sim, n) for n in nodes] == [alt] * 4
    assert len(loop.results) > 20
    assert loop.failed == [], "%d of %d requests through the router failed" % (len(loop.failed), len(loop.results))
    # one deployment at a time: replica-2 started only after replica-1 had passed its gate
    assert _started(sim, R2_HEAD, "vllm-kimi-k3") > _started(sim, R1_HEAD, "vllm-kimi-k3")
    r2_started = _started(sim, R2_HEAD, "vllm-kimi-k3")

    with routed.RequestLoop(ROUTER) as loop:
        r = routed.run(sim, art, "upgrade.yml", extra={"kimi_k3_image": broken})
    TIMINGS["rolling_rollback_requests"] = "%d failed of %d" % (len(loop.failed), len(loop.results))
    assert r.status == "failed"
    msgs = [m for _h, t, m in failed_tasks(r) if t == "Fail the rolling upgrade after rolling back the deployment that failed"]
    assert len(msgs) == 1, failed_tasks(r)
    assert "stopped at deployment replica-1" in msgs[0] and "rolled back to %s and serves again" % alt in msgs[0], msgs
    # replica-1 is back on the previous digest, replica-2 was never touched
    assert [_image(sim, n) for n in nodes] == [alt] * 4
    assert _started(sim, R2_HEAD, "vllm-kimi-k3") == r2_started
    assert loop.failed == [], "%d of %d requests through the router failed" % (len(loop.failed), len(loop.results))
    assert routed.chat(ROUTER) == 200


def test_wrong_answers_on_one_replica_fail_correctness_for_that_backend(sim, art, deployed):
    # replica-2 only; the teardown test comes next, so the fault is not relaunched away
    sg.launch(sim, art, "gb300-tray53,gb300-tray54", {"VLLM_STANDIN_WRONG_ANSWERS_ABOVE": sg.WRONG_ABOVE})
    sg.smoke(sim, art)
    facts = sg.facts(art, "kimi-router55")
    targets = facts["groups"]["correctness"]["correctness"]["targets"]
    assert targets["http://127.0.0.51:8000"]["accuracy"]["rate"] == 1.0
    assert targets["http://127.0.0.53:8000"]["accuracy"]["rate"] < 1.0
    assert sg.gates(facts) == ["correctness"], facts["policy"]


def test_teardown_removes_the_router_first(sim, art, deployed):
    r = routed.must(routed.run(sim, art, "teardown.yml"))
    order = [ev["event_data"].get("host") for ev in r.events
             if ev.get("event") == "runner_on_ok" and ev["event_data"].get("task", "").startswith("Remove the vLLM")
             and ev["event_data"].get("res", {}).get("changed")]
    assert order and order[0] == "kimi-router55", order
    assert sim.docker("fleet-router", "inspect", "vllm-router", check=False).returncode != 0
