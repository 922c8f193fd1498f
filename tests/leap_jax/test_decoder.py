"""Decoder tests against an independent NumPy implementation written from the formulas."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from leap_jax.models import decoder
from leap_jax.models.config import ModelConfig

CFG = ModelConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                  num_kv_heads=2, rope_theta=500.0, rms_norm_eps=1e-5, qkv_bias=True,
                  tie_word_embeddings=False, dtype="float32", param_dtype="float32")
CFG_TIED = CFG.replace(tie_word_embeddings=True, qkv_bias=False, num_kv_heads=1)


@pytest.fixture(autouse=True)
def _fp32_matmuls():
    """Full-precision fp32 matmuls (GPUs default to TF32), so tolerances hold on every backend."""
    with jax.default_matmul_precision("highest"):
        yield


def random_params(cfg: ModelConfig, seed: int = 0):
    """init() plus random norm weights and biases, so every parameter matters."""
    params = decoder.init(cfg, jax.random.PRNGKey(seed), std=0.1)
    rng = np.random.default_rng(seed)
    lay = dict(params["layers"])
    for name in ("attn_norm", "mlp_norm"):
        lay[name] = jnp.asarray(1.0 + 0.2 * rng.standard_normal(lay[name].shape), jnp.float32)
    for name in ("bq", "bk", "bv"):
        if name in lay:
            lay[name] = jnp.asarray(0.1 * rng.standard_normal(lay[name].shape), jnp.float32)
    out = dict(params, layers=lay)
    out["final_norm"] = jnp.asarray(1.0 + 0.2 * rng.standard_normal(cfg.hidden_size), jnp.float32)
    return out


# ---------------------------------------------------------------- NumPy reference (fp32/fp64)
def np_reference(params, cfg: ModelConfig, tokens, positions, seg=None):
    """Plain loops over layers/heads; attention mask: causal within equal non-zero segments."""
    p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)
    tokens = np.asarray(tokens)
    b, t = tokens.shape
    seg = np.ones((b, t), np.int64) if seg is None else np.asarray(seg)
    hd, h, kvh = cfg.head_dim, cfg.num_heads, cfg.num_kv_heads

    def norm(x, w):
        return x / np.sqrt(np.mean(x ** 2, -1, keepdims=True) + cfg.rms_norm_eps) * w

    inv = np.array([cfg.rope_theta ** (-2.0 * i / hd) for i in range(hd // 2)])
    ang = np.asarray(positions, np.float64)[..., None] * inv  # [B, T, hd/2]
    cos, sin = np.cos(ang), np.sin(ang)

    def rope(x):  # x [B, T, heads, hd]; pairs (i, i + hd/2)
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        c, s = cos[:, :, None, :], sin[:, :, None, :]
        return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)

    x = p["embed"][tokens]
    allowed = np.zeros((b, t, t), bool)
    for bi in range(b):
        for i in range(t):
            for j in range(i + 1):
                allowed[bi, i, j] = seg[bi, i] == seg[bi, j] and seg[bi, j] != 0
    for li in range(cfg.num_layers):
        L = {k: v[li] for k, v in p["layers"].items()}
        hn = norm(x, L["attn_norm"])
        q = hn @ L["wq"] + L.get("bq", 0.0)
        k = hn @ L["wk"] + L.get("bk", 0.0)
        v = hn @ L["wv"] + L.get("bv", 0.0)
        q, k, v = q.reshape(b, t, h, hd), k.reshape(b, t, kvh, hd), v.reshape(b, t, kvh, hd)
        q, k = rope(q), rope(k)
        out = np.zeros_like(q)
        for bi in range(b):
            for hi in range(h):
                kv = hi // (h // kvh)
                s = q[bi, :, hi] @ k[bi, :, kv].T / np.sqrt(hd)
                s = np.where(allowed[bi], s, -np.inf)
                m = s.max(-1, keepdims=True)
                m = np.where(np.isfinite(m), m, 0.0)
                e = np.exp(s - m)
                w = e / np.maximum(e.sum(-1, keepdims=True), 1e-300)
                out[bi, :, hi] = w @ v[bi, :, kv]
        x = x + out.reshape(b, t, h * hd) @ L["wo"]
        hn = norm(x, L["mlp_norm"])
        g = hn @ L["w_gate"]
        x = x + ((g / (1 + np.exp(-g))) * (hn @ L["w_up"])) @ L["w_down"]
    hn = norm(x, p["final_norm"])
    head = p["embed"].T if cfg.tie_word_embeddings else p["lm_head"]
    return hn @ head


@functools.cache
def jitted_forward(cfg: ModelConfig):
    return jax.jit(lambda p, tok, pos, seg: decoder.forward(p, cfg, tok, pos, segment_ids=seg)[0])


@pytest.fixture(scope="module")
def params():
    return random_params(CFG)


def test_init_layout_and_dtypes():
    p = decoder.init(CFG.replace(param_dtype="bfloat16"), jax.random.PRNGKey(1))
    L = p["layers"]
    assert L["wq"].shape == (2, 32, 32) and L["wk"].shape == (2, 32, 16)
    assert L["bq"].shape == (2, 32) and L["w_down"].shape == (2, 64, 32)
    assert p["lm_head"].shape == (32, 97) and p["embed"].shape == (97, 32)
    assert all(a.dtype == jnp.bfloat16 for a in jax.tree_util.tree_leaves(p))
    n = sum(a.size for a in jax.tree_util.tree_leaves(p))
    assert n == CFG.num_params()
    pt = decoder.init(CFG_TIED, jax.random.PRNGKey(1))
    assert "lm_head" not in pt and "bq" not in pt["layers"]
    assert sum(a.size for a in jax.tree_util.tree_leaves(pt)) == CFG_TIED.num_params()


def test_forward_shapes_dtype_bf16():
    cfg = CFG.replace(dtype="bfloat16", param_dtype="bfloat16")
    p = decoder.init(cfg, jax.random.PRNGKey(0))
    tok = jnp.arange(10, dtype=jnp.int32).reshape(2, 5)
    pos = jnp.tile(jnp.arange(5), (2, 1))
    logits, cache = decoder.forward(p, cfg, tok, pos)
    assert logits.shape == (2, 5, 97) and logits.dtype == jnp.float32 and cache is None
    hid, _ = decoder.forward(p, cfg, tok, pos, return_hidden=True)
    assert hid.shape == (2, 5, 32) and hid.dtype == jnp.bfloat16
    assert bool(jnp.all(jnp.isfinite(logits)))


@pytest.mark.parametrize("cfg", [CFG, CFG_TIED], ids=["qwen2-bias", "llama-tied-mqa"])
def test_matches_numpy_reference(cfg):
    p = random_params(cfg, seed=3)
    rng = np.random.default_rng(0)
    tok = rng.integers(0, 97, (2, 7)).astype(np.int32)
    pos = np.tile(np.arange(7), (2, 1)).astype(np.int32) + np.array([[0], [5]])
    got = np.asarray(jitted_forward(cfg)(p, tok, pos, None))
    want = np_reference(p, cfg, tok, pos)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-5)


def test_packed_segments_match_reference(params):
    rng = np.random.default_rng(1)
    tok = rng.integers(0, 97, (2, 8)).astype(np.int32)
    seg = np.array([[1, 1, 1, 2, 2, 2, 2, 0], [1, 1, 1, 1, 1, 1, 1, 1]], np.int32)
    pos = np.array([[0, 1, 2, 0, 1, 2, 3, 0], list(range(8))], np.int32)
    got = np.asarray(jitted_forward(CFG)(params, tok, pos, seg))
    want = np_reference(params, CFG, tok, pos, seg)
    real = seg != 0
    np.testing.assert_allclose(got[real], want[real], atol=2e-5, rtol=1e-5)
    # Second packed segment equals the same tokens run alone.
    alone = np.asarray(jitted_forward(CFG)(params, tok[:1, 3:7], pos[:1, 3:7], None))
    np.testing.assert_allclose(got[0, 3:7], alone[0], atol=1e-5)


def test_causal_later_tokens_do_not_change_earlier_logits(params):
    f = jitted_forward(CFG)
    tok = np.random.default_rng(2).integers(0, 97, (1, 8)).astype(np.int32)
    pos = np.arange(8, dtype=np.int32)[None]
    a = np.asarray(f(params, tok, pos, None))
    tok2 = tok.copy()
    tok2[0, 5:] = (tok2[0, 5:] + 1) % 97
    b = np.asarray(f(params, tok2, pos, None))
    np.testing.assert_array_equal(a[0, :5], b[0, :5])
    assert np.abs(a[0, 5:] - b[0, 5:]).max() > 1e-4


def test_vmap_over_batches(params):
    tok = np.random.default_rng(9).integers(0, 97, (3, 2, 4)).astype(np.int32)
    pos = np.tile(np.arange(4, dtype=np.int32), (2, 1))
    out = jax.vmap(lambda t: decoder.forward(params, CFG, t, pos)[0])(tok)
    for i in range(3):
        np.testing.assert_allclose(np.asarray(out[i]),
                                   np.asarray(decoder.forward(params, CFG, tok[i], pos)[0]),
                                   atol=1e-5)


def test_left_padded_row_equals_unpadded(params):
    f = jitted_forward(CFG)
    tok = np.random.default_rng(3).integers(1, 97, (1, 5)).astype(np.int32)
    pos = np.arange(5, dtype=np.int32)[None]
    ref = np.asarray(f(params, tok, pos, None))
    padded = np.concatenate([np.zeros((1, 3), np.int32), tok], 1)
    ppos = np.concatenate([np.zeros((1, 3), np.int32), pos], 1)
    pseg = np.array([[0, 0, 0, 1, 1, 1, 1, 1]], np.int32)
    out = np.asarray(f(params, padded, ppos, pseg))
    np.testing.assert_allclose(out[0, 3:], ref[0], atol=1e-5)


@pytest.mark.parametrize("per_row", [False, True], ids=["scalar-index", "per-row-index"])
def test_kv_cache_incremental_equals_full(params, per_row):
    rng = np.random.default_rng(4)
    tok = rng.integers(0, 97, (2, 9)).astype(np.int32)
    pos = np.tile(np.arange(9, dtype=np.int32), (2, 1))
    full = np.asarray(jitted_forward(CFG)(params, tok, pos, None))

    step = jax.jit(lambda p, c, t, ps, i: decoder.forward(p, CFG, t, ps, cache=c, cache_index=i),
                   donate_argnums=(1,))
    cache = decoder.init_cache(CFG, 2, 12, dtype=jnp.float32)
    # Prefill 4 tokens, then chunks of 1, 3, 1.
    outs, start = [], 0
    for n in (4, 1, 3, 1):
        idx = np.full((2,), start, np.int32) if per_row else np.int32(start)
        lg, cache = step(params, cache, tok[:, start:start + n], pos[:, start:start + n], idx)
        outs.append(np.asarray(lg))
        start += n
    np.testing.assert_allclose(np.concatenate(outs, 1), full, atol=1e-5)
    assert cache.k.shape == (2, 2, 12, 2, 8)
    np.testing.assert_array_equal(np.asarray(cache.seg), np.array([[1] * 9 + [0] * 3] * 2))


def test_kv_cache_per_row_offsets(params):
    """Rows at different cache offsets (right padding): each row equals its own full forward."""
    rng = np.random.default_rng(5)
    lens = [3, 6]
    seqs = [rng.integers(1, 97, 8).astype(np.int32) for _ in lens]
    cache = decoder.init_cache(CFG, 2, 10, dtype=jnp.float32)
    tok = np.zeros((2, 6), np.int32)
    seg = np.zeros((2, 6), np.int32)
    for i, n in enumerate(lens):
        tok[i, :n], seg[i, :n] = seqs[i][:n], 1
    pos = np.tile(np.arange(6, dtype=np.int32), (2, 1))
    _, cache = decoder.forward(params, CFG, tok, pos, segment_ids=seg, cache=cache, cache_index=0)
    # Decode two more tokens per row, each at its own slot.
    got = []
    for s in range(2):
        t = np.array([[seqs[0][lens[0] + s]], [seqs[1][lens[1] + s]]], np.int32)
        ps = np.array([[lens[0] + s], [lens[1] + s]], np.int32)
        lg, cache = decoder.forward(params, CFG, t, ps, cache=cache,
                                    cache_index=jnp.array(lens) + s)
        got.append(np.asarray(lg)[:, 0])
    for i, n in enumerate(lens):
        full = np.asarray(jitted_forward(CFG)(params, seqs[i][None, :n + 2],
                                              np.arange(n + 2, dtype=np.int32)[None], None))
        np.testing.assert_allclose(np.stack([g[i] for g in got]), full[0, n:n + 2], atol=1e-5)


def test_unstacked_layers_equal_stacked(params):
    """The unrolled per-layer path (sampler option) gives the same logits and cache."""
    rng = np.random.default_rng(7)
    tok = rng.integers(0, 97, (2, 5)).astype(np.int32)
    pos = np.tile(np.arange(5, dtype=np.int32), (2, 1))
    up = decoder.unstack_layers(params)
    assert isinstance(up["layers"], tuple) and len(up["layers"]) == 2
    np.testing.assert_allclose(np.asarray(decoder.forward(up, CFG, tok, pos)[0]),
                               np.asarray(jitted_forward(CFG)(params, tok, pos, None)), atol=1e-5)
    for fused in (decoder.fuse_projections(params), decoder.fuse_projections(up)):
        assert "wqkv" in (fused["layers"] if isinstance(fused["layers"], dict)
                          else fused["layers"][0])
        np.testing.assert_allclose(np.asarray(decoder.forward(fused, CFG, tok, pos)[0]),
                                   np.asarray(jitted_forward(CFG)(params, tok, pos, None)),
                                   atol=1e-5)
    g_r = jax.grad(lambda p: decoder.forward(p, CFG.replace(remat=True), tok, pos)[0].sum())(up)
    g_s = jax.grad(lambda p: decoder.forward(p, CFG, tok, pos)[0].sum())(params)
    np.testing.assert_allclose(np.asarray(g_r["layers"][1]["wq"]),
                               np.asarray(g_s["layers"]["wq"][1]), atol=1e-5)
    c0 = decoder.init_cache(CFG, 2, 8, dtype=jnp.float32)
    lg_s, c_s = decoder.forward(params, CFG, tok, pos, cache=c0, cache_index=0)
    lg_u, c_u = decoder.forward(up, CFG, tok, pos, cache=decoder.unstack_cache(c0), cache_index=0)
    np.testing.assert_allclose(np.asarray(lg_u), np.asarray(lg_s), atol=1e-5)
    np.testing.assert_allclose(np.asarray(jnp.stack(c_u.k)), np.asarray(c_s.k), atol=1e-6)
    with pytest.raises(ValueError, match="unstacked"):
        decoder.forward(up, CFG, tok, pos, cache=c0, cache_index=0)
    with pytest.raises(ValueError, match="does not fit"):
        decoder.forward(params, CFG, tok, pos, cache=c0, cache_index=4)


def test_attention_impls_agree():
    from leap_jax.models.layers import attention
    rng = np.random.default_rng(8)
    q = jnp.asarray(rng.standard_normal((2, 3, 6, 8)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((2, 5, 2, 8)), jnp.float32)
    v = jnp.asarray(rng.standard_normal((2, 5, 2, 8)), jnp.float32)
    mask = jnp.asarray(rng.random((2, 3, 5)) < 0.7).at[:, :, 0].set(True)
    a = attention(q, k, v, mask, "einsum")
    for impl in ("reduce", "dpa"):
        b = attention(q, k, v, mask, impl)
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5, err_msg=impl)
    # Reference for one (batch, head): softmax over allowed keys of the kv head it shares.
    s = np.asarray(q[1, :, 4]) @ np.asarray(k[1, :, 1]).T / np.sqrt(8)
    s = np.where(np.asarray(mask[1]), s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    np.testing.assert_allclose(np.asarray(a[1, :, 4]), w @ np.asarray(v[1, :, 1]), atol=1e-5)
    with pytest.raises(ValueError, match="impl"):
        attention(q, k, v, mask, "flash")


def test_fused_attention_skips_masked_cache_tails_with_the_same_result():
    """kv_lengths (a decode step's written cache prefix per row) changes nothing the mask did not already
    decide: "dpa" with lengths equals the einsum path on the same mask, lengths past the cache clip."""
    from leap_jax.models.layers import attention
    rng = np.random.default_rng(10)
    q = jnp.asarray(rng.standard_normal((3, 1, 4, 8)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((3, 9, 2, 8)), jnp.float32)
    v = jnp.asarray(rng.standard_normal((3, 9, 2, 8)), jnp.float32)
    lengths = jnp.asarray([3, 9, 12])  # 12 > 9 slots: clipped
    mask = (jnp.arange(9)[None, None, :] < lengths[:, None, None]) & jnp.asarray(rng.random((3, 1, 9)) < 0.8)
    mask = mask.at[:, :, 0].set(True)
    want = attention(q, k, v, mask, "einsum")
    got = attention(q, k, v, mask, "dpa", kv_lengths=lengths)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)
    garbage = k.at[0, 3:].set(1e4)  # slots past row 0's length never reach its output
    np.testing.assert_allclose(np.asarray(attention(q, garbage, v, mask, "dpa", kv_lengths=lengths))[0],
                               np.asarray(want)[0], atol=1e-5)


def test_fused_attention_gives_stopped_rows_zero_and_leaves_live_rows_alone():
    """q_lengths 0 (a stopped decode row): that row's output is zero, even with NaN keys, and the
    other rows' outputs are those of the einsum path."""
    from leap_jax.models.layers import attention
    rng = np.random.default_rng(11)
    q = jnp.asarray(rng.standard_normal((3, 1, 4, 8)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((3, 9, 2, 8)), jnp.float32)
    v = jnp.asarray(rng.standard_normal((3, 9, 2, 8)), jnp.float32)
    mask = jnp.asarray(rng.random((3, 1, 9)) < 0.8).at[:, :, 0].set(True)
    want = np.asarray(attention(q, k, v, mask, "einsum"))
    stopped = k.at[1].set(jnp.nan)  # nothing of a skipped row is read into a live row
    got = np.asarray(attention(q, stopped, v, mask, "dpa", kv_lengths=jnp.asarray([9, 1, 9]),
                               q_lengths=jnp.asarray([1, 0, 1])))
    np.testing.assert_allclose(got[[0, 2]], want[[0, 2]], atol=1e-5)
    assert np.all(got[1] == 0.0)


def test_forward_live_rows_change_only_the_stopped_rows():
    """decoder.forward(live_rows=...) with a cache: live rows' logits and cache writes are those of a
    forward without it; stopped rows' logits stay finite."""
    cfg = CFG
    p = random_params(cfg, 3)
    rng = np.random.default_rng(4)
    b, slots = 3, 12
    cache = decoder.init_cache(cfg, b, slots, jnp.float32)
    tok = jnp.asarray(rng.integers(1, 97, (b, 6)), jnp.int32)
    pos = jnp.tile(jnp.arange(6), (b, 1))
    _, cache = decoder.forward(p, cfg, tok, pos, cache=cache, cache_index=0)
    step = jnp.asarray(rng.integers(1, 97, (b, 1)), jnp.int32)
    live = jnp.asarray([True, False, True])
    kw = dict(cache_index=jnp.int32(6), attn_impl="dpa")
    want, want_cache = decoder.forward(p, cfg, step, pos[:, :1] + 6, cache=cache, **kw)
    got, got_cache = decoder.forward(p, cfg, step, pos[:, :1] + 6, cache=cache, live_rows=live, **kw)
    np.testing.assert_allclose(np.asarray(got)[[0, 2]], np.asarray(want)[[0, 2]], atol=1e-5)
    assert np.isfinite(np.asarray(got)).all()
    for a, c in ((got_cache.k, want_cache.k), (got_cache.v, want_cache.v)):
        np.testing.assert_allclose(np.asarray(a)[:, [0, 2]], np.asarray(c)[:, [0, 2]], atol=1e-5)
    with pytest.raises(ValueError, match=r"live_rows shape \(2,\); expected \(3,\)"):
        decoder.forward(p, cfg, step, pos[:, :1] + 6, cache=cache, live_rows=live[:2], **kw)


def test_query_chunked_attention_matches_the_whole_block():
    """Past max_score_bytes the einsum path runs over query chunks: same outputs and gradients."""
    from leap_jax.models.layers import attention, query_chunk
    assert query_chunk(64, 8, 4096, 4096, 1 << 30) == 128  # 64*8*128*4096*4 bytes = 2**30
    assert query_chunk(2, 2, 96, 96, 1) == 24 and query_chunk(2, 2, 6, 6, 1) == 6  # stops at >= 16 rows
    rng = np.random.default_rng(9)
    q = jnp.asarray(rng.standard_normal((2, 64, 4, 8)), jnp.float32)
    k = jnp.asarray(rng.standard_normal((2, 64, 2, 8)), jnp.float32)
    v = jnp.asarray(rng.standard_normal((2, 64, 2, 8)), jnp.float32)
    mask = jnp.tril(jnp.ones((64, 64), bool))[None].repeat(2, 0).at[1, :, :5].set(False).at[1, :5, 0].set(True)
    whole = attention(q, k, v, mask)
    chunked = attention(q, k, v, mask, max_score_bytes=2 * 4 * 16 * 64 * 4)  # 16-row blocks
    np.testing.assert_allclose(np.asarray(chunked), np.asarray(whole), rtol=1e-6, atol=1e-6)

    def f(q, k, v, nbytes):
        return jnp.sum(jnp.sin(attention(q, k, v, mask, max_score_bytes=nbytes)))
    g_whole = jax.grad(f, argnums=(0, 1, 2))(q, k, v, None)
    g_chunk = jax.grad(f, argnums=(0, 1, 2))(q, k, v, 2 * 4 * 16 * 64 * 4)
    for a, b in zip(g_chunk, g_whole, strict=False):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_query_chunked_attention_gradient_memory_stays_bounded():
    """The chunked path's backward recomputes each chunk's scores (jax.checkpoint per chunk): its
    compiled temporary memory stays below one full [B, H, T, S] fp32 score tensor, where keeping
    every chunk's scores and probabilities (what the 8-run H200 experiment ran out of memory on in
    jit_update: 12.18 GiB) needs about three. XLA's own memory analysis, no allocation."""
    from leap_jax.models.layers import attention
    b, t, h, kv, hd = 2, 512, 4, 2, 16
    full = b * h * t * t * 4
    q = jax.ShapeDtypeStruct((b, t, h, hd), jnp.bfloat16)
    k = jax.ShapeDtypeStruct((b, t, kv, hd), jnp.bfloat16)
    m = jax.ShapeDtypeStruct((b, t, t), jnp.bool_)

    def temp_bytes(nbytes):
        def loss(q, k, v, m):
            return attention(q, k, v, m, max_score_bytes=nbytes).astype(jnp.float32).sum()
        analysis = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(q, k, k, m).compile().memory_analysis()
        if analysis is None:
            pytest.skip("this backend has no compiled memory analysis")
        return analysis.temp_size_in_bytes
    assert temp_bytes(None) > 2 * full  # the whole block keeps its scores for the backward
    assert temp_bytes(full // 8) < full  # eight 64-row chunks, one chunk's scores alive at a time


def test_remat_same_loss_and_grads(params):
    tok = np.random.default_rng(6).integers(0, 97, (2, 6)).astype(np.int32)
    pos = np.tile(np.arange(6, dtype=np.int32), (2, 1))

    def loss(p, cfg):
        lg, _ = decoder.forward(p, cfg, tok, pos)
        return jnp.mean(jax.nn.logsumexp(lg, -1) - lg[..., 0])

    l0, g0 = jax.jit(jax.value_and_grad(lambda p: loss(p, CFG)))(params)
    l1, g1 = jax.jit(jax.value_and_grad(lambda p: loss(p, CFG.replace(remat=True))))(params)
    np.testing.assert_allclose(float(l0), float(l1), rtol=1e-6)
    for a, b in zip(jax.tree_util.tree_leaves(g0), jax.tree_util.tree_leaves(g1), strict=False):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)
    assert float(jnp.abs(g0["layers"]["wq"]).max()) > 0


def test_bad_shapes_raise_clear_errors(params):
    with pytest.raises(ValueError, match="positions"):
        decoder.forward(params, CFG, jnp.zeros((2, 3), jnp.int32), jnp.zeros((2, 4), jnp.int32))
    with pytest.raises(ValueError, match="cache_index"):
        decoder.forward(params, CFG, jnp.zeros((2, 3), jnp.int32), jnp.zeros((2, 3), jnp.int32),
                        cache=decoder.init_cache(CFG, 2, 8))
    with pytest.raises(ValueError, match="batch"):
        decoder.init_cache(CFG, 0, 8)
