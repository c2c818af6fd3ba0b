"""Golden plan files: every inventory that existed before deployments/PD/router keeps producing the same
``<host>.sh`` byte for byte and the same ``<host>.json`` apart from the keys added since (deployment,
deployment_kind, master_port, dp_rpc_port, timeouts), whose values are the single-deployment ones, and the values
the plan hands the roles (DERIVED: health_url, metrics_url, api_base_url, features, image_pull), checked per
host. The files under golden_plans/ were written by scripts/plan_snapshot.sh before the change; the MI355X ones
since carry VLLM_ENGINE_READY_TIMEOUT_S (derived for every vendor; vLLM's 600 s default applied before) and its
plan hash."""
# Inventories are planned as the cluster_plan action does, without ansible-playbook (ansible-test units has no
# command-line tools): Ansible's inventory and variable managers resolve the variables; templated values (the
# examples' lookup('env', ...) API key) get a stand-in, as an operator exports them first.
import os
import shlex

import pytest

from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.manager import VariableManager

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import render as plan_render
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import topology
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import vllm_flags
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
RECIPE = recipe_data.load_recipe()
SNAPSHOTS = recipe_data.load_snapshots()
STAND_IN = "value-from-vault"
# The sim inventories get their images from `sim/simctl up` (group_vars/all/sim_image.yml): fixed stand-ins.
SIM_IMAGES = {"sim-mi355x": {"kimi_k3_image": "127.0.0.1:5000/vllm/vllm-openai-rocm@sha256:" + "e" * 64},
              "sim-cpu": {"kimi_k3_image": "127.0.0.1:5000/vllm/vllm-openai-cpu@sha256:" + "e" * 64},
              "sim-cpu-single": {"kimi_k3_image": "127.0.0.1:5000/vllm/vllm-openai-cpu@sha256:" + "e" * 64},
              "sim-cpu-fleet": {"kimi_k3_image": "127.0.0.1:5000/vllm/vllm-openai-cpu@sha256:" + "e" * 64,
                                "kimi_k3_router_image": "127.0.0.1:5000/vllm-router@sha256:" + "e" * 64},
              "sim-cpu-auto": {"kimi_k3_image": "127.0.0.1:5000/vllm/vllm-openai-cpu@sha256:" + "e" * 64,
                               "kimi_k3_router_image": "127.0.0.1:5000/vllm-router@sha256:" + "e" * 64},
              "sim-": {"kimi_k3_image": "127.0.0.1:5000/vllm/vllm-openai@sha256:" + "e" * 64,
                       "kimi_k3_router_image": "127.0.0.1:5000/vllm-router@sha256:" + "e" * 64}}


def _plain(value):
    return STAND_IN if isinstance(value, str) and "{{" in value else value


def _sim_vars(name):
    if not name.startswith("sim-"):
        return {}
    return dict(SIM_IMAGES.get(name, SIM_IMAGES["sim-"]))


def _node(inventory, variables, host, head, extra):
    hv = variables.get_vars(host=inventory.get_host(host))
    node_vars = dict((k, _plain(v)) for k, v in hv.items() if k.startswith(topology.PREFIX) or k == "ansible_host")
    # fixed stand-ins win over group_vars/all/sim_image.yml, which a running (or earlier) rehearsal cluster wrote
    node_vars.update(extra)
    return {"host": host, "head": head, "vars": node_vars}


def nodes_of(name):
    """(nodes, routers) of inventories/<name> as the cluster_plan action builds them."""
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[os.path.join(REPO, "inventories", name)])
    variables = VariableManager(loader=loader, inventory=inventory)
    groups = inventory.get_groups_dict()
    heads = set(groups.get("vllm_head", []))
    extra = _sim_vars(name)
    nodes = [_node(inventory, variables, h, h in heads, extra) for h in groups.get("vllm_cluster", [])]
    routers = [_node(inventory, variables, h, False, extra) for h in groups.get("vllm_router", [])]
    return nodes, routers


def plan_inventory(name):
    nodes, routers = nodes_of(name)
    return topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS, routers)


GOLDEN = os.path.join(HERE, "golden_plans")
ADDED = {"deployment": "main", "deployment_kind": "single", "master_port": 29501, "dp_rpc_port": 29550,
         # the examples pin a release, but for IMAGE_MODE's (below)
         "vllm_version_from_image": False,
         "docker_client": {"tls": False, "validate_certs": False, "ca_path": None, "client_cert": None,
                           "client_key": None, "use_ssh_client": False},
         "engine_client": {"docker_host": "unix:///var/run/docker.sock", "tls": False, "validate_certs": False,
                           "use_ssh_client": False},
         # without a weight-read measurement every derived timeout is its ceiling (recipe timeouts)
         "timeouts": {"basis": "ceiling (no weight-read measurement)", "engine_ready_timeout_s": 3600,
                      "launch_ready_timeout_s": 3900, "stall_timeout_s": 900, "weight_read_mib_s": None}}


# per host, values vary: _derived_urls checks them
DERIVED = ("health_url", "metrics_url", "api_base_url", "features", "image_pull")


def _derived_urls(plan, head_url):
    """The URLs the plan hands the roles: a node without an HTTP server watches its deployment's head."""
    own = plan["api_url"] if plan["serves_http"] else None
    v2 = plan["env"].get("VLLM_USE_V2_MODEL_RUNNER") == "1"
    rust = plan["env"].get("VLLM_USE_RUST_FRONTEND") == "1"
    return {"health_url": (own or head_url) + "/health", "metrics_url": own and own + "/metrics",
            "api_base_url": own and own + "/v1", "features": {"v2_model_runner": v2, "rust_frontend": rust},
            # no example sets image_mirror: every node pulls the image as planned
            "image_pull": {"reference": plan["image"], "pinned": True, "pull": plan["image"], "mirrored": False,
                           "rule": None}}


def _read(*parts):
    with open(os.path.join(GOLDEN, *parts)) as handle:
        return handle.read()


# The examples that pin the recipe's ROCm kimi-k3 development build (kimi_k3_vllm_version: image): their golden
# files carry that build's rules (0.27.1's AITER SiTU name) and its plan hash.
IMAGE_MODE = ("mi355x-cluster", "mi355x-rdma-2node")


@pytest.mark.parametrize("name", sorted(os.listdir(GOLDEN)))
def test_existing_inventory_plans_are_unchanged(name):
    r = plan_inventory(name)
    assert r["ok"], [plan_render.format_problem(e) for e in r["errors"]]
    files = sorted(os.listdir(os.path.join(GOLDEN, name)))
    assert sorted("%s.%s" % (h, ext) for h in r["plans"] for ext in ("json", "sh")) == files
    for host, plan in r["plans"].items():
        assert plan_render.run_script(plan) == _read(name, host + ".sh")
        plan = dict(plan)
        assert dict((k, plan.pop(k)) for k in ADDED) == dict(ADDED, vllm_version_from_image=name in IMAGE_MODE)
        head_url = r["cluster"]["deployments"][0]["api_url"]
        assert dict((k, plan.pop(k)) for k in DERIVED) == _derived_urls(plan, head_url)
        assert plan_render.plan_json(plan) == _read(name, host + ".json")
    assert r["cluster"]["mode"] == "single" and r["cluster"]["router"] is None
    (deployment,) = r["cluster"]["deployments"]
    assert deployment["name"] == "main" and deployment["hosts"] == r["cluster"]["order"]


@pytest.mark.parametrize("name,mode,deployments", [
    ("gb300-pd", "pd", [("prefill-1", "prefill", 2), ("decode-1", "decode", 4)]),
    ("gb300-fleet", "replicas", [("replica-1", "replica", 2), ("replica-2", "replica", 2)]),
    ("sim-gb300-pd", "pd", [("prefill-1", "prefill", 2), ("decode-1", "decode", 2)]),
    ("sim-gb300-fleet", "replicas", [("replica-1", "replica", 2), ("replica-2", "replica", 2)])])
def test_deployment_examples_plan_and_their_flag_snapshot_accepts_them(name, mode, deployments):
    r = plan_inventory(name)
    assert r["ok"], [plan_render.format_problem(e) for e in r["errors"]]
    c = r["cluster"]
    assert c["mode"] == mode and [(d["name"], d["kind"], len(d["hosts"])) for d in c["deployments"]] == deployments
    router = r["plans"][c["router"]["host"]]
    assert router["role"] == "router" and "@sha256:" in router["image"] and c["endpoints"][0] == router["api_url"]
    assert "judge_accuracy" not in router  # real weights behind it: the smoke through the router judges answers
    assert ("--vllm-pd-disaggregation" in router["router"]["argv"]) == (mode == "pd")
    words = shlex.split(plan_render.run_script(router).replace("\\\n", " "), comments=True)
    assert words[words.index(router["image"]) + 1:] == router["router"]["argv"]  # the container runs exactly argv
    for plan in r["plans"].values():
        if plan["role"] != "router":
            assert vllm_flags.check_argv(plan["vllm_args"], SNAPSHOTS[plan["vllm_version"]]) == []
            assert plan_render.run_script(plan).startswith("#!/bin/sh")


def test_sim_addresses_are_the_ones_the_sim_serves():
    pd = plan_inventory("sim-gb300-pd")["plans"]
    assert sorted(p["internal_address"] for p in pd.values()) == ["127.0.0.%d" % i for i in range(31, 36)]
    fleet = plan_inventory("sim-gb300-fleet")["plans"]
    assert sorted(p["internal_address"] for p in fleet.values()) == ["127.0.0.%d" % i for i in range(51, 56)]


@pytest.mark.parametrize("name", sorted(n for n in os.listdir(os.path.join(REPO, "inventories")) if n.startswith("gb300")))
def test_gb300_examples_plan_with_a_development_build_as_with_their_release(name):
    """The GB300 examples pin a release; pointed at a development build of vLLM (the recipe's vllm/vllm-openai:kimi-k3
    is one, its digest unknown to the recipe) with kimi_k3_vllm_version: image, they render the same argv by
    plan_release's rules and say who judges it (the fabric step runs the image's own parser)."""
    nodes, routers = nodes_of(name)
    release = topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS, routers)
    dev_image = "vllm/vllm-openai@sha256:" + "d" * 64
    for node in nodes + routers:
        node["vars"] = dict(node["vars"], kimi_k3_vllm_version="image", kimi_k3_image=dev_image)
    dev = topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS, routers)
    assert release["ok"] and dev["ok"], [plan_render.format_problem(e) for e in dev["errors"]]
    engines = dict((h, p) for h, p in dev["plans"].items() if "vllm_version_from_image" in p)  # not the router
    assert engines
    for host, plan in engines.items():
        assert (plan["vllm_version"], plan["vllm_version_from_image"]) == (RECIPE["development_builds"]["plan_release"],
                                                                           True)
        assert plan["vllm_args"] == release["plans"][host]["vllm_args"] and plan["image"] == dev_image
    said = [w["variable"] for w in dev["warnings"] if w["message"].startswith("image: the plan cannot know")]
    assert said and set(said) == {"kimi_k3_vllm_version"}


def test_auto_lays_the_cpu_pair_out_as_the_fleet_named_by_hand():
    """kimi_k3_strategy auto, no deployment named, a router host: the plan renders the best-ranked layout of the
    whole table, and that plan is the one of the inventory that names the same fleet by hand (sim-cpu-fleet)."""
    auto, named = plan_inventory("sim-cpu-auto"), plan_inventory("sim-cpu-fleet")
    assert auto["ok"] and named["ok"], auto["errors"] + named["errors"]
    cluster = dict(auto["cluster"])
    (choice,) = cluster.pop("strategy_choice")
    assert auto["plans"] == named["plans"] and cluster == named["cluster"]
    assert (choice["deployment"], choice["layout"], choice["kind"], choice["strategy"]) == \
        (None, "2 x single_node_tp", "fleet", "single_node_tp")
    assert choice["candidates"][0]["layout"] == "2 x single_node_tp" and choice["candidates"][0]["rank"] == 1
    assert "layout: auto chose 2 x single_node_tp for throughput: " in plan_render.summary_table(auto)
    # the rehearsal model answers nothing checkable: the smoke through the router judges no answer
    assert auto["plans"]["cpu-router"]["judge_accuracy"] is False
