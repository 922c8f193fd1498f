"""The Device protocol: what the backend-agnostic harness (`kernels_env.execute.harness`) needs from a backend.

A Device owns an array module (`xp`: cupy or numpy) and knows how to load a compiled module and
launch one kernel of it. Trials, poisoning, comparison and timing orchestration live in `execute/`
(`harness.evaluate` and the modules its docstring names) and `judge/`, written once for every backend.
"""
from __future__ import annotations

from typing import Any, Protocol
from collections.abc import Callable, Sequence

from kernels_env.core.config import EnvConfig
from kernels_env.core.program import CompiledModule, KernelSignature


# The scratch one evaluation may declare, summed over its buffers, unless a backend's setting says
# otherwise (the launch block's own limit is 2 GiB per buffer, 32 buffers). The harness refuses more
# before allocating anything (execute/buffers.py scratch_refusal): on the cpu backend every byte is
# zeroed and poisoned in host memory; on a shared GPU an allocation that fails would be the
# environment's `env_error`, which takes a row out of the reward instead of failing it.
DEFAULT_SCRATCH_BYTES = 4 << 30


def scratch_limit(setting: str) -> int:
    """The scratch limit from environment variable `setting` (bytes), else DEFAULT_SCRATCH_BYTES
    (ValueError naming a bad value)."""
    from kernels_env.core.units import bytes_setting
    return bytes_setting(setting, DEFAULT_SCRATCH_BYTES, 1)


class KernelRuntimeError(Exception):
    """The candidate failed while running (illegal address, misaligned access, launch failure...)."""
    where: str = ""  # the launch it happened in, set by the harness ("launch 2 (k, line 3)")


class KernelTimeout(Exception):
    """The candidate exceeded its time limit (a hang)."""
    where: str = ""  # as KernelRuntimeError.where


class FatalDeviceError(KernelRuntimeError):
    """The device is unusable after this error (sticky CUDA error): the worker must be replaced."""
    result: Any = None  # the Result to report, set by harness.evaluate before re-raising
    surfaced_in: str = ""  # the environment's own failure it was found behind (harness.evaluate), if any


def untimed_hooks(fn: Callable[[], Any]) -> tuple[Callable[[int], None], Callable[[Any], None],
                                                  Callable[[int, Any], None]]:
    """(prepare, fn, check) for `Device.time_runs` of `fn()` with nothing to prepare or check:
    how every backend implements `time_ms`."""
    return (lambda i: None), (lambda state: fn()), (lambda i, state: None)


class Program(Protocol):
    """A loaded module: kernels by name, ready to launch."""
    kernels: dict[str, KernelSignature]


class TimedSync(Protocol):
    """The optional extension `synchronize(timeout_s=...)`: wait at most about `timeout_s`
    (None: no limit), raising KernelTimeout past it (the harness checks that a backend has it)."""

    def synchronize(self, timeout_s: float | None = None) -> None: ...


def launches_xp_arrays(device: Any) -> bool:
    """Whether the device's kernels take arrays of its array module (`device.xp`) as they are: True
    on a GPU (CuPy arrays are device memory) and for in-process test devices; False where a device
    says `launches_xp_arrays = False` (the cpu backend: its kernels run in another process and see
    only the buffers it made, `device.empty` / `device.to_device`)."""
    return bool(getattr(device, "launches_xp_arrays", True))


class Device(Protocol):
    name: str  # "cupy" | "cpu"
    xp: Any  # the array module for device buffers (cupy or numpy)
    timing_device: str  # "cuda" | "cpu"
    timing_comparable: bool  # False on cpu: no speedup is computed

    def load(self, compiled: CompiledModule, config: EnvConfig) -> Program:
        """Load / build the module. Raises kernels_env.compiler.compile.CompileError for code this backend
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

    def time_runs(self, prepare: Callable[[int], Any], fn: Callable[[Any], None],
                  check: Callable[[int, Any], None], warmup: int, runs: int, flush_l2: bool,
                  timeout_s: float | None = None) -> list[float]:
        """Time `warmup + runs` verified runs; return the milliseconds of the last `runs`.

        Run i (0-based, warm-up included) is, in stream order: `state = prepare(i)` (enqueue fresh
        inputs, poisoned outputs, zeroed scratch), an L2 flush when `flush_l2`, the timed window
        around `fn(state)` (the plan's launches, nothing else), then `check(i, state)` (enqueue
        device-side checks of the run's outputs). Only `fn` is inside the window. No host sync
        happens between runs: the host may enqueue run i+1 while run i executes, and waits only
        to bound how far it runs ahead and at the end of the call, polling `timeout_s` (the time
        left in the stage): a run still going past it raises KernelTimeout (DeviceHang on a GPU).
        Errors of the runs raise KernelRuntimeError / FatalDeviceError as synchronize() does."""
        ...

    def time_ms(self, fn: Any, warmup: int, runs: int, flush_l2: bool) -> list[float]:
        """`time_runs` of `fn()` with nothing to prepare or check (benchmarks, trusted code)."""
        ...

    def close(self) -> None: ...
