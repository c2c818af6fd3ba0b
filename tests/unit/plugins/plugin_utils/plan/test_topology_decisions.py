"""Exact-value tests of the plan's decisions that the rule table does not pin (found by mutation testing):
sizes, load balancing, ordering, start phases, environment, container, values at their boundaries, output."""
import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import render as plan_render
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import variables as plan_variables
from tests.unit.plugins.plugin_utils.plan.test_topology_rules import AMD, nodes, plan, with_, without

B300 = with_(kimi_k3_accelerator="b300", kimi_k3_strategy="single_node_tp")
GB4 = dict(count=4)


def one(r):
    assert len(r["errors"]) == 1, [plan_render.format_problem(e) for e in r["errors"]]
    return r["errors"][0]


def test_strategy_unset():
    e = one(plan(nodes(without("kimi_k3_strategy"))))
    assert (e["host"], e["variable"], e["message"]) == ("tray01", "kimi_k3_strategy", "is not set.")
    assert "multi_node_dep" in e["fix"]


def test_auto_tool_choice_needs_a_parser():
    r = plan(nodes(with_(kimi_k3_features={"tool_calling": False}, kimi_k3_extra_args=["--enable-auto-tool-choice"])))
    e = one(r)
    assert e["variable"] == "kimi_k3_extra_args" and "requires --tool-call-parser" in e["message"]
    assert "--tool-call-parser kimi_k3" in e["fix"]


def test_megamoe_requires_expert_parallelism():
    e = one(plan(nodes(with_(kimi_k3_moe_backend="deep_gemm_mega_moe"))))
    assert e["variable"] == "kimi_k3_moe_backend" and "requires expert parallelism" in e["message"]


def test_hybrid_lb_with_one_local_rank():
    e = one(plan(nodes(with_(kimi_k3_strategy="multi_node_dep", kimi_k3_tensor_parallel_size=4,
                             kimi_k3_data_parallel_size=4), **GB4)))
    assert e["variable"] == "kimi_k3_dp_lb_mode" and "turns into external LB" in e["message"]
    assert "external" in e["fix"]


def test_external_lb_needs_one_rank_per_node():
    e = one(plan(nodes(with_(kimi_k3_strategy="multi_node_tp_dp", kimi_k3_dp_lb_mode="external",
                             kimi_k3_tensor_parallel_size=2, kimi_k3_data_parallel_size=8), **GB4)))
    assert e["variable"] == "kimi_k3_dp_lb_mode" and "this layout has 2 per node" in e["message"]


def test_external_lb_one_rank_per_node_renders_ranks():
    r = plan(nodes(with_(kimi_k3_strategy="multi_node_tp_dp", kimi_k3_dp_lb_mode="external",
                         kimi_k3_model="example-org/small-moe"), **GB4))  # K3 does not fit one tray
    assert r["ok"], r["errors"]
    args = r["plans"]["tray03"]["vllm_args"]
    assert args[args.index("--data-parallel-rank") + 1] == "2" and "--data-parallel-start-rank" not in args
    assert r["plans"]["tray03"]["serves_http"] and r["plans"]["tray03"]["start_phase"] == 0


def test_dp_must_divide_over_the_nodes():
    e = one(plan(nodes(with_(kimi_k3_strategy="multi_node_dep", kimi_k3_tensor_parallel_size=8,
                             kimi_k3_data_parallel_size=2), **GB4)))
    assert e["variable"] == "kimi_k3_data_parallel_size" and e["message"] == "DP 2 does not divide over 4 nodes."


def test_single_node_tp_is_tensor_parallel_only():
    e = one(plan(nodes(with_(B300, kimi_k3_tensor_parallel_size=4, kimi_k3_pipeline_parallel_size=2), count=1)))
    assert e["variable"] == "kimi_k3_strategy" and "tensor parallelism only" in e["message"]


def test_feature_value_not_boolean():
    e = one(plan(nodes(with_(kimi_k3_features={"reasoning": "maybe"}))))
    assert e["variable"] == "kimi_k3_features" and e["message"] == "reasoning: 'maybe' is not a boolean."


def test_features_switch_flags():
    args = plan(nodes(with_(kimi_k3_features={"reasoning": "no", "text_only": True})))["plans"]["tray01"]["vllm_args"]
    assert "--reasoning-parser" not in args and "--language-model-only" in args and "--tool-call-parser" in args


def test_ansible_host_is_checked_when_it_is_the_address():
    e = one(plan(nodes(host={1: {"ansible_host": "10.0.0.12/24"}})))
    assert (e["host"], e["variable"]) == ("tray02", "ansible_host") and "kimi_k3_internal_address on tray02" in e["fix"]
    ok = plan(nodes(host={1: {"ansible_host": "10.0.0.12/24", "kimi_k3_internal_address": "10.1.0.12"}}))
    assert ok["ok"] and ok["plans"]["tray02"]["internal_address"] == "10.1.0.12"


def test_explicit_ranks_order_the_nodes():
    r = plan(nodes(host={0: {"kimi_k3_node_rank": 0}, 1: {"kimi_k3_node_rank": 2}, 2: {"kimi_k3_node_rank": 1}},
                   count=3, cluster=with_(kimi_k3_strategy="multi_node_tep", kimi_k3_accelerator="b300",
                                          kimi_k3_interconnect="rdma")))
    assert r["ok"], r["errors"]
    assert r["cluster"]["order"] == ["tray01", "tray03", "tray02"]
    args = r["plans"]["tray03"]["vllm_args"]
    assert args[args.index("--node-rank") + 1] == "1" and r["plans"]["tray02"]["node_rank"] == 2


def test_rank_gap_names_every_node():
    e = one(plan(nodes(host={0: {"kimi_k3_node_rank": 0}, 1: {"kimi_k3_node_rank": 2}})))
    assert e["host"] == "tray01, tray02" and e["message"] == "ranks [0, 2] are not 0..1."


@pytest.mark.parametrize("port,ok", [(0, False), (1, True), (65535, True), (65536, False)])
def test_port_boundaries(port, ok):
    r = plan(nodes(with_(kimi_k3_dp_rpc_port=port)))
    assert r["ok"] is ok


@pytest.mark.parametrize("value,ok", [(True, True), (1, True), (0, True), (2, False), ("Yes", True), ("", False),
                                      ("off", True), (None, True), ([True], False)])
def test_boolean_values(value, ok):
    assert plan(nodes(with_(kimi_k3_nccl_nvls_enable=value)))["ok"] is ok


def test_accelerator_is_case_insensitive_and_secret_formats_hide_the_value():
    assert plan(nodes(with_(kimi_k3_accelerator="GB300")))["ok"]
    decl = dict(plan_variables.declared("kimi_k3_api_key"), format="commit")
    _v, (message, _fix) = plan_variables.check_value(decl, "hunter2", {}, {})
    assert "hunter2" not in message and message.startswith("the value is not")


def test_image_checks():
    e = one(plan(nodes(with_(kimi_k3_image="vllm/vllm-openai@sha256:abc"))))
    assert e["variable"] == "kimi_k3_image" and "malformed digest" in e["message"]
    e = one(plan(nodes(with_(AMD, kimi_k3_image="vllm/vllm-openai@sha256:" + "a" * 64))))
    assert "is not a ROCm image but the nodes are AMD" in e["message"]
    r = plan(nodes(with_(kimi_k3_image="vllm/vllm-openai:latest", kimi_k3_allow_unpinned_image=True)))
    assert r["ok"] and r["plans"]["tray01"]["image"] == "vllm/vllm-openai:latest"
    assert one(plan(nodes(with_(kimi_k3_image="Vllm/VLLM-OPENAI-ROCM@sha256:" + "a" * 64))))["variable"] == "kimi_k3_image"


def test_missing_socket_ifname_is_a_warning_on_several_nodes_only():
    r = plan(nodes(without("kimi_k3_socket_ifname")))
    # kimi_k3_tls_certfile: the API key over plain http (plugin_utils.plan.transport)
    assert r["ok"] and [w["variable"] for w in r["warnings"]] == ["kimi_k3_socket_ifname", "kimi_k3_tls_certfile"]
    assert "GLOO_SOCKET_IFNAME" not in r["plans"]["tray01"]["env"]
    r = plan(nodes(without("kimi_k3_socket_ifname", base=B300), count=1))
    assert r["ok"] and [w["variable"] for w in r["warnings"]] == ["kimi_k3_tls_certfile"]


def test_start_phases():
    tp = plan(nodes())["plans"]
    assert (tp["tray01"]["start_phase"], tp["tray02"]["start_phase"]) == (0, 1)
    dep = plan(nodes(AMD))["plans"]
    assert (dep["tray01"]["start_phase"], dep["tray02"]["start_phase"]) == (0, 0)
    internal = plan(nodes(with_(AMD, kimi_k3_dp_lb_mode="internal")))["plans"]["tray02"]
    assert internal["start_phase"] == 1 and "--headless" in internal["vllm_args"] and not internal["serves_http"]


def test_environment_switches():
    env = plan(nodes(with_(kimi_k3_rust_frontend=False, kimi_k3_v2_model_runner="off",
                           kimi_k3_nccl_nvls_enable=False)))["plans"]["tray01"]["env"]
    assert (env["VLLM_USE_RUST_FRONTEND"], env["VLLM_USE_V2_MODEL_RUNNER"], env["NCCL_NVLS_ENABLE"]) == ("0", "0", "0")
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "bond0" and env["NCCL_MNNVL_ENABLE"] == "1"
    env = plan(nodes(with_(kimi_k3_accelerator="b300", kimi_k3_interconnect="rdma")))["plans"]["tray01"]["env"]
    assert "NCCL_MNNVL_ENABLE" not in env and env["VLLM_ALLREDUCE_USE_FLASHINFER"] == "1"
    amd = plan(nodes(AMD))["plans"]["tray01"]["env"]
    assert amd["VLLM_ROCM_USE_AITER_MOE_SITUV2_A8W4"] == "1" and "VLLM_USE_RUST_FRONTEND" not in amd


def test_container_parameters():
    p = plan(nodes(with_(kimi_k3_memlock=8388608, kimi_k3_shm_size="1g", kimi_k3_container_name="k3",
                         kimi_k3_model_cache_dir="/srv/hf", kimi_k3_restart_policy="unless-stopped")))["plans"]
    c = p["tray02"]["container"]
    assert c["ulimits"][0] == "memlock:8388608:8388608" and c["shm_size"] == "1g" and c["name"] == "k3"
    assert c["volumes"] == ["/srv/hf:/root/.cache/huggingface"] and c["restart_policy"] == "unless-stopped"
    assert c["labels"]["io.gpufleet.kimi_k3.role"] == "worker" and c["labels"]["io.gpufleet.kimi_k3.node_rank"] == "1"
    assert any("imex-channels" in d for d in c["devices"]) and "/dev/infiniband:/dev/infiniband:rwm" not in c["devices"]
    d = plan(nodes())["plans"]["tray01"]["container"]
    assert d["ulimits"][0] == "memlock:-1:-1" and d["shm_size"] == "64g" and d["name"] == "vllm-kimi-k3"
    assert d["restart_policy"] == "no" and d["labels"]["io.gpufleet.kimi_k3.role"] == "head"
    amd = plan(nodes(AMD))["plans"]["tray01"]["container"]
    assert "/dev/infiniband:/dev/infiniband:rwm" in amd["devices"] and not any("imex" in x for x in amd["devices"])
    single = plan(nodes(with_(B300, kimi_k3_interconnect="rdma"), count=1))["plans"]["tray01"]["container"]
    assert single["devices"] == []


def test_docker_run_command_exact_lines():
    p = plan(nodes(AMD))["plans"]["tray02"]
    script = plan_render.docker_run_command(p)
    lines = script.splitlines()
    assert lines[0] == "#!/bin/sh"
    assert lines[1] == "# tray02 (worker, node rank 1): equivalent of the planned container."
    assert lines[2] == "# Secrets are not written here: export VLLM_API_KEY before running."
    body = script.split("\n", 3)[3]
    for chunk in ("docker run --detach", "--name vllm-kimi-k3", "--network host", "--ipc host",
                  "--ulimit memlock=-1:-1", "--ulimit stack=67108864:67108864", "--device /dev/kfd:/dev/kfd:rwm",
                  "--group-add video", "--security-opt seccomp=unconfined", "--cap-add IPC_LOCK",
                  "--volume /data/hf-cache:/root/.cache/huggingface", "--restart no", "--env VLLM_API_KEY \\",
                  "--all2all-backend mori_high_throughput", "--data-parallel-start-rank 8"):
        assert chunk in body, chunk
    assert "--shm-size" not in body and "--gpus" not in body
    nv = plan_render.docker_run_command(plan(nodes())["plans"]["tray01"])
    assert "--gpus all" in nv and "--device /dev/nvidia-caps-imex-channels/channel0" in nv
    private = dict(p, container=dict(p["container"], ipc_mode="private"), secret_env=[])
    text = plan_render.docker_run_command(private)
    assert "--shm-size 64g" in text and "Secrets are not written" not in text


def test_summary_table_exact():
    r = plan(nodes(AMD))
    lines = plan_render.summary_table(r).splitlines()
    assert lines[0] == ("Kimi-K3 plan: multi_node_dep on 2 x mi355x (16 GPUs), TP 1 x PP 1 x DP 16, LB hybrid, "
                        "vLLM 0.28.0")
    assert lines[1] == "image " + AMD["kimi_k3_image"] and lines[2] == "API access: API key required (kimi_k3_api_key)"
    assert lines[3].split() == ["host", "rank", "role", "address", "http", "args"]
    assert lines[4].split() == ["tray01", "0", "head", "10.0.0.11", "http://10.0.0.11:8000",
                                str(len(r["plans"]["tray01"]["vllm_args"]) - 1)]
    assert lines[5].split()[:3] == ["tray02", "1", "worker"]
    warnings = ["warning: " + plan_render.format_problem(w) for w in r["warnings"]]
    assert lines[6].startswith("capacity main: weights 1,560 GB")
    assert lines[-len(warnings) - 1].startswith("timeouts main: ") and lines[-len(warnings):] == warnings
    refused = plan_render.summary_table(plan(nodes(with_(kimi_k3_variant="x"))))
    assert refused.splitlines()[0] == "Plan refused: 1 problem(s)"
    assert refused.splitlines()[1].startswith("  - tray01: kimi_k3_variant: ")
    warned = plan_render.summary_table(plan(nodes(without("kimi_k3_socket_ifname"))))
    assert warned.splitlines()[-2].startswith("warning: tray01: kimi_k3_socket_ifname: is not set")
    tp = plan_render.summary_table(plan(nodes())).splitlines()
    assert "LB" not in tp[0] and tp[5].split()[4] == "headless"


def test_plan_hash_follows_what_the_container_runs():
    a = plan(nodes())["plans"]["tray01"]
    b = plan(nodes(with_(kimi_k3_max_model_len=4096)))["plans"]["tray01"]
    same = plan(nodes(host={0: {"kimi_k3_docker_host": "tcp://10.0.0.11:2376"}}))["plans"]["tray01"]
    h = "io.gpufleet.kimi_k3.plan_hash"
    assert len(a["container"]["labels"][h]) == 16 and a["container"]["labels"][h] != b["container"]["labels"][h]
    assert a["container"]["labels"][h] == same["container"]["labels"][h] == plan_render.plan_hash(a)


def test_no_nodes():
    r = plan([])
    assert not r["ok"] and r["errors"][0]["variable"] == "vllm_cluster" and "vllm_head" in r["errors"][0]["fix"]


def test_served_name_and_model_of_variant():
    p = plan(nodes(with_(kimi_k3_variant="nvfp4", kimi_k3_served_model_name="k3")))["plans"]["tray01"]
    assert p["model"] == "RedHatAI/Kimi-K3-NVFP4" and p["vllm_args"][0] == "RedHatAI/Kimi-K3-NVFP4"
    assert p["served_model_name"] == "k3" and p["vllm_args"][p["vllm_args"].index("--served-model-name") + 1] == "k3"
    p = plan(nodes(with_(kimi_k3_model="/models/k3")))["plans"]["tray01"]
    assert p["model"] == p["served_model_name"] == "/models/k3"
