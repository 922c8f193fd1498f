"""EvalHost: the Ray actor on one evaluation machine. It wraps a process-mode pool (ProcessEvalPool) there, so
compilation runs on that machine's CPUs and kernels run in its exec workers; the actor itself never
imports CuPy or touches CUDA, so a kernel that poisons its CUDA context costs one exec worker (replaced
by the local pool), never the host. Results travel back as `Result.to_dict()` in batch order."""
from __future__ import annotations

import os
import socket
import sys
import types
from typing import Any

from kernels_env.schedule.pool_base import Job
from kernels_env.schedule.process_pool import ProcessEvalPool


class EvalHost:
    """One machine's evaluation pool behind a Ray actor (see the module docstring)."""

    def __init__(self, pool_kwargs: dict[str, Any]) -> None:
        os.environ["LEAP_EVAL_HOST"] = "1"  # this process and its workers serve a Ray evaluation host
        _bare_main()
        self.pool = ProcessEvalPool(mode="process", cache=False, **pool_kwargs)

    def score_batch(self, jobs: list[Job]) -> dict[str, Any]:
        """Score the jobs in the local pool (all at once: its workers run them in parallel):
        {"results": their results in the order of `jobs`, "stats": the local pool's counters after}."""
        futures = [self.pool.submit(j) for j in jobs]
        results = [f.result().to_dict() for f in futures]
        return {"results": results, "stats": self.pool.stats()}

    def info(self) -> dict[str, Any]:
        """Who this host is: pid, machine, backend and worker counts (the driver sizes its window by them)."""
        p = self.pool
        return {"pid": os.getpid(), "hostname": socket.gethostname(), "backend": p.backend,
                "gpu_workers": p.gpu_workers, "exec_workers": p.exec_workers, "compile_workers": p.compile_workers,
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "")}

    def stats(self) -> dict[str, int]:
        """The local pool's counters (restarts, timeouts, crashes, ...)."""
        return self.pool.stats()

    def ping(self) -> dict[str, Any]:
        """{"info": info(), "stats": stats()}: the driver's sign of life (sent in the "health" group, it is
        answered while batches run) and its cached view of this host."""
        return {"info": self.info(), "stats": self.stats()}

    def close(self) -> None:
        self.pool.close()


def _bare_main() -> None:
    """Spawned pool workers re-import their parent's `__main__`; in a Ray worker that is Ray's worker
    script, which would load Ray and gRPC into every compile and exec worker (memory, start-up time, and
    gRPC aborting in a Landlock-confined compile worker at exit). An empty `__main__` spares them that:
    the actor's own code is already running and does not look it up again."""
    sys.modules["__main__"] = types.ModuleType("__main__")


HEALTH_GROUP = "health"  # the concurrency group pings run in (call `handle.ping.options(concurrency_group=...)`)


def host_actor_class(ray: Any) -> Any:
    """EvalHost as a Ray actor class. Threaded (options set max_concurrency) so several batches feed the
    local pool at once; pings get a thread of their own (HEALTH_GROUP), never queued behind batches."""
    return ray.remote(concurrency_groups={HEALTH_GROUP: 1})(EvalHost)
