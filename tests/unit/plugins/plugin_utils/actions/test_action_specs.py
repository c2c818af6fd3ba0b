"""plugin_utils.actions.specs.null_is_default: an explicit null given to an action means the spec's default."""
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.actions import specs as S


def test_an_explicit_null_takes_the_default_and_a_given_value_stays():
    args = {"group": None, "head_group": "heads", "router_group": "vllm_router", "overrides": None,
            "recipe": "kimi_k3", "dest": None, "return_plans": None}
    out = S.null_is_default(args, S.CLUSTER_PLAN)
    assert out == {"group": "vllm_cluster", "head_group": "heads", "router_group": "vllm_router", "overrides": {},
                   "recipe": "kimi_k3", "dest": None, "return_plans": True}  # dest has no default: None stays None
    assert args["overrides"] is None and args["group"] is None   # the caller's dict is not changed


def test_defaults_are_copies_not_the_spec_objects():
    a = S.null_is_default({"peers": None, "health_urls": None}, S.VLLM_WAIT)
    a["peers"].append("tray02")
    a["health_urls"].append("http://127.0.0.1:8000/health")
    b = S.null_is_default({"peers": None, "health_urls": None}, S.VLLM_WAIT)
    assert b["peers"] == [] and b["health_urls"] == []
    assert S.VLLM_WAIT["peers"]["default"] == [] and S.VLLM_WAIT["health_urls"]["default"] == []


def test_falsy_values_that_are_not_null_are_kept():
    out = S.null_is_default({"thresholds": {}, "show_pass": False, "hosts": []}, S.PREFLIGHT_REPORT)
    assert out["thresholds"] == {} and out["show_pass"] is False and out["hosts"] == []


def test_every_nullable_default_of_the_five_actions_is_filled():
    for spec in (S.CLUSTER_PLAN, S.PREFLIGHT_REPORT, S.VLLM_WAIT, S.DEPLOYMENT_STATE, S.MONITORING_CONFIG):
        out = S.null_is_default(dict((k, None) for k in spec), spec)
        assert out == dict((k, o.get("default")) for k, o in spec.items())
