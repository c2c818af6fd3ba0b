"""Every key a role reads from the plan is a key the plan writes. The Jinja of roles/ and playbooks/ is scanned for
reads of a host's plan (``plan_result.plans[<host>].a.b`` and the names roles bind it to, ``launch_plan.a.b``) and of
the cluster summary (``plan_result.cluster.a.b``); every path read without ``| default(...)`` must exist in the
plans rendered for the example and rehearsal inventories (single deployment, replica fleet, prefill/decode, a
router), and with an image mirror. A role reading a key the plan does not write would fail only on a cluster (the
molecule and rehearsal runs), so this catches it here."""
import os
import re

import pytest

from tests.unit.plugins.action.test_plan_golden import REPO, RECIPE, SNAPSHOTS, nodes_of, plan_inventory

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import topology

INVENTORIES = ("sim-gb300", "sim-gb300-fleet", "sim-gb300-pd", "sim-mi355x", "sim-cpu", "sim-cpu-single",
               "gb300-cluster", "gb300-pd", "gb300-fleet", "mi355x-rdma-2node")
MIRROR = {"127.0.0.1:5000/": "harbor.example/sim/", "docker.io/": "harbor.example/hub/"}
SEGMENT = r"(?:\.[a-z_][a-z0-9_]*(?![a-z0-9_]*\())+"   # .a.b, stopping before a method call (.items())
HOST_INDEX = r"plan_result\.plans\[[^\]]+\]"
# "launch_plan: "{{ plan_result.plans[inventory_hostname] }}"": a name a role binds a host's plan to
ALIAS = re.compile(r"^\s*([a-z_]+):\s*[\"']?\{\{\s*" + HOST_INDEX + r"\s*(?:\|\s*default\([^)]*\)\s*)?\}\}")
GUARDED = re.compile(r"^\s*(\[[^\]]*\])?\s*\|\s*default\(")


def _role_files():
    for base, _dirs, files in [w for top in ("roles", "playbooks") for w in os.walk(os.path.join(REPO, top))]:
        if os.sep + "files" in base or os.sep + "meta" in base:
            continue
        for name in sorted(f for f in files if f.endswith((".yml", ".yaml", ".j2"))):
            path = os.path.join(base, name)
            with open(path) as handle:
                yield os.path.relpath(path, REPO), handle.read()


def _aliases(texts):
    return sorted(set(m.group(1) for _rel, text in texts for line in text.splitlines() for m in [ALIAS.match(line)]
                      if m))


def planned_reads(texts=None):
    """{("host" | "cluster", (key, ...)): ["file:line", ...]} of every path read without a default."""
    texts = list(_role_files()) if texts is None else texts
    host = re.compile(r"(?:%s|\b(?:%s))(%s)" % (HOST_INDEX, "|".join(_aliases(texts)) or "(?!)", SEGMENT))
    cluster = re.compile(r"\bplan_result\.cluster(%s)" % SEGMENT)
    out = {}
    for rel, text in texts:
        for number, line in enumerate(text.splitlines(), 1):
            if line.lstrip().startswith("#"):
                continue
            for kind, pattern in (("host", host), ("cluster", cluster)):
                for m in pattern.finditer(line):
                    if not GUARDED.match(line[m.end():]):
                        path = tuple(m.group(1).lstrip(".").split("."))
                        out.setdefault((kind, path), []).append("%s:%d" % (rel, number))
    return out


def _has(mapping, path):
    for key in path:
        if not isinstance(mapping, dict) or key not in mapping:
            return False
        mapping = mapping[key]
    return True


@pytest.fixture(scope="module")
def rendered():
    results = [plan_inventory(name) for name in INVENTORIES]
    nodes, routers = nodes_of("sim-gb300-pd")
    for node in nodes + routers:
        node["image_mirror"] = MIRROR
    results.append(topology.build_cluster_plan(nodes, RECIPE, SNAPSHOTS, routers))
    assert all(r["ok"] for r in results), [r["errors"] for r in results if not r["ok"]]
    return results


def test_the_roles_read_plan_keys_at_all():
    reads = planned_reads()
    for key in (("host", ("image_pull", "pull")), ("host", ("router", "workers_url")),
                ("host", ("router", "liveness_url")), ("host", ("health_url",)), ("cluster", ("head",))):
        assert key in reads, key


def test_every_key_a_role_reads_is_one_the_plan_writes(rendered):
    missing = {}
    for (kind, path), where in planned_reads().items():
        mappings = [p for r in rendered for p in r["plans"].values()] if kind == "host" else [
            r["cluster"] for r in rendered]
        if not any(_has(m, path) for m in mappings):
            missing["%s: %s" % (kind, ".".join(path))] = where
    assert not missing, "roles read keys no rendered plan has (add them to the plan, or read them with a " \
                        "default where the plan writes them only sometimes): %s" % missing


@pytest.mark.parametrize("line, read", [
    ('    image: "{{ launch_plan.image_pul.pull }}"', ("host", ("image_pul", "pull"))),
    ('    url: "{{ plan_result.plans[inventory_hostname].router.workers_url }}"', ("host", ("router", "workers_url"))),
    ('    h: "{{ plan_result.cluster.router.host }}"', ("cluster", ("router", "host"))),
    ('    n: "{{ plan_result.plans[capacity_head].container.name }}"', ("host", ("container", "name"))),
])
def test_a_read_is_seen(line, read):
    texts = [("roles/r/tasks/main.yml", '- set_fact:\n    launch_plan: "{{ plan_result.plans[inventory_hostname] }}"\n'
              + line + "\n")]
    assert read in planned_reads(texts)


@pytest.mark.parametrize("line", [
    '    ca: "{{ router_plan.router.backend_ca_file | default(omit, true) }}"',
    '    ca: "{{ plan_result.cluster.tls.controller_ca_file | default(\'\') }}"',
    '    hosts: "{{ plan_result.plans.keys() | list }}"',
    '    # image: "{{ launch_plan.nothing_here }}"',
])
def test_a_guarded_read_or_a_comment_is_not_required(line):
    texts = [("roles/r/tasks/main.yml", '- set_fact:\n    router_plan: "{{ plan_result.plans[inventory_hostname] }}"\n'
              + line + "\n")]
    assert planned_reads(texts) == {}
