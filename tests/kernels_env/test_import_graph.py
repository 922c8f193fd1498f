"""kernels_env's folders import each other without a cycle, and kernels_env never imports leap_jax.

The folders are the stages a submission travels (docs/LAYOUT.md): core <- source <- build <- backends
<- judge <- execute <- schedule <- the top-level modules (__init__, cli). The graph is read from the
source with `ast` (tests/import_graph.py), so it sees every import: module level, inside functions
(the lazy ones), under `if TYPE_CHECKING:`. A node is a subfolder of kernels_env or `kernels_env`
for its top-level modules; an edge A -> B is an import in A of a module of B.
"""
from __future__ import annotations

from tests.import_graph import assert_acyclic, import_graph, imports

TOP = "kernels_env"  # the node of the package's top-level modules
STAGES = {"core", "source", "build", "backends", "judge", "execute", "schedule"}


def test_graph_sees_function_level_imports():
    graph = import_graph(TOP)
    # kernels_env.schedule.pipeline imports kernels_env.execute.harness inside a function only
    assert "kernels_env/schedule/pipeline.py" in " ".join(graph["schedule"]["execute"])
    assert set(graph) >= (STAGES - {"core"}) | {"testing", TOP}


def test_folders_import_graph_is_acyclic():
    assert_acyclic(TOP)


def test_kernels_env_never_imports_leap_jax():
    back = [f"{where}: {name}" for _, name, where in imports(TOP) if name.split(".")[0] == "leap_jax"]
    assert not back, "kernels_env must not import leap_jax (the dependency is one-way):\n" + "\n".join(back)
