"""The broken-kernel corpus gets the same status on the cpu and the cupy backend.

Run through `EvalPool(mode="process")` so hangs and crashes stay inside workers; after every case
the pool must still serve a good submission. The cpu half runs in CI; the cupy half is `gpu`-marked:
    python -m pytest -q tests/kernels_env/test_broken_corpus.py -m gpu
Cases that cannot agree say so in broken_corpus.py (`expected_by_backend` and `note`).
"""
from __future__ import annotations

import pytest

from kernels_env.schedule.pool import EvalPool, Job
from kernels_env.core.status import Status
from tests.kernels_env.broken_corpus import CASES, CASES_BY_ID, corpus_config, corpus_evaluator

BACKENDS = [pytest.param("cpu", id="cpu"), pytest.param("cupy", id="cupy", marks=pytest.mark.gpu)]


@pytest.fixture(scope="module", params=BACKENDS)
def pool(request):
    backend = request.param
    kw = {"cpu_workers": 1} if backend == "cpu" else {"gpu_workers": 1}
    with EvalPool(mode="process", backend=backend, evaluator=corpus_evaluator, cache=False,
                  config=corpus_config(backend), **kw) as p:
        yield backend, p


def test_corpus_has_the_required_cases():
    required = {"syntax_error", "undefined_symbol", "wrong_launch_arity", "oob_write_no_bounds_check",
                "off_by_one_last_unwritten", "wrong_formula", "writes_input", "reads_unwritten_scratch",
                "infinite_loop", "missing_syncthreads_race"}
    assert required <= set(CASES_BY_ID)
    for case in CASES:
        Status.parse(case.expected)
        for st in case.expected_by_backend.values():
            Status.parse(st)
        if case.expected_by_backend:
            assert case.note, f"{case.id}: a case that cannot agree must say why"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_corpus_case(pool, case):
    backend, p = pool
    cfg = corpus_config(backend)
    result = p.map([Job(case.task, case.text, cfg)])[0]
    want = case.expected_for(backend)
    assert result.status.value == want, (  # the stage times tell e.g. a fault after a long spin from an early one
        f"{case.id} on {backend}: got {result.status.value} ({result.message}), expected {want}; "
        f"stage seconds {result.stage_seconds}")
    if case.id == "inline_ptx_asm" and backend == "cpu":
        assert "inline PTX" in result.message and "cupy" in (result.message + result.details)
    # the pool keeps serving after every case (crashed / hung workers are replaced)
    good = p.map([Job(CASES_BY_ID["good_affine"].task, CASES_BY_ID["good_affine"].text, cfg)])[0]
    assert good.status is Status.CORRECT, good.message
