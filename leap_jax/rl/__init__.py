"""leap_jax.rl: the RL math of LEAP as pure, jittable array functions (no pipeline dependencies).

dcp: Difficulty-Conditioned Pruning (decisions, continue masks, summary, optional history mode);
rewards: rank-based tournament reward and the baselines' rewards; advantages: group baselines,
LEAP credit, GAE; losses: PPO/GRPO surrogate, value loss, exact micro-batch aggregation;
options: the options' names and ranges in plain Python.

Names resolve lazily (PEP 562): `from leap_jax.rl import dcp_decision` imports the submodule that
defines it, and config validation reads `leap_jax.rl.options` without importing JAX.
"""
from __future__ import annotations

from leap_jax.support.lazy_exports import lazy_exports

_EXPORTS = {
    "advantages": ("gae", "group_mean_baseline", "group_zscore", "kevin_advantages", "leave_one_out",
                   "per_turn_credit", "token_advantages", "trajectory_credit", "trloo_advantages"),
    "dcp": ("DEBUG", "EASY", "HOPELESS", "PAD", "DCPHistory", "HistoryRule", "apply_history",
            "attempt_schedule", "continue_mask", "dcp_decision", "dcp_summary", "init_history",
            "n_failures", "recovery_rate", "resolve_thresholds", "update_history"),
    "losses": ("aggregate", "combine_metrics", "entropy_from_logits", "finalize_loss", "finalize_metrics",
               "k3_kl", "policy_loss", "value_loss"),
    "options": ("AGGREGATION_MODES", "check_threshold"),
    "rewards": ("binary_reward", "discounted_returns", "final_success_reward", "first_correct_value",
                "kevin_scores", "last_attempted_value", "outcome_keys", "rank_reward", "rank_reward_from_turns"),
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
