"""Float32 master weights whatever the checkpoint's dtype.

A policy exported in bf16 used to be trained in bf16: the trainer loaded the file's dtype and AdamW
then updated bf16 weights, where a step of lr = 5e-5 is below the rounding spacing of any weight
above ~0.02 and is lost. These tests load a bf16 checkpoint through the trainer's `build_model` and
check that one optimizer step moves the weights as a NumPy float32 AdamW reference does.
"""
from __future__ import annotations

import types
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from leap_jax.models import decoder
from leap_jax.models.config import ModelConfig
from leap_jax.models.hf import load_hf_checkpoint, save_hf_checkpoint
from leap_jax.train.config import LowPrecisionParamsWarning, OptimizerCfg, from_dict, validate
from leap_jax.train.trainer import build_model
from leap_jax.train.update import make_optimizer

CFG = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=2,
                  num_kv_heads=1, dtype="float32", param_dtype="float32", architecture="LlamaForCausalLM")
LR, B1, B2, EPS = 5e-5, 0.9, 0.999, 1e-8


@pytest.fixture(scope="module")
def bf16_checkpoint(tmp_path_factory):
    """A tiny HF checkpoint stored in bf16, with weights up to ~0.5 in magnitude."""
    params = decoder.init(CFG, jax.random.key(0), std=0.2)
    path = tmp_path_factory.mktemp("policy_bf16")
    save_hf_checkpoint(str(path), CFG, params, dtype="bfloat16")
    return path


def _cfg(path, **model):
    return from_dict({"model": {"source": "hf", "path": str(path), **model}})


def _adamw_first_step(w: np.ndarray, g: np.ndarray) -> np.ndarray:
    """NumPy float32 AdamW, first step, no weight decay (bias-corrected moments are g and g^2)."""
    w, g = w.astype(np.float32), g.astype(np.float32)
    m = (1 - B1) * g / (1 - B1)
    v = (1 - B2) * g * g / (1 - B2)
    return (w - np.float32(LR) * m / (np.sqrt(v) + np.float32(EPS))).astype(np.float32)


def _one_step(params, grads):
    tx, _ = make_optimizer(OptimizerCfg(lr=LR, b1=B1, b2=B2, eps=EPS, weight_decay=0.0, grad_clip=0.0,
                                        schedule="constant", warmup_steps=0), 1)
    updates, _ = tx.update(grads, tx.init(params), params)
    return jax.tree.map(lambda p, u: p + u.astype(p.dtype), params, updates)


def test_bf16_checkpoint_loads_float32_master_weights_and_steps_like_float32_reference(bf16_checkpoint):
    mcfg, params = build_model(_cfg(bf16_checkpoint), types.SimpleNamespace(vocab_size=CFG.vocab_size),
                               jax.random.key(1))
    assert mcfg.param_dtype == "float32"
    assert {str(x.dtype) for x in jax.tree.leaves(params)} == {"float32"}
    _, stored = load_hf_checkpoint(str(bf16_checkpoint), as_numpy=True)  # the file's own bf16 values
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), b.astype(np.float32)),
                 params, stored)

    leaves, treedef = jax.tree.flatten(params)
    rng = np.random.default_rng(0)
    grads = jax.tree.unflatten(treedef, [jnp.asarray(rng.normal(size=x.shape), jnp.float32) for x in leaves])
    new = _one_step(params, grads)
    for w, g, w1 in zip(leaves, jax.tree.leaves(grads), jax.tree.leaves(new), strict=False):
        ref = _adamw_first_step(np.asarray(w), np.asarray(g))
        np.testing.assert_allclose(np.asarray(w1), ref, rtol=0, atol=1e-7)
        moved = np.asarray(w1) != np.asarray(w)
        assert moved.mean() > 0.999  # every weight moves by ~lr, however large it is

    # The defect this guards against: the same step on bf16 weights is lost for most large weights.
    _, p16 = load_hf_checkpoint(str(bf16_checkpoint), dtype="bfloat16")
    w16 = np.asarray(p16["layers"]["wq"], np.float32)
    w16_new = np.asarray(_one_step(p16, jax.tree.map(lambda g: g.astype(jnp.bfloat16), grads))["layers"]["wq"],
                         np.float32)
    big = np.abs(w16) > 0.02
    assert big.sum() > 100 and (w16_new[big] == w16[big]).mean() > 0.9


def test_training_low_precision_params_warns_and_float32_does_not(bf16_checkpoint):
    with pytest.warns(LowPrecisionParamsWarning, match="model.param_dtype=bfloat16"):
        validate(_cfg(bf16_checkpoint, param_dtype="bfloat16"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", LowPrecisionParamsWarning)
        validate(_cfg(bf16_checkpoint))  # float32 master weights: silent
        # evaluation alone trains nothing: silent too
        validate(from_dict({"model": {"source": "hf", "path": str(bf16_checkpoint), "param_dtype": "bfloat16"},
                            "eval": {"only": True}}))
