"""KV reuse across the turns of a conversation (`DecodeImpl(kv_reuse=True)`), an opt-in.

A debugging turn's prompt is the previous turn's prompt, its response, the closing tokens and the
feedback message. The plain sampler prefills all of it again. With KV reuse the Sampler keeps the
decode cache of every row it generated for a conversation id (`Sampler.generate(...,
conversations=ids)`), and a later request of the same id whose prompt starts with the kept tokens
prefills only the new tokens (the delta) on top of a copy of the kept K/V:

  1. `KeptCaches` maps a conversation id to (kept buffer, row, end slot, the token ids whose K/V
     the row holds). A kept buffer is a whole decode cache of an earlier call, kept instead of
     donated to the next call; it is freed when no conversation refers to it any more (a later turn
     replaced them, or `release`). Its rows' content is every slot with a non-zero segment id below
     the row's end slot, in slot order (decode writes past a row's last token are below no end).
  2. `place_rows` (jitted per pair of shapes) copies the first n_reuse content slots of kept rows
     into the rows of a cache of the call's buckets (the prompt bucket P of the new prompts, as a
     full prefill would pick), at slots P - len(prompt) .. P - len(delta) - 1: the layout of a
     left-padded prompt. K/V carry their real RoPE positions, so they can move to other slots.
  3. `prefill_delta` runs the deltas, left-padded to a delta bucket D, at the real positions
     n_reuse.. through the decoder into the last D slots of the prompt region, attending over the
     copied K/V; a padding token writes nothing (`forward(write_padding=False)`), so the copied K/V
     under the block's padding stay. It returns each row's last-token logits. The cache then holds
     what a full prefill of the new prompts would have written, so the unchanged decode loop
     follows (`sampler.decode`, or `speculative.decode_speculative`).

A request falls back to the full prefill when it has no kept entry, when its prompt does not start
with the kept tokens, when the params changed, when its delta is longer than the largest delta
bucket, or when that bucket exceeds the largest prompt bucket (the cache's prompt region). A reused
row never needs more cache than its full prefill: a conversation past the largest prompt bucket is
refused by both paths (the rollout stops such rows at its context limit first).
Greedy tokens and log-probs equal the plain path's (tests/leap_jax/test_kv_reuse.py); sampled
tokens follow the same distribution.

Memory: the plain path donates one cache buffer from call to call; here each chunk's decode cache
[rows, P + max_new_tokens] is kept until its rows' next turn replaced them or the rollout released
them (a row that takes no further turn is released after DCP decides; the whole run at its end). At
the peak of a turn, the previous turn's kept buffers and the turn's new ones coexist. Per cached
token: num_layers x 2 x num_kv_heads x head_dim x 2 bytes in bf16 (the generated family's 6-layer
policy: 6 KiB), so 128 rows x 3072 slots are 2.25 GiB; a 512-row evaluation rollout about 4x that.
"""
from __future__ import annotations

import collections
import weakref
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from leap_jax.models.config import ModelConfig
from leap_jax.models.decoder import KVCache, LayerBuffers, Params, forward, logits_from_hidden

DEFAULT_DELTA_BUCKETS = (64, 256, 1024)


@dataclass(frozen=True)
class Kept:
    """Where one conversation's K/V lives between its turns."""
    buf: int  # key into KeptCaches.buffers
    row: int
    end: int  # the row's content: slots < end with a non-zero segment id, in slot order
    tokens: np.ndarray  # int32: the ids whose K/V the row holds (prompt + response[:-1])


class KeptCaches:
    """The Sampler's kept decode caches, by conversation id (host-side bookkeeping only)."""

    def __init__(self) -> None:
        self.buffers: dict[int, KVCache] = {}
        self.entries: dict[Hashable, Kept] = {}
        self._refs: collections.Counter[int] = collections.Counter()
        self._next = 0
        self._params: list[weakref.ref] | None = None  # the params the kept K/V were computed with

    def check_params(self, params: Params) -> None:
        """Drop everything when `params` are not (leaf by leaf) those of the kept caches."""
        leaves = jax.tree_util.tree_leaves(params)
        same = (self._params is not None and len(self._params) == len(leaves)
                and all(r() is x for r, x in zip(self._params, leaves, strict=True)))
        if not same:
            self.release()
            try:
                self._params = [weakref.ref(x) for x in leaves]
            except TypeError:  # leaves that take no weak reference (numpy arrays): never reuse
                self._params = None

    @property
    def enabled(self) -> bool:
        return self._params is not None

    def add_buffer(self, cache: KVCache) -> int:
        key = self._next
        self._next += 1
        self.buffers[key] = cache
        return key

    def put(self, conv: Hashable, kept: Kept) -> None:
        self._drop(conv)
        self.entries[conv] = kept
        self._refs[kept.buf] += 1

    def get(self, conv: Hashable) -> Kept | None:
        return self.entries.get(conv)

    def _drop(self, conv: Hashable) -> None:
        old = self.entries.pop(conv, None)
        if old is not None:
            self._refs[old.buf] -= 1
            if self._refs[old.buf] <= 0:
                del self._refs[old.buf]
                self.buffers.pop(old.buf, None)

    def collect(self) -> None:
        """Free buffers no entry refers to (a call that kept nothing of a buffer)."""
        for key in [k for k in self.buffers if self._refs[k] <= 0]:
            del self.buffers[key]
            self._refs.pop(key, None)

    def release(self, conversations: Any = None) -> None:
        """Forget these conversations (None: all) and free buffers nobody refers to."""
        if conversations is None:
            self.entries.clear()
            self.buffers.clear()
            self._refs.clear()
            return
        for c in conversations:
            self._drop(c)

    def nbytes(self) -> int:
        """Device bytes of the kept buffers."""
        return sum(int(x.nbytes) for c in self.buffers.values() for x in jax.tree_util.tree_leaves(c))


def reusable_prefix(kept: Kept | None, prompt: np.ndarray) -> int:
    """How many leading tokens of `prompt` have K/V in `kept` (0: none). At least one token is
    left to prefill (its logits start the decode)."""
    if kept is None:
        return 0
    n = min(kept.tokens.size, prompt.size - 1)
    if n <= 0 or not np.array_equal(kept.tokens[:n], prompt[:n]):
        return 0
    return int(n)


def _place_layer(dst: jax.Array, src: jax.Array, src_rows: jax.Array, idx: jax.Array,
                 ok: jax.Array) -> jax.Array:
    """dst[r, s] = src[src_rows[r], idx[r, s]] where ok[r, s]: one layer's [B, S, KV, hd]."""
    got = src[src_rows[:, None], idx]
    return jnp.where(ok[:, :, None, None], got.astype(dst.dtype), dst)


def _map_layers(dst: LayerBuffers, src: LayerBuffers, fn) -> LayerBuffers:
    if isinstance(dst, (list, tuple)):
        if not isinstance(src, (list, tuple)):
            raise ValueError("place_rows: kept and new caches must share one layout")
        return tuple(fn(d, s) for d, s in zip(dst, src, strict=True))
    if isinstance(src, (list, tuple)):
        raise ValueError("place_rows: kept and new caches must share one layout")
    return jax.vmap(fn)(dst, src)  # stacked [num_layers, B, S, KV, hd]


def place_rows(dst: KVCache, src: KVCache, src_rows: jax.Array, src_end: jax.Array,
               dst_lo: jax.Array, count: jax.Array, *, reset: bool = False) -> KVCache:
    """Copy kept rows into `dst`: for each row r of dst with count[r] > 0, the first count[r]
    content slots of src row src_rows[r] (non-zero segment id, slot < src_end[r], in slot order)
    go to dst slots dst_lo[r] .. dst_lo[r] + count[r] - 1. reset: clear dst's segment ids first
    (a fresh layout; K/V of empty slots are masked out and need no clearing)."""
    s_src = src.seg.shape[1]
    s_dst = dst.seg.shape[1]
    src_rows = src_rows.astype(jnp.int32)
    seg_rows = jnp.take(src.seg, src_rows, axis=0)  # [B, S_src]
    valid = (seg_rows != 0) & (jnp.arange(s_src)[None, :] < src_end[:, None])
    order = jnp.argsort(~valid, axis=1, stable=True).astype(jnp.int32)  # content slots first
    j = jnp.arange(s_dst)[None, :] - dst_lo[:, None]  # [B, S_dst]: index into the row's content
    ok = (j >= 0) & (j < count[:, None])
    idx = jnp.take_along_axis(order, jnp.clip(j, 0, s_src - 1), axis=1)
    seg = jnp.zeros_like(dst.seg) if reset else dst.seg
    seg = jnp.where(ok, jnp.take_along_axis(seg_rows, idx, axis=1), seg)

    def layer(d, s):
        return _place_layer(d, s, src_rows, idx, ok)
    return KVCache(_map_layers(dst.k, src.k, layer), _map_layers(dst.v, src.v, layer), seg)


def prefill_delta(params: Params, config: ModelConfig, cache: KVCache, tokens: jax.Array,
                  lengths: jax.Array, offsets: jax.Array, *, prompt_slots: int,
                  unroll: int | bool = 1, attn_impl: str = "einsum") -> tuple[jax.Array, KVCache]:
    """Run left-padded deltas tokens [B, D] (real lengths [B] >= 1) at RoPE positions
    offsets[r] .. offsets[r] + lengths[r] - 1 into cache slots prompt_slots - lengths[r] ..
    prompt_slots - 1, attending over what `place_rows` put before them; padding slots of the block
    keep their contents. Returns fp32 logits [B, V] of each row's last token and the cache.
    attn_impl: the block's attention (`layers.attention`)."""
    b, d = tokens.shape
    if d > prompt_slots:
        raise ValueError(f"prefill_delta: a delta block of {d} slots exceeds {prompt_slots} prompt slots")
    lengths = lengths.astype(jnp.int32)
    slot = jnp.arange(d, dtype=jnp.int32)[None, :]
    start = (d - lengths)[:, None]
    seg = (slot >= start).astype(jnp.int32)
    pos = offsets.astype(jnp.int32)[:, None] + jnp.maximum(slot - start, 0)
    hidden, filled = forward(params, config, tokens, pos, segment_ids=seg, cache=cache,
                             cache_index=prompt_slots - d, return_hidden=True, unroll=unroll,
                             write_padding=False, attn_impl=attn_impl)
    if filled is None:
        raise RuntimeError("prefill_delta: forward with a cache returned no cache")
    return logits_from_hidden(params, config, hidden[:, -1]), filled
