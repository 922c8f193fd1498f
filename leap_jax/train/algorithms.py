"""Rewards and advantages per algorithm (DESIGN 4.5, 4.6), over one step's [P, G, T] outcomes.

Every algorithm maps (correct, attempted, speedup, status_rank, row_mask) to per-(group, row, turn)
advantages [P, G, T]; the update spreads them onto tokens. PPO instead returns the per-row outcome
reward, placed on each trajectory's last trainable token and turned into advantages by GAE with a
value head inside the update.

    leap        DCP + rank reward, trajectory credit (or per-turn credit)
    rank_no_dcp rank reward, every group debugged (ablation)
    dcp_binary  DCP + 1[correct by T], group z-score (ablation)
    grpo        single turn, 1[correct], group z-score
    multiturn   every group debugged, 1[correct by T], group z-score (GRPO-MT)
    kevin       S_t = 0.3*1[c_t] + 1[c_t]*speedup_t, gamma=0.4 returns, z-score over the task's turn-samples
    trloo       the same S_t, gamma=1 returns, leave-one-out baseline per (task, turn)
    ppo         1[correct by T] at the last token, GAE(gamma, lambda) with a value head
"""
from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from leap_jax.rl import advantages as adv_lib
from leap_jax.rl import rewards as rew_lib

USES_DCP = {"leap": True, "dcp_binary": True, "rank_no_dcp": False, "grpo": False, "multiturn": False,
            "kevin": False, "trloo": False, "ppo": False}


def reward_reads_speedup(name: str, rank_speedup_tiebreak: bool = False) -> bool:
    """Whether `name`'s reward depends on measured speedups; when not, training rollouts ask the
    environment for correctness only (timing is most of an evaluation's cost)."""
    if name not in USES_DCP:
        raise ValueError(f"unknown algorithm {name!r}; expected one of {sorted(USES_DCP)}")
    return name in ("kevin", "trloo") or (name in ("leap", "rank_no_dcp") and rank_speedup_tiebreak)


def dcp_mode(name: str) -> str:
    """'dcp' when the algorithm prunes with DCP, else 'all' (every group gets debugging turns)."""
    if name not in USES_DCP:
        raise ValueError(f"unknown algorithm {name!r}; expected one of {sorted(USES_DCP)}")
    return "dcp" if USES_DCP[name] else "all"


@dataclass
class Credit:
    """advantages [P, G, T] (0 on unattempted turns and masked rows); row_reward [P, G] for logging
    (and as the outcome reward for ppo)."""
    advantages: np.ndarray
    row_reward: np.ndarray


def _first_correct_speedup(correct: np.ndarray, attempted: np.ndarray, speedup: np.ndarray) -> np.ndarray:
    hit = correct & attempted
    first = np.argmax(hit, axis=-1)
    sp = np.take_along_axis(speedup, first[..., None], axis=-1)[..., 0]
    return np.where(hit.any(-1) & np.isfinite(sp), sp, 0.0).astype(np.float32)


def _last_status(status_rank: np.ndarray, attempted: np.ndarray) -> np.ndarray:
    T = attempted.shape[-1]
    last = T - 1 - np.argmax(attempted[..., ::-1], axis=-1)
    return np.take_along_axis(status_rank, last[..., None], axis=-1)[..., 0].astype(np.float32)


def compute_credit(name: str, correct: np.ndarray, attempted: np.ndarray, speedup: np.ndarray,
                   status_rank: np.ndarray, row_mask: np.ndarray, *, credit: str = "trajectory",
                   eps: float = 1e-6, kevin_gamma: float = 0.4, kevin_correct_bonus: float = 0.3,
                   rank_speedup_tiebreak: bool = False, rank_status_tiebreak: bool = False) -> Credit:
    """Per-(group, row, turn) advantages for `name`; see the module docstring."""
    correct = np.asarray(correct, bool) & np.asarray(attempted, bool)
    attempted = np.asarray(attempted, bool)
    row_mask = np.asarray(row_mask, bool)
    T = correct.shape[-1]
    valid_turns = attempted & row_mask[..., None]
    if name in ("leap", "rank_no_dcp"):
        keys = rew_lib.outcome_keys(correct, attempted)
        kw = {}
        if rank_speedup_tiebreak or rank_status_tiebreak:
            kw["num_turns"] = T
            if rank_speedup_tiebreak:
                kw["speedup"] = _first_correct_speedup(correct, attempted, speedup)
            if rank_status_tiebreak:
                kw["status_rank"] = _last_status(status_rank, attempted)
        r = rew_lib.rank_reward(keys, row_mask, **kw)
        if credit == "per_turn":
            a = adv_lib.per_turn_credit(keys, attempted, row_mask, **kw)
        else:
            a = adv_lib.trajectory_credit(r, attempted)
    elif name in ("dcp_binary", "multiturn", "grpo", "ppo"):
        if name == "grpo":
            r = rew_lib.binary_reward(correct[..., 0], row_mask)
        else:
            r = rew_lib.final_success_reward(correct, attempted, row_mask)
        if name == "ppo":
            return Credit(np.zeros(correct.shape, np.float32), np.asarray(r, np.float32))
        a = adv_lib.trajectory_credit(adv_lib.group_zscore(r, row_mask, eps=eps), attempted)
    elif name in ("kevin", "trloo"):
        sp = np.where(np.isfinite(speedup), speedup, 0.0).astype(np.float32)
        scores = rew_lib.kevin_scores(correct, sp, attempted, correct_bonus=kevin_correct_bonus)
        gamma = kevin_gamma if name == "kevin" else 1.0
        returns = rew_lib.discounted_returns(scores, attempted, gamma=gamma)
        r = jnp.where(jnp.asarray(row_mask), returns[..., 0], 0.0)
        if name == "kevin":
            a = adv_lib.group_zscore(returns, valid_turns, axis=(1, 2), eps=eps)
        else:
            a = adv_lib.leave_one_out(returns, valid_turns, axis=1)
    else:
        raise ValueError(f"unknown algorithm {name!r}; expected one of {sorted(USES_DCP)}")
    adv = np.where(valid_turns, np.asarray(a, np.float32), 0.0).astype(np.float32)
    return Credit(adv, np.asarray(r, np.float32))
