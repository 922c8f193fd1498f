"""Cheats on the judge itself (judge_cheats.py, docs/THREAT_MODEL.md G): on the cpu backend here, on
the cupy backend at eval sizes under `-m gpu`.

    python -m pytest -q tests/kernels_env/test_judge_cheats.py            # cpu
    python -m pytest -q tests/kernels_env/test_judge_cheats.py -m gpu     # cupy
"""
from __future__ import annotations

import pytest

from kernels_env.core.status import Status
from kernels_env.schedule.pipeline import score
from tests.kernels_env.broken_corpus import TASKS, corpus_config
from tests.kernels_env.judge_cheats import answer_table

BACKENDS = [pytest.param("cpu", id="cpu"), pytest.param("cupy", id="cupy", marks=pytest.mark.gpu)]
SIZES = {"cpu": "small", "cupy": "eval"}


@pytest.fixture(params=BACKENDS)
def backend_device(request):
    return request.param, request.getfixturevalue(f"{request.param}_device".replace("cupy", "gpu"))


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
