"""Shared mask helpers for the RL array ops: padding rows and padding groups become one boolean mask.

Every function in `leap_jax.rl` takes the same two optional masks so that a batch with pruned or padded
groups keeps the static shape of a full one: `group_mask` [num_groups] (False = padding group) and
`row_mask` [num_groups, G] (False = padding row, or a row the trainer excludes such as `env_error`).
"""
from __future__ import annotations

from typing import Any

import jax.numpy as jnp

Array = Any  # a jax.Array or anything jnp.asarray accepts


def valid_rows(shape: tuple[int, ...], row_mask: Array | None = None,
               group_mask: Array | None = None) -> jnp.ndarray:
    """Boolean [num_groups, G] mask of rows that take part: `row_mask & group_mask[:, None]`.

    `shape` is the [num_groups, G] shape of the per-row data; a missing mask means all True.
    """
    if len(shape) < 2:
        raise ValueError(f"per-row data must be at least [num_groups, G]; got shape {shape}")
    n, g = shape[0], shape[1]
    valid = jnp.ones((n, g), dtype=bool)
    if row_mask is not None:
        row_mask = jnp.asarray(row_mask, dtype=bool)
        if row_mask.shape != (n, g):
            raise ValueError(f"row_mask must have shape {(n, g)} (num_groups, G); got {row_mask.shape}")
        valid = valid & row_mask
    if group_mask is not None:
        group_mask = jnp.asarray(group_mask, dtype=bool)
        if group_mask.shape != (n,):
            raise ValueError(f"group_mask must have shape {(n,)} (num_groups,); got {group_mask.shape}")
        valid = valid & group_mask[:, None]
    return valid


def check_turn_shape(name: str, x: jnp.ndarray, ndim: int = 3) -> None:
    """Raise a clear error unless `x` has `ndim` dimensions ([num_groups, G, T] by default)."""
    if x.ndim != ndim:
        want = "[num_groups, G, T]" if ndim == 3 else f"{ndim} dimensions"
        raise ValueError(f"{name} must be {want}; got shape {tuple(x.shape)}")


def default_attempted(correct: jnp.ndarray, attempted: Array | None) -> jnp.ndarray:
    """The per-turn attempted mask, all True when not given; shape-checked against `correct`."""
    if attempted is None:
        return jnp.ones(correct.shape, dtype=bool)
    attempted = jnp.asarray(attempted, dtype=bool)
    if attempted.shape != correct.shape:
        raise ValueError(f"attempted must have the shape of correct {tuple(correct.shape)}; "
                         f"got {tuple(attempted.shape)}")
    return attempted
