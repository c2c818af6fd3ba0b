"""One test per inventory rule of the plan: the refusal names the host, the variable and a fix.

RULES is also the rule table of the closing note: (id, variable, what is checked, inventory change, host,
fragment of the message, fragment of the fix). Every case starts from a valid 2-tray GB300 (or 2-node MI355X)
cluster and changes one thing, so each must give exactly one problem.
"""
import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import render as plan_render
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import topology
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data

RECIPE = recipe_data.load_recipe()
SNAPSHOTS = recipe_data.load_snapshots()
REV = "0123456789abcdef0123456789abcdef01234567"
NV = {"kimi_k3_accelerator": "gb300", "kimi_k3_strategy": "multi_node_tp", "kimi_k3_interconnect": "nvlink",
      "kimi_k3_socket_ifname": "bond0", "kimi_k3_vllm_version": "0.28.0", "kimi_k3_model_revision": REV,
      "kimi_k3_image": "vllm/vllm-openai@sha256:" + "a" * 64, "kimi_k3_api_key": "s3cret-value"}
AMD = dict(NV, kimi_k3_accelerator="mi355x", kimi_k3_strategy="multi_node_dep", kimi_k3_interconnect="rdma",
           kimi_k3_image="vllm/vllm-openai-rocm@sha256:" + "b" * 64)


def nodes(cluster=None, host=None, count=2, names=None):
    names = names or ["tray%02d" % (i + 1) for i in range(count)]
    out = []
    for i, name in enumerate(names):
        v = dict(NV if cluster is None else cluster)
        v["ansible_host"] = "10.0.0.%d" % (i + 11)
        v.update((host or {}).get(i, {}))
        out.append({"host": name, "head": i == 0, "vars": v})
    return out


def with_(base=None, **changes):
    return dict(NV if base is None else base, **changes)


def without(*names, base=None):
    return dict((k, v) for k, v in (NV if base is None else base).items() if k not in names)


# (id, variable, check, nodes, host, message fragment, fix fragment)
RULES = [
    ("accelerator-unset", "kimi_k3_accelerator", "required", nodes(without("kimi_k3_accelerator")),
     "tray01", "is not set", "gb300"),
    ("accelerator-unknown", "kimi_k3_accelerator", "one of the recipe's hardware",
     nodes(with_(kimi_k3_accelerator="gb400")), "tray01", "is not one of", "gb300"),
    ("accelerator-list", "kimi_k3_accelerator", "type str", nodes(with_(kimi_k3_accelerator=["gb300"])),
     "tray01", "must be a string, got a list", "one of"),
    ("gpus-per-node-too-many", "kimi_k3_gpus_per_node", "<= the accelerator's GPUs",
     nodes(with_(kimi_k3_gpus_per_node=8)), "tray01", "a gb300 node has 4", "at most 4"),
    ("gpus-per-node-text", "kimi_k3_gpus_per_node", "type int", nodes(with_(kimi_k3_gpus_per_node="four")),
     "tray01", "is not an integer", "integer >= 1"),
    ("strategy-unknown", "kimi_k3_strategy", "one of the recipe's strategies",
     nodes(with_(kimi_k3_strategy="multi_node_ep")), "tray01", "is not one of", "multi_node_tp"),
    ("strategy-too-few-nodes", "kimi_k3_strategy", "node count fits the strategy",
     nodes(with_(kimi_k3_strategy="multi_node_tp"), count=1), "tray01", "needs at least 2 nodes", "add nodes"),
    ("strategy-single-on-two", "kimi_k3_strategy", "single_node_tp on one node",
     nodes(with_(kimi_k3_strategy="single_node_tp")), "tray01", "runs on one node",
     "multi_node_"),
    ("strategy-gpu-count", "kimi_k3_strategy", "GPU count fits the strategy",
     nodes(with_(kimi_k3_strategy="multi_node_tp_pp")), "tray01", "needs at least 16 GPUs", "add nodes"),
    ("strategy-hardware", "kimi_k3_strategy", "strategy offered on the hardware",
     nodes(with_(kimi_k3_accelerator="h200", kimi_k3_strategy="multi_node_dep", kimi_k3_interconnect="rdma")),
     "tray01", "not supported on h200", "multi_node_tp"),
    ("sizes-product", "kimi_k3_tensor_parallel_size/kimi_k3_pipeline_parallel_size/kimi_k3_data_parallel_size",
     "TP x PP x DP = GPUs", nodes(with_(kimi_k3_tensor_parallel_size=4)), "tray01", "TP 4 x PP 1 x DP 1 = 4",
     "nodes x GPUs per node"),
    ("size-zero", "kimi_k3_pipeline_parallel_size", ">= 1", nodes(with_(kimi_k3_pipeline_parallel_size=0)),
     "tray01", "below the minimum 1", ">= 1"),
    ("dp-lb-mode-boolean", "kimi_k3_dp_lb_mode", "type str (YAML off)",
     nodes(with_(AMD, kimi_k3_dp_lb_mode=False)), "tray01", "got a boolean", "hybrid"),
    ("dp-lb-mode-not-dp", "kimi_k3_dp_lb_mode", "only with data parallelism",
     nodes(with_(kimi_k3_dp_lb_mode="hybrid")), "tray01", "has no data parallelism", "remove"),
    ("dp-lb-mode-strategy", "kimi_k3_dp_lb_mode", "mode offered by the strategy",
     nodes(with_(AMD, kimi_k3_dp_lb_mode="external")), "tray01", "not available for multi_node_dep", "hybrid"),
    ("interconnect-unset", "kimi_k3_interconnect", "required on several nodes",
     nodes(without("kimi_k3_interconnect")), "tray01", "is not set for a 2-node cluster", "rdma"),
    ("interconnect-unknown", "kimi_k3_interconnect", "one of nvlink, rdma",
     nodes(with_(kimi_k3_interconnect="infiniband")), "tray01", "is not one of nvlink, rdma", "rdma"),
    ("interconnect-nvlink-no-tray", "kimi_k3_interconnect", "multi-node NVLink needs GB trays",
     nodes(with_(kimi_k3_accelerator="b300")), "tray01", "needs GB200/GB300", "rdma"),
    ("all2all-other-vendor", "kimi_k3_all2all_backend", "kernel of the nodes' vendor",
     nodes(with_(AMD, kimi_k3_all2all_backend="deepep_v2")), "tray01", "NVIDIA-only", "mori_high_throughput"),
    ("all2all-version", "kimi_k3_all2all_backend", "value the target vLLM accepts",
     nodes(with_(AMD, kimi_k3_all2all_backend="moonep")), "tray01", "vLLM 0.28.0", "mori_low_latency"),
    ("moe-other-vendor", "kimi_k3_moe_backend", "kernel of the nodes' vendor",
     nodes(with_(AMD, kimi_k3_moe_backend="deep_gemm")), "tray01", "NVIDIA-only", "kimi_k3_moe_backend"),
    ("moe-megamoe-rdma", "kimi_k3_moe_backend", "MegaMoE not over RDMA",
     nodes(with_(kimi_k3_accelerator="b300", kimi_k3_interconnect="rdma", kimi_k3_strategy="multi_node_tep",
                 kimi_k3_moe_backend="deep_gemm_mega_moe")), "tray01", "does not work over cross-node rdma", "auto"),
    ("variant-unknown", "kimi_k3_variant", "one of the recipe's variants", nodes(with_(kimi_k3_variant="nvfp5")),
     "tray01", "is not one of default, nvfp4", "nvfp4"),
    ("model-format", "kimi_k3_model", "repo id or absolute path", nodes(with_(kimi_k3_model="Kimi K3")),
     "tray01", "is not a Hugging Face repository id", "org/name"),
    ("revision-unset", "kimi_k3_model_revision", "remote code pinned",
     nodes(without("kimi_k3_model_revision")), "tray01", "--trust-remote-code would run", "allow_unpinned"),
    ("revision-branch", "kimi_k3_model_revision", "40-hex commit", nodes(with_(kimi_k3_model_revision="main")),
     "tray01", "is not a 40-character", "commit"),
    ("features-list", "kimi_k3_features", "type dict", nodes(with_(kimi_k3_features=["tool_calling"])),
     "tray01", "must be a mapping", "mapping"),
    ("features-unknown", "kimi_k3_features", "known feature", nodes(with_(kimi_k3_features={"tools": True})),
     "tray01", "unknown feature 'tools'", "tool_calling"),
    ("features-strategy", "kimi_k3_features", "feature allowed with the strategy",
     nodes(with_(kimi_k3_features={"dcp": True})), "tray01", "dcp is only available with single_node_tp",
     "turn dcp off"),
    ("max-model-len-zero", "kimi_k3_max_model_len", "positive integer or auto",
     nodes(with_(kimi_k3_max_model_len=0)), "tray01", "below the minimum 1", "auto"),
    ("max-model-len-text", "kimi_k3_max_model_len", "positive integer or auto",
     nodes(with_(kimi_k3_max_model_len="1M")), "tray01", "is not an integer", "auto"),
    ("kv-cache-dtype-version", "kimi_k3_kv_cache_dtype", "value the target vLLM accepts",
     nodes(with_(kimi_k3_kv_cache_dtype="fp9")), "tray01", "vLLM 0.28.0 accepts", "fp8"),
    ("socket-ifname-syntax", "kimi_k3_socket_ifname", "NCCL interface syntax",
     nodes(with_(kimi_k3_socket_ifname="bond0 eth0")), "tray01", "NCCL interface syntax", "^docker,lo"),
    ("nvls-word", "kimi_k3_nccl_nvls_enable", "boolean", nodes(with_(kimi_k3_nccl_nvls_enable="enabled")),
     "tray01", "is not a boolean", "true or false"),
    ("version-no-snapshot", "kimi_k3_vllm_version", "a flag snapshot exists",
     nodes(with_(kimi_k3_vllm_version="0.30.0")), "tray01", "no flag snapshot for vLLM 0.30.0", "0.28.0"),
    ("version-float", "kimi_k3_vllm_version", "type str (quoted)", nodes(with_(kimi_k3_vllm_version=0.28)),
     "tray01", "must be a string, got a number", "kimi_k3_vllm_version"),
    ("image-unset", "kimi_k3_image", "required", nodes(without("kimi_k3_image")), "tray01", "is not set",
     "sha256"),
    ("image-tag", "kimi_k3_image", "pinned by digest", nodes(with_(kimi_k3_image="vllm/vllm-openai:v0.28.0")),
     "tray01", "not pinned by digest", "allow_unpinned_image"),
    ("image-vendor", "kimi_k3_image", "image of the nodes' vendor",
     nodes(with_(kimi_k3_image="vllm/vllm-openai-rocm@sha256:" + "c" * 64)), "tray01", "is a ROCm image",
     "vllm/vllm-openai"),
    ("allow-unpinned-word", "kimi_k3_allow_unpinned_image", "boolean",
     nodes(with_(kimi_k3_allow_unpinned_image="ture")), "tray01", "is not a boolean", "true or false"),
    ("cache-dir-relative", "kimi_k3_model_cache_dir", "absolute path",
     nodes(with_(kimi_k3_model_cache_dir="hf-cache")), "tray01", "is not an absolute path", "starts with /"),
    ("container-name", "kimi_k3_container_name", "Docker name rules",
     nodes(with_(kimi_k3_container_name="vllm kimi")), "tray01", "is not a Docker container name", "a-zA-Z0-9"),
    ("shm-size", "kimi_k3_shm_size", "size with unit", nodes(with_(kimi_k3_shm_size="64 GB")), "tray01",
     "is not a size", "64g"),
    ("memlock", "kimi_k3_memlock", ">= -1", nodes(with_(kimi_k3_memlock=-2)), "tray01", "below the minimum -1",
     ">= -1"),
    ("restart-policy", "kimi_k3_restart_policy", "Docker restart policy",
     nodes(with_(kimi_k3_restart_policy="sometimes")), "tray01", "is not one of", "unless-stopped"),
    ("docker-host", "kimi_k3_docker_host", "engine URL", nodes(host={1: {"kimi_k3_docker_host": "/run/docker.sock"}}),
     "tray02", "is not an engine URL", "unix:///"),
    ("internal-address-prefix", "kimi_k3_internal_address", "address without prefix length",
     nodes(host={1: {"kimi_k3_internal_address": "10.0.0.12/24"}}), "tray02", "without prefix length",
     "IPv4/IPv6"),
    ("internal-address-duplicate", "kimi_k3_internal_address", "distinct per node",
     nodes(host={1: {"kimi_k3_internal_address": "10.0.0.11"}}), "tray02", "is also the address of tray01",
     "its own"),
    ("api-host-port", "kimi_k3_api_host", "address without port",
     nodes(host={0: {"kimi_k3_api_host": "10.0.0.11:8000"}}), "tray01", "without prefix length (/24), port",
     "host name"),
    ("api-port-range", "kimi_k3_api_port", "port 1-65535", nodes(with_(kimi_k3_api_port=80800)), "tray01",
     "is not a TCP port", "1-65535"),
    ("ports-distinct", "kimi_k3_master_port", "ports distinct per node", nodes(with_(kimi_k3_master_port=8000)),
     "tray01", "port 8000 is also kimi_k3_api_port", "distinct"),
    ("node-rank-duplicate", "kimi_k3_node_rank", "distinct ranks",
     nodes(host={0: {"kimi_k3_node_rank": 0}, 1: {"kimi_k3_node_rank": 0}}), "tray02", "rank 0 is also given to",
     "distinct rank"),
    ("node-rank-partial", "kimi_k3_node_rank", "on every node or none", nodes(host={0: {"kimi_k3_node_rank": 0}}),
     "tray02", "is set on some nodes", "every node or on none"),
    ("node-rank-head", "kimi_k3_node_rank", "head is rank 0",
     nodes(host={0: {"kimi_k3_node_rank": 1}, 1: {"kimi_k3_node_rank": 0}}), "tray01", "must be rank 0",
     "kimi_k3_node_rank: 0"),
    ("cluster-var-differs", "kimi_k3_strategy", "cluster-wide value identical",
     nodes(host={1: {"kimi_k3_strategy": "multi_node_tep"}}), "tray02", "it is cluster-wide", "group_vars"),
    ("extra-args-string", "kimi_k3_extra_args", "type list", nodes(with_(kimi_k3_extra_args="--max-num-seqs 8")),
     "tray01", "must be a list of strings, got a str", "list"),
    ("extra-args-derived", "kimi_k3_extra_args", "no derived flags",
     nodes(with_(kimi_k3_extra_args=["--tensor-parallel-size", "4"])), "tray01", "must not be passed by hand",
     "kimi_k3_tensor_parallel_size"),
    ("extra-args-alias", "kimi_k3_extra_args", "no derived flags (aliases)",
     nodes(with_(kimi_k3_extra_args=["-dpa", "10.0.0.11"])), "tray01", "must not be passed by hand",
     "kimi_k3_strategy"),
    ("extra-args-unknown-flag", "kimi_k3_extra_args", "flag the target vLLM accepts",
     nodes(with_(kimi_k3_extra_args=["--disable-log-requests"])), "tray01", "not accepted by vllm serve 0.28.0",
     "kimi_k3_vllm_version"),
    ("extra-env-secret", "kimi_k3_extra_env", "no secrets", nodes(with_(kimi_k3_extra_env={"HF_TOKEN": "x"})),
     "tray01", "is a secret", "vault"),
    ("extra-env-removed", "kimi_k3_extra_env", "no removed variables",
     nodes(with_(kimi_k3_extra_env={"VLLM_ALL2ALL_BACKEND": "deepep_v2"})), "tray01", "no longer exists",
     "kimi_k3_all2all_backend"),
    ("extra-env-list-value", "kimi_k3_extra_env", "scalar values",
     nodes(with_(kimi_k3_extra_env={"NCCL_DEBUG": ["INFO"]})), "tray01", "must be a string or number", "NCCL_DEBUG"),
    ("extra-env-other-vendor", "kimi_k3_extra_env", "variable of the nodes' vendor",
     nodes(with_(kimi_k3_extra_env={"VLLM_ROCM_USE_AITER": "1"})), "tray01", "AMD builds only", "remove"),
    ("api-unauthenticated", "kimi_k3_api_key", "key on a non-loopback API", nodes(without("kimi_k3_api_key")),
     "tray01", "without authentication on tray01 (0.0.0.0)", "kimi_k3_allow_unauthenticated_api"),
    ("undeclared-variable", "kimi_k3_acclerator", "declared variable",
     nodes(with_(kimi_k3_acclerator="gb300")), "tray01", "is not a variable of this collection",
     "kimi_k3_accelerator"),
    ("host-name-path", "inventory_hostname", "file-safe host name", nodes(names=["tray01", "racks/tray02"]),
     "'racks/tray02'", "used as a file name", "rename the host"),
    ("head-group", "vllm_head", "exactly one head",
     [dict(n, head=True) for n in nodes()], "vllm_head", "has 2 hosts in vllm_head (tray01, tray02)",
     "give each deployment's group its own kimi_k3_deployment"),
]


def plan(ns):
    return topology.build_cluster_plan(ns, RECIPE, SNAPSHOTS)


def test_the_bases_are_valid():
    assert plan(nodes())["ok"], plan(nodes())["errors"]
    assert plan(nodes(AMD))["ok"], plan(nodes(AMD))["errors"]


@pytest.mark.parametrize("rule", RULES, ids=[r[0] for r in RULES])
def test_rule_names_host_variable_and_fix(rule):
    _id, variable, _check, ns, host, message, fix = rule
    r = plan(ns)
    assert not r["ok"]
    assert len(r["errors"]) == 1, [plan_render.format_problem(e) for e in r["errors"]]
    (e,) = r["errors"]
    assert e["variable"] == variable and e["host"] == host, e
    assert message in e["message"], e
    assert fix in e["fix"], e
    line = plan_render.format_problem(e)
    assert line.startswith("%s: %s: " % (host, variable)) and "Fix: " in line


def test_secret_values_never_appear_in_problems():
    r = plan(nodes(host={1: {"kimi_k3_api_key": "other-s3cret"}}))
    (e,) = r["errors"]
    assert e["variable"] == "kimi_k3_api_key" and "s3cret" not in repr(r)
    r = plan(nodes(with_(kimi_k3_api_key=["s3cret-in-a-list"])))
    assert r["errors"][0]["variable"] == "kimi_k3_api_key" and "s3cret" not in repr(r["errors"])


def test_mori_low_latency_is_the_documented_amd_option():
    r = plan(nodes(with_(AMD, kimi_k3_all2all_backend="mori_low_latency")))
    assert r["ok"], r["errors"]
    args = r["plans"]["tray01"]["vllm_args"]
    assert args[args.index("--all2all-backend") + 1] == "mori_low_latency"


def test_amd_rdma_renders_mori_and_nvidia_rdma_deepep():
    amd = plan(nodes(AMD))["plans"]["tray02"]["vllm_args"]
    assert amd[amd.index("--all2all-backend") + 1] == "mori_high_throughput"
    nv = plan(nodes(with_(kimi_k3_accelerator="b300", kimi_k3_interconnect="rdma",
                          kimi_k3_strategy="multi_node_dep")))["plans"]["tray02"]["vllm_args"]
    assert nv[nv.index("--all2all-backend") + 1] == "deepep_v2"
    # TEP has one data-parallel rank: vLLM never uses an all2all kernel there, so none is rendered
    tep = plan(nodes(with_(kimi_k3_accelerator="b300", kimi_k3_interconnect="rdma",
                           kimi_k3_strategy="multi_node_tep")))
    assert tep["ok"], tep["errors"]
    assert "--all2all-backend" not in tep["plans"]["tray02"]["vllm_args"]


def test_revision_renders_revision_and_code_revision():
    p = plan(nodes())["plans"]["tray01"]
    args = p["vllm_args"]
    assert args[args.index("--revision") + 1] == REV and args[args.index("--code-revision") + 1] == REV
    assert "--tokenizer-revision" not in args  # vLLM defaults it to --revision
    assert p["model_revision"] == REV and p["model"] == "moonshotai/Kimi-K3"


def test_unpinned_remote_code_opt_in_renders_without_revision():
    r = plan(nodes(with_(without("kimi_k3_model_revision"), kimi_k3_allow_unpinned_remote_code=True)))
    assert r["ok"] and "--revision" not in r["plans"]["tray01"]["vllm_args"]
    assert r["plans"]["tray01"]["model_revision"] is None


def test_api_access_is_in_the_summary():
    r = plan(nodes())
    assert r["cluster"]["api_access"] == "api_key" and "API key required" in plan_render.summary_table(r)
    r = plan(nodes(with_(without("kimi_k3_api_key"), kimi_k3_allow_unauthenticated_api=True)))
    assert r["ok"] and r["cluster"]["api_access"] == "unauthenticated"
    assert "NO API KEY" in plan_render.summary_table(r)
    loop = {0: {"kimi_k3_api_host": "127.0.0.1"}}
    r = plan(nodes(without("kimi_k3_api_key"), host=loop))
    assert r["ok"] and r["cluster"]["api_access"] == "loopback"


def test_plan_keys_of_the_contract():
    p = plan(nodes(with_(kimi_k3_served_model_name=["kimi-k3", "k3"], kimi_k3_api_port=9000),
                   host={1: {"kimi_k3_docker_host": "tcp://10.0.0.12:2376"}}))["plans"]
    assert p["tray01"]["docker_host"] == "unix:///var/run/docker.sock"
    assert p["tray02"]["docker_host"] == "tcp://10.0.0.12:2376"
    for key, want in (("served_model_name", "kimi-k3"), ("api_port", 9000), ("api_host", "0.0.0.0"),
                      ("model_cache_dir", "/data/hf-cache")):
        assert p["tray01"][key] == want


def test_strings_from_extra_vars_are_read_as_their_type():
    # ansible-playbook -e kimi_k3_gpus_per_node=4 -e kimi_k3_nccl_nvls_enable=false passes strings.
    r = plan(nodes(with_(kimi_k3_gpus_per_node="4", kimi_k3_nccl_nvls_enable="false", kimi_k3_api_port="8000")))
    assert r["ok"], r["errors"]
    assert r["plans"]["tray01"]["env"]["NCCL_NVLS_ENABLE"] == "0"
