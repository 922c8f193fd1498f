"""Calibration of the judge's verdicts: correct float32 arithmetic passes, range and sample cheats fail.

NumPy stand-ins of what kernels compute (a sequential float32 running sum, a pairwise tree, Welford's
update, float64 accumulation) run on the inputs the environment draws (make_inputs, every draw
family: typical, edges and structured trials with their distributions) at eval reduction lengths,
with only the rows the draws' structure needs (the constant row 0, the shifted rows 4 and 5, the
sorted last row; the shifted sample x[0] and channel x[:, 0] of an NCHW buffer). Each must stay
within half the judge's tolerance (Task.atol_for with the task's rtol: the rule compare_output
applies) at every seed. The cheats (a one-pass variance, clamped inputs, a loss over every other
chunk) must exceed it.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kernels_env.execute.inputs import make_inputs
from kernels_env.tasks import get_task
from kernels_env.tasks.spec import Task

pytestmark = pytest.mark.slow  # about a minute of NumPy: 100 seeds per draw family

SEEDS = range(100)
FAMILIES = (0, 1, 2)  # trial t draws mode t % 3 with distribution t % 3: three families in all
F32 = np.float32


def _sequential(a: Any) -> Any:
    """Sum over the last axis as one float32 running sum."""
    return np.cumsum(a, axis=-1, dtype=F32)[..., -1]


def _tree(a: Any) -> Any:
    """Pairwise float32 sum over the last axis (halves added elementwise, zero-padded to even)."""
    a = a.astype(F32)
    while a.shape[-1] > 1:
        if a.shape[-1] % 2:
            a = np.concatenate([a, np.zeros(a.shape[:-1] + (1,), F32)], axis=-1)
        h = a.shape[-1] // 2
        a = a[..., :h] + a[..., h:]
    return a[..., 0]


def _float64(a: Any) -> Any:
    return a.astype(np.float64).sum(axis=-1).astype(F32)


def _welford(a: Any, threads: int = 256) -> tuple[Any, Any]:
    """(mean, biased variance) over the last axis as a block of `threads` computes them: each thread
    runs Welford's float32 update over its strided elements, then the partial (count, mean, M2) are
    merged pairwise (Chan et al.), vectorised over rows and threads."""
    a = a.astype(F32)
    n = a.shape[-1]
    lanes = a.reshape(a.shape[:-1] + (n // threads, threads))
    mean = np.zeros(a.shape[:-1] + (threads,), F32)
    m2 = np.zeros_like(mean)
    for k in range(lanes.shape[-2]):
        v = lanes[..., k, :]
        d = v - mean
        mean = mean + d / F32(k + 1)
        m2 = m2 + d * (v - mean)
    count = F32(n // threads)
    while mean.shape[-1] > 1:
        h = mean.shape[-1] // 2
        delta = mean[..., h:] - mean[..., :h]
        mean = mean[..., :h] + delta * F32(0.5)
        m2 = m2[..., :h] + m2[..., h:] + delta * delta * (count * F32(0.5))
        count = count * F32(2)
    return mean[..., 0], m2[..., 0] / F32(n)


SUMS: dict[str, Callable[[Any], Any]] = {"sequential": _sequential, "tree": _tree, "float64": _float64}


def _stats(h: Any, how: str) -> tuple[Any, Any]:
    """(mean, biased variance) of the rows of `h` (last axis) as a two-pass float32 kernel computes them."""
    if how == "welford":
        return _welford(h)
    total = SUMS[how]
    n = F32(h.shape[-1])
    mu = (total(h) / n).astype(F32)
    d = (h - mu[..., None]).astype(F32)
    return mu, (total(d * d) / n).astype(F32)


def _one_pass(h: Any) -> tuple[Any, Any]:
    """The cheat: var = E[x^2] - E[x]^2, float32 tree sums."""
    n = F32(h.shape[-1])
    mu = _tree(h) / n
    return mu, np.maximum(_tree(h * h) / n - mu * mu, F32(0))


def _normalise(h: Any, stats: Callable[[Any], tuple[Any, Any]], eps: float) -> Any:
    mu, var = stats(h)
    rstd = (F32(1) / np.sqrt(var + F32(eps))).astype(F32)
    return (h - mu[..., None]) * rstd[..., None]


def _judged(task: Task, inputs: dict[str, Any], sizes: dict[str, int]) -> tuple[list[Any], list[Any]]:
    """(expected outputs as float64, their atol) of a trial: the reference and Task.atol_for."""
    scalars = {s.name: s.value for s in task.scalars}
    expected = task.reference(np, **inputs, **scalars)
    expected = list(expected) if isinstance(expected, tuple) else [expected]
    return [np.asarray(e, np.float64) for e in expected], task.atol_for(np, inputs, sizes)


def _worst(task: Task, got: list[Any], judged: tuple[list[Any], list[Any]]) -> float:
    """The largest |got - expected| / tolerance over the outputs (compare_output's rule: <= 1 passes;
    NaN or Inf where the reference is finite counts as infinitely far)."""
    worst = 0.0
    for b, g, e, atol in zip(task.outputs, got, *judged, strict=True):
        g = np.asarray(g, np.float64)
        e = e.reshape(g.shape)
        tol = atol + task.tol(b.dtype)[1] * np.abs(e)
        err = np.where(np.isfinite(g), np.abs(g - e), np.inf)
        worst = max(worst, float(np.max(err / tol)))
    return worst


def _rows_ln(how: str, residual_in: bool) -> Callable[..., list[Any]]:
    """add_layer_norm (residual_in: h = x + residual) or layer_norm_residual (y += residual)."""
    def run(x, residual, weight, bias, eps):
        h = (x + residual).astype(F32) if residual_in else x
        y = _normalise(h, lambda v: _stats(v, how) if how != "one_pass" else _one_pass(v), eps) * weight + bias
        return [y + residual if not residual_in else y]
    return run


def _nchw_norm(how: str) -> Callable[..., list[Any]]:
    def run(x, eps):
        n, c, hh, ww = x.shape
        planes = x.reshape(n, c, hh * ww)
        stats = (lambda v: _stats(v, how)) if how != "one_pass" else _one_pass
        return [_normalise(planes, stats, eps).reshape(x.shape)]
    return run


def _layer_norm_nd(how: str) -> Callable[..., list[Any]]:
    def run(x, weight, bias, eps):
        b = x.shape[0]
        flat = x.reshape(b, -1)
        stats = (lambda v: _stats(v, how)) if how != "one_pass" else _one_pass
        return [_normalise(flat, stats, eps).reshape(x.shape) * weight + bias]
    return run


def _scan(how: str, reverse: bool) -> Callable[..., list[Any]]:
    def run(x):
        a = x[:, ::-1] if reverse else x
        if how == "sequential":
            y = np.cumsum(a, axis=1, dtype=F32)
        elif how == "float64":
            y = np.cumsum(a.astype(np.float64), axis=1).astype(F32)
        else:  # blocked: 256-element chunks scanned in float32, chunk totals carried (the suite's form)
            m, n = a.shape
            pad = (-n) % 256
            c = np.concatenate([a, np.zeros((m, pad), F32)], axis=1).reshape(m, -1, 256)
            inner = np.cumsum(c, axis=2, dtype=F32)
            carry = np.concatenate([np.zeros((m, 1), F32), np.cumsum(inner[:, :, -1], axis=1, dtype=F32)[:, :-1]],
                                   axis=1)
            y = (inner + carry[:, :, None]).reshape(m, -1)[:, :n]
        return [y[:, ::-1] if reverse else y]
    return run


def _masked_scan(how: str) -> Callable[..., list[Any]]:
    return lambda x, mask: _scan(how, False)((x * (mask != 0)).astype(F32))


def _exclusive_scan(how: str) -> Callable[..., list[Any]]:
    def run(x):
        y = _scan(how, False)(x[:, :-1])[0]
        return [np.concatenate([np.zeros((x.shape[0], 1), F32), y], axis=1)]
    return run


def _mid_reduce(how: str, mean: bool) -> Callable[..., list[Any]]:
    """sum_dim / mean_dim: x [B, D, I] reduced over D, each output's D terms summed as `how` does."""
    def run(x):
        total = SUMS[how](np.moveaxis(x, 1, -1))
        return [(total / F32(x.shape[1])).astype(F32) if mean else total]
    return run


ROW_SIZES = {"M": 8, "N": 4096}  # eval row length; rows 0 (constant), 4-5 (shifted), 7 (sorted)
SCAN_SIZES = {"M": 8, "N": 8192}
NCHW_SIZES = {"N": 2, "C": 2, "H": 128, "W": 128}
MID_SIZES = {"B": 2, "D": 256, "I": 64}  # the eval reduction length D  # eval plane; x[0] and x[:, 0] shifted
CORRECT = ("sequential", "tree", "welford", "float64")

CASES = [
    ("add_layer_norm", ROW_SIZES, lambda how: _rows_ln(how, True), CORRECT),
    ("layer_norm_residual", ROW_SIZES, lambda how: _rows_ln(how, False), CORRECT),
    ("instance_norm", NCHW_SIZES, _nchw_norm, CORRECT),
    ("cumsum", SCAN_SIZES, lambda how: _scan(how, False), ("sequential", "tree", "float64")),
    ("reverse_cumsum", SCAN_SIZES, lambda how: _scan(how, True), ("sequential", "tree", "float64")),
    ("cumsum_exclusive", SCAN_SIZES, _exclusive_scan, ("sequential", "tree", "float64")),
    ("masked_cumsum", SCAN_SIZES, _masked_scan, ("sequential", "tree", "float64")),
    ("sum_dim", MID_SIZES, lambda how: _mid_reduce(how, False), ("sequential", "tree", "float64")),
    ("mean_dim", MID_SIZES, lambda how: _mid_reduce(how, True), ("sequential", "tree", "float64")),
]


def _ratios(name: str, sizes: dict[str, int], make: Callable[[str], Callable[..., list[Any]]],
            hows: tuple[str, ...], trial: int, seeds: range) -> dict[str, list[float]]:
    """Per stand-in, its worst error over the tolerance at each seed (inputs drawn once per seed)."""
    task = get_task(name)
    scalars = {s.name: s.value for s in task.scalars}
    out: dict[str, list[float]] = {how: [] for how in hows}
    for seed in seeds:
        inputs = make_inputs(task, sizes, trial, seed, np)
        judged = _judged(task, inputs, sizes)
        for how in hows:
            with np.errstate(all="ignore"):
                got = make(how)(**inputs, **scalars)
            out[how].append(_worst(task, got, judged))
    return out


@pytest.mark.parametrize("trial", FAMILIES)
@pytest.mark.parametrize("name,sizes,make,hows", CASES, ids=[c[0] for c in CASES])
def test_correct_float32_arithmetic_stays_within_half_the_tolerance(name, sizes, make, hows, trial):
    for how, ratios in _ratios(name, sizes, make, hows, trial, SEEDS).items():
        worst = int(np.argmax(ratios))
        assert ratios[worst] <= 0.5, f"{name} {how} trial {trial}: seed {worst} at {ratios[worst]:.3g}x the tolerance"


def _batch_norm(how: str) -> Callable[..., list[Any]]:
    def run(x, weight, bias, eps):
        n, c, hh, ww = x.shape
        channels = x.transpose(1, 0, 2, 3).reshape(c, -1)
        stats = (lambda v: _stats(v, how)) if how != "one_pass" else _one_pass
        y = _normalise(channels, stats, eps).reshape(c, n, hh, ww).transpose(1, 0, 2, 3)
        return [y * weight.reshape(1, -1, 1, 1) + bias.reshape(1, -1, 1, 1)]
    return run


def _group_norm(how: str) -> Callable[..., list[Any]]:
    def run(x, weight, bias, eps, num_groups):
        groups = x.reshape(x.shape[0], num_groups, -1)
        stats = (lambda v: _stats(v, how)) if how != "one_pass" else _one_pass
        y = _normalise(groups, stats, eps).reshape(x.shape)
        return [y * weight.reshape(1, -1, 1, 1) + bias.reshape(1, -1, 1, 1)]
    return run


# Normalised groups of 131K to 1M terms at eval sizes, millions of elements a draw: a few seeds each.
# A sequential float32 running sum can stagnate over layer_norm's 1M terms (4.8x the tolerance),
# batch_norm's 262K and group_norm's 131K (the tasks' texts say to sum in a tree or blocks): there only
# the tree, blocked Welford and float64 forms must pass.
LONG = [("layer_norm", {"B": 2, "F": 64, "D1": 128, "D2": 128}, _layer_norm_nd, ("tree", "float64")),
        ("batch_norm", {"N": 16, "C": 2, "H": 128, "W": 128}, _batch_norm, ("tree", "welford", "float64")),
        ("group_norm", {"N": 2, "C": 64, "H": 128, "W": 128}, _group_norm, ("tree", "welford", "float64"))]


@pytest.mark.parametrize("name,sizes,make,hows", LONG, ids=[c[0] for c in LONG])
def test_long_normalisations_pass_in_a_tree_welford_or_float64(name, sizes, make, hows):
    for trial in FAMILIES:
        for how, ratios in _ratios(name, sizes, make, hows, trial, range(2)).items():
            assert max(ratios) <= 0.5, f"{name} {how} trial {trial}: {max(ratios):.3g}x the tolerance"


@pytest.mark.parametrize("name,sizes,make", [(c[0], c[1], c[2]) for c in CASES[:3]], ids=[c[0] for c in CASES[:3]])
def test_one_pass_variance_fails_the_structured_trial(name, sizes, make):
    """E[x^2] - E[x]^2 cancels to noise on the shifted blocks (large mean, small spread): wrong at
    every seed."""
    ratios = _ratios(name, sizes, make, ("one_pass",), 2, range(30))["one_pass"]
    assert min(ratios) > 1.0, f"{name}: one-pass variance within tolerance at seed {int(np.argmin(ratios))}"


@pytest.mark.parametrize("name,make", [("batch_norm", _batch_norm), ("group_norm", _group_norm)])
def test_one_pass_variance_fails_the_structured_trial_at_small_sizes(name, make):
    """The cpu backend's sizes: the shifted channel (batch_norm) and group (group_norm)."""
    task = get_task(name)
    ratios = _ratios(name, task.size_set("small"), make, ("one_pass",), 2, range(30))["one_pass"]
    assert min(ratios) > 1.0, f"{name}: one-pass variance within tolerance at seed {int(np.argmin(ratios))}"


def _loss(how: str, terms: Callable[[Any, Any], Any]) -> Callable[..., list[Any]]:
    """A whole-tensor mean loss: the per-element terms in float32, summed as `how` does."""
    return lambda pred, target, **scalars: [np.array([SUMS[how](terms(pred, target, **scalars)) / F32(pred.size)],
                                                     F32)]


def _mse_terms(pred: Any, target: Any) -> Any:
    d = (pred - target).astype(F32)
    return d * d


def _huber_terms(pred: Any, target: Any, beta: float) -> Any:
    d = np.abs(pred - target).astype(F32)
    return np.where(d < F32(beta), F32(0.5) * d * d / F32(beta), d - F32(0.5 * beta)).astype(F32)


LOSSES = [("mse_loss", _mse_terms), ("huber_loss", _huber_terms)]


@pytest.mark.parametrize("trial", FAMILIES)
@pytest.mark.parametrize("name,terms", LOSSES, ids=[c[0] for c in LOSSES])
def test_losses_summed_in_a_tree_or_float64_stay_within_half_the_tolerance(name, terms, trial):
    """A quarter of a million terms (a tree's rounding grows with log N: far inside at 64M too)."""
    ratios = _ratios(name, {"N": 1 << 18}, lambda how: _loss(how, terms), ("tree", "float64"), trial, range(30))
    for how, r in ratios.items():
        assert max(r) <= 0.5, f"{name} {how} trial {trial}: {max(r):.3g}x the tolerance"


def test_clamped_inputs_fail_the_edges_trial():
    """A layer norm that clamps its inputs to +-8 (a range-limited kernel) is wrong whenever the edges
    trial reaches the domain's bound."""
    task = get_task("add_layer_norm")
    eps = task.scalars[0].value
    for seed in range(30):
        inputs = make_inputs(task, ROW_SIZES, 1, seed, np)
        x = np.clip(inputs["x"], -8, 8)
        got = _rows_ln("float64", True)(x, inputs["residual"], inputs["weight"], inputs["bias"], eps)
        assert _worst(task, got, _judged(task, inputs, ROW_SIZES)) > 1.0, f"seed {seed}: a clamp passes"


def test_mse_over_every_other_chunk_fails_the_structured_trial():
    """A loss that sums every other 1024-element chunk and divides by N / 2 misses about half of the
    structured trial's spikes: wrong at every seed, where a tree and a float64 sum pass."""
    task = get_task("mse_loss")
    sizes = {"N": 1 << 18}  # the spikes are 16 whatever N: a quarter of a million elements suffice
    for seed in range(20):
        inputs = make_inputs(task, sizes, 2, seed, np)
        d = (inputs["pred"] - inputs["target"]).astype(F32)
        sq = (d * d).reshape(-1, 1024)
        half = np.float32(sq[::2].astype(np.float64).sum() / (sizes["N"] / 2))
        judged = _judged(task, inputs, sizes)
        assert _worst(task, [np.array([half])], judged) > 1.0, f"seed {seed}: half the chunks pass"
        for total in (_tree, _float64):
            full = np.float32(total(sq.ravel()) / F32(sizes["N"]))
            assert _worst(task, [np.array([full])], judged) <= 0.5, f"seed {seed}: {total.__name__} fails"
