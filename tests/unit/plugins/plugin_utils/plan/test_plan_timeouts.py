"""Launch timeouts derived from the weight-read throughput (plan_timeouts) and their plumbing into the plan."""

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import timeouts as plan_timeouts
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data
from tests.unit.plugins.plugin_utils.plan.test_topology import ROCM_IMAGE, make_nodes, plan

POLICY = recipe_data.load_recipe()["timeouts"]
MIB = 2 ** 20
WEIGHTS, SHARD = 1560e9, 1560e9 / 96


@pytest.mark.parametrize("mib_s,engine,launch,stall", [
    # slow disk: 1560 GB / 200 MiB/s x 1.5 + 600 s = 11,758 s -> ceiling; one 16.25 GB shard: 116 s + 300 s
    (200, 3600, 3900, 417),
    # 2 GiB/s NVMe: 726.4 s x 1.5 + 600 = 1,689.7 s; launch + 300 s; shard 7.6 s x 1.5 + 300
    (2048, 1690, 1990, 312),
    # 10 GiB/s striped NVMe: 817.9 s -> engine floor 900, launch floor 1200, stall floor + 2.3 s
    (10240, 900, 1200, 303),
    # a RAM disk: at the floors (the stall window rounds 300.02 s up)
    (1000000, 900, 1200, 301),
])
def test_slow_and_fast_disks(mib_s, engine, launch, stall):
    t = plan_timeouts.derive(WEIGHTS, SHARD, mib_s * MIB, POLICY)
    assert (t["engine_ready_timeout_s"], t["launch_ready_timeout_s"], t["stall_timeout_s"]) == (engine, launch, stall)
    assert t["basis"] == "%d MiB/s weight read, 1560 GB weights" % mib_s


@pytest.mark.parametrize("rate", [None, 0, -5])
def test_without_a_measurement_every_value_is_its_ceiling(rate):
    t = plan_timeouts.derive(WEIGHTS, SHARD, rate, POLICY)
    assert (t["engine_ready_timeout_s"], t["launch_ready_timeout_s"], t["stall_timeout_s"]) == (3600, 3900, 900)


def test_the_slowest_node_gates_the_deployment():
    assert plan_timeouts.slowest([None, 900, 450, 2000]) == 450 and plan_timeouts.slowest([None]) is None


@settings(max_examples=300, deadline=None)
@given(rates=st.lists(st.floats(1.0, 1e11), min_size=2, max_size=2), weights=st.floats(1e6, 1e13))
def test_a_faster_disk_never_gets_a_longer_timeout_and_bounds_hold(rates, weights):
    slow, fast = sorted(rates)
    a, b = (plan_timeouts.derive(weights, weights / 96, r, POLICY) for r in (slow, fast))
    for key, section in (("engine_ready_timeout_s", "engine_ready"), ("launch_ready_timeout_s", "launch_ready"),
                         ("stall_timeout_s", "stall")):
        assert b[key] <= a[key]
        assert POLICY[section]["floor_s"] <= a[key] <= POLICY[section]["ceiling_s"]
    assert a["launch_ready_timeout_s"] >= a["engine_ready_timeout_s"]


def gb300(**extra):
    return make_nodes(2, kimi_k3_accelerator="gb300", kimi_k3_strategy="multi_node_tp", kimi_k3_interconnect="nvlink",
                      **extra)


def test_plan_renders_the_slowest_nodes_timeouts_on_every_node():
    r = plan(gb300(host_vars={0: {"kimi_k3_weight_read_mib_s": 10240}, 1: {"kimi_k3_weight_read_mib_s": 2048}}))
    assert r["ok"], r["errors"]
    for p in r["plans"].values():
        assert p["env"]["VLLM_ENGINE_READY_TIMEOUT_S"] == "1690"
        assert p["timeouts"] == {"engine_ready_timeout_s": 1690, "launch_ready_timeout_s": 1990,
                                 "stall_timeout_s": 312, "weight_read_mib_s": 2048,
                                 "basis": "2048 MiB/s weight read, 1560 GB weights"}
    assert r["cluster"]["timeouts"]["engine_ready_timeout_s"] == 1690


def test_mi355x_gets_the_engine_timeout_too():
    r = plan(make_nodes(1, kimi_k3_accelerator="mi355x", kimi_k3_strategy="single_node_tp", kimi_k3_image=ROCM_IMAGE,
                        host_vars={0: {"kimi_k3_weight_read_mib_s": 200}}))
    assert r["plans"]["node0"]["env"]["VLLM_ENGINE_READY_TIMEOUT_S"] == "3600"
    assert r["plans"]["node0"]["timeouts"]["stall_timeout_s"] == 417


def test_extra_env_keeps_the_operators_engine_timeout():
    r = plan(gb300(kimi_k3_extra_env={"VLLM_ENGINE_READY_TIMEOUT_S": "7200"},
                   host_vars={0: {"kimi_k3_weight_read_mib_s": 2048}}))
    assert r["plans"]["node0"]["env"]["VLLM_ENGINE_READY_TIMEOUT_S"] == "7200"


def test_a_measurement_that_is_not_a_number_is_refused():
    r = plan(gb300(host_vars={1: {"kimi_k3_weight_read_mib_s": "fast"}}))
    assert [(e["host"], e["variable"]) for e in r["errors"]] == [("node1", "kimi_k3_weight_read_mib_s")]


def test_a_slow_disk_names_each_timeout_the_ceiling_cut_short():
    # 1560e9 B / (200 x 2**20 B/s) = 7,438.6 s x 1.5 + 600 s = 11,757.9 s -> 11,758 s; launch + 300 s margin
    assert plan_timeouts.over_ceiling(WEIGHTS, SHARD, 200 * MIB, POLICY) == [
        {"timeout": "engine_ready_timeout_s", "derived_s": 11758, "ceiling_s": 3600},
        {"timeout": "launch_ready_timeout_s", "derived_s": 12058, "ceiling_s": 3900}]
    # 30 MiB/s: the 16.25 GB shard alone takes 516.6 s x 1.5 + 300 s = 1,074.9 s -> past the 900 s stall ceiling
    assert plan_timeouts.over_ceiling(WEIGHTS, SHARD, 30 * MIB, POLICY)[2] == {
        "timeout": "stall_timeout_s", "derived_s": 1075, "ceiling_s": 900}


@pytest.mark.parametrize("rate", [None, 0, -5, 2048 * MIB])
def test_no_shortfall_when_unmeasured_or_within_the_ceilings(rate):
    assert plan_timeouts.over_ceiling(WEIGHTS, SHARD, rate, POLICY) == []


@settings(max_examples=200, deadline=None)
@given(rate=st.floats(1.0, 1e11), weights=st.floats(1e6, 1e13))
def test_a_shortfall_is_reported_exactly_when_the_ceiling_clamps(rate, weights):
    derived = plan_timeouts.derive(weights, weights / 96, rate, POLICY)
    for item in plan_timeouts.over_ceiling(weights, weights / 96, rate, POLICY):
        assert item["derived_s"] > item["ceiling_s"] == derived[item["timeout"]]


def test_plan_warns_with_both_numbers_and_the_variable_to_set():
    r = plan(gb300(host_vars={0: {"kimi_k3_weight_read_mib_s": 200}}))
    assert r["ok"], r["errors"]
    assert r["plans"]["node0"]["env"]["VLLM_ENGINE_READY_TIMEOUT_S"] == "3600"
    short = [w for w in r["warnings"] if "ceiling" in w["message"]]
    assert [(w["host"], w["variable"]) for w in short] == [("node0", "kimi_k3_extra_env"),
                                                           ("node0", "launch_ready_timeout_s")]
    assert short[0]["message"] == (
        "deployment main: the engine's start-up limit (VLLM_ENGINE_READY_TIMEOUT_S) is derived as 11758 s "
        "(200 MiB/s weight read, 1560 GB weights) but its ceiling is 3600 s; the limit in force is 3600 s, so a "
        "load that takes as long as derived is cut off before the engine is ready.")
    assert short[0]["fix"].startswith('set kimi_k3_extra_env: {VLLM_ENGINE_READY_TIMEOUT_S: "11758"}')
    assert "12058 s" in short[1]["message"] and "3900 s" in short[1]["message"]
    assert short[1]["fix"].startswith("set launch_ready_timeout_s: 12058")


def test_raising_the_timeouts_far_enough_silences_the_warning():
    r = plan(gb300(kimi_k3_extra_env={"VLLM_ENGINE_READY_TIMEOUT_S": "12000"}, launch_ready_timeout_s=12000,
                   host_vars={0: {"kimi_k3_weight_read_mib_s": 200}}))
    short = [w for w in r["warnings"] if "ceiling" in w["message"]]
    # the engine's limit is raised enough; the launch wait (12000 s < 12,058 s) is not
    assert [w["variable"] for w in short] == ["launch_ready_timeout_s"]
    assert r["ok"], r["errors"]
    assert "and launch_ready_timeout_s is 12000 s; the limit in force is 12000 s" in short[0]["message"]


def test_the_lowest_wait_over_the_nodes_counts_and_words_are_ignored():
    r = plan(gb300(host_vars={0: {"kimi_k3_weight_read_mib_s": 200, "launch_ready_timeout_s": "13000"},
                              1: {"launch_ready_timeout_s": 12500}}))
    assert [w["variable"] for w in r["warnings"] if "ceiling" in w["message"]] == ["kimi_k3_extra_env"]
    r = plan(gb300(host_vars={0: {"kimi_k3_weight_read_mib_s": 200, "launch_ready_timeout_s": "13000"},
                              1: {"launch_ready_timeout_s": 6000}}))
    assert "and launch_ready_timeout_s is 6000 s" in r["warnings"][-1]["message"]


def test_strict_refuses_a_timeout_cut_short():
    r = plan(gb300(kimi_k3_strict=True, host_vars={0: {"kimi_k3_weight_read_mib_s": 200}}))
    assert not r["ok"]
    assert [e["variable"] for e in r["errors"]] == ["kimi_k3_extra_env", "launch_ready_timeout_s"]
    assert plan(gb300(kimi_k3_strict=True, host_vars={0: {"kimi_k3_weight_read_mib_s": 2048}}))["ok"]
