"""Comparison of a run's outputs with the expected ones, and of its inputs with their copies.

`compare_output` is the one rule an output is judged by (allclose, NaN/Inf where the reference is
finite, a surviving poison read as "unwritten"); `mismatch_mask` is the same rule element-wise, which
the expected-output cache's NumPy check counts with. Pure array code on NumPy or CuPy: the stages in
execute/ call it, it never calls them.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from kernels_env.core.result import Mismatch
from kernels_env.judge.faults import EnvFault
from kernels_env.judge.feedback import mismatch_summary
from kernels_env.judge.poison import INT_SENTINEL, POISON_BITS, bits


def compare_output(xp: Any, name: str, got: Any, expected: Any, dtype: str, atol: Any, rtol: float,
                   trial: int, distribution: str) -> Mismatch | None:
    """Compare one candidate output with the reference; None when allclose and free of bad NaN/Inf.
    `atol` is a number or, for a task with an input-derived tolerance term (Task.atol_for), a float64
    array of the output's shape; the Mismatch reports its value at the first failing element."""
    with np.errstate(all="ignore"):
        return _compare(xp, name, got, expected, dtype, atol, rtol, trial, distribution)


def _compare(xp: Any, name: str, got: Any, expected: Any, dtype: str, atol: Any, rtol: float,
             trial: int, distribution: str) -> Mismatch | None:
    shape = tuple(got.shape)
    expected = xp.asarray(expected)
    if tuple(expected.shape) != shape:
        if expected.size != got.size:
            raise EnvFault(f"reference output {name!r} has shape {tuple(expected.shape)}; the task "
                            f"declares {shape}")
        expected = expected.reshape(shape)
    size = got.size
    if size == 0:
        return None
    if dtype in INT_SENTINEL:
        g, e, absd, bad = _int_bad(xp, got, expected, atol, rtol, INT_SENTINEL[dtype])
        if not bool(bad.any()):
            return None
        unwritten = (g == INT_SENTINEL[dtype]) & (e != INT_SENTINEL[dtype])
        nonfinite = None
        both = None
        e_abs = xp.abs(e).astype(xp.float64)
    else:
        g, e, bad = _float_bad(xp, got, expected, atol, rtol)
        if not bool(bad.any()):
            return None
        e_fin, g_fin = xp.isfinite(e), xp.isfinite(g)
        utype, value = POISON_BITS[dtype]
        unwritten = (bits(xp, got) == utype(value)) & e_fin
        nonfinite = ~g_fin & e_fin
        both = e_fin & g_fin
        absd = xp.where(both, xp.abs(g - e), 0.0)
        e_abs = xp.abs(e)
    if bool(unwritten.any()):
        reason, where_mask = "unwritten", unwritten
    elif nonfinite is not None and bool(nonfinite.any()):
        reason, where_mask = "nan_or_inf", nonfinite
    else:
        reason, where_mask = "mismatch", bad
    rel = absd / xp.maximum(e_abs, 1e-12)
    if both is not None:
        rel = xp.where(both, rel, 0.0)
    idx = _first_index(xp, where_mask, shape)
    flat = int(np.ravel_multi_index(idx, shape)) if shape else 0
    return Mismatch(
        reason=reason, buffer=name, trial=trial, distribution=distribution,
        max_abs_err=_scalar(absd.max()), max_rel_err=_scalar(rel.max()),
        frac_mismatched=_scalar(bad.sum()) / size, first_bad_index=idx,
        expected=_scalar(e.ravel()[flat]), got=_scalar(g.ravel()[flat]), atol=_atol_at(atol, flat), rtol=rtol)


def _atol_at(atol: Any, flat: int) -> float:
    """The absolute tolerance of flat element `flat` (a number, or an element of an atol array)."""
    return _scalar(atol.ravel()[flat]) if hasattr(atol, "ravel") else float(atol)


def _int_bad(xp: Any, got: Any, expected: Any, atol: Any, rtol: float,
             sentinel: int) -> tuple[Any, Any, Any, Any]:
    """(g, e as int64, |g - e| as float64, failing mask) of an int output: compare_output's rule.

    The difference is taken in float64: in int64 it wraps (|INT64_MIN - 0| is negative), which let
    an unwritten int64 output (still the sentinel) pass where the reference is 0. An element still
    holding the sentinel where the reference does not fails whatever the tolerance."""
    g = got.astype(xp.int64)
    e = xp.rint(expected).astype(xp.int64) if expected.dtype.kind == "f" else expected.astype(xp.int64)
    e64 = e.astype(xp.float64)
    absd = xp.abs(g.astype(xp.float64) - e64)
    unwritten = (g == sentinel) & (e != sentinel)
    return g, e, absd, (absd > (atol + rtol * xp.abs(e64))) | unwritten


def _float_bad(xp: Any, got: Any, expected: Any, atol: Any, rtol: float) -> tuple[Any, Any, Any]:
    """(g, e as float64, failing mask) of a float output: compare_output's rule (isclose, equal_nan)."""
    g = got.astype(xp.float64)
    e = expected.astype(xp.float64)
    return g, e, ~xp.isclose(g, e, rtol=rtol, atol=atol, equal_nan=True)


def mismatch_mask(xp: Any, got: Any, expected: Any, dtype: str, atol: Any, rtol: float) -> Any:
    """The elements of `got` that compare_output counts as failing (expected: got's element count)."""
    expected = expected.reshape(got.shape)
    if dtype in INT_SENTINEL:
        return _int_bad(xp, got, expected, atol, rtol, INT_SENTINEL[dtype])[3]
    return _float_bad(xp, got, expected, atol, rtol)[2]


def check_input_unchanged(xp: Any, name: str, original: Any, after: Any, trial: int,
                          distribution: str) -> Mismatch | None:
    """Bitwise comparison of an input buffer before and after the candidate ran."""
    diff = bits(xp, original) != bits(xp, after)
    if not bool(diff.any()):
        return None
    shape = tuple(original.shape)
    idx = _first_index(xp, diff, shape)
    flat = int(np.ravel_multi_index(idx, shape)) if shape else 0
    return Mismatch(reason="input_modified", buffer=name, trial=trial, distribution=distribution,
                    frac_mismatched=_scalar(diff.sum()) / original.size, first_bad_index=idx,
                    expected=_scalar(original.ravel()[flat]), got=_scalar(after.ravel()[flat]))


def mismatch_message(m: Mismatch, size: int | None = None) -> str:
    """One line for a human: `feedback.mismatch_summary`'s lines joined (one format for every failure)."""
    return " ".join(mismatch_summary(m))


def _first_index(xp: Any, mask: Any, shape: tuple[int, ...]) -> list[int]:
    flat = int(xp.argmax(mask.ravel().astype(xp.uint8)))
    return [int(i) for i in np.unravel_index(flat, shape)] if shape else []


def _scalar(x: Any) -> float:
    return float(x.item() if hasattr(x, "item") else x)
