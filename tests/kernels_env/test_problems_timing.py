"""A problem task's reference is timed in torch (kernels_env/problems): the timing stage asks the
reference's `torch_times` for torch eager's and torch.compile's run times on the timing inputs, and
the speedups are against those (the reference itself is not timed). FakeDevice; no torch needed."""
from __future__ import annotations

import statistics

import numpy as np
import pytest

from kernels_env.core.config import TIMING_TRIAL_BASE
from kernels_env.core.status import Status
from kernels_env.execute.inputs import make_inputs
from tests.kernels_env.test_harness import ADD_SUB, add_kernel, add_task, device_with, run

EAGER = [4.0, 5.0, 6.0]
COMPILE = [2.0, 3.0, 2.5, 2.0]


class TorchTimedReference:
    """A reference with torch run times, recording what it was asked."""

    def __init__(self, compile_ms):
        self.calls: list[tuple[dict, float, int]] = []
        self.compile_ms = compile_ms

    def __call__(self, xp, a, b):
        return a + b

    def torch_times(self, inputs, budget_s, flush_bytes):
        self.calls.append((inputs, budget_s, flush_bytes))
        return {"eager_ms": EAGER, "compile_ms": self.compile_ms}


def test_speedups_are_against_torch_eager_and_compile():
    ref = TorchTimedReference(COMPILE)
    task = add_task(reference=ref)
    dev = device_with(add=(add_kernel, 0.5))
    r = run(dev, task, ADD_SUB)
    assert r.status is Status.CORRECT, r.message
    t = r.timing
    kernel = t.kernel_median_ms
    assert t.eager_median_ms == statistics.median(EAGER) and t.compile_median_ms == statistics.median(COMPILE)
    assert t.speedup == t.speedup_vs_eager == pytest.approx(statistics.median(EAGER) / kernel)
    assert t.speedup_vs_compile == pytest.approx(statistics.median(COMPILE) / kernel)
    assert t.ref_median_ms == t.eager_median_ms and t.ref_runs == len(EAGER)
    assert len(ref.calls) == 1
    inputs, _, _ = ref.calls[0]
    want = make_inputs(task, task.size_set("small"), TIMING_TRIAL_BASE, 0, np)  # the timing run's inputs
    for name in ("a", "b"):
        np.testing.assert_array_equal(inputs[name], want[name])
    assert "torch.compile median" in r.details


def test_a_failed_compile_leaves_only_its_speedup_empty():
    r = run(device_with(add=(add_kernel, 0.5)), add_task(reference=TorchTimedReference(None)), ADD_SUB)
    assert r.status is Status.CORRECT, r.message
    assert r.timing.speedup_vs_eager is not None and r.timing.speedup_vs_compile is None
    assert r.timing.compile_median_ms is None
