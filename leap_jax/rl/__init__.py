"""leap_jax.rl: the RL math of LEAP as pure, jittable array functions (no pipeline dependencies).

dcp: Difficulty-Conditioned Pruning (decisions, continue masks, summary, optional history mode);
rewards: rank-based tournament reward and the baselines' rewards; advantages: group baselines,
LEAP credit, GAE; losses: PPO/GRPO surrogate, value loss, exact micro-batch aggregation.
"""
from leap_jax.rl.advantages import (
    gae,
    group_mean_baseline,
    group_zscore,
    kevin_advantages,
    leave_one_out,
    per_turn_credit,
    token_advantages,
    trajectory_credit,
    trloo_advantages,
)
from leap_jax.rl.dcp import (
    DEBUG,
    EASY,
    HOPELESS,
    PAD,
    DCPHistory,
    HistoryRule,
    apply_history,
    attempt_schedule,
    continue_mask,
    dcp_decision,
    dcp_summary,
    init_history,
    n_failures,
    recovery_rate,
    resolve_thresholds,
    update_history,
)
from leap_jax.rl.losses import (
    AGGREGATION_MODES,
    aggregate,
    combine_metrics,
    entropy_from_logits,
    finalize_loss,
    finalize_metrics,
    k3_kl,
    policy_loss,
    value_loss,
)
from leap_jax.rl.rewards import (
    binary_reward,
    discounted_returns,
    final_success_reward,
    first_correct_value,
    kevin_scores,
    last_attempted_value,
    outcome_keys,
    rank_reward,
    rank_reward_from_turns,
)

__all__ = [
    "AGGREGATION_MODES", "DCPHistory", "DEBUG", "EASY", "HOPELESS", "HistoryRule", "PAD",
    "aggregate", "apply_history", "attempt_schedule", "binary_reward", "combine_metrics",
    "continue_mask", "dcp_decision", "dcp_summary", "discounted_returns", "entropy_from_logits",
    "final_success_reward", "finalize_loss", "finalize_metrics", "first_correct_value", "gae",
    "group_mean_baseline", "group_zscore", "init_history", "k3_kl", "kevin_advantages", "kevin_scores",
    "last_attempted_value", "leave_one_out", "n_failures", "outcome_keys", "per_turn_credit",
    "policy_loss", "rank_reward", "rank_reward_from_turns", "recovery_rate", "resolve_thresholds", "token_advantages",
    "trajectory_credit", "trloo_advantages", "update_history", "value_loss",
]
