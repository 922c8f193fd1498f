"""kernels_env: compile, check and time CUDA kernels written by a policy (no JAX import here).

Public API (stable across the project; leap_jax uses only these):
    Status, Result, EnvConfig, get_task, list_tasks, score, EvalPool, render_feedback
Heavy submodules are imported lazily so `import kernels_env` stays cheap.
"""
from kernels_env.core.status import Status
from kernels_env.core.result import Result, Timing, Mismatch, KernelResources
from kernels_env.core.config import EnvConfig

__all__ = [
    "Status", "Result", "Timing", "Mismatch", "KernelResources", "EnvConfig",
    "get_task", "list_tasks", "score", "EvalPool", "render_feedback",
]


def __getattr__(name):  # lazy re-exports: keep import light, avoid cycles
    if name in ("get_task", "list_tasks"):
        from kernels_env import tasks
        return getattr(tasks, name)
    if name == "score":
        from kernels_env.execute.score import score
        return score
    if name == "EvalPool":
        from kernels_env.schedule.pool import EvalPool
        return EvalPool
    if name == "render_feedback":
        from kernels_env.judge.feedback import render_feedback
        return render_feedback
    raise AttributeError(f"module 'kernels_env' has no attribute {name!r}")
