"""leap_jax's subpackages, and its modules, import each other without a cycle, and imports sit at the
top of a module except where the module must stay free of JAX.

The graph is read from the source with `ast` (tests/import_graph.py), so it sees every import: module
level, inside functions (the lazy ones), under `if TYPE_CHECKING:`. A node is a subfolder of
leap_jax (bootstrap, models, parallel, rl, rollout, sampling, train) or `leap_jax` for its top-level
modules (main); an edge A -> B is an import in A of a module of B. The
module graph has one node per module instead.
"""
from __future__ import annotations

from tests.import_graph import (assert_acyclic, assert_graph_acyclic, find_cycle, function_level_imports, import_graph, imports,
                                module_import_graph)

TOP = "leap_jax"  # the node of the package's top-level modules

# The modules that may import inside a function, each with why: every other module imports at its top,
# so reading the top of a file shows what it depends on.
LAZY_IMPORTS_ALLOWED = {
    "leap_jax.main": "the CLI parses its arguments and checks the config before importing JAX",
    "leap_jax.experiment.driver": "the driver process starts the runs as subprocesses and must not take GPU "
                           "memory through JAX; only exporting the policy loads a checkpoint",
    "leap_jax.experiment.runs_report": "free of JAX (reads metrics files); matplotlib only when plotting, with its Agg backend",
    "leap_jax.experiment.plots": "free of JAX; matplotlib only when plotting, with its Agg backend",
    "leap_jax.train.metrics": "free of JAX (the report reads metrics with it); the TensorBoard writer "
                              "(tensorboardX or torch's) and tqdm only when a run logs to them",
    "leap_jax.models.random_checkpoint": "torch and transformers write the HF folder; both are optional "
                                         "(the parity extra), so they load only when a checkpoint is written",
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


def test_leap_jax_uses_only_kernels_env_public_names():
    """leap_jax imports `kernels_env` itself, never a module inside it: the environment's folders can move
    without breaking the trainer (kernels_env/__init__.py is the public API)."""
    import kernels_env
    public = {"kernels_env"} | {f"kernels_env.{n}" for n in kernels_env.__all__}  # `from kernels_env import n`
    inside = [f"{where}: {name}" for _, name, where in imports(TOP)
              if name.split(".")[0] == "kernels_env" and name not in public]
    assert not inside, "leap_jax imports kernels_env's internals (add the name to kernels_env's API):\n" + "\n".join(inside)
    missing = [n for n in kernels_env.__all__ if not hasattr(kernels_env, n)]
    assert not missing, f"kernels_env.__all__ names what it cannot give: {missing}"
