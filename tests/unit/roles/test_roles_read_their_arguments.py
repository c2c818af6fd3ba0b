"""A role reads its arguments, the plan and what it registers or sets itself - not another role's registers or facts
left over from an earlier play (the smoke role used to read the fabric role's ``fabric_result`` and the preflight
role's ``preflight_probe_result``; the playbooks now pass them as ``smoke_fabric_result`` / ``smoke_node_probe``).

A role may read another role's result only when it includes that role itself and the other role's argument spec
names the result (``C(name)``) as what it leaves for its caller (node_secrets' ``node_secrets_files``, launch's
``launch_wait``). ``plan_result`` is the plan contract, which every role checks with the plan role's require task.
"""
import collections
import glob
import os
import re

import yaml

from tests.helpers.runner import REPO

JINJA = re.compile(r"{{(.*?)}}|{%(.*?)%}", re.S)
BARE = {"when", "that", "failed_when", "changed_when", "until", "loop", "with_items"}
NAME = re.compile(r"\b[a-z][a-z0-9_]*\b")
INCLUDES = ("ansible.builtin.include_role", "ansible.builtin.import_role")
CONTRACT = {"plan_result"}


def _items(node):
    """Every (key, value) pair of a parsed YAML document, nested ones included."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from _items(value)
    elif isinstance(node, list):
        for value in node:
            yield from _items(value)


def _expressions(node, key=None):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _expressions(v, k)
    elif isinstance(node, list):
        for v in node:
            yield from _expressions(v, key)
    elif isinstance(node, str):
        if key in BARE:
            yield node
        for m in JINJA.finditer(node):
            yield m.group(1) or m.group(2)


def _task_files():
    """role -> parsed task and handler files."""
    found = collections.defaultdict(list)
    for path in sorted(glob.glob(os.path.join(REPO, "roles", "*", "tasks", "*.yml"))
                       + glob.glob(os.path.join(REPO, "roles", "*", "handlers", "*.yml"))):
        with open(path) as handle:
            found[path.split(os.sep)[-3]].append((os.path.relpath(path, REPO), yaml.safe_load(handle)))
    return found


def produced(files):
    """name -> the roles that register it or set it as a fact."""
    out = collections.defaultdict(set)
    for role, docs in files.items():
        for _path, doc in docs:
            for key, value in _items(doc):
                if key == "register" and isinstance(value, str):
                    out[value].add(role)
                elif key == "ansible.builtin.set_fact" and isinstance(value, dict):
                    out.update((n, out[n] | {role}) for n in value if n != "cacheable")
    return out


def included(docs):
    """The collection's roles a role includes or imports."""
    return set(v["name"].rsplit(".", 1)[-1] for _p, doc in docs for k, v in _items(doc)
               if k in INCLUDES and isinstance(v, dict) and "name" in v)


def _declared(role, name):
    path = os.path.join(REPO, "roles", role, "meta", "argument_specs.yml")
    with open(path) as handle:
        return "C(%s)" % name in handle.read()


def foreign_reads(files):
    """(file, name, producing roles) for each read of another role's result the rules above do not allow."""
    made = produced(files)
    out = []
    for role, docs in files.items():
        calls = included(docs)
        for path, doc in docs:
            names = set(n for e in _expressions(doc) for n in NAME.findall(e))
            for name in sorted(names - CONTRACT):
                others = made.get(name, set()) - {role}
                if others and not (role in made.get(name, set()) or any(
                        o in calls and _declared(o, name) for o in others)):
                    out.append((path, name, sorted(others)))
    return out


def test_roles_read_no_other_roles_leftovers():
    assert foreign_reads(_task_files()) == []


def test_the_detector_sees_a_leftover_and_allows_a_declared_result():
    fabric = [("roles/fabric/tasks/main.yml", [{"ansible.builtin.set_fact": {"fabric_result": 1}}])]
    smoke = [("roles/smoke/tasks/main.yml", [{"ansible.builtin.debug": {"msg": "{{ fabric_result.provenance }}"}}])]
    assert foreign_reads({"fabric": fabric, "smoke": smoke}) == [
        ("roles/smoke/tasks/main.yml", "fabric_result", ["fabric"])]
    launch = [("roles/launch/tasks/main.yml", [{"register": "launch_wait"}])]
    capacity = [("roles/capacity/tasks/point.yml", [
        {"ansible.builtin.include_role": {"name": "gpufleet.kimi_k3.launch"}},
        {"ansible.builtin.debug": {"msg": "{{ hostvars[h].launch_wait.ready }}"}}])]
    assert foreign_reads({"launch": launch, "capacity": capacity}) == []
