"""EvalPool: order, cache, timeouts and crash recovery with injected evaluators (no GPU needed)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from kernels_env.core.config import EnvConfig, StageLimits
from kernels_env.schedule.pool import EvalPool, Job
from kernels_env.core.status import Status
from kernels_env.testing.evaluators import scripted_evaluator

# The evaluator's limit is the sum of the stage limits: 2 s here.
CFG = EnvConfig(backend="cpu", limits=StageLimits(parse=0.5, compile=0.5, correctness=0.5, timing=0.5))


@pytest.fixture(scope="module")
def pool():
    with EvalPool(backend="cpu", config=CFG, evaluator=scripted_evaluator, cpu_workers=2) as p:
        yield p


def test_results_in_order_with_hangs_and_crashes(pool):
    before = pool.stats()
    jobs = [Job("t", "ok-1"), Job("t", "hang"), Job("t", "exit"), Job("t", "segv"), Job("t", "ok-2"),
            Job("t", "raise")]
    t0 = time.monotonic()
    rs = pool.map(jobs)
    assert time.monotonic() - t0 < 180  # ~20 s idle (hangs, crashes, worker restarts): 4x load fits
    assert [r.status for r in rs] == [Status.CORRECT, Status.TIMEOUT, Status.RUNTIME_ERROR,
                                      Status.RUNTIME_ERROR, Status.CORRECT, Status.ENV_ERROR]
    assert [r.message for r in (rs[0], rs[4])] == ["ok-1", "ok-2"]
    # a hang is not retried (it would cost its limit twice); a crash is, once
    assert "did not finish within 2 s" in rs[1].message and "retried" not in rs[1].message
    assert "crashed the evaluation worker" in rs[2].message and "exit code 3" in rs[2].message
    assert "SIGSEGV" in rs[3].message
    assert "scripted evaluator failure" in rs[5].details
    assert all(r.task == "t" for r in rs)
    after = pool.stats()
    assert after["restarts"] - before["restarts"] >= 5  # the hang once; each crash: first try + retry
    assert after["timeouts"] - before["timeouts"] == 1 and after["crashes"] - before["crashes"] == 4
    # the pool keeps serving
    again = pool.submit(Job("t", "ok-3")).result(timeout=60)
    assert again.status is Status.CORRECT and again.message == "ok-3"


def test_retry_once_recovers_a_flaky_worker(pool, tmp_path):
    marker = tmp_path / "died-once"
    r = pool.submit(Job("t", f"flaky:{marker}")).result(timeout=60)
    assert r.status is Status.CORRECT and marker.exists()


def test_cache_and_inflight_dedup(pool):
    ev0 = pool.stats()["evaluations"]
    a, b = pool.submit(Job("t", "sleep:0.3 same")), pool.submit(Job("t", "sleep:0.3 same"))
    ra, rb = a.result(timeout=60), b.result(timeout=60)
    assert ra.status is rb.status is Status.CORRECT and ra is not rb
    c = pool.submit(Job("t", "sleep:0.3 same")).result(timeout=60)
    assert c.cached and not ra.cached
    assert pool.stats()["evaluations"] - ev0 == 1


def test_env_error_is_not_cached(pool):
    r1 = pool.submit(Job("t", "raise again")).result(timeout=60)
    r2 = pool.submit(Job("t", "raise again")).result(timeout=60)
    assert r1.status is r2.status is Status.ENV_ERROR and not r2.cached


def test_close_resolves_pending_futures():
    p = EvalPool(backend="cpu", config=CFG, evaluator=scripted_evaluator, cpu_workers=1)
    futs = [p.submit(Job("t", "sleep:30")), p.submit(Job("t", "ok-queued"))]
    time.sleep(0.5)
    p.close()
    rs = [f.result(timeout=30) for f in futs]
    assert all(r.status is Status.ENV_ERROR and "closed" in r.message for r in rs)
    late = p.submit(Job("t", "ok")).result(timeout=5)
    assert late.status is Status.ENV_ERROR and "closed" in late.message


def test_inline_mode_runs_in_this_process():
    with EvalPool(mode="inline", backend="cpu", config=CFG, evaluator=scripted_evaluator) as p:
        r = p.map([Job("t", "hello")])[0]
    assert r.status is Status.CORRECT and r.details == f"pid={os.getpid()}"


def test_bad_arguments():
    with pytest.raises(ValueError, match="mode='threads'"):
        EvalPool(mode="threads")
    with pytest.raises(ValueError, match="backend='tpu'"):
        EvalPool(backend="tpu")
    with EvalPool(mode="inline", backend="cpu", evaluator=scripted_evaluator) as p:
        r = p.submit("not a job").result()  # type: ignore[arg-type]
    assert r.status is Status.ENV_ERROR and "expects a Job, got str" in r.message
    with pytest.raises(TypeError, match="EvalPool\\(mode='process'\\) got address, batch_jobs: only mode='ray'"):
        EvalPool(mode="process", backend="cpu", batch_jobs=4, address="head:6379")


def test_factory_builds_the_pool_of_each_local_mode():
    """EvalPool(mode=...) is the factory above both kinds of pool; the local modes are ProcessEvalPool."""
    from kernels_env.schedule.pool import PoolBase, ProcessEvalPool
    with EvalPool(mode="inline", backend="cpu", evaluator=scripted_evaluator) as p:
        assert isinstance(p, ProcessEvalPool) and isinstance(p, PoolBase) and p.mode == "inline"


def test_compile_stage_in_worker_processes():
    """Real parse + NVRTC in spawned compile workers: format and compile errors come back from them."""
    from kernels_env.tasks import list_tasks
    task = list_tasks(level=1)[0]
    out = task.outputs[0].name
    bad_launch = "```cuda\nextern \"C\" __global__ void k(float* y) {}\n```\n```launch\nk<<<1, 1>>>();\n```"
    bad_code = ("```cuda\nextern \"C\" __global__ void k(void* y) { nope = 1; }\n```\n"
                f"```launch\nk<<<1, 1>>>({out});\n```")
    cfg = EnvConfig(backend="cpu", sizes="small")
    with EvalPool(backend="cpu", config=cfg, compile_workers=1, cpu_workers=1) as p:
        r1, r2 = p.map([Job(task.name, bad_launch), Job(task.name, bad_code)])
    assert r1.status is Status.FORMAT_ERROR and "takes 1 argument" in r1.message
    assert r2.status is Status.COMPILE_ERROR and 'identifier "nope" is undefined' in r2.details


def test_parent_never_imports_cupy():
    code = ("import sys\n"
            "from kernels_env.schedule.pool import EvalPool, Job\n"
            "from kernels_env.testing.evaluators import scripted_evaluator\n"
            "if __name__ == '__main__':\n"
            "    with EvalPool(backend='cpu', evaluator=scripted_evaluator, cpu_workers=1) as p:\n"
            "        assert p.map([Job('t', 'ok')])[0].correct\n"
            "    assert 'cupy' not in sys.modules and 'cupy_backends' not in sys.modules, 'parent imported cupy'\n"
            "    print('OK')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "OK", out.stderr[-2000:]


def _bad_kernels(task):
    out = task.outputs[0].name
    crash = ('```cuda\nextern "C" __global__ void bad(char* y) { ((float*)y)[1ll << 36] = 1.f; }\n```\n'
             f"```launch\nbad<<<1, 1>>>({out});\n```")
    spin = ('```cuda\nextern "C" __global__ void spin(char* y) { volatile char* p = y; while (true) { p[0] = 1; } }\n'
            f"```\n```launch\nspin<<<1, 1>>>({out});\n```")
    return crash, spin


def _recovery_run(backend: str, cfg: EnvConfig):
    from kernels_env.tasks import list_tasks
    t, u = list_tasks(level=1)[:2]
    crash, spin = _bad_kernels(t)
    with EvalPool(backend=backend, config=cfg, compile_workers=1, cpu_workers=1) as p:
        rs = p.map([Job(t.name, t.solution), Job(t.name, crash), Job(u.name, u.solution), Job(t.name, spin),
                    Job(t.name, t.solution + "\n<!-- trailing prose -->")])
        return rs, p.stats()


def test_process_pool_real_kernels_on_cpu_backend():
    """Real compile + CPU execution in workers: an illegal address is a runtime_error, a spin times out.
    The worker survives both: the kernel ran in the cpu backend's runner process, which is replaced."""
    cfg = EnvConfig(backend="cpu", sizes="small", timing=False, correctness_trials=2,
                    limits=StageLimits(parse=2, compile=20, correctness=2, timing=2))
    rs, stats = _recovery_run("cpu", cfg)
    assert [r.status for r in rs] == [Status.CORRECT, Status.RUNTIME_ERROR, Status.CORRECT, Status.TIMEOUT,
                                      Status.CORRECT], [r.message for r in rs]
    assert "illegal memory access" in rs[1].message
    assert rs[4].cached or stats["evaluations"] == 4  # same normalised source: cache hit or in-flight share
    assert all(r.backend == "cpu" for r in rs[:4])


@pytest.mark.gpu
def test_process_pool_real_kernels_on_gpu():
    """On a GPU: solutions correct with a speedup; a sticky illegal address and a hang each cost one
    worker, and the pool keeps serving."""
    cfg = EnvConfig(backend="cupy", sizes="eval", correctness_trials=3, timed_runs=20, warmup_runs=3,
                    limits=StageLimits(parse=2, compile=20, correctness=5, timing=20))
    rs, stats = _recovery_run("cupy", cfg)
    assert [r.status for r in rs] == [Status.CORRECT, Status.RUNTIME_ERROR, Status.CORRECT, Status.TIMEOUT,
                                      Status.CORRECT], [r.message for r in rs]
    assert rs[0].speedup is not None and rs[0].speedup > 0 and rs[0].resources
    assert stats["restarts"] >= 2 and all(r.backend == "cupy" for r in rs[:4])


def test_worker_start_failure_is_env_error_not_a_hang():
    """An execution backend that cannot start (cupy without a GPU here, or a broken install) gives
    env_error results with the worker's reason, quickly."""
    from kernels_env.backends import gpu_count
    if gpu_count() > 0:
        pytest.skip("a GPU is visible: the cupy worker would start")
    with EvalPool(backend="cupy", gpu_workers=1, config=EnvConfig(backend="cupy"), evaluator=None,
                  compile_workers=1) as p:
        from kernels_env.tasks import list_tasks
        t = list_tasks(level=1)[0]
        r = p.submit(Job(t.name, t.solution)).result(timeout=120)
    assert r.status is Status.ENV_ERROR and r.message.startswith("exec worker unavailable: the exec worker failed to start")
    assert "Traceback" in r.details


def test_pool_takes_its_backend_from_the_config_and_refuses_two():
    """The backend is named once: a pool without `backend` uses config.backend; two that disagree are refused."""
    with pytest.raises(ValueError, match="disagrees with its config's backend='cupy'"):
        EvalPool(mode="inline", backend="cpu", config=EnvConfig(backend="cupy"))
    with EvalPool(mode="inline", config=EnvConfig(backend="cpu", sizes="small"), cache=False) as pool:
        assert pool.backend == "cpu"
