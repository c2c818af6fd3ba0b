"""The plan contract every role reads (plugin_utils.plan.contract, filters plan_problem / plan_problems), and the
ports/expectations preflight derives from a plan (plugin_utils.preflight.expect)."""
import copy

import pytest
from hypothesis import given, strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.filter import capacity as capacity_filters
from ansible_collections.gpufleet.kimi_k3.plugins.filter import plan as plan_filters
from ansible_collections.gpufleet.kimi_k3.plugins.filter import preflight as preflight_filters
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import contract as PCT
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.preflight import expect as E
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import topology
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data

RECIPE = recipe_data.load_recipe()
SNAPSHOTS = recipe_data.load_snapshots()
DEFAULTS = RECIPE["defaults"]
IMAGE = "vllm/vllm-openai@sha256:" + "a" * 64


def rendered(nodes=2, host_vars=None, **cluster):
    cluster = dict({"kimi_k3_accelerator": "gb300", "kimi_k3_strategy": "multi_node_tp",
                    "kimi_k3_interconnect": "nvlink", "kimi_k3_image": IMAGE, "kimi_k3_socket_ifname": "eth0",
                    "kimi_k3_api_key": "k", "kimi_k3_allow_unpinned_remote_code": True},
                   **cluster)
    out = []
    for i in range(nodes):
        v = dict(cluster, ansible_host="10.0.0.%d" % (11 + i))
        v.update((host_vars or {}).get(i, {}))
        out.append({"host": "tray%02d" % (i + 1), "head": i == 0, "vars": v})
    result = topology.build_cluster_plan(out, RECIPE, SNAPSHOTS)
    assert result["ok"], result["errors"]
    return result, dict((n["host"], n["vars"]) for n in out)


RESULT = rendered()[0]


def test_defaults_of_an_example_cluster():
    result, _hv = rendered()
    plans = result["plans"]
    head, worker = plans["tray01"], plans["tray02"]
    assert PCT.missing_keys(head) == [] and PCT.missing_keys(worker) == []
    assert PCT.wrong_types(head) == [] and PCT.wrong_types(worker) == []
    assert PCT.missing_keys(result["cluster"], PCT.CLUSTER_KEYS) == []
    assert PCT.wrong_types(result["cluster"], PCT.CLUSTER_KEYS) == []
    assert head["docker_host"] == "unix:///var/run/docker.sock"
    assert head["model"] == "moonshotai/Kimi-K3" and head["model_revision"] is None
    assert head["model_cache_dir"] == "/data/hf-cache"
    ports = (head["api_host"], head["api_port"], head["master_port"], head["dp_rpc_port"])
    assert ports == ("0.0.0.0", 8000, 29501, 29550)
    assert worker["api_port"] == 8000                          # headless worker: no --port, the default port
    assert (head["health_url"], head["metrics_url"], head["api_base_url"]) == (
        "http://10.0.0.11:8000/health", "http://10.0.0.11:8000/metrics", "http://10.0.0.11:8000/v1")
    assert (worker["health_url"], worker["metrics_url"], worker["api_base_url"]) == (
        "http://10.0.0.11:8000/health", None, None)            # a TP worker watches its head
    assert result["cluster"]["metrics_urls"] == ["http://10.0.0.11:8000/metrics"]


def test_values_come_from_the_plan():
    result, _hv = rendered(host_vars={0: {"kimi_k3_api_host": "10.0.0.11"}}, kimi_k3_variant="nvfp4",
                           kimi_k3_model_cache_dir="/srv/hf", kimi_k3_api_port=9000, kimi_k3_master_port=29600,
                           kimi_k3_served_model_name="k3", kimi_k3_docker_host="unix:///run/docker.sock")
    head = result["plans"]["tray01"]
    assert head["model"] == "RedHatAI/Kimi-K3-NVFP4"
    assert head["model_cache_dir"] == "/srv/hf"
    assert (head["api_host"], head["api_port"], head["master_port"]) == ("10.0.0.11", 9000, 29600)
    assert head["api_url"] == "http://10.0.0.11:9000" and head["health_url"] == "http://10.0.0.11:9000/health"
    assert head["served_model_name"] == "k3"
    assert head["docker_host"] == "unix:///run/docker.sock"
    assert result["plans"]["tray02"]["api_port"] == 9000 and result["plans"]["tray02"]["master_port"] == 29600


@pytest.mark.parametrize("where, key, value, message", [
    ("plans", "api_port", "8000", "in the plan's entry for this host, api_port is str, expected int"),
    ("plans", "serves_http", 1, "in the plan's entry for this host, serves_http is int, expected bool"),
    ("plans", "node_rank", True, "in the plan's entry for this host, node_rank is bool, expected int"),
    ("plans", "image", None, "in the plan's entry for this host, image is null, expected str"),
    ("cluster", "router", [], "in the plan's cluster summary, router is list, expected dict or null"),
    ("cluster", "endpoints", "http://x", "in the plan's cluster summary, endpoints is str, expected list"),
])
def test_require_refuses_a_key_of_the_wrong_type(where, key, value, message):
    result = copy.deepcopy(rendered()[0])
    (result["plans"]["tray01"] if where == "plans" else result["cluster"])[key] = value
    assert plan_filters.plan_problem(result, "tray01") == (
        "tray01: %s - plan_result is not the cluster_plan result; %s." % (message, PCT.RUN_PLAN_FIRST))


def test_nullable_keys_accept_null_and_their_type():
    result = copy.deepcopy(rendered()[0])
    result["plans"]["tray01"].update(metrics_url=None, master_port=None)
    result["cluster"].update(router={"host": "r"}, capacity=None)
    assert plan_filters.plan_problem(result, "tray01") == ""


def test_a_cluster_summary_without_a_contract_key_is_refused():
    result = copy.deepcopy(rendered()[0])
    del result["cluster"]["metrics_urls"], result["cluster"]["monitoring"]
    assert plan_filters.plan_problem(result, "tray01") == (
        "tray01: the plan's cluster summary lacks metrics_urls, monitoring - the plan role is older than this "
        "role; update the collection.")
    del result["cluster"]
    assert "the plan's cluster summary lacks mode, " in plan_filters.plan_problem(result, "tray01")


@given(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5),
                 st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2)),
       st.sampled_from(sorted(set(PCT.HOST_KEYS.values()) | set(PCT.CLUSTER_KEYS.values()))))
def test_type_ok_is_total_and_agrees_with_wrong_types(value, declared):
    ok = PCT.type_ok(value, declared)
    assert ok in (True, False)
    assert (PCT.wrong_types({"k": value}, {"k": declared}) == []) == ok
    if value is None:
        assert ok == declared.endswith("?")


@given(st.dictionaries(st.sampled_from(sorted(PCT.HOST_KEYS)), st.one_of(st.none(), st.integers(), st.text()),
                       max_size=40))
def test_require_refuses_any_broken_plan_with_a_message_not_a_traceback(plan):
    result = copy.deepcopy(RESULT)
    result["plans"]["tray01"] = plan
    problem = plan_filters.plan_problem(result, "tray01")
    assert problem.startswith("tray01: ") and problem.endswith(".")


@pytest.mark.parametrize("argv,flag,value", [
    (["m", "--port", "9000"], "--port", "9000"), (["m", "--port=9001"], "--port", "9001"),
    (["m", "--port", "1", "--port", "2"], "--port", "2"), (["m", "--portx", "3"], "--port", None),
    (["m", "--port"], "--port", None), ([], "--port", None),
])
def test_arg_value(argv, flag, value):
    assert PCT.arg_value(argv, flag) == value


def test_require_and_plan_problem_name_the_host_and_the_fix():
    result, hv = rendered()
    full = result
    assert plan_filters.plan_problem(full, "tray01") == ""
    assert PCT.require(full, "tray01")["host"] == "tray01"
    assert plan_filters.plan_problem(None, "tray01") == (
        "tray01: plan_result is not set - run the gpufleet.kimi_k3.plan role first (every playbook of the "
        "collection does).")
    assert "the plan has no entry for this host" in plan_filters.plan_problem(full, "ghost")
    old = copy.deepcopy(result)
    del old["plans"]["tray01"]["docker_host"]
    assert "the plan's entry for this host lacks docker_host" in plan_filters.plan_problem(old, "tray01")
    # plan.yml's plan_result (plan_return_plans: false): the count, no plans - the refusal says what to set
    files_only = {"ok": True, "nodes": 2, "cluster": result["cluster"], "summary": ["x"]}
    assert plan_filters.plan_problem(files_only, "tray01") == (
        "tray01: plan_result holds no plans (the plan role ran with plan_return_plans: false, as "
        "playbooks/plan.yml does) - apply gpufleet.kimi_k3.plan with plan_return_plans: true before this role.")
    assert "plan_result is not set" in plan_filters.plan_problem(dict(files_only, nodes=0), "tray01")
    assert "plan_result is not set" in plan_filters.plan_problem(dict(files_only, plans={}), "tray01")
    # exact wording of the other refusals (host first, then what to do), and a plan_result that is not a mapping
    assert plan_filters.plan_problem(full, "ghost") == (
        "ghost: the plan has no entry for this host (is it in group vllm_cluster?) - " + PCT.RUN_PLAN_FIRST + ".")
    older = copy.deepcopy(result)
    del older["plans"]["tray01"]["docker_host"], older["plans"]["tray01"]["model"]
    assert PCT.missing_keys(older["plans"]["tray01"]) == ["docker_host", "model"]
    with pytest.raises(ValueError) as err:
        PCT.require(older, "tray01")
    assert str(err.value) == ("tray01: the plan's entry for this host lacks docker_host, model - the plan role is "
                              "older than this role; update the collection.")
    with pytest.raises(ValueError, match="^tray01: plan_result is not set"):
        PCT.require(["not", "a", "mapping"], "tray01")


def test_preflight_ports_and_expectations_from_a_plan():
    result, hv = rendered(host_vars={0: {"kimi_k3_api_host": "10.0.0.11"}})
    full = result
    head = full["plans"]["tray01"]
    assert preflight_filters.preflight_ports(head) == [
        {"name": "api", "port": 8000, "bind": ["10.0.0.11"]},
        {"name": "master", "port": 29501, "bind": ["10.0.0.11"]},
        {"name": "dp_rpc", "port": 29550, "bind": ["10.0.0.11"]}]
    exp = E.expected_from_plan(full["plans"]["tray02"], full["cluster"], RECIPE)
    assert exp["role"] == "worker" and exp["gpus_per_node"] == 4 and exp["nnodes"] == 2
    assert exp["imex_channel"] is True and exp["memlock"] == -1 and exp["shm_size"] == "64g"
    assert (exp["min_driver"], exp["min_cuda"], exp["min_gpu_memory_mib"]) == ("580", "13.0", 280000)
    with pytest.raises(Exception, match="preflight_ports needs a host plan"):
        preflight_filters.preflight_ports({"internal_address": "x"})


def test_capacity_filters():
    fm = capacity_filters.FilterModule().filters()
    assert fm["capacity_values"](["32768", 8192, 8192]) == [8192, 32768]
    models = {"status": 200, "json": {"data": [{"id": "m", "max_model_len": 32768}]}}
    assert fm["capacity_values"]([131072, 8192, 32768], models) == [32768, 8192, 131072]
    assert fm["capacity_values"]([131072, 8192], {"status": -1, "msg": "refused"}) == [8192, 131072]
    d = fm["capacity_restart"]({"status": 200, "json": {"data": [{"max_model_len": 8192}]}}, "8192")
    assert d["restart"] is False and d["running"] == 8192
    assert fm["capacity_restart"](None, 8192)["restart"] is True
