"""The algorithm table (DESIGN 4.6): `ALGORITHMS` holds one `AlgorithmSpec` per `algorithm.name`.

It is the only list of algorithms. Config validation (the names, the single-turn, group-size and
DCP-threshold rules), the rollout's DCP mode, env timing (`reward_reads_speedup`), the credit
(`compute_credit`) and the experiment's arms all read it, so adding an algorithm is one entry here
(plus its config file). Each entry's credit function only composes the tested array functions of
`leap_jax.rl` (rewards.py, advantages.py); it maps one step's `Outcomes` [P, G, T] to per-(group,
row, turn) advantages [P, G, T], which the update spreads onto tokens. PPO instead returns the
per-row outcome reward, placed on each trajectory's last trainable token and turned into
advantages by GAE with a value head inside the update.

Importing this module does not import JAX (config loading and the experiment driver stay light):
the credit functions import `leap_jax.rl` when first called.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# the headline comparison of the experiment report: time to the baseline's best accuracy
HEADLINE_ARM = "leap"
HEADLINE_BASELINE = "multiturn"


@dataclass(frozen=True)
class Outcomes:
    """One step's outcomes: correct, attempted (bool), speedup (float, NaN when not timed),
    status_rank (int) [P, G, T]; row_mask [P, G] (False for padding and env_error rows)."""
    correct: np.ndarray
    attempted: np.ndarray
    speedup: np.ndarray
    status_rank: np.ndarray
    row_mask: np.ndarray

    @property
    def valid_turns(self) -> np.ndarray:
        """Attempted turns of valid rows [P, G, T]: the only ones that get credit."""
        return self.attempted & self.row_mask[..., None]


@dataclass(frozen=True)
class CreditOptions:
    """The `algorithm.*` settings credit reads (defaults as in the config's AlgorithmCfg)."""
    credit: str = "trajectory"  # trajectory | per_turn (rank reward)
    eps: float = 1e-6  # z-score std epsilon
    kevin_gamma: float = 0.4
    kevin_correct_bonus: float = 0.3
    rank_speedup_tiebreak: bool = False
    rank_status_tiebreak: bool = False


CreditFn = Callable[[Outcomes, CreditOptions], tuple[object, object]]  # -> (advantages [P,G,T], row reward [P,G])


@dataclass(frozen=True)
class AlgorithmSpec:
    """One algorithm: what its rollouts, reward and config need, and its credit function."""
    name: str
    summary: str  # turns / reward / advantage, one line
    credit_fn: CreditFn
    uses_dcp: bool = False  # DCP picks the groups that debug (else every group gets debugging turns)
    single_turn: bool = False  # needs rollout.max_turns == 1
    needs_group: bool = False  # normalises within a group: needs rollout.group_size >= 2
    reads_speedup: bool = False  # the reward always reads measured speedups
    rank_reward: bool = False  # the rank reward: algorithm.rank_speedup_tiebreak makes it read speedups
    value_head: bool = False  # outcome reward at the last token, GAE with a value head in the update
    experiment_arm: bool = False  # one arm of `python -m leap_jax.experiment`

    @property
    def dcp_mode(self) -> str:
        """The rollout's mode: 'dcp' when DCP prunes, else 'all' (every group gets debugging turns)."""
        return "dcp" if self.uses_dcp else "all"

    def reward_reads_speedup(self, rank_speedup_tiebreak: bool = False) -> bool:
        """Whether the reward depends on measured speedups; when not, training rollouts ask the
        environment for correctness only (timing is most of an evaluation's cost)."""
        return self.reads_speedup or (self.rank_reward and rank_speedup_tiebreak)


@dataclass
class Credit:
    """advantages [P, G, T] (0 on unattempted turns and masked rows); row_reward [P, G] for logging
    (and as the outcome reward for ppo)."""
    advantages: np.ndarray
    row_reward: np.ndarray


# ---- credit functions: compositions of leap_jax.rl ---------------------------------------------
def _rank_credit(o: Outcomes, opts: CreditOptions) -> tuple[object, object]:
    """Rank reward (optional speedup / status tie-breaks); trajectory or per-turn credit."""
    from leap_jax.rl import advantages as adv
    from leap_jax.rl import rewards as rew
    keys = rew.outcome_keys(o.correct, o.attempted)
    kw: dict = {}
    if opts.rank_speedup_tiebreak or opts.rank_status_tiebreak:
        kw["num_turns"] = o.correct.shape[-1]
        if opts.rank_speedup_tiebreak:
            kw["speedup"] = rew.first_correct_value(o.speedup.astype(np.float32), o.correct, o.attempted)
        if opts.rank_status_tiebreak:
            kw["status_rank"] = rew.last_attempted_value(o.status_rank.astype(np.float32), o.attempted)
    r = rew.rank_reward(keys, o.row_mask, **kw)
    if opts.credit == "per_turn":
        return adv.per_turn_credit(keys, o.attempted, o.row_mask, **kw), r
    return adv.trajectory_credit(r, o.attempted), r


def _zscore_credit(r: object, o: Outcomes, opts: CreditOptions) -> tuple[object, object]:
    """Row reward r, GRPO group z-score over each group's valid rows, on every attempted turn."""
    from leap_jax.rl import advantages as adv
    return adv.trajectory_credit(adv.group_zscore(r, o.row_mask, eps=opts.eps), o.attempted), r


def _first_turn_zscore_credit(o: Outcomes, opts: CreditOptions) -> tuple[object, object]:
    """1[correct on turn 1], group z-score."""
    from leap_jax.rl import rewards as rew
    return _zscore_credit(rew.binary_reward(o.correct[..., 0], o.row_mask), o, opts)


def _final_success_zscore_credit(o: Outcomes, opts: CreditOptions) -> tuple[object, object]:
    """1[correct by T], group z-score."""
    from leap_jax.rl import rewards as rew
    return _zscore_credit(rew.final_success_reward(o.correct, o.attempted, o.row_mask), o, opts)


def _outcome_reward_only(o: Outcomes, opts: CreditOptions) -> tuple[object, object]:
    """ppo: no advantages here; the row reward 1[correct by T] goes through GAE in the update."""
    from leap_jax.rl import rewards as rew
    return np.zeros(o.correct.shape, np.float32), rew.final_success_reward(o.correct, o.attempted, o.row_mask)


def _kevin_credit(o: Outcomes, opts: CreditOptions) -> tuple[object, object]:
    """gamma = kevin_gamma returns, z-scored over all of a task's turn-samples."""
    from leap_jax.rl import advantages as adv
    from leap_jax.rl import rewards as rew
    scores = rew.kevin_scores(o.correct, o.speedup, o.attempted, correct_bonus=opts.kevin_correct_bonus)
    a = adv.kevin_advantages(scores, o.attempted, o.row_mask, gamma=opts.kevin_gamma, eps=opts.eps)
    return a, _first_return(scores, o, opts.kevin_gamma)


def _trloo_credit(o: Outcomes, opts: CreditOptions) -> tuple[object, object]:
    """gamma = 1 returns, leave-one-out per (task, turn)."""
    from leap_jax.rl import advantages as adv
    from leap_jax.rl import rewards as rew
    scores = rew.kevin_scores(o.correct, o.speedup, o.attempted, correct_bonus=opts.kevin_correct_bonus)
    return adv.trloo_advantages(scores, o.attempted, o.row_mask), _first_return(scores, o, 1.0)


def _first_return(scores: object, o: Outcomes, gamma: float) -> object:
    """The row reward of the returns-based algorithms: each valid row's return from turn 1."""
    from leap_jax.rl import rewards as rew
    returns = np.asarray(rew.discounted_returns(scores, o.valid_turns, gamma=gamma))
    return np.where(o.row_mask, returns[..., 0], 0.0)


# ---- the table: experiment arms first, in the experiment's order -------------------------------
_SPECS = (
    AlgorithmSpec("leap", "DCP + rank reward, trajectory (or per-turn) credit", _rank_credit,
                  uses_dcp=True, needs_group=True, rank_reward=True, experiment_arm=True),
    AlgorithmSpec("multiturn", "every group debugged, 1[correct by T], group z-score (GRPO-MT)",
                  _final_success_zscore_credit, needs_group=True, experiment_arm=True),
    AlgorithmSpec("grpo", "single turn, 1[correct], group z-score", _first_turn_zscore_credit,
                  single_turn=True, needs_group=True, experiment_arm=True),
    AlgorithmSpec("trloo", "Kevin's S_t, gamma=1 returns, leave-one-out baseline per (task, turn)",
                  _trloo_credit, reads_speedup=True, experiment_arm=True),
    AlgorithmSpec("rank_no_dcp", "rank reward, every group debugged (ablation)", _rank_credit,
                  needs_group=True, rank_reward=True, experiment_arm=True),
    AlgorithmSpec("dcp_binary", "DCP + 1[correct by T], group z-score (ablation)",
                  _final_success_zscore_credit, uses_dcp=True, needs_group=True, experiment_arm=True),
    AlgorithmSpec("kevin", "S_t = 0.3*1[c_t] + 1[c_t]*speedup_t, gamma=0.4 returns, z-score over "
                  "the task's turn-samples", _kevin_credit, reads_speedup=True),
    AlgorithmSpec("ppo", "1[correct by T] at the last token, GAE(gamma, lambda) with a value head",
                  _outcome_reward_only, value_head=True),
)
ALGORITHMS: dict[str, AlgorithmSpec] = {s.name: s for s in _SPECS}


def spec(name: str) -> AlgorithmSpec:
    """The table entry of `name`; a ValueError listing the valid names otherwise."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; expected one of {', '.join(ALGORITHMS)}") from None


def reward_reads_speedup(name: str, rank_speedup_tiebreak: bool = False) -> bool:
    """See `AlgorithmSpec.reward_reads_speedup`."""
    return spec(name).reward_reads_speedup(rank_speedup_tiebreak)


def dcp_mode(name: str) -> str:
    """See `AlgorithmSpec.dcp_mode`."""
    return spec(name).dcp_mode


def compute_credit(name: str, correct: np.ndarray, attempted: np.ndarray, speedup: np.ndarray,
                   status_rank: np.ndarray, row_mask: np.ndarray, *, credit: str = "trajectory",
                   eps: float = 1e-6, kevin_gamma: float = 0.4, kevin_correct_bonus: float = 0.3,
                   rank_speedup_tiebreak: bool = False, rank_status_tiebreak: bool = False) -> Credit:
    """Per-(group, row, turn) advantages for `name` by its table entry's credit function; turns that
    were not attempted and masked rows get 0."""
    fn = spec(name).credit_fn
    attempted = np.asarray(attempted, bool)
    o = Outcomes(np.asarray(correct, bool) & attempted, attempted, np.asarray(speedup, np.float32),
                 np.asarray(status_rank), np.asarray(row_mask, bool))
    opts = CreditOptions(credit, eps, kevin_gamma, kevin_correct_bonus, rank_speedup_tiebreak, rank_status_tiebreak)
    a, r = fn(o, opts)
    adv = np.where(o.valid_turns, np.asarray(a, np.float32), 0.0).astype(np.float32)
    return Credit(adv, np.asarray(r, np.float32))
