"""Live-row compaction of a static decode loop (`DecodeImpl.compact_factor`).

A static batch decodes until its longest row stops; in a multi-turn rollout most rows have stopped
long before (about 22 of 128 still generate at a typical decode step), yet every step runs the
projections, MLP and sampling of all rows. On a GPU a small model's decode step is kernel-bound (a
fixed ~90 kernels a step; XLA command buffers do not shorten it), so its cost falls with the batch:
a loop that continues with only its live rows in a smaller batch runs cheaper steps.

`compact_size` chooses the smaller batch; `take_rows` / `put_rows` move cache rows between the full
cache and the compact one (the full cache gets back every row the compact loop wrote, so a caller
that keeps caches, kv_reuse, sees what the uncompacted loop would have written in each row's
written slots).
"""
from __future__ import annotations

import jax

from leap_jax.models.decoder import KVCache, LayerBuffers


def compact_size(batch: int, factor: int) -> int:
    """Rows of the compact loop for a batch of `batch` rows (ceil(batch / factor)), or `batch` when
    compaction would not make it smaller (factor 1, a batch of one row)."""
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
        raise ValueError(f"compact_factor={factor!r}; expected an int >= 1 (1 = off)")
    return -(-int(batch) // factor)


def compact_rows(done: jax.Array, small: int) -> jax.Array:
    """The rows the compact loop continues with: every row still generating (done [B] False) first,
    in batch order, filled up to `small` rows with stopped ones; int32 [small]."""
    return jax.numpy.argsort(done, stable=True)[:small].astype(jax.numpy.int32)


def _per_layer(fn, *buffers: LayerBuffers) -> LayerBuffers:
    """fn(*one layer's buffers, batch axis) per layer: axis 0 of per-layer tuples, 1 of the stacked
    [L, B, ...] layout (every argument in the first one's layout)."""
    if isinstance(buffers[0], (list, tuple)):
        return tuple(fn(*layer, 0) for layer in zip(*buffers, strict=True))
    return fn(*buffers, 1)


def take_rows(cache: KVCache, rows: jax.Array) -> KVCache:
    """The cache of rows `rows` (int [R]), in that order: a cache of R rows."""
    def take(x, axis):
        return jax.numpy.take(x, rows, axis=axis)
    return KVCache(_per_layer(take, cache.k), _per_layer(take, cache.v), take(cache.seg, 0))


def put_rows(cache: KVCache, rows: jax.Array, part: KVCache) -> KVCache:
    """`cache` with its rows `rows` (int [R], distinct) replaced by the R rows of `part`."""
    def put(dst, src, axis):
        return dst.at[(slice(None),) * axis + (rows,)].set(src)
    return KVCache(_per_layer(put, cache.k, part.k), _per_layer(put, cache.v, part.v),
                   put(cache.seg, part.seg, 0))
