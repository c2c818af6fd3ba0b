"""Where code lives says where it runs: the modules and everything they import (transitively) stay under
plugins/module_utils, which holds nothing else; no plugin uses a private name of another plugin type's file; every
package has its __init__.py; docs/dev/architecture.md's package table matches the tree and the import graph."""
import os
import re

import pytest

from tests.helpers import plugin_layout as L

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
PLUGINS = os.path.join(REPO, "plugins")


@pytest.fixture(scope="module")
def graph():
    return L.import_graph(PLUGINS)


def test_modules_import_nothing_outside_module_utils(graph):
    edges, _private = graph
    outside = sorted(n for n in L.node_side(edges) if L.plugin_type(n) not in ("modules", "module_utils"))
    assert outside == []


def test_module_utils_holds_only_node_side_code(graph):
    edges, _private = graph
    node = L.node_side(edges)
    controller_only = sorted(n for n in edges if L.plugin_type(n) == "module_utils" and n not in node)
    assert controller_only == [], "no module imports these: move them to plugins/plugin_utils"


def test_no_plugin_uses_another_plugin_types_private_names(graph):
    _edges, private = graph
    assert L.cross_type_private_uses(private) == []


def test_every_package_has_an_init():
    missing = []
    for root in L.PACKAGE_ROOTS:
        for path, _dirs, files in os.walk(os.path.join(PLUGINS, root)):
            if path != os.path.join(PLUGINS, root) and "__pycache__" not in path and "__init__.py" not in files:
                missing.append(os.path.relpath(path, REPO))
    assert missing == []


def _fake_tree(tmp_path, files):
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(tmp_path)


def test_a_module_reaching_plugin_utils_through_module_utils_is_seen(tmp_path):
    base = L.COLLECTION
    plugins = _fake_tree(tmp_path, {
        "modules/m.py": "from %smodule_utils.smoke import runner\n" % base,
        "module_utils/smoke/__init__.py": "",
        "module_utils/smoke/runner.py": "from %splugin_utils.plan.topology import plan\n" % base,
        "module_utils/smoke/unused.py": "",
        "plugin_utils/plan/__init__.py": "",
        "plugin_utils/plan/topology.py": "",
    })
    edges, _private = L.import_graph(plugins)
    node = L.node_side(edges)
    reached = sorted(n for n in node if L.plugin_type(n) == "plugin_utils")
    assert reached == ["plugin_utils/plan", "plugin_utils/plan/topology"]
    assert sorted(n for n in edges if L.plugin_type(n) == "module_utils" and n not in node) == [
        "module_utils/smoke/unused"]


def test_private_names_across_plugin_types_are_seen(tmp_path):
    base = L.COLLECTION
    plugins = _fake_tree(tmp_path, {
        "action/a.py": "from %sfilter.f import _helper, public\nfrom %sfilter import f\nf._other()\nf.__doc__\n"
                       % (base, base),
        "filter/f.py": "def _helper(): pass\n",
        "filter/g.py": "from %sfilter.f import _helper\n" % base,
    })
    _edges, private = L.import_graph(plugins)
    assert L.cross_type_private_uses(private) == [("action/a", "filter/f", "_helper"),
                                                  ("action/a", "filter/f", "_other")]


def _doc_table():
    with open(os.path.join(REPO, "docs", "dev", "architecture.md")) as handle:
        text = handle.read()
    section = text[text.index("## Packages"):]
    section = section[:section.find("\n## ", 1)]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`plugins/"):
            path, runs, _domain, files, users = cells
            rows[path.strip("`").rstrip("/")[len("plugins/"):]] = (
                runs, sorted(re.findall(r"`([a-z_]+)`", files)),
                sorted(u.split("plugins/", 1)[-1] for u in re.findall(r"`([a-z_/]+)`", users)))
    return rows


def test_architecture_package_table_matches_the_tree(graph):
    edges, _private = graph
    table = L.package_table(edges)
    node = L.node_side(edges)
    expected = {}
    for package, (files, users) in table.items():
        runs = "inside modules" if package in node else "controller"
        expected[package] = (runs, files, users)
    assert _doc_table() == expected
