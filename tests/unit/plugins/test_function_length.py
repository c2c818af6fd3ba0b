"""Small functions with one job: no function or method in plugins/ is over 60 lines (decorators excluded)."""
import ast
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PLUGINS = os.path.join(REPO, "plugins")
MAX_LINES = 60


def long_functions(source, limit=MAX_LINES):
    """(name, first line, length) of every function or method longer than ``limit`` lines."""
    return [(n.name, n.lineno, n.end_lineno - n.lineno + 1) for n in ast.walk(ast.parse(source))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > limit]


def plugin_files():
    out = []
    for root, dirs, files in os.walk(PLUGINS):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        out += [os.path.relpath(os.path.join(root, f), REPO) for f in sorted(files) if f.endswith(".py")]
    return out


def test_the_walk_sees_a_long_function_and_counts_its_lines():
    body = "".join("    x%d = %d\n" % (i, i) for i in range(60))
    assert long_functions("def ok():\n" + body[:-len("    x59 = 59\n")]) == []
    assert long_functions("class A:\n    async def m(self):\n" + body.replace("    ", "        ")) == [("m", 2, 61)]
    assert len(plugin_files()) > 100


def test_no_function_in_plugins_is_over_60_lines():
    found = {}
    for path in plugin_files():
        with open(os.path.join(REPO, path)) as handle:
            found.update(((path, name, line), length) for name, line, length in long_functions(handle.read()))
    assert found == {}
