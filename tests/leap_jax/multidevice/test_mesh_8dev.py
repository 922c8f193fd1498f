"""Sharded == single-device on 8 fake CPU devices (leap_jax.parallel).

A separate pytest invocation (see conftest.py): the device count is fixed once jax starts, so the
main run skips all of this. fp32 throughout; a sharded contraction sums in another order, hence
the small tolerances (forward logits atol and rtol 1e-5 at |logits| ~ 1, loss / grads rtol 1e-5, params after one AdamW
step atol 1e-2 * lr).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from leap_jax.models import decoder
from leap_jax.models.config import ModelConfig
from leap_jax.models.logprobs import token_logprobs
from leap_jax.parallel.mesh import make_mesh
from leap_jax.parallel.placement import MeshPlacement
from leap_jax.parallel.rules import param_shardings, shard_batch, shard_params
from leap_jax.train.config import MeshCfg, OptimizerCfg
from leap_jax.train.update import make_optimizer, make_update

pytestmark = pytest.mark.skipif(jax.device_count() != 8, reason="needs 8 devices: run this folder on its "
                                "own with XLA_FLAGS=--xla_force_host_platform_device_count=8")

MESHES = [(8, 1, 1), (1, 8, 1), (2, 2, 2)]
LR = 1e-4
B, L = 16, 24


def _config(vocab: int = 96, tie: bool = False) -> ModelConfig:
    return ModelConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                       num_kv_heads=2, qkv_bias=True, tie_word_embeddings=tie, dtype="float32",
                       param_dtype="float32")


def _params(cfg: ModelConfig) -> dict:
    p = decoder.init(cfg, jax.random.key(0), std=0.1)
    # non-zero biases and norms so their gradients and shardings are exercised
    leaves, tree = jax.tree_util.tree_flatten(p)
    keys = jax.random.split(jax.random.key(1), len(leaves))
    leaves = [x + 0.05 * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys, strict=False)]
    return {"model": jax.tree_util.tree_unflatten(tree, leaves)}


def _batch(cfg: ModelConfig, b: int = B, length: int = L) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, cfg.vocab_size, (b, length)).astype(np.int32)
    lens = rng.integers(length // 2, length + 1, b)
    seg = (np.arange(length)[None, :] < lens[:, None]).astype(np.int32)
    mask = seg.astype(bool) & (np.arange(length)[None, :] >= 4)
    return {"tokens": tokens, "positions": np.broadcast_to(np.arange(length, dtype=np.int32), (b, length)).copy(),
            "segment_ids": seg, "targets": np.roll(tokens, -1, axis=1), "mask": mask,
            "old_logp": np.where(mask, -4.5, 0.0).astype(np.float32),
            "advantages": np.where(mask, rng.normal(size=(b, length)), 0.0).astype(np.float32)}


def _loss(params, cfg, batch):
    lp = token_logprobs(params["model"], cfg, batch["tokens"], batch["positions"], batch["targets"],
                        batch["segment_ids"], chunk=8)
    return -jnp.sum(jnp.where(batch["mask"], lp * batch["advantages"], 0.0)) / jnp.sum(batch["mask"])


def _close(a, b, **tol):
    jax.tree_util.tree_map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), **tol), a, b)


_CFG = _config()
_fwd = jax.jit(lambda p, t, pos, s: decoder.forward(p["model"], _CFG, t, pos, segment_ids=s)[0])
_vg = jax.jit(jax.value_and_grad(lambda p, b: _loss(p, _CFG, b)))


@pytest.mark.parametrize("shape", MESHES, ids=lambda s: "x".join(map(str, s)))
def test_forward_loss_grads_match_single_device(shape):
    cfg, fwd, vg = _CFG, _fwd, _vg
    params, batch = _params(cfg), _batch(cfg)
    ref_logits = fwd(params, batch["tokens"], batch["positions"], batch["segment_ids"])
    ref_loss, ref_grads = vg(params, batch)

    mesh = make_mesh(shape)
    sp, sb = shard_params(params, mesh), shard_batch(batch, mesh)
    assert sp["model"]["layers"]["wq"].sharding.spec == P(None, "fsdp", "tensor")
    logits = fwd(sp, sb["tokens"], sb["positions"], sb["segment_ids"])
    loss, grads = vg(sp, sb)
    # |logits| ~ 1: CPU gemms block a smaller per-device batch differently (max diff seen 3.5e-6)
    np.testing.assert_allclose(np.asarray(logits), np.asarray(ref_logits), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(float(loss), float(ref_loss), rtol=1e-5)
    _close(grads, ref_grads, rtol=1e-5, atol=1e-7)


def test_uneven_dims_fall_back_to_replication():
    cfg = _config(vocab=97, tie=True)  # 97 rows divide by no axis
    params, batch = _params(cfg), _batch(cfg)
    mesh = make_mesh((2, 2, 2))
    fb: list[str] = []
    sh = param_shardings(params, mesh, fb)
    assert sh["model"]["embed"].spec == P(None, "fsdp")
    assert any("model/embed dim 0" in f for f in fb), fb
    fwd = jax.jit(lambda p, t, pos: decoder.forward(p["model"], cfg, t, pos)[0])
    ref = fwd(params, batch["tokens"], batch["positions"])
    sb = shard_batch(batch, mesh)
    out = fwd(jax.device_put(params, sh), sb["tokens"], sb["positions"])
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=1e-5, rtol=1e-5)


# AdamW's first step is lr * g / (|g| + eps): with the default eps=1e-8 a gradient of ~1e-8 moves
# by ~lr/4 per 1e-9 of summation-order noise (one weight of 16k was 4e-6 off at lr 1e-4); eps=1e-6
# keeps the step well-conditioned, so the comparison tests the sharding, not that amplification
_OPT = OptimizerCfg(lr=LR, grad_clip=1.0, weight_decay=0.01, eps=1e-6)
_REF: dict[str, tuple] = {}


def _reference_update(accumulate: str) -> tuple:
    if accumulate not in _REF:
        cfg = _config()
        params, batch = _params(cfg), _batch(cfg)
        tx, schedule = make_optimizer(_OPT, 10)
        _REF[accumulate] = make_update(cfg, tx, schedule, micro_batch_size=8, accumulate=accumulate)(
            params, tx.init(params), batch)
    return _REF[accumulate]


# pure data parallelism (8x1x1) is covered by the forward / gradient test; 1x8x1 is the 8-GPU plan;
# accumulate="loop" (per micro-batch placement) runs in the trainer test below
@pytest.mark.parametrize("shape,accumulate", [((1, 8, 1), "scan"), ((2, 2, 2), "scan")],
                         ids=["1x8x1-scan", "2x2x2-scan"])
def test_update_step_matches_single_device(shape, accumulate):
    cfg = _config()
    params, batch = _params(cfg), _batch(cfg)
    tx, schedule = make_optimizer(_OPT, 10)
    kw = {"micro_batch_size": 8, "accumulate": accumulate}
    ref_params, _, ref_m = _reference_update(accumulate)

    placement = MeshPlacement.from_cfg(MeshCfg(*shape))
    assert placement is not None
    sp = placement.place(params)
    so = placement.place(tx.init(sp))
    update = placement.wrap_update(make_update(cfg, tx, schedule, batch_put=placement.put_batch, **kw))
    new_params, new_opt, m = update(sp, so, batch)
    _close(new_params, ref_params, atol=1e-2 * LR, rtol=0)
    np.testing.assert_allclose(float(m["loss/policy"]), float(ref_m["loss/policy"]), rtol=1e-5)
    # the update keeps the rules' layout (no silent gather onto one device)
    want = param_shardings(new_params, placement.mesh)
    jax.tree_util.tree_map(lambda x, s: x.sharding.is_equivalent_to(s, x.ndim) or pytest.fail(
        f"{x.sharding} != {s}"), new_params, want)
    # and a second step still runs from the returned state
    update(new_params, new_opt, batch)


def test_one_device_mesh_is_the_unsharded_path():
    assert MeshPlacement.from_cfg(MeshCfg()) is None
    assert MeshPlacement.from_cfg(MeshCfg(1, -1, 1)) is not None  # -1 = all 8 here
    with pytest.raises(ValueError, match="3 devices"):
        make_mesh((1, 3, 1))
    with pytest.raises(ValueError, match="fixed axes"):
        make_mesh((3, -1, 1))


def test_greedy_sampler_matches_single_device():
    from leap_jax.sampling.params import SamplingParams
    from leap_jax.sampling.sampler import Sampler
    cfg = _config()
    params = _params(cfg)["model"]
    rng = np.random.default_rng(3)
    prompts = [rng.integers(1, cfg.vocab_size, int(n)).tolist() for n in rng.integers(3, 15, 8)]
    sp = SamplingParams(temperature=0.0, max_new_tokens=12)
    kw = {"max_batch": 8, "prompt_buckets": (16,), "max_new_tokens": 12, "batch_buckets": (8,)}
    ref = Sampler(cfg, **kw).generate(params, prompts, sp)
    mesh = make_mesh((2, 4, 1))
    out = Sampler(cfg, **kw).generate(shard_params(params, mesh), prompts, sp)
    assert out.tokens == ref.tokens
    for a, b in zip(out.logprobs, ref.logprobs, strict=False):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_orbax_restore_across_meshes_is_bitwise(tmp_path):
    from leap_jax.train.checkpoint import Checkpointer
    cfg = _config()
    params = _params(cfg)
    tx, _ = make_optimizer(OptimizerCfg(lr=LR), 10)
    a = MeshPlacement.from_cfg(MeshCfg(1, 8, 1))
    state = {"params": a.place(params), "opt_state": a.place(tx.init(params))}
    # make the moments non-trivial
    state["opt_state"] = jax.tree_util.tree_map(lambda x: x + 0.5 if x.dtype == jnp.float32 else x,
                                                state["opt_state"])
    ref = jax.device_get(state)
    ck = Checkpointer(tmp_path, keep_last=2)
    ck.save(3, state, {"step": 3})

    b = MeshPlacement.from_cfg(MeshCfg(2, 2, 2))
    like_b = {"params": b.place(params), "opt_state": b.place(tx.init(params))}
    got_b, meta, step = ck.restore(like_b)
    assert step == 3 and meta["step"] == 3
    assert got_b["params"]["model"]["layers"]["wq"].sharding.spec == P(None, "fsdp", "tensor")
    assert got_b["params"]["model"]["layers"]["wq"].sharding.mesh.shape["data"] == 2

    one = jax.devices()[0]
    like_1 = jax.device_put({"params": params, "opt_state": tx.init(params)}, one)
    got_1, _, _ = ck.restore(like_1)
    assert got_1["params"]["model"]["embed"].sharding.device_set == {one}
    ck.close()
    for got in (got_b, got_1):
        jax.tree_util.tree_map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), y), got, ref)
        jax.tree_util.tree_map(lambda x, y: (np.asarray(x).tobytes() == np.asarray(y).tobytes())
                               or pytest.fail("not bitwise equal"), got, ref)


def test_trainer_step_on_a_mesh_matches_one_device(tmp_path):
    """The trainer's mesh hook end to end: one RL step (scripted rollouts, oracle rewards, the
    default accumulate="loop" with each micro-batch split over 2 data shards) with mesh (1, 2, 4)
    gives the one-device run's metrics and params, and its state stays sharded."""
    from leap_jax.rollout.policy import ScriptedPolicy
    from leap_jax.train.config import load_config
    from leap_jax.train.trainer import Trainer
    from tests.leap_jax._trainer_helpers import OracleEvaluator
    from tests.leap_jax.test_trainer import TINY

    def run(name, extra):
        cfg = load_config(None, TINY + [f"train.run_dir={tmp_path / name}", "train.steps=1", "optimizer.eps=1e-6",
                                        "optimizer.accumulate=loop", "checkpoint.enabled=false", *extra])
        tr = Trainer(cfg, evaluator=OracleEvaluator(), resume=False)
        tr._policy_override = ScriptedPolicy(tr.tokenizer, p_good=0.5, end_ids=[tr.streams.im_end])
        recs = tr.train()
        tr.close()
        return tr, recs

    one, recs1 = run("one", [])
    assert one.placement is None
    # the same tokenizer without training the BPE again
    mesh, recs8 = run("mesh", ["mesh.fsdp=2", "mesh.tensor=4", "tokenizer.kind=file",
                               f"tokenizer.path={tmp_path / 'one' / 'tokenizer.json'}"])
    assert mesh.placement is not None and mesh.placement.mesh.shape["tensor"] == 4
    assert mesh.params["model"]["layers"]["wq"].sharding.spec == P(None, "fsdp", "tensor")
    for k in ("loss/policy", "optim/grad_norm", "update/rows"):
        np.testing.assert_allclose(recs8[-1][k], recs1[-1][k], rtol=1e-4)
    _close(mesh.params, one.params, atol=1e-2 * 1e-2, rtol=0)  # lr 1e-2 (TINY)
