"""The collection's import graph, read from the source with ``ast`` (nothing is imported).

A node of the graph is a Python file under ``plugins/``, named by its path below ``plugins/`` without ``.py``
(``modules/vllm_smoke``, ``module_utils/smoke/runner``, ``plugin_utils/plan/topology``; a package's ``__init__.py``
is named after the package). Its plugin type is the first path component (``modules``, ``module_utils``,
``plugin_utils``, ``action``, ``filter``, ``lookup``, ...). tests/unit/plugins/action/test_plugin_layout.py holds the
layout rules to it and docs/dev/architecture.md's package table to ``package_table``.
"""
import ast
import os

COLLECTION = "ansible_collections.gpufleet.kimi_k3.plugins."
PACKAGE_ROOTS = ("module_utils", "plugin_utils")


def _node_files(plugins_dir):
    """{node name: file path} for every Python file under plugins_dir."""
    files = {}
    for root, _dirs, names in os.walk(plugins_dir):
        for name in names:
            if not name.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(root, name), plugins_dir)[:-3]
            if rel.endswith("/__init__"):
                rel = rel[:-len("/__init__")]
            files[rel] = os.path.join(root, name)
    return files


def _target(dotted, files):
    """The node a dotted module name inside the collection names, or None."""
    if not dotted.startswith(COLLECTION):
        return None
    name = dotted[len(COLLECTION):].replace(".", "/")
    return name if name in files else None


def _imports_of(tree, files):
    """[(node, imported name or None, local name)] of one file's imports of collection code."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                module = _target(node.module + "." + alias.name, files)
                if module is not None:
                    found.append((module, None, alias.asname or alias.name))
                    continue
                module = _target(node.module, files)
                if module is not None:
                    found.append((module, alias.name, alias.asname or alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                module = _target(alias.name, files)
                if module is not None:
                    found.append((module, None, alias.asname or alias.name))
    return found


def import_graph(plugins_dir):
    """({node: set of nodes it imports}, {node: [(node, name) of every private name it uses from another node]})."""
    files = _node_files(plugins_dir)
    edges, private = {}, {}
    for name, path in files.items():
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), path)
        found = _imports_of(tree, files)
        edges[name] = {module for module, _member, _local in found}
        edges[name] |= {parent for module in edges[name] for parent in _parents(module) if parent in files}
        uses = [(module, member) for module, member, _local in found if member and _is_private(member)]
        modules_by_local = {local: module for module, member, local in found if member is None}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and _is_private(node.attr) and isinstance(node.value, ast.Name)
                    and node.value.id in modules_by_local):
                uses.append((modules_by_local[node.value.id], node.attr))
        private[name] = uses
    return edges, private


def _parents(node):
    """The packages Python imports before a module: ``module_utils/smoke/runner`` -> ``module_utils/smoke``."""
    parts = node.split("/")
    return ["/".join(parts[:i]) for i in range(2, len(parts))]


def _is_private(name):
    return name.startswith("_") and not name.startswith("__")


def plugin_type(node):
    return node.split("/")[0]


def reachable(edges, starts):
    """Every node the starts import, transitively, the starts included."""
    seen, stack = set(), list(starts)
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(edges.get(node, ()))
    return seen


def node_side(edges):
    """The modules and everything they import: the code that ships to the nodes."""
    return reachable(edges, [n for n in edges if plugin_type(n) == "modules"])


def cross_type_private_uses(private):
    """[(importer, imported node, private name)] where the two nodes are of different plugin types."""
    return [(importer, module, member) for importer, uses in sorted(private.items()) for module, member in uses
            if plugin_type(module) != plugin_type(importer)]


def package_of(node):
    """The package a file of module_utils or plugin_utils lives in (``plugin_utils/plan``), else None."""
    parts = node.split("/")
    if parts[0] in PACKAGE_ROOTS and len(parts) >= 3:
        return "/".join(parts[:2])
    return None


def package_table(edges):
    """{package: (sorted file names, sorted importers outside the package, by package or plugin type)}."""
    table = {}
    for node in edges:
        package = package_of(node)
        if package is not None:
            table.setdefault(package, (set(), set()))[0].add(node.split("/")[-1])
    for importer, imported in edges.items():
        source = package_of(importer) or plugin_type(importer)
        for module in imported:
            package = package_of(module)
            if package is not None and package != source:
                table[package][1].add(source)
    return {package: (sorted(names), sorted(users)) for package, (names, users) in table.items()}
