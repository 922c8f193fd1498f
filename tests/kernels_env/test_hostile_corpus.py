"""The hostile corpus (hostile_corpus.py) on the cpu backend (CI) and the cupy backend (`gpu`).

Every case must end in one of its expected statuses, never env_error, never quote a host file or a
host directory, and finish in bounded time. Cases run in-process through `score` (the parse,
compile and evaluation paths the pool runs in its workers):

    python -m pytest -q tests/kernels_env/test_hostile_corpus.py            # cpu
    python -m pytest -q tests/kernels_env/test_hostile_corpus.py -m gpu     # cupy
"""
from __future__ import annotations

import os
import time

import pytest

from kernels_env.execute.score import prepare, score
from kernels_env.core.result import Result
from kernels_env.core.status import Status
from tests.kernels_env.broken_corpus import TASKS, corpus_config, corpus_evaluator
from tests.kernels_env.hostile_corpus import CASES, COMPILE_MEMORY_BYTES, PWNED, leaked

BACKENDS = [pytest.param("cpu", id="cpu"), pytest.param("cupy", id="cupy", marks=pytest.mark.gpu)]
CASE_SECONDS = {"cpu": 60.0, "cupy": 180.0}  # corpus limits (4 s stages) + compile at 4x load; cupy: restarts


@pytest.fixture(scope="module", params=BACKENDS)
def device(request):
    """cpu: one in-process device (its runtime ends hangs itself). cupy: a process pool, since a GPU
    kernel that never ends can only be stopped by killing its process (the pool replaces it)."""
    backend = request.param
    with pytest.MonkeyPatch.context() as mp:  # the corpus's compile memory cap (hostile_corpus.py)
        mp.setenv("LEAP_COMPILE_MEMORY_BYTES", str(COMPILE_MEMORY_BYTES))
        if backend == "cpu":
            from kernels_env.backends import get_device
            dev = get_device(backend, corpus_config(backend))
            yield backend, dev
            dev.close()
            return
        from kernels_env.schedule.pool import EvalPool
        with EvalPool(mode="process", backend=backend, evaluator=corpus_evaluator, cache=False,
                      config=corpus_config(backend), gpu_workers=1) as pool:
            yield backend, pool


def _score(backend, dev, case):
    cfg = case.config(backend)
    if backend == "cpu":
        return score(TASKS[case.task], case.text, cfg, device=dev)
    from kernels_env.schedule.pool import Job
    return dev.map([Job(case.task, case.text, cfg)])[0]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_case(device, case):
    backend, dev = device
    if backend not in case.backends:
        pytest.skip(f"{case.id} is not a {backend} case")
    if case.cuda_free_only:
        pytest.skip(f"{case.id} needs a CUDA-free process (test_hostile_pool.py runs it)")
    if os.path.exists(PWNED):
        os.unlink(PWNED)
    t0 = time.monotonic()
    r = _score(backend, dev, case)
    assert not os.path.exists(PWNED), f"{case.id}: host code of the submission ran"
    seconds = time.monotonic() - t0
    assert r.status is not Status.ENV_ERROR, f"{case.id}: env_error: {r.message}\n{r.details[-2000:]}"
    assert r.status.value in case.expected, (
        f"{case.id} on {backend}: got {r.status.value} ({r.message}), expected one of {sorted(case.expected)}")
    shown = leaked(r.message + "\n" + r.details)
    assert not shown, f"{case.id}: the result shows {shown}: {r.message}\n{r.details[:2000]}"
    assert seconds < CASE_SECONDS[backend], f"{case.id} took {seconds:.1f} s"


PARSE_CASES = [c for c in CASES if c.cls == "B" and not c.cuda_free_only]  # prepare compiles, uncapped here


@pytest.mark.parametrize("case", PARSE_CASES, ids=[c.id for c in PARSE_CASES])
def test_parse_stage_within_limit(case):
    """Parsing and the static checks of every crafted input stay inside the 2 s parse limit."""
    cfg = corpus_config("cpu")
    out = prepare(TASKS[case.task], case.text, cfg)
    parse_s = (out.stage_seconds if not isinstance(out, Result) else out.stage_seconds).get("parse", 0.0)
    assert parse_s < cfg.limits.parse, f"{case.id}: parse took {parse_s:.2f} s"
