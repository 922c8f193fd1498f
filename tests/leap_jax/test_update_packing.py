"""Packed update rows: packed log-probs and updates equal the unpacked ones, segments are isolated,
zero-advantage conversations can be dropped without changing the update, the loop update compiles
once per row length whatever the row count, and packing keeps padding low on a realistic mix."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from leap_jax.models import decoder
from leap_jax.models.config import ModelConfig
from leap_jax.models.logprobs import token_logprobs
from leap_jax.rollout.multiturn import Row
from leap_jax.train.config import OptimizerCfg
from leap_jax.train.update import build_batch, make_optimizer, make_update, pack_rows, rows_per_micro_batch

V = 64
CFG = ModelConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                  num_kv_heads=2, dtype="float32", param_dtype="float32")


def _rows(n_groups=2, group=4, turns=2, seed=0, zero_groups=()):
    """Conversations of varied lengths; the first token of row k is k + 1 (identifies it)."""
    rng = np.random.default_rng(seed)
    rows = []
    for g in range(n_groups):
        for i in range(group):
            k = g * group + i
            r = Row(task="t", group=g, index=i)
            r.append([k + 1] + rng.integers(20, V, rng.integers(3, 9)).tolist(), False, None, 0)
            for t in range(1, rng.integers(1, turns + 1) + 1):
                n = int(rng.integers(2, 12))
                r.append(rng.integers(20, V, n).tolist(), True, rng.normal(-3.0, 0.2, n), t)
                r.append(rng.integers(20, V, int(rng.integers(1, 4))).tolist(), False, None, 0)
            rows.append(r)
    adv = rng.normal(size=(n_groups, group, turns)).astype(np.float32)
    for g in zero_groups:
        adv[g] = 0.0
    return rows, adv


def _logp(params, b):
    return np.asarray(token_logprobs(params["model"], CFG, jnp.asarray(b["tokens"]), jnp.asarray(b["positions"]),
                                     jnp.asarray(b["targets"]), segment_ids=jnp.asarray(b["segment_ids"])))


def _per_conversation(b, lp):
    """{row id k: masked log-probs in order} from a (packed or not) batch."""
    out = {}
    for r in range(b["tokens"].shape[0]):
        seg = b["segment_ids"][r]
        for s in np.unique(seg[seg > 0]):
            sl = seg == s
            k = int(b["tokens"][r][sl][0]) - 1
            out[k] = lp[r][sl & b["mask"][r]]
    return out


@pytest.fixture(scope="module")
def params():
    return {"model": decoder.init(CFG, jax.random.key(0))}


def test_pack_rows_first_fit_decreasing():
    bins = pack_rows([5, 9, 3, 7, 2], 10)
    assert sorted(sum(bins, [])) == [0, 1, 2, 3, 4]
    assert all(sum([5, 9, 3, 7, 2][i] for i in b) <= 10 for b in bins)
    assert bins[0] == [1] and len(bins) == 3  # 9 | 7 3 | 5 2
    with pytest.raises(ValueError, match="exceeds"):
        pack_rows([11], 10)


def test_packed_logprobs_equal_unpacked(params):
    rows, adv = _rows()
    mask = np.ones(adv.shape[:2], bool)
    plain = build_batch(rows, adv, mask, 4, micro_batch_size=2, pad_to_multiple=16)
    stats = {}
    packed = build_batch(rows, adv, mask, 4, micro_batch_size=2, pad_to_multiple=16, pack=True, stats=stats)
    assert packed["tokens"].shape[0] < plain["tokens"].shape[0]
    assert stats["slots"] == packed["tokens"].size and stats["real_tokens"] == (packed["segment_ids"] > 0).sum()
    a, b = _per_conversation(plain, _logp(params, plain)), _per_conversation(packed, _logp(params, packed))
    assert sorted(a) == sorted(b) == list(range(len(rows)))
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-6)
    # same advantages and old log-probs per conversation
    for key in ("advantages", "old_logp"):
        pa = _per_conversation(plain, plain[key])
        pb = _per_conversation(packed, packed[key])
        for k in pa:
            np.testing.assert_array_equal(pa[k], pb[k])


def test_segment_never_sees_another(params):
    rows, adv = _rows(seed=3)
    packed = build_batch(rows, adv, np.ones(adv.shape[:2], bool), 4, micro_batch_size=1,
                         pad_to_multiple=16, pack=True)
    r = int(np.argmax(packed["segment_ids"].max(axis=1)))  # a row with the most segments
    seg = packed["segment_ids"][r]
    assert seg.max() >= 2
    lp = _logp(params, packed)
    other = packed["tokens"].copy()
    target = seg == 1
    other[r, target] = (other[r, target] + 7) % V  # perturb segment 1 only
    pert = dict(packed, tokens=other)
    lp2 = _logp(params, pert)
    rest = (seg >= 2)
    np.testing.assert_array_equal(lp2[r, rest], lp[r, rest])
    assert not np.allclose(lp2[r, target], lp[r, target])


def _one_update(batch, mode, accumulate, mb=2):
    opt = OptimizerCfg(lr=1e-2, grad_clip=1.0)
    tx, sch = make_optimizer(opt, 10)
    upd = make_update(CFG, tx, sch, micro_batch_size=mb, aggregation=mode, max_len=40.0, accumulate=accumulate)
    p0 = {"model": decoder.init(CFG, jax.random.key(0))}
    p, _, m = upd(p0, tx.init(p0), batch)
    return p, m


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_packed_and_dropped_update_equals_unpacked(mode):
    rows, adv = _rows(n_groups=3, zero_groups=(1,))
    mask = np.ones(adv.shape[:2], bool)
    kw = dict(micro_batch_size=2, pad_to_multiple=16, aggregation=mode)
    ref_batch = build_batch(rows, adv, mask, 4, **kw)
    del ref_batch["pg_denom"]  # the former path: denominators from the mask
    p_ref, m_ref = _one_update(ref_batch, mode, "scan")
    stats = {}
    packed = build_batch(rows, adv, mask, 4, pack=True, drop_zero_advantage=True, stats=stats, **kw)
    assert stats["dropped_conversations"] == 4  # group 1 has advantage 0 everywhere
    assert stats["trainable_tokens"] < stats["all_trainable_tokens"]
    for acc in (("scan", "loop") if mode == "token-mean" else ("loop",)):
        p, m = _one_update(packed, mode, acc)
        assert float(m["loss/policy"]) == pytest.approx(float(m_ref["loss/policy"]), rel=1e-5, abs=1e-7)
        assert float(m["optim/grad_norm"]) == pytest.approx(float(m_ref["optim/grad_norm"]), rel=1e-5)
        for x, y in zip(jax.tree_util.tree_leaves(p), jax.tree_util.tree_leaves(p_ref), strict=False):
            # AdamW's first step is ~lr * sign(g): 1e-6 is 1e-4 of the 1e-2 step
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)


def test_loop_update_equals_scan_update_and_compiles_once():
    opt = OptimizerCfg(lr=1e-2, grad_clip=1.0)
    tx, sch = make_optimizer(opt, 10)
    loop = make_update(CFG, tx, sch, micro_batch_size=2, accumulate="loop")
    scan = make_update(CFG, tx, sch, micro_batch_size=2, accumulate="scan")
    p0 = {"model": decoder.init(CFG, jax.random.key(0))}
    for n_groups in (1, 3):  # 4 and 12 conversations: different row counts, one row length
        rows, adv = _rows(n_groups=n_groups, seed=n_groups)
        b = build_batch(rows, adv, np.ones(adv.shape[:2], bool), 4, micro_batch_size=2,
                        pad_to_multiple=16, pack=True, pack_len=64)
        pl, _, ml = loop(p0, tx.init(p0), b)
        ps, _, ms = scan(p0, tx.init(p0), {k: jnp.asarray(v) for k, v in b.items()})
        for k in ml:
            np.testing.assert_allclose(np.asarray(ml[k]), np.asarray(ms[k]), rtol=1e-6, atol=1e-7)
        for x, y in zip(jax.tree_util.tree_leaves(pl), jax.tree_util.tree_leaves(ps), strict=False):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7)
    assert loop.acc_jit._cache_size() == 1


@pytest.mark.parametrize("mb,row_len,cap,want", [
    (16, 4096, None, 16), (16, 4096, 32768, 8), (16, 2048, 32768, 16), (16, 4096, 20000, 4),
    (12, 1024, 5000, 4), (12, 1024, 3000, 2), (8, 4096, 100, 1), (6, 512, 2048, 3)])
def test_rows_per_micro_batch_is_the_largest_fitting_divisor(mb, row_len, cap, want):
    assert rows_per_micro_batch(mb, row_len, cap) == want


def test_rows_per_micro_batch_names_a_bad_cap():
    with pytest.raises(ValueError, match="max_tokens=0"):
        rows_per_micro_batch(8, 64, 0)
    with pytest.raises(ValueError, match="micro_batch_tokens=0"):
        make_update(CFG, *make_optimizer(OptimizerCfg(), 1), micro_batch_size=2, micro_batch_tokens=0)


@pytest.mark.parametrize("accumulate", ["loop", "scan"])
def test_token_capped_micro_batches_give_the_same_update(accumulate):
    """optimizer.micro_batch_tokens only splits long rows into smaller micro-batches: the update is
    the same (a sum in another order) and the loop compiles a [rows, L] program of fewer rows."""
    opt = OptimizerCfg(lr=1e-2, grad_clip=1.0)
    tx, sch = make_optimizer(opt, 10)
    rows, adv = _rows(n_groups=3, seed=2)
    b = build_batch(rows, adv, np.ones(adv.shape[:2], bool), 4, micro_batch_size=4, pad_to_multiple=16,
                    pack=True, pack_len=64)
    assert b["tokens"].shape[1] == 64 and b["tokens"].shape[0] % 4 == 0
    put = (lambda x: x) if accumulate == "loop" else (lambda x: {k: jnp.asarray(v) for k, v in x.items()})
    p0 = {"model": decoder.init(CFG, jax.random.key(1))}
    plain = make_update(CFG, tx, sch, micro_batch_size=4, accumulate=accumulate)
    capped = make_update(CFG, tx, sch, micro_batch_size=4, accumulate=accumulate, micro_batch_tokens=128)
    p_ref, _, m_ref = plain(p0, tx.init(p0), put(b))
    p, _, m = capped(p0, tx.init(p0), put(b))
    # 128 slots / 64 per row: micro-batches of 2 rows instead of 4
    assert (int(m_ref.pop("update/micro_batch_rows")), int(m.pop("update/micro_batch_rows"))) == (4, 2)
    assert m.keys() == m_ref.keys()
    for k in m_ref:
        np.testing.assert_allclose(np.asarray(m[k]), np.asarray(m_ref[k]), rtol=1e-5, atol=1e-7)
    for x, y in zip(jax.tree_util.tree_leaves(p), jax.tree_util.tree_leaves(p_ref), strict=True):
        # AdamW's first step is ~lr * g / |g|: a gradient near 0 summed in another order moves its
        # step by up to ~1e-4 of the 1e-2 step
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-5)


def test_donating_loop_update_runs_twice_on_one_shape():
    """The trainer donates params, optimizer state and the gradient accumulator; a second update of
    the same (B, L) must not find a cached input deleted by the first (it did on the H200)."""
    opt = OptimizerCfg(lr=1e-2, grad_clip=1.0)
    tx, sch = make_optimizer(opt, 10)
    loop = make_update(CFG, tx, sch, micro_batch_size=2, accumulate="loop", donate=True)
    plain = make_update(CFG, tx, sch, micro_batch_size=2, accumulate="loop")
    rows, adv = _rows(n_groups=1, seed=5)
    b = build_batch(rows, adv, np.ones(adv.shape[:2], bool), 4, micro_batch_size=2, pad_to_multiple=16,
                    pack=True, pack_len=64)
    p0 = {"model": decoder.init(CFG, jax.random.key(0))}
    p_ref, s_ref = p0, tx.init(p0)
    for _ in range(2):
        p_ref, s_ref, m_ref = plain(p_ref, s_ref, b)
    p = jax.tree_util.tree_map(jnp.copy, p0)
    s = tx.init(p)
    for _ in range(2):
        p, s, m = loop(p, s, b)
    assert float(m["loss/policy"]) == pytest.approx(float(m_ref["loss/policy"]), rel=1e-6)
    for x, y in zip(jax.tree_util.tree_leaves(p), jax.tree_util.tree_leaves(p_ref), strict=False):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7)


def test_all_zero_advantages_keep_one_conversation():
    rows, adv = _rows(zero_groups=(0, 1))
    b = build_batch(rows, adv, np.ones(adv.shape[:2], bool), 4, micro_batch_size=2, pad_to_multiple=16,
                    pack=True, drop_zero_advantage=True)
    assert (b["segment_ids"] > 0).any() and not b["advantages"].any()
    assert float(b["pg_denom"]) == sum(int(np.sum(r.trainable[1:])) for r in rows)


def test_padding_ratio_on_a_realistic_length_mix():
    """64 conversations like the experiment's: ~450-token prompts, 1-3 turns of 100-1536 tokens
    with ~150-token feedback; packed into the length bucket of the longest (4096 here)."""
    rng = np.random.default_rng(0)
    rows = []
    for k in range(64):
        r = Row(task="t", group=k // 8, index=k % 8)
        r.append([1] * int(rng.integers(350, 550)), False, None, 0)
        for t in range(1, int(rng.choice([1, 1, 2, 3])) + 1):
            if len(r.tokens) + 200 + 1536 > 4096:  # the rollout's max_context_tokens rule
                break
            n = int(min(1536, rng.lognormal(6.3, 0.6)))
            r.append([2] * n, True, np.zeros(n), t)
            r.append([3] * int(rng.integers(100, 200)), False, None, 0)
        rows.append(r)
    adv = rng.normal(size=(8, 8, 3)).astype(np.float32)
    stats_plain, stats_packed = {}, {}
    build_batch(rows, adv, np.ones((8, 8), bool), 8, micro_batch_size=8, pad_to_multiple=512, stats=stats_plain)
    build_batch(rows, adv, np.ones((8, 8), bool), 8, micro_batch_size=8, pad_to_multiple=512, pack=True,
                pack_len=4096, stats=stats_packed)
    assert stats_packed["padding_ratio"] <= 1.3, stats_packed
    assert stats_plain["padding_ratio"] > 2 * stats_packed["padding_ratio"] - 1


def test_packed_logprobs_with_fused_attention_form_equal_einsum(params):
    """optimizer.attention=dpa (the XLA form of the cudnn option) on packed rows with padding."""
    from leap_jax.train.update import make_logprob_fn
    rows, adv = _rows(seed=4)
    b = build_batch(rows, adv, np.ones(adv.shape[:2], bool), 4, micro_batch_size=4, pad_to_multiple=16, pack=True)
    assert (b["segment_ids"] == 0).any()
    args = [b[k] for k in ("tokens", "positions", "segment_ids", "targets")]
    ref = np.asarray(make_logprob_fn(CFG)(params, *args))
    got = np.asarray(make_logprob_fn(CFG, "dpa")(params, *args))
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got[b["mask"]], ref[b["mask"]], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend,dtype,head_dim,want", [
    ("cpu", "bfloat16", 64, "einsum"), ("tpu", "bfloat16", 64, "einsum"), ("gpu", "float32", 64, "einsum"),
    ("gpu", "bfloat16", 12, "einsum"), ("gpu", "bfloat16", 256, "einsum"), ("gpu", "bfloat16", 64, "cudnn"),
    ("gpu", "float16", 8, "cudnn"), ("cuda", "bfloat16", 128, "cudnn")])
def test_auto_attention_takes_the_fused_kernel_only_where_it_runs(backend, dtype, head_dim, want):
    from leap_jax.models.layers import resolve_attention
    assert resolve_attention("auto", dtype, head_dim, backend) == want
    assert resolve_attention("dpa", dtype, head_dim, backend) == "dpa"  # an explicit choice stays
    with pytest.raises(ValueError, match="'flash'.*expected 'auto' or one of"):
        resolve_attention("flash", dtype, head_dim, backend)


def test_auto_attention_on_this_backend_is_the_resolved_one(params):
    """optimizer.attention=auto gives exactly the log-probs of the implementation it resolves to."""
    from leap_jax.models.layers import resolve_attention
    from leap_jax.train.update import make_logprob_fn
    rows, adv = _rows(seed=5)
    b = build_batch(rows, adv, np.ones(adv.shape[:2], bool), 4, micro_batch_size=4, pad_to_multiple=16, pack=True)
    args = [b[k] for k in ("tokens", "positions", "segment_ids", "targets")]
    resolved = resolve_attention("auto", CFG.dtype, CFG.head_size)
    got = np.asarray(make_logprob_fn(CFG, "auto")(params, *args))
    ref = np.asarray(make_logprob_fn(CFG, resolved)(params, *args))
    np.testing.assert_array_equal(got, ref)


@pytest.mark.gpu
def test_cudnn_update_matches_einsum_on_a_bf16_model():
    """The fused cuDNN attention (what `auto` picks on a GPU) against the einsum path: the same
    packed log-probs within bf16 rounding, and one update step to the same loss and parameters."""
    from leap_jax.train.update import make_logprob_fn
    cfg = CFG.replace(dtype="bfloat16", param_dtype="float32", head_dim=16, hidden_size=64)
    p0 = {"model": decoder.init(cfg, jax.random.key(3))}
    rows, adv = _rows(seed=6)
    b = build_batch(rows, adv, np.ones(adv.shape[:2], bool), 4, micro_batch_size=4, pad_to_multiple=16, pack=True)
    args = [b[k] for k in ("tokens", "positions", "segment_ids", "targets")]
    ref = np.asarray(make_logprob_fn(cfg, "einsum")(p0, *args))
    got = np.asarray(make_logprob_fn(cfg, "cudnn")(p0, *args))
    np.testing.assert_allclose(got[b["mask"]], ref[b["mask"]], atol=3e-2, rtol=3e-2)
    import optax
    tx = optax.sgd(1.0)  # the parameter change is minus the gradient: comparable leaf by leaf
    out = {impl: make_update(cfg, tx, lambda _: 1.0, micro_batch_size=4, attn_impl=impl)(p0, tx.init(p0), b)
           for impl in ("einsum", "cudnn")}
    (pe, _, me), (pc, _, mc) = out["einsum"], out["cudnn"]
    for key in ("loss/policy", "optim/grad_norm"):
        assert np.isfinite(float(mc[key])), key
        np.testing.assert_allclose(float(mc[key]), float(me[key]), atol=2e-3, rtol=3e-2, err_msg=key)
    for e, c, z in zip(jax.tree.leaves(pe), jax.tree.leaves(pc), jax.tree.leaves(p0), strict=True):
        ge, gc = np.asarray(e, np.float32) - np.asarray(z, np.float32), np.asarray(c, np.float32) - np.asarray(z, np.float32)
        assert np.linalg.norm(gc - ge) <= 0.05 * np.linalg.norm(ge) + 1e-6, (np.linalg.norm(gc - ge), np.linalg.norm(ge))
