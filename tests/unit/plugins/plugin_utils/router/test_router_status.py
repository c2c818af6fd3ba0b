"""router_status: the vllm-router's /workers and metrics mapped onto the plan's backends (exact values; inputs
are what vllm-router 0.1.17 served in a local run against two stand-ins)."""
from hypothesis import given, strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.router import status as rs

BACKENDS = [{"deployment": "replica-1", "kind": "worker", "url": "http://127.0.0.51:8000"},
            {"deployment": "replica-2", "kind": "worker", "url": "http://127.0.0.53:8000/"}]

WORKERS = {"workers": [
    {"url": "http://127.0.0.53:8000", "model_id": "unknown", "worker_type": "regular", "is_healthy": False,
     "load": 0, "connection_mode": "Http", "priority": 50, "cost": 1.0},
    {"url": "http://127.0.0.51:8000", "model_id": "unknown", "worker_type": "regular", "is_healthy": True,
     "load": 0, "connection_mode": "Http", "priority": 50, "cost": 1.0}],
    "total": 2, "stats": {"prefill_count": 0, "decode_count": 0, "regular_count": 2}}

BEFORE = """# TYPE vllm_router_processed_requests_total counter
vllm_router_processed_requests_total{worker="http://127.0.0.51:8000"} 2
vllm_router_processed_requests_total{worker="http://127.0.0.53:8000"} 3
vllm_router_worker_health{worker="http://127.0.0.51:8000"} 1
"""
AFTER = """vllm_router_requests_total{route="/v1/chat/completions"} 14
vllm_router_cb_outcomes_total{worker="http://127.0.0.51:8000",outcome="success"} 6
vllm_router_cb_outcomes_total{worker="http://127.0.0.51:8000",outcome="failure"} 2
vllm_router_processed_requests_total{worker="http://127.0.0.51:8000"} 10
vllm_router_processed_requests_total{worker="http://127.0.0.53:8000"} 3
vllm_router_processed_requests_total{worker="http://127.0.0.99:8000"} 1
vllm_router_policy_decisions_total{policy="round_robin",worker="http://127.0.0.51:8000"} 10
"""


def test_backend_health_maps_urls_to_deployments():
    rows = rs.backend_health(WORKERS, BACKENDS)
    assert rows == [
        {"deployment": "replica-1", "kind": "worker", "url": "http://127.0.0.51:8000", "known": True,
         "circuit_open": False, "reachable": None, "healthy": True},
        {"deployment": "replica-2", "kind": "worker", "url": "http://127.0.0.53:8000", "known": True,
         "circuit_open": False, "reachable": None, "healthy": False}]


def test_health_problems_name_the_broken_deployment():
    lines = rs.health_problems(rs.backend_health(WORKERS, BACKENDS), "fleet-router")
    assert lines == ["fleet-router: backend replica-2 (worker http://127.0.0.53:8000) is not healthy in the router (its "
                     "/health checks fail); "
                     "the router sends it no requests. Check that deployment (status.yml in the site) and "
                     "run deploy.yml to restart it."]


def test_backend_missing_from_router_is_a_problem():
    rows = rs.backend_health({"workers": [WORKERS["workers"][1]]}, BACKENDS)
    assert rows[1]["known"] is False and rows[1]["healthy"] is False
    assert "is not among the router's workers" in rs.health_problems(rows, "r")[0]


def test_all_healthy_means_no_problems():
    workers = {"workers": [dict(w, is_healthy=True) for w in WORKERS["workers"]]}
    assert rs.health_problems(rs.backend_health(workers, BACKENDS), "r") == []


def test_usage_counts_requests_per_backend_between_scrapes():
    report = rs.usage(BEFORE, AFTER, BACKENDS)
    assert report == {"backends": [
        {"deployment": "replica-1", "kind": "worker", "url": "http://127.0.0.51:8000", "requests": 8,
         "succeeded": 6},
        {"deployment": "replica-2", "kind": "worker", "url": "http://127.0.0.53:8000", "requests": 0,
         "succeeded": None}],
        "unplanned": ["http://127.0.0.99:8000"], "total": 8}
    assert rs.usage_lines(report) == [
        "| deployment | kind | url | requests sent (with retries) | succeeded |", "| --- | --- | --- | --- | --- |",
        "| replica-1 | worker | http://127.0.0.51:8000 | 8 | 6 |",
        "| replica-2 | worker | http://127.0.0.53:8000 | 0 | - |",
        "| (not in the plan) | - | http://127.0.0.99:8000 | used | - |"]


# Observed after killing one of two workers (default 60 s health checks): every request still succeeded (10
# retries), the dead worker's circuit breaker opened while /workers and worker_health still called it healthy.
KILLED = """vllm_router_processed_requests_total{worker="http://127.0.0.51:8000"} 20
vllm_router_processed_requests_total{worker="http://127.0.0.53:8000"} 10
vllm_router_cb_state_transitions_total{worker="http://127.0.0.53:8000",from="closed",to="open"} 1
vllm_router_cb_state{worker="http://127.0.0.51:8000"} 0
vllm_router_cb_state{worker="http://127.0.0.53:8000"} 1
vllm_router_worker_health{worker="http://127.0.0.51:8000"} 1
vllm_router_worker_health{worker="http://127.0.0.53:8000"} 1
"""


def test_open_circuit_breaker_counts_as_unhealthy():
    workers = {"workers": [dict(w, is_healthy=True) for w in WORKERS["workers"]]}
    rows = rs.backend_health(workers, BACKENDS, KILLED)
    assert [(r["deployment"], r["circuit_open"], r["healthy"]) for r in rows] == [
        ("replica-1", False, True), ("replica-2", True, False)]
    assert rs.health_problems(rows, "r") == [
        "r: backend replica-2 (worker http://127.0.0.53:8000) has its circuit breaker open in the router (its requests "
        "failed); the router sends it no requests. Check that deployment (status.yml in the site) and run "
        "deploy.yml to restart it."]


def test_usage_from_empty_first_scrape():
    assert rs.usage("", AFTER, BACKENDS)["total"] == 13


def test_worker_samples_ignores_other_metrics_and_bad_values():
    text = AFTER + 'vllm_router_processed_requests_total{worker="http://x:1"} NaNx\n'
    assert rs.worker_samples(text, "vllm_router_policy_decisions_total") == {"http://127.0.0.51:8000": 10.0}
    assert "http://x:1" not in rs.worker_samples(text, "vllm_router_processed_requests_total")


@given(st.text(max_size=400))
def test_worker_samples_never_raises(text):
    assert isinstance(rs.worker_samples(text, "vllm_router_processed_requests_total"), dict)


@given(st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3)))
def test_backend_health_tolerates_odd_answers(workers):
    rows = rs.backend_health(workers, BACKENDS)
    assert [r["healthy"] for r in rows] == [False, False]


def test_metrics_alone_give_health_and_circuit_state():
    rows = rs.backend_health(None, BACKENDS, KILLED)
    assert [(r["known"], r["circuit_open"], r["healthy"]) for r in rows] == [(True, False, True), (True, True, False)]
    recovered = KILLED.replace('cb_state{worker="http://127.0.0.53:8000"} 1', 'cb_state{worker="http://127.0.0.53:8000"} 0')
    assert rs.health_problems(rs.backend_health(None, BACKENDS, recovered), "r") == []


# vllm-router 0.1.17 in PD mode against a DEP decode (hybrid LB, 4 local ranks per node): one worker per DP rank.
PD_BACKENDS = [{"deployment": "prefill-1", "kind": "prefill", "url": "http://127.0.0.31:8001"},
               {"deployment": "decode-1", "kind": "decode", "url": "http://127.0.0.33:8002"},
               {"deployment": "decode-1", "kind": "decode", "url": "http://127.0.0.34:8002"}]
PD_WORKERS = {"workers": [{"url": "http://127.0.0.33:8002@%d" % r, "worker_type": "decode", "is_healthy": True}
                          for r in range(4)]
              + [{"url": "http://127.0.0.34:8002@%d" % r, "worker_type": "decode", "is_healthy": r != 2}
                 for r in range(4)]
              + [{"url": "http://127.0.0.31:8001", "worker_type": "prefill", "is_healthy": True, "bootstrap_port": None}]}
PD_METRICS = "\n".join(['vllm_router_worker_health{worker="http://127.0.0.31:8001"} 1'] + [
    'vllm_router_worker_health{worker="http://127.0.0.3%d:8002@%d"} %d' % (n, r, 0 if (n, r) == (4, 2) else 1)
    for n in (3, 4) for r in range(4)] + [
    'vllm_router_processed_requests_total{worker="http://127.0.0.3%d:8002@%d"} %d' % (n, r, r) for n in (3, 4)
    for r in range(4)] + ['vllm_router_processed_requests_total{worker="http://127.0.0.31:8001"} 12'])


def test_dp_ranks_of_one_backend_are_that_backend():
    rows = rs.backend_health(PD_WORKERS, PD_BACKENDS)
    assert [(r["url"], r["known"], r["healthy"]) for r in rows] == [
        ("http://127.0.0.31:8001", True, True), ("http://127.0.0.33:8002", True, True),
        ("http://127.0.0.34:8002", True, False)]
    assert [r["healthy"] for r in rs.backend_health(None, PD_BACKENDS, PD_METRICS)] == [True, True, False]
    assert [b["requests"] for b in rs.usage("", PD_METRICS, PD_BACKENDS)["backends"]] == [12, 6, 6]


def test_open_circuit_of_a_repaired_backend_is_not_a_problem():
    workers = {"workers": [dict(w, is_healthy=True) for w in WORKERS["workers"]]}
    direct = {"http://127.0.0.51:8000": 200, "http://127.0.0.53:8000": 200}
    rows = rs.backend_health(workers, BACKENDS, KILLED, direct)
    assert [(r["circuit_open"], r["reachable"], r["healthy"]) for r in rows] == [(False, True, True), (True, True, True)]
    rows = rs.backend_health(workers, BACKENDS, KILLED, {"http://127.0.0.51:8000": 200, "http://127.0.0.53:8000": None})
    assert [r["healthy"] for r in rows] == [True, False]
