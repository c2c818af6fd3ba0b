"""The plan's checks read the resolved deployment and write nothing; ``needs`` keeps a dependent check quiet while
its root cause is reported; resolving is pure (plugin_utils.plan.resolve, plugin_utils.plan.checks)."""
import copy
import dataclasses

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import checks
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data

RECIPE = recipe_data.load_recipe()
SNAPSHOTS = recipe_data.load_snapshots()
REV = "0123456789abcdef0123456789abcdef01234567"


def nodes(n, **cluster):
    base = {"kimi_k3_image": "vllm/vllm-openai@sha256:" + "a" * 64, "kimi_k3_vllm_version": "0.28.0",
            "kimi_k3_accelerator": "gb300", "kimi_k3_strategy": "multi_node_tp" if n > 1 else "single_node_tp",
            "kimi_k3_model_revision": REV, "kimi_k3_api_key": "k", "kimi_k3_socket_ifname": "eth9"}
    if n > 1:
        base["kimi_k3_interconnect"] = "nvlink"
    base.update(cluster)
    return [{"host": "node%d" % i, "head": i == 0, "vars": dict(base, ansible_host="10.9.0.%d" % (i + 1))}
            for i in range(n)]


# valid layouts and layouts with mistakes: every check runs on each
LAYOUTS = [nodes(1), nodes(2), nodes(4, kimi_k3_strategy="multi_node_dep", kimi_k3_interconnect="rdma"),
           nodes(2, kimi_k3_strategy="multi_node_dep", kimi_k3_dp_lb_mode="external"),
           nodes(2, kimi_k3_extra_env={"HF_TOKEN": "x", "OK": 1}, kimi_k3_extra_args=["--port", "1"]),
           nodes(2, kimi_k3_features={"nope": True, "dcp": "maybe"}, kimi_k3_api_key=None),
           nodes(3, kimi_k3_node_rank=1), nodes(1, kimi_k3_accelerator=None, kimi_k3_image="vllm/vllm-openai:latest")]


def _resolved(layout):
    return checks.validate(layout, RECIPE, SNAPSHOTS)[0]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("check", checks.CHECKS, ids=lambda c: c.name)
def test_no_check_writes_into_the_deployment(layout, check):
    deployment = _resolved(layout)
    before = copy.deepcopy(deployment)
    check.run(deployment)
    assert deployment == before, "check_%s changed what it read" % check.name


def test_a_check_that_writes_is_caught():
    deployment = _resolved(nodes(2))
    before = copy.deepcopy(deployment)

    def writing(d):
        d.settings["strategy"] = "single_node_tp"
        return []
    writing(deployment)
    assert deployment != before
    with pytest.raises(dataclasses.FrozenInstanceError):
        deployment.lb_mode = "internal"


def test_resolving_leaves_the_inventory_as_given():
    layout = nodes(2, kimi_k3_node_rank=None)
    given = copy.deepcopy(layout)
    checks.validate(layout, RECIPE, SNAPSHOTS)
    assert layout == given


def test_a_dependent_check_is_not_run_while_its_root_cause_fails():
    calls = []

    def root(d):
        return [checks.problem(d.where, "kimi_k3_root", "root", "fix the root")]

    def dependent(d):
        calls.append(d.where)
        return [checks.problem(d.where, "kimi_k3_leaf", "leaf", "fix the leaf")]
    table = (checks.Check("root", (), root, False), checks.Check("leaf", ("root",), dependent, False),
             checks.Check("leaf2", ("leaf",), dependent, False), checks.Check("free", (), dependent, False))
    errors, warnings = checks.run(_resolved(nodes(1)), table)
    assert [e["variable"] for e in errors] == ["kimi_k3_root", "kimi_k3_leaf"] and warnings == []
    assert calls == ["node0"]  # only "free": leaf waits for root, leaf2 for leaf


def test_every_need_names_an_earlier_check():
    names = [c.name for c in checks.CHECKS]
    for index, check in enumerate(checks.CHECKS):
        assert set(check.needs) <= set(names[:index]), check.name


def test_the_sizes_are_not_blamed_for_a_strategy_that_does_not_fit():
    errors = checks.validate(nodes(1, kimi_k3_strategy="multi_node_tp", kimi_k3_tensor_parallel_size=2), RECIPE,
                             SNAPSHOTS)[1]
    assert [e["variable"] for e in errors] == ["kimi_k3_strategy"]
