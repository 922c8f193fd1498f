"""Static-shape buckets for the sampler: prompt lengths and batch sizes are rounded up to a few
sizes so the jitted prefill/decode compile once per bucket, not once per request."""
from __future__ import annotations

from collections.abc import Sequence

DEFAULT_PROMPT_BUCKETS = (64, 128, 256, 512, 1024, 2048, 4096)


def batch_buckets(max_batch: int) -> tuple[int, ...]:
    """Powers of two below max_batch, plus max_batch itself (e.g. 48 -> 1, 2, 4, 8, 16, 32, 48)."""
    if max_batch < 1:
        raise ValueError(f"max_batch={max_batch}; expected a positive int")
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    return tuple(out) + (max_batch,)


def prompt_buckets(max_context: int) -> tuple[int, ...]:
    """Powers of two from 128 below max_context, plus max_context itself (e.g. 1000 -> 128, 256, 512,
    1000; 100 -> 100): the prompt lengths a sampler of context max_context compiles for."""
    out, b = [], 128
    while b < max_context:
        out.append(b)
        b *= 2
    return tuple(out) + (max_context,)


def validate_buckets(name: str, buckets: Sequence[int]) -> tuple[int, ...]:
    """Sorted unique positive ints, or a ValueError naming the bad value."""
    bs = tuple(sorted(set(int(b) for b in buckets)))
    if not bs or bs[0] < 1:
        raise ValueError(f"{name}={tuple(buckets)!r}; expected a non-empty list of positive ints")
    return bs


def pick_bucket(n: int, buckets: Sequence[int], what: str = "length") -> int:
    """The smallest bucket >= n; ValueError if n exceeds the largest."""
    for b in buckets:
        if b >= n:
            return b
    raise ValueError(f"{what} {n} exceeds the largest bucket {buckets[-1]} (buckets: {tuple(buckets)})")
