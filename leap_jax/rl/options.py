"""The names and ranges of the RL math's options, in plain Python (no JAX, no NumPy).

Config validation (leap_jax.train.config) checks a run's options with these before anything heavy
is imported; the jitted functions of rl/ check their Python arguments with the same functions, so
a rule lives in one place.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Integral, Real
from typing import Any

AGGREGATION_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")  # rl.losses.aggregate

# DCP's default thresholds (rl.dcp, the `dcp:` config section, the rollout): debug a group when at least
# half its valid rows failed turn 1 and not all did; for G = 8 the paper's t_min = 4, t_max = 7
DEFAULT_T_MIN = 0.5
DEFAULT_T_MAX = None
FRACTION_SLACK = 1e-4  # absorbs float rounding in f * n (e.g. 0.3 * 10, or float32 in the jitted rule)


def min_failed_count(fraction: Any, n: Any, ceil: Callable[[Any], Any] = math.ceil) -> Any:
    """The fewest failed rows of `n` that a fractional t_min accepts (`n_fail >= fraction * n`).
    `ceil` is math.ceil for Python numbers or jnp.ceil for arrays: rl.dcp and the config's check
    share this rule, so they agree on every (fraction, G)."""
    return ceil(fraction * n - FRACTION_SLACK)


def max_failed_count(fraction: Any, n: Any, floor: Callable[[Any], Any] = math.floor) -> Any:
    """The most failed rows of `n` that a fractional t_max accepts (`n_fail <= fraction * n`)."""
    return floor(fraction * n + FRACTION_SLACK)


def dcp_band(t_min: int | float, t_max: int | float | None, group_size: int) -> tuple[int, int]:
    """(lo, hi): a group of `group_size` valid rows is debugged iff lo <= n_fail <= hi. An int
    threshold is a count, a float a fraction of the group; t_max=None is group_size - 1."""
    lo = int(t_min) if isinstance(t_min, Integral) else int(min_failed_count(float(t_min), group_size))
    if t_max is None:
        hi = group_size - 1
    else:
        hi = int(t_max) if isinstance(t_max, Integral) else int(max_failed_count(float(t_max), group_size))
    return lo, hi


def check_threshold(name: str, value: object, group_size: int, error: type[ValueError] = ValueError) -> None:
    """A DCP threshold (rl.dcp): an int is a count of failed rows in 0..G, a float a fraction of
    the group's valid rows in [0, 1]. Arrays and None pass unchecked (traced values, t_max=None)."""
    if value is None:
        return
    if isinstance(value, bool):
        raise error(f"{name}={value!r}: expected an int count of failed rows or a float fraction, not a bool")
    if isinstance(value, Integral):
        if not 0 <= int(value) <= group_size:
            raise error(f"{name}={value!r}: an int is a count of failed rows; expected 0..{group_size} (G)")
    elif isinstance(value, Real):
        if math.isnan(float(value)) or not 0.0 <= float(value) <= 1.0:
            raise error(f"{name}={value!r}: a float is a fraction of the group; expected it in [0, 1]")
