"""The mistake corpus: realistic single-mistake inventories, each refused with its expected variable named.

Every ``<case>.yml`` names a base inventory under inventories/ (its hosts.yml and group_vars/vllm_cluster.yml),
one mistake (``cluster``: merged into group_vars; ``hosts``: merged into a host's vars; ``remove``: variables
deleted from group_vars; ``rename``: host renamed; ``head``: new vllm_head members; ``router``: merged into the
vllm_router host's vars; ``no_router``: the vllm_router group removed; ``groups``: {host: its deployment groups};
``group_vars``: merged into a deployment group's vars; ``role_vars``: role variables set on a host or "all") and
what the refusal must name
(``variable``, optionally ``host`` and fragments of ``fix`` and ``message``: a misspelt key's name, say). One mistake gives one problem. Bases with several
deployments (inventories/gb300-pd, gb300-fleet) keep each deployment's group_vars (group_vars/<group>.yml or the
group's ``vars:``) under its hosts, as Ansible resolves them (a group's variables override vllm_cluster's).
Secrets a case plants hold the word "canary", which no refusal may repeat. Templated values
(``{{ lookup('env', ...) }}``) stand for a vault value; the sim's image comes from simctl, so
a fixed digest stands in for it.
"""
import copy
import glob
import os

import pytest
import yaml

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import render as plan_render
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import topology
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import vllm_flags
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import role_variables

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
RECIPE = recipe_data.load_recipe()
SNAPSHOTS = recipe_data.load_snapshots()
CASES = sorted(glob.glob(os.path.join(HERE, "*.yml")))
SIM_IMAGE = {"sim-gb300": "127.0.0.1:5000/vllm/vllm-openai@sha256:" + "e" * 64,
             "sim-mi355x": "127.0.0.1:5000/vllm/vllm-openai-rocm@sha256:" + "e" * 64,
             "sim-cpu": "127.0.0.1:5000/vllm/vllm-openai-cpu@sha256:" + "e" * 64}


def _load(path):
    with open(path) as handle:
        return yaml.safe_load(handle) or {}


def _untemplated(value):
    return "value-from-vault" if isinstance(value, str) and "{{" in value else value


def _group_vars(inv, group, doc):
    path = os.path.join(inv, "group_vars", group + ".yml")
    found = _load(path) if os.path.exists(path) else {}
    found.update((doc or {}).get("vars") or {})
    return dict((k, _untemplated(v)) for k, v in found.items())


DEPLOYMENT_GROUPS_SKIP = ("vllm_head", "vllm_workers")


def base_inventory(name):
    """(cluster vars, hosts, routers) of inventories/<name>. hosts: [host, head?, host vars, deployment groups,
    (inline vars, {group: vars})]; a host's vars merge its deployment groups' vars in name order (Ansible's order
    for sibling groups) and then its own; routers: [(host, vars)]."""
    inv = os.path.join(REPO, "inventories", name)
    cluster = dict((k, _untemplated(v)) for k, v in _load(os.path.join(inv, "group_vars", "vllm_cluster.yml")).items())
    if name in SIM_IMAGE:
        cluster["kimi_k3_image"] = SIM_IMAGE[name]
    doc = _load(os.path.join(inv, "hosts.yml"))
    children = doc["vllm_cluster"]["children"]
    heads = set(((children.get("vllm_head") or {}).get("hosts") or {}))
    group_vars = dict((g, _group_vars(inv, g, c)) for g, c in children.items() if g not in DEPLOYMENT_GROUPS_SKIP)
    hosts, index = [], {}
    for group, child in children.items():
        for host, hv in ((child or {}).get("hosts") or {}).items():
            if host not in index:
                index[host] = [host, host in heads, {}, [], ({}, group_vars)]
                hosts.append(index[host])
            index[host][4][0].update(dict((k, _untemplated(v)) for k, v in (hv or {}).items()))
            if group in group_vars:
                index[host][3].append(group)
    for entry in hosts:
        entry[2] = _host_vars(entry)
    routers = [(host, dict(_group_vars(inv, "vllm_router", doc.get("vllm_router")), **(hv or {})))
               for host, hv in (((doc.get("vllm_router") or {}).get("hosts")) or {}).items()]
    return cluster, hosts, routers


def _host_vars(entry):
    inline, group_vars = entry[4]
    out = {}
    for group in sorted(entry[3]):
        out.update(group_vars[group])
    out.update(inline)
    return out


def nodes_of(cluster, hosts, routers=()):
    nodes = [{"host": h[0], "head": h[1], "vars": dict(cluster, **h[2])} for h in hosts]
    if any(h[3] for h in hosts):
        for node, entry in zip(nodes, hosts):
            node["deployment_groups"] = sorted(entry[3])
    return nodes, [{"host": h, "head": False, "vars": dict(v)} for h, v in routers]


def _regroup(mistake, hosts):
    """``groups``: {host: [deployment groups]} (membership); ``group_vars``: {group: vars merged into its vars}."""
    for entry in hosts:
        group_vars = dict((g, dict(v, **mistake.get("group_vars", {}).get(g, {}))) for g, v in entry[4][1].items())
        entry[4] = (entry[4][0], group_vars)
        entry[3] = list(mistake.get("groups", {}).get(entry[0], entry[3]))
        entry[2] = _host_vars(entry)


def apply(mistake, cluster, hosts, routers):
    cluster, hosts, routers = copy.deepcopy(cluster), copy.deepcopy(hosts), copy.deepcopy(routers)
    routers = [] if mistake.get("no_router") else [(h, dict(v, **mistake.get("router", {}))) for h, v in routers]
    for name in mistake.get("remove", []):
        cluster.pop(name)
    cluster.update(mistake.get("cluster", {}))
    if "groups" in mistake or "group_vars" in mistake:
        _regroup(mistake, hosts)
    for entry in hosts:
        entry[2].update(mistake.get("hosts", {}).get(entry[0], {}))
        entry[0] = mistake.get("rename", {}).get(entry[0], entry[0])
        if "head" in mistake:
            entry[1] = entry[0] in mistake["head"]
    return cluster, hosts, routers


def plan(nodes, routers=(), role_vars=None):
    """The plan as the cluster_plan action makes it: topology, then the role variables the inventory sets
    (``role_vars``: {host or "all": {variable: value}})."""
    r = topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS, list(routers))
    if not r["ok"] or not role_vars:
        return r
    hosts = [(n["host"], dict(role_vars.get("all", {}), **role_vars.get(n["host"], {}))) for n in nodes + list(routers)]
    problems = role_variables.role_variable_problems(hosts, r["plans"])
    return dict(r, ok=False, errors=problems, plans={}) if problems else r


def test_the_corpus_is_large_enough_and_mistakes_are_distinct():
    assert len(CASES) >= 40
    docs = [_load(p) for p in CASES]
    assert len({yaml.safe_dump(d["mistake"], sort_keys=True) + d["base"] for d in docs}) == len(docs)


@pytest.mark.parametrize("base", sorted({_load(p)["base"] for p in CASES}))
def test_every_base_renders_and_its_flag_snapshot_accepts_it(base):
    r = plan(*nodes_of(*base_inventory(base)))
    assert r["ok"], [plan_render.format_problem(e) for e in r["errors"]]
    for p in r["plans"].values():
        if p["role"] == "router":
            continue
        assert vllm_flags.check_argv(p["vllm_args"], SNAPSHOTS[p["vllm_version"]]) == []


@pytest.mark.parametrize("path", CASES, ids=[os.path.basename(p)[:-4] for p in CASES])
def test_mistake_is_refused_naming_the_variable(path):
    doc = _load(path)
    r = plan(*nodes_of(*apply(doc["mistake"], *base_inventory(doc["base"]))), role_vars=doc["mistake"].get("role_vars"))
    lines = [plan_render.format_problem(e) for e in r["errors"]]
    assert not r["ok"], "%s: accepted" % doc["description"]
    assert len(r["errors"]) == 1, lines
    (e,) = r["errors"]
    want = doc["expect"]
    assert e["variable"] == want["variable"], lines
    if "host" in want:
        assert e["host"] == want["host"], lines
    assert want.get("fix", "") in e["fix"], lines
    assert want.get("message", "") in e["message"], lines
    assert e["fix"] and e["message"]
    # the corpus writes every secret it plants with "canary" in it: no refusal may repeat one
    assert "canary" not in "\n".join(lines).lower(), lines
