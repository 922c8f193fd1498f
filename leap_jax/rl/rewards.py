"""Rewards (DESIGN 4.5, 4.6): the rank-based tournament reward and the baselines' rewards.

Shapes: per-turn data is [num_groups, G, T] (`correct` bool, `attempted` bool: pruned rows have no
later attempts, `speedup` float, `status_rank` int from `kernels_env.Status.rank`); per-row data is
[num_groups, G]; `row_mask` [num_groups, G] and `group_mask` [num_groups] mark padding (the trainer
also masks `env_error` rows). Masked rows always get reward 0. All functions are pure jnp and work
under `jax.jit` / `jax.vmap` with static shapes.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from leap_jax.rl._masks import Array, check_turn_shape, default_attempted, valid_rows

KEVIN_CORRECT_BONUS = 0.3
KEVIN_GAMMA = 0.4


def outcome_keys(correct: Array, attempted: Array | None = None) -> jnp.ndarray:
    """Outcome key int32 [num_groups, G]: the first turn (1..T) correct on an attempted turn, else T+1."""
    correct = jnp.asarray(correct, dtype=bool)
    check_turn_shape("correct", correct)
    attempted = default_attempted(correct, attempted)
    big_t = correct.shape[-1]
    hit = correct & attempted
    first = jnp.argmax(hit, axis=-1).astype(jnp.int32) + 1
    return jnp.where(jnp.any(hit, axis=-1), first, big_t + 1).astype(jnp.int32)


def first_correct_value(values: Array, correct: Array, attempted: Array | None = None,
                        fill: float = 0.0) -> jnp.ndarray:
    """values[..., t*] at the first correct attempted turn t* per row ([num_groups, G]); `fill` if none.

    Gives the speedup finer key for `rank_reward` from per-turn speedups.
    """
    correct = jnp.asarray(correct, dtype=bool)
    check_turn_shape("correct", correct)
    attempted = default_attempted(correct, attempted)
    values = jnp.asarray(values)
    hit = correct & attempted
    idx = jnp.argmax(hit, axis=-1)
    got = jnp.take_along_axis(values, idx[..., None], axis=-1)[..., 0]
    return jnp.where(jnp.any(hit, axis=-1), got, jnp.asarray(fill, values.dtype))


def last_attempted_value(values: Array, attempted: Array, fill: float = 0.0) -> jnp.ndarray:
    """values[..., t] at each row's last attempted turn ([num_groups, G]); `fill` for rows with none.

    Gives the status finer key for `rank_reward` (the final status of a never-solved rollout).
    """
    values = jnp.asarray(values)
    attempted = jnp.asarray(attempted, dtype=bool)
    check_turn_shape("attempted", attempted)
    t = jnp.arange(attempted.shape[-1])
    idx = jnp.max(jnp.where(attempted, t, -1), axis=-1)
    got = jnp.take_along_axis(values, jnp.maximum(idx, 0)[..., None], axis=-1)[..., 0]
    return jnp.where(idx >= 0, got, jnp.asarray(fill, values.dtype))


def rank_reward(keys: Array, row_mask: Array | None = None, group_mask: Array | None = None, *,
                num_turns: int | None = None, speedup: Array | None = None,
                status_rank: Array | None = None) -> jnp.ndarray:
    """Rank-based tournament reward float32 [num_groups, G] (DESIGN 4.5).

    Within each group, over valid rows only: wins_i = peers with a worse outcome, losses_i = peers
    with a better one, ties count for neither; r_i = (wins_i - losses_i) / (n_valid - 1). A lower key
    is better. Masked rows get 0 and are no one's peer; a group with fewer than 2 valid rows gets 0.
    The reward lies in [-1, 1] and sums to zero over each group's valid rows.

    Finer keys (off by default; need `num_turns` = T to tell solves, key <= T, from failures):
    `speedup` [num_groups, G] breaks ties among rows solved on the same turn (higher is better;
    non-finite counts as 0), `status_rank` [num_groups, G] breaks ties among never-solved rows
    (higher rank = better status). The order is lexicographic: (key, -speedup | -status_rank).
    Equal keys stay tied when the finer keys are off or equal.
    """
    keys = jnp.asarray(keys, jnp.int32)
    if keys.ndim != 2:
        raise ValueError(f"keys must be [num_groups, G]; got shape {tuple(keys.shape)}")
    valid = valid_rows(keys.shape, row_mask, group_mask)
    better = keys[:, :, None] < keys[:, None, :]          # better[g, i, j]: i beats j on the key
    if speedup is not None or status_rank is not None:
        if num_turns is None:
            raise ValueError("rank_reward: finer keys (speedup, status_rank) need num_turns=T "
                             "to tell solved rows (key <= T) from failures (key T+1)")
        solved = keys <= num_turns
        fine = jnp.zeros(keys.shape, jnp.float32)
        if speedup is not None:
            sp = jnp.asarray(speedup, jnp.float32)
            if sp.shape != keys.shape:
                raise ValueError(f"speedup must have shape {tuple(keys.shape)}; got {tuple(sp.shape)}")
            fine = jnp.where(solved, jnp.where(jnp.isfinite(sp), sp, 0.0), fine)
        if status_rank is not None:
            st = jnp.asarray(status_rank, jnp.float32)
            if st.shape != keys.shape:
                raise ValueError(f"status_rank must have shape {tuple(keys.shape)}; got {tuple(st.shape)}")
            fine = jnp.where(solved, fine, st)
        same = keys[:, :, None] == keys[:, None, :]
        better = better | (same & (fine[:, :, None] > fine[:, None, :]))
    pair = valid[:, :, None] & valid[:, None, :]
    wins = jnp.sum(better & pair, axis=2)
    losses = jnp.sum(jnp.swapaxes(better, 1, 2) & pair, axis=2)
    n_valid = jnp.sum(valid, axis=1, keepdims=True)
    r = (wins - losses).astype(jnp.float32) / jnp.maximum(n_valid - 1, 1).astype(jnp.float32)
    return jnp.where(valid & (n_valid >= 2), r, 0.0)


def rank_reward_from_turns(correct: Array, attempted: Array | None = None, row_mask: Array | None = None,
                           group_mask: Array | None = None, *, speedup: Array | None = None,
                           status_rank: Array | None = None) -> jnp.ndarray:
    """LEAP's reward straight from per-turn data [num_groups, G, T]: keys, optional finer keys, rank.

    `speedup` [.., T] enables the speedup tie-break, read at each row's first correct turn;
    `status_rank` [.., T] enables the failure tie-break, read at each never-solved row's last
    attempted turn (where its trajectory ended). Both None: the plain rank reward.
    """
    correct = jnp.asarray(correct, dtype=bool)
    check_turn_shape("correct", correct)
    attempted = default_attempted(correct, attempted)
    keys = outcome_keys(correct, attempted)
    sp = None if speedup is None else first_correct_value(jnp.asarray(speedup, jnp.float32), correct, attempted)
    st = None if status_rank is None else last_attempted_value(jnp.asarray(status_rank, jnp.float32), attempted)
    return rank_reward(keys, row_mask, group_mask, num_turns=correct.shape[-1], speedup=sp, status_rank=st)


def binary_reward(correct: Array, row_mask: Array | None = None,
                  group_mask: Array | None = None) -> jnp.ndarray:
    """1[correct] as float32 [num_groups, G] (single-turn GRPO: pass turn-1 correctness)."""
    correct = jnp.asarray(correct, dtype=bool)
    if correct.ndim != 2:
        raise ValueError(f"correct must be [num_groups, G]; got shape {tuple(correct.shape)}")
    return (correct & valid_rows(correct.shape, row_mask, group_mask)).astype(jnp.float32)


def final_success_reward(correct: Array, attempted: Array | None = None, row_mask: Array | None = None,
                         group_mask: Array | None = None) -> jnp.ndarray:
    """GRPO-MT reward 1[correct on some attempted turn <= T], float32 [num_groups, G]."""
    correct = jnp.asarray(correct, dtype=bool)
    check_turn_shape("correct", correct)
    attempted = default_attempted(correct, attempted)
    solved = jnp.any(correct & attempted, axis=-1)
    return (solved & valid_rows(correct.shape, row_mask, group_mask)).astype(jnp.float32)


def kevin_scores(correct: Array, speedup: Array, attempted: Array | None = None,
                 correct_bonus: float = KEVIN_CORRECT_BONUS) -> jnp.ndarray:
    """Kevin's per-turn score S_t = 0.3 * 1[correct_t] + 1[correct_t] * speedup_t, [..., T] float32.

    Unattempted turns score 0; a non-finite speedup counts as 0. Kevin's advantage is then
    `advantages.kevin_advantages` (gamma 0.4 returns, z-scored over all turn-samples of the task).
    """
    correct = jnp.asarray(correct, dtype=bool)
    attempted = default_attempted(correct, attempted)
    sp = jnp.asarray(speedup, jnp.float32)
    if sp.shape != correct.shape:
        raise ValueError(f"speedup must have the shape of correct {tuple(correct.shape)}; got {tuple(sp.shape)}")
    sp = jnp.where(jnp.isfinite(sp), sp, 0.0)
    hit = correct & attempted
    return jnp.where(hit, jnp.asarray(correct_bonus, jnp.float32) + sp, 0.0)


def discounted_returns(scores: Array, attempted: Array | None = None,
                       gamma: float = KEVIN_GAMMA) -> jnp.ndarray:
    """R_t = sum_{k >= t} gamma^(k - t) S_k over attempted turns k, along the last axis [..., T].

    Unattempted turns contribute nothing and get R_t = 0. gamma may be traced; gamma = 1 gives the
    undiscounted returns TRLOO uses, gamma = 0.4 Kevin's.
    """
    scores = jnp.asarray(scores, jnp.float32)
    att = jnp.ones(scores.shape, bool) if attempted is None else jnp.asarray(attempted, dtype=bool)
    if att.shape != scores.shape:
        raise ValueError(f"attempted must have the shape of scores {tuple(scores.shape)}; got {tuple(att.shape)}")
    gamma_t = jnp.asarray(gamma, jnp.float32)
    s = jnp.moveaxis(jnp.where(att, scores, 0.0), -1, 0)

    def step(running, s_t):
        running = s_t + gamma_t * running
        return running, running

    _, returns = jax.lax.scan(step, jnp.zeros(s.shape[1:], jnp.float32), s, reverse=True)
    return jnp.where(att, jnp.moveaxis(returns, 0, -1), 0.0)
