"""kernels_env: compile, check and time CUDA kernels written by a policy (no JAX import here).

The public API: everything leap_jax (or a user's research code) needs is a name of this module, so the
folders behind it can move without breaking a caller (tests/leap_jax/test_import_graph.py checks that
leap_jax imports nothing else of kernels_env). The core types are imported at once; the rest loads on
first use, so `import kernels_env` stays cheap.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from kernels_env.core.config import BACKENDS, POOL_MODES, RAY_MIN_HEARTBEAT_S, SIZE_SETS, EnvConfig, StageLimits
from kernels_env.core.result import KernelResources, Mismatch, Result, Timing
from kernels_env.core.status import Status

if TYPE_CHECKING:  # the lazy names' real types, for the type checker
    from kernels_env.execute.score import score
    from kernels_env.judge.feedback import render_feedback
    from kernels_env.problems import ProblemError, load_problem, register_problems
    from kernels_env.schedule.pool import EvalPool, Job
    from kernels_env.tasks import get_task, list_tasks, split_tasks, subsample, task_names
    from kernels_env.tasks.generated import (CURRENT_FAMILY_VERSION, FAMILY_VERSIONS, generated_task_names,
                                             validation_task_names)
    from kernels_env.tasks.spec import Task
    from kernels_env.tasks.world import world_task_names

# name -> the module that defines it, imported on first use
_LAZY = {
    "score": "kernels_env.execute.score",
    "EvalPool": "kernels_env.schedule.pool",
    "Job": "kernels_env.schedule.pool",
    "render_feedback": "kernels_env.judge.feedback",
    "Task": "kernels_env.tasks.spec",
    "get_task": "kernels_env.tasks",
    "list_tasks": "kernels_env.tasks",
    "task_names": "kernels_env.tasks",
    "split_tasks": "kernels_env.tasks",
    "subsample": "kernels_env.tasks",
    "generated_task_names": "kernels_env.tasks.generated",
    "validation_task_names": "kernels_env.tasks.generated",
    "FAMILY_VERSIONS": "kernels_env.tasks.generated",
    "CURRENT_FAMILY_VERSION": "kernels_env.tasks.generated",
    "world_task_names": "kernels_env.tasks.world",
    "load_problem": "kernels_env.problems",
    "register_problems": "kernels_env.problems",
    "ProblemError": "kernels_env.problems",
}

__all__ = ["BACKENDS", "POOL_MODES", "RAY_MIN_HEARTBEAT_S", "SIZE_SETS", "CURRENT_FAMILY_VERSION", "EnvConfig",
           "EvalPool", "FAMILY_VERSIONS", "Job", "KernelResources", "Mismatch", "ProblemError", "Result",
           "StageLimits", "Status", "Task", "Timing", "generated_task_names", "get_task", "list_tasks",
           "load_problem", "register_problems", "render_feedback", "score", "split_tasks", "subsample",
           "task_names", "validation_task_names", "world_task_names"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'kernels_env' has no attribute {name!r}")
