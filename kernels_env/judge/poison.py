"""The poison written into every output before a kernel runs, and read back to judge it.

The harness fills each output (and a guard region after it) with its dtype's poison; an element
that still holds it after the run was never written ("unwritten"), a changed guard element is a
write out of bounds. Float outputs get a NaN with a recognisable payload, so a surviving poison
reads as "unwritten" while a NaN the kernel computed reads as "nan_or_inf"; integer outputs get the
most negative value. The expected-output cache's fused check uses the same int sentinel.
"""
from __future__ import annotations

import numpy as np

POISON_BITS = {"float32": (np.uint32, 0x7FC0DEAD), "float16": (np.uint16, 0x7E5A),
               "float64": (np.uint64, 0x7FF8DEADDEADDEAD)}
INT_SENTINEL = {"int32": np.iinfo(np.int32).min, "int64": np.iinfo(np.int64).min}
