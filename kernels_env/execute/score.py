"""score(): the whole evaluation of one submission (DESIGN 3.3), never raising for policy input.

Split in two halves so the pool can run them in different processes:
  `prepare`  parse + static checks + NVRTC compile (CPU only, no device)  -> Prepared | Result
  `execute`  load on a device + correctness trials + timing (harness)      -> Result
`score` runs both in the calling process. Any unexpected exception becomes `env_error` with the
traceback in `details`.
"""
from __future__ import annotations

import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable

from kernels_env.compiler.compile import CompileError, compile_cuda, resolve_arch
from kernels_env.core.config import EnvConfig
from kernels_env.source.launch import FormatError, check_plan
from kernels_env.core.program import CompiledModule, Submission
from kernels_env.core.result import Result
from kernels_env.source.signatures import find_hidden_kernels
from kernels_env.core.status import Status
from kernels_env.execute.gpu_lock import gpu_access
from kernels_env.execute.result_cache import cache_key
from kernels_env.source.submission import Answer, in_launch_block, parse_submission

Evaluate = Callable[..., Result]  # harness.evaluate(device, program, task, submission, sizes, config)


@dataclass
class Prepared:
    """A submission that parsed, passed the static checks and compiled (picklable)."""
    task: str
    submission: Submission
    compiled: CompiledModule
    sizes: dict[str, int]
    key: str
    stage_seconds: dict[str, float] = field(default_factory=dict)


def resolve_task(task: Any) -> Any:
    """A Task object, or a task name looked up in the registry (KeyError with suggestions); a
    `problem:/path.py` name is its problem file's task (kernels_env.problems)."""
    if isinstance(task, str):
        from kernels_env.problems.build import NAME_PREFIX, problem_task
        if task.startswith(NAME_PREFIX):
            return problem_task(task)
        from kernels_env.tasks import get_task
        return get_task(task)
    return task


def _key(task_name: str, text: Answer, config: EnvConfig) -> str:
    return cache_key(task_name, text, config)


def _env_error(where: str, task_name: str, key: str = "", stage_seconds: dict | None = None) -> Result:
    """env_error for the exception being handled, with its traceback in details."""
    exc = sys.exc_info()[1]
    what = f": {type(exc).__name__}: {exc}" if exc is not None else ""
    r = Result.env_error(f"the environment failed during {where} (not the submission's fault){what}"[:500],
                         task=task_name, details=traceback.format_exc(limit=20)[-8000:])
    r.key = key
    r.stage_seconds = dict(stage_seconds or {})
    return r


def _redacted(r: Result) -> Result:
    """The result with host paths removed from everything the policy (or its logs) may see."""
    from kernels_env.compiler.compile import redact_paths
    r.message = redact_paths(r.message or "")
    r.details = redact_paths(r.details or "")
    return r


def prepare(task: Any, text: Answer, config: EnvConfig | None = None, arch: str | None = None) -> Prepared | Result:
    out = _prepare(task, text, config, arch)
    return _redacted(out) if isinstance(out, Result) else out


def _prepare(task: Any, text: Answer, config: EnvConfig | None = None, arch: str | None = None) -> Prepared | Result:
    """Parse, check and compile for config.arch, else `arch` (the device's), else sm_90.
    Returns Prepared, or a format_error / compile_error / env_error Result."""
    config = config or EnvConfig()
    task_name = task if isinstance(task, str) else getattr(task, "name", "")
    stages: dict[str, float] = {}
    key = ""
    try:
        key = _key(task_name, text, config)
        task = resolve_task(task)
        sizes = task.size_set(config.sizes)
        t0 = time.perf_counter()
        try:
            sub = parse_submission(text)
            check_plan(sub.plan, sub.kernels, task, sizes, find_hidden_kernels(sub.cuda_source))
        except FormatError as e:
            stages["parse"] = time.perf_counter() - t0
            return Result(Status.FORMAT_ERROR, message=in_launch_block(str(e)), task=task_name, key=key,
                          stage_seconds=stages)
        stages["parse"] = time.perf_counter() - t0
        if stages["parse"] > config.limits.parse:  # parsing is linear; only a huge input gets here
            return Result(Status.FORMAT_ERROR, message=f"parsing the answer took {stages['parse']:.1f} s, "
                          f"more than the {config.limits.parse:g} s limit; submit less text",
                          task=task_name, key=key, stage_seconds=stages)
        t0 = time.perf_counter()
        try:
            compiled = compile_cuda(sub.cuda_source, resolve_arch(config.arch or arch), config)
        except CompileError as e:
            stages["compile"] = time.perf_counter() - t0
            first = next((ln for ln in e.log.splitlines() if "error" in ln), e.log.splitlines()[0] if e.log else "")
            return Result(Status.COMPILE_ERROR, message=f"compilation failed: {first.strip()}"[:300],
                          task=task_name, details=e.log, key=key, stage_seconds=stages)
        stages["compile"] = time.perf_counter() - t0
        return Prepared(task_name, sub, compiled, sizes, key, stages)
    except Exception:
        return _env_error("parse/compile", task_name, key, stages)


def execute(prepared: Prepared, device: Any, config: EnvConfig | None = None,
            evaluate: Evaluate | None = None, task: Any = None) -> tuple[Result, bool]:
    r, fatal = _execute(prepared, device, config, evaluate, task)
    return _redacted(r), fatal


def _execute(prepared: Prepared, device: Any, config: EnvConfig | None = None,
             evaluate: Evaluate | None = None, task: Any = None) -> tuple[Result, bool]:
    """Load and evaluate a Prepared submission on `device` (`task`: the Task object, else looked up
    by the prepared name).

    Returns (result, fatal): `fatal` is True when the device is unusable afterwards (a sticky CUDA
    error): the caller must drop the device (the pool replaces the worker).
    """
    config = config or EnvConfig()
    from kernels_env.backends.base import FatalDeviceError
    stages = dict(prepared.stage_seconds)
    backend = getattr(device, "name", "")
    fatal = False
    try:
        task = resolve_task(prepared.task if task is None else task)
        t0 = time.perf_counter()
        try:
            with gpu_access(device, exclusive=False):  # a module load maps device memory: never during a timing
                program = device.load(prepared.compiled, config)
        except CompileError as e:
            stages["load"] = time.perf_counter() - t0
            log = e.log if hasattr(e, "log") else str(e)
            return Result(Status.COMPILE_ERROR, message=f"the {backend} backend cannot build this code: "
                          f"{log.splitlines()[0] if log else ''}"[:300], details=log), False
        stages["load"] = time.perf_counter() - t0
        if evaluate is None:
            from kernels_env.execute.harness import evaluate as harness_evaluate
            evaluate = harness_evaluate
        try:
            result = evaluate(device, program, task, prepared.submission, dict(prepared.sizes), config)
        except FatalDeviceError as e:
            fatal, result = True, fatal_result(e)
        if not isinstance(result, Result):
            raise TypeError(f"harness returned {type(result).__name__}, expected Result")
        if not fatal and result.status is Status.ENV_ERROR:
            fatal = _context_lost(device)
        if getattr(device, "healthy", True) is False:
            fatal = True
        if fatal:
            _retain_on_unusable_device(device, program)
        stages.update(result.stage_seconds)
        result.stage_seconds = stages
        return _finish(result, prepared, backend), fatal
    except Exception:
        r = _env_error("load/evaluation", prepared.task, prepared.key, stages)
        r.backend = backend
        return r, fatal or _context_lost(device)


def fatal_result(e: Exception) -> Result:
    """The Result to report for a sticky device error (FatalDeviceError): the one harness.evaluate set
    on it, else a runtime_error naming it. The worker that saw it is replaced."""
    res = getattr(e, "result", None)
    return res if isinstance(res, Result) else Result(Status.RUNTIME_ERROR, message=f"sticky CUDA error: {e}",
                                                      details=str(e))


def _context_lost(device: Any, timeout_s: float = 5.0) -> bool:
    """After an env_error: whether the device hides a sticky error (a kernel's fault the failed
    evaluation never synchronized on). A worker in that state would fail every later job, so it is
    reported fatal and replaced."""
    from kernels_env.backends.base import FatalDeviceError, KernelRuntimeError, KernelTimeout
    sync = getattr(device, "synchronize", None)
    if sync is None:
        return False
    try:
        try:
            sync(timeout_s=timeout_s)
        except TypeError:  # a device without the timeout extension
            sync()
    except (FatalDeviceError, KernelTimeout):
        return True
    except KernelRuntimeError:
        return getattr(device, "healthy", True) is False
    except Exception:
        return False
    return getattr(device, "healthy", True) is False


def _retain_on_unusable_device(device: Any, program: Any) -> None:
    """Keep `program` referenced for the rest of the process after a sticky error or a hang.

    Releasing a loaded CUDA module unloads it, and unloading waits for its kernels: after a hang
    (a kernel still spinning) that wait never ends, so the caller would block when the program (or
    the device holding it) is released instead of reporting `timeout`. A device this unusable must
    be replaced with its process (the pool does), so the process-wide list stays short."""
    _RETAINED.append(program)


_RETAINED: list[Any] = []  # programs on unusable devices (see _retain_on_unusable_device)


def _finish(result: Result, prepared: Prepared, backend: str) -> Result:
    result.task = prepared.task
    result.backend = result.backend or backend
    result.key = prepared.key
    if not result.resources:
        result.resources = dict(prepared.compiled.resources)
    return result


def score(task: Any, text: Answer, config: EnvConfig | None = None, device: Any = None, *,
          evaluate: Evaluate | None = None) -> Result:
    """Score one submission for `task` (a Task or a task name) in this process. Never raises for
    policy input: failures are statuses (bytes that are not UTF-8: format_error naming the byte
    offset); environment failures are env_error."""
    config = config or EnvConfig()
    task_name = task if isinstance(task, str) else getattr(task, "name", "")
    own_device = False
    try:
        if device is None:
            from kernels_env.backends import get_device
            device = get_device(config.backend, config)
            own_device = True
        prep = prepare(task, text, config, arch=getattr(device, "arch", None))
        if isinstance(prep, Result):
            prep.backend = prep.backend or getattr(device, "name", "")
            return prep
        return execute(prep, device, config, evaluate, task=task)[0]
    except Exception:
        return _redacted(_env_error("setup", task_name))
    finally:
        if own_device and device is not None:
            try:
                device.close()
            except Exception:
                pass
