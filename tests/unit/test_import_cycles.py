"""No import cycles: between the files of plugins/ (a lazy import inside a function counts, since it only hides the
cycle), between its packages (module_utils/smoke, plugin_utils/plan, ...; the plugin types' flat directories count
as one package each), and likewise in the rehearsal cluster's Python packages under sim/. A cycle makes the import
order matter and the two sides one unit in all but name: break it by moving the shared part to a module both may
import (module_utils/common/tables.py), by moving a file to the package it belongs with (smoke/capacity_check.py),
or by passing the callee in (plan/layouts.py takes the plan renderer as ``build``)."""
import os

import pytest

from tests.helpers import import_cycles as C
from tests.helpers import plugin_layout as L

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _package(node):
    """module_utils/smoke/report and module_utils/smoke (its __init__) -> module_utils/smoke; action/cluster_plan ->
    action (a flat plugin type)."""
    if L.plugin_type(node) in L.PACKAGE_ROOTS and node.count("/") == 1:
        return node
    return L.package_of(node) or L.plugin_type(node)


@pytest.fixture(scope="module")
def plugin_edges():
    return L.import_graph(os.path.join(REPO, "plugins"))[0]


@pytest.fixture(scope="module")
def sim_edges():
    return C.sim_graph(os.path.join(REPO, "sim"))


def test_no_cycle_between_the_files_of_plugins(plugin_edges):
    assert C.cycles(plugin_edges) == []


def test_no_cycle_between_the_packages_of_plugins(plugin_edges):
    assert C.cycles(C.collapse(plugin_edges, _package)) == []


def test_no_cycle_in_the_sim_packages(sim_edges):
    assert {"kimisim.cli", "vllm_standin.server"} <= set(sim_edges), "the sim packages were not found"
    assert C.cycles(sim_edges) == []
    assert C.cycles(C.collapse(sim_edges, lambda n: n.split(".")[0])) == []


def test_the_detector_sees_a_cycle_through_a_lazy_import(tmp_path):
    base = L.COLLECTION
    files = {
        "module_utils/smoke/__init__.py": "",
        "module_utils/smoke/report.py": "def f():\n    from %smodule_utils.smoke import sections\n" % base,
        "module_utils/smoke/sections.py": "from %smodule_utils.smoke import report\n" % base,
        "module_utils/capacity/__init__.py": "",
        "module_utils/capacity/curve.py": "from %smodule_utils.smoke import report\n" % base,
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    edges = L.import_graph(str(tmp_path))[0]
    assert C.cycles(edges) == [["module_utils/smoke/report", "module_utils/smoke/sections"]]
    edges["module_utils/smoke/report"].add("module_utils/capacity/curve")
    assert C.cycles(C.collapse(edges, _package)) == [["module_utils/capacity", "module_utils/smoke"]]


def test_relative_imports_of_sim_are_resolved(tmp_path):
    pkg = tmp_path / "standin" / "vllm_standin"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .server import main\n")
    (pkg / "server.py").write_text("from . import engine\n")
    (pkg / "engine.py").write_text("from vllm_standin import server\n")
    (tmp_path / "kimisim").mkdir()
    (tmp_path / "kimisim" / "__init__.py").write_text("")
    edges = C.sim_graph(str(tmp_path))
    assert edges["vllm_standin"] == {"vllm_standin.server"}
    assert C.cycles(edges) == [["vllm_standin.engine", "vllm_standin.server"]]
