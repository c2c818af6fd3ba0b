"""Prefill/decode disaggregation behind the real vllm-router 0.1.17 on the rehearsal cluster (docs/deployments.md).

deploy.yml end to end on inventories/sim-gb300-pd: the TEP8 prefill instance (2 trays) and the DEP decode instance
(2 trays, hybrid LB) launched each in its own order, then the router (--vllm-pd-disaggregation, the backends' API
key as OPENAI_API_KEY from a secret file); smoke through the router passes with every request's KV blocks issued
by the prefill stand-in and read by a decode stand-in from the prefill's NIXL side channel; transfer parameters no
prefill issued are refused; a second deploy changes nothing; docker inspect of the router holds no key.
Then, on the same deployment, the full smoke profile (tests/helpers/smoke_gates.py): healthy, every transfer passes
the pd gate; a decode instance that recomputes the prefill fails the pd gate alone; a decode instance with wrong
answers fails correctness alone, while the prefill instance asked directly answers right.

Needs `sim/simctl up --cluster gb300pd` (or KIMI_SIM_AUTO_UP=1).
"""
import json
import re
import urllib.error
import urllib.request

import pytest

from tests.helpers import routed
from tests.helpers import smoke_gates as sg

pytestmark = [pytest.mark.sim, pytest.mark.sim_group(routed.ROUTER_GROUP)]

ROUTER = "http://127.0.0.35:8000"
PREFILL = "http://127.0.0.31:8001"
DECODES = ["http://127.0.0.33:8002", "http://127.0.0.34:8002"]
TIMINGS = {}


art, sim, deployed = routed.deployment_fixtures("gb300pd", TIMINGS)


def _kv(url, result):
    _st, text = routed.get(url + "/metrics", key=None)
    m = re.search(r'^kimi_sim_kv_transfers_total\{[^}]*result="%s"[^}]*\} (\S+)$' % result, text, re.M)
    return float(m.group(1)) if m else 0.0


def test_deploy_pd_end_to_end_with_the_real_router(sim, art, deployed):
    status, body = routed.get(ROUTER + "/health")
    assert status == 200, body
    TIMINGS["router_ready_s"] = routed.router_ready_s(sim, "pd-router")
    rep = routed.report(art, "router-kimi-router35.json")
    assert [(b["deployment"], b["kind"], b["healthy"]) for b in rep["backends"]] == [
        ("prefill-1", "prefill", True), ("decode-1", "decode", True), ("decode-1", "decode", True)]
    usage = routed.report(art, "router-usage-kimi-router35.json")
    kinds = {}
    for b in usage["backends"]:
        kinds[b["kind"]] = kinds.get(b["kind"], 0) + b["requests"]
    assert kinds["prefill"] > 0 and kinds["decode"] > 0, usage
    for host in ("kimi-router35", "gb300-tray31", "gb300-tray33"):
        assert routed.report(art, "smoke/smoke-%s.json" % host), host


def test_requests_through_the_router_move_kv_from_prefill_to_decode(sim, deployed):
    issued = _kv(PREFILL, "issued")
    read = sum(_kv(d, "read") for d in DECODES)
    assert [routed.chat(ROUTER) for attempt in range(6)] == [200] * 6
    assert _kv(PREFILL, "issued") == issued + 6
    assert _kv(PREFILL, "handed_over") >= issued + 6
    assert sum(_kv(d, "read") for d in DECODES) == read + 6
    assert sum(_kv(d, "rejected") for d in DECODES) == 0


def test_decode_refuses_transfer_parameters_no_prefill_issued(sim, deployed):
    body = {"messages": [{"role": "user", "content": "forged"}], "max_tokens": 4,
            "kv_transfer_params": {"do_remote_prefill": True, "do_remote_decode": False,
                                   "remote_engine_id": "not-an-engine", "remote_block_ids": [1, 2],
                                   "remote_request_id": "forged", "remote_host": "127.0.0.31", "remote_port": 5557}}
    req = urllib.request.Request(DECODES[0] + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": "Bearer " + routed.KEY, "Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req, timeout=20)
    assert exc.value.code == 500
    assert "KV transfer failed" in exc.value.read().decode()


def test_router_container_holds_no_key(sim, deployed):
    inspect = sim.docker("pd-router", "inspect", "vllm-router").stdout
    assert routed.KEY not in inspect
    cfg = json.loads(inspect)[0]["Config"]
    assert "OPENAI_API_KEY_FILE=/run/secrets/kimi-k3/OPENAI_API_KEY" in cfg["Env"]
    assert "--api-key" not in cfg["Cmd"]


def test_second_deploy_changes_nothing(sim, art, deployed):
    r = routed.must(routed.run(sim, art, "deploy.yml", skip_tags="preflight"))
    TIMINGS["deploy_converged_s"] = round(r.elapsed_s, 1)
    assert routed.changed_hosts(r) == {}


# The full smoke's gates on the deployment above; after test_second_deploy_changes_nothing (a relaunched decode
# instance would be a change). Each fault test relaunches the decode hosts with exactly its own fault.
def test_pd_healthy_transfers_pass(sim, art, deployed):
    sg.smoke(sim, art)
    facts = sg.facts(art, "kimi-router35")
    assert facts["pd"]["errors"] == [] and facts["policy"]["violations"] == [], facts["policy"]
    assert all(v["recompute_fraction"] <= 0.05 for v in facts["pd"]["instances"].values()), facts["pd"]


@pytest.mark.parametrize("env, gate", [({"VLLM_STANDIN_DECODE_RECOMPUTE": "1"}, "pd"),
                                       ({"VLLM_STANDIN_WRONG_ANSWERS_ABOVE": sg.WRONG_ABOVE}, "correctness")])
def test_decode_side_faults(sim, art, deployed, env, gate):
    sg.launch(sim, art, "gb300-tray33,gb300-tray34", env)
    sg.smoke(sim, art)
    facts = sg.facts(art, "kimi-router35")
    assert sg.gates(facts) == [gate], facts["policy"]
    if gate == "correctness":  # the prefill instance answers right when asked directly
        assert facts["groups"]["correctness"]["correctness"]["targets"]["http://127.0.0.31:8001"][
            "accuracy"]["rate"] == 1.0
