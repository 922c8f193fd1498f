"""fast_p over a folder of scored problems (kernels_env/problems/bench.py), checked against a count
by hand; no torch needed."""
from __future__ import annotations

import pytest

from kernels_env.core.result import Result, Timing
from kernels_env.core.status import Status
from kernels_env.problems.bench import Row, fast_p, summary, table


def scored(status: Status, eager: float | None = None, compile_: float | None = None) -> Row:
    timing = Timing(device="cuda", comparable=True, runs=10, kernel_median_ms=1.0, kernel_mean_ms=1.0,
                    speedup_vs_eager=eager, speedup_vs_compile=compile_)
    return Row("p.py", Result(status, timing=timing if status is Status.CORRECT else None))


ROWS = [scored(Status.CORRECT, 2.0, 0.9), scored(Status.CORRECT, 1.1, 1.3), scored(Status.CORRECT, 0.5, None),
        scored(Status.WRONG_OUTPUT), Row("q.py", None, "no submission q.md")]


@pytest.mark.parametrize("baseline, p, hits", [
    ("eager", 0.0, 3), ("eager", 1.0, 2), ("eager", 1.2, 1),
    ("compile", 0.0, 3), ("compile", 1.0, 1), ("compile", 1.2, 1),
])
def test_fast_p_counts_correct_rows_above_the_threshold(baseline, p, hits):
    assert fast_p(ROWS, baseline, p) == pytest.approx(hits / len(ROWS))


def test_summary_and_table_say_when_timing_is_off():
    assert summary(ROWS, timed=False)["fast_p"] == {"eager": None, "compile": None}
    text = table(ROWS, timed=False)
    assert "3/5 correct" in text and "timing is off" in text and "fast_1" not in text
    timed = table(ROWS, timed=True)
    assert "vs eager    fast_0=0.600  fast_1=0.400  fast_1.2=0.200" in timed
    assert "no submission q.md" in timed


def test_fast_p_rejects_an_unknown_baseline():
    with pytest.raises(ValueError, match="baseline='cudnn'"):
        fast_p(ROWS, "cudnn", 1.0)
