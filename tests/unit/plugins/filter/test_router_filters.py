"""The thin filters of plugins/filter/router.py (router role, smoke through the router)."""
import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.kimi_k3.plugins.filter import router as router_filters

PLAN = {"role": "router", "router": {"backends": [
    {"deployment": "replica-1", "kind": "worker", "url": "http://127.0.0.51:8000"},
    {"deployment": "replica-2", "kind": "worker", "url": "http://127.0.0.53:8000"}]}}
WORKERS = {"workers": [{"url": "http://127.0.0.51:8000", "is_healthy": True},
                       {"url": "http://127.0.0.53:8000", "is_healthy": True}]}
METRICS = ('vllm_router_cb_state{worker="http://127.0.0.53:8000"} 1\n'
           'vllm_router_processed_requests_total{worker="http://127.0.0.51:8000"} 4\n')


@pytest.mark.parametrize("plan", [None, {}, {"role": "head"}, {"router": "x"}])
def test_a_plan_without_router_section_is_refused(plan):
    with pytest.raises(AnsibleFilterError, match="router host's plan"):
        router_filters.router_backend_health(WORKERS, plan, "r")


def test_health_with_metrics_and_direct_probe():
    out = router_filters.router_backend_health(WORKERS, PLAN, "r", METRICS)
    assert [r["healthy"] for r in out["rows"]] == [True, False]
    assert len(out["problems"]) == 1 and "replica-2" in out["problems"][0]
    out = router_filters.router_backend_health(WORKERS, PLAN, "r", METRICS, {"http://127.0.0.53:8000": 200})
    assert out["problems"] == []


def test_metrics_only_health_and_odd_workers_answer():
    assert [r["known"] for r in router_filters.router_backend_health(None, PLAN, "r", "")["rows"]] == [False, False]
    assert router_filters.router_backend_health("not json", PLAN, "r")["rows"][0]["known"] is False


def test_usage_table():
    out = router_filters.router_usage(METRICS, "", PLAN)
    assert out["total"] == 4
    assert out["table"][2] == "| replica-1 | worker | http://127.0.0.51:8000 | 4 | - |"
