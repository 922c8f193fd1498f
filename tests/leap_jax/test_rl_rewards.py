"""Rewards (DESIGN 4.5, 4.6): rank-reward properties (hypothesis) and agreement with the NumPy reference."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leap_jax import rl
from tests.leap_jax import rl_numpy_ref as ref

N, G, T = 3, 8, 3  # fixed shapes (one compile); masks vary the number of valid rows
ATOL = 1e-6

rank_jit = jax.jit(rl.rank_reward, static_argnames=("num_turns",))


@st.composite
def groups(draw, min_valid=0):
    keys = np.array(draw(st.lists(st.lists(st.integers(1, T + 1), min_size=G, max_size=G),
                                  min_size=N, max_size=N)), np.int32)
    row_mask = np.array(draw(st.lists(st.lists(st.booleans(), min_size=G, max_size=G),
                                      min_size=N, max_size=N)), bool)
    for k in range(N):  # guarantee at least min_valid valid rows per group
        row_mask[k, :min_valid] = True
    return keys, row_mask


PROPS = settings(max_examples=50, deadline=None, derandomize=True)  # deterministic in CI


@PROPS
@given(groups())
def test_rank_reward_bounded_zero_sum_and_masked_rows_zero(data):
    keys, row_mask = data
    r = np.asarray(rank_jit(keys, row_mask))
    assert np.all(r >= -1 - 1e-7) and np.all(r <= 1 + 1e-7)
    np.testing.assert_allclose((r * row_mask).sum(axis=1), 0.0, atol=1e-6)
    assert np.all(r[~row_mask] == 0.0)
    for k in range(N):
        if row_mask[k].sum() < 2:
            assert np.all(r[k] == 0.0)


@PROPS
@given(groups(), st.randoms(use_true_random=False))
def test_rank_reward_permutation_invariant(data, rnd):
    keys, row_mask = data
    perm = np.array(rnd.sample(range(G), G))
    r = np.asarray(rank_jit(keys, row_mask))
    rp = np.asarray(rank_jit(keys[:, perm], row_mask[:, perm]))
    np.testing.assert_allclose(rp, r[:, perm], atol=ATOL)


@PROPS
@given(groups(min_valid=2))
def test_turn1_solve_never_below_a_peer_and_equal_keys_tie(data):
    keys, row_mask = data
    r = np.asarray(rank_jit(keys, row_mask))
    for k in range(N):
        idx = np.flatnonzero(row_mask[k])
        for i in idx:
            for j in idx:
                if keys[k, i] == 1:
                    assert r[k, i] >= r[k, j] - 1e-7
                if keys[k, i] == keys[k, j]:
                    assert r[k, i] == r[k, j]
                if keys[k, i] < keys[k, j]:
                    assert r[k, i] > r[k, j]


@PROPS
@given(st.integers(2, G), st.data())
def test_turn2_solve_negative_on_easy_group_positive_on_hard(n_valid, data):
    # an easy group: more than half of the valid rows solve on turn 1, one row solves on turn 2
    n_t1 = data.draw(st.integers(n_valid // 2 + 1, n_valid - 1)) if n_valid >= 3 else None
    row_mask = np.zeros((1, G), bool)
    row_mask[0, :n_valid] = True
    rest = data.draw(st.lists(st.integers(2, T + 1), min_size=G, max_size=G))
    if n_t1 is not None:
        keys = np.array([[1] * n_t1 + [2] + rest[: G - n_t1 - 1]], np.int32)
        r = np.asarray(rank_jit(keys, row_mask))
        assert r[0, n_t1] < 0
    # a hard group: more than half of the valid rows never solve, one row solves on turn 2
    n_fail = data.draw(st.integers(n_valid // 2 + 1, n_valid - 1)) if n_valid >= 3 else 1
    others = data.draw(st.lists(st.integers(1, T), min_size=G, max_size=G))
    keys = np.array([[T + 1] * n_fail + [2] + others[: G - n_fail - 1]], np.int32)
    r = np.asarray(rank_jit(keys, row_mask))
    assert r[0, n_fail] > 0


def test_rank_reward_known_values_and_padding_group():
    keys = np.array([[1, 1, 2, 4, 4, 4, 4, 4], [2, 2, 2, 2, 2, 2, 2, 2]], np.int32)
    r = np.asarray(rl.rank_reward(keys))
    np.testing.assert_allclose(r[0], np.array([6, 6, 3, -3, -3, -3, -3, -3]) / 7, atol=ATOL)
    assert np.all(r[1] == 0.0)
    r = np.asarray(rl.rank_reward(keys, group_mask=np.array([False, True])))
    assert np.all(r == 0.0)


def _random_outcomes(seed, n=4, g=6, t=3):
    rng = np.random.default_rng(seed)
    correct = rng.random((n, g, t)) < 0.3
    attempted = np.ones((n, g, t), bool)
    stop = rng.integers(1, t + 1, size=(n, g))          # pruned rows have no later attempts
    attempted &= np.arange(t) < stop[..., None]
    speedup = np.round(rng.uniform(0.5, 3.0, (n, g, t)), 1)   # rounding makes real ties
    speedup[0, 0, :] = np.nan
    status = rng.integers(0, 5, (n, g, t))
    row_mask = rng.random((n, g)) < 0.85
    group_mask = np.ones(n, bool)
    group_mask[-1] = False
    return correct, attempted, speedup, status, row_mask, group_mask


@pytest.mark.parametrize("seed", range(4))
def test_outcome_keys_and_finer_keys_match_reference(seed):
    correct, attempted, speedup, status, row_mask, group_mask = _random_outcomes(seed)
    t = correct.shape[-1]
    keys = np.asarray(rl.outcome_keys(correct, attempted))
    np.testing.assert_array_equal(keys, ref.outcome_keys(correct, attempted))
    np.testing.assert_allclose(rl.rank_reward(keys, row_mask, group_mask),
                               ref.rank_reward(keys, row_mask, group_mask), atol=ATOL)
    sp = np.asarray(rl.first_correct_value(speedup, correct, attempted))
    stt = np.asarray(rl.last_attempted_value(status, attempted, fill=-1))
    for k, i in np.ndindex(keys.shape):
        if keys[k, i] <= t:
            want = speedup[k, i, keys[k, i] - 1]
            assert (np.isnan(want) and np.isnan(sp[k, i])) or sp[k, i] == np.float32(want)
        else:
            assert sp[k, i] == 0.0
        last = np.flatnonzero(attempted[k, i])
        assert stt[k, i] == (status[k, i, last[-1]] if len(last) else -1)
    for kw in (dict(speedup=sp), dict(status_rank=stt), dict(speedup=sp, status_rank=stt)):
        got = rl.rank_reward(keys, row_mask, group_mask, num_turns=t, **kw)
        want = ref.rank_reward(keys, row_mask, group_mask, num_turns=t, **kw)
        np.testing.assert_allclose(got, want, atol=ATOL)
        got = np.asarray(got)
        np.testing.assert_allclose((got * row_mask).sum(axis=1), 0.0, atol=1e-6)


def test_finer_keys_order_within_a_turn_and_among_failures():
    # T = 2: rows 0, 1 solve on turn 1 (speedups 2.0, 1.0), rows 2, 3 fail (statuses 4, 1)
    keys = np.array([[1, 1, 3, 3]], np.int32)
    sp = np.array([[2.0, 1.0, 0.0, 0.0]])
    stt = np.array([[5, 5, 4, 1]])
    plain = np.asarray(rl.rank_reward(keys))
    assert plain[0, 0] == plain[0, 1] and plain[0, 2] == plain[0, 3]
    fine = np.asarray(rl.rank_reward(keys, num_turns=2, speedup=sp, status_rank=stt))
    np.testing.assert_allclose(fine[0], [1.0, 1 / 3, -1 / 3, -1.0], atol=ATOL)
    with pytest.raises(ValueError, match="num_turns"):
        rl.rank_reward(keys, speedup=sp)


@pytest.mark.parametrize("seed", range(3))
def test_baseline_rewards_match_reference(seed):
    correct, attempted, speedup, _, row_mask, group_mask = _random_outcomes(seed)
    np.testing.assert_allclose(rl.final_success_reward(correct, attempted, row_mask),
                               ref.final_success_reward(correct, attempted, row_mask), atol=ATOL)
    b = np.asarray(rl.binary_reward(correct[..., 0], row_mask, group_mask))
    np.testing.assert_array_equal(b, (correct[..., 0] & row_mask & group_mask[:, None]).astype(float))
    s = np.asarray(rl.kevin_scores(correct, speedup, attempted))
    np.testing.assert_allclose(s, ref.kevin_scores(correct, speedup, attempted), atol=ATOL)
    for gamma in (0.0, 0.4, 1.0, 0.93):
        got = rl.discounted_returns(s, attempted, gamma)
        np.testing.assert_allclose(got, ref.discounted_returns(s, attempted, gamma), atol=ATOL, rtol=1e-6)


def test_discounted_returns_jit_traced_gamma_compiles_once():
    traces = []

    @jax.jit
    def f(s, a, gamma):
        traces.append(1)
        return rl.discounted_returns(s, a, gamma)

    rng = np.random.default_rng(0)
    s = rng.random((2, 3, 4)).astype(np.float32)
    a = np.ones((2, 3, 4), bool)
    for gamma in (0.4, 0.9, 1.0):
        np.testing.assert_allclose(f(s, a, gamma), ref.discounted_returns(s, a, gamma), atol=ATOL)
    assert len(traces) == 1


def test_rewards_vmap_over_a_leading_axis():
    batch = [_random_outcomes(s) for s in range(3)]
    correct = np.stack([b[0] for b in batch])
    attempted = np.stack([b[1] for b in batch])
    row_mask = np.stack([b[4] for b in batch])

    def f(c, a, m):
        return rl.rank_reward(rl.outcome_keys(c, a), m)

    got = jax.vmap(f)(correct, attempted, row_mask)
    for i in range(3):
        np.testing.assert_allclose(got[i], f(correct[i], attempted[i], row_mask[i]), atol=ATOL)


def test_shape_errors_are_clear():
    with pytest.raises(ValueError, match=r"\[num_groups, G, T\]"):
        rl.outcome_keys(np.zeros((2, 3), bool))
    with pytest.raises(ValueError, match="row_mask"):
        rl.rank_reward(np.ones((2, 3), np.int32), np.ones((2, 4), bool))
    with pytest.raises(ValueError, match="speedup"):
        rl.kevin_scores(np.zeros((1, 2, 3), bool), np.zeros((1, 2)))
    assert jnp.asarray(rl.rank_reward(np.ones((1, 1), np.int32))).item() == 0.0


def _ref_from_turns(correct, attempted, speedup, status, row_mask, group_mask):
    """Keys plus the finer keys read by hand: speedup at the first solve, status at the last attempt."""
    t = correct.shape[-1]
    keys = ref.outcome_keys(correct, attempted)
    sp_row = np.zeros(keys.shape)
    st_row = np.zeros(keys.shape)
    for k, i in np.ndindex(keys.shape):
        if keys[k, i] <= t:
            sp_row[k, i] = speedup[k, i, keys[k, i] - 1]
        done = np.flatnonzero(attempted[k, i])
        st_row[k, i] = status[k, i, done[-1]] if len(done) else 0
    return ref.rank_reward(keys, row_mask, group_mask, num_turns=t, speedup=sp_row, status_rank=st_row)


@pytest.mark.parametrize("seed", range(2))
def test_rank_reward_from_turns_and_jit_once_per_shape(seed):
    correct, attempted, speedup, status, row_mask, group_mask = _random_outcomes(seed)
    traces = []

    @jax.jit
    def f(c, a, m, gm, sp, stt):
        traces.append(1)
        return rl.rank_reward_from_turns(c, a, m, gm, speedup=sp, status_rank=stt)

    for c in (correct, ~correct, correct):
        np.testing.assert_allclose(f(c, attempted, row_mask, group_mask, speedup, status),
                                   _ref_from_turns(c, attempted, speedup, status, row_mask, group_mask),
                                   atol=ATOL)
    assert len(traces) == 1
    plain = rl.rank_reward_from_turns(correct, attempted, row_mask, group_mask)
    want = ref.rank_reward(ref.outcome_keys(correct, attempted), row_mask, group_mask)
    np.testing.assert_allclose(plain, want, atol=ATOL)
