"""Ranking for a target, kimi_k3_strategy: auto (golden: the same plan as naming the chosen strategy), bad input
refused with a named problem, and the property that every row is the plan of its layout."""
import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import layouts
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import render as plan_render
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import topology

RECIPE = recipe_data.load_recipe()
# the plan renders each candidate (layouts takes the renderer as an argument: no import cycle)
BUILD = topology.build_cluster_plan
SNAPSHOTS = recipe_data.load_snapshots()
TARGET = {"max_model_len": 131072, "concurrency": 64, "objective": "throughput"}


def _nodes(acc, n, **extra):
    nodes, problem = layouts.hardware_nodes({"accelerator": acc, "nodes": n}, RECIPE)
    assert problem is None
    for node in nodes:
        node["vars"].update(extra)
    return nodes


def _report(acc, n, target):
    return layouts.enumerate_for_hardware({"accelerator": acc, "nodes": n}, RECIPE, SNAPSHOTS, target=target, build=BUILD)


# ----------------------------------------------------------------------------- ranking


def test_throughput_ranks_by_admitted_sessions_at_the_target_length():
    r = _report("gb300", 4, TARGET)
    ranked = [row["layout"] for row in r["layouts"] if row["status"] == "ok"]
    # 128k: DEP16 695.34, TP4 x PP4 336.15, TP16 = TEP16 96.21 (TP before TEP in the recipe order), 2 x TP8 85.14,
    # 2 x TEP8, then the PD split whose decode DEP8 holds 21.31, short of 64.
    assert ranked == ["multi_node_dep", "multi_node_tp_pp", "multi_node_tp", "multi_node_tep", "2 x multi_node_tp",
                      "2 x multi_node_tep", "PD multi_node_tep x2 + multi_node_dep x2"]
    pd = [row for row in r["layouts"] if row["layout"].startswith("PD multi_node_tep x2")][0]
    assert pd["short_by"] == 42.69 and pd["reason"].startswith("short of the target 64 by 42.69")
    assert r["best"]["reason"].startswith("no published throughput figure for gb300 in the recipe data")
    assert "holds 695.34 sequences of 131,072 tokens" in r["best"]["reason"]


def test_latency_ranks_by_the_recipe_order_among_layouts_that_hold_the_target():
    r = _report("gb300", 4, dict(TARGET, objective="latency"))
    ranked = [row["layout"] for row in r["layouts"] if row["status"] == "ok"]
    assert ranked[:4] == ["multi_node_tp", "2 x multi_node_tp", "multi_node_tep", "2 x multi_node_tep"]
    assert ranked[-1].startswith("PD ")  # short of the target: last whatever the order
    assert r["best"]["reason"].endswith("ranked by the recipe's strategy order, then capacity: multi_node_tp is #2 in "
                                        "the recipe's strategy order; holds 96.21 sequences of 131,072 tokens")


def test_a_published_figure_ranks_first_and_is_cited():
    recipe = copy.deepcopy(RECIPE)
    recipe["layouts"]["figures"] = [{"hardware": "gb300", "layout": "multi_node_tep", "gpus": 16,
                                     "metric": "throughput", "value": 1000, "unit": "tok/s/GPU", "source": "test"}]
    r = layouts.enumerate_for_hardware({"accelerator": "gb300", "nodes": 4}, recipe, SNAPSHOTS, target=TARGET, build=BUILD)
    assert r["best"]["layout"] == "multi_node_tep"
    assert "published throughput 1000 tok/s/GPU (test)" in r["best"]["reason"]


def test_mi355x_two_nodes_best_is_dep16_and_pd_is_refused_with_the_vendor_reason():
    r = _report("mi355x", 2, TARGET)
    assert r["best"]["layout"] == "multi_node_dep"
    assert r["best"]["deployments"][0]["all2all_backend"] == "mori_high_throughput"
    pd = [row for row in r["layouts"] if row["kind"] == "pd"]
    assert pd and all(any("not offered on amd nodes" in e for e in row["refusal"]) for row in pd)


def test_markdown_and_json_of_the_report():
    r = _report("gb300", 4, TARGET)
    md = layouts.markdown(r)
    assert md.startswith("# Kimi-K3 layouts: 4 x gb300 (4 GPUs per node, nvlink)")
    assert "| 1 | multi_node_dep | TP1 PP1 DP16 EP16 x4 nodes | 16 | 164.15 | 91.52 |" in md
    plain = layouts.plain(r)
    assert "problems" not in plain["layouts"][0] and plain["best"]["layout"] == "multi_node_dep"
    assert plain["layouts"][0]["columns"]["131072"] == 695.34


# ----------------------------------------------------------------------------- bad input


def test_bad_input_is_a_named_refusal_never_a_traceback():
    for hardware in ({"accelerator": "gb301", "nodes": 2}, {"accelerator": "gb300", "nodes": 0},
                     {"accelerator": "gb300", "nodes": "four"}, {"accelerator": "gb300", "nodes": True}, None, []):
        r = layouts.enumerate_for_hardware(hardware, RECIPE, SNAPSHOTS, build=BUILD)
        assert not r["ok"] and r["errors"][0]["message"] and r["errors"][0]["fix"]
    for target in ({"objective": "fast"}, {"concurrency": -1}, {"max_model_len": "128k"}, {"context": 1}, "latency",
                   [1]):
        r = _report("gb300", 2, target)
        assert not r["ok"] and r["errors"][0]["variable"] == "kimi_k3_target", target
        assert "Fix" in plan_render.format_problem(r["errors"][0])
    assert not layouts.enumerate_layouts([], RECIPE, SNAPSHOTS)["ok"]


# ----------------------------------------------------------------------------- kimi_k3_strategy: auto


def _without_choice(result):
    cluster = dict(result["cluster"])
    cluster.pop("strategy_choice", None)
    return result["plans"], cluster


def test_auto_renders_the_same_plan_as_naming_the_chosen_strategy():
    for acc, n, chosen in (("gb300", 4, "multi_node_dep"), ("mi355x", 2, "multi_node_dep"),
                           ("gb300", 2, "multi_node_tp"), ("mi355x", 1, "single_node_tp")):
        auto = topology.build_cluster_plan(_nodes(acc, n, kimi_k3_strategy="auto", kimi_k3_target=TARGET), RECIPE,
                                           SNAPSHOTS)
        named = topology.build_cluster_plan(_nodes(acc, n, kimi_k3_strategy=chosen, kimi_k3_target=TARGET), RECIPE,
                                            SNAPSHOTS)
        assert auto["ok"] and named["ok"], auto["errors"] + named["errors"]
        assert _without_choice(auto) == _without_choice(named)
        choice = auto["cluster"]["strategy_choice"]
        assert [c["strategy"] for c in choice] == [chosen] and "strategy_choice" not in named["cluster"]
        assert "auto chose %s for throughput: " % chosen in plan_render.summary_table(auto)


def test_auto_for_latency_and_an_explicit_strategy_still_wins():
    auto = topology.build_cluster_plan(_nodes("gb300", 4, kimi_k3_strategy="auto",
                                              kimi_k3_target=dict(TARGET, objective="latency")), RECIPE, SNAPSHOTS)
    assert auto["cluster"]["strategy"] == "multi_node_tp"
    named = topology.build_cluster_plan(_nodes("gb300", 4, kimi_k3_strategy="multi_node_tp_pp",
                                               kimi_k3_target=TARGET), RECIPE, SNAPSHOTS)
    assert named["cluster"]["strategy"] == "multi_node_tp_pp"


def test_auto_refusals_name_the_variable():
    bad = topology.build_cluster_plan(_nodes("gb300", 2, kimi_k3_strategy="auto",
                                             kimi_k3_target={"objective": "cheap"}), RECIPE, SNAPSHOTS)
    assert not bad["ok"] and bad["errors"][0]["variable"] == "kimi_k3_target"
    none = topology.build_cluster_plan(_nodes("gb300", 1, kimi_k3_strategy="auto"), RECIPE, SNAPSHOTS)
    assert not none["ok"] and none["errors"][0]["message"].startswith("auto: no strategy renders on these 1 node(s)")
    pd = _nodes("gb300", 2, kimi_k3_strategy="auto", kimi_k3_deployment="prefill-1", kimi_k3_deployment_kind="prefill")
    refused = topology.build_cluster_plan(pd, RECIPE, SNAPSHOTS)
    assert not refused["ok"] and "a prefill deployment takes the recipe's" in refused["errors"][0]["message"]


# ----------------------------------------------------------------------------- property: a row is the plan


def _inventory(base, groups, length):
    """The inventory of a row's node groups, written out the way an operator would (independently of apply)."""
    out, i = [], 0
    for deployment, kind, strategy, count in groups:
        for j in range(count):
            v = dict(base[i]["vars"], kimi_k3_strategy=strategy)
            if deployment:
                v.update(kimi_k3_deployment=deployment, kimi_k3_deployment_kind=kind)
            if length:
                v["kimi_k3_max_model_len"] = length
            out.append({"host": base[i]["host"], "head": j == 0, "vars": v})
            i += 1
    return out


ROUTER_IMAGE = "registry.example/vllm-router@sha256:" + "0" * 64
ROUTER = [{"host": "r", "head": False, "vars": {"ansible_host": "10.255.0.1", "kimi_k3_router_image": ROUTER_IMAGE}}]
HARDWARE = st.fixed_dictionaries({
    "accelerator": st.sampled_from(["gb300", "gb200", "b300", "b200", "h200", "mi355x", "mi350x"]),
    "nodes": st.integers(1, 5)}, optional={"interconnect": st.sampled_from(["nvlink", "rdma"])})
TARGETS = st.none() | st.fixed_dictionaries({}, optional={
    "max_model_len": st.sampled_from([4096, 32768, 100000, 262144]), "concurrency": st.integers(1, 400),
    "objective": st.sampled_from(["latency", "throughput"])})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hardware=HARDWARE, target=TARGETS)
def test_every_row_is_what_the_plan_renders_or_refuses(hardware, target):
    report = layouts.enumerate_for_hardware(hardware, RECIPE, SNAPSHOTS, target=target, build=BUILD)
    assert report["ok"], report["errors"]
    base, _problem = layouts.hardware_nodes(hardware, RECIPE)
    for row in report["layouts"]:
        nodes = _inventory(base, row["groups"], (target or {}).get("max_model_len"))
        plan = topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS, ROUTER if row["kind"] != "single" else [])
        if row["status"] == "ok":
            assert plan["ok"], (row["layout"], plan["errors"])
            serving = [d for d in plan["cluster"]["deployments"] if d["kind"] != "prefill"]
            assert [d["strategy"] for d in serving] == [d["strategy"] for d in row["deployments"]]
            assert [d["capacity"]["per_gpu"]["kv_budget_gib"] for d in serving] == \
                [d["capacity"]["kv_budget_gib"] for d in row["deployments"]]
        else:
            assert not plan["ok"]
            assert [plan_render.format_problem(e) for e in plan["errors"]] == row["refusal"]
    if not report["best"]:
        return
    open_nodes = [dict(n, vars=dict(n["vars"], kimi_k3_strategy="auto", kimi_k3_target=target)) for n in base]
    # with a router host auto lays the nodes out as the best row of the whole table, and renders its plan
    laid = topology.build_cluster_plan(open_nodes, RECIPE, SNAPSHOTS, ROUTER)
    assert laid["ok"] and laid["cluster"]["strategy_choice"][0]["layout"] == report["best"]["layout"]
    named = topology.build_cluster_plan(_inventory(base, report["best"]["groups"], None), RECIPE, SNAPSHOTS, ROUTER)
    assert _without_choice(laid) == _without_choice(named)
    if report["best"]["kind"] == "single":
        auto = topology.build_cluster_plan(open_nodes, RECIPE, SNAPSHOTS)
        assert auto["ok"] and auto["cluster"]["strategy"] == report["best"]["layout"]


def test_auto_on_some_nodes_only_is_the_variable_checks_refusal():
    nodes = _nodes("gb300", 2, kimi_k3_strategy="multi_node_tp")
    nodes[1]["vars"]["kimi_k3_strategy"] = "auto"
    r = topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS)
    assert not r["ok"] and [e["variable"] for e in r["errors"]] == ["kimi_k3_strategy"]


def test_auto_with_a_router_host_lays_the_nodes_out_as_the_best_row():
    nodes = _nodes("cpu", 2, kimi_k3_strategy="auto")
    laid = topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS, ROUTER)
    (choice,) = laid["cluster"]["strategy_choice"]
    assert (choice["deployment"], choice["layout"], choice["kind"], choice["strategy"]) == \
        (None, "2 x single_node_tp", "fleet", "single_node_tp")
    assert [(d["name"], d["kind"], d["head"]) for d in laid["cluster"]["deployments"]] == \
        [("replica-1", "replica", "node-00"), ("replica-2", "replica", "node-01")]
    assert [c["layout"] for c in choice["candidates"]][:2] == ["2 x single_node_tp", "multi_node_tp"]
    assert "layout: auto chose 2 x single_node_tp for throughput: " in plan_render.summary_table(laid)
    # the same nodes without a router: a strategy over both, and the reason names the fleet it could not lay out
    alone = topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS)
    (choice,) = alone["cluster"]["strategy_choice"]
    assert (choice["deployment"], choice["layout"]) == ("main", "multi_node_tp")
    assert choice["reason"].endswith("; the table ranks 2 x single_node_tp higher (holds 3.82 sequences of 4,096 "
                                     "tokens), which auto lays out when the inventory has a vllm_router host and "
                                     "names no deployments")


def test_auto_keeps_an_inventory_that_names_its_deployments_and_a_best_single_layout():
    # grouped into replicas: each replica's strategy is chosen on its own nodes, the grouping stays
    nodes = _nodes("cpu", 2, kimi_k3_strategy="auto")
    for i, node in enumerate(nodes):
        node["head"] = True
        node["vars"].update(kimi_k3_deployment="replica-%d" % (i + 1), kimi_k3_deployment_kind="replica")
    grouped = topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS, ROUTER)
    assert grouped["ok"], grouped["errors"]
    assert [(c["deployment"], c["layout"]) for c in grouped["cluster"]["strategy_choice"]] == \
        [("replica-1", "single_node_tp"), ("replica-2", "single_node_tp")]
    assert "ranks" not in grouped["cluster"]["strategy_choice"][0]["reason"]  # nothing better it could not lay out
    # four GB300 trays with a router: DEP16 over all of them ranks first, so the inventory's head stays the head
    laid = topology.build_cluster_plan(_nodes("gb300", 4, kimi_k3_strategy="auto", kimi_k3_target=TARGET), RECIPE,
                                       SNAPSHOTS, ROUTER)
    named = topology.build_cluster_plan(_nodes("gb300", 4, kimi_k3_strategy="multi_node_dep",
                                               kimi_k3_target=TARGET), RECIPE, SNAPSHOTS, ROUTER)
    assert _without_choice(laid) == _without_choice(named)
    assert [(c["deployment"], c["layout"], c["kind"]) for c in laid["cluster"]["strategy_choice"]] == \
        [("main", "multi_node_dep", "single")]
