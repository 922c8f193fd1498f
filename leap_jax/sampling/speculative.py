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
chain. Pure and jittable; the decode loop does not use them yet.
"""
from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from leap_jax.sampling.sampler import _filter_top_k_top_p


def check_draft_settings(ngrams: Sequence[int], k: int) -> tuple[tuple[int, ...], int]:
    """The n-gram sizes (distinct, ascending) and draft length, or ValueError naming the bad value."""
    ns = tuple(sorted({int(n) for n in ngrams}))
    if not ns or ns[0] < 1:
        raise ValueError(f"draft ngrams={tuple(ngrams)!r}; expected one or more ints >= 1")
    if int(k) < 1:
        raise ValueError(f"draft length k={k!r}; expected an int >= 1")
    return ns, int(k)


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
    top_p = jnp.asarray(top_p, jnp.float32)
    top_k = jnp.asarray(top_k, jnp.int32)
    scaled = (lg / jnp.maximum(temperature, 1e-6)).reshape(b * k1, v)
    if filtered is None:
        scaled = jax.lax.cond((top_k > 0) | (top_p < 1.0),
                              lambda s: _filter_top_k_top_p(s, top_p, top_k), lambda s: s, scaled)
    elif filtered:
        scaled = _filter_top_k_top_p(scaled, top_p, top_k)
    scaled = scaled.reshape(b, k1, v)

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
