"""EvalPool: score many submissions in isolated worker processes (DESIGN 3.5).

Process mode runs two stages of long-lived spawned workers, each fed through its own pipe by a
parent thread that owns it:
  compile workers (CPU): parse + static checks + NVRTC, many in parallel;
  execution workers: `exec_workers_per_gpu` (default 3) per GPU for cupy (CUDA_VISIBLE_DEVICES set
  per worker), a few for cpu. Workers of one GPU share a readers-writer lock (execute/gpu_lock.py):
  timing runs alone on the GPU, correctness trials of several workers overlap, host work (module
  loading) takes no lock, so the GPU is busy while a worker does host work. Time a job waits for the
  lock extends its wall-clock limit.
A warm spare exec worker per GPU (spares.py; default on for cupy, `spare_worker=`) replaces a worker
that dies at once, and the next spare starts in the background. Reference timings measured by a worker
come back with its replies and seed every other worker of that GPU, spares and replacements included
(judge/reference_cache.py), so a restart never re-times a reference.
The parent enforces per-stage wall-clock limits: a worker that overruns or dies (segfault, sticky
CUDA error, os._exit) is killed and replaced and the job retried once, then reported as `timeout`
(overran) or `runtime_error` (died). Every future resolves to a Result. The parent never touches
CUDA in process mode. Inline mode runs `score` in the calling process, for debugging.

`worker_env` adds environment variables to every worker (e.g. CUPY_GPU_MEMORY_LIMIT="30%" when
the GPU is shared with a JAX trainer). Workers are spawned: a script creating a pool must guard
its entry point with `if __name__ == "__main__":`.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable, Iterable

from kernels_env.judge import reference_cache
from kernels_env.schedule.result_cache import ResultCache, cache_key
from kernels_env.core.config import BACKENDS, POOL_MODES, EnvConfig
from kernels_env.execute.gpu_lock import GpuLock, GpuLockHandle, attach
from kernels_env.core.result import Result
from kernels_env.schedule.spares import SpareWorkers
from kernels_env.source.submission import Answer
from kernels_env.core.status import Status

Evaluator = Callable[[str, Answer, EnvConfig], Result]  # (task, answer, config), in an exec worker

DEFAULT_EXEC_WORKERS_PER_GPU = 3  # cupy: one times (exclusive lock) while the others do host work
STARTUP_TIMEOUT_S = 180.0  # a worker importing CuPy / creating a CUDA context
CRASH_MESSAGE = "the kernel crashed the evaluation worker (e.g. illegal memory access)"


@dataclass(frozen=True)
class Job:
    """One submission to score: a task name, the policy's text (or a file's bytes: UTF-8), and
    optionally its own config."""
    task: str
    text: Answer
    config: EnvConfig | None = None


# ---- worker side ------------------------------------------------------------------------------
def _worker_env(extra: dict[str, str]) -> None:
    os.environ.update(extra)
    # Anything JAX-like imported by the parent's __main__ must not grab the GPU here.
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def _mark_cuda_free(role: str, backend: str) -> None:
    """Compile workers and cpu-backend workers never hold a CUDA context: NVRTC compiles in them run
    under the compile memory cap (build/memory_cap.py), which a CUDA process must never get."""
    if role == "compile" or backend == "cpu":
        from kernels_env.build import memory_cap
        memory_cap.mark_cuda_free()


def compile_worker_read_paths() -> list[str]:
    """What a confined compile worker may read: the system's libraries, Python's prefixes and import
    path (the package, NVRTC's wheels), CUDA's include directories. Not /etc, /home, /root, /proc,
    /tmp (nor "/" or the home directory even when on sys.path)."""
    import sys
    from kernels_env.build import landlock
    from kernels_env.build.cuda_headers import cuda_include_dirs
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
    (a path elsewhere is "not found"). LEAP_COMPILE_LANDLOCK=0 turns it off."""
    if os.environ.get("LEAP_COMPILE_LANDLOCK", "1") == "0":
        return False
    from kernels_env.build import landlock
    try:
        from kernels_env.build.compile import compile_cuda
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
        from kernels_env.schedule import pipeline
        if role == "compile":
            _confine_compile_worker()
        if role == "exec" and evaluator is None:
            from kernels_env.backends import get_device
            device = refs = get_device(backend, config)
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
                out = pipeline.prepare(task, text, cfg, arch=arch)
                reply = ("result", out.to_dict()) if isinstance(out, Result) else ("prepared", out)
            elif kind == "evaluate":
                task, text, cfg = payload
                r = evaluator(task, text, cfg)  # type: ignore[misc]
                reply = ("result", r.to_dict() if isinstance(r, Result) else
                         Result.env_error(f"evaluator returned {type(r).__name__}", task=task).to_dict())
            elif kind == "execute":
                prepared, cfg = payload
                r, fatal = pipeline.execute(prepared, device, cfg)
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


# ---- parent side ------------------------------------------------------------------------------
def _compile_memory_text(env: dict[str, str]) -> str:
    """The compile memory cap of workers started with `env`, as messages name it."""
    from kernels_env.build import memory_cap
    from kernels_env.core.units import describe_bytes
    try:
        return describe_bytes(memory_cap.compile_memory_bytes({**os.environ, **env}))
    except ValueError as e:
        return str(e)


class WorkerStartError(RuntimeError):
    """A worker process could not start (its traceback, if any, in `details`)."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


class _Died(Exception):
    def __init__(self, exitcode: int | None) -> None:
        super().__init__(exitcode)
        self.exitcode = exitcode


class _Overran(Exception):
    pass


def _exit_desc(code: int | None) -> str:
    if code is None:
        return "unknown exit status"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class _Worker:
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
        except _Died as d:
            self.kill()
            raise WorkerStartError(
                f"the {self.role} worker exited during startup ({_exit_desc(d.exitcode)}); spawned workers "
                "re-import the main script: guard pool creation with `if __name__ == \"__main__\":` (a script "
                "read from stdin cannot be re-imported)") from None
        except _Overran:
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
                raise _Overran()
            try:
                ready = self.conn.poll(min(left, 0.5))
            except (EOFError, OSError):
                ready = True
            if ready:
                try:
                    return self.conn.recv()
                except (EOFError, OSError):
                    self.proc.join(5)
                    raise _Died(self.proc.exitcode) from None
            if not self.proc.is_alive():
                self.proc.join(1)
                raise _Died(self.proc.exitcode)

    def request(self, kind: str, payload: Any, timeout: float, extras: dict | None = None) -> tuple:
        """Send one request; its reply (kind, payload[, extras]). Raises _Overran / _Died."""
        self.busy = True
        try:
            if self.lock is not None:
                self.lock.lock.reset_wait(self.lock.slot)
            try:
                self.conn.send((kind, payload, extras) if extras else (kind, payload))
            except (OSError, EOFError, BrokenPipeError):
                self.proc.join(2)
                raise _Died(self.proc.exitcode) from None
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


@dataclass
class _Pending:
    job: Job
    config: EnvConfig
    key: str
    futures: list[cf.Future]
    payload: Any = None  # Prepared, between the stages


class EvalPool:
    """Score jobs in worker processes (or inline), with a result cache; see the module docstring."""
    _gpu_count: int  # set by _probe_gpus once probed

    def __new__(cls, mode: str = "process", *args: Any, **kwargs: Any) -> EvalPool:
        """mode="ray" builds a RayEvalPool (same contract, jobs scored on remote hosts); Ray is imported
        only then."""
        if cls is EvalPool and mode == "ray":
            from kernels_env.schedule.ray_pool import RayEvalPool
            return super().__new__(RayEvalPool)
        return super().__new__(cls)

    def __init__(self, mode: str = "process", backend: str = "auto", gpu_workers: int | None = None,
                 compile_workers: int | None = None, cache: bool | ResultCache = True,
                 config: EnvConfig | None = None, evaluator: Evaluator | None = None,
                 cpu_workers: int | None = None, worker_env: dict[str, str] | None = None,
                 exec_workers_per_gpu: int | None = None, spare_worker: bool | None = None) -> None:
        if mode not in POOL_MODES or mode == "ray":  # "ray" is RayEvalPool's (see __new__)
            raise ValueError(f"EvalPool mode={mode!r}; expected one of {POOL_MODES}")
        if backend not in BACKENDS:
            raise ValueError(f"EvalPool backend={backend!r}; expected 'auto', 'cupy' or 'cpu'")
        for nm, v in (("gpu_workers", gpu_workers), ("compile_workers", compile_workers), ("cpu_workers", cpu_workers),
                      ("exec_workers_per_gpu", exec_workers_per_gpu)):
            if v is not None and v < 1:
                raise ValueError(f"EvalPool {nm}={v}; expected >= 1 or None")
        self.mode, self.evaluator = mode, evaluator
        self.config = config or EnvConfig(backend=backend)
        self.cache = cache if isinstance(cache, ResultCache) else (ResultCache() if cache else None)
        self._lock = threading.Lock()
        self._inflight: dict[str, _Pending] = {}
        self._stats = {"submitted": 0, "evaluations": 0, "cache_hits": 0, "restarts": 0, "timeouts": 0,
                       "crashes": 0, "env_errors": 0, "spare_swaps": 0}
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._workers: set[_Worker] = set()
        self._device = None
        self.arch: str | None = self.config.arch
        self._arch_known = threading.Event()
        self._refs = reference_cache.ReferenceStore()
        self._gpu_locks: dict[str, GpuLock] = {}
        self._free_slots: dict[str, list[int]] = {}
        self._spares: SpareWorkers | None = None
        self.gpu_workers = self.exec_workers = self.compile_workers = 0
        if mode == "inline":
            self.backend = backend
            return
        self._ctx = mp.get_context("spawn")
        self._compile_q: queue.Queue = queue.Queue()
        self._exec_q: queue.Queue = queue.Queue()
        self.backend = self._resolve_backend(backend, gpu_workers)
        n_cpu = os.cpu_count() or 2
        extra = {str(k): str(v) for k, v in (worker_env or {}).items()}
        if self.backend == "cupy":
            n_gpu = gpu_workers or max(1, self._probe_gpus())
            per_gpu = exec_workers_per_gpu or DEFAULT_EXEC_WORKERS_PER_GPU
            ids = self._gpu_ids()
            gpus = [ids[g % len(ids)] for g in range(n_gpu)]  # more than the GPUs: they share
            envs = [{**extra, "CUDA_VISIBLE_DEVICES": gpu} for gpu in gpus for _ in range(per_gpu)]
            for gpu in set(gpus):  # lanes + spare + a spare starting + slack
                self._gpu_locks[gpu] = GpuLock(self._ctx, gpus.count(gpu) * per_gpu + 4)
                self._free_slots[gpu] = list(range(self._gpu_locks[gpu].slots))
            self.gpu_workers = n_gpu
        else:
            envs = [{**extra, "CUDA_VISIBLE_DEVICES": ""} for _ in range(cpu_workers or max(1, min(2, n_cpu)))]
        n_compile = 0 if evaluator is not None else (compile_workers or max(1, min(8, n_cpu - 1)))
        if evaluator is not None or self.arch is not None:
            self._arch_known.set()
        for i, env in enumerate(envs):
            self._spawn_thread(self._exec_loop, "exec", env, i)
        for i in range(n_compile):
            self._spawn_thread(self._compile_loop, "compile", {**extra, "CUDA_VISIBLE_DEVICES": ""}, i)
        if spare_worker if spare_worker is not None else self.backend == "cupy":
            self._spares = SpareWorkers(lambda env: self._new_worker("exec", env))
            for env in {tuple(sorted(e.items())): e for e in envs}.values():
                self._spares.ensure(env)
        self.exec_workers = len(envs)
        self.compile_workers = n_compile

    # -- setup helpers --
    def _resolve_backend(self, backend: str, gpu_workers: int | None) -> str:
        if backend != "auto":
            return backend
        return "cupy" if (gpu_workers or self._probe_gpus()) > 0 else "cpu"

    def _probe_gpus(self) -> int:
        """Count GPUs in a throwaway spawned process, so the parent never initialises CUDA."""
        if hasattr(self, "_gpu_count"):
            return self._gpu_count
        from kernels_env.backends import gpu_count
        try:
            with cf.ProcessPoolExecutor(1, mp_context=self._ctx) as ex:
                self._gpu_count = int(ex.submit(gpu_count).result(timeout=120))
        except Exception:
            self._gpu_count = 0
        return self._gpu_count

    def _gpu_ids(self) -> list[str]:
        """GPU ids for the workers' CUDA_VISIBLE_DEVICES (workers beyond the GPU count share GPUs)."""
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None and visible.strip():
            ids = [v.strip() for v in visible.split(",") if v.strip()]
            if ids:
                return ids
        return [str(i) for i in range(max(1, self._probe_gpus()))]

    def _spawn_thread(self, fn: Callable, role: str, env: dict[str, str], index: int) -> None:
        t = threading.Thread(target=fn, args=(env,), name=f"EvalPool-{role}-{index}", daemon=True)
        t.start()
        self._threads.append(t)

    # -- public API --
    def submit(self, job: Job) -> cf.Future:
        """Queue a job; the future always resolves to a Result (env_error at worst)."""
        fut: cf.Future = cf.Future()
        try:
            if not isinstance(job, Job):
                raise TypeError(f"EvalPool.submit expects a Job, got {type(job).__name__}")
            if self._closed:
                raise RuntimeError("EvalPool is closed")
            cfg = job.config or self.config
            key = cache_key(job.task, job.text, cfg)
            with self._lock:
                self._stats["submitted"] += 1
            if self.cache is not None:
                hit = self.cache.get(key)
                if hit is not None:
                    with self._lock:
                        self._stats["cache_hits"] += 1
                    fut.set_result(hit)
                    return fut
            if self.mode == "inline":
                fut.set_result(self._finish(key, self._run_inline(job, cfg)))
                return fut
            with self._lock:
                pend = self._inflight.get(key)
                if pend is not None:  # the same submission is already being scored
                    pend.futures.append(fut)
                    return fut
                pend = _Pending(job, cfg, key, [fut])
                self._inflight[key] = pend
            self._enqueue(pend)
        except Exception as e:
            if not fut.done():
                fut.set_result(Result.env_error(f"EvalPool.submit failed: {e}", task=getattr(job, "task", ""),
                                                details=traceback.format_exc(limit=10)))
        return fut

    def map(self, jobs: Iterable[Job], progress: bool = False) -> list[Result]:
        """Score all jobs; results in the order of `jobs`."""
        futs = [self.submit(j) for j in jobs]
        if progress:
            try:
                from tqdm import tqdm
                for _ in tqdm(cf.as_completed(futs), total=len(futs), desc="scoring", unit="job"):
                    pass
            except ImportError:
                pass
        return [f.result() for f in futs]

    def stats(self) -> dict[str, int]:
        """Counters (jobs, restarts, spare swaps, ...), the spares ready and the reference timings known."""
        with self._lock:
            out = dict(self._stats)
        out["spares_ready"] = len(self._spares.ready()) if self._spares is not None else 0
        out["reference_timings"] = self._refs.count()
        return out

    def spare_pids(self) -> list[int]:
        """Process ids of the warm spares ready now (for tests and diagnostics)."""
        return [w.info.get("pid") for w in self._spares.ready()] if self._spares is not None else []

    def close(self) -> None:
        """Stop workers; pending jobs resolve to env_error."""
        if self._closed:
            return
        self._closed = True
        for w in list(self._workers):  # unblock threads waiting on a busy worker
            if w.busy:
                w.kill()
        if self._spares is not None:
            self._spares.close()
        if self.mode == "inline":
            if self._device is not None:
                try:
                    self._device.close()
                except Exception:
                    pass
            return
        for _ in self._threads:
            self._compile_q.put(None)
            self._exec_q.put(None)
        for t in self._threads:
            t.join(10)
        with self._lock:
            left = list(self._inflight.values())
            self._inflight.clear()
        for p in left:
            self._resolve_futures(p, Result.env_error("EvalPool closed before the job finished", task=p.job.task))

    def __enter__(self) -> EvalPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # best effort; close() is the API
        try:
            self.close()
        except Exception:
            pass

    def _enqueue(self, pend: _Pending) -> None:
        """Hand a new (not cached, not in flight) job to the workers: RayEvalPool sends it to hosts instead."""
        (self._exec_q if self.evaluator is not None else self._compile_q).put(pend)

    # -- inline --
    def _run_inline(self, job: Job, cfg: EnvConfig) -> Result:
        try:
            if self.evaluator is not None:
                return self.evaluator(job.task, job.text, cfg)
            from kernels_env.schedule.pipeline import score
            if self._device is None:
                from kernels_env.backends import get_device
                self._device = get_device(self.backend if self.backend != "auto" else cfg.backend, cfg)
            return score(job.task, job.text, cfg, device=self._device)
        except Exception:
            return Result.env_error("inline evaluation failed", task=job.task, details=traceback.format_exc(limit=20))

    # -- completion --
    def _finish(self, key: str, result: Result) -> Result:
        with self._lock:
            if not result.cached:
                self._stats["evaluations"] += 1
            if result.status is Status.ENV_ERROR:
                self._stats["env_errors"] += 1
        if not result.key:
            result.key = key
        from kernels_env.build.compile import redact_paths  # worker tracebacks, timeouts: no host paths
        result.message = redact_paths(result.message or "")
        result.details = redact_paths(result.details or "")
        if self.cache is not None:
            self.cache.put(key, result)
        return result

    def _resolve_futures(self, pend: _Pending, result: Result) -> None:
        for i, f in enumerate(pend.futures):
            try:
                f.set_result(result if i == 0 else Result.from_dict(result.to_dict()))
            except cf.InvalidStateError:  # already resolved (closing raced a finishing job)
                pass

    def _complete(self, pend: _Pending, result: Result) -> None:
        try:
            if not result.task:
                result.task = pend.job.task
            result = self._finish(pend.key, result)
        except Exception:
            result = Result.env_error("EvalPool failed to record a result", task=pend.job.task,
                                      details=traceback.format_exc(limit=10))
        with self._lock:
            self._inflight.pop(pend.key, None)
        self._resolve_futures(pend, result)

    # -- worker threads --
    def _run_on(self, holder: list, role: str, env: dict[str, str], kind: str, payload: Any,
                limit: float) -> tuple[str, Any, str | None]:
        """Send one request, replacing the worker and retrying once if it overran or died.

        Returns (kind, payload, failure) where failure is None, "overran" or a death description.
        """
        failure: str | None = None
        for _attempt in range(2):
            w = holder[0]
            if w is not None and not w.alive:  # exited after a sticky device error
                self._retire(holder, role, env)
                w = holder[0]
            if w is None:
                w = holder[0] = self._new_worker(role, env)
            gpu = env.get("CUDA_VISIBLE_DEVICES", "")
            extras = {"reference_ms": self._refs.missing(gpu, w.ref_known)} if role == "exec" else None
            try:
                reply = w.request(kind, payload, limit, extras)
                if len(reply) > 2:  # the reference timings this worker measured
                    got = reply[2].get("reference_ms") or {}
                    w.ref_known.update(got)
                    self._refs.add(gpu, got)
                return reply[0], reply[1], None
            except _Overran:
                failure = "overran"
                self._count("timeouts")
            except _Died as d:
                failure = _exit_desc(d.exitcode)
                self._count("crashes")
            if self._closed:
                w.kill()
                self._workers.discard(w)
                holder[0] = None
                break
            self._retire(holder, role, env)
        return "", None, failure

    def _retire(self, holder: list, role: str, env: dict[str, str]) -> None:
        """Kill the holder's worker (dead, overran or unusable) and put a warm spare in its place
        when one is ready (else the next request starts a new worker)."""
        w = holder[0]
        if w is not None:
            w.kill()
            self._workers.discard(w)
        holder[0] = None
        self._count("restarts")
        if role == "exec" and self._spares is not None and not self._closed:
            holder[0] = self._spares.take(env)
            if holder[0] is not None:
                self._count("spare_swaps")

    def _count(self, name: str) -> None:
        with self._lock:
            self._stats[name] += 1

    def _new_worker(self, role: str, env: dict[str, str]) -> _Worker:
        if self._closed:
            raise RuntimeError("EvalPool is closed")
        handle, release = self._claim_lock_slot(env) if role == "exec" else (None, None)
        w = _Worker(self._ctx, role, self.backend, env, self.evaluator if role == "exec" else None, self.config,
                    handle, release)
        w.start()
        self._workers.add(w)
        if role == "exec" and not self._arch_known.is_set():
            self.arch = self.arch or w.info.get("arch")
            self._arch_known.set()
        return w

    def _claim_lock_slot(self, env: dict[str, str]) -> tuple[GpuLockHandle | None, Callable[[], None] | None]:
        """A free slot of the worker's GPU lock (cupy) and how to give it back; (None, None) without."""
        gpu = env.get("CUDA_VISIBLE_DEVICES", "")
        lock = self._gpu_locks.get(gpu)
        if lock is None:
            return None, None
        with self._lock:
            free = self._free_slots[gpu]
            if not free:
                raise RuntimeError(f"no free slot in the GPU lock of GPU {gpu!r} ({lock.slots} slots, all "
                                   "held by live workers)")
            slot = free.pop()

        def release() -> None:
            with self._lock:
                self._free_slots[gpu].append(slot)
        return lock.handle(slot), release

    def _loop(self, q: queue.Queue, role: str, env: dict[str, str], handle: Callable) -> None:
        holder: list[_Worker | None] = [None]
        try:  # start eagerly so the first job does not pay for the spawn
            holder[0] = self._new_worker(role, env)
        except Exception:
            holder[0] = None  # retried (and reported) when a job arrives
            if role == "exec":
                self._arch_known.set()
        try:
            while True:
                pend = q.get()
                if pend is None:
                    break
                if self._closed:
                    self._complete(pend, Result.env_error("EvalPool closed before the job ran", task=pend.job.task))
                    continue
                try:
                    handle(holder, env, pend)
                except Exception as e:
                    details = getattr(e, "details", "") or traceback.format_exc(limit=20)
                    self._complete(pend, Result.env_error(f"{role} worker unavailable: {e}", task=pend.job.task,
                                                          details=details[-6000:]))
        finally:
            if holder[0] is not None:
                holder[0].stop()
                self._workers.discard(holder[0])

    def _compile_loop(self, env: dict[str, str]) -> None:
        self._loop(self._compile_q, "compile", env, self._handle_compile)

    def _exec_loop(self, env: dict[str, str]) -> None:
        self._loop(self._exec_q, "exec", env, self._handle_exec)

    def _handle_compile(self, holder: list, env: dict[str, str], pend: _Pending) -> None:
        self._arch_known.wait(STARTUP_TIMEOUT_S)
        cfg = pend.config
        limit = cfg.limits.parse + cfg.limits.compile
        kind, payload, failure = self._run_on(holder, "compile", env, "prepare",
                                              (pend.job.task, pend.job.text, cfg, self.arch), limit)
        if failure is not None and self._closed:
            self._complete(pend, Result.env_error("EvalPool closed while the job ran", task=pend.job.task))
        elif failure is not None:
            what = (f"compilation did not finish within {limit:g} s" if failure == "overran"
                    else f"the compiler crashed on this code ({failure}; a compile may use "
                         f"{_compile_memory_text(env)} of memory)")
            self._complete(pend, Result(Status.COMPILE_ERROR, message=what + " (retried once)",
                                        task=pend.job.task, backend=self.backend))
        elif kind == "result":
            self._complete(pend, Result.from_dict(payload))
        else:
            pend.payload = payload
            self._exec_q.put(pend)

    def _handle_exec(self, holder: list, env: dict[str, str], pend: _Pending) -> None:
        cfg = pend.config
        lim = cfg.limits
        if self.evaluator is not None:
            limit = lim.parse + lim.compile + lim.correctness + lim.timing
            request: tuple[str, tuple[Any, ...]] = ("evaluate", (pend.job.task, pend.job.text, cfg))
        else:
            limit = lim.compile + lim.correctness + lim.timing  # load (cpu builds C++) + trials + timing
            request = ("execute", (pend.payload, cfg))
        kind, payload, failure = self._run_on(holder, "exec", env, request[0], request[1], limit)
        if failure is not None and self._closed:
            res = Result.env_error("EvalPool closed while the job ran", task=pend.job.task)
        elif failure == "overran":
            res = Result(Status.TIMEOUT, message=f"evaluation did not finish within {limit:g} s; the worker "
                         "was killed and replaced (retried once)", task=pend.job.task, backend=self.backend)
        elif failure is not None:
            res = Result(Status.RUNTIME_ERROR, message=f"{CRASH_MESSAGE}; {failure} (retried once)",
                         task=pend.job.task, backend=self.backend)
        else:
            res = Result.from_dict(payload)
            if kind == "result_fatal":  # the worker's CUDA context is gone: replace it now
                self._retire(holder, "exec", env)
        if failure is not None and pend.payload is not None:
            res.stage_seconds = dict(pend.payload.stage_seconds)
            res.resources = dict(pend.payload.compiled.resources)
        self._complete(pend, res)
