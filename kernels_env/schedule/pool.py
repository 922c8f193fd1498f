"""EvalPool(mode=...): the one way to build an evaluation pool, above every mode (DESIGN 3.5).

  mode="process" (default), "inline": ProcessEvalPool (process_pool.py): isolated compile and exec
    workers on this machine, or `score` in the calling process (debugging);
  mode="ray": RayEvalPool (ray_pool.py): jobs scored on the evaluation hosts of a Ray cluster, each
    running a ProcessEvalPool (ray_host.py). Ray is imported only for this mode.
Both sit on pool_base.PoolBase (Job, the result cache, in-flight de-duplication, futures that always
resolve to a Result). Imports point one way: pool -> process_pool / ray_pool -> pool_base; nothing
imports this module back. Callers use `EvalPool` and `Job` from here (or `from kernels_env import EvalPool`).
"""
from __future__ import annotations

from typing import Any

from kernels_env.core.config import EnvConfig
from kernels_env.schedule.pool_base import Evaluator, Job, PoolBase
from kernels_env.schedule.process_pool import ProcessEvalPool
from kernels_env.execute.result_cache import ResultCache

__all__ = ["EvalPool", "Evaluator", "Job", "PoolBase", "ProcessEvalPool"]


def EvalPool(mode: str = "process", backend: str | None = None, gpu_workers: int | None = None,
             compile_workers: int | None = None, cache: bool | ResultCache = True,
             config: EnvConfig | None = None, evaluator: Evaluator | None = None,
             cpu_workers: int | None = None, worker_env: dict[str, str] | None = None,
             exec_workers_per_gpu: int | None = None, spare_worker: bool | int | None = None,
             **ray_options: Any) -> PoolBase:
    """The pool of `mode` (see the module docstring). The process-pool arguments configure the local
    pool (process, inline) or each Ray host's (ray); `ray_options` are RayEvalPool's own (address,
    hosts, batch_jobs, ...) and only mode="ray" takes them. The backend is `config.backend` unless
    `backend` names one for a config left at "auto" (or a pool without a config); a pool and a
    config that name two backends are refused."""
    if config is not None and backend is not None and config.backend not in ("auto", backend):
        raise ValueError(f"EvalPool(backend={backend!r}) disagrees with its config's backend={config.backend!r}; "
                         "name the backend once, in EnvConfig")
    backend = backend or (config.backend if config is not None else "auto")
    kw: dict[str, Any] = dict(backend=backend, gpu_workers=gpu_workers, compile_workers=compile_workers,
                              cache=cache, config=config, evaluator=evaluator, cpu_workers=cpu_workers,
                              worker_env=worker_env, exec_workers_per_gpu=exec_workers_per_gpu,
                              spare_worker=spare_worker)
    if mode == "ray":
        from kernels_env.schedule.ray_pool import RayEvalPool
        return RayEvalPool(mode, **kw, **ray_options)
    if ray_options:
        raise TypeError(f"EvalPool(mode={mode!r}) got {', '.join(sorted(ray_options))}: only mode='ray' takes "
                        "these arguments")
    return ProcessEvalPool(mode, **kw)
