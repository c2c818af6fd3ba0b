"""What the plan hands the roles instead of letting them derive it (plugin_utils.plan.handover): the pull name under
the host's image_mirror rules (image_pull), the router's admin URLs, and an operator's OpenAI base URL's model list
and health URL; exact values over the rehearsal inventories, and the cluster_plan action passing each host's
image_mirror to the plan."""

from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.action import cluster_plan as cluster_plan_action
from ansible_collections.gpufleet.kimi_k3.plugins.filter import capacity as capacity_filters
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import handover as plan_handover
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import topology

from tests.unit.plugins.action.test_plan_golden import RECIPE, SNAPSHOTS, nodes_of

DIGEST = "sha256:" + "e" * 64
VLLM = "127.0.0.1:5000/vllm/vllm-openai@" + DIGEST
ROUTER = "127.0.0.1:5000/vllm-router@" + DIGEST
HUB = "vllm/vllm-openai@" + DIGEST


def _plan(name, mirrors=None):
    """inventories/<name> planned with ``mirrors``: {host: image_mirror} (None: no host sets one)."""
    nodes, routers = nodes_of(name)
    for node in nodes + routers:
        if mirrors and node["host"] in mirrors:
            node["image_mirror"] = mirrors[node["host"]]
    result = topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS, routers)
    assert result["ok"], result["errors"]
    return result["plans"]


def test_without_a_mirror_every_host_pulls_its_planned_image():
    plans = _plan("sim-gb300-pd")
    assert dict((h, p["image_pull"]) for h, p in plans.items()) == dict(
        (h, {"reference": image, "pinned": True, "pull": image, "mirrored": False, "rule": None})
        for h, image in [("gb300-tray31", VLLM), ("gb300-tray32", VLLM), ("gb300-tray33", VLLM),
                         ("gb300-tray34", VLLM), ("kimi-router35", ROUTER)])


def test_a_prefix_mirror_rewrites_every_image_it_covers_with_the_same_digest():
    rules = {"127.0.0.1:5000/": "harbor.example/sim/"}
    hosts = ("gb300-tray31", "gb300-tray32", "gb300-tray33", "gb300-tray34", "kimi-router35")
    plans = _plan("sim-gb300-pd", dict((h, rules) for h in hosts))
    assert plans["gb300-tray32"]["image_pull"] == {
        "reference": VLLM, "pinned": True, "pull": "harbor.example/sim/vllm/vllm-openai@" + DIGEST, "mirrored": True,
        "rule": "127.0.0.1:5000/ -> harbor.example/sim/"}
    assert plans["kimi-router35"]["image_pull"] == {
        "reference": ROUTER, "pinned": True, "pull": "harbor.example/sim/vllm-router@" + DIGEST, "mirrored": True,
        "rule": "127.0.0.1:5000/ -> harbor.example/sim/"}
    assert plans["gb300-tray32"]["image"] == VLLM  # the pinned image, and so the plan hash, stay as planned


def test_a_repository_rule_applies_to_the_hosts_that_set_it_and_to_its_repository_only():
    rules = {"127.0.0.1:5000/vllm/vllm-openai": "harbor.example/mirror/vllm-openai"}
    plans = _plan("sim-gb300-pd", {"gb300-tray31": rules, "kimi-router35": rules})
    assert plans["gb300-tray31"]["image_pull"]["pull"] == "harbor.example/mirror/vllm-openai@" + DIGEST
    assert plans["gb300-tray33"]["image_pull"]["pull"] == VLLM                  # sets no mirror
    assert plans["kimi-router35"]["image_pull"] == {  # another repository
        "reference": ROUTER, "pinned": True, "pull": ROUTER, "mirrored": False, "rule": None}


def test_the_router_gets_its_admin_urls_and_health_from_the_plan():
    router = _plan("sim-gb300-pd")["kimi-router35"]
    assert (router["health_url"], router["router"]["liveness_url"], router["router"]["workers_url"],
            router["router"]["metrics_url"]) == (
        "http://127.0.0.35:8000/health", "http://127.0.0.35:8000/liveness", "http://127.0.0.35:8000/workers",
        "http://127.0.0.35:29000/metrics")
    assert [(b["url"], b["health_url"]) for b in router["router"]["backends"]][:1] == [
        ("http://127.0.0.31:8001", "http://127.0.0.31:8001/health")]


def test_image_pull_of_rules_the_plan_refuses_keeps_the_planned_name():
    # the role-variable check refuses such a plan; until then nothing is rewritten
    assert plan_handover.image_pull(HUB, {"docker.io/": "harbor.example/hub"}) == {
        "reference": HUB, "pinned": True, "pull": HUB, "mirrored": False, "rule": None}
    assert plan_handover.image_pull(HUB, "harbor.example/hub/")["pull"] == HUB
    assert plan_handover.image_pull(HUB, {"docker.io/": "harbor.example/hub/"})["pull"] == (
        "harbor.example/hub/vllm/vllm-openai@" + DIGEST)


def test_a_tag_only_image_the_plan_accepted_is_handed_over_unpinned_and_mirrored_by_tag():
    tag = "vllm/vllm-openai:v0.28.0"
    assert plan_handover.image_pull(tag, {"docker.io/": "harbor.example/hub/"}) == {
        "reference": tag, "pinned": False, "pull": "harbor.example/hub/vllm/vllm-openai:v0.28.0", "mirrored": True,
        "rule": "docker.io/ -> harbor.example/hub/"}


def test_endpoint_urls_of_an_operator_base_url():
    assert plan_handover.endpoint_urls("https://lb.example/v1") == {
        "base_url": "https://lb.example/v1", "models_url": "https://lb.example/v1/models",
        "health_url": "https://lb.example/health"}
    assert plan_handover.endpoint_urls("http://10.0.0.11:8000/v1/") == {
        "base_url": "http://10.0.0.11:8000/v1/", "models_url": "http://10.0.0.11:8000/v1/models",
        "health_url": "http://10.0.0.11:8000/health"}
    assert plan_handover.endpoint_urls("http://proxy.example/kimi") == {
        "base_url": "http://proxy.example/kimi", "models_url": "http://proxy.example/kimi/models",
        "health_url": "http://proxy.example/kimi/health"}
    assert plan_handover.endpoint_urls("") == {"base_url": "", "models_url": None, "health_url": None}


def _result(name):
    nodes, routers = nodes_of(name)
    result = topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS, routers)
    assert result["ok"], result["errors"]
    return result


def test_the_capacity_filter_on_a_single_deployment_measures_the_head():
    result = _result("sim-gb300")
    head = result["plans"]["gb300-tray01"]
    endpoint = capacity_filters.capacity_endpoint(result)
    assert endpoint == {"base_url": head["api_base_url"], "models_url": head["api_base_url"] + "/models",
                        "health_url": head["health_url"], "metrics_urls": [head["metrics_url"]],
                        "via": "head gb300-tray01"}


def test_the_capacity_filter_on_a_fleet_measures_the_router_and_reads_every_replica():
    result = _result("sim-gb300-fleet")
    plans = result["plans"]
    endpoint = capacity_filters.capacity_endpoint(result, "")
    assert endpoint == {"base_url": "http://127.0.0.55:8000/v1", "models_url": "http://127.0.0.55:8000/v1/models",
                        "health_url": "http://127.0.0.55:8000/health", "via": "router kimi-router55",
                        "metrics_urls": ["http://127.0.0.51:8000/metrics", "http://127.0.0.53:8000/metrics"]}
    assert endpoint["base_url"] == plans["kimi-router55"]["api_base_url"]
    assert plans["kimi-router55"]["metrics_url"] not in endpoint["metrics_urls"]
    # the operator's entry point wins; the engines read stay the plan's
    given = capacity_filters.capacity_endpoint(result, "https://lb.example/v1")
    assert (given["base_url"], given["health_url"], given["via"]) == (
        "https://lb.example/v1", "https://lb.example/health", "capacity_base_url")
    assert given["metrics_urls"] == endpoint["metrics_urls"]


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.none(), st.integers(), st.text(max_size=40)))
def test_endpoint_urls_never_raise(value):
    out = plan_handover.endpoint_urls(value)
    assert set(out) == {"base_url", "models_url", "health_url"}
    assert out["models_url"] is None or out["models_url"].endswith("/models")


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.none(), st.text(max_size=20), st.lists(st.text(max_size=5), max_size=2),
                 st.dictionaries(st.sampled_from(["docker.io/", "vllm/vllm-openai", "docker.io/vllm/", "x", ""]),
                                 st.one_of(st.text(max_size=24), st.integers(), st.none()), max_size=3)))
def test_image_pull_never_raises_and_keeps_the_digest(mirrors):
    out = plan_handover.image_pull(HUB, mirrors)
    assert out["reference"] == HUB and out["pinned"] is True
    assert out["pull"].endswith("@" + DIGEST) and out["mirrored"] == (out["rule"] is not None)


def test_the_action_hands_each_host_its_image_mirror_to_the_plan():
    action = object.__new__(cluster_plan_action.ActionModule)
    rules = {"docker.io/": "harbor.example/hub/"}
    hostvars = {"tray01": {"kimi_k3_image": HUB, "ansible_host": "10.0.0.1", "image_mirror": rules},
                "tray02": {"kimi_k3_image": HUB, "ansible_host": "10.0.0.2"},
                "router": {"ansible_host": "10.0.0.3", "image_mirror": rules}}
    task_vars = {"hostvars": hostvars, "groups": {"vllm_cluster": ["tray01", "tray02"], "vllm_head": ["tray01"],
                                                  "vllm_router": ["router"]}}
    args = {"group": "vllm_cluster", "head_group": "vllm_head", "router_group": "vllm_router", "overrides": {}}
    role_vars = action._hosts_role_vars(task_vars, ["tray01", "tray02", "router"])
    nodes, routers = action._cluster_nodes(args, task_vars, role_vars)
    assert [(n["host"], n.get("image_mirror")) for n in nodes + routers] == [
        ("tray01", rules), ("tray02", None), ("router", rules)]
    assert nodes[0]["vars"] == {"kimi_k3_image": HUB, "ansible_host": "10.0.0.1"}
