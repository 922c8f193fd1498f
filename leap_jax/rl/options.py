"""The names and ranges of the RL math's options, in plain Python (no JAX, no NumPy).

Config validation (leap_jax.train.config) checks a run's options with these before anything heavy
is imported; the jitted functions of rl/ check their Python arguments with the same functions, so
a rule lives in one place.
"""
from __future__ import annotations

import math
from numbers import Integral, Real

AGGREGATION_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")  # rl.losses.aggregate


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
