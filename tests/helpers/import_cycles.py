"""Cycles in an import graph, and the graph of the rehearsal cluster's Python packages (read with ``ast``, nothing
is imported).

plugins/ has its own reader (tests/helpers/plugin_layout.py, nodes ``module_utils/smoke/report``); sim/ is read here:
its packages live on two import roots (``sim/`` holds ``kimisim``, ``sim/standin`` holds ``vllm_standin``; the
programs under them put those roots on sys.path) and its nodes are dotted names (``kimisim.up``).
"""
import ast
import os

# import root below sim/ -> the packages on it
SIM_ROOTS = {".": ("kimisim",), "standin": ("vllm_standin",)}


def cycles(edges):
    """The strongly connected components of more than one node (Tarjan's algorithm, iterative), each sorted."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def collapse(edges, group):
    """The graph between groups (``group(node)``: its package) without the edges inside a group."""
    out = {}
    for node, targets in edges.items():
        source = group(node)
        out.setdefault(source, set()).update(group(t) for t in targets if group(t) != source)
    return out


def sim_modules(sim_dir):
    """{dotted name: file} of every Python file in the packages of SIM_ROOTS (``__init__`` named after its package)."""
    found = {}
    for root, packages in SIM_ROOTS.items():
        base = os.path.normpath(os.path.join(sim_dir, root))
        for package in packages:
            for path, _dirs, names in os.walk(os.path.join(base, package)):
                for name in names:
                    if name.endswith(".py"):
                        dotted = os.path.relpath(os.path.join(path, name), base)[:-3].replace(os.sep, ".")
                        found[dotted[:-len(".__init__")] if dotted.endswith(".__init__") else dotted] = \
                            os.path.join(path, name)
    return found


def _package(module, files):
    """The package a module's relative imports start from (itself for an ``__init__``)."""
    return module if files[module].endswith("__init__.py") else module.rpartition(".")[0]


def _targets(module, tree, files):
    """The known modules one file imports (absolute or relative, at any depth: a lazy import counts)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in files)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = _package(module, files).split(".")
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                name = base + "." + alias.name
                if name in files:
                    out.add(name)
                elif base in files:
                    out.add(base)
    return out - {module}


def sim_graph(sim_dir):
    """{module: set of modules it imports} over the sim packages."""
    files = sim_modules(sim_dir)
    edges = {}
    for module, path in files.items():
        with open(path, encoding="utf-8") as handle:
            edges[module] = _targets(module, ast.parse(handle.read(), path), files)
    return edges
