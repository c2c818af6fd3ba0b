"""Small functions with one job in the rehearsal cluster too: no function in sim/ (the kimisim package behind
sim/simctl, the node tools, the stand-in, the engine helpers, lightnodes, testca) is over 60 lines."""
import ast
import os

from tests.unit.sim.test_simctl_router import REPO

MAX_LINES = 60
SIM = os.path.join(REPO, "sim")
SKIP_DIRS = {".state", "__pycache__", ".pytest_cache"}


def _is_python(path):
    if path.endswith(".py"):
        return True
    with open(path, "rb") as f:
        return f.read(64).startswith(b"#!/usr/bin/env python3")


def sim_python_files():
    for root, dirs, files in os.walk(SIM):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(files):
            path = os.path.join(root, name)
            if os.path.isfile(path) and _is_python(path):
                yield path


def long_functions(source, limit=MAX_LINES):
    """(name, first line, length) of every function or method longer than ``limit`` lines, decorators excluded."""
    return [(n.name, n.lineno, n.end_lineno - n.lineno + 1) for n in ast.walk(ast.parse(source))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > limit]


def test_the_walk_sees_a_long_function_and_counts_its_lines():
    body = "".join("    x%d = %d\n" % (i, i) for i in range(60))
    assert long_functions("def ok():\n" + body[:-len("    x59 = 59\n")]) == []
    assert long_functions("class A:\n    def m(self):\n" + body.replace("    ", "        ")) == [("m", 2, 61)]


def test_the_walk_covers_the_simctl_package_the_node_tools_and_the_standin():
    rel = {os.path.relpath(p, SIM) for p in sim_python_files()}
    assert {"simctl", os.path.join("kimisim", "up.py"), os.path.join("nodetools", "nvtools.py"),
            os.path.join("standin", "vllm_standin", "main.py"), "lightnodes.py", "testca.py",
            os.path.join("engine", "make_model.py")} <= rel


def test_no_function_in_sim_is_over_60_lines():
    found = []
    for path in sim_python_files():
        with open(path) as f:
            found += ["%s:%d %s (%d lines)" % (os.path.relpath(path, REPO), line, name, n)
                      for name, line, n in long_functions(f.read())]
    assert found == []
