"""The poison written into every output before a kernel runs, and read back to judge it.

The harness fills each output (and a guard region after it) with its dtype's poison; an element
that still holds it after the run was never written ("unwritten"), a changed guard element is a
write out of bounds. Float outputs get a NaN with a recognisable payload, so a surviving poison
reads as "unwritten" while a NaN the kernel computed reads as "nan_or_inf"; integer outputs get the
most negative value. The expected-output cache's fused check uses the same int sentinel.
`poison_count` reads the poison back on the device (execute/buffers.py writes it; the correctness
trials count their guards in judge/trial_readout.py).
"""
from __future__ import annotations

from typing import Any

import numpy as np

POISON_BITS = {"float32": (np.uint32, 0x7FC0DEAD), "float16": (np.uint16, 0x7E5A),
               "float64": (np.uint64, 0x7FF8DEADDEADDEAD)}
INT_SENTINEL = {"int32": np.iinfo(np.int32).min, "int64": np.iinfo(np.int64).min}


def poison_bits(dtype: str) -> tuple[Any, int]:
    """(unsigned type of the dtype's width, the poison's bits in it): what every element of an
    unwritten output or an untouched guard holds, floats and ints alike."""
    if dtype in POISON_BITS:
        return POISON_BITS[dtype]
    if dtype in INT_SENTINEL:
        utype = {"int32": np.uint32, "int64": np.uint64}[dtype]
        return utype, int(np.array(INT_SENTINEL[dtype], dtype=dtype).view(utype))
    raise ValueError(f"dtype {dtype!r} has no poison; expected one of {sorted([*POISON_BITS, *INT_SENTINEL])}")


def bits(xp: Any, a: Any) -> Any:
    """`a` viewed as unsigned integers of its width: how a float poison (a NaN) is recognised."""
    return a.view({1: xp.uint8, 2: xp.uint16, 4: xp.uint32, 8: xp.uint64}[a.dtype.itemsize])


def poison_count(xp: Any, a: Any, dtype: str) -> Any:
    """How many elements of `a` still hold the poison, as a device scalar: no host sync."""
    utype, value = poison_bits(dtype)
    return (bits(xp, a) == utype(value)).sum()
