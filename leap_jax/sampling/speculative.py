"""Speculative decoding's device-side pieces: prompt-lookup drafts and their exact acceptance.

The multi-turn decode loop is kernel-bound (~96 small kernels a token on an H100), so the lever left
for generation speed is more than one token per step. Prompt lookup needs no draft model: a row's
draft is the k tokens that followed the latest earlier occurrence of its last n tokens in its own
history (prompt, earlier turns, tokens so far). Replayed on sampled multiturn rollouts of the SFT
policy (benchmarks/draft_potential.py), debugging turns take ~7 tokens a verify step at k = 8 and a
3-turn rollout ~2.5x fewer decode steps.

A draft of k tokens is verified by one forward pass over k + 1 positions (the last accepted token
and the draft). `accept_drafts` keeps the draft's leading tokens by the speculative-sampling rule
for a draft fixed by the context (a point mass): accept d_j with probability p_j(d_j), p_j the
target's tempered and filtered distribution at position j; at the first rejection draw from p_j
without d_j (the residual max(p - q, 0), renormalised); after a fully accepted draft draw one more
token from p_k. The emitted tokens follow the target exactly; with temperature 0 they are the greedy
chain (up to the float differences between one forward over k + 1 positions and k + 1 single steps).

`decode_speculative` is the static decode loop built on them (`DecodeImpl(speculate=k)`; 0 by
default, 8 in the generated multiturn and LEAP configs): each iteration drafts for every row, verifies
all drafts in one forward pass at per-row cache slots, and appends each row's accepted tokens and its
correction (stop ids and budgets cut them). It compacts to the live rows as `decode` does, and the
Sampler runs it on kv_reuse's kept caches too. On an H100 with the multiturn defaults it took the
decode loop from 3172 to 881 iterations a step and the step from 2.39 to 2.01 s
(docs/performance.md).
"""
from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from leap_jax.models.config import ModelConfig
from leap_jax.models.decoder import KVCache, Params, forward
from leap_jax.sampling.compact import compact_rows, compact_size, put_rows, take_rows
from leap_jax.sampling.decode_base import DecodeResult, gather_logprob, loop_inputs, sample_from_logits, tempered_filtered
from leap_jax.sampling.decode_impl import check_draft_settings


def lookup_drafts(history: jax.Array, length: jax.Array, ngrams: Sequence[int],
                  k: int) -> tuple[jax.Array, jax.Array]:
    """Prompt-lookup drafts for a batch.

    history [B, L] int: each row's tokens, valid at positions < length [B]. For n in `ngrams`
    (longest wins), the latest start s with history[s:s+n] == the row's last n tokens and s + n <
    length (the tail itself excluded). Returns draft [B, k] int32 (the tokens from s + n on, -1
    past draft_len) and draft_len [B] int32 (0: no occurrence)."""
    ns, k = check_draft_settings(ngrams, k)
    history = jnp.asarray(history, jnp.int32)
    b, width = history.shape
    length = jnp.asarray(length, jnp.int32)
    start = jnp.full((b,), -1, jnp.int32)
    used = jnp.zeros((b,), jnp.int32)
    for n in ns:  # ascending: a longer n-gram's hit overwrites a shorter one's
        if n >= width:
            continue
        tail_at = jnp.clip(length[:, None] - n + jnp.arange(n, dtype=jnp.int32)[None, :], 0, width - 1)
        tail = jnp.take_along_axis(history, tail_at, axis=1)  # [B, n]
        starts = width - n + 1
        match = jnp.ones((b, starts), bool)
        for j in range(n):
            match &= history[:, j:j + starts] == tail[:, j:j + 1]
        s_idx = jnp.arange(starts, dtype=jnp.int32)[None, :]
        match &= s_idx < (length - n)[:, None]
        latest = jnp.max(jnp.where(match, s_idx, -1), axis=1)
        hit = latest >= 0
        start = jnp.where(hit, latest, start)
        used = jnp.where(hit, n, used)
    first = start + used
    draft_len = jnp.where(start >= 0, jnp.clip(length - first, 0, k), 0).astype(jnp.int32)
    offs = jnp.arange(k, dtype=jnp.int32)[None, :]
    tokens = jnp.take_along_axis(history, jnp.clip(first[:, None] + offs, 0, width - 1), axis=1)
    return jnp.where(offs < draft_len[:, None], tokens, -1), draft_len


def accept_drafts(logits: jax.Array, draft: jax.Array, draft_len: jax.Array, key: jax.Array,
                  temperature: jax.Array | float, top_p: jax.Array | float, top_k: jax.Array | int,
                  filtered: bool | None = None) -> tuple[jax.Array, jax.Array]:
    """Speculative acceptance of deterministic drafts.

    logits [B, k + 1, V]: the target's logits after the last accepted token (position 0) and after
    each draft token. draft [B, k], draft_len [B] (tokens past it are ignored). Temperature, top_p
    and top_k as in `sample_from_logits` (scalars); `filtered` likewise. Returns n_accepted [B] (the
    draft's leading tokens kept) and next_token [B] (the correction or the bonus token): the row
    emits draft[:n_accepted] then next_token."""
    lg = jnp.asarray(logits, jnp.float32)
    b, k1, v = lg.shape
    k = k1 - 1
    if k < 1 or tuple(draft.shape) != (b, k):
        raise ValueError(f"accept_drafts: logits {lg.shape} and draft {tuple(draft.shape)}; expected "
                         f"logits [B, k + 1, V] with k >= 1 and draft [B, k]")
    temperature = jnp.asarray(temperature, jnp.float32)
    scaled = tempered_filtered(lg.reshape(b * k1, v), temperature, top_p, top_k, filtered).reshape(b, k1, v)

    d = jnp.clip(jnp.asarray(draft, jnp.int32), 0, v - 1)
    in_draft = jnp.arange(k, dtype=jnp.int32)[None, :] < jnp.asarray(draft_len, jnp.int32)[:, None]
    key_accept, key_draw = jax.random.split(key)
    p_draft = jnp.exp(jnp.take_along_axis(jax.nn.log_softmax(scaled[:, :k], axis=-1), d[..., None],
                                          axis=-1)[..., 0])
    greedy_ok = jnp.argmax(lg[:, :k], axis=-1).astype(jnp.int32) == d
    ok = jnp.where(temperature <= 0.0, greedy_ok, jax.random.uniform(key_accept, (b, k)) < p_draft)
    n_acc = jnp.sum(jnp.cumprod((ok & in_draft).astype(jnp.int32), axis=1), axis=1).astype(jnp.int32)

    at = n_acc[:, None, None]
    final_raw = jnp.take_along_axis(lg, at, axis=1)[:, 0]
    final = jnp.take_along_axis(scaled, at, axis=1)[:, 0]  # filtered before the rejected token goes
    rejected = n_acc < jnp.asarray(draft_len, jnp.int32)
    d_rej = jnp.take_along_axis(d, jnp.minimum(n_acc, k - 1)[:, None], axis=1)
    final = jnp.where(rejected[:, None] & (jnp.arange(v)[None, :] == d_rej), -jnp.inf, final)
    sampled = jax.random.categorical(key_draw, final, axis=-1).astype(jnp.int32)
    greedy = jnp.argmax(final_raw, axis=-1).astype(jnp.int32)
    return n_acc, jnp.where(temperature <= 0.0, greedy, sampled)


def left_aligned(tokens: jax.Array, lengths: jax.Array, padding: str, width: int) -> jax.Array:
    """Padded prompts [B, P] as a history buffer [B, width] with each row's tokens at 0..length-1."""
    b, p = tokens.shape
    if padding == "left":
        at = jnp.clip(p - lengths[:, None] + jnp.arange(p, dtype=jnp.int32)[None, :], 0, p - 1)
        tokens = jnp.take_along_axis(tokens, at, axis=1)
    return jnp.zeros((b, width), jnp.int32).at[:, :p].set(tokens.astype(jnp.int32))


def decode_speculative(params: Params, config: ModelConfig, cache: KVCache, logits: jax.Array,
                       prompt_tokens: jax.Array, prompt_lengths: jax.Array, active: jax.Array,
                       rng: jax.Array, temperature: jax.Array, top_p: jax.Array, top_k: jax.Array,
                       stop_ids: jax.Array, max_new: jax.Array, *, max_new_tokens: int, prompt_slots: int,
                       ngrams: Sequence[int], k: int, padding: str = "left", pad_id: int = 0,
                       unroll: int | bool = 1, rng_impl: str = "threefry", attn_impl: str = "einsum",
                       skip_done_rows: bool = True,
                       filtered: bool | None = None, exit_live: jax.Array | int = 0,
                       compact_factor: int = 1) -> tuple[DecodeResult, KVCache, jax.Array, jax.Array]:
    """`sampler.decode` with prompt-lookup drafts verified k at a time (see the module docstring).

    Arguments as `decode`, plus prompt_tokens [B, P] (each row's whole context, padded as `padding`:
    with kv_reuse the conversation so far, not only the tokens prefilled now) for the drafts' lookup.
    The cache needs prompt_slots + max_new_tokens + k slots: a verify pass writes k + 1 positions
    from the last accepted token on (slots past a row's accepted tokens are rewritten before anything
    reads them). compact_factor as `decode`'s: once at most ceil(B / compact_factor) rows still
    generate, the loop continues with those rows alone (their cache rows, histories and state copied
    out, the cache rows put back at the end). Returns the DecodeResult, the cache, the loop's
    iterations + 1 (verify passes and the first token's draw, as the plain loop's longest row counts)
    and the draft tokens accepted (emitted) over all rows."""
    ns, k = check_draft_settings(ngrams, k)
    b = logits.shape[0]
    n = int(max_new_tokens)
    if cache.seg.shape[1] < prompt_slots + n + k:
        raise ValueError(f"decode_speculative: a cache of {cache.seg.shape[1]} slots; expected at least "
                         f"prompt_slots + max_new_tokens + k = {prompt_slots + n + k}")
    lens, base, stop_ids, max_new, exit_live, rng = loop_inputs(
        b, n, prompt_lengths, prompt_slots, padding, stop_ids, max_new, exit_live, rng, rng_impl)
    width = prompt_tokens.shape[1] + n
    hist = left_aligned(prompt_tokens, lens, padding, width)
    cols = jnp.arange(k + 1, dtype=jnp.int32)[None, :]

    def is_stop(tok):
        return jnp.any(tok[..., None] == stop_ids, axis=-1)

    tok0 = sample_from_logits(logits, jax.random.fold_in(rng, 0), temperature, top_p, top_k, filtered)
    live0 = active
    stop0 = live0 & is_stop(tok0)
    out_tok = jnp.full((b, n), pad_id, jnp.int32).at[:, 0].set(jnp.where(live0, tok0, pad_id))
    out_lp = jnp.zeros((b, n), jnp.float32).at[:, 0].set(jnp.where(live0, gather_logprob(logits, tok0), 0.0))
    hist = hist.at[jnp.arange(b), jnp.minimum(lens, width - 1)].set(tok0)
    gen = live0.astype(jnp.int32)  # tokens generated (and recorded) per row
    done = ~active | stop0 | (max_new <= 1)
    # per-row state (prev, done, gen, finished, hist) has the loop's rows (the compact loop's: fewer);
    # out_tok / out_lp always the full batch's
    state = (jnp.int32(1), cache, tok0, out_tok, out_lp, done, gen, stop0, hist, jnp.int32(0))

    def cond(s):
        it, _, _, _, _, done, _, _, _, _ = s
        return (it < n) & (jnp.sum((~done).astype(jnp.int32)) > exit_live)

    def make_body(rows=None):
        """The loop body; `rows` (the compact loop): the full batch's row of each of the state's rows."""
        def pick(x):
            return x if rows is None or jnp.ndim(x) == 0 else jnp.take(x, rows, axis=0)
        lens_r, base_r, max_new_r = pick(lens), pick(base), pick(max_new)

        def body(s):
            it, cache, prev, out_tok, out_lp, done, gen, finished, hist, accepted = s
            r = prev.shape[0]
            draft, dlen = lookup_drafts(hist, lens_r + gen, ns, k)
            dlen = jnp.where(done, 0, jnp.clip(jnp.minimum(dlen, max_new_r - gen - 1), 0, k))
            inp = jnp.concatenate([prev[:, None], jnp.where(cols[:, 1:] <= dlen[:, None], draft, pad_id)], axis=1)
            slot = base_r + gen - 1
            pos = (lens_r + gen - 1)[:, None] + cols
            lg, cache = forward(params, config, inp, pos, cache=cache, cache_index=slot, unroll=unroll,
                                attn_impl=attn_impl,
                                live_rows=~done if skip_done_rows else None)
            # accept_drafts reads the draft up to dlen only
            n_acc, nxt = accept_drafts(lg, draft, dlen, jax.random.fold_in(rng, it), temperature, top_p, top_k,
                                       filtered)
            emitted = jnp.where(cols < n_acc[:, None], jnp.roll(inp, -1, axis=1), nxt[:, None])  # [R, k+1]
            in_run = cols <= n_acc[:, None]
            stops = in_run & is_stop(emitted)
            first_stop = jnp.argmax(stops, axis=1).astype(jnp.int32)
            stopped = jnp.any(stops, axis=1) & ~done
            count = jnp.where(done, 0, jnp.where(stopped, first_stop + 1, n_acc + 1))
            keep = cols < count[:, None]
            lp = jnp.take_along_axis(jax.nn.log_softmax(lg, axis=-1), emitted[..., None], axis=-1)[..., 0]
            out_rows = jnp.arange(r) if rows is None else rows
            at_rows = jnp.broadcast_to(out_rows[:, None], (r, k + 1))
            at = jnp.where(keep, gen[:, None] + cols, n)  # column n: dropped (out of bounds)
            out_tok = out_tok.at[at_rows, at].set(emitted, mode="drop")
            out_lp = out_lp.at[at_rows, at].set(lp, mode="drop")
            hist_rows = jnp.broadcast_to(jnp.arange(r)[:, None], (r, k + 1))
            hist = hist.at[hist_rows, jnp.where(keep, (lens_r + gen)[:, None] + cols, width)].set(
                emitted, mode="drop")
            last = jnp.where(done, prev,
                             jnp.take_along_axis(emitted, jnp.maximum(count - 1, 0)[:, None], axis=1)[:, 0])
            accepted = accepted + jnp.sum(jnp.maximum(count - 1, 0))  # all but the target's own token
            gen = gen + count
            return (it + 1, cache, last, out_tok, out_lp, done | stopped | (gen >= max_new_r), gen,
                    finished | stopped, hist, accepted)
        return body

    small = compact_size(b, compact_factor)
    if small < b:  # the full batch while more than `small` rows generate, then the live rows alone
        def wide_cond(s):
            return cond(s) & (jnp.sum((~s[5]).astype(jnp.int32)) > small)

        state = jax.lax.while_loop(wide_cond, make_body(), state)
        it, full, prev, out_tok, out_lp, done, gen, finished, hist, accepted = state
        rows = compact_rows(done, small)

        def take(x):
            return jnp.take(x, rows, axis=0)
        state = (it, take_rows(full, rows), take(prev), out_tok, out_lp, take(done), take(gen),
                 take(finished), take(hist), accepted)
        it, part, _, out_tok, out_lp, _, gen_r, finished_r, _, accepted = jax.lax.while_loop(
            cond, make_body(rows), state)
        return (DecodeResult(out_tok, out_lp, gen.at[rows].set(gen_r), finished.at[rows].set(finished_r)),
                put_rows(full, rows, part), it, accepted)
    it, cache, _, out_tok, out_lp, _, gen, finished, _, accepted = jax.lax.while_loop(cond, make_body(), state)
    return DecodeResult(out_tok, out_lp, gen, finished), cache, it, accepted
