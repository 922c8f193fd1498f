"""Advantages: group baselines (GRPO z-score, Dr. GRPO mean, RLOO / TRLOO), LEAP credit, and GAE.

Group ops take `values` shaped [num_groups, G, ...] and reduce over `axis` (default 1, the G
rollouts of a group): pass [num_groups, G] rewards for per-rollout baselines, [num_groups, G, T]
returns with axis=1 for per-(task, turn) groups (TRLOO), or with axis=(1, 2) to pool all
turn-samples of a task (Kevin). `mask` (broadcastable to `values`: a row mask [num_groups, G] is
expanded over trailing axes) selects valid entries; `group_mask` [num_groups] drops padding groups.
Masked entries always get 0, and a group with no information gives exact zeros, never NaN.
"""
from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from leap_jax.rl._masks import Array, check_turn_shape, valid_rows
from leap_jax.rl.rewards import KEVIN_GAMMA, discounted_returns, rank_reward

DEFAULT_EPS = 1e-6


def _group_mask_full(values: jnp.ndarray, mask: Array | None, group_mask: Array | None) -> jnp.ndarray:
    if values.ndim < 2:
        raise ValueError(f"values must be at least [num_groups, G]; got shape {tuple(values.shape)}")
    m = jnp.ones(values.shape, bool)
    if mask is not None:
        mask = jnp.asarray(mask, dtype=bool)
        if mask.ndim < values.ndim and mask.shape == values.shape[:mask.ndim]:
            mask = mask.reshape(mask.shape + (1,) * (values.ndim - mask.ndim))
        try:
            m = m & jnp.broadcast_to(mask, values.shape)
        except ValueError:
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not fit values of shape "
                             f"{tuple(values.shape)}") from None
    if group_mask is not None:
        gm = jnp.asarray(group_mask, dtype=bool)
        if gm.shape != values.shape[:1]:
            raise ValueError(f"group_mask must have shape {values.shape[:1]}; got {tuple(gm.shape)}")
        m = m & gm.reshape(gm.shape + (1,) * (values.ndim - 1))
    return m


def _axes(axis: int | Sequence[int], ndim: int) -> tuple[int, ...]:
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    norm = tuple(a % ndim for a in axes)
    if 0 in norm:
        raise ValueError(f"axis={axis!r} includes the group axis 0; groups never mix")
    return norm


def _count_sum(values: jnp.ndarray, m: jnp.ndarray, axes: tuple[int, ...]):
    n = jnp.sum(m, axis=axes, keepdims=True).astype(values.dtype)
    s = jnp.sum(jnp.where(m, values, 0.0), axis=axes, keepdims=True)
    return n, s


def group_zscore(values: Array, mask: Array | None = None, group_mask: Array | None = None, *,
                 axis: int | Sequence[int] = 1, eps: float = DEFAULT_EPS, ddof: int = 0) -> jnp.ndarray:
    """GRPO advantage A = (r - mean_g) / (std_g + eps) over each group's valid entries.

    std uses `ddof` (default 0, the population std; ddof=1 gives the unbiased std that
    torch.std / TRL use). `eps` (default 1e-6) is added to the std, not the variance. A group whose
    valid values are all equal, or that has <= ddof valid entries, gets exact zeros.
    """
    values = jnp.asarray(values, jnp.float32)
    m = _group_mask_full(values, mask, group_mask)
    axes = _axes(axis, values.ndim)
    n, s = _count_sum(values, m, axes)
    mean = s / jnp.maximum(n, 1.0)
    centred = jnp.where(m, values - mean, 0.0)
    var = jnp.sum(centred * centred, axis=axes, keepdims=True) / jnp.maximum(n - ddof, 1.0)
    hi = jnp.max(jnp.where(m, values, -jnp.inf), axis=axes, keepdims=True)
    lo = jnp.min(jnp.where(m, values, jnp.inf), axis=axes, keepdims=True)
    informative = (hi > lo) & (n > ddof)
    adv = centred / (jnp.sqrt(var) + eps)
    return jnp.where(m & informative, adv, 0.0)


def group_mean_baseline(values: Array, mask: Array | None = None, group_mask: Array | None = None, *,
                        axis: int | Sequence[int] = 1) -> jnp.ndarray:
    """Dr. GRPO advantage A = r - mean_g (no std division) over each group's valid entries."""
    values = jnp.asarray(values, jnp.float32)
    m = _group_mask_full(values, mask, group_mask)
    axes = _axes(axis, values.ndim)
    n, s = _count_sum(values, m, axes)
    return jnp.where(m, values - s / jnp.maximum(n, 1.0), 0.0)


def leave_one_out(values: Array, mask: Array | None = None, group_mask: Array | None = None, *,
                  axis: int | Sequence[int] = 1) -> jnp.ndarray:
    """RLOO / TRLOO advantage A_i = R_i - mean_{j != i} R_j over each group's valid entries.

    With a single valid entry in a group, A_i = R_i (Dr. Kernel's single-sample rule). With N >= 2
    valid entries this equals N / (N - 1) * (R_i - mean R). For TRLOO pass gamma=1 returns
    [num_groups, G, T] with mask = attempted and axis=1: each (task, turn) is one group.
    """
    values = jnp.asarray(values, jnp.float32)
    m = _group_mask_full(values, mask, group_mask)
    axes = _axes(axis, values.ndim)
    n, s = _count_sum(values, m, axes)
    others = (s - values) / jnp.maximum(n - 1.0, 1.0)
    adv = jnp.where(n >= 2, values - others, values)
    return jnp.where(m, adv, 0.0)


def _turn_mask(scores: jnp.ndarray, attempted: Array | None, row_mask: Array | None,
               group_mask: Array | None) -> jnp.ndarray:
    check_turn_shape("scores", scores)
    att = jnp.ones(scores.shape, bool) if attempted is None else jnp.asarray(attempted, dtype=bool)
    if att.shape != scores.shape:
        raise ValueError(f"attempted must have the shape of scores {tuple(scores.shape)}; got {tuple(att.shape)}")
    return att & valid_rows(scores.shape, row_mask, group_mask)[..., None]


def kevin_advantages(scores: Array, attempted: Array | None = None, row_mask: Array | None = None,
                     group_mask: Array | None = None, *, gamma: float = KEVIN_GAMMA,
                     eps: float = DEFAULT_EPS) -> jnp.ndarray:
    """Kevin baseline [num_groups, G, T]: discounted returns of per-turn scores (`kevin_scores`),
    z-scored over all attempted turn-samples of each task (one group = G x T samples)."""
    scores = jnp.asarray(scores, jnp.float32)
    m = _turn_mask(scores, attempted, row_mask, group_mask)
    returns = discounted_returns(scores, m, gamma)
    return group_zscore(returns, m, axis=(1, 2), eps=eps)


def trloo_advantages(scores: Array, attempted: Array | None = None, row_mask: Array | None = None,
                     group_mask: Array | None = None) -> jnp.ndarray:
    """Dr. Kernel's TRLOO [num_groups, G, T]: gamma = 1 returns of per-turn scores, leave-one-out
    per (task, turn) over the rows that attempted that turn (one sample: A = R)."""
    scores = jnp.asarray(scores, jnp.float32)
    m = _turn_mask(scores, attempted, row_mask, group_mask)
    returns = discounted_returns(scores, m, 1.0)
    return leave_one_out(returns, m, axis=1)


def trajectory_credit(row_advantage: Array, attempted: Array) -> jnp.ndarray:
    """LEAP trajectory credit: every attempted turn of rollout i gets A_i = r_i, [num_groups, G, T]."""
    row_advantage = jnp.asarray(row_advantage, jnp.float32)
    attempted = jnp.asarray(attempted, dtype=bool)
    check_turn_shape("attempted", attempted)
    if attempted.shape[:2] != row_advantage.shape:
        raise ValueError(f"row_advantage {tuple(row_advantage.shape)} must be the [num_groups, G] of "
                         f"attempted {tuple(attempted.shape)}")
    return jnp.where(attempted, row_advantage[..., None], 0.0)


def per_turn_credit(keys: Array, attempted: Array, row_mask: Array | None = None,
                    group_mask: Array | None = None, **rank_kwargs) -> jnp.ndarray:
    """Per-turn credit option [num_groups, G, T]: turn t's response is ranked among the group's rows
    that attempted turn t, by the same outcome keys (so a row solving on turn t beats the peers
    still debugging after it, and loses to none of them). Turn 1 equals trajectory credit; later turns
    compare only rollouts that were still failing, so a late fix is not punished against early solves.
    `rank_kwargs` (num_turns, speedup, status_rank) go to `rank_reward`.
    """
    keys = jnp.asarray(keys, jnp.int32)
    attempted = jnp.asarray(attempted, dtype=bool)
    check_turn_shape("attempted", attempted)
    valid = valid_rows(keys.shape, row_mask, group_mask)

    def one_turn(att_t):
        return rank_reward(keys, att_t & valid, **rank_kwargs)

    per_turn = jax.vmap(one_turn, in_axes=2, out_axes=2)(attempted)
    return jnp.where(attempted & valid[..., None], per_turn, 0.0)


def token_advantages(sample_advantage: Array, seq_group: Array, seq_row: Array,
                     token_turn: Array) -> jnp.ndarray:
    """Spread per-(row, turn) advantages onto tokens: out[b, l] = adv[seq_group[b], seq_row[b], token_turn[b, l]].

    `sample_advantage` [num_groups, G, T]; `seq_group`, `seq_row` int [B] say which rollout each
    training sequence holds; `token_turn` int [B, L] is the 0-based turn of each trainable token and
    -1 (or >= T) for prompt, feedback and padding tokens, which get 0. A sequence may hold one turn or
    a whole multi-turn conversation.
    """
    adv = jnp.asarray(sample_advantage, jnp.float32)
    check_turn_shape("sample_advantage", adv)
    token_turn = jnp.asarray(token_turn, jnp.int32)
    big_t = adv.shape[-1]
    per_seq = adv[jnp.asarray(seq_group, jnp.int32), jnp.asarray(seq_row, jnp.int32)]   # [B, T]
    ok = (token_turn >= 0) & (token_turn < big_t)
    got = jnp.take_along_axis(per_seq, jnp.clip(token_turn, 0, big_t - 1), axis=1)
    return jnp.where(ok, got, 0.0)


def gae(rewards: Array, values: Array, mask: Array, gamma: float = 1.0, lam: float = 1.0,
        bootstrap_value: Array | None = None) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Generalised Advantage Estimation over tokens [B, L] as a reverse `lax.scan`; (advantages, returns).

    Only positions with mask True are time steps of the trajectory; masked positions (prompt,
    feedback, padding) are skipped, so the step after a valid token is the next valid token.
    delta_t = r_t + gamma * V_next - V_t, A_t = delta_t + gamma * lam * A_next, where after the last
    valid step V_next = bootstrap_value (default 0: the episode ends) and A_next = 0. Rewards at
    masked positions are ignored (put the outcome reward on the last trainable token). Returns
    (value targets) = A + V. Both outputs are 0 at masked positions. gamma and lam may be traced.
    """
    rewards = jnp.asarray(rewards, jnp.float32)
    values = jnp.asarray(values, jnp.float32)
    mask = jnp.asarray(mask, dtype=bool)
    if rewards.ndim != 2 or values.shape != rewards.shape or mask.shape != rewards.shape:
        raise ValueError(f"gae needs rewards, values and mask of one [B, L] shape; got "
                         f"{tuple(rewards.shape)}, {tuple(values.shape)}, {tuple(mask.shape)}")
    gamma_t = jnp.asarray(gamma, jnp.float32)
    lam_t = jnp.asarray(lam, jnp.float32)
    b = rewards.shape[0]
    v_end = jnp.zeros((b,), jnp.float32) if bootstrap_value is None else jnp.asarray(bootstrap_value, jnp.float32)

    def step(carry, xs):
        next_v, next_a = carry
        r, v, m = xs
        delta = r + gamma_t * next_v - v
        a = delta + gamma_t * lam_t * next_a
        carry = (jnp.where(m, v, next_v), jnp.where(m, a, next_a))
        return carry, jnp.where(m, a, 0.0)

    _, adv_t = jax.lax.scan(step, (v_end, jnp.zeros((b,), jnp.float32)),
                            (rewards.T, values.T, mask.T), reverse=True)
    adv = adv_t.T
    return adv, jnp.where(mask, adv + values, 0.0)
