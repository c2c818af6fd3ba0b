"""Several deployments in one inventory: replica fleets and prefill/decode (PD) behind vllm-router.

Golden plans for the recipe's GB300 PD cluster (TEP8 prefill on 2 trays + DEP16 decode on 4 trays + router) and a
2-replica fleet, and one refusal per impossible layout (each naming host, variable and fix)."""
import copy
import json
import shlex

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import contract as plan_contract
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import topology
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import vllm_flags
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data

RECIPE = recipe_data.load_recipe()
SNAPSHOTS = recipe_data.load_snapshots()
NV_IMAGE = "vllm/vllm-openai@sha256:" + "a" * 64
ROCM_IMAGE = "vllm/vllm-openai-rocm@sha256:" + "b" * 64
ROUTER_IMAGE = "registry.example/vllm-router@sha256:" + "c" * 64
ATTN = '{"use_prefill_query_quantization":true,"mla_prefill_backend":"flashinfer"}'
FEATURES = "--enable-auto-tool-choice --tool-call-parser kimi_k3 --reasoning-parser kimi_k3"
CLUSTER = {"kimi_k3_accelerator": "gb300", "kimi_k3_interconnect": "nvlink", "kimi_k3_socket_ifname": "eth9",
           "kimi_k3_image": NV_IMAGE, "kimi_k3_vllm_version": "0.28.0", "kimi_k3_allow_unpinned_remote_code": True,
           "kimi_k3_allow_unauthenticated_api": True}


def deployment(name, kind, n, first, **extra):
    """Nodes of one deployment: hosts <name>-<i> at 10.9.<first + i>.1, the first one its head."""
    out = []
    for i in range(n):
        v = dict(CLUSTER, kimi_k3_deployment=name, kimi_k3_deployment_kind=kind, ansible_host="10.9.%d.1" % (first + i))
        v.update(extra)
        out.append({"host": "%s-%d" % (name, i), "head": i == 0, "vars": v})
    return out


def router(**extra):
    v = {"ansible_host": "10.9.0.1", "kimi_k3_router_image": ROUTER_IMAGE}
    v.update(extra)
    return [{"host": "router", "head": False, "vars": v}]


def pd_cluster(prefill=None, decode=None, routers=None, snapshots=SNAPSHOTS):
    nodes = deployment("prefill-1", "prefill", 2, 1, **(prefill or {})) + \
        deployment("decode-1", "decode", 4, 3, **(decode or {}))
    return topology.build_cluster_plan(nodes, RECIPE, snapshots, router() if routers is None else routers)


def units(argv):
    positional, parts = vllm_flags.split_units(argv)
    return positional, sorted((o, tuple(v)) for o, v in parts)


def only(result):
    assert not result["ok"], "accepted"
    assert len(result["errors"]) == 1, result["errors"]
    return result["errors"][0]


# ----------------------------------------------------------------------------- golden plans


def test_golden_gb300_pd_cluster_tep8_prefill_dep16_decode_and_router():
    r = pd_cluster()
    assert r["ok"], r["errors"]
    prefill = shlex.split(
        "moonshotai/Kimi-K3 --trust-remote-code --gpu-memory-utilization 0.95 --enable-expert-parallel "
        "--tensor-parallel-size 8 --nnodes 2 --node-rank 0 --master-addr 10.9.1.1 --load-format fastsafetensors "
        "--max-model-len 1048576 --kv-cache-dtype fp8 --attention-config '%s' --enable-prefix-caching "
        "--no-disable-hybrid-kv-cache-manager --max-num-batched-tokens 16384 --no-enable-flashinfer-autotune "
        "--kv-transfer-config '{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_producer\","
        "\"kv_load_failure_policy\":\"fail\"}' %s --port 8001"
        % (ATTN, FEATURES))
    assert units(r["plans"]["prefill-1-0"]["vllm_args"]) == units(prefill)
    decode = shlex.split(
        "moonshotai/Kimi-K3 --trust-remote-code --gpu-memory-utilization 0.95 --enable-expert-parallel "
        "--data-parallel-hybrid-lb --data-parallel-size 16 --data-parallel-size-local 4 --data-parallel-address "
        "10.9.3.1 --data-parallel-start-rank 8 --load-format fastsafetensors --no-enable-flashinfer-autotune "
        "--max-model-len 1048576 --kv-cache-dtype fp8 --attention-config '%s' --no-disable-hybrid-kv-cache-manager "
        "--no-enable-prefix-caching --max-num-seqs 8 --max-num-batched-tokens 32 "
        "--compilation-config '{\"cudagraph_mode\":\"FULL_DECODE_ONLY\"}' --kv-transfer-config "
        "'{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_consumer\",\"kv_load_failure_policy\":\"fail\"}' "
        "--moe-backend deep_gemm_mega_moe %s --all2all-backend flashinfer_nvlink_one_sided --port 8002"
        % (ATTN, FEATURES))
    assert units(r["plans"]["decode-1-2"]["vllm_args"]) == units(decode)
    p_env, d_env = r["plans"]["prefill-1-1"]["env"], r["plans"]["decode-1-1"]["env"]
    assert p_env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "10.9.2.1" and p_env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5557"
    assert d_env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "10.9.4.1" and d_env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5558"
    for env in (p_env, d_env):
        assert env["UCX_TLS"] == "rc,cuda_copy" and env["VLLM_SSM_CONV_STATE_LAYOUT"] == "DS"
    assert p_env["VLLM_KIMI_K3_SHARD_SP_SHARED_EXPERT"] == "1" and p_env["UCX_NET_DEVICES"] == "all"
    rp = r["plans"]["router"]
    assert rp["router"]["argv"] == [
        "vllm-router", "--host", "0.0.0.0", "--port", "8000", "--policy", "round_robin", "--vllm-pd-disaggregation",
        "--prefill", "http://10.9.1.1:8001", "--decode", "http://10.9.3.1:8002", "--decode", "http://10.9.4.1:8002",
        "--decode", "http://10.9.5.1:8002", "--decode", "http://10.9.6.1:8002", "--intra-node-data-parallel-size",
        "1", "--prometheus-host", "0.0.0.0", "--prometheus-port", "29000"]
    assert rp["role"] == rp["deployment"] == rp["deployment_kind"] == "router"
    assert rp["start_phase"] == 2  # after the prefill follower (phase 1)
    assert rp["image"] == ROUTER_IMAGE and rp["container"]["name"] == "vllm-router"
    assert rp["container"]["network_mode"] == "host" and rp["router"]["mode"] == "pd"
    assert [(d["name"], d["kind"], d["head"]) for d in r["cluster"]["deployments"]] == [
        ("prefill-1", "prefill", "prefill-1-0"), ("decode-1", "decode", "decode-1-0")]
    assert r["cluster"]["router"] == {"host": "router", "api_url": "http://10.9.0.1:8000",
                                      "metrics_url": "http://10.9.0.1:29000/metrics"}
    assert r["cluster"]["endpoints"][0] == "http://10.9.0.1:8000" and len(r["cluster"]["endpoints"]) == 6
    for p in r["plans"].values():
        assert plan_contract.missing_keys(p) == []  # the router's plan too: every role's require() passes
        if p["role"] != "router":
            assert vllm_flags.check_argv(p["vllm_args"], SNAPSHOTS["0.28.0"]) == []


def test_golden_two_replica_fleet_behind_the_router():
    nodes = deployment("replica-1", "replica", 2, 1, kimi_k3_strategy="multi_node_tp") + \
        deployment("replica-2", "replica", 2, 3, kimi_k3_strategy="multi_node_tp")
    r = topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS, router(kimi_k3_router_policy="cache_aware"))
    assert r["ok"], r["errors"]
    assert r["plans"]["router"]["router"]["argv"] == [
        "vllm-router", "--host", "0.0.0.0", "--port", "8000", "--policy", "cache_aware", "--worker-urls",
        "http://10.9.1.1:8000", "http://10.9.3.1:8000", "--prometheus-host", "0.0.0.0", "--prometheus-port", "29000"]
    assert r["plans"]["router"]["secret_env"] == []  # --worker-urls forwards the client's Authorization header
    assert [p["deployment"] for p in r["plans"].values()] == ["replica-1"] * 2 + ["replica-2"] * 2 + ["router"]
    assert r["plans"]["replica-2-0"]["role"] == "head" and r["plans"]["replica-2-0"]["node_rank"] == 0
    assert r["plans"]["replica-2-1"]["container"]["labels"]["io.gpufleet.kimi_k3.deployment"] == "replica-2"
    # Each replica is today's TP8 pair: the same argv apart from its own head address.
    a, b = r["plans"]["replica-1-1"]["vllm_args"], r["plans"]["replica-2-1"]["vllm_args"]
    assert [x.replace("10.9.3.1", "10.9.1.1") for x in b] == a
    assert r["cluster"]["mode"] == "replicas" and r["cluster"]["order"][-1] == "router"


def test_pd_router_passes_the_backend_key_as_secret_env_never_argv():
    prefill = {"kimi_k3_api_key": "s3cret"}
    r = pd_cluster(prefill=prefill, decode=prefill, routers=router(kimi_k3_api_host="127.0.0.1", **prefill))
    assert r["ok"], r["errors"]
    rp = r["plans"]["router"]
    assert rp["secret_env"] == ["OPENAI_API_KEY"] and rp["router"]["secret_sources"] == {
        "OPENAI_API_KEY": "kimi_k3_api_key"}
    assert "s3cret" not in json.dumps(r["plans"]) and "--api-key" not in rp["router"]["argv"]


def test_nvl_only_env_and_megamoe_stay_on_gb_trays():
    b300 = {"kimi_k3_accelerator": "b300", "kimi_k3_interconnect": "rdma", "kimi_k3_gpus_per_node": 8}
    nodes = deployment("prefill-1", "prefill", 1, 1, kimi_k3_strategy="single_node_tp", **b300) + \
        deployment("decode-1", "decode", 2, 3, **b300)
    r = topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS, router())
    assert r["ok"], r["errors"]
    for host in ("prefill-1-0", "decode-1-0"):
        env = r["plans"][host]["env"]
        assert not set(env) & {"NCCL_CUMEM_ENABLE", "NCCL_MNNVL_ENABLE", "NCCL_NVLS_ENABLE", "UCX_NET_DEVICES"}
        assert env["UCX_TLS"] == "rc,cuda_copy"
        assert "--moe-backend" not in r["plans"][host]["vllm_args"]
    assert "--enable-expert-parallel" in r["plans"]["prefill-1-0"]["vllm_args"]  # TEP8 on one 8-GPU node


# ----------------------------------------------------------------------------- refusals


def test_decode_without_expert_parallelism_is_refused():
    e = only(pd_cluster(decode={"kimi_k3_strategy": "multi_node_tp"}))
    assert (e["host"], e["variable"]) == ("decode-1-0", "kimi_k3_strategy")
    assert "expert parallel" in e["message"] and "multi_node_dep" in e["fix"]


def test_megamoe_over_rdma_is_refused():
    e = only(pd_cluster(prefill={"kimi_k3_interconnect": "rdma"}, decode={"kimi_k3_interconnect": "rdma"}))
    assert e["variable"] == "kimi_k3_moe_backend" and "rdma" in e["message"] and "auto" in e["fix"]
    assert e["host"].startswith("decode-1")


def test_router_without_backends_is_refused():
    e = only(topology.build_cluster_plan([], RECIPE, SNAPSHOTS, router()))
    assert e["variable"] == "vllm_cluster" and "router" in e["message"]


def test_several_deployments_without_a_router_are_refused():
    e = only(pd_cluster(routers=[]))
    assert (e["host"], e["variable"]) == ("prefill-1-0", "vllm_router") and "vllm_router" in e["fix"]


def test_router_port_colliding_with_a_backend_on_the_same_node_is_refused():
    e = only(pd_cluster(routers=router(ansible_host="10.9.1.1", kimi_k3_router_port=8001)))
    assert (e["host"], e["variable"]) == ("router", "kimi_k3_router_port")
    assert "8001" in e["message"] and "prefill-1-0" in e["message"]


def test_api_port_on_the_nixl_side_channel_is_refused():
    e = only(pd_cluster(prefill={"kimi_k3_api_port": 5557}))
    assert e["variable"] == "kimi_k3_api_port" and "VLLM_NIXL_SIDE_CHANNEL_PORT" in e["message"]


def test_replicas_of_different_strategy_are_refused():
    nodes = deployment("replica-1", "replica", 2, 1, kimi_k3_strategy="multi_node_tp") + \
        deployment("replica-2", "replica", 2, 3, kimi_k3_strategy="multi_node_tep")
    e = only(topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS, router()))
    assert (e["host"], e["variable"]) == ("replica-2-0", "kimi_k3_strategy") and "replica-1" in e["fix"]


def test_pd_on_a_vllm_release_without_the_kv_transfer_flag_is_refused():
    old = copy.deepcopy(SNAPSHOTS)
    del old["0.28.0"]["flags"]["--kv-transfer-config"]
    e = only(pd_cluster(snapshots=old))
    assert (e["host"], e["variable"], e["message"], e["fix"]) == (
        "prefill-1-0", "kimi_k3_vllm_version",
        "vLLM 0.28.0 has no --kv-transfer-config, which prefill/decode deployments need.",
        "set kimi_k3_vllm_version to a release whose flag snapshot has --kv-transfer-config.")


def test_pd_on_a_vllm_release_without_a_flag_snapshot_is_refused_for_the_version_alone():
    e = only(pd_cluster(prefill={"kimi_k3_vllm_version": "0.0.1"}, decode={"kimi_k3_vllm_version": "0.0.1"}))
    assert (e["host"], e["variable"], e["message"]) == (
        "prefill-1-0", "kimi_k3_vllm_version", "vLLM 0.0.1 cannot run Kimi-K3 (needs >= 0.27.1).")


def test_pd_on_amd_is_refused_with_the_reason():
    amd = {"kimi_k3_accelerator": "mi355x", "kimi_k3_interconnect": "rdma", "kimi_k3_image": ROCM_IMAGE,
           "kimi_k3_gpus_per_node": 8}
    nodes = deployment("prefill-1", "prefill", 1, 1, kimi_k3_strategy="single_node_tp", **amd) + \
        deployment("decode-1", "decode", 2, 3, **amd)
    e = only(topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS, router()))
    assert (e["host"], e["variable"]) == ("prefill-1-0", "kimi_k3_deployment_kind")
    assert e["message"] == "prefill/decode deployments are not offered on amd nodes (mi355x): %s." % (
        RECIPE["pd_cluster"]["refused_vendor_reason"])
    assert e["fix"] == "run mi355x as replicas (kimi_k3_deployment_kind: replica) or as one single deployment."


def test_prefill_without_decode_is_refused():
    nodes = deployment("prefill-1", "prefill", 2, 1) + deployment("prefill-2", "prefill", 2, 3)
    e = only(topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS, router()))
    assert e["variable"] == "kimi_k3_deployment_kind" and "decode" in e["fix"]


def test_cluster_variable_differing_between_deployments_is_refused():
    e = only(pd_cluster(decode={"kimi_k3_max_model_len": 65536}))
    assert (e["host"], e["variable"]) == ("decode-1-0", "kimi_k3_max_model_len") and "cluster-wide" in e["message"]


def test_deployment_variable_differing_inside_a_deployment_names_the_deployment():
    nodes = deployment("prefill-1", "prefill", 2, 1) + deployment("decode-1", "decode", 4, 3)
    nodes[3]["vars"]["kimi_k3_api_port"] = 8100
    nodes[4]["vars"]["kimi_k3_api_port"] = 8101
    e = only(topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS, router()))
    assert e["variable"] == "kimi_k3_api_port" and "deployment decode-1" in e["message"]


def test_router_image_by_tag_is_refused_like_the_vllm_image():
    e = only(pd_cluster(routers=router(kimi_k3_router_image="vllm-router:0.1.17")))
    assert (e["host"], e["variable"]) == ("router", "kimi_k3_router_image") and "digest" in e["message"]


def test_router_host_that_is_also_a_vllm_node_is_refused():
    e = only(pd_cluster(routers=[{"host": "prefill-1-1", "head": False, "vars": {"ansible_host": "10.9.2.1"}}]))
    assert e["variable"] == "vllm_router" and "own inventory host" in e["fix"]


def test_pd_router_without_client_authentication_on_a_public_address_is_refused():
    key = {"kimi_k3_api_key": "s3cret", "kimi_k3_allow_unauthenticated_api": False}
    e = only(pd_cluster(prefill=key, decode=key, routers=router(kimi_k3_api_key="s3cret")))
    assert (e["host"], e["variable"]) == ("router", "kimi_k3_api_host") and "loopback" in e["fix"]


# ----------------------------------------------------------------------------- secrets across deployments


def replicas(first, second, routers=None):
    nodes = deployment("replica-1", "replica", 2, 1, kimi_k3_strategy="multi_node_tp", **first) + \
        deployment("replica-2", "replica", 2, 3, kimi_k3_strategy="multi_node_tp", **second)
    return topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS, router() if routers is None else routers)


@pytest.mark.parametrize("variable", ["kimi_k3_api_key", "kimi_k3_hf_token"])
def test_two_replicas_with_different_secrets_are_refused_without_the_values(variable):
    e = only(replicas({variable: "first-secret"}, {variable: "second-secret"}))
    assert (e["host"], e["variable"]) == ("replica-2-0", variable)
    assert e["message"] == ("differs between deployment replica-1 (set, value hidden) and deployment replica-2 (set, "
                            "value hidden); it is cluster-wide.")
    assert e["fix"] == "set %s once in group_vars/vllm_cluster (one vault value for every deployment)." % variable
    assert "first-secret" not in json.dumps(e) and "second-secret" not in json.dumps(e)


def test_a_secret_set_on_one_replica_only_is_refused():
    e = only(replicas({"kimi_k3_api_key": "k"}, {"kimi_k3_api_key": ""}))
    assert e["message"] == ("differs between deployment replica-1 (set, value hidden) and deployment replica-2 "
                            "(unset); it is cluster-wide.")


def test_equal_secrets_pass_and_surrounding_blanks_do_not_count():
    assert replicas({"kimi_k3_api_key": "k"}, {"kimi_k3_api_key": " k "})["ok"]


def test_a_pd_router_without_the_key_is_refused_naming_the_router_host():
    key = {"kimi_k3_api_key": "s3cret"}
    e = only(pd_cluster(prefill=key, decode=key, routers=router(kimi_k3_api_host="127.0.0.1")))
    assert (e["host"], e["variable"]) == ("router", "kimi_k3_api_key")
    assert e["message"].startswith("is not set on the router host, but the PD router calls the backends with it")
    assert e["fix"].startswith("give the router host the deployments' kimi_k3_api_key (group_vars/vllm_router.yml")


def test_a_router_with_another_key_is_refused_without_the_values():
    e = only(replicas({"kimi_k3_api_key": "k1"}, {"kimi_k3_api_key": "k1"}, router(kimi_k3_api_key="k2")))
    assert (e["host"], e["variable"]) == ("router", "kimi_k3_api_key")
    assert e["message"] == "differs between the router host (set, value hidden) and the deployments (set, value " \
                           "hidden)."
    assert "k2" not in e["message"] + e["fix"]


def test_each_deployment_needs_its_own_head():
    nodes = deployment("prefill-1", "prefill", 2, 1) + deployment("decode-1", "decode", 4, 3)
    nodes[2]["head"] = False
    e = only(topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS, router()))
    assert e["variable"] == "vllm_head" and "decode-1" in e["message"]


# ----------------------------------------------------------------------------- wrong YAML types never crash

VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 70000), st.text(max_size=12),
                   st.lists(st.integers(0, 3), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(),
                                                                            max_size=2))
NEW_VARS = ("kimi_k3_deployment", "kimi_k3_deployment_kind", "kimi_k3_router_image", "kimi_k3_router_port",
            "kimi_k3_router_prometheus_port", "kimi_k3_router_policy", "kimi_k3_router_container_name")


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(NEW_VARS), VALUES, st.booleans())
def test_any_value_of_a_new_variable_is_planned_or_refused_by_name(name, value, on_router):
    routers = router(**{name: value}) if on_router else router()
    nodes = deployment("prefill-1", "prefill", 2, 1) + deployment("decode-1", "decode", 4, 3)
    if not on_router:
        for node in nodes[2:]:
            node["vars"][name] = value
    r = topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS, routers)
    assert r["ok"] or all(e["host"] and e["variable"] and e["message"] and e["fix"] for e in r["errors"])
    named = ("vllm_router", "kimi_k3_deployment_kind", "kimi_k3_strategy", "vllm_head")
    assert r["ok"] or any(name in e["variable"] or e["variable"] in named for e in r["errors"])


# ----------------------------------------------------------------------------- the router's own parser


def _router_snapshot():
    import os
    path = os.path.join(os.path.dirname(recipe_data.__file__), "..", "..", "..", "data", "router_flags",
                        "vllm-router-0.1.17.json")
    with open(path) as handle:
        return json.load(handle)


def test_router_argv_is_accepted_by_the_vllm_router_flag_snapshot():
    snapshot = _router_snapshot()
    nodes = deployment("replica-1", "replica", 2, 1, kimi_k3_strategy="multi_node_tp") + \
        deployment("replica-2", "replica", 2, 3, kimi_k3_strategy="multi_node_tp")
    fleet = topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS, router())
    for r in (pd_cluster(), fleet):
        argv = r["plans"]["router"]["router"]["argv"]
        assert argv[0] == RECIPE["router"]["executable"]
        assert vllm_flags.check_argv(argv[1:], snapshot, model_positional=False) == []
    assert vllm_flags.check_argv(["--policy", "fastest"], snapshot, model_positional=False) != []


def test_recipe_router_policies_are_the_parsers_choices():
    assert RECIPE["router"]["policies"] == _router_snapshot()["flags"]["--policy"]["choices"]


def test_a_typo_in_a_router_variable_is_named_with_the_right_spelling():
    e = only(pd_cluster(routers=router(kimi_k3_router_prot=8100)))
    assert (e["host"], e["variable"]) == ("router", "kimi_k3_router_prot") and "kimi_k3_router_port" in e["fix"]


def test_a_prefill_deployment_on_a_strategy_of_another_kind_is_refused_with_the_kinds_strategies():
    errors = pd_cluster(prefill={"kimi_k3_strategy": "multi_node_dep"})["errors"]
    kind = [e for e in errors if e["message"].startswith("a prefill deployment")]
    assert [(e["host"], e["variable"], e["message"], e["fix"]) for e in kind] == [(
        "prefill-1-0", "kimi_k3_strategy",
        "a prefill deployment runs multi_node_tep or single_node_tp (expert parallel), not multi_node_dep.",
        "set kimi_k3_strategy: multi_node_tep for deployment prefill-1 (or drop it: that is the default).")]


def test_pd_names_every_flag_the_vllm_release_lacks():
    old = copy.deepcopy(SNAPSHOTS)
    for flag in RECIPE["pd_cluster"]["required_flags"]:
        del old["0.28.0"]["flags"][flag]
    e = only(pd_cluster(snapshots=old))
    flags = ", ".join(RECIPE["pd_cluster"]["required_flags"])
    assert (e["message"], e["fix"]) == (
        "vLLM 0.28.0 has no %s, which prefill/decode deployments need." % flags,
        "set kimi_k3_vllm_version to a release whose flag snapshot has %s." % flags)
