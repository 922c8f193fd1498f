"""Cheats on the judge itself (judge_cheats.py, docs/THREAT_MODEL.md G): on the cpu backend here, on
the cupy backend at eval sizes under `-m gpu`.

    python -m pytest -q tests/kernels_env/test_judge_cheats.py            # cpu
    python -m pytest -q tests/kernels_env/test_judge_cheats.py -m gpu     # cupy
"""
from __future__ import annotations

import time

import pytest

from kernels_env.core.config import HANG_GRACE_S, EnvConfig, StageLimits
from kernels_env.core.status import Status
from kernels_env.execute.inputs import evaluation_seed
from kernels_env.execute.score import score
from tests.kernels_env.broken_corpus import TASKS, corpus_config, corpus_evaluator
from tests.kernels_env.judge_cheats import HANG_AFTER_TRIALS, answer_table

BACKENDS = [pytest.param("cpu", id="cpu"), pytest.param("cupy", id="cupy", marks=pytest.mark.gpu)]
SIZES = {"cpu": "small", "cupy": "eval"}


@pytest.fixture(params=BACKENDS)
def backend_device(request):
    return request.param, request.getfixturevalue(f"{request.param}_device".replace("cupy", "gpu"))


def test_seed_is_fresh_unless_set():
    """EnvConfig.seed None (the default) draws 63 fresh bits per evaluation; an integer is used as is."""
    assert EnvConfig().seed is None and not EnvConfig().reuses_draws and EnvConfig(seed=3).reuses_draws
    drawn = {evaluation_seed(None) for _ in range(8)}
    assert len(drawn) == 8 and all(0 <= s < 1 << 63 for s in drawn)
    assert evaluation_seed(3) == 3
    for bad in (-1, True, 1.5, "0"):
        with pytest.raises(ValueError, match="EnvConfig.seed"):
            EnvConfig(seed=bad)  # type: ignore[arg-type]
    assert EnvConfig.from_dict(EnvConfig(seed=5).to_dict()).seed == 5


def test_answer_table_fails_on_fresh_inputs(backend_device):
    """The table of a fixed seed's answers passes only where that seed is set (the opt-in for tests
    and debugging); by default every evaluation draws fresh inputs and the table answers zero."""
    backend, device = backend_device
    cfg = corpus_config(backend).replace(sizes=SIZES[backend])
    text = answer_table(seed=7, trials=cfg.correctness_trials, sizes=SIZES[backend])
    fixed = score(TASKS["corpus_sum"], text, cfg.replace(seed=7), device=device)
    assert fixed.status is Status.CORRECT, fixed.message  # the cheat works on inputs that repeat
    for _ in range(2):  # and never on fresh ones: no two evaluations draw the same inputs
        r = score(TASKS["corpus_sum"], text, cfg, device=device)
        assert r.status is Status.WRONG_OUTPUT, r.message


# A hang's bound is its stage's limit + HANG_GRACE_S; the margins below hold at 4x load (a loaded
# machine builds the cpu backend's C++ slowly, but the stage deadlines are wall time).
HANG_LIMITS = StageLimits(parse=2.0, compile=30.0, correctness=4.0, timing=6.0)
MARGIN_S = 30.0


def _hang_config(backend: str):
    return corpus_config(backend).replace(timing=True, warmup_runs=1, timed_runs=3, limits=HANG_LIMITS)


def test_hang_after_the_trials_ends_within_the_stage_limit_on_cpu(cpu_device):
    cfg = _hang_config("cpu")
    t0 = time.monotonic()
    r = score(TASKS["corpus_affine"], HANG_AFTER_TRIALS, cfg, device=cpu_device)
    elapsed = time.monotonic() - t0
    assert r.status is Status.TIMEOUT and r.message.startswith("timing:"), r.message
    # the runner's wall deadline is the stage's time left + HANG_GRACE_S (it was twice the stage limit)
    assert r.stage_seconds["timing"] < HANG_LIMITS.timing + HANG_GRACE_S + 5.0, r.stage_seconds
    assert elapsed < HANG_LIMITS.job_s(parse=True) + MARGIN_S, f"{elapsed:.1f} s"


@pytest.mark.gpu
def test_hang_after_the_trials_ends_within_the_job_limit_on_gpu():
    """Through the process pool, as training scores: the hung worker is replaced, never retried."""
    from kernels_env.schedule.pool import EvalPool, Job
    cfg = _hang_config("cupy").replace(sizes="eval")
    with EvalPool(mode="process", backend="cupy", evaluator=corpus_evaluator, cache=False, config=cfg,
                  gpu_workers=1) as pool:
        warm = pool.map([Job("corpus_affine", TASKS["corpus_affine"].solution, cfg)])[0]
        assert warm.status is Status.CORRECT, warm.message
        t0 = time.monotonic()
        r = pool.map([Job("corpus_affine", HANG_AFTER_TRIALS, cfg)])[0]
        elapsed = time.monotonic() - t0
    assert r.status is Status.TIMEOUT, r.message
    assert elapsed < HANG_LIMITS.correctness + HANG_LIMITS.timing + HANG_GRACE_S + MARGIN_S, \
        f"{elapsed:.1f} s: {r.message}"
