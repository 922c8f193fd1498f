"""When a run has learned all it will: the plateau rule of `train.plateau`.

A run stops once the periodic evaluation's `metric` has flattened: each of its last `window`
evaluations is within `tol` of the best value the run has logged (the start policy's, step -1,
included), after at least `min_steps` training steps. Plain Python: the trainer applies it after
each periodic evaluation, and a resumed run rebuilds the history from its metrics file.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def plateaued(values: Sequence[float], window: int, tol: float) -> bool:
    """True when there are at least `window` values and each of the last `window` is >= max - tol."""
    if window < 1:
        raise ValueError(f"window={window}: expected >= 1")
    if len(values) < window:
        return False
    best = max(values)
    return all(v >= best - tol - 1e-12 for v in values[-window:])


def metric_history(records: Sequence[dict[str, Any]], metric: str) -> list[float]:
    """The logged values of `metric`, in record order (records without it are skipped)."""
    return [float(r[metric]) for r in records if r.get(metric) is not None]
