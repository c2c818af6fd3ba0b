"""The collection's code cited in docstrings, comments and docs exists: a module moved or renamed leaves its old name
behind in prose that no import checks (``module_utils.plan_handover``, ``plan_sizing.py`` after the split into
packages). Three spellings are checked, in the Python files of plugins/, tests/, sim/, scripts/ and benchmarks/ and
in docs/ and setup.cfg (the mutation runs' file lists):

- a path ``plugins/<...>.py`` (relative to the repository);
- a dotted name ``plugin_utils.<package>.<module>`` / ``module_utils.<...>`` (optionally with the
  ``ansible_collections.gpufleet.kimi_k3.plugins.`` prefix), which may end in a name defined in the module;
- a bare ``<package>_<module>.py``, the flat layout's file name, where ``<package>/<module>.py`` now exists and
  no file of that name does (``plan_variables.py`` is a doc fragment).

This file's own examples are stale on purpose and not scanned.
"""
import os
import re

import pytest

from tests.helpers.runner import REPO

SCANNED = ("plugins", "tests", "sim", "scripts", "benchmarks", "docs")
SCANNED_FILES = ("setup.cfg",)
PATH = re.compile(r"(?<![\w/.-])plugins/[\w/]+\.py\b")
DOTTED = re.compile(r"(?:(?<=gpufleet\.kimi_k3\.plugins\.)|(?<![\w.]))((?:plugin_utils|module_utils)(?:\.\w+)+)")
BARE = re.compile(r"(?<![\w/.-])([a-z]+)_(\w+)\.py\b")
# (file, cited) -> why it need not exist
ALLOWED = {
    ("tests/unit/test_collection_build.py", "plugins/modules/dummy.py"): "the test writes it into a copy of the tree",
}


def _files():
    for name in SCANNED_FILES:
        yield os.path.join(REPO, name)
    for top in SCANNED:
        for root, dirs, names in os.walk(os.path.join(REPO, top)):
            # not the rehearsal's state (sim/.state: the engine site being built beside the unit stage) nor caches
            dirs[:] = [d for d in dirs if d not in ("__pycache__", "golden_plans") and not d.startswith(".")]
            for name in sorted(names):
                if name.endswith((".py", ".md")):
                    yield os.path.join(root, name)


def _packages():
    """{package name: its directory} of plugins/module_utils and plugins/plugin_utils (``smoke``, ``plan``, ...)."""
    out = {}
    for kind in ("module_utils", "plugin_utils"):
        base = os.path.join(REPO, "plugins", kind)
        out.update((d, os.path.join(base, d)) for d in os.listdir(base) if os.path.isdir(os.path.join(base, d)))
    return out


def _file_names():
    return set(n for _root, _dirs, names in os.walk(os.path.join(REPO, "plugins")) for n in names)


def dotted_exists(name, plugins_dir):
    """Whether ``plugin_utils.plan.sizing`` (or ``...sizing.fit``: a name in it) names a module or package, with at
    least the package and, for a name below a module, the module part existing."""
    parts = name.split(".")
    for i in range(len(parts), 1, -1):
        base = os.path.join(plugins_dir, *parts[:i])
        if os.path.isdir(base) and i == len(parts):
            return True
        if os.path.exists(base + ".py"):
            return True
    return False


def stale_citations(path, text, packages, names, repo=REPO):
    """[cited name] in ``text`` that does not exist (see the module docstring); ``names``: the file names under
    plugins/."""
    out = [m.group(0) for m in PATH.finditer(text) if not os.path.exists(os.path.join(repo, m.group(0)))]
    out += [m.group(1) for m in DOTTED.finditer(text) if not dotted_exists(m.group(1), os.path.join(repo, "plugins"))]
    for m in BARE.finditer(text):
        package, module = m.group(1), m.group(2)
        if (package in packages and m.group(0) not in names
                and os.path.exists(os.path.join(packages[package], module + ".py"))):
            out.append(m.group(0))
    return [c for c in out if (os.path.relpath(path, repo), c) not in ALLOWED]


def test_every_cited_module_exists():
    packages, names = _packages(), _file_names()
    found = {}
    for path in _files():
        if os.path.abspath(path) == os.path.abspath(__file__):
            continue
        with open(path, encoding="utf-8") as handle:
            stale = stale_citations(path, handle.read(), packages, names)
        if stale:
            found[os.path.relpath(path, REPO)] = sorted(set(stale))
    assert found == {}


def test_allowed_entries_are_still_needed():
    for (rel, cited), _why in ALLOWED.items():
        with open(os.path.join(REPO, rel), encoding="utf-8") as handle:
            assert cited in handle.read(), "stale ALLOWED entry: %s no longer cites %s" % (rel, cited)


@pytest.mark.parametrize("text,stale", [
    ("see plugins/plugin_utils/plan/sizing.py", []),
    ("see plugins/plugin_utils/plan_sizing.py", ["plugins/plugin_utils/plan_sizing.py"]),
    ("(module_utils.plan_handover)", ["module_utils.plan_handover"]),
    ("plugin_utils.plan.sizing.fit and module_utils.smoke", []),
    ("ansible_collections.gpufleet.kimi_k3.plugins.plugin_utils.role_variables", ["plugin_utils.role_variables"]),
    ("the old `smoke_correctness.py`; vLLM's `kv_cache_utils.py`", ["smoke_correctness.py"]),
    ("the fragment plan_variables.py", []),
    ("community.docker.plugins.module_utils._api.tls", []),
])
def test_the_detector(text, stale):
    assert stale_citations(os.path.join(REPO, "x.py"), text, _packages(), _file_names()) == stale
