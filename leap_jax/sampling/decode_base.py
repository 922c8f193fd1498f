"""What every decode loop shares (the plain loop in sampler.py, the speculative one in speculative.py):
the array result, drawing one token per row from logits, the sampled token's log-prob, the loop's inputs.

A module below the decode strategies so that each of them imports it and none imports another.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from leap_jax.sampling.decode_impl import RNG_IMPLS


class DecodeResult(NamedTuple):
    """Array-level result of `decode` (B rows, N = static max new tokens)."""
    tokens: jax.Array    # [B, N] int32; pad_id after a row's end
    logprobs: jax.Array  # [B, N] fp32; 0 after a row's end
    lengths: jax.Array   # [B] int32 generated tokens per row (stop token included)
    finished: jax.Array  # [B] bool: the row emitted a stop id


# ------------------------------------------------------------------------------ token sampling
def _filter_top_k_top_p(scaled: jax.Array, top_p: jax.Array, top_k: jax.Array) -> jax.Array:
    """Mask (to -inf) logits outside the top-k set and then outside the top-p nucleus."""
    v = scaled.shape[-1]
    desc = jnp.flip(jnp.sort(scaled, axis=-1), axis=-1)
    rank = jnp.arange(v, dtype=jnp.int32)[None, :]
    k = jnp.where(top_k > 0, jnp.minimum(top_k, v), v)
    keep_k = rank < k
    probs = jax.nn.softmax(jnp.where(keep_k, desc, -jnp.inf), axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs  # mass strictly above each rank
    keep = keep_k & (before < top_p)
    n_keep = jnp.maximum(jnp.sum(keep, axis=-1), 1)
    threshold = jnp.take_along_axis(desc, (n_keep - 1)[:, None], axis=-1)
    return jnp.where(scaled >= threshold, scaled, -jnp.inf)


def sample_from_logits(logits: jax.Array, key: jax.Array, temperature: jax.Array,
                       top_p: jax.Array, top_k: jax.Array, filtered: bool | None = None) -> jax.Array:
    """One token per row from fp32 logits [B, V]; all settings may be traced scalars.

    filtered: static choice of the top-k/top-p filter (True: always, False: never, the settings
    must then be off); None decides at run time with a `lax.cond` on the traced settings."""
    logits = logits.astype(jnp.float32)
    temperature = jnp.asarray(temperature, jnp.float32)
    # Greedy is selected with `where`, not a second `lax.cond` (each cond costs a device->host
    # predicate read per decode step on GPU).
    greedy = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    scaled = tempered_filtered(logits, temperature, top_p, top_k, filtered)
    sampled = jax.random.categorical(key, scaled, axis=-1).astype(jnp.int32)
    return jnp.where(temperature <= 0.0, greedy, sampled)


def tempered_filtered(logits: jax.Array, temperature: jax.Array | float, top_p: jax.Array | float,
                      top_k: jax.Array | int, filtered: bool | None = None) -> jax.Array:
    """fp32 logits [B, V] divided by the temperature, top-k/top-p filtered (masked to -inf): what
    sampling draws from. `filtered` as in `sample_from_logits`; the sort-based filter sits behind a
    cond when undecided because it is far more expensive than the draw and off by default."""
    top_p = jnp.asarray(top_p, jnp.float32)
    top_k = jnp.asarray(top_k, jnp.int32)
    scaled = logits.astype(jnp.float32) / jnp.maximum(jnp.asarray(temperature, jnp.float32), 1e-6)
    if filtered is None:
        return jax.lax.cond((top_k > 0) | (top_p < 1.0),
                            lambda s: _filter_top_k_top_p(s, top_p, top_k), lambda s: s, scaled)
    return _filter_top_k_top_p(scaled, top_p, top_k) if filtered else scaled


def decode_rng(rng: jax.Array, rng_impl: str) -> jax.Array:
    """The decode loop's key for `rng_impl` (DecodeImpl.rng_impl): threefry as given, or an XLA
    RngBitGenerator key derived from it (far cheaper than threefry for [B, V] draws)."""
    if rng_impl == "rbg":
        return jax.random.wrap_key_data(jax.random.bits(rng, (4,), jnp.uint32), impl="unsafe_rbg")
    if rng_impl != "threefry":
        raise ValueError(f"rng_impl={rng_impl!r}; expected one of {RNG_IMPLS}")
    return rng


def gather_logprob(logits: jax.Array, tokens: jax.Array) -> jax.Array:
    """log_softmax(logits)[token] per row, fp32."""
    lse = jax.nn.logsumexp(logits, axis=-1)
    return jnp.take_along_axis(logits, tokens[:, None], axis=-1)[:, 0] - lse


# ------------------------------------------------------------------------------ array-level API
def loop_inputs(b: int, n: int, prompt_lengths: jax.Array, prompt_slots: int, padding: str,
                stop_ids: jax.Array, max_new: jax.Array | int, exit_live: jax.Array | int, rng: jax.Array,
                rng_impl: str) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """A static decode loop's inputs: prompt lengths, the slot of the first new token, stop ids, row
    budgets (capped at the static n), the early-exit row count and the loop's key."""
    lens = prompt_lengths.astype(jnp.int32)
    # the slot of each row's first new token: one scalar with left padding (the cache writes then use
    # one dynamic_update_slice, not a per-row scatter)
    base = jnp.int32(prompt_slots) if padding == "left" else lens
    max_new = jnp.minimum(jnp.broadcast_to(jnp.asarray(max_new, jnp.int32), (b,)), n)
    return (lens, base, stop_ids.astype(jnp.int32), max_new, jnp.asarray(exit_live, jnp.int32),
            decode_rng(rng, rng_impl))
