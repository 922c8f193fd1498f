"""The import graph of a package's subfolders (or of the modules of one subpackage), read from the
source with `ast`, and its cycles.

Shared by tests/leap_jax/test_import_graph.py and tests/kernels_env/test_import_graph.py. Reading the
source sees every import: module level, inside functions (the lazy ones), under `if TYPE_CHECKING:`.
A node is a subfolder of the package or the package's name for its top-level modules; an edge A -> B
is an import in A of a module of B. `module_import_graph` has one node per module of one subpackage
instead (kernels_env.schedule: the pool above its modes).
"""
from __future__ import annotations

import ast
import itertools
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def node(package: str, module: str) -> str | None:
    """The graph node of a dotted module name, or None outside `package`."""
    parts = module.split(".")
    if parts[0] != package:
        return None
    return parts[1] if len(parts) > 1 and (REPO / package / parts[1]).is_dir() else package


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, int]]:
    """(dotted module name, line) of every import in `tree`, relative ones resolved."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            out += [(a.name, n.lineno) for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                pkg = module.split(".") if is_package else module.split(".")[:-1]
                pkg = pkg[:len(pkg) - (n.level - 1)]
                base = ".".join(pkg + ([n.module] if n.module else []))
            # `from pkg import sub` imports the subpackage: count base.name as well
            out += [(f"{base}.{a.name}", n.lineno) for a in n.names] + [(base, n.lineno)]
    return out


def imports(package: str) -> list[tuple[str, str, str]]:
    """(importing module, imported module, "path:line") of every import in every .py file of `package`."""
    out = []
    for path in sorted((REPO / package).rglob("*.py")):
        module = _module_name(path)
        tree = ast.parse(path.read_text(), filename=str(path))
        out += [(module, name, f"{path.relative_to(REPO)}:{line}")
                for name, line in _imported(tree, module, path.name == "__init__.py")]
    return out


def import_graph(package: str) -> dict[str, dict[str, list[str]]]:
    """node -> {imported node: ["path:line", ...]} over every .py file of `package`."""
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for module, name, where in imports(package):
        src, dst = node(package, module), node(package, name)
        assert src is not None
        if dst is not None and dst != src and where not in graph[src][dst]:
            graph[src][dst].append(where)
    return graph


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A cycle [a, b, ..., a] of the directed graph, or None (depth-first search, three colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        path.append(v)
        for w in sorted(edges.get(v, ())):
            if state.get(w) == 1:
                return path[path.index(w):] + [w]
            if w not in state and (found := visit(w)):
                return found
        path.pop()
        state[v] = 2
        return None

    for v in sorted(edges):
        if v not in state and (found := visit(v)):
            return found
    return None


def module_import_graph(package: str, under: str) -> dict[str, dict[str, list[str]]]:
    """module -> {imported module: ["path:line", ...]} between the modules of the dotted package `under`
    (e.g. "kernels_env.schedule": its __init__ and every module in its folder and below), every import
    counted, function-local ones included; `from under import name` counts when name is a module."""
    modules = {module for module, _, _ in imports(package)}
    inside = {m for m in modules if m == under or m.startswith(under + ".")}
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for module, name, where in imports(package):
        if module in inside and name in inside and name != module and where not in graph[module][name]:
            graph[module][name].append(where)
    return graph


def assert_graph_acyclic(graph: dict[str, dict[str, list[str]]], what: str) -> None:
    """Raise AssertionError naming a cycle of `graph` and the imports that make it."""
    cycle = find_cycle({src: set(dsts) for src, dsts in graph.items()})
    if cycle:
        lines = [f"{a} -> {b}: " + ", ".join(graph[a][b]) for a, b in itertools.pairwise(cycle)]
        raise AssertionError(f"{what} import each other in a cycle {' -> '.join(cycle)}:\n" + "\n".join(lines))


def assert_acyclic(package: str) -> None:
    """Raise AssertionError naming a cycle of `package`'s subfolder graph and the imports that make it."""
    assert_graph_acyclic(import_graph(package), f"{package}'s subpackages")


def function_level_imports(package: str) -> dict[str, list[str]]:
    """module -> ["path:line", ...] of its imports inside a function body (lazy imports), for every
    module of `package` that has one; module-level ones and `if TYPE_CHECKING:` blocks do not count."""
    out: dict[str, list[str]] = defaultdict(list)
    for path in sorted((REPO / package).rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[_module_name(path)] += [f"{path.relative_to(REPO)}:{n.lineno}" for n in ast.walk(fn)
                                            if isinstance(n, (ast.Import, ast.ImportFrom))]
    return {module: sorted(set(lines)) for module, lines in out.items() if lines}
