"""ProcessEvalPool (`EvalPool(mode="process" | "inline")`): score many submissions in isolated worker
processes (DESIGN 3.5).

Process mode runs two stages of long-lived spawned workers, each fed through its own pipe by a
parent thread that owns it:
  compile workers (CPU): parse + static checks + NVRTC, many in parallel;
  execution workers: `exec_workers_per_gpu` (default 3) per GPU for cupy (CUDA_VISIBLE_DEVICES set
  per worker), a few for cpu. Workers of one GPU share a readers-writer lock (execute/gpu_lock.py):
  timing runs alone on the GPU, correctness trials of several workers overlap, host work takes no
  lock, so the GPU is busy while a worker does host work. What maps device memory (a new worker's CUDA
  context, a module load, freeing the memory pool between jobs) takes the shared lock: no timing runs
  next to it. Time a job waits for the
  lock extends its wall-clock limit.
Warm spare exec workers per GPU (spares.py; two by default for cupy, `spare_worker=` True, False or a
count) replace a worker that dies at once, and a new spare starts in the background. Reference timings measured by a worker
come back with its replies and seed every other worker of that GPU, spares and replacements included
(judge/reference_cache.py), so a restart never re-times a reference.
The parent enforces per-stage wall-clock limits: a worker that overruns is killed and replaced and
the job reported as `timeout` at once (a hang is the submission's; a retry would double what it
costs: the hang bound, core/config.py HANG_GRACE_S); one that dies (segfault, os._exit) is replaced
and the job retried once, then reported as `runtime_error`. A sticky device error (the worker replies "result_fatal": its CUDA context is
unusable) replaces the worker without a retry; no other failing submission (format, compile, wrong
output, a non-sticky runtime error, the harness's own timeouts) costs a restart. A replaced worker is
reaped in the background: its exit (a CUDA context's teardown) never holds up its lane, and a faulted
worker has released its GPU lock already (only a hung one keeps it until it is gone). Every future
resolves to a Result. The parent never touches CUDA in process mode. Inline mode runs `score` in the
calling process, for debugging.

`worker_env` adds environment variables to every worker (e.g. CUPY_GPU_MEMORY_LIMIT="30%" when
the GPU is shared with a JAX trainer). Workers are spawned: a script creating a pool must guard
its entry point with `if __name__ == "__main__":`.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import queue
import threading
import time
import traceback
from typing import Any
from collections.abc import Callable

from kernels_env.core.config import BACKENDS, POOL_MODES, EnvConfig
from kernels_env.core.result import Result
from kernels_env.core.status import Status
from kernels_env.execute.gpu_lock import GpuLock, GpuLockHandle
from kernels_env.judge import reference_cache
from kernels_env.schedule.pool_base import RESTART_SPANS, Evaluator, Job, Pending, PoolBase
from kernels_env.execute.result_cache import ResultCache
from kernels_env.schedule.spares import SpareWorkers
from kernels_env.schedule.workers import STARTUP_TIMEOUT_S, Worker, WorkerDied, WorkerOverran, exit_desc

DEFAULT_EXEC_WORKERS_PER_GPU = 3  # cupy: one times (exclusive lock) while the others do host work
# cupy: warm spare exec workers per GPU (spares.py). One spare restarts in ~4 s on an H100; with 44 sticky
# faults in 172 jobs one spare was ready for 21 of 44 restarts (docs/results/env-throughput/)
DEFAULT_SPARES_PER_GPU = 2
CRASH_MESSAGE = "the kernel crashed the evaluation worker (e.g. illegal memory access)"
PROCESS_MODES = ("process", "inline")  # the modes this pool runs ("ray" is RayEvalPool's)
SLOT_WAIT_S = 30.0  # a new worker waits this long for a GPU-lock slot held by an exiting one


def _compile_memory_text(env: dict[str, str]) -> str:
    """The compile memory cap of workers started with `env`, as messages name it."""
    from kernels_env.compiler import memory_cap
    from kernels_env.core.units import describe_bytes
    try:
        return describe_bytes(memory_cap.compile_memory_bytes({**os.environ, **env}))
    except ValueError as e:
        return str(e)


def spare_count(spare_worker: bool | int | None, backend: str) -> int:
    """Warm spares per GPU for EvalPool's `spare_worker`: None = DEFAULT_SPARES_PER_GPU on cupy and none
    on cpu, True = DEFAULT_SPARES_PER_GPU, False = none, an integer n >= 0 = n."""
    if spare_worker is None:
        return DEFAULT_SPARES_PER_GPU if backend == "cupy" else 0
    if isinstance(spare_worker, bool):
        return DEFAULT_SPARES_PER_GPU if spare_worker else 0
    if not isinstance(spare_worker, int) or spare_worker < 0:
        raise ValueError(f"EvalPool spare_worker={spare_worker!r}; expected True, False, None or an integer >= 0 "
                         "(warm spare exec workers per GPU)")
    return spare_worker


class ProcessEvalPool(PoolBase):
    """Score jobs in worker processes (or inline), with a result cache; see the module docstring."""
    _gpu_count: int  # set by _probe_gpus once probed

    def __init__(self, mode: str = "process", backend: str = "auto", gpu_workers: int | None = None,
                 compile_workers: int | None = None, cache: bool | ResultCache = True,
                 config: EnvConfig | None = None, evaluator: Evaluator | None = None,
                 cpu_workers: int | None = None, worker_env: dict[str, str] | None = None,
                 exec_workers_per_gpu: int | None = None, spare_worker: bool | int | None = None) -> None:
        if mode not in PROCESS_MODES:  # "ray" is RayEvalPool's (pool.EvalPool picks the class)
            raise ValueError(f"EvalPool mode={mode!r}; expected one of {POOL_MODES}")
        if backend not in BACKENDS:
            raise ValueError(f"EvalPool backend={backend!r}; expected 'auto', 'cupy' or 'cpu'")
        for nm, v in (("gpu_workers", gpu_workers), ("compile_workers", compile_workers), ("cpu_workers", cpu_workers),
                      ("exec_workers_per_gpu", exec_workers_per_gpu)):
            if v is not None and v < 1:
                raise ValueError(f"EvalPool {nm}={v}; expected >= 1 or None")
        spare_count(spare_worker, backend)  # a bad value fails before any worker starts
        super().__init__(mode, config or EnvConfig(backend=backend), cache, evaluator,
                         ("restarts", "timeouts", "crashes", "spare_swaps"))
        self._threads: list[threading.Thread] = []
        self._workers: set[Worker] = set()
        self._device = None
        self._arch_known = threading.Event()
        self._refs = reference_cache.ReferenceStore()
        self._gpu_locks: dict[str, GpuLock] = {}
        self._free_slots: dict[str, list[int]] = {}
        self._slot_freed = threading.Condition(self._lock)  # a GPU-lock slot went back to _free_slots
        self._reapers: list[threading.Thread] = []  # threads waiting for retired workers to exit
        self._reap_s: list[float] = []  # how long each retired worker took to exit
        self._spares: SpareWorkers | None = None
        self.gpu_workers = self.exec_workers = self.compile_workers = 0
        if mode == "inline":
            self.backend = backend
            return
        self._ctx = mp.get_context("spawn")
        self._compile_q: queue.Queue = queue.Queue()
        self._exec_q: queue.Queue = queue.Queue()
        self.backend = self._resolve_backend(backend, gpu_workers)
        spares = spare_count(spare_worker, self.backend)
        n_cpu = os.cpu_count() or 2
        extra = {str(k): str(v) for k, v in (worker_env or {}).items()}
        if self.backend == "cupy":
            n_gpu = gpu_workers or max(1, self._probe_gpus())
            per_gpu = exec_workers_per_gpu or DEFAULT_EXEC_WORKERS_PER_GPU
            ids = self._gpu_ids()
            gpus = [ids[g % len(ids)] for g in range(n_gpu)]  # more than the GPUs: they share
            envs = [{**extra, "CUDA_VISIBLE_DEVICES": gpu} for gpu in gpus for _ in range(per_gpu)]
            for gpu in set(gpus):  # lanes + as many exiting (reaped in the background) + spares + as many starting + slack
                self._gpu_locks[gpu] = GpuLock(self._ctx, 2 * gpus.count(gpu) * per_gpu + 2 * spares + 2)
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
        if spares:
            self._spares = SpareWorkers(lambda env: self._new_worker("exec", env), spares)
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
    def stats(self) -> dict[str, int]:
        """Counters (jobs, restarts, spare swaps, ...), the spares ready and the reference timings known."""
        out = super().stats()
        out["spares_ready"] = len(self._spares.ready()) if self._spares is not None else 0
        out["reference_timings"] = self._refs.count()
        with self._lock:  # what a restart costs in the background: a spare's start, a killed worker's exit
            reaps = list(self._reap_s)
        spans = {"spare_start": self._spares.start_times() if self._spares is not None else [], "reap": reaps}
        for name in RESTART_SPANS:
            values = spans[name]
            out[f"{name}_count"] = len(values)
            out[f"{name}_ms_mean"] = round(1e3 * sum(values) / len(values)) if values else 0
            out[f"{name}_ms_max"] = round(1e3 * max(values)) if values else 0
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
            reapers = list(self._reapers)
        for t in reapers:
            t.join(10)
        with self._lock:
            left = list(self._inflight.values())
            self._inflight.clear()
        for p in left:
            self._resolve_futures(p, Result.env_error("EvalPool closed before the job finished", task=p.job.task))

    def _enqueue(self, pend: Pending) -> None:
        """Hand a new (not cached, not in flight) job to the workers."""
        (self._exec_q if self.evaluator is not None else self._compile_q).put(pend)

    # -- inline --
    def _run_inline(self, job: Job, cfg: EnvConfig) -> Result:
        try:
            if self.evaluator is not None:
                return self.evaluator(job.task, job.text, cfg)
            from kernels_env.execute.score import score
            if self._device is None:
                from kernels_env.backends import get_device
                self._device = get_device(self.backend if self.backend != "auto" else cfg.backend, cfg)
            return score(job.task, job.text, cfg, device=self._device)
        except Exception:
            return Result.env_error("inline evaluation failed", task=job.task, details=traceback.format_exc(limit=20))

    # -- worker threads --
    def _run_on(self, holder: list, role: str, env: dict[str, str], kind: str, payload: Any,
                limit: float) -> tuple[str, Any, str | None]:
        """Send one request, replacing the worker if it overran or died, and retrying once if it died.

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
            except WorkerOverran:
                failure = "overran"
                self._count("timeouts")
            except WorkerDied as d:
                failure = exit_desc(d.exitcode)
                self._count("crashes")
            if self._closed:
                w.kill()
                self._workers.discard(w)
                holder[0] = None
                break
            self._retire(holder, role, env)
            if failure == "overran":  # the submission's timeout: never retried
                break
        return "", None, failure

    def _retire(self, holder: list, role: str, env: dict[str, str]) -> None:
        """Kill the holder's worker (dead, overran or unusable) and put a warm spare in its place
        when one is ready (else the next request starts a new worker). The old worker is reaped in
        the background: a process leaving a CUDA context may take seconds to exit, which must not
        hold up this lane; its GPU-lock slot stays taken until it is gone (Worker.kill)."""
        w = holder[0]
        if w is not None:
            self._workers.discard(w)
            self._reap(w)
        holder[0] = None
        self._count("restarts")
        if role == "exec" and self._spares is not None and not self._closed:
            holder[0] = self._spares.take(env)
            if holder[0] is not None:
                self._count("spare_swaps")

    def _reap(self, w: Worker) -> None:
        """Kill `w` and wait for its exit in a thread of its own (close() waits for these threads)."""
        def reap() -> None:
            t0 = time.monotonic()
            w.kill()
            with self._lock:
                self._reap_s.append(time.monotonic() - t0)

        t = threading.Thread(target=reap, name="EvalPool-reap", daemon=True)
        t.start()
        with self._lock:
            self._reapers = [x for x in self._reapers if x.is_alive()] + [t]

    def _new_worker(self, role: str, env: dict[str, str]) -> Worker:
        if self._closed:
            raise RuntimeError("EvalPool is closed")
        handle, release = self._claim_lock_slot(env) if role == "exec" else (None, None)
        w = Worker(self._ctx, role, self.backend, env, self.evaluator if role == "exec" else None, self.config,
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
        with self._slot_freed:  # a worker being reaped frees its slot within seconds
            free = self._free_slots[gpu]
            if not free and not self._slot_freed.wait_for(lambda: bool(free), timeout=SLOT_WAIT_S):
                raise RuntimeError(f"no free slot in the GPU lock of GPU {gpu!r} within {SLOT_WAIT_S:g} s "
                                   f"({lock.slots} slots, all held by live or exiting workers)")
            slot = free.pop()

        def release() -> None:
            with self._slot_freed:
                self._free_slots[gpu].append(slot)
                self._slot_freed.notify_all()
        return lock.handle(slot), release

    def _loop(self, q: queue.Queue, role: str, env: dict[str, str], handle: Callable) -> None:
        holder: list[Worker | None] = [None]
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

    def _handle_compile(self, holder: list, env: dict[str, str], pend: Pending) -> None:
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
            retried = "" if failure == "overran" else " (retried once)"
            self._complete(pend, Result(Status.COMPILE_ERROR, message=what + retried,
                                        task=pend.job.task, backend=self.backend))
        elif kind == "result":
            self._complete(pend, Result.from_dict(payload))
        else:
            pend.payload = payload
            self._exec_q.put(pend)

    def _handle_exec(self, holder: list, env: dict[str, str], pend: Pending) -> None:
        cfg = pend.config
        lim = cfg.limits
        if self.evaluator is not None:
            limit = lim.job_s(parse=True)
            request: tuple[str, tuple[Any, ...]] = ("evaluate", (pend.job.task, pend.job.text, cfg))
        else:
            limit = lim.job_s()  # load (cpu builds C++) + trials + timing
            request = ("execute", (pend.payload, cfg))
        kind, payload, failure = self._run_on(holder, "exec", env, request[0], request[1], limit)
        if failure is not None and self._closed:
            res = Result.env_error("EvalPool closed while the job ran", task=pend.job.task)
        elif failure == "overran":
            res = Result(Status.TIMEOUT, message=f"evaluation did not finish within {limit:g} s; the worker "
                         "was killed and replaced", task=pend.job.task, backend=self.backend)
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
