"""Issue #37: tests/conftest.py is the one file under tests/ and sim/ that edits sys.path, and the unit tests of
plugins/ sit in directories mirroring its packages (docs/dev/testing.md, "Where unit tests live")."""
import os
import re

from tests.helpers.runner import REPO

EDIT = re.compile(r"sys\.path\s*(\.\s*(insert|append|extend|remove|pop|clear)\b|\[|\+?=)")


def test_no_sys_path_edit_outside_the_conftest():
    found = []
    for top in ("sim", "tests"):
        for root, dirs, files in os.walk(os.path.join(REPO, top)):
            dirs[:] = [d for d in dirs if d not in ("__pycache__", ".state")]
            for name in files:
                path = os.path.join(root, name)
                if not name.endswith(".py") or os.path.relpath(path, REPO) == os.path.join("tests", "conftest.py"):
                    continue
                with open(path, encoding="utf-8") as handle:
                    found += ["%s:%d" % (os.path.relpath(path, REPO), n)
                              for n, line in enumerate(handle, 1) if EDIT.search(line.split("#", 1)[0])]
    assert found == []


def test_no_test_file_directly_in_the_plugin_package_roots():
    for kind in ("module_utils", "plugin_utils"):
        here = os.path.join(REPO, "tests", "unit", "plugins", kind)
        assert [n for n in os.listdir(here) if n.endswith(".py")] == [], kind
        packages = {d for d in os.listdir(os.path.join(REPO, "plugins", kind))
                    if os.path.isdir(os.path.join(REPO, "plugins", kind, d)) and d != "__pycache__"}
        assert {d for d in os.listdir(here) if d != "__pycache__"} <= packages, kind
