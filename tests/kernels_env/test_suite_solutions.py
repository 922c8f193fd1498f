"""Every known-good solution scores `correct` (DESIGN 3.1): on the `cpu` backend at small sizes here,
and on `cupy` at eval sizes on a GPU, where the reference must also take >= 0.1 ms (so speedups are
measured on work large enough to time)."""
from __future__ import annotations

import pytest

import kernels_env.tasks as T
from kernels_env.core.config import EnvConfig
from kernels_env.core.status import Status

TASKS = T.list_tasks()
NAMES = [t.name for t in TASKS]


@pytest.mark.slow
@pytest.mark.parametrize("task", TASKS, ids=NAMES)
def test_solution_correct_on_cpu_backend(task, cpu_device):
    from kernels_env.execute.score import score

    cfg = EnvConfig(backend="cpu", sizes="small", timing=False, correctness_trials=3)
    r = score(task, task.solution, cfg, device=cpu_device)
    assert r.status == Status.CORRECT, f"{task.name}: {r.status.value}: {r.message}\n{r.details[:1500]}"
    assert r.trials == 3


@pytest.mark.gpu
@pytest.mark.parametrize("task", TASKS, ids=NAMES)
def test_solution_correct_on_gpu_eval_sizes_and_reference_timeable(task, gpu_device):
    from kernels_env.execute.score import score

    cfg = EnvConfig(backend="cupy", sizes="eval", timing=True, correctness_trials=5, warmup_runs=3,
                    timed_runs=20)
    r = score(task, task.solution, cfg, device=gpu_device)
    assert r.status == Status.CORRECT, f"{task.name}: {r.status.value}: {r.message}\n{r.details[:1500]}"
    assert r.timing is not None and r.timing.ref_median_ms is not None
    print(f"{task.name}: ref {r.timing.ref_median_ms:.3f} ms, kernel {r.timing.kernel_median_ms:.3f} ms, "
          f"speedup {r.timing.speedup}")
    assert r.timing.ref_median_ms >= 0.1, f"{task.name}: reference takes {r.timing.ref_median_ms:.4f} ms < 0.1 ms"
