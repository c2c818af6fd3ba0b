"""The mistake corpus: realistic single-mistake inventories, each refused with its expected variable named.

Every ``<case>.yml`` names a base inventory under inventories/ (its hosts.yml and group_vars/vllm_cluster.yml),
one mistake (``cluster``: merged into group_vars; ``hosts``: merged into a host's vars; ``remove``: variables
deleted from group_vars; ``rename``: host renamed; ``head``: new vllm_head members) and what the refusal must
name (``variable``, optionally ``host`` and a fragment of ``fix``). One mistake gives one problem.
Templated values (``{{ lookup('env', ...) }}``) stand for a vault value; the sim's image comes from simctl, so
a fixed digest stands in for it.
"""
import copy
import glob
import os

import pytest
import yaml

from ansible_collections.gpufleet.kimi_k3.plugins.module_utils import plan_render, topology, vllm_flags
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils import recipe_data

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
RECIPE = recipe_data.load_recipe()
SNAPSHOTS = recipe_data.load_snapshots()
CASES = sorted(glob.glob(os.path.join(HERE, "*.yml")))
SIM_IMAGE = {"sim-gb300": "127.0.0.1:5000/vllm/vllm-openai@sha256:" + "e" * 64,
             "sim-mi355x": "127.0.0.1:5000/vllm/vllm-openai-rocm@sha256:" + "e" * 64}


def _load(path):
    with open(path) as handle:
        return yaml.safe_load(handle) or {}


def _untemplated(value):
    return "value-from-vault" if isinstance(value, str) and "{{" in value else value


def base_inventory(name):
    """(cluster vars, [(host, head?, host vars)]) of inventories/<name>."""
    inv = os.path.join(REPO, "inventories", name)
    cluster = dict((k, _untemplated(v)) for k, v in _load(os.path.join(inv, "group_vars", "vllm_cluster.yml")).items())
    if name in SIM_IMAGE:
        cluster["kimi_k3_image"] = SIM_IMAGE[name]
    children = _load(os.path.join(inv, "hosts.yml"))["vllm_cluster"]["children"]
    hosts = []
    for group in ("vllm_head", "vllm_workers"):
        for host, hv in ((children.get(group) or {}).get("hosts") or {}).items():
            hosts.append([host, group == "vllm_head", dict(hv or {})])
    return cluster, hosts


def nodes_of(cluster, hosts):
    return [{"host": h, "head": head, "vars": dict(cluster, **hv)} for h, head, hv in hosts]


def apply(mistake, cluster, hosts):
    cluster, hosts = copy.deepcopy(cluster), copy.deepcopy(hosts)
    for name in mistake.get("remove", []):
        cluster.pop(name)
    cluster.update(mistake.get("cluster", {}))
    for entry in hosts:
        entry[2].update(mistake.get("hosts", {}).get(entry[0], {}))
        entry[0] = mistake.get("rename", {}).get(entry[0], entry[0])
        if "head" in mistake:
            entry[1] = entry[0] in mistake["head"]
    return cluster, hosts


def plan(nodes):
    return topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS)


def test_the_corpus_is_large_enough_and_mistakes_are_distinct():
    assert len(CASES) >= 40
    docs = [_load(p) for p in CASES]
    assert len({yaml.safe_dump(d["mistake"], sort_keys=True) + d["base"] for d in docs}) == len(docs)


@pytest.mark.parametrize("base", sorted({_load(p)["base"] for p in CASES}))
def test_every_base_renders_and_its_flag_snapshot_accepts_it(base):
    r = plan(nodes_of(*base_inventory(base)))
    assert r["ok"], [plan_render.format_problem(e) for e in r["errors"]]
    for p in r["plans"].values():
        assert vllm_flags.check_argv(p["vllm_args"], SNAPSHOTS[p["vllm_version"]]) == []


@pytest.mark.parametrize("path", CASES, ids=[os.path.basename(p)[:-4] for p in CASES])
def test_mistake_is_refused_naming_the_variable(path):
    doc = _load(path)
    cluster, hosts = apply(doc["mistake"], *base_inventory(doc["base"]))
    r = plan(nodes_of(cluster, hosts))
    lines = [plan_render.format_problem(e) for e in r["errors"]]
    assert not r["ok"], "%s: accepted" % doc["description"]
    assert len(r["errors"]) == 1, lines
    (e,) = r["errors"]
    want = doc["expect"]
    assert e["variable"] == want["variable"], lines
    if "host" in want:
        assert e["host"] == want["host"], lines
    assert want.get("fix", "") in e["fix"], lines
    assert e["fix"] and e["message"]
