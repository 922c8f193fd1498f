"""kernels_env's folders import each other without a cycle, and kernels_env never imports leap_jax.

The folders are the stages a submission travels (docs/LAYOUT.md): core <- source <- compiler <- backends
<- judge <- execute <- schedule <- the top-level modules (__init__, cli). The graph is read from the
source with `ast` (tests/import_graph.py), so it sees every import: module level, inside functions
(the lazy ones), under `if TYPE_CHECKING:`. A node is a subfolder of kernels_env or `kernels_env`
for its top-level modules; an edge A -> B is an import in A of a module of B. Inside schedule/, the
modules import one way too: the pool factory (pool.py) above both modes (process_pool.py, ray_pool.py
and ray_host.py), which share pool_base.py.
"""
from __future__ import annotations

from tests.import_graph import assert_acyclic, assert_graph_acyclic, import_graph, imports, module_import_graph

TOP = "kernels_env"  # the node of the package's top-level modules
STAGES = {"core", "source", "compiler", "backends", "judge", "execute", "schedule"}
SCHEDULE = "kernels_env.schedule"


def test_graph_sees_function_level_imports():
    graph = import_graph(TOP)
    # kernels_env.schedule.warmup imports kernels_env.execute.score inside a function only
    assert "kernels_env/schedule/warmup.py" in " ".join(graph["schedule"]["execute"])
    assert set(graph) >= (STAGES - {"core"}) | {"testing", TOP}


def test_folders_import_graph_is_acyclic():
    assert_acyclic(TOP)


def test_kernels_env_never_imports_leap_jax():
    back = [f"{where}: {name}" for _, name, where in imports(TOP) if name.split(".")[0] == "leap_jax"]
    assert not back, "kernels_env must not import leap_jax (the dependency is one-way):\n" + "\n".join(back)


def test_schedule_modules_import_graph_is_acyclic():
    """No module of kernels_env.schedule imports itself back through others, lazy imports included
    (pool.py imported ray_pool.py for mode="ray" while ray_pool.py and ray_host.py imported pool.py)."""
    assert_graph_acyclic(module_import_graph(TOP, SCHEDULE), "kernels_env.schedule's modules")


def test_module_graph_sees_function_level_imports():
    graph = module_import_graph(TOP, SCHEDULE)
    # only inside a function: EvalPool(mode="ray") imports Ray's pool lazily
    assert f"{SCHEDULE}.ray_pool" in graph[f"{SCHEDULE}.pool"]


def test_pool_factory_is_above_both_modes():
    """pool.py only imports: nothing in schedule/ imports it, and the shared base imports neither mode."""
    graph = module_import_graph(TOP, SCHEDULE)
    back = [f"{src}: " + ", ".join(dsts[f"{SCHEDULE}.pool"]) for src, dsts in graph.items() if f"{SCHEDULE}.pool" in dsts]
    assert not back, "schedule modules import the pool factory (it must stay on top):\n" + "\n".join(back)
    base = set(graph[f"{SCHEDULE}.pool_base"])
    assert not base & {f"{SCHEDULE}.{m}" for m in ("pool", "process_pool", "ray_pool", "ray_host")}, base
