"""Exact-value tests of the plan's resolution and checks written for the mutants `scripts/mutation.sh validators` left
alive (plugin_utils.plan.resolve, checks, addresses, vendors, extras).

Each test pins a decision (refused or not, which variable, which host) or a figure the refusal reports (a rank,
a count, a port), or a derived value the plan renders from. Text-only mutants of the message wording are not
chased here (docs/dev/testing.md, "Mutation testing" says which kinds survive and why).
"""
import copy

import pytest

import types

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import addresses
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import checks
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import extras
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import resolve as plan_resolve
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import vendors
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data

RECIPE = recipe_data.load_recipe()
SNAPSHOTS = recipe_data.load_snapshots()
NV_IMAGE = "vllm/vllm-openai@sha256:" + "a" * 64
ROCM_IMAGE = "vllm/vllm-openai-rocm@sha256:" + "b" * 64
REV = "0123456789abcdef0123456789abcdef01234567"


def nodes(n, host_vars=None, head=0, without=(), **cluster):
    base = {"kimi_k3_image": NV_IMAGE, "kimi_k3_vllm_version": "0.28.0", "kimi_k3_accelerator": "gb300",
            "kimi_k3_strategy": "multi_node_tp" if n > 1 else "single_node_tp", "kimi_k3_model_revision": REV,
            "kimi_k3_api_key": "k", "kimi_k3_socket_ifname": "eth9"}
    if n > 1:
        base["kimi_k3_interconnect"] = "nvlink"
    base.update(cluster)
    for name in without:
        del base[name]
    out = []
    for i in range(n):
        v = dict(base, ansible_host="10.9.0.%d" % (i + 1))
        v.update((host_vars or {}).get(i, {}))
        out.append({"host": "node%d" % i, "head": i == head, "vars": v})
    return out


def resolve(node_list, recipe=RECIPE):
    return checks.validate(node_list, recipe, SNAPSHOTS)


def only(errors, variable):
    found = [e for e in errors if e["variable"] == variable]
    assert len(found) == 1, errors
    return found[0]


# ----------------------------------------------------------------------------- small helpers


def test_env_str():
    assert (extras.env_str(True), extras.env_str(False), extras.env_str(5), extras.env_str("x"), extras.env_str(0)) == \
        ("1", "0", "5", "x", "0")


@pytest.mark.parametrize("expr, gpn, nnodes, value", [
    ("G*N", 4, 2, 8), ("G", 4, 3, 4), ("N", 4, 3, 3), ("1", 4, 3, 1), ("2*G", 4, 3, 8), ("G*2", 8, 1, 16),
    (" G * N ", 4, 4, 16), ("3*N*G", 2, 5, 30), (4, 8, 2, 4)])
def test_eval_size(expr, gpn, nnodes, value):
    got = plan_resolve.eval_size(expr, gpn, nnodes)
    assert got == value and isinstance(got, int) and not isinstance(got, bool)


def test_api_host_defaults_to_every_address_also_without_settings():
    assert addresses.api_host({"host": "n", "vars": {}}) == "0.0.0.0"
    assert addresses.api_host({"host": "n", "settings": {"api_host": None}}) == "0.0.0.0"
    assert addresses.api_host({"host": "n", "settings": {"api_host": "127.0.0.1"}}) == "127.0.0.1"


def test_node_address_order_of_precedence():
    assert addresses.node_address({"host": "n", "settings": {"internal_address": "10.0.0.5"},
                                   "vars": {"ansible_host": "1.2.3.4"}}) == "10.0.0.5"
    assert addresses.node_address({"host": "n", "settings": {}, "vars": {"ansible_host": "1.2.3.4"}}) == "1.2.3.4"
    assert addresses.node_address({"host": "n", "vars": {}}) == "n"
    assert addresses.internal_address("n", {"kimi_k3_internal_address": "10.0.0.5", "ansible_host": "x"}) == "10.0.0.5"
    assert addresses.internal_address("n", {"ansible_host": "x"}) == "x"
    assert addresses.internal_address("n", {}) == "n"


@pytest.mark.parametrize("address, loopback", [
    ("127.0.0.1", True), ("127.10.20.30", True), ("localhost", True), ("LOCALHOST", True), ("Localhost", True),
    ("ip6-localhost", True), ("ip6-loopback", True), ("::1", True), ("0.0.0.0", False), ("::", False),
    ("10.0.0.1", False), ("127.0.0.1.example", False), ("x127.0.0.1", False), ("localhost.example", False),
    ("128.0.0.1", False)])
def test_is_loopback(address, loopback):
    assert addresses.is_loopback(address) is loopback


def test_recipe_lookups_of_a_recipe_without_the_sections():
    assert vendors.all2all_kernel({}, "nvidia", "rdma") is None
    assert vendors.exclusive_vendor({}, "moe_backend", "aiter") == (None, None)
    assert vendors.exclusive_vendor({"vendor_exclusive": {}}, "moe_backend", "aiter") == (None, None)
    assert vendors.vendor_choices({}, "nvidia", "rdma") == []
    assert extras.reserved_fix({}, "--port", "--port") is None


def test_vendor_choices_lists_the_rendered_kernel_first_then_the_options():
    recipe = {"all2all_by_vendor": {"nvidia": {"rdma": {"backend": "deepep_low_latency", "options": ["nixl", "x"]},
                                               "nvlink": {"options": ["allgather_reducescatter"]}}}}
    assert vendors.vendor_choices(recipe, "nvidia", "rdma") == ["deepep_low_latency", "nixl", "x"]
    assert vendors.vendor_choices(recipe, "nvidia", "nvlink") == ["allgather_reducescatter"]
    assert vendors.vendor_choices(recipe, "amd", "rdma") == []
    assert vendors.all2all_kernel(recipe, "nvidia", "rdma") == "deepep_low_latency"
    assert vendors.all2all_kernel(recipe, "nvidia", "nvlink") is None


def test_exclusive_vendor_by_value_and_by_prefix():
    recipe = {"vendor_exclusive": {"moe_backend": [
        {"vendor": "amd", "source": "rocm docs", "values": ["aiter"], "prefixes": ["rocm_"]}]}}
    assert vendors.exclusive_vendor(recipe, "moe_backend", "aiter") == ("amd", "rocm docs")
    assert vendors.exclusive_vendor(recipe, "moe_backend", "rocm_fused") == ("amd", "rocm docs")
    assert vendors.exclusive_vendor(recipe, "moe_backend", "cutlass") == (None, None)
    assert vendors.exclusive_vendor(recipe, "attention", "aiter") == (None, None)


def test_reserved_fix_by_flag_name_and_by_prefix():
    recipe = {"reserved_args": {"--port": "use kimi_k3_api_port"},
              "reserved_arg_prefixes": {"--data-parallel": "use the strategy"}}
    assert extras.reserved_fix(recipe, "--port", "--port") == "use kimi_k3_api_port"
    assert extras.reserved_fix(recipe, "--other", "--port") == "use kimi_k3_api_port"
    assert extras.reserved_fix(recipe, "--data-parallel-size", "--dp") == "use the strategy"
    assert extras.reserved_fix(recipe, "--x", "--data-parallel-address") == "use the strategy"
    assert extras.reserved_fix(recipe, "--max-model-len", "--max-model-len") is None


# ----------------------------------------------------------------------------- extra env


@pytest.mark.parametrize("name", ["lower_case", "MixedCase_1", "_X", "A"])
def test_env_names_of_any_case_are_accepted(name):
    assert extras.env_entry_problem(name, "1") is None


@pytest.mark.parametrize("name", ["1ABC", "A-B", "A B", "", "Ä", 5, None])
def test_bad_env_names_are_refused_with_the_name_shown(name):
    message, fix = extras.env_entry_problem(name, "1")
    assert message.startswith("key ") and message.endswith(" is not an environment variable name.")
    assert fix == "use NAME: value with NAME matching [A-Za-z_][A-Za-z0-9_]*."


@pytest.mark.parametrize("value, kind", [([1], "a list"), ({"a": 1}, "a mapping")])
def test_non_scalar_env_values_are_refused_naming_their_kind(value, kind):
    message, fix = extras.env_entry_problem("X", value)
    assert message.startswith("X must be a string or number, got ") and kind.split()[-1] in message, message
    assert fix == 'write X: "<value>" (a list or mapping cannot be an environment value).'


@pytest.mark.parametrize("value", ["a\nb", "a\tb", "\x00", "x\x7f", "\x1f"])
def test_control_characters_in_env_values_are_refused(value):
    assert extras.env_entry_problem("X", value) == (
        "X contains a control character (it would break the env file).", "put the value on one line.")


@pytest.mark.parametrize("value", ["a b", "~!@#$%^&*()", 0, 1.5, True, "\x20", "\x80"])
def test_other_env_values_are_accepted(value):
    assert extras.env_entry_problem("X", value) is None


# ----------------------------------------------------------------------------- node order


def _ranked(ranks, head=0):
    return nodes(len(ranks), host_vars=dict((i, {"kimi_k3_node_rank": r}) for i, r in enumerate(ranks)), head=head)


@pytest.mark.parametrize("ranks, head, host, message, fix, order", [
    # a duplicate rank names both hosts and the rank range; the head (listed last) stays first afterwards
    ([2, 1, 1, 0], 3, "node2", "rank 1 is also given to node1.", "give every node a distinct rank 0..3.",
     ["node3", "node0", "node1", "node2"]),
    ([0, 1, 1, 2], 0, "node2", "rank 1 is also given to node1.", "give every node a distinct rank 0..3.",
     ["node0", "node1", "node2", "node3"]),
    ([1, 0, 3], 1, "node1, node0, node2", "ranks [0, 1, 3] are not 0..2.", "number the nodes 0..N-1 without gaps.",
     ["node1", "node0", "node2"]),
    ([1, 0, 2], 0, "node0", "the head (vllm_head) must be rank 0, but rank 0 is node1.",
     "give the vllm_head host kimi_k3_node_rank: 0.", ["node0", "node1", "node2"]),
])
def test_rank_mistakes_are_reported_once_and_the_head_stays_first(ranks, head, host, message, fix, order):
    ctx, errors, _w = resolve(_ranked(ranks, head=head))
    assert [e["variable"] for e in errors] == ["kimi_k3_node_rank"], errors
    assert (errors[0]["host"], errors[0]["message"], errors[0]["fix"]) == (host, message, fix)
    assert [n["host"] for n in ctx["nodes"]] == order
    assert [n["rank"] for n in ctx["nodes"]] == list(range(len(ranks)))
    assert ctx["head"]["host"] == order[0] == ctx["where"]


def test_explicit_ranks_order_the_nodes():
    ctx, errors, _w = resolve(_ranked([0, 2, 1]))
    assert errors == []
    assert [(n["host"], n["rank"]) for n in ctx["nodes"]] == [("node0", 0), ("node2", 1), ("node1", 2)]


def test_rank_on_some_nodes_only_names_the_others():
    ctx, errors, _w = resolve(nodes(3, host_vars={0: {"kimi_k3_node_rank": 0}}))
    p = only(errors, "kimi_k3_node_rank")
    assert p["host"] == "node1, node2"
    assert p["message"] == "is set on some nodes but not on node1, node2."
    assert [n["host"] for n in ctx["nodes"]] == ["node0", "node1", "node2"]


@pytest.mark.parametrize("heads", [[], [0, 1]])
def test_the_head_group_must_hold_exactly_one_host(heads):
    listed = nodes(2)
    for i, n in enumerate(listed):
        n["head"] = i in heads
    _ctx, errors, _w = resolve(listed)
    p = only(errors, "vllm_head")
    assert p["host"] == "vllm_head"
    assert p["message"] == ("the head group holds no host." if not heads else
                            "the deployment has 2 hosts in vllm_head (node0, node1); a deployment has exactly one "
                            "head.")
    assert p["fix"] == ("put the rank-0 node (alone) in the vllm_head group." if not heads else
                        "if node0, node1 head different deployments, kimi_k3_deployment gives them one name: give "
                        "each deployment's group its own kimi_k3_deployment; otherwise keep only the rank-0 node of "
                        "the deployment in vllm_head.")


def test_a_clean_cluster_resolves_without_problems():
    ctx, errors, warnings = resolve(nodes(2))
    assert errors == [] and warnings == []
    assert ctx["nnodes"] == 2 and ctx["where"] == "node0" and ctx["vendor"] == "nvidia"
    assert ctx["total_gpus"] == 8 and ctx["gpus_per_node"] == 4


def test_resolve_leaves_the_callers_nodes_as_given():
    listed = nodes(2)
    before = copy.deepcopy(listed)
    resolve(listed)
    assert listed == before


# ----------------------------------------------------------------------------- strategy


def test_too_few_gpus_reports_the_counts():
    _ctx, errors, _w = resolve(nodes(2, kimi_k3_accelerator="b200", kimi_k3_strategy="multi_node_dep",
                                     kimi_k3_interconnect="rdma", kimi_k3_gpus_per_node=1))
    p = only(errors, "kimi_k3_strategy")
    assert (p["host"], p["message"], p["fix"]) == (
        "node0", "multi_node_dep needs at least 16 GPUs, the cluster has 2 (2 nodes x 1).",
        "add nodes (a b200 node has 8 GPUs) or choose a smaller strategy.")


def test_a_strategy_without_a_gpu_floor_takes_any_gpu_count():
    recipe = copy.deepcopy(RECIPE)
    del recipe["strategies"]["multi_node_tp"]["min_gpus"]
    ctx, errors, _w = resolve(nodes(2, kimi_k3_gpus_per_node=1), recipe)
    assert [e for e in errors if e["variable"] == "kimi_k3_strategy"] == []
    assert ctx["sizes"] == {"tp": 2, "pp": 1, "dp": 1}


def test_strategy_only_offered_for_other_hardware():
    _ctx, errors, _w = resolve(nodes(2, kimi_k3_accelerator="b200", kimi_k3_strategy="multi_node_tp_dp",
                                     kimi_k3_interconnect="rdma"))
    p = only(errors, "kimi_k3_strategy")
    assert (p["host"], p["message"]) == ("node0", "multi_node_tp_dp is only offered for h200, gb200, gb300, not b200.")


def test_strategy_unsupported_on_the_hardware():
    _ctx, errors, _w = resolve(nodes(2, kimi_k3_accelerator="h200", kimi_k3_strategy="multi_node_dep",
                                     kimi_k3_interconnect="rdma"))
    p = only(errors, "kimi_k3_strategy")
    assert (p["host"], p["message"]) == ("node0", "multi_node_dep is not supported on h200 by the recipe.")


def test_node_count_outside_the_strategy():
    _ctx, errors, _w = resolve(nodes(2, kimi_k3_strategy="single_node_tp"))
    p = only(errors, "kimi_k3_strategy")
    assert (p["host"], p["message"]) == ("node0", "single_node_tp runs on one node, but vllm_cluster has 2 nodes.")
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_strategy="multi_node_tp", kimi_k3_accelerator="b200"))
    p = only(errors, "kimi_k3_strategy")
    assert (p["host"], p["message"]) == ("node0", "multi_node_tp needs at least 2 nodes, vllm_cluster has 1.")


# ----------------------------------------------------------------------------- hardware, image, version


def test_more_gpus_per_node_than_the_hardware_has():
    _ctx, errors, _w = resolve(nodes(2, kimi_k3_gpus_per_node=8))
    p = only(errors, "kimi_k3_gpus_per_node")
    assert (p["host"], p["message"], p["fix"]) == (
        "node0", "8 GPUs per node, but a gb300 node has 4.", "use at most 4 (a gb300 node is one 4-GPU tray).")
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_gpus_per_node=9))
    p = only(errors, "kimi_k3_gpus_per_node")
    assert (p["message"], p["fix"]) == ("9 GPUs per node, but a b200 node has 8.", "use at most 8 (a b200 node).")


def test_gpus_per_node_at_the_hardware_limit_and_below_are_accepted():
    for gpn in (4, 2):
        ctx, errors, _w = resolve(nodes(4, kimi_k3_gpus_per_node=gpn, kimi_k3_strategy="multi_node_tp"))
        assert [e for e in errors if e["variable"] == "kimi_k3_gpus_per_node"] == [], errors
        assert ctx["gpus_per_node"] == gpn and ctx["total_gpus"] == 4 * gpn


def test_accelerator_derivations():
    ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="MI355X", kimi_k3_image=ROCM_IMAGE))
    assert ctx["accelerator"] == "mi355x" and ctx["vendor"] == "amd" and ctx["gpus_per_node"] == 8
    assert ctx["hw"]["vendor"] == "amd"


def test_missing_accelerator_names_the_choices():
    listed = nodes(1, without=("kimi_k3_accelerator",))
    ctx, errors, _w = resolve(listed)
    p = only(errors, "kimi_k3_accelerator")
    assert (p["message"], p["fix"]) == ("is not set.", "set it to one of %s." % ", ".join(sorted(RECIPE["hardware"])))
    assert ctx["accelerator"] is None and ctx["vendor"] is None and ctx["hw"] == {}


@pytest.mark.parametrize("image, variable_problem", [
    (NV_IMAGE, None),
    ("vllm/vllm-openai@sha256:" + "a" * 63, "'vllm/vllm-openai@sha256:%s' has a malformed digest." % ("a" * 63)),
    ("vllm/vllm-openai:v0.28.0", "'vllm/vllm-openai:v0.28.0' is not pinned by digest."),
    (ROCM_IMAGE, "%r is a ROCm image but the nodes are NVIDIA (gb300)." % ROCM_IMAGE),
])
def test_image_rules_on_nvidia(image, variable_problem):
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_image=image))
    found = [e["message"] for e in errors if e["variable"] == "kimi_k3_image"]
    assert found == ([variable_problem.replace("gb300", "b200")] if variable_problem else []), errors


def test_tag_only_image_is_accepted_with_the_opt_in():
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_image="vllm/vllm-openai:v0.28.0",
                                     kimi_k3_allow_unpinned_image=True))
    assert [e for e in errors if e["variable"] == "kimi_k3_image"] == []


def test_cuda_image_on_amd_is_refused_and_rocm_accepted():
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="mi355x", kimi_k3_image=NV_IMAGE))
    assert [e["message"] for e in errors if e["variable"] == "kimi_k3_image"] == [
        "%r is not a ROCm image but the nodes are AMD (mi355x)." % NV_IMAGE]
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="mi355x", kimi_k3_image=ROCM_IMAGE))
    assert [e for e in errors if e["variable"] == "kimi_k3_image"] == []


def test_missing_image():
    listed = nodes(1, kimi_k3_accelerator="b200", without=("kimi_k3_image",))
    _ctx, errors, _w = resolve(listed)
    p = only(errors, "kimi_k3_image")
    assert (p["host"], p["message"]) == ("node0", "is not set.")


def test_version_default_and_snapshot():
    listed = nodes(1, kimi_k3_accelerator="b200", without=("kimi_k3_vllm_version",))
    ctx, errors, _w = resolve(listed)
    assert errors == []
    assert ctx["vllm_version"] == str(RECIPE["defaults"]["vllm_version"])
    assert ctx["snapshot"] is SNAPSHOTS[ctx["vllm_version"]]


def test_an_invalid_rank_keeps_the_default_order_with_the_head_first():
    listed = nodes(3, host_vars={0: {"kimi_k3_node_rank": 1}, 1: {"kimi_k3_node_rank": 2},
                                 2: {"kimi_k3_node_rank": "first"}}, head=2)
    ctx, errors, _w = resolve(listed)
    assert [e["variable"] for e in errors] == ["kimi_k3_node_rank"], errors
    assert errors[0]["host"] == "node2"
    assert [n["host"] for n in ctx["nodes"]] == ["node2", "node0", "node1"]


def test_without_ranks_the_head_is_first_then_inventory_order():
    ctx, errors, _w = resolve(nodes(3, head=1))
    assert errors == []
    assert [(n["host"], n["rank"]) for n in ctx["nodes"]] == [("node1", 0), ("node0", 1), ("node2", 2)]


# ----------------------------------------------------------------------------- sizes and load balancing


def test_sizes_from_the_strategy():
    ctx, errors, _w = resolve(nodes(4, kimi_k3_strategy="multi_node_tp_pp"))
    assert errors == [] and ctx["sizes"] == {"tp": 4, "pp": 4, "dp": 1}
    ctx, errors, _w = resolve(nodes(4, kimi_k3_strategy="multi_node_dep"))
    assert errors == [] and ctx["sizes"] == {"tp": 1, "pp": 1, "dp": 16} and ctx["dp_local"] == 4
    assert ctx["lb_mode"] == "hybrid"
    ctx, errors, _w = resolve(nodes(4, kimi_k3_strategy="multi_node_tp_dp"))
    assert errors == [] and ctx["sizes"] == {"tp": 4, "pp": 1, "dp": 4} and ctx["dp_local"] == 1
    assert ctx["lb_mode"] == "internal"


def test_size_overrides_whose_product_is_wrong():
    _ctx, errors, _w = resolve(nodes(2, kimi_k3_tensor_parallel_size=4, kimi_k3_pipeline_parallel_size=3))
    p = only(errors, "kimi_k3_tensor_parallel_size/kimi_k3_pipeline_parallel_size/kimi_k3_data_parallel_size")
    assert p["host"] == "node0"
    assert p["message"] == "TP 4 x PP 3 x DP 1 = 12, but the cluster has 8 GPUs (2 nodes x 4)."


def test_size_overrides_whose_product_is_right():
    ctx, errors, _w = resolve(nodes(2, kimi_k3_tensor_parallel_size=4, kimi_k3_pipeline_parallel_size=2))
    assert errors == [] and ctx["sizes"] == {"tp": 4, "pp": 2, "dp": 1}


def test_dp_that_does_not_divide_over_the_nodes():
    _ctx, errors, _w = resolve(nodes(4, kimi_k3_strategy="multi_node_dep", kimi_k3_data_parallel_size=6,
                                     kimi_k3_tensor_parallel_size=2, kimi_k3_pipeline_parallel_size=1,
                                     kimi_k3_gpus_per_node=3))
    p = only(errors, "kimi_k3_data_parallel_size")
    assert p["message"] == "DP 6 does not divide over 4 nodes."


def test_single_node_tp_with_pp_or_dp():
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_tensor_parallel_size=4,
                                     kimi_k3_pipeline_parallel_size=2))
    p = only(errors, "kimi_k3_strategy")
    assert p["message"] == "single_node_tp uses tensor parallelism only."
    ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200"))
    assert errors == [] and ctx["sizes"] == {"tp": 8, "pp": 1, "dp": 1} and ctx["dp_local"] is None


@pytest.mark.parametrize("strategy, mode, message", [
    ("multi_node_dep", "external", "'external' is not available for multi_node_dep."),
    ("multi_node_tp", "internal", "is set but multi_node_tp has no data parallelism."),
])
def test_load_balancing_refusals(strategy, mode, message):
    _ctx, errors, _w = resolve(nodes(4, kimi_k3_strategy=strategy, kimi_k3_dp_lb_mode=mode))
    p = only(errors, "kimi_k3_dp_lb_mode")
    assert (p["host"], p["message"]) == ("node0", message)


def test_hybrid_load_balancing_with_one_rank_per_node():
    recipe = copy.deepcopy(RECIPE)
    recipe["strategies"]["multi_node_tp_dp"]["lb_modes"].append("hybrid")
    _ctx, errors, _w = resolve(nodes(4, kimi_k3_strategy="multi_node_tp_dp", kimi_k3_dp_lb_mode="hybrid"), recipe)
    p = only(errors, "kimi_k3_dp_lb_mode")
    assert p["message"] == "hybrid load balancing with one DP rank per node turns into external LB in vLLM."


def test_external_load_balancing_with_several_ranks_per_node():
    recipe = copy.deepcopy(RECIPE)
    recipe["strategies"]["multi_node_dep"]["lb_modes"].append("external")
    _ctx, errors, _w = resolve(nodes(4, kimi_k3_strategy="multi_node_dep", kimi_k3_dp_lb_mode="external"), recipe)
    p = only(errors, "kimi_k3_dp_lb_mode")
    assert p["message"] == ("external load balancing needs one DP rank per vllm serve, this layout has 4 per node.")


@pytest.mark.parametrize("strategy, mode", [("multi_node_dep", "internal"), ("multi_node_dep", "hybrid"),
                                            ("multi_node_tp_dp", "external"), ("multi_node_tp_dp", "internal")])
def test_load_balancing_accepted(strategy, mode):
    ctx, errors, _w = resolve(nodes(4, kimi_k3_strategy=strategy, kimi_k3_dp_lb_mode=mode))
    assert errors == [] and ctx["lb_mode"] == mode


def test_load_balancing_is_moot_when_the_strategy_does_not_fit():
    ctx, errors, _w = resolve(nodes(2, kimi_k3_strategy="multi_node_dep", kimi_k3_dp_lb_mode="external"))
    assert [e["variable"] for e in errors] == ["kimi_k3_strategy"] and ctx["lb_mode"] == "external"


# ----------------------------------------------------------------------------- interconnect and features


def test_interconnect_rules():
    listed = nodes(2, without=("kimi_k3_interconnect",))
    _ctx, errors, _w = resolve(listed)
    p = only(errors, "kimi_k3_interconnect")
    assert p["message"] == "is not set for a 2-node cluster."
    _ctx, errors, _w = resolve(nodes(2, kimi_k3_accelerator="b200"))
    p = only(errors, "kimi_k3_interconnect")
    assert (p["message"], p["fix"]) == ("multi-node NVLink needs GB200/GB300 NVL trays, not b200.",
                                        "use rdma between b200 nodes.")
    ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200"))
    assert errors == [] and ctx["interconnect"] is None


def test_all2all_kernel_is_the_recipes_for_expert_parallel_over_several_nodes():
    ctx, errors, _w = resolve(nodes(4, kimi_k3_strategy="multi_node_dep", kimi_k3_interconnect="rdma"))
    assert errors == []
    assert ctx["all2all_backend"] is not None
    assert ctx["all2all_backend"] == vendors.all2all_kernel(RECIPE, "nvidia", "rdma")
    ctx, errors, _w = resolve(nodes(4, kimi_k3_strategy="multi_node_tp", kimi_k3_interconnect="rdma"))
    assert errors == [] and ctx["all2all_backend"] is None


def test_socket_interface_warning_on_several_nodes_only():
    listed = nodes(2, without=("kimi_k3_socket_ifname",))
    _ctx, errors, warnings = resolve(listed)
    assert errors == [] and [(w["host"], w["variable"]) for w in warnings] == [("node0", "kimi_k3_socket_ifname")]
    listed = nodes(1, kimi_k3_accelerator="b200", without=("kimi_k3_socket_ifname",))
    assert resolve(listed)[2] == []


def test_features():
    ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200"))
    assert ctx["features"] == dict((k, v.get("default", False)) for k, v in RECIPE["features"].items())
    features = {"text_only": "yes", "reasoning": "off"}
    ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_features=features))
    assert errors == [] and ctx["features"]["text_only"] is True and ctx["features"]["reasoning"] is False
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_features={"telepathy": True}))
    p = only(errors, "kimi_k3_features")
    assert (p["message"], p["fix"]) == ("unknown feature 'telepathy'.",
                                        "use one of %s." % ", ".join(sorted(RECIPE["features"])))
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_features={"text_only": "maybe"}))
    assert only(errors, "kimi_k3_features")["fix"] == "use true or false."


def test_feature_rules_of_the_strategy():
    _ctx, errors, _w = resolve(nodes(4, kimi_k3_strategy="multi_node_tp_pp", kimi_k3_features={"spec_decoding": True}))
    assert only(errors, "kimi_k3_features")["message"] == "spec_decoding is not allowed with multi_node_tp_pp."
    _ctx, errors, _w = resolve(nodes(2, kimi_k3_features={"dcp": True}))
    assert only(errors, "kimi_k3_features")["message"] == "dcp is only available with single_node_tp."
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_gpus_per_node=4,
                                     kimi_k3_features={"dcp": True}))
    assert [e["message"] for e in errors if e["variable"] == "kimi_k3_features"] == [
        "DCP size 8 does not divide TP 4."]
    ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_features={"dcp": True}))
    assert [e for e in errors if e["variable"] == "kimi_k3_features"] == [] and ctx["features"]["dcp"] is True


# ----------------------------------------------------------------------------- ports and addresses


def test_ports_default_to_the_recipes():
    ctx, errors, _w = resolve(nodes(2))
    assert ctx["ports"] == dict((k, RECIPE["defaults"][k]) for k in ("api_port", "master_port", "dp_rpc_port"))


def test_port_clashes_that_matter_for_the_launch():
    master = RECIPE["defaults"]["master_port"]
    rpc = RECIPE["defaults"]["dp_rpc_port"]
    _ctx, errors, _w = resolve(nodes(2, kimi_k3_api_port=master))
    p = only(errors, "kimi_k3_master_port")
    assert p["message"] == "port %d is also kimi_k3_api_port." % master
    # the RPC port is not used by an mp launch, the rendezvous port not by a dp launch
    assert resolve(nodes(2, kimi_k3_api_port=rpc))[1] == []
    assert resolve(nodes(4, kimi_k3_strategy="multi_node_dep", kimi_k3_api_port=master))[1] == []
    _ctx, errors, _w = resolve(nodes(4, kimi_k3_strategy="multi_node_dep", kimi_k3_api_port=rpc))
    assert only(errors, "kimi_k3_dp_rpc_port")["message"] == "port %d is also kimi_k3_api_port." % rpc


def test_two_nodes_with_one_address():
    _ctx, errors, _w = resolve(nodes(3, host_vars={2: {"ansible_host": "10.9.0.1"}}))
    p = only(errors, "kimi_k3_internal_address")
    assert (p["host"], p["message"]) == ("node2", "10.9.0.1 is also the address of node0.")


# ----------------------------------------------------------------------------- user arguments and environment


def test_extra_args_that_the_plan_derives_are_refused_with_the_recipes_fix():
    extra_args = ["--tensor-parallel-size", "4"]
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_extra_args=extra_args))
    p = only(errors, "kimi_k3_extra_args")
    assert (p["host"], p["message"], p["fix"]) == (
        "node0", "--tensor-parallel-size must not be passed by hand: the plan derives it.",
        RECIPE["reserved_args"]["--tensor-parallel-size"] + ".")
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200",
                                     kimi_k3_extra_args=["--data-parallel-address=10.0.0.1"]))
    p = only(errors, "kimi_k3_extra_args")
    assert p["message"] == "--data-parallel-address must not be passed by hand: the plan derives it."
    assert p["fix"] == RECIPE["reserved_arg_prefixes"]["--data-parallel"] + "."


def test_extra_args_with_a_control_character():
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_extra_args=["--max-num-seqs\n", "8"]))
    p = only(errors, "kimi_k3_extra_args")
    assert p["message"] == "item 1 contains a control character."
    assert (p["host"], p["fix"]) == ("node0", "remove the newline/tab from the item.")


# split_units already cuts "--x=v"; a short option keeps its "=v" ("-tp=4", which argparse accepts too)
@pytest.mark.parametrize("item", ["--tensor-parallel-size=4", "--tensor-parallel-size=4=4", "--port=8000", "-tp=4",
                                  "-tp=4=4"])
def test_a_derived_flag_is_recognised_by_the_name_before_the_first_equals_sign(item):
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_extra_args=[item]))
    name = item.split("=")[0]
    assert only(errors, "kimi_k3_extra_args")["message"] == "%s must not be passed by hand: the plan derives it." % name


def test_extra_args_are_still_judged_when_the_vllm_version_has_no_flag_snapshot():
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_vllm_version="0.0.1",
                                     kimi_k3_extra_args=["--port", "8000"]))
    assert "kimi_k3_vllm_version" in [e["variable"] for e in errors]
    assert only(errors, "kimi_k3_extra_args")["message"] == "--port must not be passed by hand: the plan derives it."


def test_free_extra_args_pass_and_are_kept():
    ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_extra_args=["--max-num-seqs", "8"]))
    assert errors == [] and ctx["extra_args"] == ["--max-num-seqs", "8"]
    ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200"))
    assert ctx["extra_args"] == []


def test_extra_env_is_cleaned_to_strings():
    ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200",
                                    kimi_k3_extra_env={"NCCL_DEBUG": "INFO", "MY_FLAG": True, "N": 3}))
    assert errors == [] and ctx["extra_env"] == {"NCCL_DEBUG": "INFO", "MY_FLAG": "1", "N": "3"}
    ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200"))
    assert ctx["extra_env"] == {}


def test_extra_env_refusals():
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_extra_env={"VLLM_MOE_DP_CHUNK_SIZE": 1}))
    p = only(errors, "kimi_k3_extra_env")
    assert (p["message"], p["fix"]) == ("VLLM_MOE_DP_CHUNK_SIZE no longer exists in vLLM.",
                                        RECIPE["removed_env"]["VLLM_MOE_DP_CHUNK_SIZE"] + ".")
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_extra_env={"HF_TOKEN": "x"}))
    p = only(errors, "kimi_k3_extra_env")
    assert p["message"] == "HF_TOKEN is a secret and would land in the plan file and the container's configuration."
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_extra_env={"A": "x\ny"}))
    p = only(errors, "kimi_k3_extra_env")
    assert (p["host"], p["message"]) == ("node0", "A contains a control character (it would break the env file).")


def test_every_bad_extra_env_entry_is_reported_not_only_the_first():
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200",
                                     kimi_k3_extra_env={"1BAD": "x", "HF_TOKEN": "y", "GOOD": "z"}))
    assert [e["message"] for e in errors if e["variable"] == "kimi_k3_extra_env"] == [
        "key '1BAD' is not an environment variable name.",
        "HF_TOKEN is a secret and would land in the plan file and the container's configuration."]


def test_extra_env_with_a_recipe_that_removed_nothing():
    recipe = copy.deepcopy(RECIPE)
    del recipe["removed_env"]
    ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_extra_env={"NCCL_DEBUG": "INFO"}), recipe)
    assert errors == [] and ctx["extra_env"] == {"NCCL_DEBUG": "INFO"}


def test_a_port_on_the_nixl_side_channel_is_refused_naming_the_side_channel():
    def ports(master_port):
        settings = {"api_port": 5557, "master_port": master_port, "dp_rpc_port": None}
        role = {"kv_side_channel_port": 5557}
        return types.SimpleNamespace(where="node0", launch="mp", role_spec=role,
                                     ports=plan_resolve._ports(settings, role, RECIPE["defaults"]))
    errors = checks.check_ports(ports(None))
    assert [(e["variable"], e["message"]) for e in errors] == [
        ("kimi_k3_api_port", "port 5557 is also VLLM_NIXL_SIDE_CHANNEL_PORT (the NIXL side channel).")]
    errors = checks.check_ports(ports(5557))
    pairs = [(e["variable"], e["message"]) for e in errors]
    assert pairs[1] == ("kimi_k3_master_port", "port 5557 is also kimi_k3_api_port.")


# ----------------------------------------------------------------------------- API exposure, model, host names


def test_api_access_modes():
    ctx, errors, _w = resolve(nodes(2))
    assert ctx["api_access"] == "api_key" and errors == []
    listed = nodes(2, kimi_k3_api_host="127.0.0.1", without=("kimi_k3_api_key",))
    ctx, errors, _w = resolve(listed)
    assert ctx["api_access"] == "loopback" and errors == []


def test_an_exposed_api_without_a_key_leaves_out_the_nodes_bound_to_loopback():
    listed = nodes(4, {1: {"kimi_k3_api_host": "127.0.0.1"}}, kimi_k3_strategy="multi_node_dep",
                   without=("kimi_k3_api_key",))
    _ctx, errors, _w = resolve(listed)
    assert only(errors, "kimi_k3_api_key")["message"] == (
        "is not set (or empty), but these nodes would serve the API without authentication on "
        "node0 (0.0.0.0), node2 (0.0.0.0), node3 (0.0.0.0).")
    listed = nodes(4, {1: {"kimi_k3_api_host": "127.0.0.1"}, 2: {"kimi_k3_api_host": "::1"}},
                   kimi_k3_strategy="multi_node_dep", without=("kimi_k3_api_key",))
    _ctx, errors, _w = resolve(listed)
    assert only(errors, "kimi_k3_api_key")["message"] == (
        "is not set (or empty), but these nodes would serve the API without authentication on "
        "node0 (0.0.0.0), node3 (0.0.0.0).")


def test_an_unknown_variant_still_names_the_default_model_in_the_revision_refusal():
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_variant="bogus",
                                     without=("kimi_k3_model_revision",)))
    assert "kimi_k3_variant" in [e["variable"] for e in errors]
    model = RECIPE["variants"]["default"]["model"]
    assert only(errors, "kimi_k3_model_revision")["message"] == (
        "is not set, so --trust-remote-code would run whatever code %s holds at start-up." % model)


def test_an_exposed_api_without_a_key_names_the_nodes():
    listed = nodes(4, kimi_k3_strategy="multi_node_dep", without=("kimi_k3_api_key",))
    ctx, errors, _w = resolve(listed)
    p = only(errors, "kimi_k3_api_key")
    assert ctx["api_access"] == "unauthenticated" and p["host"] == "node0"
    assert p["message"] == ("is not set (or empty), but these nodes would serve the API without authentication on "
                            "node0 (0.0.0.0), node1 (0.0.0.0), node2 (0.0.0.0), node3 (0.0.0.0).")
    listed = nodes(2, without=("kimi_k3_api_key",))
    ctx, errors, _w = resolve(listed)
    assert only(errors, "kimi_k3_api_key")["message"] == (
        "is not set (or empty), but this node would serve the API without authentication on node0 (0.0.0.0).")
    listed = nodes(2, kimi_k3_allow_unauthenticated_api=True, without=("kimi_k3_api_key",))
    ctx, errors, _w = resolve(listed)
    assert errors == [] and ctx["api_access"] == "unauthenticated"


def test_serves_http_by_role_and_load_balancing():
    ctx, _e, _w = resolve(nodes(4, kimi_k3_strategy="multi_node_dep"))
    assert [addresses.serves_http(ctx, n) for n in ctx["nodes"]] == [True, True, True, True]
    ctx, _e, _w = resolve(nodes(4, kimi_k3_strategy="multi_node_dep", kimi_k3_dp_lb_mode="internal"))
    assert [addresses.serves_http(ctx, n) for n in ctx["nodes"]] == [True, False, False, False]
    ctx, _e, _w = resolve(nodes(2))
    assert [addresses.serves_http(ctx, n) for n in ctx["nodes"]] == [True, False]


def test_remote_code_needs_a_revision():
    listed = nodes(1, kimi_k3_accelerator="b200", without=("kimi_k3_model_revision",))
    _ctx, errors, _w = resolve(listed)
    p = only(errors, "kimi_k3_model_revision")
    assert p["message"] == ("is not set, so --trust-remote-code would run whatever code moonshotai/Kimi-K3 holds "
                            "at start-up.")
    assert "huggingface.co/moonshotai/Kimi-K3/commits" in p["fix"]
    listed = nodes(1, kimi_k3_accelerator="b200", kimi_k3_variant="nvfp4", without=("kimi_k3_model_revision",))
    assert "RedHatAI/Kimi-K3-NVFP4" in only(resolve(listed)[1], "kimi_k3_model_revision")["message"]
    listed = nodes(1, kimi_k3_accelerator="b200", kimi_k3_allow_unpinned_remote_code=True, without=("kimi_k3_model_revision",))
    assert resolve(listed)[1] == []


def test_a_bad_ansible_host_is_refused_as_the_internal_address():
    ctx, errors, _w = resolve(nodes(2, host_vars={1: {"ansible_host": "10.0.0.1/24"}}))
    p = only(errors, "ansible_host")
    assert p["host"] == "node1"
    assert p["message"].endswith(" (it is the node's internal address while kimi_k3_internal_address is unset)")
    assert p["fix"] == "set kimi_k3_internal_address on node1 to its cluster-internal IP or host name."
    ctx, errors, _w = resolve(nodes(2, host_vars={1: {"ansible_host": "10.0.0.1/24",
                                                      "kimi_k3_internal_address": "10.0.0.2"}}))
    assert errors == []


@pytest.mark.parametrize("host, ok", [("tray-01.example", True), ("a_b@c", True), ("9x", True), ("a/b", False),
                                      (".hidden", False), ("-x", False), ("..", False), ("a b", False)])
def test_host_names(host, ok):
    listed = nodes(2)
    listed[1]["host"] = host
    _ctx, errors, _w = resolve(listed)
    found = [e for e in errors if e["variable"] == "inventory_hostname"]
    assert (found == []) is ok, errors


# ----------------------------------------------------------------------------- version and flag values


def test_a_release_below_the_recipes_floor():
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_vllm_version="0.26.0"))
    p = only(errors, "kimi_k3_vllm_version")
    floor = RECIPE["min_vllm_version"]
    assert (p["host"], p["message"], p["fix"]) == (
        "node0", "vLLM 0.26.0 cannot run Kimi-K3 (needs >= %s)." % floor, "use an image with vLLM >= %s." % floor)


def test_a_release_without_a_flag_snapshot_names_the_known_ones():
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_vllm_version="0.31.0"))
    p = only(errors, "kimi_k3_vllm_version")
    assert p["message"] == "no flag snapshot for vLLM 0.31.0, so its arguments cannot be checked."
    known = sorted(SNAPSHOTS, key=lambda v: tuple(int(x) for x in v.split(".")))
    assert p["fix"] == ("use one of %s, or add data/vllm_flags/vllm-0.31.0.json with scripts/dump_vllm_flags.py."
                        % ", ".join(known))


def test_the_floor_release_itself_is_accepted():
    floor = RECIPE["min_vllm_version"]
    ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_vllm_version=floor))
    assert [e for e in errors if e["variable"] == "kimi_k3_vllm_version"] == []
    assert ctx["vllm_version"] == floor and ctx["snapshot"] is SNAPSHOTS[floor]


def test_a_flag_value_the_release_does_not_accept():
    ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_kv_cache_dtype="fp8e4m3"))
    p = only(errors, "kimi_k3_kv_cache_dtype")
    choices = SNAPSHOTS["0.28.0"]["flags"]["--kv-cache-dtype"]["choices"]
    assert (p["host"], p["message"], p["fix"]) == (
        "node0", "fp8e4m3 is not a --kv-cache-dtype value vLLM 0.28.0 accepts.",
        "use one of %s (vLLM 0.28.0)." % ", ".join(str(c) for c in choices))
    assert "kv_cache_dtype" in ctx["invalid"]


def test_a_flag_value_the_release_accepts():
    ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_kv_cache_dtype="fp8"))
    assert errors == [] and "kv_cache_dtype" not in ctx["invalid"]


# ----------------------------------------------------------------------------- second round (survivors of the rerun)


def test_snapshots_are_listed_in_release_order_not_text_order():
    snapshots = dict(SNAPSHOTS, **{"0.100.0": SNAPSHOTS["0.28.0"]})
    errors = checks.validate(nodes(1, kimi_k3_accelerator="b200", kimi_k3_vllm_version="0.31.0"), RECIPE, snapshots)[1]
    fix = only(errors, "kimi_k3_vllm_version")["fix"]
    assert fix.startswith("use one of %s, 0.100.0, or add" % ", ".join(
        sorted(SNAPSHOTS, key=lambda v: tuple(int(x) for x in v.split(".")))))


def test_head_listed_second_with_rank_one_is_refused_and_put_first():
    ctx, errors, _w = resolve(_ranked([0, 1, 2], head=1))
    assert (only(errors, "kimi_k3_node_rank")["host"]) == "node1"
    assert [n["host"] for n in ctx["nodes"]] == ["node1", "node0", "node2"]


def test_a_bad_env_name_is_shown_in_the_message():
    from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import variables as plan_variables
    message, _fix = extras.env_entry_problem("1ABC", "1")
    assert message == "key %s is not an environment variable name." % plan_variables.show("1ABC")


def test_feature_defaults_and_the_checks_after_an_unknown_feature():
    recipe = copy.deepcopy(RECIPE)
    del recipe["features"]["text_only"]["default"]
    ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200"), recipe)
    assert ctx["features"]["text_only"] is False and errors == []
    # an unknown feature does not stop the check of the next one
    features = {"telepathy": True, "text_only": "maybe"}
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_features=features))
    found = [(e["host"], e["fix"]) for e in errors if e["variable"] == "kimi_k3_features"]
    assert found == [("node0", "use one of %s." % ", ".join(sorted(RECIPE["features"]))),
                     ("node0", "use true or false.")]


def test_feature_refusals_name_the_head_and_the_fix():
    _ctx, errors, _w = resolve(nodes(4, kimi_k3_strategy="multi_node_tp_pp", kimi_k3_features={"spec_decoding": True}))
    p = only(errors, "kimi_k3_features")
    assert (p["host"], p["fix"]) == ("node0", "turn spec_decoding off or pick another strategy.")
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_gpus_per_node=4,
                                     kimi_k3_features={"dcp": True}))
    p = only(errors, "kimi_k3_features")
    assert (p["host"], p["fix"]) == ("node0", "use TP 8 on one 8-GPU node or turn dcp off.")


def test_image_refusals_name_the_head_and_a_recipe_without_vendor_markers():
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_image="vllm/vllm-openai@sha256:abc"))
    assert only(errors, "kimi_k3_image")["host"] == "node0"
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="mi355x", kimi_k3_image=NV_IMAGE))
    assert only(errors, "kimi_k3_image")["host"] == "node0"
    recipe = copy.deepcopy(RECIPE)
    del recipe["image_vendor_markers"]
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="mi355x", kimi_k3_image=ROCM_IMAGE), recipe)
    assert [e["message"] for e in errors if e["variable"] == "kimi_k3_image"] == [
        "%r is not a ROCm image but the nodes are AMD (mi355x)." % ROCM_IMAGE]
    recipe["image_vendor_markers"] = {}
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_image=ROCM_IMAGE), recipe)
    assert [e for e in errors if e["variable"] == "kimi_k3_image"] == []


def test_an_invalid_image_value_is_one_problem():
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_image=["vllm/vllm-openai"]))
    assert [e["variable"] for e in errors] == ["kimi_k3_image"], errors


def test_the_socket_interface_warning_says_what_to_set():
    _ctx, _e, warnings = resolve(nodes(2, without=("kimi_k3_socket_ifname",)))
    assert [w["fix"] for w in warnings] == ["set the cluster-internal interface name, e.g. bond0."]


def test_load_balancing_refusals_name_the_head_and_the_fix():
    recipe = copy.deepcopy(RECIPE)
    recipe["strategies"]["multi_node_dep"]["lb_modes"].append("external")
    _ctx, errors, _w = resolve(nodes(4, kimi_k3_strategy="multi_node_dep", kimi_k3_dp_lb_mode="external"), recipe)
    p = only(errors, "kimi_k3_dp_lb_mode")
    assert (p["host"], p["fix"]) == ("node0", "use hybrid or internal load balancing.")
    recipe["strategies"]["multi_node_tp_dp"]["lb_modes"].append("hybrid")
    _ctx, errors, _w = resolve(nodes(4, kimi_k3_strategy="multi_node_tp_dp", kimi_k3_dp_lb_mode="hybrid"), recipe)
    p = only(errors, "kimi_k3_dp_lb_mode")
    assert (p["host"], p["fix"]) == ("node0", "set kimi_k3_dp_lb_mode: external (one endpoint per node) or internal.")


def test_a_dp_strategy_without_load_balancing_modes_refuses_every_mode():
    recipe = copy.deepcopy(RECIPE)
    del recipe["strategies"]["multi_node_dep"]["lb_modes"]
    _ctx, errors, _w = resolve(nodes(4, kimi_k3_strategy="multi_node_dep", kimi_k3_dp_lb_mode="internal"), recipe)
    p = only(errors, "kimi_k3_dp_lb_mode")
    assert (p["message"], p["fix"]) == ("'internal' is not available for multi_node_dep.", "use one of .")


def test_single_node_tp_with_pp_and_dp_that_cancel_out_is_still_refused():
    _ctx, errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200", kimi_k3_tensor_parallel_size=2,
                                     kimi_k3_pipeline_parallel_size=2, kimi_k3_data_parallel_size=2))
    p = only(errors, "kimi_k3_strategy")
    assert (p["host"], p["message"], p["fix"]) == (
        "node0", "single_node_tp uses tensor parallelism only.",
        "drop kimi_k3_pipeline_parallel_size / kimi_k3_data_parallel_size.")


def test_dp_that_does_not_divide_names_the_head_and_the_fix():
    _ctx, errors, _w = resolve(nodes(4, kimi_k3_strategy="multi_node_dep", kimi_k3_data_parallel_size=6,
                                     kimi_k3_tensor_parallel_size=2, kimi_k3_pipeline_parallel_size=1,
                                     kimi_k3_gpus_per_node=3))
    p = only(errors, "kimi_k3_data_parallel_size")
    assert (p["host"], p["fix"]) == ("node0", "use a multiple of the node count.")


def test_unknown_accelerator_with_explicit_gpu_count_never_names_a_none_node():
    from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import topology
    r = topology.build_cluster_plan(nodes(2, kimi_k3_accelerator="gb999", kimi_k3_gpus_per_node=1), RECIPE, SNAPSHOTS)
    assert not r["ok"]
    assert any(e["variable"] == "kimi_k3_accelerator" for e in r["errors"]), r["errors"]
    texts = [topology.format_problem(e) for e in r["errors"]]
    assert not any("None" in t for t in texts), texts


def test_an_inventory_host_that_is_no_address_is_refused_as_the_internal_address_it_stands_for():
    _ctx, errors, _w = resolve(nodes(2, {1: {"ansible_host": "bad host!"}}))
    p = only(errors, "ansible_host")
    assert (p["host"], p["message"], p["fix"]) == (
        "node1", "'bad host!' is not an IPv4/IPv6 address or a host name, without prefix length (/24), port (:8000) "
        "or brackets (it is the node's internal address while kimi_k3_internal_address is unset)",
        "set kimi_k3_internal_address on node1 to its cluster-internal IP or host name.")


@pytest.mark.parametrize("host", ["GB300-Tray01", "node_7", "Rack2.Tray04", "_x", "9node@site"])
def test_host_names_in_either_case_are_file_names(host):
    listed = nodes(1, kimi_k3_accelerator="b200")
    listed[0]["host"] = host
    _ctx, errors, _w = resolve(listed)
    assert errors == []


@pytest.mark.parametrize("host", [".", "..", ".hidden", "-dash", "a/b", "tab\there", ""])
def test_host_names_that_are_no_file_names_are_refused(host):
    listed = nodes(1, kimi_k3_accelerator="b200")
    listed[0]["host"] = host
    _ctx, errors, _w = resolve(listed)
    assert "inventory_hostname" in [e["variable"] for e in errors]


def test_the_deployment_kind_defaults_to_single_alone_and_replica_among_several():
    settings = {"deployment_kind": None, "strategy": None}
    assert plan_resolve.deployment_kind(settings, RECIPE, False) == ("single", RECIPE["deployment_kinds"]["single"])
    assert plan_resolve.deployment_kind(settings, RECIPE, True) == ("replica", RECIPE["deployment_kinds"]["replica"])
    chosen = dict(settings, deployment_kind="decode")
    assert plan_resolve.deployment_kind(chosen, RECIPE, True)[0] == "decode"
    role = RECIPE["deployment_kinds"]["decode"]
    assert plan_resolve._strategy(chosen, RECIPE, role)["strategy_name"] == role["strategies"][0]
    assert chosen["strategy"] is None  # resolving reads the settings, it never writes them
    ctx, _errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200"))
    assert (ctx["kind"], ctx["role_spec"]) == ("single", RECIPE["deployment_kinds"]["single"])


def test_an_inventory_without_nodes_is_refused_at_cluster_level_without_a_traceback():
    ctx, errors, _w = resolve([])
    assert (ctx["head"], ctx["where"], ctx["deployment"]) == (None, "vllm_cluster", "main")
    assert ("vllm_cluster", "kimi_k3_accelerator", "is not set.") in [
        (e["host"], e["variable"], e["message"]) for e in errors]


def test_one_deployment_is_named_after_the_recipe_default():
    ctx, _errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200"))
    assert ctx["deployment"] == RECIPE["defaults"]["deployment"] == "main"
    recipe = copy.deepcopy(RECIPE)
    recipe["defaults"]["deployment"] = "solo"
    ctx, _errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200"), recipe)
    assert ctx["deployment"] == "solo"
    del recipe["defaults"]["deployment"]
    ctx, _errors, _w = resolve(nodes(1, kimi_k3_accelerator="b200"), recipe)
    assert ctx["deployment"] == "main"
