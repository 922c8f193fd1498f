"""The driver side every pool mode shares: jobs, the result cache, in-flight de-duplication, counters,
and futures that always resolve to a Result.

ProcessEvalPool (process_pool.py: process and inline modes) and RayEvalPool (ray_pool.py) sit on
PoolBase and decide only where a new job runs (`_enqueue`) and how they stop (`close`); pool.py's
`EvalPool(mode=...)` picks one. This module imports neither, so each file imports one way.
"""
from __future__ import annotations

import concurrent.futures as cf
import threading
import traceback
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable, Iterable

from kernels_env.core.config import EnvConfig
from kernels_env.core.result import Result
from kernels_env.core.status import Status
from kernels_env.execute.result_cache import ResultCache, cache_key
from kernels_env.source.submission import Answer

Evaluator = Callable[[str, Answer, EnvConfig], Result]  # (task, answer, config), in an exec worker
# What a worker restart costs in the background, in every pool's stats as `<span>_count`, `<span>_ms_mean`
# and `<span>_ms_max` (ProcessEvalPool measures them; RayEvalPool combines its hosts'): a warm spare's
# start and a retired worker's exit.
RESTART_SPANS = ("spare_start", "reap")


@dataclass(frozen=True)
class Job:
    """One submission to score: a task name, the policy's text (or a file's bytes: UTF-8), and
    optionally its own config."""
    task: str
    text: Answer
    config: EnvConfig | None = None


@dataclass
class Pending:
    """A job being scored: the futures waiting for it (one per duplicate submission)."""
    job: Job
    config: EnvConfig
    key: str
    futures: list[cf.Future]
    payload: Any = None  # Prepared, between the stages


class PoolBase:
    """The pool's contract (`submit`, `map` in order, `stats`, `close`, a context manager) over a result
    cache and the jobs in flight; subclasses run the jobs (see the module docstring)."""

    def __init__(self, mode: str, config: EnvConfig, cache: bool | ResultCache, evaluator: Evaluator | None,
                 counters: tuple[str, ...]) -> None:
        self.mode, self.evaluator, self.config = mode, evaluator, config
        self.cache = cache if isinstance(cache, ResultCache) else (ResultCache() if cache else None)
        self.arch: str | None = config.arch
        self._lock = threading.Lock()
        self._inflight: dict[str, Pending] = {}
        self._stats = dict.fromkeys(("submitted", "evaluations", "cache_hits", "env_errors", *counters), 0)
        self._closed = False

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
                pend = Pending(job, cfg, key, [fut])
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
        """The counters (jobs, cache hits, env_errors and the mode's own)."""
        with self._lock:
            return dict(self._stats)

    def close(self) -> None:
        """Stop the pool; pending jobs resolve to env_error."""
        raise NotImplementedError

    def __enter__(self) -> PoolBase:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # best effort; close() is the API
        try:
            self.close()
        except Exception:
            pass

    # -- what each mode provides --
    def _enqueue(self, pend: Pending) -> None:
        """Hand a new (not cached, not in flight) job to whatever runs jobs in this mode."""
        raise NotImplementedError

    def _run_inline(self, job: Job, cfg: EnvConfig) -> Result:
        """mode="inline": score the job in this process (ProcessEvalPool's)."""
        raise NotImplementedError(f"EvalPool mode={self.mode!r} does not score jobs inline")

    # -- completion --
    def _finish(self, key: str, result: Result) -> Result:
        with self._lock:
            if not result.cached:
                self._stats["evaluations"] += 1
            if result.status is Status.ENV_ERROR:
                self._stats["env_errors"] += 1
        if not result.key:
            result.key = key
        from kernels_env.compiler.compile import redact_paths  # worker tracebacks, timeouts: no host paths
        result.message = redact_paths(result.message or "")
        result.details = redact_paths(result.details or "")
        if self.cache is not None:
            self.cache.put(key, result)
        return result

    def _resolve_futures(self, pend: Pending, result: Result) -> None:
        for i, f in enumerate(pend.futures):
            try:
                f.set_result(result if i == 0 else Result.from_dict(result.to_dict()))
            except cf.InvalidStateError:  # already resolved (closing raced a finishing job)
                pass

    def _complete(self, pend: Pending, result: Result) -> None:
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

    def _count(self, name: str) -> None:
        with self._lock:
            self._stats[name] += 1
