"""Top-level evaluators for EvalPool tests: `(task_name, text, config) -> Result` that misbehave on cue.

The text selects the behaviour, so one pool can serve good and bad jobs: "hang" sleeps forever,
"exit" calls os._exit(3), "killhost" SIGKILLs the worker's parent when that is a Ray evaluation
host (LEAP_EVAL_HOST=1, kernels_env/schedule/ray_host.py; elsewhere it only exits), "segv" raises
SIGSEGV in the worker, "raise" raises, "sticky" raises FatalDeviceError (a sticky CUDA error: the pool
replaces the worker, the job is runtime_error), "flaky:<path>" dies the first time (creating <path>) and
succeeds on the retry, "ref:<name>" looks <name> up in the worker's reference-timing cache (the one a
real device keeps, see kernels_env/judge/reference_cache.py) and answers "ref <name> cached" or, after
storing it, "ref <name> measured"; anything else returns `correct` with the text as its message and
the worker's pid in `details`.
"""
from __future__ import annotations

import os
import signal
import time

from kernels_env.core.config import EnvConfig
from kernels_env.core.result import Result
from kernels_env.core.status import Status


def scripted_evaluator(task: str, text: str, config: EnvConfig) -> Result:
    """Behave as the text says (see the module docstring)."""
    if text.startswith("hang"):
        while True:
            time.sleep(3600)
    if text.startswith("exit"):
        os._exit(3)
    if text.startswith("killhost"):
        if os.environ.get("LEAP_EVAL_HOST") == "1":  # never a test run's own process
            os.kill(os.getppid(), signal.SIGKILL)
        os._exit(5)
    if text.startswith("segv"):
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(10)
    if text.startswith("raise"):
        raise RuntimeError("scripted evaluator failure")
    if text.startswith("sticky"):
        from kernels_env.backends.base import FatalDeviceError
        e = FatalDeviceError("scripted sticky error (an illegal address on a GPU)")
        e.result = Result(Status.RUNTIME_ERROR, message=f"{e}", task=task, backend="scripted",
                          details=f"pid={os.getpid()}")
        raise e
    if text.startswith("flaky:"):
        path = text.split(":", 1)[1]
        if not os.path.exists(path):
            open(path, "w").close()
            os._exit(4)
    if text.startswith("ref:"):
        from kernels_env.judge.reference_cache import worker_cache
        name = text.split(":", 1)[1].split()[0]
        cache = worker_cache()
        how = "cached" if ("scripted", name) in cache else "measured"
        cache.setdefault(("scripted", name), [1.0, 2.0])
        return Result(Status.CORRECT, message=f"ref {name} {how}", task=task, backend="scripted",
                      details=f"pid={os.getpid()}")
    if text.startswith("sleep:"):
        time.sleep(float(text.split(":", 1)[1].split()[0]))
    return Result(Status.CORRECT, message=text, task=task, backend="scripted", details=f"pid={os.getpid()}")
