"""The rehearsal CPU hardware key (recipe `hardware.cpu`): vLLM's CPU build on CPU nodes. Its own layer of flags
and env, the strategies and interconnect it can run, per-node OpenMP binding, and refusals named by variable."""
import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.preflight import checks as preflight_checks
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.preflight import expect as preflight_expect
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import topology
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import vllm_flags
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data

RECIPE = recipe_data.load_recipe()
SNAPSHOTS = recipe_data.load_snapshots()
CPU_IMAGE = "127.0.0.1:5000/vllm/vllm-openai-cpu@sha256:" + "c" * 64
NV_IMAGE = "vllm/vllm-openai@sha256:" + "a" * 64
ROCM_IMAGE = "vllm/vllm-openai-rocm@sha256:" + "b" * 64
REV = "0123456789abcdef0123456789abcdef01234567"


def make_nodes(n, host_vars=None, **cluster):
    cluster.setdefault("kimi_k3_image", NV_IMAGE)
    cluster.setdefault("kimi_k3_model_revision", REV)
    cluster.setdefault("kimi_k3_api_key", "s3cret-value")
    nodes = []
    for i in range(n):
        v = dict(cluster, ansible_host="127.0.0.%d" % (61 + i))
        v.update((host_vars or {}).get(i, {}))
        nodes.append({"host": "node%d" % i, "head": i == 0, "vars": v})
    return nodes


def plan(nodes):
    return topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS)


def problems(result, variable):
    return [e for e in result["errors"] if e["variable"] == variable]


def cpu_nodes(n=2, host_vars=None, **cluster):
    cluster.setdefault("kimi_k3_image", CPU_IMAGE)
    cluster.setdefault("kimi_k3_vllm_version", "0.32.0")
    cluster.setdefault("kimi_k3_accelerator", "cpu")
    cluster.setdefault("kimi_k3_strategy", "multi_node_tp" if n > 1 else "single_node_tp")
    if n > 1:
        cluster.setdefault("kimi_k3_interconnect", "tcp")
        cluster.setdefault("kimi_k3_socket_ifname", "lo")
    return make_nodes(n, host_vars, **cluster)


def flag(plan_, name):
    return vllm_flags.flag_value(plan_["vllm_args"], name)


def test_two_cpu_nodes_render_tp2_with_the_cpu_layer():
    r = plan(cpu_nodes(2, {0: {"kimi_k3_cpu_threads_bind": "0"}, 1: {"kimi_k3_cpu_threads_bind": "1"}},
                       kimi_k3_cpu_kv_cache_gib=2))
    assert r["ok"], r["errors"]
    head, worker = r["plans"]["node0"], r["plans"]["node1"]
    assert flag(head, "--tensor-parallel-size") == ["2"] and flag(head, "--nnodes") == ["2"]
    assert "--headless" in worker["vllm_args"] and "--headless" not in head["vllm_args"]
    assert "--enforce-eager" in head["vllm_args"] and flag(head, "--max-model-len") == ["4096"]
    # the same MLA backend and block size on a CPU with AMX tiles and on one without (the KV pool in whole blocks)
    assert flag(head, "--attention-backend") == ["CPU_MLA"]
    # the rehearsal model speaks Kimi-K3's XTML: the GPU plans' parsers, every tool's arguments pinned to its schema
    assert flag(head, "--tool-call-parser") == ["kimi_k3"] and flag(head, "--tool-strict-level") == ["parameter"]
    assert flag(head, "--reasoning-parser") == ["kimi_k3"]
    for p, bind in ((head, "0"), (worker, "1")):
        assert p["env"]["VLLM_CPU_OMP_THREADS_BIND"] == bind
        assert p["env"]["VLLM_CPU_KVCACHE_SPACE"] == "2"
        assert p["env"]["GLOO_SOCKET_IFNAME"] == "lo" and p["env"]["HF_HUB_OFFLINE"] == "1"
    # weights without knowledge: the smoke role is told not to judge accuracy
    assert head["judge_accuracy"] is False and worker["judge_accuracy"] is False
    # no GPU: no device request, no GPU device node
    assert head["container"]["device_requests"] == [] and head["container"]["devices"] == []


def test_kv_cache_defaults_to_the_recipe_and_bind_is_left_to_vllm():
    r = plan(cpu_nodes(1))
    assert r["ok"], r["errors"]
    env = r["plans"]["node0"]["env"]
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1" and "VLLM_CPU_OMP_THREADS_BIND" not in env


def test_pipeline_parallel_over_two_cpu_nodes_is_withdrawn_with_its_reason():
    r = plan(cpu_nodes(2, kimi_k3_strategy="multi_node_tp_pp"))
    (e,) = problems(r, "kimi_k3_strategy")
    assert e["message"].startswith("multi_node_tp_pp is not offered on cpu: vLLM 0.32.0's CPU build starts with "
                                   "pipeline parallel across the nodes")
    assert "engine dies on the first request (scheduler KeyError in update_from_output" in e["message"]
    assert e["fix"] == "use one of single_node_tp, multi_node_tp."


@pytest.mark.parametrize("strategy", ["multi_node_dep", "multi_node_tep", "multi_node_tp_dp"])
def test_strategies_the_cpu_build_cannot_run_are_refused(strategy):
    r = plan(cpu_nodes(2, kimi_k3_strategy=strategy))
    (e,) = problems(r, "kimi_k3_strategy")
    assert e["message"] == "%s is not offered on cpu." % strategy
    assert e["fix"] == "use one of single_node_tp, multi_node_tp."


@pytest.mark.parametrize("interconnect", ["nvlink", "rdma"])
def test_gpu_interconnects_are_refused_on_cpu_nodes(interconnect):
    r = plan(cpu_nodes(2, kimi_k3_interconnect=interconnect))
    (e,) = problems(r, "kimi_k3_interconnect")
    assert e["message"] == "%s is not an interconnect of cpu nodes." % interconnect and e["fix"] == "set tcp."


def test_missing_interconnect_on_cpu_nodes_names_tcp():
    nodes = cpu_nodes(2)
    for n in nodes:
        n["vars"].pop("kimi_k3_interconnect")
    (e,) = problems(plan(nodes), "kimi_k3_interconnect")
    assert e["fix"] == "set tcp."


def test_tcp_is_refused_between_gpu_nodes():
    r = plan(make_nodes(2, kimi_k3_accelerator="gb300", kimi_k3_strategy="multi_node_tp", kimi_k3_interconnect="tcp"))
    (e,) = problems(r, "kimi_k3_interconnect")
    assert e["message"] == "tcp is not an interconnect of gb300 nodes." and e["fix"] == "set nvlink or rdma."


def test_release_without_a_cpu_build_is_refused():
    (e,) = problems(plan(cpu_nodes(1, kimi_k3_vllm_version="0.28.0")), "kimi_k3_vllm_version")
    assert e["message"] == "vLLM 0.28.0 has no build for cpu nodes (needs >= 0.32.0)."
    assert "0.32.0" in e["fix"]


@pytest.mark.parametrize("image", [NV_IMAGE, ROCM_IMAGE])
def test_gpu_images_are_refused_on_cpu_nodes(image):
    (e,) = problems(plan(cpu_nodes(1, kimi_k3_image=image)), "kimi_k3_image")
    assert "not an image of vLLM's CPU build" in e["message"]


@pytest.mark.parametrize("accelerator,strategy", [("b300", "single_node_tp"), ("mi355x", "single_node_tp")])
def test_the_cpu_image_is_refused_on_gpu_nodes(accelerator, strategy):
    r = plan(make_nodes(1, kimi_k3_accelerator=accelerator, kimi_k3_strategy=strategy, kimi_k3_image=CPU_IMAGE))
    assert any("image of vLLM's CPU build" in e["message"] for e in problems(r, "kimi_k3_image"))


def test_cpu_variables_refused_on_gpu_nodes():
    r = plan(make_nodes(1, {0: {"kimi_k3_cpu_threads_bind": "0-3"}}, kimi_k3_accelerator="b300",
                        kimi_k3_strategy="single_node_tp", kimi_k3_cpu_kv_cache_gib=4))
    assert not r["ok"]
    assert {"VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_KVCACHE_SPACE"} <= {
        w for e in r["errors"] for w in ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_KVCACHE_SPACE") if w in e["message"]}


@pytest.mark.parametrize("value", ["0-", "a", "0,,1", "1-2-3", "0 1"])
def test_malformed_threads_bind_is_refused(value):
    r = plan(cpu_nodes(1, {0: {"kimi_k3_cpu_threads_bind": value}}))
    assert problems(r, "kimi_k3_cpu_threads_bind")


@pytest.mark.parametrize("value", ["0", "0-3", "0,2,4-7", "auto", "nobind"])
def test_threads_bind_forms_vllm_accepts(value):
    r = plan(cpu_nodes(1, {0: {"kimi_k3_cpu_threads_bind": value}}))
    assert r["ok"], r["errors"]
    assert r["plans"]["node0"]["env"]["VLLM_CPU_OMP_THREADS_BIND"] == value


def test_gpu_checks_do_not_apply_on_cpu_nodes():
    r = plan(cpu_nodes(1))
    exp = preflight_expect.expected_from_plan(r["plans"]["node0"], r["cluster"], RECIPE)
    thresholds = dict(preflight_checks.DEFAULT_THRESHOLDS)
    findings, _states = preflight_checks.check_host("node0", {"vendor": None, "gpu_count": 0}, exp, thresholds)
    by_check = dict((f["check"], f) for f in findings)
    for name in ("vendor", "gpu_tools", "gpu_model", "gpu_count", "gpu_busy", "engine_gpu"):
        assert by_check[name]["status"] == "pass"
        assert by_check[name]["observed"] == "not applicable on cpu nodes"
    assert "gpu_driver" not in by_check and "rocm_version" not in by_check
