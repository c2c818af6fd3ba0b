"""``parallel``: every node plan and every cluster deployment publish the layout the argv renders, and the readers
of the plan (sizing, combination rules, fabric, preflight) take the sizes from it."""
import os

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.fabric import specs as fabric
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import contract
from tests.unit.plugins.action.test_plan_golden import REPO, plan_inventory

INVENTORIES = sorted(n for n in os.listdir(os.path.join(REPO, "inventories")) if not n.startswith("."))


def _argv_size(argv, flag, default):
    value = contract.arg_value(argv, flag)
    return int(value) if value is not None else default


@pytest.mark.parametrize("name", INVENTORIES)
def test_parallel_is_what_the_argv_renders(name):
    r = plan_inventory(name)
    assert r["ok"]
    for deployment in r["cluster"]["deployments"]:
        for host in deployment["hosts"]:
            plan = r["plans"][host]
            p, argv = plan["parallel"], plan["vllm_args"]
            assert p == deployment["parallel"]
            dp = _argv_size(argv, "--data-parallel-size", 1)
            assert (p["tp"], p["pp"], p["dp"]) == (_argv_size(argv, "--tensor-parallel-size", 1),
                                                   _argv_size(argv, "--pipeline-parallel-size", 1), dp)
            assert p["dcp"] == _argv_size(argv, "--decode-context-parallel-size", 1)
            assert p["ep"] == (p["tp"] * p["dp"] if "--enable-expert-parallel" in argv else 1)
            local = contract.arg_value(argv, "--data-parallel-size-local")
            if local is not None:
                assert p["dp_local"] == int(local)
            assert (p["dp_local"] is not None) == ("--data-parallel-address" in argv)
            assert (deployment["tensor_parallel_size"], deployment["pipeline_parallel_size"],
                    deployment["data_parallel_size"]) == (p["tp"], p["pp"], p["dp"])


def test_dp_across_nodes_reads_the_published_layout():
    assert fabric.dp_across_nodes({"parallel": {"dp": 16, "dp_local": 8}})
    assert fabric.dp_across_nodes({"parallel": {"dp": 2, "dp_local": 1}})  # external LB: one rank per node
    assert not fabric.dp_across_nodes({"parallel": {"dp": 8, "dp_local": 8}})
    assert not fabric.dp_across_nodes({"parallel": {"dp": 1, "dp_local": None}})
    assert not fabric.dp_across_nodes({})
