"""Continuous batching for the Sampler (`DecodeImpl(batching="continuous")`), an opt-in decode.

The static loop (`sampler.decode`) decodes a chunk's B rows together until its longest row stops:
a row that stopped early idles in the batch while the loop runs on. Here the decode loop runs over
a fixed number S of slots instead, each with its own position and KV cache; when a slot's row
stops, the slot takes the next pending row of the chunk, so up to B rows pass through S slots
and the loop ends when the last row stops, not when its batch's longest row would have.

Per call (`decode_continuous`, jitted by the Sampler):
  1. the Sampler prefills all B prompts at once, left-padded to the prompt bucket P, into a
     prompt store (a KV cache of B rows x P slots; prefill attends only over slots < P, so a
     store of P slots gives exactly the static path's prefill);
  2. the loop's slot cache has S rows x (P + max_new_tokens) slots, laid out as the static left-
     padded cache: prompt in slots 0..P-1, the i-th new token's KV at slot P + i - 1. A refill
     copies the row's P prompt slots (k, v, segment ids) from the store into the slot; slots past
     P need no clearing, because a query reads only slots at or before its own, which the row
     itself has rewritten (decoder.forward's cache contract);
  3. each loop iteration first refills the free slots (a `lax.cond`: most iterations refill
     nothing), sampling each new row's first token from its prefill logits, then runs
     `steps_per_iter` decode steps over all S slots at per-slot cache indices, recording tokens
     and log-probs of live slots into the [B, N] outputs by scatter.

Per row, the decode computes what the static loop computes: the same cache contents, positions,
masks and attention width, so greedy tokens and log-probs are the same (tests/leap_jax/
test_continuous_batching.py). Sampled tokens follow the same distribution, from another random
stream: the draw of loop step g uses `fold_in(rng, 2 g + 1)` for all slots (a refill's first
tokens `fold_in(rng, 2 g)`), so every draw has its own noise. Rows enter the slots in their order
in the chunk (the Sampler sorts prompts by length).

With KV reuse (`DecodeImpl(kv_reuse=True)`, sampling/prefix.py) a `keep` cache of B rows x the slot
cache's slots receives each row's slot when the slot is refilled and, at the end, every slot's last
row: the rows' final caches in the static loop's layout, which the Sampler keeps for their next
turn (without `keep` nothing of this runs).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from leap_jax.models.config import ModelConfig
from leap_jax.models.decoder import KVCache, LayerBuffers, Params, forward
from leap_jax.sampling.decode_base import DecodeResult, decode_rng, gather_logprob, sample_from_logits


def default_slots(batch: int, slots: int) -> int:
    """The slot count of a chunk of `batch` rows: `slots` (0 = half the batch), at most `batch`."""
    return max(1, min(batch, slots or batch // 2))


def _copy_row(dst: LayerBuffers, src: LayerBuffers, slot: jax.Array, row: jax.Array) -> LayerBuffers:
    """dst[slot, :P] = src[row] for every layer (per-layer buffers or a stacked array)."""
    if isinstance(dst, (list, tuple)):
        return tuple(jax.lax.dynamic_update_slice(
            d, jax.lax.dynamic_slice_in_dim(s, row, 1, axis=0), (slot, 0, 0, 0))
            for d, s in zip(dst, src, strict=True))
    if isinstance(src, (list, tuple)):
        raise ValueError("decode_continuous: store and slot cache must share one layout")
    return jax.lax.dynamic_update_slice(dst, jax.lax.dynamic_slice_in_dim(src, row, 1, axis=1),
                                        (0, slot, 0, 0, 0))


def _save_slot(keep: KVCache, cache: KVCache, slot: jax.Array, row: jax.Array) -> KVCache:
    """keep[row] = cache[slot] (k, v, segment ids), for a row < keep's batch; else keep as is."""
    def save(kp):
        seg = jax.lax.dynamic_update_slice(
            kp.seg, jax.lax.dynamic_slice_in_dim(cache.seg, slot, 1, axis=0), (row, 0))
        return KVCache(_copy_row(kp.k, cache.k, row, slot), _copy_row(kp.v, cache.v, row, slot), seg)
    return jax.lax.cond(row < keep.seg.shape[0], save, lambda kp: kp, keep)


def decode_continuous(params: Params, config: ModelConfig, cache: KVCache, store: KVCache,
                      logits: jax.Array, prompt_lengths: jax.Array, active: jax.Array, rng: jax.Array,
                      temperature: jax.Array, top_p: jax.Array, top_k: jax.Array,
                      stop_ids: jax.Array, max_new: jax.Array, *, max_new_tokens: int,
                      pad_id: int = 0, rng_impl: str = "threefry", attn_impl: str = "einsum",
                      attention_lengths: bool = True, skip_done_rows: bool = True,
                      filtered: bool | None = None, steps_per_iter: int = 1, keep: KVCache | None = None
                      ) -> tuple[DecodeResult, KVCache, jax.Array, KVCache | None]:
    """Decode B prefilled rows through the S slots of `cache` (see the module docstring).

    store: the prefilled prompts (B rows x P slots, left-padded); logits [B, V]: their last-token
    logits; cache: the slot cache (S rows x >= P + max_new_tokens - 1 slots, contents ignored).
    keep: None, or B rows x the slot cache's slots that receive the rows' final caches (kv_reuse).
    The other arguments are those of `sampler.decode` (`max_new`: a scalar or one budget per row;
    no `exit_live`: a slot loop has no batch to release early). Returns the [B, N] result, the slot cache,
    the number of decode steps run (each a forward over all S slots) and `keep`."""
    b, n = logits.shape[0], int(max_new_tokens)
    s_slots = cache.seg.shape[0]
    p = store.seg.shape[1]
    if keep is not None and keep.seg.shape != (b, cache.seg.shape[1]):
        raise ValueError(f"decode_continuous: keep cache {keep.seg.shape}; expected {(b, cache.seg.shape[1])}")
    if cache.seg.shape[1] < p + n - 1:
        raise ValueError(f"decode_continuous: slot cache of {cache.seg.shape[1]} slots; needs "
                         f"{p} prompt slots + {n} new tokens")
    if int(steps_per_iter) < 1:
        raise ValueError(f"decode_continuous steps_per_iter={steps_per_iter}; expected an int >= 1")
    lens = prompt_lengths.astype(jnp.int32)
    stop_ids = stop_ids.astype(jnp.int32)
    max_new = jnp.minimum(jnp.broadcast_to(jnp.asarray(max_new, jnp.int32), (b,)), n)  # per row
    rng = decode_rng(rng, rng_impl)
    order = jnp.argsort(~active.astype(bool), stable=True).astype(jnp.int32)  # active rows first
    n_active = jnp.sum(active.astype(jnp.int32))
    slot_ids = jnp.arange(s_slots, dtype=jnp.int32)

    def is_stop(tok):
        return jnp.any(tok[:, None] == stop_ids[None, :], axis=-1)

    def record(out, rows, col, tok, lg, live):
        """Write live slots' tokens at (row, col) of the outputs; the others are dropped."""
        out_tok, out_lp, lengths, finished = out
        tgt = jnp.where(live, rows, b)  # row b is out of bounds: dropped
        stop = live & is_stop(tok)
        out_tok = out_tok.at[tgt, col].set(tok, mode="drop")
        out_lp = out_lp.at[tgt, col].set(gather_logprob(lg, tok), mode="drop")
        lengths = lengths.at[tgt].set(col + 1, mode="drop")
        finished = finished.at[jnp.where(stop, rows, b)].set(True, mode="drop")
        return (out_tok, out_lp, lengths, finished), stop

    def refill(st):
        g, cache, row, i, tok, live, nxt, out, keep = st
        free = ~live
        rank = jnp.cumsum(free.astype(jnp.int32)) - 1
        take = free & (rank < n_active - nxt)
        new_row = order[jnp.clip(nxt + rank, 0, b - 1)]

        def copy(ck):
            n_take = jnp.sum(take.astype(jnp.int32))
            taken = jnp.nonzero(take, size=s_slots, fill_value=0)[0].astype(jnp.int32)

            def one(j, ck):
                c, kp = ck
                sl, r = taken[j], new_row[taken[j]]
                if kp is not None:  # the slot's finished row, before the new one overwrites it
                    kp = _save_slot(kp, c, sl, row[sl])
                seg = jax.lax.dynamic_update_slice(
                    c.seg, jax.lax.dynamic_slice_in_dim(store.seg, r, 1, axis=0), (sl, 0))
                return KVCache(_copy_row(c.k, store.k, sl, r), _copy_row(c.v, store.v, sl, r), seg), kp
            return jax.lax.fori_loop(0, n_take, one, ck)

        cache, keep = copy((cache, keep))
        lg = jnp.take(logits, new_row, axis=0)
        tok0 = sample_from_logits(lg, jax.random.fold_in(rng, 2 * g), temperature, top_p, top_k,
                                  filtered)
        out, stop0 = record(out, new_row, jnp.int32(0), tok0, lg, take)
        row = jnp.where(take, new_row, row)
        i = jnp.where(take, 1, i)
        tok = jnp.where(take, tok0, tok)
        live = jnp.where(take, ~stop0 & (jnp.take(max_new, new_row) > 1), live)
        return g, cache, row, i, tok, live, nxt + jnp.sum(take.astype(jnp.int32)), out, keep

    def step(st):
        g, cache, row, i, tok, live, nxt, out, keep = st
        max_len = cache.seg.shape[1]
        r = jnp.clip(row, 0, b - 1)
        pos = (jnp.take(lens, r) + i - 1)[:, None]
        idx = jnp.clip(p + i - 1, 0, max_len - 1)  # a dead slot writes its own, unread slots
        lg, cache = forward(params, config, tok[:, None], jnp.maximum(pos, 0), cache=cache,
                            cache_index=idx, attn_impl=attn_impl, attention_lengths=attention_lengths,
                            live_rows=live if skip_done_rows else None)  # idle slots' logits are dropped
        lg = lg[:, 0]
        new = sample_from_logits(lg, jax.random.fold_in(rng, 2 * g + 1), temperature, top_p,
                                 top_k, filtered)
        out, stop = record(out, row, i, new, lg, live)
        i = i + live.astype(jnp.int32)
        live = live & ~stop & (i < jnp.take(max_new, r))
        return g + 1, cache, row, i, jnp.where(live, new, tok), live, nxt, out, keep

    def pending(st):
        nxt, live = st[6], st[5]
        return (nxt < n_active) & jnp.any(~live)

    def body(st):
        st = jax.lax.cond(pending(st), refill, lambda x: x, st)
        for _ in range(int(steps_per_iter)):
            st = step(st)
        return st

    def cond(st):
        return (st[6] < n_active) | jnp.any(st[5])

    out0 = (jnp.full((b, n), pad_id, jnp.int32), jnp.zeros((b, n), jnp.float32),
            jnp.zeros((b,), jnp.int32), jnp.zeros((b,), bool))
    st = (jnp.int32(0), cache, jnp.full((s_slots,), b, jnp.int32), jnp.zeros_like(slot_ids),
          jnp.full((s_slots,), pad_id, jnp.int32), jnp.zeros((s_slots,), bool), jnp.int32(0), out0, keep)
    g, cache, row, _, _, _, _, (out_tok, out_lp, lengths, finished), keep = jax.lax.while_loop(cond, body, st)
    if keep is not None:  # every slot's last row
        keep = jax.lax.fori_loop(0, s_slots, lambda sl, kp: _save_slot(kp, cache, sl, row[sl]), keep)
    return DecodeResult(out_tok, out_lp, lengths, finished), cache, g, keep
