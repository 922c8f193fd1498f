"""CpuDevice: the `cpu` backend's Device (kernels_env.backends.base) over translated, host-built kernels.

load() translates the module's device code (translate.py), builds it (build.py, cached) and starts
a runner process (sandbox.py, runner.py) that opens the shared object: this process never loads the
submission's native code. launch() sends the grid to the runner, which runs it synchronously through
the native runtime (cpu_runtime.h) on buffers shared with this process (memory.shared_empty).
Runtime failures are kept and raised by the next synchronize() or to_host(), as CUDA reports
asynchronous errors. Timings are CPU times and marked not comparable.
"""
from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np

from kernels_env.backends.base import FatalDeviceError, KernelRuntimeError, KernelTimeout, untimed_hooks
from kernels_env.backends.cpu import build as _build
from kernels_env.backends.cpu.memory import max_scratch_bytes, shared_empty, shared_lookup
from kernels_env.backends.cpu.sandbox import Runner, RunnerError, RunnerLoadError, RunnerTimeout
from kernels_env.backends.cpu.translate import UnsupportedFeature, translate
from kernels_env.core.config import HANG_GRACE_S, EnvConfig
from kernels_env.core.program import CompiledModule, KernelSignature
from kernels_env.source.launch import scalar_type

E_OK, E_FAULT, E_TIMEOUT, E_TRAP, E_FPE, E_STACK, E_CONFIG, E_ABORT, E_ILL, E_SMEM = range(10)
_LAUNCH_LOCK = threading.Lock()  # the runtime's state is per process: one launch at a time
MIN_LAUNCH_S = 0.05  # a launch's least limit (the runtime's CPU-time timer is off at 0)


def _compile_error(log: str) -> Exception:
    from kernels_env.compiler.compile import CompileError
    return CompileError(log)


@dataclass
class CpuProgram:
    """A loaded module: the shared object, its kernel launchers, and whether fibers are needed."""
    kernels: dict[str, KernelSignature]
    path: Path
    uses_sync: bool
    timeout_s: float
    runner: Any = field(repr=False, default=None)  # sandbox.Runner: the process running its kernels
    entries: dict[str, int] = field(default_factory=dict, repr=False)


class CpuDevice:
    """Runs CUDA C kernels on the host CPU (DESIGN 3.6): correctness only, timings not comparable."""

    name = "cpu"
    xp = np
    timing_device = "cpu"
    timing_comparable = False
    launches_xp_arrays = False  # kernels run in a runner process: inputs go through to_device (base.py)
    arch = None  # NVRTC arch: default (sm_90)

    def __init__(self, config: EnvConfig | None = None) -> None:
        self.config = config or EnvConfig()
        self._pending: Exception | None = None
        self._launches: dict[tuple[int, str], int] = {}
        self.healthy = True
        self._cpu_ns = 0  # CPU time the runners report for this device's launches
        self._deadline: float | None = None  # time_runs' stage deadline (monotonic), for its launches

    # ---- module loading --------------------------------------------------------------------
    def load(self, compiled: CompiledModule, config: EnvConfig | None = None) -> CpuProgram:
        """Translate and build `compiled.source`; raises CompileError naming what cannot be built."""
        cfg = config or self.config
        try:
            tr = translate(compiled.source, compiled.kernels.keys())
        except UnsupportedFeature as e:
            raise _compile_error(f"cpu backend: {e}") from None
        try:
            path = _build.build(tr.cpp, cfg.cpu_compiler, cfg.cpu_opt_level, timeout_s=cfg.limits.compile,
                                user_cpp=tr.user_cpp)
        except (_build.SymbolError, _build.BuildLimitError) as e:
            raise _compile_error(f"cpu backend: {e.log}") from None
        except _build.BuildError as e:
            raise _compile_error(
                "cpu backend: the host C++ compiler could not build this code, which NVRTC accepted "
                "(a CUDA feature the cpu emulation lacks?); run it on the cupy backend.\n" + e.log) from None
        # The judge never loads the submission's shared object: a separate runner process does
        # (sandbox.py / runner.py), and reports symbols the code renamed or broke.
        timeout = float(max(cfg.limits.correctness, cfg.limits.timing))
        runner = Runner(path, list(compiled.kernels), load_timeout_s=max(30.0, float(cfg.limits.compile)))
        try:
            runner.start()
        except RunnerLoadError as e:
            raise _compile_error(f"cpu backend: {e}") from None
        except (RunnerError, RunnerTimeout) as e:
            raise _compile_error(f"cpu backend: the built code does not load: {e}") from None
        prog = CpuProgram(kernels=dict(compiled.kernels), path=path, uses_sync=tr.uses_sync,
                          timeout_s=timeout, runner=runner, entries={k: 1 for k in compiled.kernels})
        weakref.finalize(prog, runner.kill)
        return prog

    # ---- launching -------------------------------------------------------------------------
    def _marshal(self, sig: KernelSignature, args: Sequence[Any]) -> list[tuple]:
        if len(args) != len(sig.params):
            raise KernelRuntimeError(f"{sig.name}: {len(args)} arguments given, the kernel takes "
                                     f"{len(sig.params)}")
        out: list[tuple] = []
        for i, (a, p) in enumerate(zip(args, sig.params, strict=False)):
            if p.pointer and a is None:  # a null pointer (`nullptr` in the launch block)
                out.append(("n",))
            elif p.pointer:
                if not isinstance(a, np.ndarray):
                    raise KernelRuntimeError(f"{sig.name}: argument {i} ({p.name}) is a pointer; expected "
                                             f"a device array, got {type(a).__name__}")
                if not a.flags.c_contiguous:
                    raise KernelRuntimeError(f"{sig.name}: argument {i} ({p.name}) is not contiguous")
                where = shared_lookup(a.ctypes.data)
                if where is None:
                    raise KernelRuntimeError(f"{sig.name}: argument {i} ({p.name}) is not a device buffer "
                                             "of this backend")
                out.append(("b", *where))
            else:
                st = scalar_type(p)  # the C type's dtype: launch.SCALAR_TYPES, as the harness passes it
                cell = np.array([a], dtype=st.dtype) if st is not None else np.array([a])
                out.append(("s", cell.tobytes()))
        return out

    def _launch_limit(self, program: CpuProgram, timeout_s: float | None) -> float:
        """A launch's limit: the time left in its stage (`timeout_s`, else time_runs' deadline), at most
        the program's; the runner's CPU-time timer ends the kernel then, its wall deadline HANG_GRACE_S
        later (core/config.py: the hang bound)."""
        if timeout_s is None and self._deadline is not None:
            timeout_s = self._deadline - time.monotonic()
        limit = program.timeout_s if timeout_s is None else min(program.timeout_s, timeout_s)
        return max(MIN_LAUNCH_S, limit)

    def launch(self, program: CpuProgram, kernel: str, grid: tuple[int, int, int],
               block: tuple[int, int, int], shared_bytes: int, args: Sequence[Any],
               timeout_s: float | None = None) -> None:
        """Run the whole grid now, within `timeout_s` (the time left in the stage; see _launch_limit);
        a failure is raised by the next synchronize() (like CUDA)."""
        if self._pending is not None:
            return  # the stream is broken: later launches do not run
        if kernel not in program.entries:
            raise KernelRuntimeError(f"no kernel named {kernel!r} in the module; it has "
                                     f"{sorted(program.entries)}")
        gdims = tuple(int(g) for g in grid)
        bdims = tuple(int(b) for b in block)
        if len(gdims) != 3 or len(bdims) != 3 or min(gdims) < 1 or min(bdims) < 1 \
                or bdims[0] * bdims[1] * bdims[2] > 1024 or bdims[2] > 64:
            raise KernelRuntimeError(f"invalid configuration argument: grid={gdims}, block={bdims}")
        wire = self._marshal(program.kernels[kernel], args)
        with _LAUNCH_LOCK:
            # each kernel of a program cycles through the orders on its own, so a kernel launched
            # once per trial meets forward, reverse and interleaved in consecutive trials
            ck = (id(program), kernel)
            order = self._launches.get(ck, 0) % 3
            self._launches[ck] = order + 1
            # the runtime's CPU-time timer ends a hang inside the runner; the wall deadline ends a
            # runner that disabled it, waits on a lock or gets too little CPU: it is killed
            limit = self._launch_limit(program, timeout_s)
            wall = limit + HANG_GRACE_S
            try:
                code, msg, near, cpu_ns = program.runner.launch(
                    kernel, [*gdims, *bdims], int(shared_bytes), int(program.uses_sync), order,
                    limit, wire, wall)
            except RunnerTimeout as e:
                self._pending = KernelTimeout(f"{kernel}: the kernel ran longer than {wall:.3g} s ({e})")
                return
            except RunnerError as e:
                self._pending = KernelRuntimeError(f"{kernel}: {e}")
                return
            except RunnerLoadError as e:
                self._pending = KernelRuntimeError(f"{kernel}: {e}")
                return
        self._cpu_ns += cpu_ns
        if code != E_OK:
            self._pending = self._error(code, msg, near, kernel)
            if code == E_FAULT and not near:  # memory of the runner may be corrupted: start afresh
                program.runner.kill()

    @staticmethod
    def _error(code: int, msg: str, near: str, kernel: str) -> Exception:
        text = f"{kernel}: {msg}"
        if code == E_FAULT:
            if near:
                return KernelRuntimeError(f"{kernel}: illegal memory access ({near}); {msg}")
            return KernelRuntimeError(f"{kernel}: illegal memory access outside every buffer; {msg}")
        if code == E_TIMEOUT:
            return KernelTimeout(text)
        if code == E_CONFIG:
            return KernelRuntimeError(f"{kernel}: invalid launch: {msg}")
        return KernelRuntimeError(text)

    def synchronize(self, timeout_s: float | None = None) -> None:
        """Raise (once) the error of a failed launch since the last synchronize."""
        err, self._pending = self._pending, None
        if err is not None:
            if isinstance(err, FatalDeviceError):
                self.healthy = False
            raise err

    # ---- memory ------------------------------------------------------------------------------
    @property
    def max_scratch_bytes(self) -> int:
        """The scratch one evaluation may declare (memory.max_scratch_bytes); the harness refuses
        more before allocating anything."""
        return max_scratch_bytes()

    def empty(self, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        return shared_empty(tuple(shape), dtype)

    def zeros(self, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        return shared_empty(tuple(shape), dtype)  # a fresh memfd is zero

    def to_device(self, host_array: Any) -> np.ndarray:
        src = np.asarray(host_array)
        out = shared_empty(src.shape, src.dtype)
        out[...] = src
        return out

    def to_host(self, array: Any) -> np.ndarray:
        self.synchronize()
        return np.array(array, copy=True)

    # ---- timing ------------------------------------------------------------------------------
    def time_ms(self, fn: Callable[[], Any], warmup: int, runs: int, flush_l2: bool,
                timeout_s: float | None = None) -> list[float]:
        """`time_runs` of `fn()` with nothing to prepare or check."""
        return self.time_runs(*untimed_hooks(fn), warmup, runs, flush_l2, timeout_s=timeout_s)

    def time_runs(self, prepare: Callable[[int], Any], fn: Callable[[Any], None],
                  check: Callable[[int, Any], None], warmup: int, runs: int, flush_l2: bool,
                  timeout_s: float | None = None) -> list[float]:
        """CPU time of `fn(prepare(i))` per run (the runner's thread CPU clock; Device.time_runs).

        Launches run synchronously here, so reading a launch's error after it costs nothing; no L2
        flush (timings are not comparable). Past `timeout_s` (checked after each run; a single
        hanging launch is ended by the runner's own limit) a run raises KernelTimeout."""
        deadline = None if timeout_s is None else time.monotonic() + max(0.0, timeout_s)
        self._deadline = deadline  # a launch that hangs ends at the deadline (_launch_limit)
        try:
            return self._timed_loop(prepare, fn, check, warmup, runs, deadline, timeout_s)
        finally:
            self._deadline = None

    def _timed_loop(self, prepare: Callable[[int], Any], fn: Callable[[Any], None],
                    check: Callable[[int, Any], None], warmup: int, runs: int, deadline: float | None,
                    timeout_s: float | None) -> list[float]:
        out = []
        for i in range(warmup + runs):
            state = prepare(i)
            self.synchronize()
            t0 = self._cpu_ns
            fn(state)
            self.synchronize()
            if i >= warmup:
                out.append((self._cpu_ns - t0) / 1e6)
            check(i, state)
            if deadline is not None and time.monotonic() > deadline:
                raise KernelTimeout(f"timed run {i + 1} of {warmup + runs} ended past the {timeout_s:.3g} s "
                                    "left in the stage")
        return out

    def close(self) -> None:
        self._pending = None
