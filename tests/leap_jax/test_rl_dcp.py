"""DCP (DESIGN 4.4): decisions against the thresholds, continue masks, schedule, summary, history."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from leap_jax import rl
from leap_jax.rl import DEBUG, EASY, HOPELESS, PAD
from tests.leap_jax import rl_numpy_ref as ref


def _groups_with_every_n_fail(g: int, seed: int = 0) -> np.ndarray:
    """[g + 1, g] turn-1 correctness: group k has exactly k failed rows, at random positions."""
    rng = np.random.default_rng(seed)
    c = np.ones((g + 1, g), bool)
    for k in range(g + 1):
        c[k, rng.permutation(g)[:k]] = False
    return c


_THRESHOLDS = [(0, 4), (1, 1), (2, 3), (0.5, None), (0.25, 0.75), (0.5, 1.0), (1.0, 1.0), (0.0, 0.0)]


@pytest.mark.parametrize("g,t_min,t_max", [(4, lo, hi) for lo, hi in _THRESHOLDS]
                         + [(8, lo, hi) for lo, hi in _THRESHOLDS + [(4, 7), (0, 8), (3, 5)]])
def test_decision_matches_thresholds_for_every_n_fail(g, t_min, t_max):
    c = _groups_with_every_n_fail(g)
    got = np.asarray(rl.dcp_decision(c, None, t_min, t_max))
    lo = t_min if isinstance(t_min, int) else int(np.ceil(t_min * g - 1e-9))
    hi = g - 1 if t_max is None else (t_max if isinstance(t_max, int) else int(np.floor(t_max * g + 1e-9)))
    for n_fail in range(g + 1):
        want = EASY if n_fail < lo else (HOPELESS if n_fail > hi else DEBUG)
        assert got[n_fail] == want, (n_fail, lo, hi)
    np.testing.assert_array_equal(got, ref.dcp_decision(c, t_min, t_max))


def test_paper_defaults_for_g8():
    c = _groups_with_every_n_fail(8, seed=3)
    want = [EASY] * 4 + [DEBUG] * 4 + [HOPELESS]        # debug iff 4 <= n_fail <= 7
    np.testing.assert_array_equal(rl.dcp_decision(c), want)
    np.testing.assert_array_equal(rl.dcp_decision(c, None, 4, 7), want)


def test_masks_padding_groups_and_rows():
    c = np.array([[0, 0, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1], [0, 0, 1, 1]], bool)
    group_mask = np.array([True, True, False, True])
    row_mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], bool)
    got = np.asarray(rl.dcp_decision(c, group_mask, 0.5, None, row_mask=row_mask))
    # group 0: 3 of 4 failed -> debug; group 1: 2 valid rows, both failed -> hopeless (t_max = n_valid-1);
    # group 2: padding; group 3: no valid row -> padding.
    np.testing.assert_array_equal(got, [DEBUG, HOPELESS, PAD, PAD])
    np.testing.assert_array_equal(got, ref.dcp_decision(c, 0.5, None, row_mask, group_mask))
    n_fail, n_valid = rl.n_failures(c, row_mask, group_mask)
    np.testing.assert_array_equal(n_fail, [3, 2, 0, 0])
    np.testing.assert_array_equal(n_valid, [4, 2, 0, 0])


def test_random_masks_agree_with_reference():
    rng = np.random.default_rng(7)
    for _ in range(5):
        c = rng.random((6, 8)) < 0.5
        row_mask = rng.random((6, 8)) < 0.8
        group_mask = rng.random(6) < 0.8
        for t_min, t_max in [(0.5, None), (2, 6), (0.3, 0.9)]:
            got = rl.dcp_decision(c, group_mask, t_min, t_max, row_mask=row_mask)
            np.testing.assert_array_equal(got, ref.dcp_decision(c, t_min, t_max, row_mask, group_mask))


@pytest.mark.parametrize("bad", [dict(t_min=9), dict(t_min=-1), dict(t_min=1.5), dict(t_max=-0.1),
                                 dict(t_min=5, t_max=3), dict(t_min=0.8, t_max=0.5), dict(t_min=True)])
def test_bad_thresholds_raise_clear_errors(bad):
    c = np.zeros((2, 8), bool)
    kwargs = dict(t_min=4, t_max=7) | bad
    with pytest.raises(ValueError, match="t_m"):
        rl.dcp_decision(c, None, **kwargs)


def test_traced_thresholds_under_jit_compile_once():
    traces = []

    @jax.jit
    def f(c, t_min, t_max):
        traces.append(1)
        return rl.dcp_decision(c, None, t_min, t_max)

    c = _groups_with_every_n_fail(8)
    for lo, hi in [(4, 7), (2, 5), (0, 8)]:
        got = f(c, jnp.int32(lo), jnp.int32(hi))
        np.testing.assert_array_equal(got, ref.dcp_decision(c, lo, hi))
    for lo, hi in [(0.5, 0.875), (0.25, 1.0)]:   # float arrays are fractions: one more trace
        got = f(c, jnp.float32(lo), jnp.float32(hi))
        np.testing.assert_array_equal(got, ref.dcp_decision(c, lo, hi))
    assert len(traces) == 2


def _scenario(seed=0, n=6, g=8, t=3):
    rng = np.random.default_rng(seed)
    correct = rng.random((n, g, t)) < 0.35
    correct[0, :, 0] = True                     # an easy group
    correct[1] = False                          # a hopeless group
    row_mask = np.ones((n, g), bool)
    row_mask[2, -2:] = False                    # padding rows
    group_mask = np.ones(n, bool)
    group_mask[-1] = False                      # a padding group
    return correct, row_mask, group_mask


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_schedule_and_continue_mask_match_a_simulated_rollout(seed):
    correct, row_mask, group_mask = _scenario(seed)
    decision = np.asarray(rl.dcp_decision(correct[..., 0], group_mask, 0.5, None, row_mask=row_mask))
    want_att = ref.simulate_rollout(decision, correct, row_mask)
    att = np.asarray(rl.attempt_schedule(decision, correct, row_mask))
    np.testing.assert_array_equal(att, want_att)
    big_t = correct.shape[-1]
    for nt in range(2, big_t + 1):
        # later turns of `correct` and `attempted` are garbage so far: the mask must not read them
        partial_c = correct.copy()
        partial_c[..., nt - 1:] = True
        partial_a = att.copy()
        partial_a[..., nt - 1:] = True
        got = np.asarray(rl.continue_mask(decision, partial_c, partial_a, nt, row_mask))
        np.testing.assert_array_equal(got, want_att[..., nt - 1], err_msg=f"turn {nt}")
    out_of_turns = rl.continue_mask(decision, correct, att, big_t + 1, row_mask)
    assert not np.asarray(out_of_turns).any()


def test_continue_mask_stops_correct_pruned_and_padding_rows():
    # G = 4, T = 3. Group 0 debugged, group 1 easy, group 2 hopeless.
    correct = np.zeros((3, 4, 3), bool)
    correct[0, 0, 0] = True                     # solved on turn 1: stops
    correct[0, 1, 1] = True                     # solved on turn 2: stops before turn 3
    correct[1, :3, 0] = True
    decision = np.array([DEBUG, EASY, HOPELESS])
    row_mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]], bool)
    att = rl.attempt_schedule(decision, correct, row_mask)
    m2 = np.asarray(rl.continue_mask(decision, correct, att, 2, row_mask))
    m3 = np.asarray(rl.continue_mask(decision, correct, att, 3, row_mask))
    np.testing.assert_array_equal(m2, [[0, 1, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
    np.testing.assert_array_equal(m3, [[0, 0, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
    # a row that stopped without solving (e.g. the trainer dropped it: context too long) stays stopped
    att_dropped = np.asarray(att).copy()
    att_dropped[0, 2, 1] = False
    m3 = np.asarray(rl.continue_mask(decision, correct, att_dropped, 3, row_mask))
    np.testing.assert_array_equal(m3, np.zeros((3, 4), bool))
    # num_turns caps the budget below the array's T
    assert not np.asarray(rl.continue_mask(decision, correct, att, 3, row_mask, num_turns=2)).any()
    with pytest.raises(ValueError, match="next_turn"):
        rl.continue_mask(decision, correct, att, 1)


def test_continue_mask_with_traced_turn_compiles_once():
    correct, row_mask, group_mask = _scenario(4)
    decision = rl.dcp_decision(correct[..., 0], group_mask, 0.5, None, row_mask=row_mask)
    att = rl.attempt_schedule(decision, correct, row_mask)
    traces = []

    @jax.jit
    def f(turn):
        traces.append(1)
        return rl.continue_mask(decision, correct, att, turn, row_mask)

    for nt in (2, 3, 4):
        np.testing.assert_array_equal(f(jnp.int32(nt)), rl.continue_mask(decision, correct, att, nt, row_mask))
    assert len(traces) == 1


def test_summary_counts():
    correct, row_mask, group_mask = _scenario(5)
    decision = np.asarray(rl.dcp_decision(correct[..., 0], group_mask, 0.5, None, row_mask=row_mask))
    att = ref.simulate_rollout(decision, correct, row_mask)
    s = {k: np.asarray(v) for k, v in rl.dcp_summary(decision, att, group_mask).items()}
    live = decision != PAD
    assert s["groups"] == live.sum()
    assert s["easy_groups"] == (decision == EASY).sum()
    assert s["debug_groups"] == (decision == DEBUG).sum()
    assert s["hopeless_groups"] == (decision == HOPELESS).sum()
    assert s["easy_groups"] + s["debug_groups"] + s["hopeless_groups"] == s["groups"]
    assert np.isclose(s["activated_fraction"], (decision == DEBUG).sum() / live.sum())
    np.testing.assert_array_equal(s["rows_per_turn"], att.sum(axis=(0, 1)))
    assert s["rows_per_turn"][0] == row_mask[live].sum()
    assert s["extra_rows"] == att[..., 1:].sum()
    empty = rl.dcp_summary(np.full(2, PAD), np.zeros((2, 3, 2), bool))
    assert float(empty["activated_fraction"]) == 0.0


def test_vmap_over_steps_matches_loop():
    cs = np.stack([_scenario(s)[0][..., 0] for s in range(4)])
    got = jax.vmap(lambda c: rl.dcp_decision(c, None, 0.5, None))(cs)
    for s in range(4):
        np.testing.assert_array_equal(got[s], rl.dcp_decision(cs[s], None, 0.5, None))


# ----------------------------------------------------------------------------------- history mode

def _history_inputs():
    correct, row_mask, group_mask = _scenario(6)
    task_ids = np.array([0, 1, 2, 0, 1, 3])
    return correct, row_mask, group_mask, task_ids


def test_history_never_changes_the_default_behaviour():
    correct, row_mask, group_mask, task_ids = _history_inputs()
    base = np.asarray(rl.dcp_decision(correct[..., 0], group_mask, 0.5, None, row_mask=row_mask))
    hist = rl.init_history(4)
    # a well-filled history, but the default rule (both adjustments off)
    hist = rl.DCPHistory(debugged=jnp.full(4, 100.0), recovered=jnp.array([0.0, 100.0, 50.0, 0.0]))
    got = rl.dcp_decision(correct[..., 0], group_mask, 0.5, None, row_mask=row_mask,
                          history=hist, task_ids=task_ids)
    np.testing.assert_array_equal(got, base)
    # active rules but a fresh history (nothing known yet): unchanged too
    rule = rl.HistoryRule(min_rows=4, demote_below=0.2, promote_above=0.8)
    got = rl.dcp_decision(correct[..., 0], group_mask, 0.5, None, row_mask=row_mask,
                          history=rl.init_history(4), task_ids=task_ids, rule=rule)
    np.testing.assert_array_equal(got, base)
    with pytest.raises(ValueError, match="task_ids"):
        rl.dcp_decision(correct[..., 0], history=hist)


def test_history_update_counts_and_rules():
    # 2 tasks, G = 4, T = 2; both groups debugged (2 of 4 failed on turn 1)
    correct = np.zeros((2, 4, 2), bool)
    correct[:, :2, 0] = True
    correct[0, 2, 1] = True                     # task 0: one of its two failures recovers
    decision = np.array([DEBUG, DEBUG])
    att = rl.attempt_schedule(decision, correct)
    hist = rl.update_history(rl.init_history(2), np.array([0, 1]), decision, correct, att)
    np.testing.assert_allclose(hist.debugged, [2.0, 2.0])
    np.testing.assert_allclose(hist.recovered, [1.0, 0.0])
    hist = rl.update_history(hist, np.array([1, 1]), decision, correct, att, decay=0.5)
    np.testing.assert_allclose(hist.debugged, [1.0, 1.0 + 4.0])
    np.testing.assert_allclose(hist.recovered, [0.5, 0.0 + 1.0])
    np.testing.assert_allclose(rl.recovery_rate(hist), [0.5, 0.2])
    # demote: task 1 recovers 20% < 30% -> its debug groups are abandoned; task 0 is not yet known
    rule = rl.HistoryRule(min_rows=2.0, demote_below=0.3)
    got = rl.apply_history(np.array([DEBUG, DEBUG, EASY]), hist, np.array([0, 1, 1]), rule)
    np.testing.assert_array_equal(got, [DEBUG, HOPELESS, EASY])
    # promote: all-failed groups of a task that usually recovers get debugged
    good = rl.DCPHistory(debugged=jnp.array([10.0, 10.0]), recovered=jnp.array([9.0, 1.0]))
    rule = rl.HistoryRule(min_rows=5.0, promote_above=0.8)
    got = rl.apply_history(np.array([HOPELESS, HOPELESS, PAD]), good, np.array([0, 1, 0]), rule)
    np.testing.assert_array_equal(got, [DEBUG, HOPELESS, PAD])
    with pytest.raises(ValueError, match="promote_above"):
        rl.apply_history(np.array([DEBUG]), good, np.array([0]), rl.HistoryRule(1, 0.5, 0.4))


def test_history_step_is_jittable():
    correct, row_mask, group_mask, task_ids = _history_inputs()
    rule = rl.HistoryRule(min_rows=1.0, demote_below=0.5)

    @jax.jit
    def step(hist, correct):
        d = rl.dcp_decision(correct[..., 0], group_mask, 0.5, None, row_mask=row_mask,
                            history=hist, task_ids=task_ids, rule=rule)
        att = rl.attempt_schedule(d, correct, row_mask)
        return rl.update_history(hist, task_ids, d, correct, att, row_mask), d

    hist = rl.init_history(4)
    for _ in range(3):
        hist, d = step(hist, correct)
    assert np.all(np.asarray(hist.recovered) <= np.asarray(hist.debugged))
    with pytest.raises(ValueError, match="num_tasks"):
        rl.init_history(0)


@pytest.mark.parametrize("bad, match", [(9, r"expected 0\.\.8 \(G\)"), (np.int64(-1), r"expected 0\.\.8 \(G\)"),
                                        (1.5, r"expected it in \[0, 1\]"), (float("nan"), r"in \[0, 1\]"),
                                        (True, "not a bool")])
def test_one_threshold_rule_for_dcp_and_the_config(bad, match):
    """rl.dcp and the run config reject the same thresholds with the same message (rl.options)."""
    from leap_jax.train.config import ConfigError, DCPCfg
    with pytest.raises(ValueError, match="t_min=.*" + match):
        rl.dcp_decision(np.zeros((2, 8), bool), t_min=bad, t_max=None)
    with pytest.raises(ConfigError, match="dcp.t_min=.*" + match):
        DCPCfg(t_min=bad).check(8, uses_dcp=True)


def test_config_validation_does_not_import_jax():
    import subprocess
    import sys
    code = ("import sys, leap_jax.train.config as c; import leap_jax.rl.options, leap_jax.sampling.params; "
            "assert 'jax' not in sys.modules, 'config imported jax'; "
            "from leap_jax.sampling import Sampler; from leap_jax.rl import dcp_decision; "
            "assert 'jax' in sys.modules and 'Sampler' in dir(leap_jax.sampling)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_one_band_rule_for_config_and_decision_over_the_whole_grid():
    """The config's "some group can be debugged" check and the jitted decision read a fractional
    threshold the same way for every fraction 0.01..0.99 and G 2..64, and both match exact rational
    arithmetic (t_min: the least k with k >= f*G; t_max: the greatest k with k <= f*G)."""
    from fractions import Fraction

    from leap_jax.rl.options import dcp_band
    from leap_jax.train.config import ConfigError, DCPCfg

    groups = np.arange(2, 65)
    for i in range(1, 100):
        f = i / 100
        exact = [Fraction(i, 100) * g for g in groups]
        want_lo = [math.ceil(x) for x in exact]
        want_hi = [math.floor(x) for x in exact]
        lo, hi = rl.resolve_thresholds(f, f, jnp.asarray(groups))
        assert np.asarray(lo).tolist() == want_lo, f
        assert np.asarray(hi).tolist() == want_hi, f
        for g, wl, wh in zip(groups.tolist(), want_lo, want_hi, strict=True):
            assert dcp_band(f, f, g) == (wl, wh)
            assert dcp_band(f, None, g) == (wl, g - 1)
            cfg = DCPCfg(t_min=f, t_max=0.3)
            if dcp_band(f, 0.3, g)[0] > dcp_band(f, 0.3, g)[1]:
                with pytest.raises(ConfigError, match="no group could ever be debugged"):
                    cfg.check(g, uses_dcp=True)
            else:
                cfg.check(g, uses_dcp=True)
    assert dcp_band(0.28, None, 25) == (7, 24)  # the case the two copies used to disagree on


def test_the_host_decision_is_the_array_rule():
    """decide_on_host (the rollout's per-group path, jitted on the CPU device) gives dcp_decision's
    decisions and the NumPy reference's, for counts and fractions (the count 1 and the fraction 1.0
    are different rules, compiled apart), with random row masks and one-group calls."""
    from leap_jax.rl.dcp import decide_on_host
    rng = np.random.default_rng(3)
    for g in (4, 8):
        c = _groups_with_every_n_fail(g, seed=g)
        mask = rng.random(c.shape) < 0.8
        for t_min, t_max in _THRESHOLDS + [(1, None), (1.0, None)]:
            want = np.asarray(rl.dcp_decision(c, None, t_min, t_max, row_mask=mask))
            got = decide_on_host(c, t_min, t_max, mask)
            assert got.dtype == np.int32
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(decide_on_host(c, t_min, t_max), ref.dcp_decision(c, t_min, t_max))
            for k in (0, g // 2, g):  # the rollout's one-group calls
                np.testing.assert_array_equal(decide_on_host(c[k:k + 1], t_min, t_max, mask[k:k + 1]), want[k:k + 1])
    c = _groups_with_every_n_fail(8)
    assert not np.array_equal(decide_on_host(c, 1, None), decide_on_host(c, 1.0, None))
    lo, hi = np.arange(9) % 4, np.full(9, 6)  # per-group array thresholds run eagerly, the same rule
    np.testing.assert_array_equal(decide_on_host(c, lo, hi), np.asarray(rl.dcp_decision(c, None, lo, hi)))
