"""The timing-cheat corpus (timing_cheats.py) scored with timing on: on the cpu backend here, on the
cupy backend at eval sizes on a GPU (marked `gpu`). Caught cheats end in wrong_output/runtime_error;
honest ones score correct, on the GPU at about the honest solution's time. Also: a slow but correct
kernel scores `correct`, and a few suite solutions still score `correct` with timing on."""
from __future__ import annotations

import pytest

import kernels_env.tasks as T
from kernels_env.core.config import EnvConfig, StageLimits
from kernels_env.execute.score import score
from kernels_env.core.status import Status
from tests.kernels_env.broken_corpus import TASKS
from tests.kernels_env.timing_cheats import CASES, HONEST, HONEST_SOLUTION, slow_affine

CPU = EnvConfig(backend="cpu", sizes="small", correctness_trials=5, timing=True, warmup_runs=1,
                min_timed_runs=5, timed_runs=20, timing_budget_s=0.5)
GPU = EnvConfig(backend="cupy", sizes="eval", correctness_trials=5, timing=True)
IDS = [c.id for c in CASES]


def _check(case, r) -> None:
    assert r.status.value in case.expect, f"{case.id}: {r.status.value}: {r.message}"
    if case.expect != HONEST:
        assert "timed runs disagreed with the verified runs" in r.message, r.message


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_timing_cheat_on_cpu(case, cpu_device):
    _check(case, score(TASKS[case.task], case.text, CPU, device=cpu_device))


def test_slow_but_correct_kernel_is_correct_on_cpu(cpu_device):
    """~0.2 s per launch (6e8 spin iterations; the cpu clock64 ticks 64 per call) against a 3 s
    timing stage: the minimum of 50 timed runs does not fit, the runs that do are reported."""
    cfg = CPU.replace(limits=StageLimits(timing=3.0), min_timed_runs=50, timed_runs=100)
    r = score(TASKS["corpus_affine"], slow_affine(64 * 600_000_000), cfg, device=cpu_device)
    assert r.status is Status.CORRECT, r.message
    assert 1 <= r.timing.runs < 50


@pytest.mark.parametrize("name", ["argmax_dim", "layer_norm", "cumsum"])
def test_suite_solutions_are_correct_with_timing_on_cpu(name, cpu_device):
    task = {t.name: t for t in T.list_tasks()}.get(name)
    if task is None:
        pytest.skip(f"no suite task {name!r}")
    r = score(task, task.solution, CPU, device=cpu_device)
    assert r.status is Status.CORRECT, f"{name}: {r.message}"
    assert r.timing is not None and r.timing.runs >= CPU.min_timed_runs and r.timing.verified_runs >= 2


# ---- GPU ------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_timing_cheat_on_gpu(case, gpu_device):
    task = TASKS[case.task]
    r = score(task, case.text, GPU, device=gpu_device)
    _check(case, r)
    if case.expect == HONEST:  # no speed from the cheat: about the honest solution's time
        honest = score(task, HONEST_SOLUTION, GPU, device=gpu_device)
        assert honest.status is Status.CORRECT, honest.message
        ratio = r.timing.kernel_median_ms / honest.timing.kernel_median_ms
        assert ratio > 0.7, f"{case.id}: {ratio:.2f}x the honest time: {r.message}"


@pytest.mark.gpu
def test_slow_but_correct_kernel_is_correct_on_gpu(gpu_device):
    """~0.2 s per launch (4e8 cycles at ~2 GHz) against a 2 s timing stage."""
    cfg = GPU.replace(limits=StageLimits(timing=2.0))
    r = score(TASKS["corpus_affine"], slow_affine(400_000_000), cfg, device=gpu_device)
    assert r.status is Status.CORRECT, r.message
    assert 1 <= r.timing.runs < GPU.min_timed_runs and r.timing.kernel_median_ms > 50


@pytest.mark.gpu
def test_honest_timing_is_adaptive_and_verified_on_gpu(gpu_device):
    r = score(TASKS["corpus_affine"], HONEST_SOLUTION, GPU, device=gpu_device)
    assert r.status is Status.CORRECT, r.message
    t = r.timing
    assert GPU.min_timed_runs <= t.runs <= GPU.timed_runs and t.verified_runs >= 2
    assert t.checked_runs == t.warmup_runs + t.runs and 0.2 < t.speedup < 5, r.message
    assert t.kernel_ci_ms[0] <= t.kernel_median_ms <= t.kernel_ci_ms[1]
