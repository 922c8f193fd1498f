"""leap_jax's subpackages, and its modules, import each other without a cycle, and imports sit at the
top of a module except where the module must stay free of JAX.

The graph is read from the source with `ast` (tests/import_graph.py), so it sees every import: module
level, inside functions (the lazy ones), under `if TYPE_CHECKING:`. A node is a subfolder of
leap_jax (bootstrap, models, parallel, rl, rollout, sampling, train) or `leap_jax` for its top-level
modules (main, experiment, report, ...); an edge A -> B is an import in A of a module of B. The
module graph has one node per module instead.
"""
from __future__ import annotations

from tests.import_graph import (assert_acyclic, assert_graph_acyclic, find_cycle, function_level_imports, import_graph,
                                module_import_graph)

TOP = "leap_jax"  # the node of the package's top-level modules

# The modules that may import inside a function, each with why: every other module imports at its top,
# so reading the top of a file shows what it depends on.
LAZY_IMPORTS_ALLOWED = {
    "leap_jax.main": "the CLI parses its arguments and checks the config before importing JAX",
    "leap_jax.experiment": "the driver process starts the runs as subprocesses and must not take GPU "
                           "memory through JAX; only exporting the policy loads a checkpoint",
    "leap_jax.report": "free of JAX (reads metrics files); matplotlib only when plotting, with its Agg backend",
    "leap_jax.experiment_plots": "free of JAX; matplotlib only when plotting, with its Agg backend",
    "leap_jax.train.metrics": "free of JAX (the report reads metrics with it); the TensorBoard writer "
                              "(tensorboardX or torch's) and tqdm only when a run logs to them",
    "leap_jax.train.algorithms": "free of JAX: config validation reads the algorithm table; each "
                                 "algorithm's reward and advantage functions (rl/, JAX) load when called",
}


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_graph_sees_function_level_imports():
    graph = import_graph(TOP)
    # leap_jax.main imports leap_jax.train.trainer inside main() only
    assert "leap_jax/main.py" in " ".join(graph[TOP]["train"])
    assert set(graph) >= {"bootstrap", "train", TOP}
    lazy = function_level_imports(TOP)
    assert any(where.startswith("leap_jax/main.py:") for where in lazy["leap_jax.main"])


def test_subpackages_import_graph_is_acyclic():
    assert_acyclic(TOP)


def test_modules_import_graph_is_acyclic():
    """No two modules import each other, directly or round a loop (shared pieces sit below both:
    sampling/decode_base.py under the decode strategies, rollout/run_state.py under the two rollout loops)."""
    graph = module_import_graph(TOP, TOP)
    assert "leap_jax.sampling.decode_base" in graph["leap_jax.sampling.speculative"]
    assert_graph_acyclic(graph, "leap_jax's modules")


def test_function_level_imports_only_where_a_module_must_stay_free_of_jax():
    lazy = function_level_imports(TOP)
    unexpected = {m: where for m, where in lazy.items() if m not in LAZY_IMPORTS_ALLOWED}
    assert not unexpected, ("imports inside functions (move them to the module's top, or list the module in "
                            f"LAZY_IMPORTS_ALLOWED with the reason): {unexpected}")
    stale = sorted(set(LAZY_IMPORTS_ALLOWED) - set(lazy))
    assert not stale, f"LAZY_IMPORTS_ALLOWED lists modules without a function-level import: {stale}"
