"""A failing submission costs no worker restart unless its error is sticky (RL policies write many).

Only a sticky device error (FatalDeviceError: illegal address, launch failure, a hung kernel on a
GPU) makes `pipeline.execute` report the device unusable, and only then does the pool replace the exec
worker, once and without a retry. Format, compile and wrong-output failures, non-sticky runtime errors
and the harness's own timeouts keep it. A replaced worker is reaped in the background, so its exit
never holds up the lane. CPU only: real kernels on the cpu backend, a numpy FakeDevice, a scripted
evaluator for the sticky case.
"""
from __future__ import annotations

import threading
import time

import pytest

from kernels_env.backends.base import FatalDeviceError, KernelRuntimeError, KernelTimeout
from kernels_env.core.config import EnvConfig, StageLimits
from kernels_env.core.status import Status
from kernels_env.execute.score import Prepared, execute, prepare
from kernels_env.schedule.pool import EvalPool, Job
from kernels_env.tasks.spec import Buffer, Task
from kernels_env.testing.evaluators import scripted_evaluator
from kernels_env.testing.fake_device import FakeDevice

# ---- the decision: pipeline.execute's `fatal` ------------------------------------------------------
ADD = ('```cuda\nextern "C" __global__ void add(const float* a, const float* b, float* c, int n) {\n'
       '  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) c[i] = a[i] + b[i];\n}\n```\n'
       "```launch\nadd<<<cdiv(N, 128), 128>>>(a, b, c, N);\n```\n")
TASK = Task(name="failure_cost_add", level=1, description="c = a + b", sizes={"eval": {"N": 300}, "small": {"N": 300}},
            inputs=(Buffer("a", "float32", ("N",)), Buffer("b", "float32", ("N",))),
            outputs=(Buffer("c", "float32", ("N",)),), reference=lambda xp, a, b: a + b, solution="")
FAKE_CFG = EnvConfig(sizes="small", correctness_trials=2, warmup_runs=1, timed_runs=3)


def _raising(e: Exception):
    def fn(grid, block, shared, *args):
        raise e
    return fn


def _wrong(grid, block, shared, a, b, c, n):
    c[:] = 0.0


@pytest.mark.parametrize("kernel, status, fatal", [
    (_wrong, Status.WRONG_OUTPUT, False),
    (_raising(KernelRuntimeError("CUDA_ERROR_INVALID_VALUE: invalid argument")), Status.RUNTIME_ERROR, False),
    (_raising(KernelRuntimeError("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: too many resources requested for launch")),
     Status.RUNTIME_ERROR, False),
    (_raising(KernelTimeout("the kernel ran longer than 2 s")), Status.TIMEOUT, False),
    (_raising(FatalDeviceError("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered")),
     Status.RUNTIME_ERROR, True),
], ids=["wrong_output", "invalid_argument", "out_of_resources", "timeout", "sticky_illegal_address"])
def test_only_a_sticky_error_makes_the_device_unusable(kernel, status, fatal):
    prep = prepare(TASK, ADD, FAKE_CFG)
    assert isinstance(prep, Prepared)
    dev = FakeDevice()
    dev.register("add", kernel, ms=0.5)
    r, got = execute(prep, dev, FAKE_CFG, task=TASK)
    assert (r.status, got) == (status, fatal), r.message


# ---- the pool: real kernels on the cpu backend ------------------------------------------------------
def _kernel(tag: str, body: str, out: str, launch: str) -> str:
    return f'```cuda\n// {tag}\nextern "C" __global__ void {body}\n```\n```launch\n{launch.format(out=out)}\n```\n'


def test_failing_submissions_keep_their_exec_worker():
    """Every failure kind a policy writes, through the process pool on the cpu backend: no restart,
    no crash, no overrun; a correct job after them runs on the same (only) exec worker."""
    from kernels_env.tasks import get_task
    t = get_task("relu")  # one float32 output
    out = t.outputs[0].name
    cfg = EnvConfig(backend="cpu", sizes="small", timing=False, correctness_trials=2,
                    limits=StageLimits(parse=2, compile=20, correctness=2, timing=2))
    jobs = [
        (t.solution, Status.CORRECT),
        ("no code blocks at all", Status.FORMAT_ERROR),
        (t.solution.replace("```cuda\n", "```cuda\nthis is not C++;\n", 1), Status.COMPILE_ERROR),
        (_kernel("wrong", "z(float* y) { }", out, "z<<<1, 1>>>({out});"), Status.WRONG_OUTPUT),
        (_kernel("far", "far(char* y) { ((float*)y)[1ll << 36] = 1.f; }", out, "far<<<1, 1>>>({out});"),
         Status.RUNTIME_ERROR),  # sticky on a GPU; on the cpu backend its runner process is replaced
        (_kernel("before", "before(float* y) { y[-1] = 1.f; }", out, "before<<<1, 1>>>({out});"),
         Status.RUNTIME_ERROR),  # a write into the guard before the output
        (_kernel("spin", "spin(char* y) { volatile char* p = y; while (true) { p[0] = 1; } }", out,
                 "spin<<<1, 1>>>({out});"), Status.TIMEOUT),
        (t.solution + "\n<!-- again -->\n", Status.CORRECT),
    ]
    with EvalPool(backend="cpu", config=cfg, compile_workers=1, cpu_workers=1, cache=False) as pool:
        rs = pool.map([Job(t.name, text, cfg) for text, _ in jobs])
        stats = pool.stats()
    assert [r.status for r in rs] == [want for _, want in jobs], [r.message for r in rs]
    assert "the worker was killed" not in rs[6].message  # the harness's own limit, not the pool's
    assert (stats["restarts"], stats["crashes"], stats["timeouts"]) == (0, 0, 0), stats


# ---- the pool: a sticky error ---------------------------------------------------------------------
SCRIPTED = EnvConfig(backend="cpu", limits=StageLimits(parse=0.5, compile=0.5, correctness=0.5, timing=0.5))


def _pid(r) -> int:
    assert r.details.startswith("pid="), r.details
    return int(r.details[4:])


def test_a_sticky_error_replaces_the_worker_once_without_a_retry():
    with EvalPool(backend="cpu", config=SCRIPTED, evaluator=scripted_evaluator, cpu_workers=1, cache=False,
                  spare_worker=True) as pool:
        first = _pid(pool.submit(Job("t", "ok-1")).result(timeout=60))
        deadline = time.monotonic() + 60
        while not pool.spare_pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        spare = pool.spare_pids()[0]
        before = pool.stats()
        bad = pool.submit(Job("t", "sticky")).result(timeout=60)
        after = pool.stats()
        nxt = _pid(pool.submit(Job("t", "ok-2")).result(timeout=60))
    assert bad.status is Status.RUNTIME_ERROR and "scripted sticky error" in bad.message
    assert _pid(bad) == first  # it ran once, on the worker it then cost
    assert after["restarts"] - before["restarts"] == 1 and after["spare_swaps"] - before["spare_swaps"] == 1
    assert after["crashes"] == before["crashes"] and after["timeouts"] == before["timeouts"]  # no retry
    assert nxt == spare != first


def test_a_retired_worker_is_reaped_without_holding_up_its_lane():
    """A worker leaving a CUDA context may take seconds to exit: the lane goes on at once."""
    from kernels_env.schedule.process_pool import ProcessEvalPool
    exited = threading.Event()

    class SlowToExit:
        busy = False

        def kill(self) -> None:
            time.sleep(1.0)
            exited.set()

    with EvalPool(backend="cpu", config=SCRIPTED, evaluator=scripted_evaluator, cpu_workers=1, cache=False) as pool:
        assert isinstance(pool, ProcessEvalPool)
        holder: list = [SlowToExit()]
        t0 = time.monotonic()
        pool._retire(holder, "exec", {"CUDA_VISIBLE_DEVICES": ""})
        assert time.monotonic() - t0 < 0.5 and holder[0] is None and not exited.is_set()
        assert pool.submit(Job("t", "ok")).result(timeout=60).status is Status.CORRECT
    assert exited.is_set()  # close() waited for the reaper


# ---- what maps device memory holds the shared GPU lock: no timing runs next to it --------------------
class _LockWatchingDevice(FakeDevice):
    """A FakeDevice that records its GPU-lock slot's mode when a module is loaded and a job ends."""

    def load(self, compiled, config):
        self.seen = getattr(self, "seen", []) + [("load", self._lock.mode[0])]
        return super().load(compiled, config)

    def end_job(self) -> None:
        self.seen = getattr(self, "seen", []) + [("end_job", self._lock.mode[0])]
        super().end_job()


def test_module_load_and_end_of_job_hold_the_shared_gpu_lock():
    import multiprocessing as mp

    from kernels_env.execute.gpu_lock import FREE, SHARED, GpuLock, attach
    lock = GpuLock(mp.get_context("spawn"), 2)
    prep = prepare(TASK, ADD, FAKE_CFG)
    assert isinstance(prep, Prepared)
    dev = _LockWatchingDevice()
    dev.register("add", lambda grid, block, shared, a, b, c, n: c.__setitem__(slice(None), a + b), ms=0.5)
    dev._lock = lock
    attach(dev, lock.handle(0))
    r, fatal = execute(prep, dev, FAKE_CFG, task=TASK)
    assert r.status is Status.CORRECT and not fatal, r.message
    assert dev.seen == [("load", SHARED), ("end_job", SHARED)]
    assert lock.mode[0] == FREE
    dev.seen, dev.healthy = [], False  # an unusable device: nothing to free, and no wait for the lock
    from kernels_env.execute.harness import _end_job
    _end_job(dev)
    assert dev.seen == [] and lock.mode[0] == FREE
