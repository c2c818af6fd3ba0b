"""Renderer and validation tests: golden recipe commands and one test per validation rule."""
import copy
import json
import shlex

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import topology
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import vllm_flags
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data

RECIPE = recipe_data.load_recipe()
SNAPSHOTS = recipe_data.load_snapshots()
NV_IMAGE = "vllm/vllm-openai@sha256:" + "a" * 64
ROCM_IMAGE = "vllm/vllm-openai-rocm@sha256:" + "b" * 64
ATTN = '{"use_prefill_query_quantization":true,"mla_prefill_backend":"flashinfer"}'
BLACKWELL_ARGS = ("--load-format fastsafetensors --no-enable-flashinfer-autotune --max-model-len 1048576 "
                  "--kv-cache-dtype fp8 --attention-config '%s' --enable-prefix-caching" % ATTN)
FEATURES = "--enable-auto-tool-choice --tool-call-parser kimi_k3 --reasoning-parser kimi_k3"
BLACKWELL_ENV = {"VLLM_ALLREDUCE_USE_FLASHINFER": "1", "VLLM_ENGINE_READY_TIMEOUT_S": "3600",
                 "VLLM_USE_V2_MODEL_RUNNER": "1", "VLLM_USE_RUST_FRONTEND": "1"}
IFACE_ENV = {"GLOO_SOCKET_IFNAME": "eth9", "NCCL_SOCKET_IFNAME": "eth9"}
MNNVL_ENV = {"NCCL_MNNVL_ENABLE": "1", "NCCL_CUMEM_ENABLE": "1", "NCCL_NVLS_ENABLE": "1"}
# TP x DP holds one copy of the weights per node (tray): Kimi-K3 does not fit one (test_plan_sizing); layout
# tests of TP x DP serve a model the collection does not size (a warning, no refusal).
SMALL_MODEL = "example-org/small-moe"


def make_nodes(n, host_vars=None, **cluster):
    cluster = dict(cluster)
    cluster.setdefault("kimi_k3_image", NV_IMAGE)
    cluster.setdefault("kimi_k3_vllm_version", "0.28.0")
    # The golden commands are the recipe's, which pins no revision (revision rules: test_topology_rules.py).
    if "kimi_k3_model_revision" not in cluster:
        cluster.setdefault("kimi_k3_allow_unpinned_remote_code", True)
    # API exposure without a key is its own rule (test_topology_rules.py).
    if "kimi_k3_api_key" not in cluster:
        cluster.setdefault("kimi_k3_allow_unauthenticated_api", True)
    nodes = []
    for i in range(n):
        v = dict(cluster)
        v["ansible_host"] = "10.9.0.%d" % (i + 1)
        v.update((host_vars or {}).get(i, {}))
        nodes.append({"host": "node%d" % i, "head": i == 0, "vars": v})
    return nodes


def plan(nodes):
    return topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS)


def units(argv):
    """Order-free view of an argv: (model, sorted (option, values) pairs)."""
    positional, parts = vllm_flags.split_units(argv)
    return positional, sorted((o, tuple(v)) for o, v in parts)


def recipe_cmd(text):
    return shlex.split(text)


def problems(result, variable=None):
    errs = result["errors"]
    return [e for e in errs if variable is None or e["variable"] == variable]


# ----------------------------------------------------------------------------- golden tests


def test_golden_gb300_dep16_four_trays():
    r = plan(make_nodes(4, kimi_k3_accelerator="gb300", kimi_k3_strategy="multi_node_dep",
                        kimi_k3_interconnect="nvlink", kimi_k3_socket_ifname="eth9"))
    assert r["ok"], r["errors"]
    head = ("moonshotai/Kimi-K3 --trust-remote-code --gpu-memory-utilization 0.95 --enable-expert-parallel "
            "--data-parallel-hybrid-lb --data-parallel-size 16 --data-parallel-size-local 4 "
            "--data-parallel-address 10.9.0.1 " + BLACKWELL_ARGS + " --moe-backend deep_gemm_mega_moe " + FEATURES
            + " --all2all-backend flashinfer_nvlink_one_sided")
    assert units(r["plans"]["node0"]["vllm_args"]) == units(recipe_cmd(head))
    for i in (1, 2, 3):
        want = recipe_cmd(head) + ["--data-parallel-start-rank", str(i * 4)]
        assert units(r["plans"]["node%d" % i]["vllm_args"]) == units(want)
        assert "--headless" not in r["plans"]["node%d" % i]["vllm_args"]
        assert r["plans"]["node%d" % i]["serves_http"] is True  # hybrid LB: every node serves HTTP
    expected_env = dict(IFACE_ENV, **BLACKWELL_ENV)
    expected_env.update(MNNVL_ENV, VLLM_HOST_IP="10.9.0.1")
    assert r["plans"]["node0"]["env"] == expected_env
    assert r["plans"]["node3"]["env"]["VLLM_HOST_IP"] == "10.9.0.4"  # each node its own address
    assert r["cluster"]["endpoints"] == ["http://10.9.0.%d:8000" % i for i in (1, 2, 3, 4)]


def test_golden_gb300_tp8_two_trays():
    r = plan(make_nodes(2, kimi_k3_accelerator="gb300", kimi_k3_strategy="multi_node_tp",
                        kimi_k3_interconnect="nvlink", kimi_k3_socket_ifname="eth9"))
    assert r["ok"], r["errors"]
    base = ("moonshotai/Kimi-K3 --trust-remote-code --gpu-memory-utilization 0.95 --tensor-parallel-size 8 "
            "--nnodes 2 --node-rank {rank} --master-addr 10.9.0.1 " + BLACKWELL_ARGS + " " + FEATURES)
    assert units(r["plans"]["node0"]["vllm_args"]) == units(recipe_cmd(base.replace("{rank}", "0")))
    assert units(r["plans"]["node1"]["vllm_args"]) == units(recipe_cmd(base.replace("{rank}", "1")) + ["--headless"])
    assert r["plans"]["node1"]["serves_http"] is False and r["plans"]["node1"]["api_url"] is None
    # No expert parallelism: no all2all backend, no MegaMoE.
    assert "--all2all-backend" not in r["plans"]["node0"]["vllm_args"]
    assert "--moe-backend" not in r["plans"]["node0"]["vllm_args"]
    # MNNVL: IMEX channel in the container, GPU device request.
    c = r["plans"]["node1"]["container"]
    assert any(d.startswith("/dev/nvidia-caps-imex-channels/channel0") for d in c["devices"])
    assert c["device_requests"] == [{"driver": "nvidia", "count": -1, "capabilities": [["gpu"]]}]


def test_golden_mi355x_tp8_single_node():
    r = plan(make_nodes(1, kimi_k3_accelerator="mi355x", kimi_k3_strategy="single_node_tp",
                        kimi_k3_image=ROCM_IMAGE))
    assert r["ok"], r["errors"]
    cmd = ("moonshotai/Kimi-K3 --trust-remote-code --tensor-parallel-size 8 --load-format auto "
           "--gpu-memory-utilization 0.95 --mm-encoder-tp-mode data --max-num-seqs 128 --max-num-batched-tokens 4096 "
           "--compilation-config '{\"cudagraph_mode\":\"FULL_DECODE_ONLY\",\"custom_ops\":[\"+fused_rms_norm_gated\"]}' "
           + FEATURES)
    p = r["plans"]["node0"]
    assert units(p["vllm_args"]) == units(recipe_cmd(cmd))
    assert p["env"] == {"VLLM_ROCM_USE_AITER": "1", "SAFETENSORS_FAST_GPU": "1",
                        "VLLM_ROCM_USE_AITER_MOE_SITUV2_A8W4": "1", "AITER_BF16_FP8_MOE_BOUND": "0",
                        "VLLM_USE_BREAKABLE_CUDAGRAPH": "0", "VLLM_ENGINE_READY_TIMEOUT_S": "3600"}
    c = p["container"]
    assert c["device_requests"] == []
    assert "/dev/kfd:/dev/kfd:rwm" in c["devices"] and "/dev/dri:/dev/dri:rwm" in c["devices"]
    assert c["groups"] == ["video"] and c["security_opts"] == ["seccomp=unconfined"]
    # The duplicated --reasoning-parser (AMD override + feature) collapses to one occurrence.
    assert p["vllm_args"].count("--reasoning-parser") == 1


def test_golden_b200_tp8_pp2():
    r = plan(make_nodes(2, kimi_k3_accelerator="b200", kimi_k3_strategy="multi_node_tp_pp",
                        kimi_k3_interconnect="rdma", kimi_k3_socket_ifname="eth9"))
    assert r["ok"], r["errors"]
    base = ("moonshotai/Kimi-K3 --trust-remote-code --gpu-memory-utilization 0.90 --tensor-parallel-size 8 "
            "--pipeline-parallel-size 2 --nnodes 2 --node-rank {rank} --master-addr 10.9.0.1 "
            "--max-num-batched-tokens 8192 " + BLACKWELL_ARGS + " " + FEATURES)
    assert units(r["plans"]["node0"]["vllm_args"]) == units(recipe_cmd(base.replace("{rank}", "0")))
    assert units(r["plans"]["node1"]["vllm_args"]) == units(recipe_cmd(base.replace("{rank}", "1")) + ["--headless"])
    env = dict(IFACE_ENV, **BLACKWELL_ENV)
    env.update({"NCCL_CUMEM_ENABLE": "1", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "1800", "VLLM_HOST_IP": "10.9.0.1"})
    assert r["plans"]["node0"]["env"] == env
    assert "/dev/infiniband:/dev/infiniband:rwm" in r["plans"]["node1"]["container"]["devices"]


@pytest.mark.parametrize("version,name,value", [
    ("0.27.1", "AITER_SITUV2_A8W4", "1"),
    ("0.28.0", "VLLM_ROCM_USE_AITER_MOE_SITUV2_A8W4", "1"),
    ("0.33.0", "VLLM_ROCM_USE_AITER_MOE_SITUV2", "a8w4"),
])
def test_amd_situ_variable_follows_vllm_version(version, name, value):
    r = plan(make_nodes(1, kimi_k3_accelerator="mi355x", kimi_k3_strategy="single_node_tp",
                        kimi_k3_image=ROCM_IMAGE, kimi_k3_vllm_version=version))
    assert r["ok"], r["errors"]
    env = r["plans"]["node0"]["env"]
    assert env[name] == value
    others = {"AITER_SITUV2_A8W4", "VLLM_ROCM_USE_AITER_MOE_SITUV2_A8W4", "VLLM_ROCM_USE_AITER_MOE_SITUV2"} - {name}
    assert not others & set(env)


def test_tp_dp_internal_lb_followers_headless():
    r = plan(make_nodes(4, kimi_k3_accelerator="gb300", kimi_k3_strategy="multi_node_tp_dp",
                        kimi_k3_interconnect="nvlink", kimi_k3_model=SMALL_MODEL))
    assert r["ok"], r["errors"]
    f = r["plans"]["node2"]["vllm_args"]
    assert vllm_flags.flag_value(f, "--data-parallel-start-rank") == ["2"]
    assert "--headless" in f and vllm_flags.flag_value(f, "--tensor-parallel-size") == ["4"]
    assert vllm_flags.flag_value(f, "--data-parallel-size") == ["4"]
    assert r["cluster"]["endpoints"] == ["http://10.9.0.1:8000"]


def test_external_lb_every_node_has_its_rank_and_endpoint():
    r = plan(make_nodes(2, kimi_k3_accelerator="h200", kimi_k3_strategy="multi_node_tp_dp",
                        kimi_k3_interconnect="rdma", kimi_k3_dp_lb_mode="external", kimi_k3_model=SMALL_MODEL))
    assert r["ok"], r["errors"]
    assert vllm_flags.flag_value(r["plans"]["node1"]["vllm_args"], "--data-parallel-rank") == ["1"]
    assert len(r["cluster"]["endpoints"]) == 2


def test_user_overrides_win_and_sim_addresses_render_host():
    nodes = make_nodes(2, kimi_k3_accelerator="gb300", kimi_k3_strategy="multi_node_tp",
                       kimi_k3_interconnect="nvlink", kimi_k3_max_model_len=262144, kimi_k3_api_port=8100,
                       kimi_k3_v2_model_runner=False, kimi_k3_extra_args=["--max-num-seqs", "64"],
                       host_vars={0: {"kimi_k3_api_host": "127.0.0.11"}})
    r = plan(nodes)
    assert r["ok"], r["errors"]
    a = r["plans"]["node0"]["vllm_args"]
    assert vllm_flags.flag_value(a, "--max-model-len") == ["262144"]
    assert a.count("--max-model-len") == 1
    assert vllm_flags.flag_value(a, "--host") == ["127.0.0.11"]
    assert vllm_flags.flag_value(a, "--port") == ["8100"]
    assert vllm_flags.flag_value(a, "--max-num-seqs") == ["64"]
    assert r["plans"]["node0"]["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    assert r["plans"]["node0"]["api_url"] == "http://127.0.0.11:8100"


def test_secrets_never_enter_plan_or_script():
    nodes = make_nodes(2, kimi_k3_accelerator="gb300", kimi_k3_strategy="multi_node_tp",
                       kimi_k3_interconnect="nvlink", kimi_k3_api_key="sk-super-secret-123",
                       kimi_k3_hf_token="hf_secret_token_456")
    r = plan(nodes)
    assert r["ok"], r["errors"]
    for host, p in r["plans"].items():
        text = json.dumps(p) + topology.docker_run_command(p)
        assert "sk-super-secret-123" not in text and "hf_secret_token_456" not in text
        assert p["secret_env"] == ["VLLM_API_KEY", "HF_TOKEN"]
        assert "--env VLLM_API_KEY" in topology.docker_run_command(p)


def test_docker_run_script_is_valid_shell_with_same_argv():
    r = plan(make_nodes(1, kimi_k3_accelerator="mi355x", kimi_k3_strategy="single_node_tp",
                        kimi_k3_image=ROCM_IMAGE))
    p = r["plans"]["node0"]
    script = topology.docker_run_command(p)
    body = script.split("\n", 2)[2].replace("\\\n", " ")
    argv = shlex.split(body)
    i = argv.index(p["image"])
    assert argv[i + 1:] == p["vllm_args"]
    assert "--privileged" not in argv


# ----------------------------------------------------------------------------- validation rules


def test_rule_image_without_digest_refused_unless_opted_out():
    nodes = make_nodes(1, kimi_k3_accelerator="b300", kimi_k3_strategy="single_node_tp",
                       kimi_k3_image="vllm/vllm-openai:kimi-k3")
    r = plan(nodes)
    assert not r["ok"] and r["plans"] == {}
    (e,) = problems(r, "kimi_k3_image")
    assert "not pinned by digest" in e["message"] and "kimi_k3_allow_unpinned_image" in e["fix"]
    for n in nodes:
        n["vars"]["kimi_k3_allow_unpinned_image"] = True
    assert plan(nodes)["ok"]


def test_rule_malformed_digest():
    r = plan(make_nodes(1, kimi_k3_accelerator="b300", kimi_k3_strategy="single_node_tp",
                        kimi_k3_image="vllm/vllm-openai@sha256:abc"))
    assert "malformed digest" in problems(r, "kimi_k3_image")[0]["message"]


def test_rule_mega_moe_over_rdma():
    r = plan(make_nodes(4, kimi_k3_accelerator="gb300", kimi_k3_strategy="multi_node_dep",
                        kimi_k3_interconnect="rdma"))
    assert not r["ok"]
    msgs = [e["message"] for e in problems(r, "kimi_k3_moe_backend")]
    assert any("cross-node rdma" in m for m in msgs)
    # The documented fix works: keep the MoE backend on auto over RDMA.
    nodes = make_nodes(4, kimi_k3_accelerator="gb300", kimi_k3_strategy="multi_node_dep",
                       kimi_k3_interconnect="rdma", kimi_k3_moe_backend="auto")
    assert plan(nodes)["ok"]


def test_rule_mega_moe_without_expert_parallel():
    r = plan(make_nodes(2, kimi_k3_accelerator="gb300", kimi_k3_strategy="multi_node_tp",
                        kimi_k3_interconnect="nvlink", kimi_k3_moe_backend="deep_gemm_mega_moe"))
    assert any("requires expert parallelism" in e["message"] for e in problems(r, "kimi_k3_moe_backend"))


def test_rule_sizes_must_multiply_to_gpus():
    r = plan(make_nodes(2, kimi_k3_accelerator="gb300", kimi_k3_strategy="multi_node_tp",
                        kimi_k3_interconnect="nvlink", kimi_k3_tensor_parallel_size=4))
    (e,) = [e for e in r["errors"] if "TP 4 x PP 1 x DP 1 = 4" in e["message"]]
    assert "8 GPUs" in e["message"]


def test_rule_gpus_per_node_beyond_hardware():
    r = plan(make_nodes(2, kimi_k3_accelerator="gb300", kimi_k3_strategy="multi_node_tp",
                        kimi_k3_interconnect="nvlink", kimi_k3_gpus_per_node=8))
    (e,) = problems(r, "kimi_k3_gpus_per_node")
    assert "a gb300 node has 4" in e["message"] and "4-GPU tray" in e["fix"]


def test_rule_strategy_below_minimum_gpus():
    r = plan(make_nodes(2, kimi_k3_accelerator="gb300", kimi_k3_strategy="multi_node_dep",
                        kimi_k3_interconnect="nvlink"))
    assert any("needs at least 16 GPUs" in e["message"] for e in problems(r, "kimi_k3_strategy"))


def test_rule_dep_unsupported_on_hopper():
    r = plan(make_nodes(2, kimi_k3_accelerator="h200", kimi_k3_strategy="multi_node_dep",
                        kimi_k3_interconnect="rdma"))
    assert any("not supported on h200" in e["message"] for e in problems(r, "kimi_k3_strategy"))


def test_rule_single_node_strategy_on_several_nodes():
    r = plan(make_nodes(2, kimi_k3_accelerator="b300", kimi_k3_strategy="single_node_tp",
                        kimi_k3_interconnect="rdma"))
    assert any("runs on one node" in e["message"] for e in problems(r, "kimi_k3_strategy"))


def test_rule_single_node_tp_unreachable_on_a_tray():
    r = plan(make_nodes(1, kimi_k3_accelerator="gb300", kimi_k3_strategy="single_node_tp"))
    assert any("needs at least 8 GPUs" in e["message"] for e in problems(r, "kimi_k3_strategy"))


def test_rule_hybrid_lb_with_headless():
    r = plan(make_nodes(4, kimi_k3_accelerator="gb300", kimi_k3_strategy="multi_node_dep",
                        kimi_k3_interconnect="nvlink", kimi_k3_extra_args=["--headless"]))
    assert not r["ok"]
    assert any("--headless must not be passed by hand" in e["message"] for e in r["errors"])


def test_rule_hybrid_lb_with_one_rank_per_node():
    r = plan(make_nodes(2, kimi_k3_accelerator="h200", kimi_k3_strategy="multi_node_tp_dp",
                        kimi_k3_interconnect="rdma", kimi_k3_dp_lb_mode="hybrid"))
    assert problems(r, "kimi_k3_dp_lb_mode")


def test_rule_duplicate_ranks():
    nodes = make_nodes(3, kimi_k3_accelerator="gb300", kimi_k3_strategy="multi_node_tp",
                       kimi_k3_interconnect="nvlink", kimi_k3_gpus_per_node=4, kimi_k3_tensor_parallel_size=12,
                       host_vars={0: {"kimi_k3_node_rank": 0}, 1: {"kimi_k3_node_rank": 1},
                                  2: {"kimi_k3_node_rank": 1}})
    r = plan(nodes)
    (e,) = [e for e in problems(r, "kimi_k3_node_rank") if "also given" in e["message"]]
    assert e["host"] == "node2" and "node1" in e["message"]


def test_rule_duplicate_addresses():
    nodes = make_nodes(2, kimi_k3_accelerator="gb300", kimi_k3_strategy="multi_node_tp",
                       kimi_k3_interconnect="nvlink",
                       host_vars={1: {"kimi_k3_internal_address": "10.9.0.1"}})
    (e,) = problems(plan(nodes), "kimi_k3_internal_address")
    assert e["host"] == "node1" and "node0" in e["message"]


def test_rule_duplicate_ports():
    r = plan(make_nodes(4, kimi_k3_accelerator="gb300", kimi_k3_strategy="multi_node_dep",
                        kimi_k3_interconnect="nvlink", kimi_k3_dp_rpc_port=8000))
    (e,) = problems(r, "kimi_k3_dp_rpc_port")
    assert "also kimi_k3_api_port" in e["message"]


def test_rule_rocm_image_on_nvidia_and_reverse():
    r = plan(make_nodes(1, kimi_k3_accelerator="b300", kimi_k3_strategy="single_node_tp", kimi_k3_image=ROCM_IMAGE))
    assert any("ROCm image" in e["message"] for e in problems(r, "kimi_k3_image"))
    r = plan(make_nodes(1, kimi_k3_accelerator="mi355x", kimi_k3_strategy="single_node_tp", kimi_k3_image=NV_IMAGE))
    assert any("not a ROCm image" in e["message"] for e in problems(r, "kimi_k3_image"))


def test_rule_unknown_argument_for_version():
    nodes = make_nodes(1, kimi_k3_accelerator="b300", kimi_k3_strategy="single_node_tp",
                       kimi_k3_extra_args=["--disable-log-requests"])
    r = plan(nodes)
    (e,) = problems(r, "kimi_k3_extra_args")
    assert "--disable-log-requests is not accepted by vllm serve 0.28.0" in e["message"]
    # 0.33.0 parses it again.
    for n in nodes:
        n["vars"]["kimi_k3_vllm_version"] = "0.33.0"
    assert plan(nodes)["ok"]


def test_rule_value_outside_choices():
    r = plan(make_nodes(1, kimi_k3_accelerator="b300", kimi_k3_strategy="single_node_tp",
                        kimi_k3_kv_cache_dtype="fp9"))
    # The problem names the variable that produced the flag and the values this release accepts.
    (e,) = r["errors"]
    assert e["variable"] == "kimi_k3_kv_cache_dtype" and "fp9 is not a --kv-cache-dtype value" in e["message"]
    assert "fp8" in e["fix"] and "0.28.0" in e["fix"]
    r = plan(make_nodes(2, kimi_k3_accelerator="b300", kimi_k3_strategy="multi_node_tep",
                        kimi_k3_interconnect="rdma", kimi_k3_socket_ifname="eth9",
                        kimi_k3_all2all_backend="moonep"))  # only 0.33.0 knows moonep
    (e,) = r["errors"]
    assert e["variable"] == "kimi_k3_all2all_backend" and "moonep" in e["message"] and "deepep_v2" in e["fix"]


def test_rule_unknown_vllm_version_and_too_old():
    r = plan(make_nodes(1, kimi_k3_accelerator="b300", kimi_k3_strategy="single_node_tp",
                        kimi_k3_vllm_version="0.26.0"))
    # One mistake, one problem: too old is the root (no snapshot follows from it).
    msgs = [e["message"] for e in r["errors"]]
    assert len(msgs) == 1 and "needs >= 0.27.1" in msgs[0]
    r = plan(make_nodes(1, kimi_k3_accelerator="b300", kimi_k3_strategy="single_node_tp",
                        kimi_k3_vllm_version="0.30.0"))
    msgs = [e["message"] for e in problems(r, "kimi_k3_vllm_version")]
    assert len(msgs) == 1 and "no flag snapshot" in msgs[0]


def test_rule_secrets_and_removed_env_refused_in_extra_env():
    r = plan(make_nodes(1, kimi_k3_accelerator="b300", kimi_k3_strategy="single_node_tp",
                        kimi_k3_extra_env={"VLLM_ALL2ALL_BACKEND": "deepep_low_latency", "HF_TOKEN": "x"},
                        kimi_k3_extra_args=["--api-key", "x"]))
    text = " ".join(e["message"] + e["fix"] for e in r["errors"])
    assert "VLLM_ALL2ALL_BACKEND no longer exists" in text and "HF_TOKEN is a secret" in text
    assert "--api-key is a secret" in text and "set kimi_k3_api_key (vault)" in text


def test_rule_cluster_vars_must_agree():
    nodes = make_nodes(2, kimi_k3_accelerator="gb300", kimi_k3_strategy="multi_node_tp",
                       kimi_k3_interconnect="nvlink", host_vars={1: {"kimi_k3_strategy": "multi_node_tep"}})
    (e,) = problems(plan(nodes), "kimi_k3_strategy")
    assert "differs between node0" in e["message"]


def test_rule_spec_decoding_not_with_tp_pp_and_dcp_only_single_node():
    r = plan(make_nodes(2, kimi_k3_accelerator="b200", kimi_k3_strategy="multi_node_tp_pp",
                        kimi_k3_interconnect="rdma", kimi_k3_features={"spec_decoding": True, "dcp": True}))
    msgs = [e["message"] for e in problems(r, "kimi_k3_features")]
    assert any("spec_decoding is not allowed" in m for m in msgs)
    assert any("dcp is only available" in m for m in msgs)


def test_rule_head_group_exactly_one():
    nodes = make_nodes(2, kimi_k3_accelerator="gb300", kimi_k3_strategy="multi_node_tp",
                       kimi_k3_interconnect="nvlink")
    nodes[1]["head"] = True
    assert problems(plan(nodes), "vllm_head")


def test_all_problems_are_reported_together():
    r = plan(make_nodes(2, kimi_k3_accelerator="gb300", kimi_k3_strategy="single_node_tp",
                        kimi_k3_image="vllm/vllm-openai-rocm:latest", kimi_k3_gpus_per_node=8))
    variables = {e["variable"] for e in r["errors"]}
    assert {"kimi_k3_image", "kimi_k3_gpus_per_node", "kimi_k3_strategy", "kimi_k3_interconnect"} <= variables
    for line in map(topology.format_problem, r["errors"]):
        assert " Fix: " in line


def test_every_rendered_plan_passes_every_snapshot_it_targets():
    for version in SNAPSHOTS:
        for acc, strat, n, ic, image in [("gb300", "multi_node_dep", 4, "nvlink", NV_IMAGE),
                                         ("gb300", "multi_node_tep", 2, "nvlink", NV_IMAGE),
                                         ("mi355x", "multi_node_dep", 2, "rdma", ROCM_IMAGE),
                                         ("h200", "multi_node_tp_dp", 2, "rdma", NV_IMAGE),
                                         ("b300", "single_node_tp", 1, None, NV_IMAGE)]:
            small = {"kimi_k3_model": SMALL_MODEL} if strat == "multi_node_tp_dp" else {}
            r = plan(make_nodes(n, kimi_k3_accelerator=acc, kimi_k3_strategy=strat, kimi_k3_interconnect=ic,
                                kimi_k3_image=image, kimi_k3_vllm_version=version, **small,
                                kimi_k3_features={"spec_decoding": strat != "multi_node_tp_pp",
                                                  "dcp": strat == "single_node_tp"}))
            assert r["ok"], (version, strat, r["errors"])
            for p in r["plans"].values():
                assert vllm_flags.check_argv(p["vllm_args"], SNAPSHOTS[version]) == []


def test_pick_versioned():
    m = {"0.27.1": "a", "0.28.0": "b", "0.33.0": "c"}
    assert topology.pick_versioned(m, "0.27.1") == "a"
    assert topology.pick_versioned(m, "0.30.2") == "b"
    assert topology.pick_versioned(m, "0.34.0") == "c"
    assert topology.pick_versioned(m, "0.26.0") is None


def test_inputs_are_not_mutated():
    nodes = make_nodes(2, kimi_k3_accelerator="gb300", kimi_k3_strategy="multi_node_tp",
                       kimi_k3_interconnect="nvlink")
    before = copy.deepcopy(nodes)
    plan(nodes)
    assert nodes == before
