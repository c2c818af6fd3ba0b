"""The variable table: generated docs match it, every kimi_k3_* variable the repo reads is declared."""
import os
import re

import pytest

from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import variables as plan_variables
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import recipe_data
from ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.plan import variable_docs
from tests.helpers.runner import REPO

RECIPE = recipe_data.load_recipe()
SNAPSHOTS = recipe_data.load_snapshots()
# Places that read inventory variables (plugins, roles, playbooks, templates, the sim's and examples' inventories).
READ_DIRS = ("plugins", "roles", "playbooks", "inventories", "molecule")
# Strings that look like a variable but are not one (with the reason).
NOT_VARIABLES = {
    "kimi_k3_smoke_send_release": "a contextvars.ContextVar name in module_utils/smoke/client.py",
    "kimi_k3_cluster": "a Prometheus target label written by plugin_utils/monitoring/targets.py",
    "kimi_k3_vllm": "the Prometheus job name of the vLLM targets (plugin_utils/monitoring/targets.py)",
    "kimi_k3_router": "the Prometheus job name of the router targets (plugin_utils/monitoring/targets.py)",
}
TOKEN = re.compile(r"\bkimi_k3_[a-z0-9_]*[a-z0-9]\b")


def _committed(rel):
    with open(os.path.join(REPO, rel)) as handle:
        return handle.read()


@pytest.mark.parametrize("rel", ["README.md", variable_docs.VARIABLES_MD, variable_docs.FRAGMENT_PATH])
def test_generated_documents_match_the_table(rel):
    if not os.path.exists(os.path.join(REPO, "README.md")):
        pytest.skip("partial copy of the tree (e.g. the mutation run): no README.md")
    expected = variable_docs.rendered_files(RECIPE, SNAPSHOTS, _committed("README.md"))[rel]
    assert _committed(rel) == expected, "%s is out of date: run scripts/gen_variable_docs.py" % rel


def test_the_table_names_each_variable_once_with_every_field():
    names = [d["name"] for d in plan_variables.VARIABLES]
    assert len(names) == len(set(names))
    for decl in plan_variables.VARIABLES:
        assert decl["scope"] in plan_variables.SCOPES and decl["meaning"].endswith(".")
        assert decl["type"] in ("str", "int", "bool", "port", "int_or_auto", "size", "list", "dict", "str_or_list")
        assert decl["format"] is None or decl["format"] in plan_variables.FORMATS
        assert variable_docs.allowed_text(decl, RECIPE, SNAPSHOTS) and variable_docs.default_text(decl)


def _files():
    for top in READ_DIRS:
        for root, _dirs, files in os.walk(os.path.join(REPO, top)):
            for name in files:
                if name.endswith((".py", ".yml", ".yaml", ".j2", ".json", ".sh", ".cfg", ".ini")):
                    yield os.path.join(root, name)


def test_every_kimi_k3_variable_read_anywhere_is_declared():
    undeclared = {}
    for path in _files():
        if path.endswith(os.path.join("doc_fragments", "plan_variables.py")):
            continue
        with open(path, errors="replace") as handle:
            for token in TOKEN.findall(handle.read()):
                if token not in plan_variables.BY_NAME and token not in NOT_VARIABLES:
                    undeclared.setdefault(token, os.path.relpath(path, REPO))
    assert not undeclared, "read but not declared in plan_variables.VARIABLES: %s" % undeclared


def test_the_scan_would_see_an_undeclared_variable():
    assert TOKEN.findall("{{ kimi_k3_not_a_thing | default(1) }} and kimi_k3_*") == ["kimi_k3_not_a_thing"]
