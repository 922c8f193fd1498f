"""render_feedback: status first, the lines that matter, never over budget, deterministic."""
from __future__ import annotations

import pytest

from kernels_env.judge.feedback import TRUNCATION_MARKER, compiler_errors, render_feedback
from kernels_env.core.result import KernelResources, Mismatch, Result, Timing
from kernels_env.core.status import Status

LOG = "\n".join(
    [f'kernel.cu({i + 2}): error: identifier "u{i}" is undefined\n    y[0] = u{i};\n           ^\n'
     for i in range(6)] + ["6 errors detected in the compilation of \"kernel.cu\"."])

RESULTS = {
    Status.CORRECT: Result(Status.CORRECT, message="ok", trials=5,
                           timing=Timing("cuda", True, 100, 0.05, 0.051, 0.1, 0.11, 2.0),
                           resources={"k": KernelResources(64, 8, 8, 0, 16)}),
    Status.WRONG_OUTPUT: Result(Status.WRONG_OUTPUT, message="wrong", mismatch=Mismatch(
        "mismatch", "y", 2, "normal", 0.5, 0.25, 0.125, [3, 7], 1.0, 1.5, 1e-4, 1e-4)),
    Status.RUNTIME_ERROR: Result(Status.RUNTIME_ERROR, message="launch 1 (k, line 1): illegal memory access",
                                 details="cudaErrorIllegalAddress"),
    Status.TIMEOUT: Result(Status.TIMEOUT, message="evaluation did not finish within 30 s"),
    Status.COMPILE_ERROR: Result(Status.COMPILE_ERROR, message="compilation failed", details=LOG),
    Status.FORMAT_ERROR: Result(Status.FORMAT_ERROR, message="launch block line 2: expected ';'"),
    Status.ENV_ERROR: Result(Status.ENV_ERROR, message="worker failed", details="Traceback ..."),
}


@pytest.mark.parametrize("status", list(Status))
@pytest.mark.parametrize("budget", [1, 20, 60, 200, 800])
def test_every_status_within_budget_and_deterministic(status, budget):
    r = RESULTS[status]
    a = render_feedback(r, budget_chars=budget)
    assert len(a) <= budget and a == render_feedback(r, budget_chars=budget)
    full = render_feedback(r, budget_chars=100_000)
    assert full.startswith(status.value + ":")
    if len(full) > budget and budget > len(TRUNCATION_MARKER):
        assert a.endswith(TRUNCATION_MARKER)


def test_compile_error_shows_first_errors_with_lines():
    text = render_feedback(RESULTS[Status.COMPILE_ERROR], 2000)
    assert 'kernel.cu(2): error: identifier "u0" is undefined' in text and "    y[0] = u0;" in text
    assert 'kernel.cu(4): error: identifier "u2"' in text and "u3" not in text
    assert "(3 more errors not shown)" in text
    assert len(compiler_errors(LOG, limit=100)) == 6


def test_wrong_output_summary():
    text = render_feedback(RESULTS[Status.WRONG_OUTPUT], 2000)
    assert "output 'y' is wrong: 12.5% of elements mismatched (trial 2, normal inputs)." in text
    assert "first bad index [3, 7]: expected 1, got 1.5 (differs from the reference)." in text
    assert "max abs err 0.5, max rel err 0.25 over elements finite in both (atol 0.0001, rtol 0.0001)." in text


@pytest.mark.parametrize("reason,why", [("unwritten", "never written"), ("nan_or_inf", "NaN or Inf"),
                                        ("mismatch", "differs from the reference")])
def test_one_wrong_output_format_for_every_failure(reason, why):
    """Unwritten, NaN and wrong values give the same fields in the same order, in the feedback and
    in the harness's one-line message alike."""
    from kernels_env.judge.compare import mismatch_message
    from kernels_env.core.result import Mismatch
    m = Mismatch(reason, "y", 1, "uniform", 0.5, 0.25, 0.5, [2, 0, 1], 3.0, float("nan"), 1e-4, 1e-3)
    lines = [ln for ln in render_feedback(Result(Status.WRONG_OUTPUT, mismatch=m), 2000).splitlines()[1:]]
    assert lines == [
        "output 'y' is wrong: 50% of elements mismatched (trial 1, uniform inputs).",
        f"first bad index [2, 0, 1]: expected 3, got nan ({lines[1].split('(', 1)[1]}",
        "max abs err 0.5, max rel err 0.25 over elements finite in both (atol 0.0001, rtol 0.001)."]
    assert why in lines[1]
    assert mismatch_message(m) == " ".join(lines)


def test_correct_timing_and_spills():
    text = render_feedback(RESULTS[Status.CORRECT], 2000)
    assert "speedup 2x over the reference: kernel 0.05 ms vs reference 0.1 ms (median of 100 runs)." in text
    assert "note: kernel k spills registers (8 B stores, 8 B loads; 64 registers)." in text
    cpu = Result(Status.CORRECT, timing=Timing("cpu", False, 10, 3.0, 3.1))
    assert "on CPU, not comparable" in render_feedback(cpu)


def test_runtime_format_and_env_error_lines():
    rt = render_feedback(RESULTS[Status.RUNTIME_ERROR])
    assert "illegal memory access" in rt and "cudaErrorIllegalAddress" in rt
    assert render_feedback(RESULTS[Status.FORMAT_ERROR]).splitlines()[1] == "launch block line 2: expected ';'"
    assert "says nothing about your code" in render_feedback(RESULTS[Status.ENV_ERROR])


def test_bad_budget():
    with pytest.raises(ValueError, match="budget_chars=0"):
        render_feedback(RESULTS[Status.TIMEOUT], 0)
