"""token_logprobs: equals log_softmax of full logits gathered; chunked == unchunked (values, grads)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from leap_jax.models import decoder
from leap_jax.models.logprobs import hidden_logprobs, token_logprobs, token_logprobs_and_entropy
from tests.leap_jax.test_decoder import CFG, CFG_TIED, random_params


@pytest.fixture(autouse=True)
def _fp32_matmuls():
    """Full-precision fp32 matmuls (GPUs default to TF32), so tolerances hold on every backend."""
    with jax.default_matmul_precision("highest"):
        yield


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(0)
    tok = rng.integers(0, 97, (2, 11)).astype(np.int32)
    pos = np.tile(np.arange(11, dtype=np.int32), (2, 1))
    seg = np.ones((2, 11), np.int32)
    seg[1, 8:] = 0
    tgt = np.roll(tok, -1, axis=1)
    return tok, pos, seg, tgt


@pytest.mark.parametrize("cfg", [CFG, CFG_TIED], ids=["untied", "tied"])
def test_equals_full_log_softmax_gather(cfg, batch):
    tok, pos, seg, tgt = batch
    p = random_params(cfg, 1)
    logits, _ = decoder.forward(p, cfg, tok, pos, segment_ids=seg)
    lg = np.asarray(logits, np.float64)
    ref = lg - np.log(np.exp(lg - lg.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - lg.max(-1, keepdims=True)
    want = np.take_along_axis(ref, tgt[..., None], -1)[..., 0]
    pr = np.exp(ref)
    want_ent = -(pr * ref).sum(-1)
    f = jax.jit(lambda p, c: token_logprobs_and_entropy(p, cfg, tok, pos, tgt, seg, chunk=c),
                static_argnums=1)
    for chunk in (None, 4, 11, 3):
        lp, ent = f(p, chunk)
        assert lp.shape == (2, 11) and lp.dtype == jnp.float32
        np.testing.assert_allclose(np.asarray(lp), want, atol=1e-5)
        np.testing.assert_allclose(np.asarray(ent), want_ent, atol=1e-5)


def test_chunked_grads_equal_unchunked(batch):
    tok, pos, seg, tgt = batch
    p = random_params(CFG, 2)
    w = jnp.asarray(seg, jnp.float32)

    def loss(p, chunk):
        return jnp.sum(token_logprobs(p, CFG, tok, pos, tgt, seg, chunk=chunk) * w)

    g = jax.jit(jax.grad(loss), static_argnums=1)
    ga, gb = g(p, None), g(p, 4)
    for a, b in zip(jax.tree_util.tree_leaves(ga), jax.tree_util.tree_leaves(gb), strict=False):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def test_bf16_model_returns_fp32_and_close_to_fp32_model(batch):
    tok, pos, seg, tgt = batch
    p32 = random_params(CFG, 3)
    cfg16 = CFG.replace(dtype="bfloat16", param_dtype="bfloat16")
    p16 = jax.tree_util.tree_map(lambda a: a.astype(jnp.bfloat16), p32)
    a = token_logprobs(p32, CFG, tok, pos, tgt, seg, chunk=4)
    b = token_logprobs(p16, cfg16, tok, pos, tgt, seg, chunk=4)
    assert b.dtype == jnp.float32
    assert float(jnp.max(jnp.abs(a - b))) < 0.1


def test_shape_mismatch_raises():
    p = random_params(CFG, 0)
    with pytest.raises(ValueError, match="targets"):
        hidden_logprobs(p, CFG, jnp.zeros((2, 5, 32)), jnp.zeros((2, 4), jnp.int32))
    with pytest.raises(ValueError, match="chunk"):
        hidden_logprobs(p, CFG, jnp.zeros((2, 5, 32)), jnp.zeros((2, 5), jnp.int32), chunk=0)
