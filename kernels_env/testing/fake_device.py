"""A numpy `Device` whose kernels are Python callables registered by name.

It lets the backend-agnostic harness (trials, poisoning, comparison, timing orchestration, status
mapping) be tested on any machine. A fake kernel is `fn(grid, block, shared_bytes, *args)`; it
mutates the numpy arrays it is given, may raise KernelRuntimeError / KernelTimeout /
FatalDeviceError to simulate CUDA failures, and each has a fake cost in ms used by `time_ms`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np

from kernels_env.backends.base import untimed_hooks
from kernels_env.core.config import EnvConfig
from kernels_env.core.program import CompiledModule, KernelSignature

FakeKernel = Callable[..., None]


@dataclass
class FakeProgram:
    kernels: dict[str, KernelSignature]
    functions: dict[str, FakeKernel]


@dataclass
class FakeDevice:
    """numpy-backed Device. `kernel_ms` per kernel and `reference_ms` drive the fake timer."""
    kernels: dict[str, FakeKernel] = field(default_factory=dict)
    kernel_ms: dict[str, float] = field(default_factory=dict)
    reference_ms: float = 1.0
    timing_comparable: bool = True
    name: str = "fake"
    timing_device: str = "cuda"
    xp: Any = np
    launches: list[tuple[str, tuple[int, int, int], tuple[int, int, int], int]] = field(default_factory=list)
    time_calls: list[dict[str, Any]] = field(default_factory=list)
    syncs: int = 0
    jobs_ended: int = 0

    def register(self, name: str, fn: FakeKernel, ms: float = 0.1) -> None:
        self.kernels[name] = fn
        self.kernel_ms[name] = ms

    def load(self, compiled: CompiledModule, config: EnvConfig) -> FakeProgram:
        missing = [k for k in compiled.kernels if k not in self.kernels]
        if missing:
            raise KeyError(f"FakeDevice has no registered kernel for {missing}; registered: "
                           f"{sorted(self.kernels)}")
        return FakeProgram(kernels=dict(compiled.kernels),
                           functions={k: self.kernels[k] for k in compiled.kernels})

    def launch(self, program: Any, kernel: str, grid: tuple[int, int, int], block: tuple[int, int, int],
               shared_bytes: int, args: Sequence[Any]) -> None:
        self.launches.append((kernel, (grid[0], grid[1], grid[2]), (block[0], block[1], block[2]), int(shared_bytes)))
        fn = program.functions[kernel] if hasattr(program, "functions") else self.kernels[kernel]
        fn(tuple(grid), tuple(block), int(shared_bytes), *args)

    def synchronize(self) -> None:
        self.syncs += 1

    def to_device(self, host_array: Any) -> Any:
        return np.array(host_array, copy=True)

    def to_host(self, array: Any) -> Any:
        return np.asarray(array)

    def empty(self, shape: tuple[int, ...], dtype: str) -> Any:
        return np.empty(shape, dtype=dtype)

    def zeros(self, shape: tuple[int, ...], dtype: str) -> Any:
        return np.zeros(shape, dtype=dtype)

    def time_ms(self, fn: Any, warmup: int, runs: int, flush_l2: bool) -> list[float]:
        """`time_runs` of `fn()` with nothing to prepare or check."""
        return self.time_runs(*untimed_hooks(fn), warmup, runs, flush_l2)

    def time_runs(self, prepare: Callable[[int], Any], fn: Callable[[Any], None],
                  check: Callable[[int, Any], None], warmup: int, runs: int, flush_l2: bool,
                  timeout_s: float | None = None) -> list[float]:
        """Runs prepare/fn/check warmup + runs times; a run's fake time is the sum of its kernels'
        costs, or `reference_ms` when it launched no kernel (the reference)."""
        times, launched_before = [], len(self.launches)
        for i in range(warmup + runs):
            state = prepare(i)
            before = len(self.launches)
            fn(state)
            launched = self.launches[before:]
            ms = sum(self.kernel_ms.get(k[0], 0.1) for k in launched) if launched else self.reference_ms
            check(i, state)
            if i >= warmup:
                times.append(ms)
        self.time_calls.append({"warmup": warmup, "runs": runs, "flush_l2": flush_l2, "timeout_s": timeout_s,
                                "launches": len(self.launches) - launched_before})  # 0: the reference
        return times

    def end_job(self) -> None:
        self.jobs_ended += 1

    def close(self) -> None:
        pass
