"""Advantages: group baselines, TRLOO / Kevin pipelines, LEAP credit and GAE against the NumPy reference."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from leap_jax import rl
from tests.leap_jax import rl_numpy_ref as ref

ATOL = 1e-6


def _rewards(seed, n=5, g=6, t=None):
    rng = np.random.default_rng(seed)
    shape = (n, g) if t is None else (n, g, t)
    r = rng.normal(size=shape).astype(np.float32)
    mask = rng.random(shape) < 0.8
    r[0] = 0.7                                  # a zero-variance group
    mask[1] = False
    mask[1, 0] = True                           # a single-sample group (every trailing slot)
    return r, mask


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("ddof", [0, 1])
def test_group_zscore_matches_reference(seed, ddof):
    r, mask = _rewards(seed)
    got = np.asarray(rl.group_zscore(r, mask, ddof=ddof))
    np.testing.assert_allclose(got, ref.group_zscore(r, mask, ddof=ddof), atol=ATOL, rtol=1e-6)
    assert np.all(got[0] == 0.0) and np.all(got[1] == 0.0)   # zero variance / single sample: exact 0
    assert np.all(got[~mask] == 0.0) and np.isfinite(got).all()


def test_group_zscore_per_turn_groups_and_group_mask():
    r, mask = _rewards(3, t=3)
    got = np.asarray(rl.group_zscore(r, mask, axis=1))
    np.testing.assert_allclose(got, ref.group_zscore(r, mask), atol=ATOL, rtol=1e-6)
    gm = np.array([1, 1, 0, 1, 1], bool)
    got = np.asarray(rl.group_zscore(r, mask, gm, axis=1))
    assert np.all(got[2] == 0.0)
    np.testing.assert_allclose(got[3:], ref.group_zscore(r, mask)[3:], atol=ATOL, rtol=1e-6)
    # all-equal rewards that are not exactly representable still give exact zeros, never NaN
    flat = np.full((2, 8), 0.1, np.float32)
    assert np.all(np.asarray(rl.group_zscore(flat)) == 0.0)
    assert np.all(np.asarray(rl.group_zscore(flat, np.zeros((2, 8), bool))) == 0.0)


@pytest.mark.parametrize("seed", range(3))
def test_mean_baseline_and_leave_one_out_match_reference(seed):
    r, mask = _rewards(seed)
    np.testing.assert_allclose(rl.group_mean_baseline(r, mask), ref.group_mean_baseline(r, mask), atol=ATOL)
    loo = np.asarray(rl.leave_one_out(r, mask))
    np.testing.assert_allclose(loo, ref.leave_one_out(r, mask), atol=ATOL, rtol=1e-6)
    # single-sample rule: A = R
    np.testing.assert_allclose(loo[1, 0], r[1, 0], atol=ATOL)
    # rescaling identity A_i = N / (N - 1) * (R_i - mean R) for groups with N >= 2
    for k in range(r.shape[0]):
        idx = np.flatnonzero(mask[k])
        if len(idx) < 2:
            continue
        n = len(idx)
        want = n / (n - 1) * (r[k, idx].astype(np.float64) - r[k, idx].astype(np.float64).mean())
        np.testing.assert_allclose(loo[k, idx], want, atol=ATOL, rtol=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_trloo_pipeline_per_task_turn(seed):
    """Dr. Kernel: gamma=1 returns of Kevin-style scores, leave-one-out per (task, turn)."""
    rng = np.random.default_rng(seed)
    n, g, t = 4, 5, 3
    correct = rng.random((n, g, t)) < 0.4
    attempted = np.arange(t) < rng.integers(1, t + 1, (n, g))[..., None]
    scores = np.asarray(rl.kevin_scores(correct, rng.uniform(0.5, 2.0, (n, g, t)), attempted))
    returns = np.asarray(rl.discounted_returns(scores, attempted, 1.0))
    adv = np.asarray(rl.leave_one_out(returns, attempted, axis=1))
    want = ref.leave_one_out(ref.discounted_returns(scores.astype(np.float64), attempted, 1.0), attempted)
    np.testing.assert_allclose(adv, want, atol=ATOL, rtol=1e-6)
    row_mask = rng.random((n, g)) < 0.8
    got = rl.trloo_advantages(scores, attempted, row_mask)
    m = attempted & row_mask[..., None]
    want = ref.leave_one_out(ref.discounted_returns(scores.astype(np.float64), m, 1.0), m)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_kevin_pipeline_normalised_over_all_turn_samples(seed):
    rng = np.random.default_rng(seed)
    n, g, t = 3, 4, 3
    correct = rng.random((n, g, t)) < 0.4
    attempted = np.arange(t) < rng.integers(1, t + 1, (n, g))[..., None]
    speedup = rng.uniform(0.5, 2.0, (n, g, t))
    scores = rl.kevin_scores(correct, speedup, attempted)
    returns = rl.discounted_returns(scores, attempted, rl.rewards.KEVIN_GAMMA)
    adv = np.asarray(rl.group_zscore(returns, attempted, axis=(1, 2)))
    want_r = ref.discounted_returns(ref.kevin_scores(correct, speedup, attempted), attempted, 0.4)
    np.testing.assert_allclose(adv, ref.group_zscore_pooled(want_r, attempted), atol=ATOL, rtol=1e-6)
    np.testing.assert_allclose(rl.kevin_advantages(scores, attempted), ref.group_zscore_pooled(want_r, attempted),
                               atol=ATOL, rtol=1e-6)
    with pytest.raises(ValueError, match="group axis"):
        rl.group_zscore(returns, attempted, axis=(0, 1))


def _leap_batch(seed, n=4, g=6, t=3):
    rng = np.random.default_rng(seed)
    correct = rng.random((n, g, t)) < 0.35
    row_mask = rng.random((n, g)) < 0.9
    decision = rl.dcp_decision(correct[..., 0], None, 0.5, None, row_mask=row_mask)
    attempted = np.asarray(rl.attempt_schedule(decision, correct, row_mask))
    keys = np.asarray(rl.outcome_keys(correct, attempted))
    return keys, attempted, row_mask


@pytest.mark.parametrize("seed", range(3))
def test_trajectory_and_per_turn_credit(seed):
    keys, attempted, row_mask = _leap_batch(seed)
    r = np.asarray(rl.rank_reward(keys, row_mask))
    traj = np.asarray(rl.trajectory_credit(r, attempted))
    for idx in np.ndindex(attempted.shape):
        assert traj[idx] == (r[idx[:2]] if attempted[idx] else 0.0)
    per = np.asarray(rl.per_turn_credit(keys, attempted, row_mask))
    np.testing.assert_allclose(per, ref.per_turn_credit(keys, attempted, row_mask), atol=ATOL)
    np.testing.assert_allclose(per[..., 0], traj[..., 0], atol=ATOL)   # turn 1 is the same
    # each turn's credit is zero-sum over the rows that attempted it
    np.testing.assert_allclose((per * attempted).sum(axis=1), 0.0, atol=1e-6)


def test_token_advantages_follow_each_tokens_turn():
    rng = np.random.default_rng(0)
    adv = rng.normal(size=(3, 4, 2)).astype(np.float32)
    seq_group = np.array([0, 2, 1])
    seq_row = np.array([3, 0, 1])
    token_turn = np.array([[-1, 0, 0, -1, 1, 1], [-1, -1, 0, 0, 0, -1], [0, 1, 2, -1, -1, -1]])
    got = np.asarray(rl.token_advantages(adv, seq_group, seq_row, token_turn))
    for b in range(3):
        for pos in range(6):
            tt = token_turn[b, pos]
            want = adv[seq_group[b], seq_row[b], tt] if 0 <= tt < 2 else 0.0
            assert got[b, pos] == want


def _gae_inputs(seed, b=4, length=12):
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(b, length)).astype(np.float32)
    values = rng.normal(size=(b, length)).astype(np.float32)
    mask = rng.random((b, length)) < 0.7       # holes: feedback tokens between turns
    mask[-1] = False                            # an all-padding row
    return rewards, values, mask


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (0.99, 0.95), (0.5, 0.0)])
def test_gae_matches_a_python_loop(seed, gamma, lam):
    rewards, values, mask = _gae_inputs(seed)
    adv, ret = rl.gae(rewards, values, mask, gamma, lam)
    want_adv, want_ret = ref.gae(rewards, values, mask, gamma, lam)
    np.testing.assert_allclose(adv, want_adv, atol=1e-6, rtol=1e-6)
    np.testing.assert_allclose(ret, want_ret, atol=1e-6, rtol=1e-6)
    boot = np.array([0.5, -1.0, 2.0, 0.0], np.float32)
    adv, ret = rl.gae(rewards, values, mask, gamma, lam, bootstrap_value=boot)
    want_adv, want_ret = ref.gae(rewards, values, mask, gamma, lam, boot)
    np.testing.assert_allclose(adv, want_adv, atol=1e-6, rtol=1e-6)


def test_gae_lambda1_gamma1_is_return_to_go_minus_value():
    rewards, values, mask = _gae_inputs(5)
    adv, ret = (np.asarray(x) for x in rl.gae(rewards, values, mask, 1.0, 1.0))
    for b in range(rewards.shape[0]):
        steps = np.flatnonzero(mask[b])
        for i, t in enumerate(steps):
            togo = rewards[b, steps[i:]].astype(np.float64).sum()
            np.testing.assert_allclose(ret[b, t], togo, atol=1e-6, rtol=1e-6)


def test_gae_jit_once_with_traced_gamma_lambda_and_vmap():
    traces = []

    @jax.jit
    def f(r, v, m, gamma, lam):
        traces.append(1)
        return rl.gae(r, v, m, gamma, lam)

    rewards, values, mask = _gae_inputs(1)
    for gamma, lam in [(1.0, 0.9), (0.9, 0.5)]:
        adv, _ = f(rewards, values, mask, gamma, lam)
        np.testing.assert_allclose(adv, ref.gae(rewards, values, mask, gamma, lam)[0], atol=1e-6, rtol=1e-6)
    assert len(traces) == 1
    stacked = [np.stack(x) for x in zip(*[_gae_inputs(s) for s in range(3)], strict=False)]
    adv_v, _ = jax.vmap(lambda r, v, m: rl.gae(r, v, m, 0.9, 0.8))(*stacked)
    for s in range(3):
        np.testing.assert_allclose(adv_v[s], ref.gae(*_gae_inputs(s), 0.9, 0.8)[0], atol=1e-6, rtol=1e-6)


def test_advantages_jit_compile_once_per_shape():
    traces = []

    @jax.jit
    def f(r, m):
        traces.append(1)
        return rl.group_zscore(r, m), rl.leave_one_out(r, m), rl.group_mean_baseline(r, m)

    for seed in range(3):
        r, mask = _rewards(seed)
        z, loo, _ = f(r, mask)
        np.testing.assert_allclose(loo, ref.leave_one_out(r, mask), atol=ATOL, rtol=1e-6)
    assert len(traces) == 1
    with pytest.raises(ValueError, match="mask"):
        rl.group_zscore(np.zeros((2, 3)), np.zeros((2, 4), bool))
    with pytest.raises(ValueError, match="gae"):
        rl.gae(np.zeros((2, 3)), np.zeros((2, 4)), np.ones((2, 3), bool))
    assert jnp.isfinite(rl.group_zscore(np.zeros((1, 1)))).all()
