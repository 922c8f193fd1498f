"""Losses (DESIGN 4.7): surrogate, KL, aggregation modes vs the NumPy reference, exact accumulation."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from leap_jax import rl
from tests.leap_jax import rl_numpy_ref as ref

ATOL = 1e-6
MODES = rl.AGGREGATION_MODES
MAX_LEN = 16.0


def _batch(seed, b=6, length=10, all_rows=False):
    rng = np.random.default_rng(seed)
    old = rng.uniform(-3.0, -0.1, (b, length)).astype(np.float32)
    logp = (old + rng.normal(0.0, 0.3, (b, length))).astype(np.float32)   # ratios on both clip sides
    ref_logp = (old + rng.normal(0.0, 0.2, (b, length))).astype(np.float32)
    adv = rng.normal(size=(b, length)).astype(np.float32)
    mask = rng.random((b, length)) < 0.75
    mask[:, 0] = True
    if not all_rows:
        mask[2] = False                          # a padding row (pruned / empty)
        logp[2], old[2] = 0.0, -1e30             # garbage in padding must not leak
    return logp, old, ref_logp, adv, mask


def _ref_loss(logp, old, ref_logp, adv, mask, mode, eps_low=0.2, eps_high=0.28, dual=None, beta=0.0):
    lp, o, rf, a = (x.astype(np.float64) for x in (logp, old, ref_logp, adv))
    o = np.where(mask, o, lp)                    # the reference only reads trainable tokens
    tok = ref.ppo_token_loss(lp, o, a, eps_low, eps_high, dual, rf if beta else None, beta)
    return ref.aggregate(tok, mask, mode, MAX_LEN)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("opts", [dict(), dict(dual=3.0), dict(beta=0.05), dict(eps_low=0.1, eps_high=0.4, dual=2.0, beta=0.1)])
def test_policy_loss_matches_reference(mode, seed, opts):
    logp, old, ref_logp, adv, mask = _batch(seed)
    s, d, metrics = rl.policy_loss(
        logp, old, adv, mask, eps_low=opts.get("eps_low", 0.2), eps_high=opts.get("eps_high", 0.28),
        dual_clip=opts.get("dual"), ref_logp=ref_logp if "beta" in opts else None,
        kl_beta=opts.get("beta", 0.0), mode=mode, max_len=MAX_LEN)
    want = _ref_loss(logp, old, ref_logp, adv, mask, mode, opts.get("eps_low", 0.2),
                     opts.get("eps_high", 0.28), opts.get("dual"), opts.get("beta", 0.0))
    np.testing.assert_allclose(float(s) / float(d), want, atol=ATOL, rtol=1e-6)
    rows = mask.any(axis=1).sum()
    assert float(d) == (mask.sum() if mode == "token-mean" else rows)
    assert np.isfinite(float(s))


def test_advantage_per_sequence_broadcasts():
    logp, old, _, adv, mask = _batch(3)
    seq_adv = adv[:, 0]
    s1, d1, _ = rl.policy_loss(logp, old, seq_adv, mask)
    s2, d2, _ = rl.policy_loss(logp, old, np.broadcast_to(seq_adv[:, None], adv.shape), mask)
    assert float(s1) == float(s2) and float(d1) == float(d2)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("mode,trl_type", [("token-mean", "bnpo"), ("seq-mean-token-mean", "grpo"),
                                           ("seq-mean-token-sum-norm", "dr_grpo")])
def test_aggregation_agrees_with_trl_style(seed, mode, trl_type):
    rng = np.random.default_rng(seed)
    per_token = rng.normal(size=(5, 9)).astype(np.float32)
    mask = rng.random((5, 9)) < 0.6
    mask[:, 0] = True                            # TRL: every row is a real completion
    s, d = rl.aggregate(per_token, mask, mode, max_len=9)
    want = ref.trl_aggregate(per_token.astype(np.float64), mask, trl_type, max_completion_length=9)
    np.testing.assert_allclose(float(s) / float(d), want, atol=ATOL, rtol=1e-6)


def test_metrics_match_numpy_counts_and_combine_exactly():
    logp, old, ref_logp, adv, mask = _batch(4)
    eps_low, eps_high, dual = 0.2, 0.28, 3.0
    _, _, m = rl.policy_loss(logp, old, adv, mask, eps_low=eps_low, eps_high=eps_high, dual_clip=dual,
                             ref_logp=ref_logp, kl_beta=0.0)
    lr = (logp.astype(np.float64) - old)[mask]
    ratio, a = np.exp(lr), adv[mask].astype(np.float64)
    assert float(m["num_tokens"]) == mask.sum()
    assert float(m["clip_low"]) == np.sum((a < 0) & (ratio < 1 - eps_low))
    assert float(m["clip_high"]) == np.sum((a > 0) & (ratio > 1 + eps_high))
    assert float(m["clip_low"]) > 0 and float(m["clip_high"]) > 0
    np.testing.assert_allclose(float(m["approx_kl_sum"]), np.sum(ratio - 1 - lr), rtol=1e-5)
    np.testing.assert_allclose(float(m["ratio_max"]), ratio.max(), rtol=1e-6)
    np.testing.assert_allclose(float(m["ratio_min"]), ratio.min(), rtol=1e-6)
    d = (ref_logp.astype(np.float64) - logp)[mask]
    np.testing.assert_allclose(float(m["kl_sum"]), np.sum(np.exp(d) - d - 1), rtol=1e-5)
    fin = rl.finalize_metrics(m)
    np.testing.assert_allclose(float(fin["clip_frac"]), (float(m["clip_low"]) + float(m["clip_high"])) / mask.sum())
    np.testing.assert_allclose(float(fin["ratio_mean"]), ratio.mean(), rtol=1e-5)
    np.testing.assert_allclose(float(fin["ratio_std"]), ratio.std(), rtol=1e-3, atol=1e-6)
    # micro-batch metrics combine to the full batch's
    parts = [rl.policy_loss(logp[sl], old[sl], adv[sl], mask[sl], dual_clip=dual, ref_logp=ref_logp[sl])[2]
             for sl in (slice(0, 2), slice(2, 3), slice(3, 6))]
    comb = functools.reduce(rl.combine_metrics, parts)
    for k in m:
        np.testing.assert_allclose(float(comb[k]), float(m[k]), rtol=1e-5, atol=1e-5, err_msg=k)


def test_dual_clip_caps_negative_advantage_loss():
    # A < 0 and a huge ratio: the plain clip loss grows as -A * ratio; dual clip caps it at -c * A
    logp = np.array([[0.0, 0.0]], np.float32)
    old = np.array([[-3.0, -3.0]], np.float32)          # ratio = e^3 ~ 20
    adv = np.array([[-1.0, 1.0]], np.float32)
    mask = np.ones((1, 2), bool)
    s, d, m = rl.policy_loss(logp, old, adv, mask, dual_clip=3.0, mode="seq-mean-token-sum-norm", max_len=1.0)
    # token 0: min(max(20.1, 0.8), 3) = 3; token 1: max(-20.1, -1.28) = -1.28
    np.testing.assert_allclose(float(s), 3.0 - 1.28, atol=1e-6)
    assert float(m["dual_clipped"]) == 1.0


def test_entropy_from_logits():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 7)).astype(np.float32) * 3
    ent = np.asarray(rl.entropy_from_logits(logits))
    lg = logits.astype(np.float64)
    p = np.exp(lg - lg.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(ent, -(p * np.log(p)).sum(-1), atol=1e-5)
    mask = np.array([[1, 1, 0], [0, 1, 1]], bool)
    z = np.zeros((2, 3), np.float32)
    _, _, m = rl.policy_loss(z, z, z, mask, logits=logits)
    np.testing.assert_allclose(float(m["entropy_sum"]), ent[mask].sum(), rtol=1e-5)


@pytest.mark.parametrize("clip_eps", [None, 0.2])
@pytest.mark.parametrize("mode", MODES)
def test_value_loss_matches_reference(clip_eps, mode):
    rng = np.random.default_rng(1)
    v_old = rng.normal(size=(4, 8)).astype(np.float32)
    v = (v_old + rng.normal(0, 0.4, (4, 8))).astype(np.float32)
    ret = rng.normal(size=(4, 8)).astype(np.float32)
    mask = rng.random((4, 8)) < 0.7
    mask[:, 0] = True
    s, d, m = rl.value_loss(v, v_old, ret, mask, clip_eps=clip_eps, mode=mode, max_len=MAX_LEN)
    tok = ref.value_token_loss(v.astype(np.float64), v_old, ret, clip_eps)
    np.testing.assert_allclose(float(s) / float(d), ref.aggregate(tok, mask, mode, MAX_LEN), atol=ATOL, rtol=1e-6)
    if clip_eps is not None:
        assert float(m["vf_clipped"]) > 0


# --------------------------------------------------------------------------- gradient accumulation

def _tiny_policy(seed, b=6, length=7, dim=5, vocab=11):
    """A linear 'model' giving per-token log-probs of fixed targets: enough to check gradients."""
    rng = np.random.default_rng(seed)
    params = {"w": jnp.asarray(rng.normal(0, 0.5, (dim, vocab)), jnp.float32),
              "v": jnp.asarray(rng.normal(0, 0.5, (dim,)), jnp.float32)}
    x = rng.normal(size=(b, length, dim)).astype(np.float32)
    targets = rng.integers(0, vocab, (b, length))
    mask = rng.random((b, length)) < 0.7
    mask[:, 0] = True
    mask[3] = False                              # a padding row
    adv = rng.normal(size=(b,)).astype(np.float32)
    returns = rng.normal(size=(b, length)).astype(np.float32)

    def logp_fn(p, xs, tg):
        lp = jax.nn.log_softmax(xs @ p["w"], axis=-1)
        return jnp.take_along_axis(lp, tg[..., None], axis=-1)[..., 0]

    old = np.asarray(logp_fn(jax.tree.map(lambda a: a * 0.9, params), x, targets))
    ref_lp = np.asarray(logp_fn(jax.tree.map(lambda a: a * 1.1, params), x, targets))
    return params, x, targets, mask, adv, returns, old, ref_lp, logp_fn


@pytest.mark.parametrize("mode", MODES)
def test_micro_batch_accumulation_is_exact_for_loss_and_grads(mode):
    with jax.default_matmul_precision("float32"):   # no TF32 on GPUs: compare exact float32 math
        _check_accumulation(mode)


def _check_accumulation(mode):
    params, x, tg, mask, adv, returns, old, ref_lp, logp_fn = _tiny_policy(0)

    @jax.jit
    def sums(p, xs, tgs, olds, refs, advs, rets, masks):
        lp = logp_fn(p, xs, tgs)
        s, d, _ = rl.policy_loss(lp, olds, advs, masks, dual_clip=3.0, ref_logp=refs, kl_beta=0.1,
                                 mode=mode, max_len=MAX_LEN)
        values = xs @ p["v"]
        vs, vd, _ = rl.value_loss(values, values * 0.9, rets, masks, mode=mode, max_len=MAX_LEN)
        return s + 0.5 * vs, (d, vd)          # one mask: policy and value share the denominator

    grad_sum = jax.jit(jax.grad(lambda p, *a: sums(p, *a)[0]))
    data = (x, tg, old, ref_lp, adv, returns, mask)
    s_full, (d_full, vd_full) = sums(params, *data)
    assert float(vd_full) == float(d_full)
    loss_full = float(s_full) / float(d_full)
    g_full = jax.grad(lambda p: sums(p, *data)[0] / sums(p, *data)[1][0])(params)

    parts = [slice(0, 2), slice(2, 3), slice(3, 4), slice(4, 6)]   # includes an all-padding micro-batch
    total_s = total_d = 0.0
    acc = jax.tree.map(jnp.zeros_like, params)
    for sl in parts:
        piece = tuple(a[sl] for a in data)
        s_k, (d_k, _) = sums(params, *piece)
        total_s, total_d = total_s + float(s_k), total_d + float(d_k)
        acc = jax.tree.map(jnp.add, acc, grad_sum(params, *piece))
    assert total_d == float(d_full)
    np.testing.assert_allclose(total_s / total_d, loss_full, rtol=1e-6, atol=1e-7)
    acc = jax.tree.map(lambda g: g / total_d, acc)
    for k in params:
        np.testing.assert_allclose(acc[k], g_full[k], rtol=1e-5, atol=1e-7, err_msg=k)


def test_padding_garbage_gives_finite_gradients():
    logp, old, ref_logp, adv, mask = _batch(0)
    ref_logp[2] = 1e30
    g = jax.grad(lambda lp: rl.policy_loss(lp, old, adv, mask, ref_logp=ref_logp, kl_beta=0.1)[0])(
        jnp.asarray(logp))
    assert np.isfinite(np.asarray(g)).all()
    assert np.all(np.asarray(g)[~mask] == 0.0)


def test_policy_loss_compiles_once_per_shape():
    traces = []

    @functools.partial(jax.jit, static_argnames=("mode",))
    def f(logp, old, adv, mask, eps_low, eps_high, beta, mode):
        traces.append(mode)
        s, d, m = rl.policy_loss(logp, old, adv, mask, eps_low=eps_low, eps_high=eps_high,
                                 ref_logp=old, kl_beta=beta, dual_clip=3.0, mode=mode, max_len=MAX_LEN)
        return s, d, m

    for seed in range(3):
        logp, old, _, adv, mask = _batch(seed)
        s, d, _ = f(logp, old, adv, mask, 0.2 + 0.01 * seed, 0.28, 0.01 * seed, "token-mean")
        tok = ref.ppo_token_loss(logp.astype(np.float64), np.where(mask, old, logp).astype(np.float64), adv,
                                 0.2 + 0.01 * seed, 0.28, 3.0, np.where(mask, old, logp), 0.01 * seed)
        np.testing.assert_allclose(float(s) / float(d), ref.aggregate(tok, mask, "token-mean"),
                                   atol=ATOL, rtol=1e-6)
    assert len(traces) == 1
    f(*_batch(0, b=3)[:2], _batch(0, b=3)[3], _batch(0, b=3)[4], 0.2, 0.28, 0.0, "token-mean")
    assert len(traces) == 2
    # vmap over stacked micro-batches
    stacked = [np.stack(x) for x in zip(*[_batch(s)[:5] for s in range(2)], strict=False)]
    sv, dv, _ = jax.vmap(lambda lp, o, r, a, m: rl.policy_loss(lp, o, a, m))(*stacked)
    for s in range(2):
        lp, o, _, a, m = _batch(s)
        s1, d1, _ = rl.policy_loss(lp, o, a, m)
        np.testing.assert_allclose(sv[s], s1, rtol=1e-6)
        assert dv[s] == d1


def test_loss_errors_are_clear_and_empty_batches_are_zero():
    logp, old, _, adv, mask = _batch(0)
    with pytest.raises(ValueError, match="unknown aggregation mode 'mean'"):
        rl.policy_loss(logp, old, adv, mask, mode="mean")
    with pytest.raises(ValueError, match="max_len"):
        rl.aggregate(logp, mask, "seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="ref_logp"):
        rl.policy_loss(logp, old, adv, mask, kl_beta=0.1)
    with pytest.raises(ValueError, match="dual_clip"):
        rl.policy_loss(logp, old, adv, mask, dual_clip=0.5)
    with pytest.raises(ValueError, match="advantages"):
        rl.policy_loss(logp, old, adv[:, :3], mask)
    none = np.zeros_like(mask)
    for mode in MODES:
        s, d, m = rl.policy_loss(logp, old, adv, none, mode=mode, max_len=MAX_LEN)
        assert float(rl.finalize_loss(s, d)) == 0.0 and float(d) == 0.0
        assert all(np.isfinite(float(v)) for v in rl.finalize_metrics(m).values())


@pytest.mark.parametrize("mode", MODES)
def test_packed_rows_with_segment_ids_equal_the_unpacked_batch(mode):
    logp, old, ref_logp, adv, mask = _batch(5, b=6, length=5)
    old = np.where(mask, old, -1.0).astype(np.float32)
    # pack rows (0, 1), (2, 3), (4, 5) into 3 rows of 12: [seq a | seq b | 2 padding slots]
    def pack(x, fill):
        out = np.full((3, 12), fill, x.dtype)
        out[:, :5], out[:, 5:10] = x[0::2], x[1::2]
        return out
    seg = np.zeros((3, 12), np.int32)
    seg[:, :5], seg[:, 5:10] = 4, 9                    # any distinct ids for neighbouring sequences
    packed_mask = pack(mask, True)                     # padding slots marked trainable: seg 0 wins
    kw = dict(dual_clip=3.0, kl_beta=0.1, mode=mode, max_len=MAX_LEN)
    s1, d1, m1 = rl.policy_loss(logp, old, adv, mask, ref_logp=ref_logp, **kw)
    s2, d2, m2 = rl.policy_loss(pack(logp, 0.0), pack(old, -1e30), pack(adv, 5.0), packed_mask,
                                ref_logp=pack(ref_logp, 1e30), segment_ids=seg, **kw)
    np.testing.assert_allclose(float(s2), float(s1), rtol=1e-6, atol=1e-6)
    assert float(d2) == float(d1)
    for k in m1:
        np.testing.assert_allclose(float(m2[k]), float(m1[k]), rtol=1e-5, atol=1e-6, err_msg=k)
    vs1, vd1, _ = rl.value_loss(logp, old, adv, mask, mode=mode, max_len=MAX_LEN)
    vs2, vd2, _ = rl.value_loss(pack(logp, 0.0), pack(old, 0.0), pack(adv, 0.0), packed_mask,
                                mode=mode, max_len=MAX_LEN, segment_ids=seg)
    np.testing.assert_allclose(float(vs2), float(vs1), rtol=1e-6, atol=1e-6)
    assert float(vd2) == float(vd1)
    with pytest.raises(ValueError, match="segment_ids"):
        rl.aggregate(logp, mask, mode, MAX_LEN, segment_ids=seg)
