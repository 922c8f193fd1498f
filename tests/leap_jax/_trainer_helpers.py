"""Test helpers for the trainer/rollout tests: an oracle evaluator for scripted submissions.

`OracleEvaluator` returns, without compiling anything, the status the real environment gives the
ScriptedPolicy's submissions: the task's own solution is `correct`, the `#error` variant is a
`compile_error`, anything without a launch block (the bad_format variant, random model text) is a
`format_error`. test_rollout checks this agreement against the real pipeline when the cpu backend
is available. Extra statuses can be forced per (task, text) for env_error tests.
"""
from __future__ import annotations

from concurrent.futures import Future

from kernels_env.core.result import Result, Timing
from kernels_env.core.status import Status
from kernels_env.tasks import get_task


class OracleEvaluator:
    def __init__(self, speedup: float | None = None, env_error_tasks: tuple[str, ...] = ()):
        self.speedup = speedup
        self.env_error_tasks = set(env_error_tasks)
        self.jobs: list[tuple[str, str]] = []

    def score(self, task: str, text: str) -> Result:
        self.jobs.append((task, text))
        if task in self.env_error_tasks:
            return Result.env_error("worker lost", task=task)
        if text == get_task(task).solution:
            timing = None
            if self.speedup is not None:
                timing = Timing(device="cuda", comparable=True, runs=1, kernel_median_ms=1.0,
                                kernel_mean_ms=1.0, ref_median_ms=self.speedup, speedup=self.speedup)
            return Result(Status.CORRECT, "ok", task=task, timing=timing)
        if "#error scripted" in text:
            return Result(Status.COMPILE_ERROR, "error: #error scripted", task=task)
        return Result(Status.FORMAT_ERROR, "no ```launch block found", task=task)

    def submit(self, job) -> Future:
        f: Future = Future()
        f.set_result(self.score(job.task, job.text))
        return f

    def map(self, jobs):
        return [self.score(j.task, j.text) for j in jobs]

    def close(self) -> None:
        pass


def cpu_backend_works() -> bool:
    """Whether the cpu backend scores the relu solution here (a C++ compiler and the runtime work)."""
    try:
        from kernels_env import EnvConfig, score
        return score(get_task("relu"), get_task("relu").solution,
                     EnvConfig(backend="cpu", sizes="small", correctness_trials=1, timing=False)).correct
    except Exception:
        return False
