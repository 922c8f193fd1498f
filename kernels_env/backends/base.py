"""The Device protocol: what the backend-agnostic harness (`kernels_env.harness`) needs from a backend.

A Device owns an array module (`xp`: cupy or numpy) and knows how to load a compiled module and
launch one kernel of it. Trials, poisoning, comparison and timing orchestration live in the harness,
written once for every backend.
"""
from __future__ import annotations

from typing import Any, Protocol
from collections.abc import Sequence

from kernels_env.config import EnvConfig
from kernels_env.program import CompiledModule, KernelSignature


class KernelRuntimeError(Exception):
    """The candidate failed while running (illegal address, misaligned access, launch failure...)."""


class KernelTimeout(Exception):
    """The candidate exceeded its time limit (a hang)."""


class FatalDeviceError(KernelRuntimeError):
    """The device is unusable after this error (sticky CUDA error): the worker must be replaced."""


class Program(Protocol):
    """A loaded module: kernels by name, ready to launch."""
    kernels: dict[str, KernelSignature]


class Device(Protocol):
    name: str  # "cupy" | "cpu"
    xp: Any  # the array module for device buffers (cupy or numpy)
    timing_device: str  # "cuda" | "cpu"
    timing_comparable: bool  # False on cpu: no speedup is computed

    def load(self, compiled: CompiledModule, config: EnvConfig) -> Program:
        """Load / build the module. Raises kernels_env.compile.CompileError for code this backend
        cannot build (e.g. a feature the cpu backend does not support)."""
        ...

    def launch(self, program: Program, kernel: str, grid: tuple[int, int, int],
               block: tuple[int, int, int], shared_bytes: int, args: Sequence[Any]) -> None:
        """Launch asynchronously. `args` are device arrays (for pointer params) or numpy scalars
        already cast to the C parameter type. Raises KernelRuntimeError on a launch failure."""
        ...

    def synchronize(self) -> None:
        """Wait for all launched work; raises KernelRuntimeError / FatalDeviceError / KernelTimeout."""
        ...

    def to_device(self, host_array: Any) -> Any: ...
    def to_host(self, array: Any) -> Any: ...
    def empty(self, shape: tuple[int, ...], dtype: str) -> Any: ...
    def zeros(self, shape: tuple[int, ...], dtype: str) -> Any: ...

    def time_ms(self, fn: Any, warmup: int, runs: int, flush_l2: bool) -> list[float]:
        """Run `fn()` warmup + runs times; return per-run milliseconds of the timed runs
        (device sync and, when asked, an L2 flush before each run; the flush is not timed)."""
        ...

    def close(self) -> None: ...
