"""How hosts are grouped into deployments: one name per deployment group, one group per host, no follower outside
its group. Each refusal names the host, kimi_k3_deployment and a fix that does not make things worse."""
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.kimi_k3.plugins.action import cluster_plan as cluster_plan_action
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import fleet as plan_fleet
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data

RECIPE = recipe_data.load_recipe()
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


def node(host, groups, name=None):
    v = {"kimi_k3_deployment": name} if name else {}
    return {"host": host, "head": False, "vars": v, "deployment_groups": list(groups)}


def fleet():
    return [node("t1", ["kimi_replica_1"], "replica-1"), node("t2", ["kimi_replica_1"], "replica-1"),
            node("t3", ["kimi_replica_2"], "replica-2"), node("t4", ["kimi_replica_2"], "replica-2")]


def test_a_well_grouped_fleet_passes():
    assert plan_fleet.grouping_problems(fleet(), RECIPE) == []


def test_without_group_knowledge_nothing_is_judged():
    nodes = fleet()
    for n in nodes:
        del n["deployment_groups"]
    nodes[3]["vars"] = {}
    assert plan_fleet.grouping_problems(nodes, RECIPE) == []


def test_one_name_for_two_groups():
    nodes = fleet()
    for n in nodes[2:]:
        n["vars"]["kimi_k3_deployment"] = "replica-1"
    (p,) = plan_fleet.grouping_problems(nodes, RECIPE)
    assert (p["host"], p["variable"]) == ("t3", "kimi_k3_deployment")
    assert p["message"] == ("replica-1 is the name of 2 deployment groups (kimi_replica_1, kimi_replica_2), so their "
                            "hosts (t1, t2, t3, t4) would run as one deployment.")
    assert p["fix"] == "give group kimi_replica_2 its own kimi_k3_deployment in its group_vars (e.g. replica-2)."


def test_a_host_in_two_groups():
    nodes = fleet()
    nodes[1]["deployment_groups"] = ["kimi_replica_1", "kimi_replica_2"]
    nodes[1]["vars"]["kimi_k3_deployment"] = "replica-2"
    (p,) = plan_fleet.grouping_problems(nodes, RECIPE)
    assert (p["host"], p["variable"]) == ("t2", "kimi_k3_deployment")
    assert p["message"] == ("the host is in 2 deployment groups (kimi_replica_1, kimi_replica_2); Ansible takes "
                            "kimi_k3_deployment from one of them, so it joins deployment replica-2 only.")
    assert p["fix"] == "list t2 under one deployment group in hosts.yml (a node runs one deployment)."


def test_a_follower_outside_its_group():
    nodes = fleet()
    nodes[3] = node("t4", [])
    (p,) = plan_fleet.grouping_problems(nodes, RECIPE)
    assert (p["host"], p["variable"]) == ("t4", "kimi_k3_deployment")
    assert p["message"] == ("the host is in no deployment group (kimi_replica_1, kimi_replica_2), so its "
                            "kimi_k3_deployment is main, a deployment of its own.")
    assert p["fix"] == ("list t4 in hosts.yml under the group of its deployment (one of kimi_replica_1, "
                        "kimi_replica_2), next to its head.")


def test_a_host_outside_the_groups_that_names_a_grouped_deployment_passes():
    nodes = fleet()
    nodes[3] = node("t4", [], "replica-2")
    assert plan_fleet.grouping_problems(nodes, RECIPE) == []


@pytest.mark.parametrize("taken, like, free", [({"replica-1"}, "replica-1", "replica-2"),
                                               ({"replica-1", "replica-2"}, "replica-1", "replica-3"),
                                               ({"main"}, "main", "main-2"), ({"7"}, "7", "deployment-2")])
def test_a_free_name_is_suggested(taken, like, free):
    assert plan_fleet._free_name(taken, like) == free


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(st.sampled_from(["g1", "g2", "g3"]), max_size=3, unique=True),
                          st.one_of(st.none(), st.sampled_from(["a", "b", "main"]))), min_size=1, max_size=8))
def test_grouping_never_raises_and_every_problem_names_the_variable(spec):
    nodes = [node("h%d" % i, groups, name) for i, (groups, name) in enumerate(spec)]
    for p in plan_fleet.grouping_problems(nodes, RECIPE):
        assert p["variable"] == "kimi_k3_deployment" and p["fix"] and p["host"].startswith("h")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=10))
def test_one_group_per_host_and_one_name_per_group_always_passes(assignment):
    nodes = [node("h%d" % i, ["g%d" % g], "d%d" % g) for i, g in enumerate(assignment)]
    assert plan_fleet.grouping_problems(nodes, RECIPE) == []


def test_the_action_reads_the_deployment_groups_from_the_inventory():
    inventory_mod = pytest.importorskip("ansible.inventory.manager")
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.hostvars import HostVars
    from ansible.vars.manager import VariableManager
    loader = DataLoader()
    inventory = inventory_mod.InventoryManager(loader=loader,
                                               sources=[os.path.join(REPO, "inventories", "gb300-fleet", "hosts.yml")])
    hostvars = HostVars(inventory, VariableManager(loader=loader, inventory=inventory), loader)
    args = {"group": "vllm_cluster", "head_group": "vllm_head"}
    groups = cluster_plan_action.ActionModule._deployment_groups(args, hostvars)
    assert groups == {"kimi_replica_1": {"gb300-tray01", "gb300-tray02"},
                      "kimi_replica_2": {"gb300-tray03", "gb300-tray04"}}
    assert cluster_plan_action.ActionModule._deployment_groups(args, {}) is None
    assert cluster_plan_action.ActionModule._deployment_groups(dict(args, group="nope"), hostvars) is None


# ----------------------------------------------------------------------------- variables on a host of the other kind


def hosts_and_router(node_vars=None, router_vars=None):
    nodes = [{"host": "t%d" % i, "head": i == 1, "vars": dict({"kimi_k3_strategy": "multi_node_tp"}, **(node_vars or {}))}
             for i in (1, 2)]
    routers = [{"host": "r1", "head": False, "vars": dict({"kimi_k3_router_port": 8000}, **(router_vars or {}))}]
    return nodes, routers


@pytest.mark.parametrize("name, value, scope", [("kimi_k3_max_model_len", 32768, "cluster"),
                                                ("kimi_k3_tensor_parallel_size", 8, "deployment"),
                                                ("kimi_k3_node_rank", 0, "host"), ("kimi_k3_hf_token", "hf_x", "cluster")])
def test_a_serving_variable_on_the_router_host_is_warned_naming_its_scope(name, value, scope):
    # a warning: extra vars (upgrade.yml -e kimi_k3_image=...) reach the router host too
    assert plan_fleet.scope_problems(*hosts_and_router(router_vars={name: value})) == []
    (p,) = plan_fleet.scope_warnings(*hosts_and_router(router_vars={name: value}))
    assert (p["host"], p["variable"]) == ("r1", name)
    assert p["message"] == ("is a %s variable (scope %s: read on the vllm_cluster hosts); set on the router host it "
                            "does nothing." % (scope, scope))
    assert p["fix"].startswith("move %s to " % name) and p["fix"].endswith(", or remove it from the router host.")
    assert "hf_x" not in p["message"] + p["fix"]


@pytest.mark.parametrize("name, value", [("kimi_k3_extra_args", ["--max-num-seqs", "8"]),
                                         ("kimi_k3_extra_env", {"RUST_LOG": "debug"}),
                                         ("kimi_k3_extra_env_not_secret", ["MY_TOKENS"])])
def test_the_engine_arguments_or_environment_on_the_router_host_are_refused(name, value):
    # no plan override reaches them: set on the router host alone, they were meant for vllm-router, which takes neither
    assert plan_fleet.scope_warnings(*hosts_and_router(router_vars={name: value})) == []
    (p,) = plan_fleet.scope_problems(*hosts_and_router(router_vars={name: value}))
    assert (p["host"], p["variable"]) == ("r1", name)
    assert p["message"].endswith("set on the router host it does nothing. vllm-router takes no extra arguments or "
                                 "environment.")
    assert p["fix"] == ("move %s to the vllm_cluster hosts or their deployment's group_vars, or remove it from the "
                        "router host." % name)
    assert plan_fleet.scope_problems(*hosts_and_router({name: value}, {name: value})) == []


def test_a_router_variable_on_a_node_is_refused_naming_its_scope():
    (p,) = plan_fleet.scope_problems(*hosts_and_router(node_vars={"kimi_k3_router_policy": "cache_aware"}))
    assert (p["host"], p["variable"]) == ("t1", "kimi_k3_router_policy")
    assert p["message"] == ("is a router variable (scope router: read on the vllm_router host only); set on a "
                            "vllm_cluster host it does nothing.")
    assert p["fix"] == "move kimi_k3_router_policy to group_vars/vllm_router.yml (or the router host's variables)."


@pytest.mark.parametrize("name, value", [("kimi_k3_image", "img@sha256:" + "a" * 64), ("kimi_k3_router_image", "r")])
def test_a_value_every_host_shares_is_no_mistake(name, value):
    assert plan_fleet.scope_problems(*hosts_and_router({name: value}, {name: value})) == []
    assert plan_fleet.scope_warnings(*hosts_and_router({name: value}, {name: value})) == []


@pytest.mark.parametrize("name", ["kimi_k3_api_key", "kimi_k3_docker_host", "kimi_k3_api_host",
                                  "kimi_k3_internal_address", "kimi_k3_allow_unpinned_image"])
def test_variables_the_router_reads_may_be_set_on_it(name):
    assert plan_fleet.scope_problems(*hosts_and_router(router_vars={name: "x"})) == []


def test_without_a_router_host_router_variables_on_nodes_are_not_judged():
    nodes, _routers = hosts_and_router(node_vars={"kimi_k3_router_port": 9000})
    assert plan_fleet.scope_problems(nodes, []) == []
