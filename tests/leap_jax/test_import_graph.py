"""leap_jax's subpackages import each other without a cycle.

The graph is read from the source with `ast` (tests/import_graph.py), so it sees every import: module
level, inside functions (the lazy ones), under `if TYPE_CHECKING:`. A node is a subfolder of
leap_jax (bootstrap, models, parallel, rl, rollout, sampling, train) or `leap_jax` for its top-level
modules (main, experiment, report, ...); an edge A -> B is an import in A of a module of B.
"""
from __future__ import annotations

from tests.import_graph import assert_acyclic, find_cycle, import_graph

TOP = "leap_jax"  # the node of the package's top-level modules


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_graph_sees_function_level_imports():
    graph = import_graph(TOP)
    # leap_jax.train.trainer imports leap_jax.rl.dcp inside a method only
    assert "leap_jax/train/trainer.py" in " ".join(graph["train"]["rl"])
    assert set(graph) >= {"bootstrap", "train", TOP}


def test_subpackages_import_graph_is_acyclic():
    assert_acyclic(TOP)
