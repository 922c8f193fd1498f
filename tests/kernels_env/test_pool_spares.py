"""EvalPool's warm spare exec worker and the reference timings kept across worker restarts
(injected evaluators on the cpu backend: no GPU needed), and several exec workers per GPU on cupy
(`gpu`-marked)."""
from __future__ import annotations

import time
from typing import Any

import pytest

from kernels_env.core.config import EnvConfig, StageLimits
from kernels_env.schedule.pool import EvalPool, Job, ProcessEvalPool
from kernels_env.core.status import Status
from kernels_env.testing.evaluators import scripted_evaluator

CFG = EnvConfig(backend="cpu", limits=StageLimits(parse=0.5, compile=0.5, correctness=0.5, timing=0.5))


def _pid(r) -> int:
    assert r.details.startswith("pid="), r.details
    return int(r.details[4:])


def _wait_for_spare(pool: ProcessEvalPool, not_pid: int | None = None, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = [p for p in pool.spare_pids() if p != not_pid]
        if pids:
            return pids[0]
        time.sleep(0.05)
    raise AssertionError(f"no warm spare within {timeout:g} s; stats {pool.stats()}")


def test_spare_is_swapped_in_when_a_worker_dies_and_a_new_one_is_started(tmp_path):
    with EvalPool(backend="cpu", config=CFG, evaluator=scripted_evaluator, cpu_workers=1, cache=False,
                  spare_worker=1) as pool:
        first = _pid(pool.submit(Job("t", "ok")).result(timeout=60))
        spare = _wait_for_spare(pool)
        assert spare != first
        r = pool.submit(Job("t", f"flaky:{tmp_path / 'died-once'}")).result(timeout=60)
        # the first try killed the worker; the retry ran on the spare, not on a freshly spawned one
        assert r.status is Status.CORRECT and _pid(r) == spare, (r.details, spare)
        stats = pool.stats()
        assert stats["spare_swaps"] == 1 and stats["crashes"] == 1
        assert _pid(pool.submit(Job("t", "ok again")).result(timeout=60)) == spare
        assert _wait_for_spare(pool, not_pid=spare) not in (first, spare)  # refilled in the background
        stats = pool.stats()  # what the restart cost in the background: two spare starts, one exit
        assert 0 < stats["spare_start_ms_mean"] <= stats["spare_start_ms_max"] < 60_000, stats
        assert 0 <= stats["reap_ms_mean"] <= stats["reap_ms_max"] < 60_000, stats
        assert stats["spare_start_count"] == 2 and stats["reap_count"] == 1, stats


def test_no_spare_by_default_on_the_cpu_backend():
    with EvalPool(backend="cpu", config=CFG, evaluator=scripted_evaluator, cpu_workers=1) as pool:
        assert pool.submit(Job("t", "ok")).result(timeout=60).correct
        assert pool.spare_pids() == [] and pool.stats()["spares_ready"] == 0
        assert pool.stats()["spare_start_ms_max"] == 0 and pool.stats()["reap_ms_max"] == 0


def test_reference_timings_survive_worker_kills():
    """A reference timed by one worker is known to its replacements: the spare (started before the
    timing existed) and a freshly spawned worker after the spare was used up."""
    with EvalPool(backend="cpu", config=CFG, evaluator=scripted_evaluator, cpu_workers=1, cache=False,
                  spare_worker=1) as pool:
        r = pool.submit(Job("t", "ref:a")).result(timeout=60)
        assert r.message == "ref a measured"
        w1 = _pid(r)
        _wait_for_spare(pool)
        assert pool.stats()["reference_timings"] == 1
        pool.submit(Job("t", "exit")).result(timeout=60)  # kills the worker and its retry's
        r = pool.submit(Job("t", "ref:a")).result(timeout=60)
        assert r.message == "ref a cached" and _pid(r) != w1
        r = pool.submit(Job("t", "ref:b")).result(timeout=60)
        assert r.message == "ref b measured"
        pool.submit(Job("t", "segv")).result(timeout=60)
        for name in ("a", "b"):
            r = pool.submit(Job("t", f"ref:{name}")).result(timeout=60)
            assert r.message == f"ref {name} cached", r.message
        assert pool.stats()["restarts"] >= 4


class _FakeWorker:
    def __init__(self, n: int) -> None:
        self.n, self.alive, self.killed, self.stopped = n, True, False, False

    def kill(self) -> None:
        self.killed, self.alive = True, False

    def stop(self) -> None:
        self.stopped, self.alive = True, False


def _wait(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_spare_workers_keep_depth_spares_started_in_parallel_and_hand_out_the_oldest():
    import threading

    from kernels_env.schedule.spares import SpareWorkers
    gate, made, running, peak = threading.Event(), [], [0], [0]
    lock = threading.Lock()

    def factory(env):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        gate.wait(10)
        with lock:
            running[0] -= 1
            w = _FakeWorker(len(made))
            made.append(w)
        return w

    spares = SpareWorkers(factory, depth=2)
    env = {"CUDA_VISIBLE_DEVICES": "0"}
    spares.ensure(env)
    spares.ensure(env)  # already two starting: no third
    _wait(lambda: running[0] == 2)
    gate.set()
    _wait(lambda: len(spares.ready()) == 2)
    assert peak[0] == 2 and len(made) == 2  # both started at once, never more than depth
    first = spares.take(env)
    assert first is made[0]  # the longest ready
    _wait(lambda: len(spares.ready()) == 2)  # refilled to depth in the background
    assert len(made) == 3
    made[1].alive = False  # a spare that died while waiting is skipped (and killed)
    assert spares.take(env) is made[2] and made[1].killed
    _wait(lambda: len(spares.ready()) == 2)
    spares.close()
    assert all(w.stopped for w in made[3:])
    assert spares.start_times() and len(spares.start_times()) == len(made)


@pytest.mark.parametrize("depth", [0, -1, True, 1.5])
def test_spare_workers_depth_is_checked(depth):
    from kernels_env.schedule.spares import SpareWorkers
    with pytest.raises(ValueError, match="depth="):
        SpareWorkers(lambda env: None, depth=depth)


def test_spare_worker_count_per_gpu():
    from kernels_env.schedule.process_pool import DEFAULT_SPARES_PER_GPU, spare_count
    assert DEFAULT_SPARES_PER_GPU == 2
    assert spare_count(None, "cupy") == spare_count(True, "cupy") == spare_count(True, "cpu") == 2
    assert spare_count(None, "cpu") == spare_count(False, "cupy") == spare_count(0, "cupy") == 0
    assert spare_count(3, "cupy") == 3
    for bad in (-1, 1.5, "2"):
        with pytest.raises(ValueError, match=f"spare_worker={bad!r}.*integer >= 0"):
            EvalPool(backend="cpu", spare_worker=bad, evaluator=scripted_evaluator)


def test_two_spares_swap_in_one_after_the_other():
    """Two deaths in a row find a warm spare each (one spare could serve only the first)."""
    with EvalPool(backend="cpu", config=CFG, evaluator=scripted_evaluator, cpu_workers=1, cache=False,
                  spare_worker=2) as pool:
        first = _pid(pool.submit(Job("t", "ok")).result(timeout=60))
        _wait(lambda: len(pool.spare_pids()) == 2, timeout=60)
        ready = pool.spare_pids()
        assert first not in ready
        dead = [_pid(pool.submit(Job("t", f"sticky {i}")).result(timeout=60)) for i in range(2)]
        assert dead == [first, ready[0]]  # the second sticky fault ran on the first spare
        stats = pool.stats()
        assert stats["restarts"] == 2 and stats["spare_swaps"] == 2, stats
        assert _pid(pool.submit(Job("t", "ok 2")).result(timeout=60)) == ready[1]
        _wait(lambda: len(pool.spare_pids()) == 2, timeout=60)  # refilled to two
        assert not set(pool.spare_pids()) & {first, *ready}


def test_exec_workers_per_gpu_is_checked():
    with pytest.raises(ValueError, match="exec_workers_per_gpu=0"):
        EvalPool(backend="cpu", exec_workers_per_gpu=0, evaluator=scripted_evaluator)


# ---- on a GPU: several exec workers per GPU, the spare, kept reference timings, kept memory pool ----
GPU_CFG = EnvConfig(backend="cupy", sizes="eval", correctness_trials=3, timed_runs=30, warmup_runs=3,
                    limits=StageLimits(parse=2, compile=20, correctness=10, timing=30))


def _unique(text: str, tag: str) -> str:
    """The same submission with a codegen-neutral `#define`, so neither the cache nor in-flight
    de-duplication merges it with another copy."""
    i = text.rfind("```cuda\n") + len("```cuda\n")
    return text[:i] + f"#define LEAP_TEST_VARIANT_{tag} 1\n" + text[i:]


def _crash(task) -> str:
    out = task.outputs[0].name
    return ('```cuda\nextern "C" __global__ void bad(char* y) { ((float*)y)[1ll << 36] = 1.f; }\n```\n'
            f"```launch\nbad<<<1, 1>>>({out});\n```")


@pytest.mark.gpu
def test_several_exec_workers_per_gpu_score_correctly_and_keep_reference_timings():
    from kernels_env.tasks import list_tasks
    tasks = list_tasks(level=1)[:8]
    t = tasks[0]
    with EvalPool(backend="cupy", gpu_workers=1, exec_workers_per_gpu=3, config=GPU_CFG, cache=False) as pool:
        assert pool.exec_workers == 3 and pool.gpu_workers == 1
        first = pool.submit(Job(t.name, _unique(t.solution, "first"))).result(timeout=300)
        assert first.status is Status.CORRECT and first.timing.ref_median_ms, first.message
        rs = pool.map([Job(x.name, _unique(x.solution, f"a{i}")) for i, x in enumerate(tasks * 2)])
        bad = [f"{r.task}: {r.status.value}: {r.message[:200]}" for r in rs if r.status is not Status.CORRECT]
        assert not bad, bad
        assert all(r.speedup and r.speedup > 0 for r in rs)
        deadline = time.monotonic() + 180
        while not pool.spare_pids() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert pool.spare_pids(), f"no warm spare: {pool.stats()}"
        # two different crashes (text after the last block is ignored, so a trailing comment would
        # leave the two jobs identical: de-duplicated in flight into one evaluation and one restart)
        crashes = pool.map([Job(t.name, _unique(_crash(t), f"crash{i}")) for i in range(2)])
        assert all(r.status is Status.RUNTIME_ERROR for r in crashes), [r.message for r in crashes]
        # every lane (the swapped-in spare and fresh workers included) reuses the first timing of
        # t's reference: the numbers are the same list, so the medians are equal
        again = pool.map([Job(t.name, _unique(t.solution, f"b{i}")) for i in range(9)])
        assert all(r.status is Status.CORRECT for r in again), [r.message for r in again]
        assert {r.timing.ref_median_ms for r in again} == {first.timing.ref_median_ms}
        stats = pool.stats()
    assert stats["spare_swaps"] >= 1 and stats["restarts"] >= 2, stats
    assert stats["reference_timings"] >= len(tasks), stats


@pytest.mark.gpu
def test_kept_memory_pool_still_catches_a_write_past_the_output():
    """end_job keeps CuPy's pool, so outputs border pooled (mapped) memory: a write a little past the
    end does not fault; the poisoned guard makes it runtime_error all the same."""
    import cupy

    from kernels_env.backends.cupy_backend import CupyDevice
    from kernels_env.execute.score import score
    from kernels_env.tasks import list_tasks
    t = next(x for x in list_tasks(level=1) if len(x.outputs) == 1 and x.outputs[0].dtype == "float32")
    dev = CupyDevice()
    try:
        cfg = GPU_CFG.replace(timing=False)
        assert score(t, t.solution, cfg, device=dev).status is Status.CORRECT
        kept = cupy.get_default_memory_pool().total_bytes()
        assert kept > 0  # blocks stay cached between jobs
        out = t.outputs[0].name
        past = ('```cuda\nextern "C" __global__ void past(float* y, long long n) { y[n + threadIdx.x] = 1.f; }\n'
                f"```\n```launch\npast<<<1, 32>>>({out}, {'*'.join(str(d) for d in t.outputs[0].shape)});\n```")
        for _ in range(3):
            r = score(t, past, cfg, device=dev)
            assert r.status is Status.RUNTIME_ERROR and "out-of-bounds write" in r.message, r.message
        dev.keep_pool_bytes = 0
        pool = cupy.get_default_memory_pool()
        for _ in range(2):  # nothing a job allocates stays in use after it (no leak), and every block went back
            assert score(t, past, cfg, device=dev).status is Status.RUNTIME_ERROR
            _drop_device_caches_and_end_job(dev)
            assert pool.total_bytes() == 0, (pool.used_bytes(), pool.free_bytes())
    finally:
        dev.close()


def _drop_device_caches_and_end_job(dev: Any) -> None:
    """Forget the arrays the device keeps across jobs on purpose (the expected-output cache), then
    end the job: with keep_pool_bytes 0 the pool must then hold nothing. The cache is dropped first
    because CuPy's free_all_blocks releases a chunk only when none of its blocks is in use: a cached
    expected output placed in a larger freed chunk keeps that chunk's free rest (134,201,344 bytes,
    256 MiB less the 128 MiB + 16 KiB output, on the H200), whichever allocation order a run had."""
    dev.__dict__.pop("_harness_expected", None)
    dev.end_job()



def test_ray_pool_combines_the_hosts_restart_costs():
    """RayEvalPool.stats over hosts' local stats: counts summed, means weighted by count, the largest max."""
    from kernels_env.schedule.ray_pool import combined_spans
    hosts = [{"spare_start_count": 1, "spare_start_ms_mean": 4000, "spare_start_ms_max": 4000,
              "reap_count": 0, "reap_ms_mean": 0, "reap_ms_max": 0},
             {"spare_start_count": 3, "spare_start_ms_mean": 2000, "spare_start_ms_max": 9000,
              "reap_count": 2, "reap_ms_mean": 150, "reap_ms_max": 400},
             {}]  # a host of an older version reports no spans
    assert combined_spans(hosts) == {"spare_start_count": 4, "spare_start_ms_mean": 2500, "spare_start_ms_max": 9000,
                                     "reap_count": 2, "reap_ms_mean": 150, "reap_ms_max": 400}
    assert combined_spans([]) == {"spare_start_count": 0, "spare_start_ms_mean": 0, "spare_start_ms_max": 0,
                                  "reap_count": 0, "reap_ms_mean": 0, "reap_ms_max": 0}
