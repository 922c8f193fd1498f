"""The whole hostile corpus (hostile_corpus.py + isolation_corpus.py) through EvalPool on the cpu
backend, as the trainer's reward path scores it: no env_error, no false `correct`, no host content,
every future resolved within a bounded wall time, and the pool still serving afterwards.

    python -m pytest -q tests/kernels_env/test_hostile_pool.py
"""
from __future__ import annotations

import time

import pytest

from kernels_env.schedule.pool import EvalPool, Job
from kernels_env.core.status import Status
from tests.kernels_env.broken_corpus import AFFINE_SOLUTION, corpus_config, corpus_evaluator
from tests.kernels_env.hostile_corpus import CASES, COMPILE_MEMORY_BYTES, TEMPLATE_BOMB, leaked
from tests.kernels_env.isolation_corpus import ISOLATION_CASES


def test_corpus_through_pool_has_no_env_error():
    cases = [c for c in (*CASES, *ISOLATION_CASES) if "cpu" in c.backends]
    jobs = [Job(c.task, c.text, c.config("cpu")) for c in cases]
    t0 = time.monotonic()
    with EvalPool(mode="process", backend="cpu", evaluator=corpus_evaluator, cache=False,
                  config=corpus_config("cpu"), cpu_workers=2,
                  worker_env={"LEAP_COMPILE_MEMORY_BYTES": str(COMPILE_MEMORY_BYTES)}) as pool:
        results = pool.map(jobs)
        after = pool.map([Job("corpus_affine", AFFINE_SOLUTION, corpus_config("cpu"))])[0]
        stats = pool.stats() if hasattr(pool, "stats") else {}
    seconds = time.monotonic() - t0
    bad = []
    for c, r in zip(cases, results, strict=True):
        if r.status is Status.ENV_ERROR:
            bad.append(f"{c.id}: env_error: {r.message}")
        elif r.status.value not in c.expected:
            bad.append(f"{c.id}: got {r.status.value} ({r.message[:200]}), expected {sorted(c.expected)}")
        shown = leaked(r.message + "\n" + r.details)
        if shown:
            bad.append(f"{c.id}: shows {shown}")
    assert not bad, "\n".join(bad)
    assert after.status is Status.CORRECT, after.message
    assert seconds < 240, f"the corpus took {seconds:.0f} s through the pool ({stats})"


def test_compile_workers_cannot_see_host_paths():
    """A confined compile worker (a fresh process, as the pool's) still compiles CUDA headers, cannot
    open a host file even with the include check bypassed, and answers __has_include of a host path
    as absent (no existence bit)."""
    import os
    import platform

    from kernels_env.compiler import landlock
    from kernels_env.schedule.workers import _confine_compile_worker, compile_worker_read_paths  # noqa: F401
    if landlock.abi_version() <= 0 or platform.system() != "Linux":
        pytest.skip("Landlock is not available on this kernel")
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as p:
        out = p.apply(_probe_in_confined_process)
    assert out["confined"], out
    assert out["fp16"] == "ok", out
    assert out["host_include"] != "ok" and "root:" not in out["host_include"], out
    assert "__has_include" in out["has_include_host"], out  # refused by check_has_include (a pattern)
    assert out["has_include_pasted"] == "absent", out  # the pattern is blind; the file system is not
    assert os.path.exists("/etc/passwd")


def _probe_in_confined_process() -> dict:
    from kernels_env.compiler.compile import CompileError, compile_cuda
    from kernels_env.schedule.workers import _confine_compile_worker
    out = {"confined": _confine_compile_worker()}
    k = 'extern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n'

    def run(src: str) -> str:
        try:
            compile_cuda(src)
            return "ok"
        except CompileError as e:
            return "compile_error: " + str(e)[:300]
        except Exception as e:  # noqa: BLE001
            return f"{type(e).__name__}: {e}"[:300]
    out["fp16"] = run("#include <cuda_fp16.h>\n#include <cooperative_groups.h>\n" + k)
    # the include check refuses the directive; with it bypassed NVRTC still cannot open the file
    from kernels_env.compiler import compile as comp
    saved = comp.check_includes
    comp.check_includes = lambda *a, **kw: None
    try:
        out["host_include"] = run('#include "/etc/passwd"\n' + k)
    finally:
        comp.check_includes = saved
    r = run('#if __has_include("/etc/passwd")\n#error PRESENT\n#endif\n' + k)
    out["has_include_host"] = "absent" if r == "ok" else r
    r = run("#define CAT(a, b) a##b\n#if CAT(__has_, include)(\"/etc/passwd\")\n#error PRESENT\n#endif\n" + k)
    out["has_include_pasted"] = "absent" if r == "ok" else r
    return out


PASTED_PROBE = ('#define CAT(a, b) a##b\n#if CAT(__has_, include)("/etc/passwd")\n'
                '#error the compiler sees the host file system\n#endif\n')


@pytest.mark.parametrize("backend", [pytest.param("cpu", id="cpu"),
                                     pytest.param("cupy", id="cupy", marks=pytest.mark.gpu)])
def test_trainer_path_compilers_do_not_see_host_files(backend):
    """The trainer's path (EvalPool, compile workers, no evaluator) on a suite task: its solution with a
    host-file probe the include checks cannot see stays correct (the probe is false on NVRTC in the
    confined compile worker and on the cpu backend's host compiler in its private root)."""
    from kernels_env.compiler import landlock
    from kernels_env.core.config import EnvConfig, StageLimits
    from kernels_env.tasks import list_tasks
    if landlock.abi_version() <= 0:
        pytest.skip("Landlock is not available on this kernel")
    t = list_tasks(level=1)[0]
    probed = t.solution.replace("```cuda\n", "```cuda\n" + PASTED_PROBE, 1)
    assert probed != t.solution
    cfg = EnvConfig(backend=backend, sizes="small", timing=False, correctness_trials=2,
                    limits=StageLimits(parse=2, compile=30, correctness=10, timing=10))
    with EvalPool(backend=backend, config=cfg, compile_workers=1, cpu_workers=1, cache=False) as pool:
        plain, r = pool.map([Job(t.name, t.solution), Job(t.name, probed)])
    assert plain.status is Status.CORRECT, plain.message
    assert r.status is Status.CORRECT, r.message


@pytest.mark.parametrize("backend", [pytest.param("cpu", id="cpu"),
                                     pytest.param("cupy", id="cupy", marks=pytest.mark.gpu)])
def test_trainer_path_caps_compile_memory(backend):
    """The trainer's path (compile workers, no evaluator): a template bomb NVRTC compiles runs out of
    the compile memory cap in a CUDA-free compile worker, a compile_error naming the limit, and the
    pool still scores the task's solution."""
    from kernels_env.core.config import EnvConfig, StageLimits
    from kernels_env.tasks import list_tasks
    t = list_tasks(level=1)[0]
    bomb = t.solution.replace("```cuda\n", "```cuda\n" + TEMPLATE_BOMB.replace("QUALIFIER", "__device__"), 1)
    cfg = EnvConfig(backend=backend, sizes="small", timing=False, correctness_trials=2,
                    limits=StageLimits(parse=2, compile=20, correctness=10, timing=10))  # the bomb: ~1 s
    with EvalPool(backend=backend, config=cfg, compile_workers=1, cpu_workers=1, cache=False,
                  worker_env={"LEAP_COMPILE_MEMORY_BYTES": str(256 << 20)}) as pool:
        r, plain = pool.map([Job(t.name, bomb), Job(t.name, t.solution)])
    assert r.status is Status.COMPILE_ERROR, r.message
    assert "NVRTC ran out of memory: a compile may use 256 MiB (LEAP_COMPILE_MEMORY_BYTES)" in r.message
    assert plain.status is Status.CORRECT, plain.message
