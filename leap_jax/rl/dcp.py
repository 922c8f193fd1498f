"""Difficulty-Conditioned Pruning (DESIGN 4.4) as jittable array ops.

After turn 1, each group (one prompt, G rollouts) is classified from its number of failed rollouts
`n_fail`: EASY (n_fail < t_min: stays single-turn), DEBUG (t_min <= n_fail <= t_max: failed rows get
feedback turns) or HOPELESS (n_fail > t_max: abandoned after turn 1). Padding groups get PAD.

Shapes: `correct`/`attempted` are [num_groups, G, T] bool (turn t is 0-based in arrays, 1-based in
prose), `group_mask` [num_groups], `row_mask` [num_groups, G]. Masked rows (padding, env_error) do not
count as failures or successes; a group with no valid row is PAD.

Thresholds: a Python int or an integer array is a count of failed rows; a Python float or a floating
array is a fraction f of the group's valid rows n_valid, read as `n_fail >= f * n_valid` for t_min and
`n_fail <= f * n_valid` for t_max (so t_min=0.5 means "at least half failed"). `t_max=None` means
`n_valid - 1` (only all-failed groups are hopeless). For G = 8 the defaults (rl.options.DEFAULT_T_MIN,
DEFAULT_T_MAX: 0.5, None) are the paper's t_min = 4, t_max = 7. Thresholds may be per-group arrays [num_groups] (used by history mode).

History mode (an extension beyond the paper): `DCPHistory` keeps per-task counts of rows that entered
debugging and of those that recovered, carried across steps as an array state; `apply_history` can
demote DEBUG to HOPELESS for tasks that never recover, or promote HOPELESS to DEBUG for tasks that
usually do. Both rules are off by default, and a fresh history never changes a decision, so the
default behaviour is exactly the paper's.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from leap_jax.rl._masks import Array, check_turn_shape, default_attempted, valid_rows
from leap_jax.rl.options import DEFAULT_T_MAX, DEFAULT_T_MIN, check_threshold, max_failed_count, min_failed_count

EASY = 0       # few failures: single-turn only
DEBUG = 1      # in the band: failed rows get debugging turns
HOPELESS = 2   # too many failures: abandoned after turn 1
PAD = -1       # padding group (group_mask False or no valid row)

def _is_fraction(value: object) -> bool:
    if isinstance(value, (float, np.floating)):
        return True
    if isinstance(value, (int, np.integer)):
        return False
    return jnp.issubdtype(jnp.asarray(value).dtype, jnp.floating)


def resolve_thresholds(t_min: Array, t_max: Array | None, n_valid: Array) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Integer (lo, hi) bounds per group so that a group is debugged iff lo <= n_fail <= hi.

    `n_valid` is the number of valid rows per group ([num_groups] int). See the module docstring for
    how counts and fractions are read; the rounding rule is rl.options' (the config's check uses it too).
    """
    n_valid = jnp.asarray(n_valid)
    nf = n_valid.astype(jnp.float32)
    if _is_fraction(t_min):
        lo = min_failed_count(jnp.asarray(t_min, jnp.float32), nf, jnp.ceil).astype(jnp.int32)
    else:
        lo = jnp.broadcast_to(jnp.asarray(t_min, jnp.int32), n_valid.shape)
    if t_max is None:
        hi = n_valid.astype(jnp.int32) - 1
    elif _is_fraction(t_max):
        hi = max_failed_count(jnp.asarray(t_max, jnp.float32), nf, jnp.floor).astype(jnp.int32)
    else:
        hi = jnp.broadcast_to(jnp.asarray(t_max, jnp.int32), n_valid.shape)
    return lo, hi


def n_failures(correct_t1: Array, row_mask: Array | None = None,
               group_mask: Array | None = None) -> tuple[jnp.ndarray, jnp.ndarray]:
    """(n_fail, n_valid) per group, int32 [num_groups]: valid rows not correct, and valid rows."""
    correct_t1 = jnp.asarray(correct_t1, dtype=bool)
    if correct_t1.ndim != 2:
        raise ValueError(f"correct_t1 must be [num_groups, G]; got shape {tuple(correct_t1.shape)}")
    valid = valid_rows(correct_t1.shape, row_mask, group_mask)
    n_fail = jnp.sum(valid & ~correct_t1, axis=1, dtype=jnp.int32)
    n_valid = jnp.sum(valid, axis=1, dtype=jnp.int32)
    return n_fail, n_valid


def dcp_decision(correct_t1: Array, group_mask: Array | None = None, t_min: Array = DEFAULT_T_MIN,
                 t_max: Array | None = DEFAULT_T_MAX, row_mask: Array | None = None, *,
                 history: DCPHistory | None = None, task_ids: Array | None = None,
                 rule: HistoryRule | None = None) -> jnp.ndarray:
    """Per-group DCP decision int32 [num_groups]: EASY 0, DEBUG 1, HOPELESS 2, PAD -1.

    `correct_t1` [num_groups, G] bool is turn-1 correctness. Debug iff t_min <= n_fail <= t_max
    (thresholds: module docstring). With `history`, `task_ids` [num_groups] and a `rule`, the
    decision is then adjusted by `apply_history`; without them nothing changes.
    """
    correct_t1 = jnp.asarray(correct_t1, dtype=bool)
    g = correct_t1.shape[-1] if correct_t1.ndim else 0
    check_threshold("t_min", t_min, g)
    check_threshold("t_max", t_max, g)
    both_counts = all(isinstance(v, (int, np.integer)) for v in (t_min, t_max))
    both_fractions = all(isinstance(v, (float, np.floating)) for v in (t_min, t_max))
    if (both_counts or both_fractions) and t_min > t_max:
        raise ValueError(f"t_min={t_min} > t_max={t_max}: no group could ever be debugged")
    n_fail, n_valid = n_failures(correct_t1, row_mask, group_mask)
    lo, hi = resolve_thresholds(t_min, t_max, n_valid)
    decision = jnp.where(n_fail < lo, EASY, jnp.where(n_fail > hi, HOPELESS, DEBUG)).astype(jnp.int32)
    decision = jnp.where(n_valid > 0, decision, PAD)
    if history is not None:
        if task_ids is None:
            raise ValueError("dcp_decision: history mode needs task_ids [num_groups] (int task index)")
        decision = apply_history(decision, history, task_ids, rule or HistoryRule())
    return decision


def decide_on_host(correct_t1: np.ndarray, t_min: Array = DEFAULT_T_MIN, t_max: Array | None = DEFAULT_T_MAX,
                   row_mask: np.ndarray | None = None) -> np.ndarray:
    """`dcp_decision` as a NumPy int32 array; for Python-scalar thresholds compiled once per
    thresholds and shape and run on the host's CPU device. The rollout decides one group at a time as
    its turn-1 results come in: eagerly on an accelerator each of the decision's ~20 ops would cost a
    dispatch, and reading the answer a sync, per group. Array thresholds run eagerly."""
    correct_t1 = np.asarray(correct_t1, bool)
    mask = np.ones(correct_t1.shape, bool) if row_mask is None else np.asarray(row_mask, bool)
    scalars = all(isinstance(t, (int, float, type(None))) for t in (t_min, t_max))
    try:
        cpu = jax.devices("cpu")[0] if scalars else None
    except RuntimeError:  # JAX_PLATFORMS without cpu: the default device
        cpu = None
    if cpu is None:
        return np.asarray(dcp_decision(correct_t1, None, t_min, t_max, row_mask=mask), np.int32)
    with jax.default_device(cpu):
        return np.asarray(_jitted_decision(t_min, t_max)(correct_t1, mask), np.int32)


@functools.lru_cache(maxsize=64, typed=True)  # typed: the count 1 and the fraction 1.0 are other rules
def _jitted_decision(t_min: float | int, t_max: float | int | None) -> Callable[..., jnp.ndarray]:
    return jax.jit(lambda correct, mask: dcp_decision(correct, None, t_min, t_max, row_mask=mask))


def attempt_schedule(decision: Array, correct: Array, row_mask: Array | None = None) -> jnp.ndarray:
    """The [num_groups, G, T] attempted mask the DCP rollout produces for per-turn `correct`.

    Turn 1 is attempted by every valid row of a non-PAD group; turn t+1 only by rows of DEBUG groups
    that attempted turn t and were not correct on it. Values of `correct` on unattempted turns are
    ignored. Useful for simulating a rollout and for building the `attempted` input of rewards.
    """
    correct = jnp.asarray(correct, dtype=bool)
    check_turn_shape("correct", correct)
    decision = jnp.asarray(decision, jnp.int32)
    valid = valid_rows(correct.shape, row_mask) & (decision != PAD)[:, None]
    debug = (decision == DEBUG)[:, None, None]
    # solved strictly before turn t: exclusive cumulative OR along turns
    solved_before = jnp.cumsum(correct, axis=-1) - correct > 0
    t = jnp.arange(correct.shape[-1])
    later_ok = debug & ~solved_before
    return valid[:, :, None] & ((t == 0) | later_ok)


def continue_mask(decision: Array, correct: Array, attempted: Array | None, next_turn: Array,
                  row_mask: Array | None = None, num_turns: int | None = None) -> jnp.ndarray:
    """Rows to generate on turn `next_turn` (1-based, >= 2), bool [num_groups, G].

    Active = in a DEBUG group, valid, attempted the previous turn, not correct on any attempted turn
    so far, and `next_turn <= num_turns` (default T = correct.shape[-1]). `next_turn` may be traced.
    Only turns before `next_turn` are read from `correct`/`attempted`, so later entries may hold
    anything (e.g. not yet filled in).
    """
    correct = jnp.asarray(correct, dtype=bool)
    check_turn_shape("correct", correct)
    attempted = default_attempted(correct, attempted)
    big_t = correct.shape[-1] if num_turns is None else num_turns
    if isinstance(next_turn, (int, np.integer)) and not 2 <= int(next_turn):
        raise ValueError(f"next_turn={next_turn} must be >= 2 (turn 1 is always generated for every row)")
    decision = jnp.asarray(decision, jnp.int32)
    next_turn = jnp.asarray(next_turn, jnp.int32)
    t = jnp.arange(correct.shape[-1])
    before = t < next_turn - 1                       # turns 1 .. next_turn-1 (0-based < next_turn-1)
    prev = t == next_turn - 2                        # the previous turn
    solved = jnp.any(correct & attempted & before, axis=-1)
    attempted_prev = jnp.any(attempted & prev, axis=-1)
    valid = valid_rows(correct.shape, row_mask)
    active = (decision == DEBUG)[:, None] & valid & attempted_prev & ~solved
    return active & (next_turn <= big_t)


def dcp_summary(decision: Array, attempted: Array, group_mask: Array | None = None) -> dict[str, jnp.ndarray]:
    """Counts for metrics: groups per decision, activated fraction, rows active per turn [T].

    `activated_fraction` = DEBUG groups / non-PAD groups (0 when there are none);
    `rows_per_turn[t]` counts attempted rows on turn t+1 among non-PAD groups;
    `extra_rows` = rows generated beyond turn 1 (the debugging cost).
    """
    decision = jnp.asarray(decision, jnp.int32)
    attempted = jnp.asarray(attempted, dtype=bool)
    check_turn_shape("attempted", attempted)
    live = decision != PAD
    if group_mask is not None:
        live = live & jnp.asarray(group_mask, dtype=bool)
    n_live = jnp.sum(live, dtype=jnp.int32)
    debug = jnp.sum(live & (decision == DEBUG), dtype=jnp.int32)
    rows_per_turn = jnp.sum(attempted & live[:, None, None], axis=(0, 1), dtype=jnp.int32)
    return {
        "groups": n_live,
        "easy_groups": jnp.sum(live & (decision == EASY), dtype=jnp.int32),
        "debug_groups": debug,
        "hopeless_groups": jnp.sum(live & (decision == HOPELESS), dtype=jnp.int32),
        "activated_fraction": jnp.where(n_live > 0, debug / jnp.maximum(n_live, 1), 0.0).astype(jnp.float32),
        "rows_per_turn": rows_per_turn,
        "extra_rows": jnp.sum(rows_per_turn[1:], dtype=jnp.int32),
    }


# ----------------------------------------------------------------------------------- history mode

class DCPHistory(NamedTuple):
    """Per-task recovery statistics, float32 [num_tasks] each (a pytree; checkpoint it as is).

    debugged: rows that entered debugging (valid rows of DEBUG groups that failed turn 1);
    recovered: of those, rows that became correct on a later turn. Both decay by `decay` per update.
    """

    debugged: jnp.ndarray
    recovered: jnp.ndarray


class HistoryRule(NamedTuple):
    """How history adjusts decisions. None disables a rule; the defaults disable both.

    A task's rate = recovered / debugged counts once debugged >= min_rows.
    demote_below: DEBUG becomes HOPELESS when rate < demote_below (debugging this task never helps).
    promote_above: HOPELESS becomes DEBUG when rate >= promote_above (even all-failed groups recover).
    """

    min_rows: float = 8.0
    demote_below: float | None = None
    promote_above: float | None = None


def init_history(num_tasks: int) -> DCPHistory:
    """An empty history for `num_tasks` tasks (task ids are 0..num_tasks-1)."""
    if not isinstance(num_tasks, (int, np.integer)) or num_tasks < 1:
        raise ValueError(f"num_tasks must be a positive int; got {num_tasks!r}")
    z = jnp.zeros((int(num_tasks),), jnp.float32)
    return DCPHistory(debugged=z, recovered=z)


def recovery_rate(history: DCPHistory) -> jnp.ndarray:
    """recovered / debugged per task (0 where nothing was debugged yet)."""
    return jnp.where(history.debugged > 0, history.recovered / jnp.maximum(history.debugged, 1e-12), 0.0)


def update_history(history: DCPHistory, task_ids: Array, decision: Array, correct: Array,
                   attempted: Array, row_mask: Array | None = None, decay: float = 1.0) -> DCPHistory:
    """Fold one step's outcome into the history: old * decay + this step's per-task counts.

    `task_ids` int [num_groups] (ids of PAD groups are ignored); `correct`/`attempted`
    [num_groups, G, T]. A row counts as debugged when its group is DEBUG and it failed turn 1;
    it counts as recovered when it was correct on some attempted later turn.
    """
    correct = jnp.asarray(correct, dtype=bool)
    check_turn_shape("correct", correct)
    attempted = default_attempted(correct, attempted)
    decision = jnp.asarray(decision, jnp.int32)
    task_ids = jnp.asarray(task_ids, jnp.int32)
    if task_ids.shape != decision.shape:
        raise ValueError(f"task_ids must have shape {tuple(decision.shape)} (num_groups,); got {tuple(task_ids.shape)}")
    valid = valid_rows(correct.shape, row_mask) & (decision == DEBUG)[:, None]
    entered = valid & ~(correct[..., 0] & attempted[..., 0])
    recovered = entered & jnp.any(correct[..., 1:] & attempted[..., 1:], axis=-1)
    n_entered = jnp.sum(entered, axis=1).astype(jnp.float32)
    n_recovered = jnp.sum(recovered, axis=1).astype(jnp.float32)
    decay_t = jnp.asarray(decay, jnp.float32)
    return DCPHistory(
        debugged=history.debugged * decay_t + jnp.zeros_like(history.debugged).at[task_ids].add(n_entered),
        recovered=history.recovered * decay_t + jnp.zeros_like(history.recovered).at[task_ids].add(n_recovered),
    )


DEFAULT_HISTORY_RULE = HistoryRule()  # both rules off: history never changes a decision


def apply_history(decision: Array, history: DCPHistory, task_ids: Array,
                  rule: HistoryRule = DEFAULT_HISTORY_RULE) -> jnp.ndarray:
    """Adjust decisions with per-task recovery rates; identity when both rules are None."""
    decision = jnp.asarray(decision, jnp.int32)
    if rule.demote_below is None and rule.promote_above is None:
        return decision
    task_ids = jnp.asarray(task_ids, jnp.int32)
    known = history.debugged[task_ids] >= rule.min_rows
    rate = recovery_rate(history)[task_ids]
    if (rule.demote_below is not None and rule.promote_above is not None
            and rule.promote_above <= rule.demote_below):
        raise ValueError(f"HistoryRule: promote_above={rule.promote_above} must exceed "
                         f"demote_below={rule.demote_below}")
    out = decision
    if rule.demote_below is not None:
        out = jnp.where((decision == DEBUG) & known & (rate < rule.demote_below), HOPELESS, out)
    if rule.promote_above is not None:
        out = jnp.where((decision == HOPELESS) & known & (rate >= rule.promote_above), DEBUG, out)
    return out
