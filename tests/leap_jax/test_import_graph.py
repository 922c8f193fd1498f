"""leap_jax's subpackages import each other without a cycle (issue "One source of truth per concept").

The graph is read from the source with `ast`, so it sees every import: module level, inside
functions (the lazy ones), under `if TYPE_CHECKING:`. A node is a subfolder of leap_jax (bootstrap,
models, parallel, rl, rollout, sampling, train) or `leap_jax` for its top-level modules (main,
experiment, report, ...); an edge A -> B is an import in A of a module of B.
"""
from __future__ import annotations

import ast
import itertools
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "leap_jax"
TOP = "leap_jax"  # the node of the package's top-level modules


def _node(module: str) -> str | None:
    """The graph node of a dotted module name, or None outside leap_jax."""
    parts = module.split(".")
    if parts[0] != "leap_jax":
        return None
    return parts[1] if len(parts) > 1 and (ROOT / parts[1]).is_dir() else TOP


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
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
            # `from leap_jax import train` imports the subpackage: count base.name as well
            out += [(f"{base}.{a.name}", n.lineno) for a in n.names] + [(base, n.lineno)]
    return out


def import_graph() -> dict[str, dict[str, list[str]]]:
    """node -> {imported node: ["path:line", ...]} over every .py file under leap_jax/."""
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(ROOT.rglob("*.py")):
        module = _module_name(path)
        src = _node(module)
        assert src is not None
        tree = ast.parse(path.read_text(), filename=str(path))
        for name, line in _imported(tree, module, path.name == "__init__.py"):
            dst = _node(name)
            if dst is not None and dst != src:
                where = f"{path.relative_to(ROOT.parent)}:{line}"
                if where not in graph[src][dst]:
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


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_graph_sees_function_level_imports():
    graph = import_graph()
    # leap_jax.train.trainer imports leap_jax.rl.dcp inside a method only
    assert "leap_jax/train/trainer.py" in " ".join(graph["train"]["rl"])
    assert set(graph) >= {"bootstrap", "train", TOP}


def test_subpackages_import_graph_is_acyclic():
    graph = import_graph()
    cycle = find_cycle({src: set(dsts) for src, dsts in graph.items()})
    if cycle:
        lines = [f"{a} -> {b}: " + ", ".join(graph[a][b]) for a, b in itertools.pairwise(cycle)]
        raise AssertionError("leap_jax's subpackages import each other in a cycle "
                             f"{' -> '.join(cycle)}:\n" + "\n".join(lines))
