"""Launching a resolved launch plan on a `Device`: binding it to sizes, its arguments, the launches.

`bind_plan` resolves the plan with `launch.check_plan`, the resolver the parse-time checks use too;
`launch_all` launches it in order, synchronizing after each launch in the correctness trials (so an
error names its launch) and not at all in the timing stage. `takes_timeout` tells whether a backend
has the optional `timeout_s` extension of a Device method (`synchronize`, `time_runs`, and `launch`
for a backend whose launches run to the end before returning: the cpu one).
"""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from kernels_env.backends.base import Device, KernelRuntimeError, KernelTimeout, Program, TimedSync
from kernels_env.core.program import KernelParam, KernelSignature, Submission
from kernels_env.source.launch import SCALAR_TYPES, FormatError, ResolvedLaunch, ResolvedPlan, check_plan
from kernels_env.source.launch import scalar_type as launch_scalar_type
from kernels_env.source.signatures import find_hidden_kernels
from kernels_env.tasks.spec import Task


def bind_plan(submission: Submission, task: Task, sizes: dict[str, int],
              kernels: dict[str, KernelSignature]) -> ResolvedPlan:
    """The submission's launch plan resolved with these sizes by `launch.check_plan`, the one
    resolver the parse-time static checks call too: the same plan gets the same status
    (`format_error`) and message on both paths. Raises FormatError."""
    return check_plan(submission.plan, kernels, task, sizes, find_hidden_kernels(submission.cuda_source))


def scalar_type(param: KernelParam) -> type:
    """The numpy type a scalar argument is cast to, from the kernel parameter's C type
    (`launch.SCALAR_TYPES`); FormatError for a type the launch block cannot pass."""
    st = launch_scalar_type(param)
    if st is None:
        raise FormatError(f"parameter {param.name!r} has type {param.ctype!r}, which cannot take a "
                          f"scalar argument; supported: {', '.join(sorted(SCALAR_TYPES))}")
    return np.dtype(st.dtype).type


def launch_args(launch: ResolvedLaunch, arrays: dict[str, Any]) -> list[Any]:
    """A resolved launch's device arguments: the array of a buffer or scratch buffer, None for a
    null pointer, a value as a numpy scalar of its parameter's type."""
    return [arrays[a.name] if a.kind in ("buffer", "scratch") else
            None if a.kind == "null" else np.dtype(a.dtype).type(a.value) for a in launch.args]


@functools.lru_cache(maxsize=64)
def takes_timeout(device_type: type, method: str) -> bool:
    """Whether `device_type.method` accepts `timeout_s` (an optional Device protocol extension)."""
    try:
        return "timeout_s" in inspect.signature(getattr(device_type, method)).parameters
    except (TypeError, ValueError, AttributeError):
        return False


def sync(device: Device, timeout_s: float | None) -> None:
    """device.synchronize(), passing a soft timeout where the backend accepts one
    (`synchronize(timeout_s=...)` is an optional extension of the Device protocol)."""
    if takes_timeout(type(device), "synchronize"):
        cast(TimedSync, device).synchronize(timeout_s=timeout_s)
    else:
        device.synchronize()


def launch_all(device: Device, program: Program, plan: ResolvedPlan, arrays: dict[str, Any],
               sync_timeout: Callable[[], float | None] | None) -> None:
    """Launch the plan in order. With `sync_timeout`, synchronize after each launch so an error is
    attributed to its launch; without, launch asynchronously (timing)."""
    for bl in plan.launches:
        args = launch_args(bl, arrays)
        try:
            if sync_timeout is not None and takes_timeout(type(device), "launch"):  # a synchronous launch
                cast(Any, device).launch(program, bl.kernel, bl.grid, bl.block, bl.shared_bytes, args,
                                         timeout_s=sync_timeout())
            else:
                device.launch(program, bl.kernel, bl.grid, bl.block, bl.shared_bytes, args)
            if sync_timeout is not None:
                sync(device, sync_timeout())
        except (KernelRuntimeError, KernelTimeout) as e:
            if not getattr(e, "where", None):
                e.where = bl.where
            raise
