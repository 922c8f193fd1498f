"""The poison written into every output before a kernel runs, and read back to judge it.

The harness fills each output (and a guard region after it) with its dtype's poison; an element
that still holds it after the run was never written ("unwritten"), a changed guard element is a
write out of bounds. Float outputs get a NaN with a recognisable payload, so a surviving poison
reads as "unwritten" while a NaN the kernel computed reads as "nan_or_inf"; integer outputs get the
most negative value. The expected-output cache's fused check uses the same int sentinel.
`poison_count` and `guard_changed` read the poison back on the device (execute/buffers.py writes it).
"""
from __future__ import annotations

from typing import Any

import numpy as np

POISON_BITS = {"float32": (np.uint32, 0x7FC0DEAD), "float16": (np.uint16, 0x7E5A),
               "float64": (np.uint64, 0x7FF8DEADDEADDEAD)}
INT_SENTINEL = {"int32": np.iinfo(np.int32).min, "int64": np.iinfo(np.int64).min}


def bits(xp: Any, a: Any) -> Any:
    """`a` viewed as unsigned integers of its width: how a float poison (a NaN) is recognised."""
    return a.view({1: xp.uint8, 2: xp.uint16, 4: xp.uint32, 8: xp.uint64}[a.dtype.itemsize])


def poison_count(xp: Any, a: Any, dtype: str) -> Any:
    """How many elements of `a` still hold the poison, as a device scalar: no host sync."""
    if dtype in POISON_BITS:
        utype, value = POISON_BITS[dtype]
        return (bits(xp, a) == utype(value)).sum()
    return (a == INT_SENTINEL[dtype]).sum()


def guard_changed(xp: Any, guard: Any, dtype: str) -> int:
    """How many guard elements no longer hold the poison (0: no write outside the buffer)."""
    if isinstance(guard, tuple):
        return sum(guard_changed(xp, part, dtype) for part in guard)
    if dtype in POISON_BITS:
        utype, value = POISON_BITS[dtype]
        return int((bits(xp, guard) != utype(value)).sum())
    return int((guard != INT_SENTINEL[dtype]).sum())
