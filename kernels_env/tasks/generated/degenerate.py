"""Compositions whose output hardly depends on their inputs: the grammar leaves them out.

A generated task is only worth a reward if a kernel must read its inputs to pass. Some chains of the
grammar fail that: their output is a constant (relu(-|x|) = 0, relu(log_softmax(x)) = 0, min(softplus(
relu(x)), 0.5) = 0.5), or sits at one value for every draw (tanh of a row's sum of squares is 1, the
row maximum of clamp(x) is 1 once a row holds one value above 1), or does not depend on one input
(softmax(x + v[m]) = softmax(x): a shift of the whole row cancels). A kernel writing the constant, or
never reading `v`, would score `correct`. `degenerate_reason(spec)` names the first rule a chain
breaks, or None; `grammar.valid` rejects such chains, so they never become tasks.

The rules, in the order they are checked:
1. constant by ranges: the value range of the chain, carried op by op over an unbounded real input
   (`output_range`), shrinks to one point, at the output or anywhere in the element-wise prefix, or
   the output's range is narrower than NARROW;
2. a per-row shift before a shift-invariant row op: x + v[m] or x - v[m], followed only by ops that
   keep a row shift a row shift (neg, scale), then softmax, log-softmax or layer norm;
3. a row maximum of values bounded above: every trial's edge draws put a value at the bound in every
   row, so the maximum is the bound; or of max(t, v) with v a row operand v[n] (its maximum, the
   same in every row) or a full one beside a bounded t (v's row maximum);
4. a saturating op (tanh, sigmoid, clamp, exp(-|.|)) on a row sum, sum of squares or L2 norm, or
   clamp on a row maximum: sums and maxima over hundreds of columns are outside the op's responsive
   range;
5. an op after softmax that maps its outputs (probabilities of about 1/N) to nearly one value:
   sigmoid (~1/2), softplus (~log 2), exp(-|.|) (~1), square (~0);
6. an op after log-softmax other than neg, abs, scale, square or log(1 + |.|): log-probabilities of
   about -log N put the others at their floor or saturation (clamp -1, tanh -1, gelu/silu/sigmoid 0);
7. relu, gelu, silu or softplus on a row sum or mean of min(x, v) (v a row or full operand) or of
   x - c: that sum or mean is negative in every row, where these ops are about 0.

`python -m kernels_env.execute.audit_generated` plays validate_task's cheats against every task of the
grammar and lists what passes; with these rules it lists nothing (tests run it over a sample).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from kernels_env.tasks.generated.ops import GELU_C, SCALAR_C

if TYPE_CHECKING:
    from kernels_env.tasks.generated.grammar import Spec

INF = math.inf
Range = tuple[float, float]  # closed [lo, hi]; +-inf for unbounded


def _sigmoid(t: float) -> float:
    if t == -INF:
        return 0.0
    return 1.0 / (1.0 + math.exp(-t)) if t >= -700 else 0.0


def _softplus(t: float) -> float:
    if t == INF:
        return INF
    return max(t, 0.0) + math.log1p(math.exp(-abs(t)))


def _monotone(f: Callable[[float], float]) -> Callable[[Range], Range]:
    return lambda r: (f(r[0]), f(r[1]))


def _with_minimum(f: Callable[[float], float], at: float) -> Callable[[Range], Range]:
    """The range of f over [lo, hi] for f decreasing below `at` and increasing above it."""
    def rng(r: Range) -> Range:
        lo, hi = r
        ends = (f(lo), f(hi))
        return (f(at) if lo <= at <= hi else min(ends), max(ends))
    return rng


def _abs(r: Range) -> Range:
    lo, hi = r
    if lo >= 0:
        return r
    if hi <= 0:
        return (-hi, -lo)
    return (0.0, max(-lo, hi))


def _sq(r: Range) -> Range:
    a = _abs(r)
    return (a[0] * a[0], a[1] * a[1])


def _clip(r: Range, lo: float, hi: float) -> Range:
    return (min(max(r[0], lo), hi), min(max(r[1], lo), hi))


def _silu(t: float) -> float:
    return -0.0 if t == -INF else (INF if t == INF else t * _sigmoid(t))


def _gelu(t: float) -> float:
    if abs(t) == INF:
        return 0.0 if t < 0 else INF
    return 0.5 * t * (1.0 + math.tanh(GELU_C * (t + 0.044715 * t * t * t)))


SILU_ARGMIN = -1.2784645
GELU_ARGMIN = -0.7517916

UNARY_RANGE: dict[str, Callable[[Range], Range]] = {
    "relu": _monotone(lambda t: max(t, 0.0)),
    "sigmoid": _monotone(_sigmoid),
    "tanh": _monotone(lambda t: math.tanh(t)),
    "abs": _abs,
    "sq": _sq,
    "neg": lambda r: (-r[1], -r[0]),
    "softplus": _monotone(_softplus),
    "silu": _with_minimum(_silu, SILU_ARGMIN),
    "gelu": _with_minimum(_gelu, GELU_ARGMIN),
    "expn": lambda r: (lambda a: (math.exp(-a[1]), math.exp(-a[0])))(_abs(r)),
    "scale": lambda r: (1.5 * r[0], 1.5 * r[1]),
    "clamp": lambda r: _clip(r, -1.0, 1.0),
    "log1pabs": lambda r: (lambda a: (math.log1p(a[0]), math.log1p(a[1])))(_abs(r)),
}
REAL: Range = (-INF, INF)


def _binary_range(op: str, bcast: str, r: Range) -> Range:
    """The range of op(t, u) for t in r and u the second operand: a real input, or the scalar c."""
    if bcast != "sc":  # u: an unbounded real input
        if op == "max":
            return (r[0], INF)
        if op == "min":
            return (-INF, r[1])
        return (0.0, 0.0) if op == "mul" and r == (0.0, 0.0) else REAL
    c = SCALAR_C
    return {"add": (r[0] + c, r[1] + c), "sub": (r[0] - c, r[1] - c), "mul": (r[0] * c, r[1] * c),
            "max": (max(r[0], c), max(r[1], c)), "min": (min(r[0], c), min(r[1], c))}[op]


def _pre_ranges(spec: Spec) -> list[Range]:
    """The value range after each op of the element-wise prefix (x: an unbounded real input)."""
    r, out = REAL, []
    for op in spec.pre:
        r = _binary_range(op, str(spec.bcast), r) if op not in UNARY_RANGE else UNARY_RANGE[op](r)
        out.append(r)
    return out


def _row_range(row: str, r: Range) -> Range:
    """The value range of a row op over rows of values in r (sums and norms: unbounded)."""
    return {"softmax": (0.0, 1.0), "lsm": (-INF, 0.0), "rmax": r, "rmean": r}.get(row, REAL)


def output_range(spec: Spec, pre: list[Range] | None = None) -> Range:
    """The value range of the chain's output over unbounded real inputs (a point: a constant);
    `pre`: the prefix's ranges (`_pre_ranges(spec)`) when the caller has them."""
    pre = _pre_ranges(spec) if pre is None else pre
    r = pre[-1] if pre else REAL
    if spec.row is not None:
        r = _row_range(spec.row, r)
    for op in spec.post:
        r = UNARY_RANGE[op](r)
    return r


NARROW = 0.1  # an output range this narrow is a constant to within a few fp16 tolerances
SHIFT_INVARIANT = ("softmax", "lsm", "ln")
KEEPS_ROW_SHIFT = ("neg", "scale")
SATURATING = ("tanh", "sigmoid", "clamp", "expn")
SUMS = ("rsum", "rsumsq", "rl2")
VANISH_BELOW_ZERO = ("relu", "gelu", "silu", "softplus")
FLAT_NEAR_ZERO = ("sigmoid", "softplus", "expn", "sq")
AFTER_LSM = ("neg", "abs", "scale", "sq", "log1pabs")


def degenerate_reason(spec: Spec) -> str | None:
    """Why `spec`'s output hardly depends on its inputs (module docstring, rules 1-7), or None."""
    ranges = _pre_ranges(spec)
    for op, (lo, hi) in zip(spec.pre, ranges, strict=True):
        if lo == hi:
            return f"x is lost at {op}: its result is the constant {lo:g} whatever x is"
    lo, hi = output_range(spec, ranges)
    if lo == hi:
        return f"its output is the constant {lo:g} whatever the input"
    if hi - lo < NARROW:
        return f"its output stays within [{lo:.3g}, {hi:.3g}] whatever the input"
    if spec.row in SHIFT_INVARIANT and spec.bcast == "col" and spec.binary in ("add", "sub"):
        after = spec.pre[spec.pre.index(spec.binary) + 1:]
        if all(op in KEEPS_ROW_SHIFT for op in after):
            return f"{spec.row} is shift-invariant: the per-row v[m] cancels and v is never needed"
    post = spec.post[0] if spec.post else None
    if spec.row == "rmax" and spec.pre:
        if ranges[-1][1] < INF:
            return "the row maximum sits at the upper bound of the values in every row"
        if spec.pre[-1] == "max" and (spec.bcast == "row" or (
                spec.bcast == "full" and len(ranges) > 1 and ranges[-2][1] < INF)):
            return "the row maximum of max(t, v) is v's maximum in every row: t is never needed"
    if (spec.row in SUMS and post in SATURATING) or (spec.row == "rmax" and post == "clamp"):
        return f"{post} saturates on a {spec.row} over a whole row"
    if spec.row in ("rsum", "rmean") and post in VANISH_BELOW_ZERO and spec.pre and (
            (spec.pre[-1] == "min" and spec.bcast in ("row", "full"))
            or (spec.pre[-1] == "sub" and spec.bcast == "sc")):
        return f"{post} is about 0 on the row {spec.row} of {spec.pre[-1]}(.), negative in every row"
    if spec.row == "softmax" and spec.post and spec.post[0] in FLAT_NEAR_ZERO:
        return f"{spec.post[0]} is nearly constant over probabilities of about 1/N"
    if spec.row == "lsm" and spec.post and spec.post[0] not in AFTER_LSM:
        return f"{spec.post[0]} sits at its floor or saturation over log-probabilities of about -log N"
    return None
