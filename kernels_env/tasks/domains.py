"""Input domains: the set of values a task promises its input buffer may hold, in machine-readable form.

A task's description says what its inputs are ("strictly positive", "class indices", "labels +-1");
correctness trials must draw from all of it, edges included, or a kernel correct only on the part
the trials visit scores `correct`. Each input `Buffer` carries one `Domain` (declared, or derived
from its legacy `distributions`/`low`/`high` by `default_domain`); execute/domain_draws.py is the one
place that turns a domain into draws.

Kinds (bounds are inclusive unless said; `high` of the integer kinds is exclusive and may name a size):
    real         any finite value with |x| <= max_abs
    positive     tiny <= x <= max_abs (strictly positive)
    nonnegative  0 <= x <= max_abs
    interval     low <= x < high
    integers     integers in [low, high)
    indices      integers in [0, high), `high` usually a size name (e.g. "C")
    labels       integers in [low, high) standing for classes, e.g. {0, 1} mapped to -1/+1
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

KINDS = ("real", "positive", "nonnegative", "interval", "integers", "indices", "labels")
INTEGER_KINDS = ("integers", "indices", "labels")
# The largest magnitude a real-valued domain reaches by default per dtype: the clip of the legacy
# heavy-tailed draws, so references (fp16 squares, exp) stay finite where they were finite before.
DEFAULT_MAX_ABS = {"float32": 100.0, "float16": 16.0, "int32": 100.0, "int64": 100.0}
DEFAULT_TINY = 1e-3
# The version of the domain draws (execute/domain_draws.py): part of every cache key holding expected
# outputs or results when EnvConfig.input_domains is on; bump it whenever those draws change.
# 2: real inputs of contraction tasks bounded by CONTRACTION_MAX_ABS (`contraction_domain`).
# 3: timing runs (trials >= core.config.TIMING_TRIAL_BASE) draw the typical mode only.
# 4: structured trials: an exact-mean constant row, shifted blocks, spikes in 1-D buffers.
DOMAIN_VERSION = 4
# Tasks with any of these tags sum products of their inputs (matrix products, convolutions, attention);
# their real inputs get `contraction_domain`. Tagged tasks that sum no products (matmul_diag,
# matrix_scalar_mul) get it too: the bound costs them nothing a kernel could get wrong.
CONTRACTION_TAGS = ("matmul", "conv", "attention")
CONTRACTION_MAX_ABS = 8.0


@dataclass(frozen=True)
class Domain:
    """One buffer's input domain (see the module docstring for the kinds)."""
    kind: str
    low: float | str = 0.0
    high: float | str = 1.0
    max_abs: float | None = None  # real/positive/nonnegative; None: DEFAULT_MAX_ABS of the dtype
    tiny: float = DEFAULT_TINY  # positive: the smallest value drawn

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"domain kind {self.kind!r}; expected one of {KINDS}")
        if self.max_abs is not None and not (isinstance(self.max_abs, (int, float)) and self.max_abs > 0):
            raise ValueError(f"domain {self.kind}: max_abs={self.max_abs!r}; expected a number > 0")
        if self.kind == "positive" and not 0 < self.tiny < (self.max_abs or float("inf")):
            raise ValueError(f"domain positive: tiny={self.tiny!r}; expected 0 < tiny < max_abs")
        if self.kind in ("interval", "integers", "labels"):
            if isinstance(self.low, str) or isinstance(self.high, str):
                if self.kind == "interval":
                    raise ValueError(f"domain interval: bounds [{self.low!r}, {self.high!r}); expected numbers")
            elif not float(self.high) > float(self.low):
                raise ValueError(f"domain {self.kind}: [{self.low}, {self.high}); expected low < high")
        if self.kind in INTEGER_KINDS and not isinstance(self.low, str) and float(self.low) != int(self.low):
            raise ValueError(f"domain {self.kind}: low={self.low!r}; expected an integer")

    @property
    def integral(self) -> bool:
        return self.kind in INTEGER_KINDS

    def bound(self, dtype: str) -> float:
        """The largest magnitude of a real-valued domain for `dtype`."""
        return float(self.max_abs if self.max_abs is not None else DEFAULT_MAX_ABS[dtype])

    def limits(self, dtype: str, sizes: dict[str, int]) -> tuple[float, float]:
        """(lowest, highest) value the domain admits (both inclusive) at these sizes."""
        if self.kind == "real":
            return -self.bound(dtype), self.bound(dtype)
        if self.kind == "positive":
            return self.tiny, self.bound(dtype)
        if self.kind == "nonnegative":
            return 0.0, self.bound(dtype)
        low = 0.0 if self.kind == "indices" else _resolve(self.low, sizes, "low")
        high = _resolve(self.high, sizes, "high")
        if not high > low:
            raise ValueError(f"domain {self.kind}: [{low}, {high}) at sizes {sizes}; expected low < high")
        return (low, high - 1) if self.integral else (low, high)

    def check_values(self, name: str, values: Any, dtype: str, sizes: dict[str, int]) -> None:
        """Raise ValueError naming the first value of `values` (a NumPy array) outside the domain."""
        import numpy as np
        v = np.asarray(values)
        lo, hi = self.limits(dtype, sizes)
        if v.dtype.kind == "f":  # the bounds as the buffer's dtype rounds them (1e-3 in fp16)
            lo, hi = float(v.dtype.type(lo)), float(v.dtype.type(hi))
        bad = ~np.isfinite(v) if v.dtype.kind == "f" else np.zeros(v.shape, dtype=bool)
        bad |= (v < lo) | (v > hi) | ((v >= hi) & (self.kind == "interval"))
        if self.integral and v.dtype.kind == "f":
            bad |= v != np.rint(v)
        if bad.any():
            i = int(np.flatnonzero(bad.ravel())[0])
            raise ValueError(f"buffer {name!r}: value {v.ravel()[i].item()!r} at flat index {i} is outside its "
                             f"{self.kind} domain; expected {self.describe(dtype, sizes)}")

    def describe(self, dtype: str, sizes: dict[str, int]) -> str:
        lo, hi = self.limits(dtype, sizes)
        if self.integral:
            return f"integers in [{lo:g}, {hi:g}]"
        close = ")" if self.kind == "interval" else "]"
        return f"finite values in [{lo:g}, {hi:g}{close}"


def contraction_domain(domain: Domain, tags: tuple[str, ...]) -> Domain:
    """The domain an input of a task with `tags` gets: `domain`, except that a real domain left at its
    dtype's default reach (max_abs None) in a contraction task (CONTRACTION_TAGS) is bounded by
    CONTRACTION_MAX_ABS. Task.__post_init__ applies it to every input: the one place that decides.

    Why: an edges trial puts +-max_abs (50..100 in float32) in both operands of a sum of products, so a
    few terms reach 1e3..1e4 and cancel; two correct float32 kernels summing in different orders then
    differ by eps * sum|terms| ~ 1e-3..1e-1, beyond a tolerance relative to the (small) output (seen on
    a GPU for conv1d, conv2d, conv2d_bias_scale, matmul_rect and attention). Matrix and convolution
    operands are activations and weights, which real networks keep within a few units; |x| <= 8 keeps
    the products within 64, where every contraction task's rounding stays far inside its tolerance
    (tests/kernels_env/test_rounding_margin.py), and the edges trial still reaches the bound, zero,
    +-1e-3 and +-1. The alternative, a tolerance growing with sum|terms| per output, would need an
    error model per task (attention, a norm or an activation after the sum) and a magnitude
    reference beside every expected output; bounding the promise is one rule and keeps the check as
    strict as before. Domains of other tasks (softplus, log, losses) keep their full reach, which is
    where overflow and series approximations fail."""
    if domain.kind != "real" or domain.max_abs is not None or not set(tags) & set(CONTRACTION_TAGS):
        return domain
    return Domain("real", max_abs=CONTRACTION_MAX_ABS)


def _resolve(value: float | str, sizes: dict[str, int], which: str) -> float:
    if isinstance(value, str):
        if value not in sizes:
            raise KeyError(f"domain bound {which}={value!r} names no size; sizes are {sorted(sizes)}")
        return float(sizes[value])
    return float(value)


def default_domain(dtype: str, distributions: tuple[str, ...], low: float | str, high: float | str) -> Domain:
    """The domain a buffer's legacy draws already promise: what an undeclared buffer gets."""
    dists = set(distributions)
    if dists == {"indices"}:
        return Domain("indices", high=high)
    if dists == {"randint"}:
        return Domain("integers", low=low, high=high)
    if dists == {"positive"}:
        return Domain("positive")
    integer = dtype in ("int32", "int64")
    if dists == {"uniform"} and not (isinstance(low, str) or isinstance(high, str)):
        if integer:  # uniform draws rounded to the nearest integer: both ends reachable
            return Domain("integers", low=math.floor(float(low)), high=math.ceil(float(high)) + 1)
        return Domain("interval", low=low, high=high)
    if integer:
        return Domain("integers", low=-DEFAULT_MAX_ABS[dtype], high=DEFAULT_MAX_ABS[dtype] + 1)
    return Domain("real")


# Declared kind -> kinds of legacy draws that stay inside it (the typical trial draws those).
_FITS = {"real": ("real", "positive", "interval"), "positive": ("positive",), "nonnegative": ("positive",),
         "interval": ("interval",), "integers": ("integers",), "indices": ("indices",),
         "labels": ("integers",)}


def check_compatible(buffer_name: str, dtype: str, domain: Domain, legacy: Domain) -> None:
    """Reject a domain its dtype cannot hold (reals in an integer buffer) or one the buffer's legacy
    distributions (`legacy`, their derived domain: what the typical trial draws) fall outside of."""
    if dtype in ("int32", "int64") and not domain.integral:
        raise ValueError(f"buffer {buffer_name!r}: dtype {dtype} with a {domain.kind} domain; expected one of "
                         f"{INTEGER_KINDS} for an integer buffer")
    same_bounds = (legacy.low, legacy.high) == (domain.low, domain.high)
    bounded = domain.kind in ("interval", "integers", "indices", "labels")
    if legacy.kind not in _FITS[domain.kind] or (bounded and not same_bounds):
        raise ValueError(f"buffer {buffer_name!r}: its distributions draw a {legacy.kind} domain "
                         f"[{legacy.low}, {legacy.high}) outside the declared {domain.kind} domain "
                         f"[{domain.low}, {domain.high}); expected distributions that fit it (e.g. "
                         "('positive',) for positive, ('randint',) with the same low/high for labels)")
