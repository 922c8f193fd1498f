"""The whole hostile corpus (hostile_corpus.py + isolation_corpus.py) through EvalPool on the cpu
backend, as the trainer's reward path scores it: no env_error, no false `correct`, no host content,
every future resolved within a bounded wall time, and the pool still serving afterwards.

    python -m pytest -q tests/kernels_env/test_hostile_pool.py
"""
from __future__ import annotations

import time

from kernels_env.pool import EvalPool, Job
from kernels_env.status import Status
from tests.kernels_env.broken_corpus import AFFINE_SOLUTION, corpus_config, corpus_evaluator
from tests.kernels_env.hostile_corpus import CASES, leaked
from tests.kernels_env.isolation_corpus import ISOLATION_CASES


def test_corpus_through_pool_has_no_env_error():
    cases = [c for c in (*CASES, *ISOLATION_CASES) if "cpu" in c.backends]
    jobs = [Job(c.task, c.text, c.config("cpu")) for c in cases]
    t0 = time.monotonic()
    with EvalPool(mode="process", backend="cpu", evaluator=corpus_evaluator, cache=False,
                  config=corpus_config("cpu"), cpu_workers=2) as pool:
        results = pool.map(jobs)
        after = pool.map([Job("corpus_affine", AFFINE_SOLUTION, corpus_config("cpu"))])[0]
        stats = pool.stats() if hasattr(pool, "stats") else {}
    seconds = time.monotonic() - t0
    bad = []
    for c, r in zip(cases, results):
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
