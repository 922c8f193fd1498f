"""The two exceptions the evaluation's stages stop a run with, and `stage_outcome`, the one place that
turns a stage's exceptions into its Result.

`EnvFault` is the environment's failure (the reference, input generation, the backend): the run is
an `env_error`, never blamed on the policy. `Failed` is a policy-attributable failure that already
carries the Result to report. They live in judge/ because the comparison raises `EnvFault` too.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from kernels_env.backends.base import FatalDeviceError, KernelRuntimeError, KernelTimeout
from kernels_env.core.result import Result

T = TypeVar("T")


class EnvFault(Exception):
    """The environment (reference, input generation, backend) failed: env_error."""


class Failed(Exception):
    """A policy-attributable failure carrying its Result."""

    def __init__(self, result: Result) -> None:
        super().__init__(result.message)
        self.result = result


class _Run(Protocol):
    def device_failure(self, e: Exception, stage: str) -> Result: ...


def stage_outcome(run: _Run, stage: str, body: Callable[[], T]) -> T | Result:
    """`body()`, or the Result its failure earns: a `Failed`'s own Result, a kernel's runtime error or
    hang through `run.device_failure` (runtime_error or timeout); a `FatalDeviceError` (a sticky error:
    the context is unusable) propagates, so the evaluation reports it and the worker is replaced."""
    try:
        return body()
    except Failed as f:
        return f.result
    except FatalDeviceError:
        raise
    except (KernelRuntimeError, KernelTimeout) as e:
        return run.device_failure(e, stage)

