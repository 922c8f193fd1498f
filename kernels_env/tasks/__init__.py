"""The task suite (DESIGN 3.1): `get_task`, `list_tasks`, `task_names`, `split_tasks`.

Importing this package registers every suite module once (level 1 families and level 2 fusions).
"""
from kernels_env.tasks.spec import Buffer, Scalar, Task
from kernels_env.tasks.registry import get_task, list_tasks, register, split_tasks, subsample, task_names

from kernels_env.tasks import (  # noqa: F401  (imported for their registrations)
    level1_elementwise,
    level1_reductions,
    level1_norms,
    level1_matmul,
    level1_conv_pool,
    level1_scan_loss,
    level2,
)

__all__ = ["Buffer", "Scalar", "Task", "get_task", "list_tasks", "register", "split_tasks", "subsample", "task_names"]
