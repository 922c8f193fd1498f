"""The evaluation pool's worker processes: what runs in one (`_worker_main`: compile workers parse,
check and compile; exec workers load and run on their device) and the parent's handle on one
(`Worker`: its process, its pipe, the stage limit of a request, kill and stop).

ProcessEvalPool (process_pool.py) owns the workers, one per parent thread; this module knows nothing of
queues, retries or spares. Workers are spawned; a compile worker is confined with Landlock after
warming NVRTC up, and no compile or cpu-backend worker ever holds a CUDA context.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import traceback
from typing import Any
from collections.abc import Callable

from kernels_env.backends.base import FatalDeviceError
from kernels_env.core.config import EnvConfig
from kernels_env.core.result import Result
from kernels_env.execute.gpu_lock import GpuLockHandle, attach
from kernels_env.judge import reference_cache
from kernels_env.schedule.pool_base import Evaluator

STARTUP_TIMEOUT_S = 180.0  # a worker importing CuPy / creating a CUDA context


# ---- worker side ------------------------------------------------------------------------------
def _worker_env(extra: dict[str, str]) -> None:
    os.environ.update(extra)
    # Anything JAX-like imported by the parent's __main__ must not grab the GPU here.
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def _mark_cuda_free(role: str, backend: str) -> None:
    """Compile workers and cpu-backend workers never hold a CUDA context: NVRTC compiles in them run
    under the compile memory cap (compiler/memory_cap.py), which a CUDA process must never get."""
    if role == "compile" or backend == "cpu":
        from kernels_env.compiler import memory_cap
        memory_cap.mark_cuda_free()


def quiet_dead_context_destructors(device: Any) -> Callable[[Any], None]:
    """An unraisable-exception hook for an exec worker: once its device is unhealthy (a policy
    kernel left a sticky CUDA error), CuPy's destructors of that dead context's objects (events,
    streams, memory) raise CUDA errors while the worker finishes its reply; Python would print each
    as a traceback in the trainer's log, though nothing failed but the kernel, which is already
    scored. Those are dropped; everything else goes to Python's default hook."""
    def hook(unraisable: Any) -> None:
        exc = unraisable.exc_value
        cuda_error = type(exc).__module__.startswith("cupy")  # cupy.* and cupy_backends.*
        if cuda_error and not getattr(device, "healthy", True):
            return
        sys.__unraisablehook__(unraisable)
    return hook


def compile_worker_read_paths() -> list[str]:
    """What a confined compile worker may read: the system's libraries, Python's prefixes and import
    path (the package, NVRTC's wheels), CUDA's include directories. Not /etc, /home, /root, /proc,
    /tmp (nor "/" or the home directory even when on sys.path)."""
    from kernels_env.compiler import landlock
    from kernels_env.compiler.cuda_headers import cuda_include_dirs
    banned = {"/", os.path.expanduser("~"), os.path.realpath(os.path.expanduser("~"))}
    cands = [*landlock.SYSTEM_READ, sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path,
             *cuda_include_dirs()]
    out: list[str] = []
    for p in cands:
        for q in (p, os.path.realpath(p) if p else p):
            if q and os.path.isabs(q) and q not in banned and q not in out:
                out.append(q)
    return out


def _confine_compile_worker() -> bool:
    """Landlock the compile worker after warming NVRTC up: whatever a submission's `#include`,
    `__has_include` or `#pragma` names, NVRTC can open only what compile_worker_read_paths() lists
    (a path elsewhere is "not found"). LEAP_COMPILE_LANDLOCK=0 turns it off. The warm-up's cuda_fp16.h
    include also runs std_prelude's once-per-process plain-header probe, so no job pays for it."""
    if os.environ.get("LEAP_COMPILE_LANDLOCK", "1") == "0":
        return False
    from kernels_env.compiler import landlock
    try:
        from kernels_env.compiler.compile import compile_cuda
        compile_cuda('#include <cuda_fp16.h>\nextern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n')
    except Exception:  # no NVRTC here: prepare reports it per job; confine anyway
        pass
    return landlock.restrict(compile_worker_read_paths(), [os.devnull])


def _worker_main(conn: Any, role: str, backend: str, env: dict[str, str], evaluator: Evaluator | None,
                 config: EnvConfig, lock: GpuLockHandle | None = None) -> None:
    """Loop of one worker process: answer (kind, payload[, extras]) requests over `conn` until told to
    stop. `extras` may carry reference timings to seed ("reference_ms"); exec workers reply
    (kind, payload, {"reference_ms": entries measured since the last reply})."""
    _worker_env(env)
    try:  # Ctrl-C in the parent's terminal is the parent's to handle; it stops workers itself
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except (ValueError, OSError):
        pass
    _mark_cuda_free(role, backend)
    device = None
    refs: Any = None  # the object whose __dict__ holds the reference timings (exec workers)
    reported: set = set()  # reference-timing keys the parent has (seeded or reported)
    try:
        from kernels_env.execute import score as scoring
        if role == "compile":
            _confine_compile_worker()
        if role == "exec" and evaluator is None:
            from kernels_env.backends import get_device
            with lock.access(exclusive=False) if lock is not None else contextlib.nullcontext():
                device = refs = get_device(backend, config)  # a new CUDA context: never during a timing
            sys.unraisablehook = quiet_dead_context_destructors(device)
            attach(device, lock)  # before the warm-up: it uses the GPU too
            from kernels_env.schedule.warmup import warm_up
            warm_up(device, config)  # first-use CuPy kernel builds must not count against a job
        elif role == "exec":
            refs = reference_cache.WorkerDevice()
        if refs is not None:
            reference_cache.set_worker_device(refs)
            reported.update(reference_cache.cache_of(refs))
        conn.send(("ready", {"arch": getattr(device, "arch", None), "backend": getattr(device, "name", backend),
                             "pid": os.getpid()}))
    except BaseException:
        try:
            conn.send(("init_error", traceback.format_exc(limit=20)))
        except (OSError, ValueError):  # the parent is gone: nobody to tell
            pass
        return
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            break
        if msg is None:
            break
        kind, payload = msg[0], msg[1]
        if refs is not None and len(msg) > 2:
            seeded = msg[2].get("reference_ms") or {}
            reference_cache.seed(refs, seeded)
            reported.update(seeded)
        fatal = False
        try:
            if kind == "prepare":
                task, text, cfg, arch = payload
                out = scoring.prepare(task, text, cfg, arch=arch)
                reply = ("result", out.to_dict()) if isinstance(out, Result) else ("prepared", out)
            elif kind == "evaluate":
                task, text, cfg = payload
                try:
                    r = evaluator(task, text, cfg)  # type: ignore[misc]
                except FatalDeviceError as e:  # its device is unusable: as a fatal `execute`
                    r, fatal = scoring.fatal_result(e), True
                reply = ("result_fatal" if fatal else "result", r.to_dict() if isinstance(r, Result) else
                         Result.env_error(f"evaluator returned {type(r).__name__}", task=task).to_dict())
            elif kind == "execute":
                prepared, cfg = payload
                r, fatal = scoring.execute(prepared, device, cfg)
                reply = ("result_fatal" if fatal else "result", r.to_dict())
            else:
                reply = ("result", Result.env_error(f"worker got unknown request {kind!r}").to_dict())
        except BaseException:
            reply = ("result", Result.env_error("worker failed", details=traceback.format_exc(limit=20)).to_dict())
        if refs is not None:
            reply = (*reply, {"reference_ms": reference_cache.new_entries(refs, reported)})
        try:
            conn.send(reply)
        except Exception:
            reply = ("result", Result.env_error("worker could not send its result",
                                                details=traceback.format_exc(limit=5)).to_dict())
            conn.send(reply)
        if fatal:
            os._exit(0)  # the CUDA context is unusable: the parent replaces this worker
    if device is not None:
        try:
            device.close()
        except Exception:
            pass


# ---- parent side: one worker's process and pipe ----------------------------------------------
class WorkerStartError(RuntimeError):
    """A worker process could not start (its traceback, if any, in `details`)."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


class WorkerDied(Exception):
    """The worker process exited while the parent waited for it (`exitcode`: as multiprocessing's)."""

    def __init__(self, exitcode: int | None) -> None:
        super().__init__(exitcode)
        self.exitcode = exitcode


class WorkerOverran(Exception):
    """The worker did not answer within its request's limit."""


def exit_desc(code: int | None) -> str:
    """How a worker's exit code reads in messages ("exit code 3", "killed by signal SIGSEGV")."""
    if code is None:
        return "unknown exit status"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class Worker:
    """One worker process and its pipe, owned by exactly one parent thread."""

    def __init__(self, ctx: Any, role: str, backend: str, env: dict[str, str], evaluator: Evaluator | None,
                 config: EnvConfig, lock: GpuLockHandle | None = None,
                 release_slot: Callable[[], None] | None = None) -> None:
        self.ctx, self.role, self.backend, self.env = ctx, role, backend, env
        self.evaluator, self.config = evaluator, config
        self.lock, self._release_slot = lock, release_slot  # this worker's slot of its GPU's lock
        self.proc: Any = None
        self.conn: Any = None
        self.info: dict[str, Any] = {}
        self.busy = False
        self.ref_known: set = set()  # reference-timing keys this worker has (see reference_cache)

    def start(self) -> None:
        parent, child = self.ctx.Pipe(duplex=True)
        self.proc = self.ctx.Process(target=_worker_main, name=f"kernels_env-{self.role}",
                                     args=(child, self.role, self.backend, self.env, self.evaluator, self.config,
                                           self.lock),
                                     daemon=True)
        self.proc.start()
        child.close()  # so the parent sees EOF when the worker dies
        self.conn = parent
        try:
            kind, payload = self._recv(STARTUP_TIMEOUT_S)[:2]
        except WorkerDied as d:
            self.kill()
            raise WorkerStartError(
                f"the {self.role} worker exited during startup ({exit_desc(d.exitcode)}); spawned workers "
                "re-import the main script: guard pool creation with `if __name__ == \"__main__\":` (a script "
                "read from stdin cannot be re-imported)") from None
        except WorkerOverran:
            self.kill()
            raise WorkerStartError(f"the {self.role} worker did not start within {STARTUP_TIMEOUT_S:g} s") from None
        if kind != "ready":
            self.kill()
            last = str(payload).strip().splitlines()[-1:] or [""]
            raise WorkerStartError(f"the {self.role} worker failed to start: {last[0]}", details=str(payload))
        self.info = payload

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def _lock_wait_s(self) -> float:
        return self.lock.lock.waited_s(self.lock.slot) if self.lock is not None else 0.0

    def _recv(self, timeout: float) -> Any:
        """The next message; the deadline grows by the time the worker waits for its GPU lock (a job
        queued behind other workers' GPU work is not overrunning)."""
        start = time.monotonic()
        while True:
            left = start + timeout + self._lock_wait_s() - time.monotonic()
            if left <= 0:
                raise WorkerOverran()
            try:
                ready = self.conn.poll(min(left, 0.5))
            except (EOFError, OSError):
                ready = True
            if ready:
                try:
                    return self.conn.recv()
                except (EOFError, OSError):
                    self.proc.join(5)
                    raise WorkerDied(self.proc.exitcode) from None
            if not self.proc.is_alive():
                self.proc.join(1)
                raise WorkerDied(self.proc.exitcode)

    def request(self, kind: str, payload: Any, timeout: float, extras: dict | None = None) -> tuple:
        """Send one request; its reply (kind, payload[, extras]). Raises WorkerOverran / WorkerDied."""
        self.busy = True
        try:
            if self.lock is not None:
                self.lock.lock.reset_wait(self.lock.slot)
            try:
                self.conn.send((kind, payload, extras) if extras else (kind, payload))
            except (OSError, EOFError, BrokenPipeError):
                self.proc.join(2)
                raise WorkerDied(self.proc.exitcode) from None
            return self._recv(timeout)
        finally:
            self.busy = False

    def kill(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
        if self.proc is not None:
            self.proc.join(5)
        if self.lock is not None:  # SIGKILLed: it runs no more code, whatever it held is free
            try:
                self.lock.lock.reset_slot(self.lock.slot)
            finally:
                self.lock = None
                if self._release_slot is not None:
                    self._release_slot()
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass

    def stop(self) -> None:
        try:
            if self.alive:
                self.conn.send(None)
                self.proc.join(2)
        except Exception:
            pass
        self.kill()
