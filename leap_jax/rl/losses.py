"""Losses (DESIGN 4.7): PPO/GRPO clipped surrogate with k3 KL, clipped value loss, aggregation modes.

Every loss returns `(sum, denom, metrics)` for one micro-batch, where the batch loss is
`total_sum / total_denom` and both sums and denominators ADD across micro-batches. Gradient
accumulation is therefore exact: accumulate grad(sum_k) over micro-batches, then divide by the
summed denominator (the denominators do not depend on the parameters). Micro-batches must split on
sequence (row) boundaries: the sequence-mean modes need each sequence's full token count.

Shapes: per-token arrays [B, L] (`mask` True on trainable tokens); advantages [B, L] or [B].
Metrics are sums and counts too (exact to combine with `combine_metrics`; `finalize_metrics`
turns them into means), computed under stop_gradient.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from leap_jax.rl._masks import Array
from leap_jax.rl.options import AGGREGATION_MODES



def _check_tokens(name: str, x: jnp.ndarray, shape: tuple[int, ...]) -> None:
    if x.shape != shape:
        raise ValueError(f"{name} must have the [B, L] shape {shape} of mask; got {tuple(x.shape)}")


def _segment_mask(m: jnp.ndarray, segment_ids: Array | None) -> jnp.ndarray:
    """Trainable tokens, minus padding slots (segment id 0) of packed rows."""
    if segment_ids is None:
        return m
    seg = jnp.asarray(segment_ids)
    _check_tokens("segment_ids", seg, m.shape)
    return m & (seg > 0)


def _per_sequence(xm: jnp.ndarray, m: jnp.ndarray, segment_ids: Array | None):
    """(token sums, token counts) per sequence: one per row, or per (row, segment id > 0) when packed."""
    if segment_ids is None:
        return jnp.sum(xm, axis=1), jnp.sum(m, axis=1).astype(jnp.float32)
    seg = jnp.asarray(segment_ids, jnp.int32)
    _check_tokens("segment_ids", seg, m.shape)
    b, length = m.shape
    # a sequence is a contiguous run of one segment id (any ids): run index 1..L within its row
    starts = jnp.concatenate([jnp.ones((b, 1), bool), seg[:, 1:] != seg[:, :-1]], axis=1)
    run = jnp.cumsum(starts, axis=1, dtype=jnp.int32)
    flat = (jnp.arange(b, dtype=jnp.int32)[:, None] * (length + 1) + run).reshape(-1)
    keep = (m & (seg > 0)).reshape(-1)
    n_seg = b * (length + 1)
    sums = jax.ops.segment_sum(jnp.where(keep, xm.reshape(-1), 0.0), flat, num_segments=n_seg)
    counts = jax.ops.segment_sum(keep.astype(jnp.float32), flat, num_segments=n_seg)
    return sums, counts


def aggregate(per_token: Array, mask: Array, mode: str = "token-mean",
              max_len: float | None = None,
              segment_ids: Array | None = None) -> tuple[jnp.ndarray, jnp.ndarray]:
    """(sum, denom) of a per-token quantity [B, L] under `mode`; the loss is sum / denom.

    - token-mean: sum of masked tokens / number of masked tokens (DAPO / TRL "bnpo").
    - seq-mean-token-mean: sum over sequences of each sequence's token mean / number of sequences
      with at least one masked token (original GRPO / TRL "grpo").
    - seq-mean-token-sum-norm: sum over sequences of (token sum / max_len) / number of sequences
      with at least one masked token (Dr. GRPO / TRL "dr_grpo"); `max_len` is a constant such as the
      maximum response length, the same for every micro-batch.
    A sequence is a row of the batch; with `segment_ids` [B, L] (packed rows, 0 = padding) it is
    each contiguous run of one segment id within a row instead, and tokens of segment 0 never count.
    """
    x = jnp.asarray(per_token, jnp.float32)
    m = jnp.asarray(mask, dtype=bool)
    if x.ndim != 2:
        raise ValueError(f"per_token must be [B, L]; got shape {tuple(x.shape)}")
    _check_tokens("per_token", x, m.shape)
    m = _segment_mask(m, segment_ids)
    xm = jnp.where(m, x, 0.0)
    if mode == "token-mean":
        return jnp.sum(xm), jnp.sum(m).astype(jnp.float32)
    if mode not in AGGREGATION_MODES:
        raise ValueError(f"unknown aggregation mode {mode!r}; expected one of {', '.join(AGGREGATION_MODES)}")
    row_sum, count = _per_sequence(xm, m, segment_ids)
    seqs = jnp.sum(count > 0).astype(jnp.float32)
    if mode == "seq-mean-token-mean":
        return jnp.sum(row_sum / jnp.maximum(count, 1.0)), seqs
    if max_len is None:  # seq-mean-token-sum-norm
        raise ValueError("aggregate mode 'seq-mean-token-sum-norm' needs max_len (the constant token "
                         "count each sequence's sum is divided by, e.g. the max response length)")
    if isinstance(max_len, (int, float)) and max_len <= 0:
        raise ValueError(f"max_len must be positive; got {max_len!r}")
    return jnp.sum(row_sum) / jnp.asarray(max_len, jnp.float32), seqs


def finalize_loss(total_sum: Array, total_denom: Array) -> jnp.ndarray:
    """total_sum / total_denom, and 0 (not NaN) for an empty batch."""
    d = jnp.asarray(total_denom, jnp.float32)
    return jnp.where(d > 0, jnp.asarray(total_sum, jnp.float32) / jnp.maximum(d, 1e-30), 0.0)


def entropy_from_logits(logits: Array) -> jnp.ndarray:
    """Per-token entropy -sum_v p log p, fp32, of logits [B, L, V] -> [B, L]."""
    lg = jnp.asarray(logits, jnp.float32)
    logp = jax.nn.log_softmax(lg, axis=-1)
    return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


def k3_kl(logp: Array, ref_logp: Array) -> jnp.ndarray:
    """Schulman's k3 estimator of KL(pi || ref) per token: exp(ref - logp) - (ref - logp) - 1 (>= 0)."""
    d = jnp.asarray(ref_logp, jnp.float32) - jnp.asarray(logp, jnp.float32)
    return jnp.exp(d) - d - 1.0


def policy_loss(logp: Array, old_logp: Array, advantages: Array, mask: Array, *,
                eps_low: float = 0.2, eps_high: float = 0.28, dual_clip: float | None = None,
                ref_logp: Array | None = None, kl_beta: float = 0.0, mode: str = "token-mean",
                max_len: float | None = None, entropy: Array | None = None,
                logits: Array | None = None,
                segment_ids: Array | None = None
                ) -> tuple[jnp.ndarray, jnp.ndarray, dict[str, jnp.ndarray]]:
    """PPO-clip surrogate with optional dual clip and k3 KL, aggregated as (sum, denom, metrics).

    Per trainable token, with ratio = exp(logp - old_logp):
        pg   = max(-A * ratio, -A * clip(ratio, 1 - eps_low, 1 + eps_high))
        pg   = min(pg, -dual_clip * A)   where A < 0, if dual_clip (c > 1, e.g. 3) is given
        loss = pg + kl_beta * (exp(ref_logp - logp) - (ref_logp - logp) - 1)   (KL term iff ref_logp)
    then `aggregate(loss, mask, mode, max_len, segment_ids)`. The log-ratios are zeroed at masked positions
    before exp, so garbage log-probs in padding cannot make NaN gradients.

    Metrics (sums over trainable tokens plus `num_tokens`): pg_sum, kl_sum (k3 to ref),
    clip_low (A < 0 and ratio < 1 - eps_low), clip_high (A > 0 and ratio > 1 + eps_high),
    dual_clipped, approx_kl_sum (k3 estimate of KL(old || new): ratio - 1 - log ratio),
    ratio_sum, ratio_sq_sum, ratio_max, ratio_min, and entropy_sum when `entropy` [B, L] or
    `logits` [B, L, V] is given.
    """
    m = jnp.asarray(mask, dtype=bool)
    if m.ndim != 2:
        raise ValueError(f"mask must be [B, L]; got shape {tuple(m.shape)}")
    m = _segment_mask(m, segment_ids)
    logp = jnp.asarray(logp, jnp.float32)
    old_logp = jnp.asarray(old_logp, jnp.float32)
    _check_tokens("logp", logp, m.shape)
    _check_tokens("old_logp", old_logp, m.shape)
    adv = jnp.asarray(advantages, jnp.float32)
    if adv.shape == m.shape[:1]:
        adv = jnp.broadcast_to(adv[:, None], m.shape)
    _check_tokens("advantages ([B] or [B, L])", adv, m.shape)
    if isinstance(eps_low, (int, float)) and not 0.0 <= eps_low < 1.0:
        raise ValueError(f"eps_low={eps_low!r}; expected 0 <= eps_low < 1")
    if isinstance(eps_high, (int, float)) and eps_high < 0.0:
        raise ValueError(f"eps_high={eps_high!r}; expected >= 0")
    if dual_clip is not None and isinstance(dual_clip, (int, float)) and dual_clip <= 1.0:
        raise ValueError(f"dual_clip={dual_clip!r}; expected a constant > 1 (e.g. 3) or None")
    if ref_logp is None and isinstance(kl_beta, (int, float)) and kl_beta != 0.0:
        raise ValueError(f"kl_beta={kl_beta!r} needs ref_logp (the frozen reference's log-probs)")

    log_ratio = jnp.where(m, logp - old_logp, 0.0)
    ratio = jnp.exp(log_ratio)
    clipped_ratio = jnp.clip(ratio, 1.0 - eps_low, 1.0 + eps_high)
    pg = jnp.maximum(-adv * ratio, -adv * clipped_ratio)
    dual_active = jnp.zeros(m.shape, bool)
    if dual_clip is not None:
        cap = -jnp.asarray(dual_clip, jnp.float32) * adv
        dual_active = (adv < 0) & (pg > cap)
        pg = jnp.where(adv < 0, jnp.minimum(pg, cap), pg)
    loss = pg
    kl = jnp.zeros(m.shape, jnp.float32)
    if ref_logp is not None:
        ref_logp = jnp.asarray(ref_logp, jnp.float32)
        _check_tokens("ref_logp", ref_logp, m.shape)
        kl = k3_kl(logp, jnp.where(m, ref_logp, logp))
        loss = loss + jnp.asarray(kl_beta, jnp.float32) * kl
    total, denom = aggregate(loss, m, mode, max_len, segment_ids)

    sg = jax.lax.stop_gradient
    r, a, fm = sg(ratio), sg(adv), m.astype(jnp.float32)
    metrics = {
        "num_tokens": jnp.sum(fm),
        "pg_sum": jnp.sum(jnp.where(m, sg(pg), 0.0)),
        "kl_sum": jnp.sum(jnp.where(m, sg(kl), 0.0)),
        "clip_low": jnp.sum(m & (a < 0) & (r < 1.0 - eps_low)).astype(jnp.float32),
        "clip_high": jnp.sum(m & (a > 0) & (r > 1.0 + eps_high)).astype(jnp.float32),
        "dual_clipped": jnp.sum(m & dual_active).astype(jnp.float32),
        "approx_kl_sum": jnp.sum(jnp.where(m, r - 1.0 - sg(log_ratio), 0.0)),
        "ratio_sum": jnp.sum(jnp.where(m, r, 0.0)),
        "ratio_sq_sum": jnp.sum(jnp.where(m, r * r, 0.0)),
        "ratio_max": jnp.max(jnp.where(m, r, -jnp.inf)),
        "ratio_min": jnp.min(jnp.where(m, r, jnp.inf)),
    }
    if logits is not None and entropy is None:
        lg = jnp.asarray(logits)
        if lg.shape[:2] != m.shape:
            raise ValueError(f"logits must be [B, L, V] with [B, L] = {m.shape}; got {tuple(lg.shape)}")
        entropy = entropy_from_logits(lg)
    if entropy is not None:
        ent = jnp.asarray(entropy, jnp.float32)
        _check_tokens("entropy", ent, m.shape)
        metrics["entropy_sum"] = jnp.sum(jnp.where(m, sg(ent), 0.0))
    return total, denom, metrics


def value_loss(values: Array, old_values: Array, returns: Array, mask: Array, *,
               clip_eps: float | None = 0.2, mode: str = "token-mean",
               max_len: float | None = None, segment_ids: Array | None = None
               ) -> tuple[jnp.ndarray, jnp.ndarray, dict[str, jnp.ndarray]]:
    """PPO clipped value loss per token, aggregated as (sum, denom, metrics).

        v_clip = old_values + clip(values - old_values, -clip_eps, clip_eps)
        loss   = 0.5 * max((values - returns)^2, (v_clip - returns)^2)
    With clip_eps=None: 0.5 * (values - returns)^2. Metrics: num_tokens, vf_clipped (tokens where
    the clipped term is larger), value_err_sq_sum (sum of (values - returns)^2).
    """
    m = jnp.asarray(mask, dtype=bool)
    if m.ndim != 2:
        raise ValueError(f"mask must be [B, L]; got shape {tuple(m.shape)}")
    m = _segment_mask(m, segment_ids)
    v = jnp.asarray(values, jnp.float32)
    v_old = jnp.asarray(old_values, jnp.float32)
    ret = jnp.asarray(returns, jnp.float32)
    for name, x in (("values", v), ("old_values", v_old), ("returns", ret)):
        _check_tokens(name, x, m.shape)
    err = jnp.square(v - ret)
    if clip_eps is None:
        loss = 0.5 * err
        clipped = jnp.zeros(m.shape, bool)
    else:
        if isinstance(clip_eps, (int, float)) and clip_eps < 0:
            raise ValueError(f"clip_eps={clip_eps!r}; expected >= 0 or None")
        v_clip = v_old + jnp.clip(v - v_old, -clip_eps, clip_eps)
        err_clip = jnp.square(v_clip - ret)
        loss = 0.5 * jnp.maximum(err, err_clip)
        clipped = err_clip > err
    total, denom = aggregate(loss, m, mode, max_len, segment_ids)
    sg = jax.lax.stop_gradient
    metrics = {
        "num_tokens": jnp.sum(m).astype(jnp.float32),
        "vf_clipped": jnp.sum(m & sg(clipped)).astype(jnp.float32),
        "value_err_sq_sum": jnp.sum(jnp.where(m, sg(err), 0.0)),
    }
    return total, denom, metrics


def combine_metrics(a: dict[str, jnp.ndarray], b: dict[str, jnp.ndarray]) -> dict[str, jnp.ndarray]:
    """Combine two micro-batches' metric dicts exactly: max for *_max, min for *_min, else add."""
    if set(a) != set(b):
        raise ValueError(f"metric keys differ: {sorted(set(a) ^ set(b))}")
    out = {}
    for k in a:
        if k.endswith("_max"):
            out[k] = jnp.maximum(a[k], b[k])
        elif k.endswith("_min"):
            out[k] = jnp.minimum(a[k], b[k])
        else:
            out[k] = a[k] + b[k]
    return out


def finalize_metrics(m: dict[str, jnp.ndarray]) -> dict[str, jnp.ndarray]:
    """Means from summed metrics: clip_frac, clip_low_frac, clip_high_frac, approx_kl, ratio_mean,
    ratio_std, entropy, ... (per trainable token; 0 for an empty batch); *_max/_min pass through."""
    n = m["num_tokens"]
    inv = jnp.where(n > 0, 1.0 / jnp.maximum(n, 1.0), 0.0)
    out: dict[str, jnp.ndarray] = {"num_tokens": n}
    for k, v in m.items():
        if k == "num_tokens":
            continue
        if k.endswith("_max") or k.endswith("_min"):
            out[k] = jnp.where(n > 0, v, 0.0)
        elif k.endswith("_sum"):
            out[k[:-4]] = v * inv
        else:
            out[k + "_frac"] = v * inv
    if "clip_low" in m and "clip_high" in m:
        out["clip_frac"] = (m["clip_low"] + m["clip_high"]) * inv
    if "ratio_sum" in m and "ratio_sq_sum" in m:
        mean = m["ratio_sum"] * inv
        out["ratio_std"] = jnp.sqrt(jnp.maximum(m["ratio_sq_sum"] * inv - mean * mean, 0.0))
        out["ratio_mean"] = out.pop("ratio")
        out.pop("ratio_sq", None)
    return out
