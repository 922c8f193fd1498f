"""Input-derived tolerance terms (Task.slack, Task.atol_for) and the comparison rule that uses them."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from kernels_env.core.config import EnvConfig
from kernels_env.core.status import Status
from kernels_env.judge import expected_cache as ec
from kernels_env.judge.compare import compare_output, mismatch_mask
from kernels_env.tasks import common, get_task
from kernels_env.tasks.spec import Buffer, Task

OFFSET = 1e-3  # the toy kernel adds this to x, where y = x; the task's slack allows 2 * OFFSET
_COPY = common.solution(r"""
extern "C" __global__ void copy(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + SHIFT;
}""", "copy<<<cdiv(N, 128), 128>>>(x, y, N);")


def _toy(slack: bool = True) -> Task:
    return Task(name="toy_slack", level=1, description="y = x, within an input-derived slack.",
                sizes={"eval": {"N": 256}, "small": {"N": 256}},
                inputs=(Buffer("x", "float32", ("N",)),), outputs=(Buffer("y", "float32", ("N",)),),
                reference=lambda xp, x: x.astype(xp.float32), solution="",
                tolerance={"float32": (1e-6, 0.0)},
                slack=(lambda xp, x: (xp.full(x.shape, 2 * OFFSET),)) if slack else None)


def test_atol_array_is_the_rule_per_element_and_reported_where_it_fails():
    expected = np.zeros(4, np.float32)
    got = np.array([0.0, 0.5, 0.5, 2.0], np.float32)
    atol = np.array([0.1, 1.0, 0.1, 1.0])
    assert mismatch_mask(np, got, expected, "float32", atol, 0.0).tolist() == [False, False, True, True]
    m = compare_output(np, "y", got, expected, "float32", atol, 0.0, 0, "normal")
    assert m is not None and m.first_bad_index == [2] and m.atol == pytest.approx(0.1)
    assert compare_output(np, "y", got, expected, "float32", np.full(4, 2.5), 0.0, 0, "normal") is None


def test_atol_for_adds_the_slack_to_the_dtype_atol():
    x = np.ones(256, np.float32)
    (atol,) = _toy().atol_for(np, {"x": x}, {"N": 256})
    assert atol.shape == (256,) and np.allclose(atol, 1e-6 + 2 * OFFSET)
    assert _toy(slack=False).atol_for(np, {"x": x}, {"N": 256}) == [1e-6]
    bad = dataclasses.replace(_toy(), slack=lambda xp, x: ())
    with pytest.raises(ValueError, match="slack returned 0 terms; expected one per output"):
        bad.atol_for(np, {"x": x}, {"N": 256})


def test_norm_and_scan_slack_match_their_closed_forms():
    """A constant row c: var 0, rstd 1 / sqrt(eps); a row of ones: prefix sums j."""
    n, c, eps = 1024, 48.0, 1e-5
    term = common.norm_slack(np, np.full((2, n), c, np.float32), (1,), eps)
    assert np.allclose(term, common.NORM_SLACK * np.sqrt(n) * common.UNIT * c / np.sqrt(eps))
    j = np.arange(1, 9, dtype=np.float64)
    assert np.allclose(common.scan_slack(np, np.ones((1, 8), np.float32)),
                       common.SCAN_SLACK * common.UNIT * np.sqrt(j) * j)
    assert np.allclose(common.scan_slack(np, np.ones((1, 8), np.float32), reverse=True),
                       (common.SCAN_SLACK * common.UNIT * np.sqrt(j) * j)[::-1])


@pytest.mark.parametrize("cached", [False, True], ids=["uncached", "cached"])
def test_the_harness_judges_with_the_slack_cached_or_not(cached, cpu_device, monkeypatch):
    """Off by OFFSET: correct within the slack, wrong without it, and wrong when off by 10x the slack;
    cached, the fused check's dtype atol flags every element and the slack re-judges them."""
    from kernels_env.execute.score import score

    monkeypatch.setattr(ec, "USE_ON_NUMPY", cached)
    cfg = EnvConfig(backend="cpu", sizes="small", timing=False, correctness_trials=3)
    near, far = _COPY.replace("SHIFT", "1e-3f"), _COPY.replace("SHIFT", "2e-2f")
    for _ in range(2 if cached else 1):  # the second pass hits the cache
        r = score(_toy(), near, cfg, device=cpu_device)
        assert r.status == Status.CORRECT, r.message
    assert score(_toy(slack=False), near, cfg, device=cpu_device).status == Status.WRONG_OUTPUT
    r = score(_toy(), far, cfg, device=cpu_device)
    assert r.status == Status.WRONG_OUTPUT and r.mismatch is not None
    assert r.mismatch.atol == pytest.approx(1e-6 + 2 * OFFSET)


def test_suite_tasks_with_slack_are_the_amplifying_ones():
    """Scans and mean-subtracting normalisations carry a term; a plain reduction does not."""
    for name in ("cumsum", "reverse_cumsum", "cumsum_exclusive", "masked_cumsum", "add_layer_norm",
                 "layer_norm_residual", "layer_norm", "instance_norm", "batch_norm", "group_norm"):
        assert get_task(name).slack is not None, name
    for name in ("sum_dim", "mse_loss", "softmax", "rms_norm"):
        assert get_task(name).slack is None, name
