"""Launch timeouts derived from the weight-read throughput (plan_timeouts) and their plumbing into the plan."""
import sys
import os

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import timeouts as plan_timeouts
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_topology import ROCM_IMAGE, make_nodes, plan  # noqa: E402

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
