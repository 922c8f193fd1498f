"""Per-token log-probs (and entropies) of given targets without materialising [B, L, V] fp32 logits.

The decoder runs once to final hidden states; the vocabulary projection, log-sum-exp and target
gather then run over sequence chunks inside a `lax.scan` whose body is rematerialised
(`jax.checkpoint`), so both the forward and the backward pass hold only one [B, chunk, V] block of
fp32 logits at a time. `chunk=None` takes the plain unchunked path (reference / small inputs).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from leap_jax.models.config import ModelConfig
from leap_jax.models.decoder import Params, forward, logits_from_hidden

DEFAULT_CHUNK = 256


def _chunk_stats(params: Params, config: ModelConfig, hidden: jax.Array,
                 targets: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(log p(target), entropy) for hidden [B, C, D], targets [B, C]; both fp32 [B, C]."""
    logits = logits_from_hidden(params, config, hidden)  # fp32 [B, C, V]
    lse = jax.nn.logsumexp(logits, axis=-1)
    tgt = jnp.take_along_axis(logits, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]
    probs = jnp.exp(logits - lse[..., None])
    entropy = lse - jnp.sum(probs * logits, axis=-1)
    return tgt - lse, entropy


def hidden_logprobs(params: Params, config: ModelConfig, hidden: jax.Array, targets: jax.Array,
                    chunk: int | None = DEFAULT_CHUNK) -> tuple[jax.Array, jax.Array]:
    """(logprobs, entropy) fp32 [B, L] of `targets` from final hidden states [B, L, D]."""
    if hidden.shape[:2] != targets.shape:
        raise ValueError(f"hidden_logprobs: hidden {hidden.shape[:2]} vs targets {targets.shape}; "
                         f"expected matching [B, L]")
    b, length = targets.shape
    if chunk is None or chunk >= length:
        return _chunk_stats(params, config, hidden, targets)
    if chunk < 1:
        raise ValueError(f"hidden_logprobs: chunk={chunk}; expected a positive int or None")
    n = -(-length // chunk)
    pad = n * chunk - length
    h = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
    tg = jnp.pad(targets, ((0, 0), (0, pad)))
    h = h.reshape(b, n, chunk, -1).swapaxes(0, 1)  # [n, B, C, D]
    tg = tg.reshape(b, n, chunk).swapaxes(0, 1)

    @jax.checkpoint
    def body_fn(hc, tc):
        return _chunk_stats(params, config, hc, tc)

    def body(_, xs):
        return None, body_fn(*xs)

    _, (lp, ent) = jax.lax.scan(body, None, (h, tg))
    lp = lp.swapaxes(0, 1).reshape(b, n * chunk)[:, :length]
    ent = ent.swapaxes(0, 1).reshape(b, n * chunk)[:, :length]
    return lp, ent


def token_logprobs_and_entropy(params: Params, config: ModelConfig, tokens: jax.Array,
                               positions: jax.Array, targets: jax.Array,
                               segment_ids: jax.Array | None = None,
                               chunk: int | None = DEFAULT_CHUNK) -> tuple[jax.Array, jax.Array]:
    """(log p(targets[b, l] | tokens[b, :l+1]), entropy of that distribution), both fp32 [B, L]."""
    hidden, _ = forward(params, config, tokens, positions, segment_ids=segment_ids,
                        return_hidden=True)
    return hidden_logprobs(params, config, hidden, targets, chunk)


def token_logprobs(params: Params, config: ModelConfig, tokens: jax.Array, positions: jax.Array,
                   targets: jax.Array, segment_ids: jax.Array | None = None,
                   chunk: int | None = DEFAULT_CHUNK) -> jax.Array:
    """log p(targets[b, l] | tokens[b, :l+1]) as fp32 [B, L] (targets are usually tokens shifted
    left by one). Values at padding positions are meaningless; mask them with segment_ids."""
    return token_logprobs_and_entropy(params, config, tokens, positions, targets,
                                      segment_ids, chunk)[0]
