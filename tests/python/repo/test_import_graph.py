"""The modules of python/collops import each other without a cycle: a module-level import of one
module by another, followed from module to module, never leads back to where it started (ruff's
E402, in the format stage, keeps every module-level import at the top). Read from the sources with
ast, so nothing is imported."""

import ast
import os

from repo_paths import PYTHON_DIR

PACKAGE = "collops"


def module_files():
    """{"collops.x.y": path} for every module of the package (a package is its __init__.py)."""
    root = os.path.join(PYTHON_DIR, PACKAGE)
    found = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".py"):
                continue
            parts = os.path.relpath(os.path.join(folder, name), PYTHON_DIR)[:-3].split(os.sep)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = os.path.join(folder, name)
    return found


def module_level_imports(module, path, modules):
    """The package's modules that `module` imports at module level (in if/try blocks too, not in
    functions or classes), each resolved to a module of `modules`."""
    is_package = path.endswith("__init__.py")
    base = module.split(".") if is_package else module.split(".")[:-1]
    targets = set()

    def add(name):
        while name and name not in modules:  # `from .x import f`: f is no module, x is
            name = name.rpartition(".")[0]
        if name and name != module:
            targets.add(name)

    def visit(statements):
        for node in statements:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == PACKAGE:
                        add(alias.name)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    anchor = base[: len(base) - node.level + 1]
                    source = ".".join(anchor + ([node.module] if node.module else []))
                elif (node.module or "").split(".")[0] == PACKAGE:
                    source = node.module
                else:
                    continue
                for alias in node.names:
                    name = f"{source}.{alias.name}"
                    add(name if name in modules else source)
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(node.orelse)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
                visit(getattr(node, "finalbody", []))

    with open(path) as f:
        visit(ast.parse(f.read(), path).body)
    return targets


def find_cycle(graph):
    """One cycle of `graph` as [a, b, ..., a], or None."""
    state = {}  # module -> "open" while on the path, "done" after

    def walk(node, path):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                cycle = walk(nxt, path + [nxt])
                if cycle:
                    return cycle
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = walk(start, [start])
            if cycle:
                return cycle
    return None


def test_the_package_is_found():
    modules = module_files()
    assert {"collops", "collops.ops", "collops._gradients", "collops.compat"} <= set(modules)


def test_no_import_cycle_in_the_package():
    modules = module_files()
    graph = {m: module_level_imports(m, p, modules) for m, p in modules.items()}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_a_cycle_is_found():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
