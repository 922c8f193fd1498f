"""Trainer: exact resume (params bitwise, metrics equal), signal-safe checkpoints, the micro-batched
update against a full-batch reference, and per-algorithm credit against NumPy formulas."""
from __future__ import annotations

import math
import os
import signal
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from leap_jax.rollout.policy import ScriptedPolicy
from leap_jax.train import algorithms
from leap_jax.train.config import load_config
from leap_jax.train.metrics import read_metrics
from leap_jax.train.trainer import Trainer
from tests.leap_jax._trainer_helpers import OracleEvaluator

TINY = ["model.hidden_size=32", "model.intermediate_size=64", "model.num_layers=2", "model.num_heads=2",
        "model.num_kv_heads=1", "tokenizer.vocab_size=600", "rollout.group_size=4", "rollout.max_turns=2",
        "rollout.prompts_per_step=1", "tasks.names=[relu, tanh, sigmoid]", "tasks.held_out_fraction=0",
        "optimizer.lr=1e-2", "optimizer.micro_batch_size=2", "optimizer.pad_to_multiple=256",
        "logging.progress_bar=false", "logging.tensorboard=false", "logging.report=false",
        "checkpoint.interval=1", "env.sizes=small", "train.steps=2"]

# wall-clock and cache counters legitimately differ between runs; everything else must match
VOLATILE = ("time/", "env/cache_hits")


@pytest.fixture(autouse=True, scope="module")
def _compilation_cache(tmp_path_factory):
    """Trainers built in one test compile identical programs: share them through JAX's disk cache."""
    keys = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
            "jax_persistent_cache_min_entry_size_bytes")
    old = {k: getattr(jax.config, k) for k in keys}
    jax.config.update("jax_compilation_cache_dir", str(tmp_path_factory.mktemp("jax_cache")))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    yield
    for k, v in old.items():
        jax.config.update(k, v)


def _trainer(run_dir, extra=()):
    cfg = load_config(None, TINY + [f"train.run_dir={run_dir}", *extra])
    tr = Trainer(cfg, evaluator=OracleEvaluator(), resume=False)
    tr._policy_override = ScriptedPolicy(tr.tokenizer, p_good=0.5, end_ids=[tr.streams.im_end])
    return tr


def _stable(rec):
    return {k: v for k, v in rec.items() if not k.startswith(VOLATILE)}


def test_resume_continues_exactly(tmp_path):
    a = _trainer(tmp_path / "a")
    a.train()
    a.close()
    b = _trainer(tmp_path / "b")
    b.train(max_steps=1)
    b.close()
    assert b.checkpointer.latest_step() == 1
    cfg = load_config(tmp_path / "b" / "config.yaml")
    c = Trainer(cfg, evaluator=OracleEvaluator(), resume=True)
    c._policy_override = ScriptedPolicy(c.tokenizer, p_good=0.5, end_ids=[c.streams.im_end])
    assert c.step == 1
    c.train()
    c.close()
    la, lb = jax.tree_util.tree_leaves(a.params), jax.tree_util.tree_leaves(c.params)
    assert len(la) == len(lb)
    for x, y in zip(la, lb, strict=False):  # bitwise
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    for x, y in zip(jax.tree_util.tree_leaves(a.opt_state), jax.tree_util.tree_leaves(c.opt_state), strict=False):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    ma, mb = read_metrics(tmp_path / "a"), read_metrics(tmp_path / "b")
    assert [r["step"] for r in ma] == [r["step"] for r in mb] == [0, 1]
    assert [_stable(r) for r in ma] == [_stable(r) for r in mb]
    assert a.cursor == c.cursor
    assert np.array_equal(jax.random.key_data(a.rng), jax.random.key_data(c.rng))
    # the update really trained: params moved from their initial values
    init = _trainer(tmp_path / "init").params
    moved = [not np.array_equal(np.asarray(x), np.asarray(y))
             for x, y in zip(jax.tree_util.tree_leaves(init), la, strict=False)]
    assert any(moved)


def test_sigterm_saves_and_stops(tmp_path):
    tr = _trainer(tmp_path / "s", ["train.steps=5", "checkpoint.interval=100"])
    base = tr._policy_override

    class Interrupting:
        sent = False

        def generate(self, requests, seed, preempt=0.0):
            if not self.sent:  # one SIGTERM, arriving mid-step
                self.sent = True
                os.kill(os.getpid(), signal.SIGTERM)
            return base.generate(requests, seed, preempt=preempt)

        def set_params(self, params):  # the Policy interface (rollout.policy.Policy)
            base.set_params(params)

    tr._policy_override = Interrupting()
    records = tr.train()
    tr.close()
    assert len(records) == 1  # the interrupted step completes, then the loop stops
    assert tr.checkpointer.latest_step() == 1  # and a checkpoint was written despite interval=100
    assert signal.getsignal(signal.SIGTERM) is not None  # the previous handler is restored
    assert tr._stop_signal == signal.SIGTERM


# ---- the update ----------------------------------------------------------------------------------
def test_microbatched_update_equals_full_batch_reference():
    from leap_jax.models import decoder
    from leap_jax.models.config import ModelConfig
    from leap_jax.models.logprobs import token_logprobs
    from leap_jax.train.config import OptimizerCfg
    from leap_jax.train.update import make_optimizer, make_update

    cfg = ModelConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=2,
                      num_kv_heads=1, dtype="float32", param_dtype="float32")
    params = {"model": decoder.init(cfg, jax.random.key(1))}
    rng = np.random.default_rng(0)
    B, L = 4, 12
    lens = [12, 9, 7, 12]
    seg = np.zeros((B, L), np.int32)
    for b, n in enumerate(lens):
        seg[b, :n] = 1
    mask = (rng.random((B, L)) < 0.6) & (seg == 1)
    batch = {"tokens": rng.integers(0, 50, (B, L)).astype(np.int32),
             "positions": np.tile(np.arange(L, dtype=np.int32), (B, 1)), "segment_ids": seg,
             "targets": rng.integers(0, 50, (B, L)).astype(np.int32), "mask": mask,
             "old_logp": np.where(mask, rng.normal(-4.0, 0.3, (B, L)), 0).astype(np.float32),
             "advantages": rng.normal(size=(B, L)).astype(np.float32)}
    opt = OptimizerCfg(lr=1e-2, grad_clip=0.0)
    tx, sch = make_optimizer(opt, 10)
    for mode, mbs in (("token-mean", (4, 1)), ("seq-mean-token-mean", (2,))):
        outs = []
        for mb in mbs:
            upd = make_update(cfg, tx, sch, micro_batch_size=mb, aggregation=mode)
            p, _, m = upd(params, tx.init(params), batch)
            outs.append((p, m))

        # reference: plain jax.grad of the full-batch loss, written from the formula
        def ref_loss(pr, mode=mode):
            lp = token_logprobs(pr["model"], cfg, jnp.asarray(batch["tokens"]), jnp.asarray(batch["positions"]),
                                jnp.asarray(batch["targets"]), segment_ids=jnp.asarray(seg))
            ratio = jnp.exp(jnp.where(mask, lp - batch["old_logp"], 0.0))
            a = batch["advantages"]
            per = jnp.maximum(-a * ratio, -a * jnp.clip(ratio, 0.8, 1.28))
            if mode == "token-mean":
                return jnp.sum(jnp.where(mask, per, 0.0)) / mask.sum()
            seq = jnp.sum(jnp.where(mask, per, 0.0), 1) / np.maximum(mask.sum(1), 1)
            return jnp.sum(seq) / (mask.sum(1) > 0).sum()

        g = jax.grad(ref_loss)(params)
        ref_p = jax.tree_util.tree_map(lambda x, u: x + u, params, tx.update(g, tx.init(params), params)[0])
        for p, m in outs:
            assert float(m["loss/policy"]) == pytest.approx(float(ref_loss(params)), rel=1e-5)
            for x, y in zip(jax.tree_util.tree_leaves(p), jax.tree_util.tree_leaves(ref_p), strict=False):
                np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-6)


def test_build_batch_spreads_turn_advantages_onto_response_tokens():
    from leap_jax.rollout.multiturn import Row
    from leap_jax.train.update import build_batch
    r = Row(task="x", group=0, index=1)
    r.append([1, 2, 3], False, None, 0)            # prompt
    r.append([4, 5], True, np.array([-1.0, -2.0]), 1)  # turn 1 response
    r.append([6], False, None, 0)                  # feedback
    r.append([7, 8, 9], True, None, 2)              # turn 2 response (scripted: no logprobs)
    dead = Row(task="x", group=0, index=0)
    dead.append([1, 2], False, None, 0)
    adv = np.array([[[9.0, 9.0], [0.5, -0.25]]], np.float32)  # [P=1, G=2, T=2]
    b = build_batch([dead, r], adv, np.array([[True, True]]), 2, micro_batch_size=2, pad_to_multiple=4)
    assert b["tokens"].shape == (2, 8)  # dead row dropped, batch padded to the micro-batch size
    assert b["tokens"][0, :8].tolist() == [1, 2, 3, 4, 5, 6, 7, 8]
    assert b["targets"][0, :8].tolist() == [2, 3, 4, 5, 6, 7, 8, 9]
    assert b["mask"][0].tolist() == [False, False, True, True, False, True, True, True]
    assert b["advantages"][0].tolist() == [0, 0, 0.5, 0.5, 0, -0.25, -0.25, -0.25]
    assert b["old_logp"][0, 2:4].tolist() == [-1.0, -2.0] and np.isnan(b["old_logp"][0, 5:8]).all()
    assert not b["mask"][1].any() and b["segment_ids"][1].sum() == 0


# ---- credit per algorithm vs NumPy formulas ------------------------------------------------------
def _case():
    # 2 groups x 4 rows x 3 turns; first-correct turns per row (0 = never)
    first = np.array([[1, 1, 2, 0], [0, 0, 3, 0]])
    T = 3
    correct = np.zeros((2, 4, T), bool)
    attempted = np.zeros((2, 4, T), bool)
    for g in range(2):
        for i in range(4):
            f = first[g, i]
            last = f if f else T
            attempted[g, i, :last] = True
            if f:
                correct[g, i, f - 1] = True
    speedup = np.where(correct, 2.0, np.nan).astype(np.float32)
    return first, correct, attempted, speedup, np.full((2, 4, T), 1, np.int32), np.ones((2, 4), bool)


def test_leap_rank_reward_and_trajectory_credit():
    first, c, a, sp, st, rm = _case()
    cr = algorithms.compute_credit("leap", c, a, sp, st, rm)
    key = np.where(first == 0, 4, first)
    want = np.array([[(np.sum(key[g] > key[g, i]) - np.sum(key[g] < key[g, i])) / 3 for i in range(4)]
                     for g in range(2)])
    np.testing.assert_allclose(cr.row_reward, want, atol=1e-6)
    np.testing.assert_allclose(cr.advantages, np.where(a, want[..., None], 0.0), atol=1e-6)
    assert cr.row_reward[0, 2] < 0 < cr.row_reward[1, 2]  # late solve: negative on easy, positive on hard


def test_group_zscore_baselines():
    first, c, a, sp, st, rm = _case()
    for name in ("multiturn", "dcp_binary"):
        cr = algorithms.compute_credit(name, c, a, sp, st, rm, eps=1e-6)
        r = (first > 0).astype(float)
        z = (r - r.mean(1, keepdims=True)) / (r.std(1, keepdims=True) + 1e-6)
        np.testing.assert_allclose(cr.advantages, np.where(a, z[..., None], 0.0), rtol=1e-5, atol=1e-6)
    cr = algorithms.compute_credit("grpo", c[..., :1], a[..., :1], sp[..., :1], st[..., :1], rm)
    r = c[..., 0].astype(float)
    z = (r - r.mean(1, keepdims=True)) / (r.std(1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(cr.advantages[..., 0], z, rtol=1e-5, atol=1e-6)


def test_kevin_and_trloo_returns():
    first, c, a, sp, st, rm = _case()
    S = np.where(c, 0.3 + 2.0, 0.0)
    for name, gamma in (("kevin", 0.4), ("trloo", 1.0)):
        R = np.zeros_like(S)
        for t in range(2, -1, -1):
            R[..., t] = S[..., t] + (gamma * R[..., t + 1] if t + 1 < 3 else 0.0)
        R = np.where(a, R, 0.0)
        cr = algorithms.compute_credit(name, c, a, sp, st, rm)
        if name == "kevin":  # normalised over all turn-samples of the task
            want = np.zeros_like(R)
            for g in range(2):
                v = R[g][a[g]]
                want[g][a[g]] = (v - v.mean()) / (v.std() + 1e-6) if v.std() > 0 else 0.0
        else:  # leave-one-out per (task, turn)
            want = np.zeros_like(R)
            for g in range(2):
                for t in range(3):
                    idx = np.flatnonzero(a[g, :, t])
                    for i in idx:
                        others = [R[g, j, t] for j in idx if j != i]
                        want[g, i, t] = R[g, i, t] - (np.mean(others) if others else 0.0)
        np.testing.assert_allclose(cr.advantages, want, rtol=1e-5, atol=1e-5)


def test_ppo_outcome_reward_and_dcp_modes():
    first, c, a, sp, st, rm = _case()
    cr = algorithms.compute_credit("ppo", c, a, sp, st, rm)
    np.testing.assert_array_equal(cr.row_reward, (first > 0).astype(np.float32))
    assert algorithms.dcp_mode("leap") == "dcp" and algorithms.dcp_mode("dcp_binary") == "dcp"
    assert all(algorithms.dcp_mode(n) == "all" for n in ("rank_no_dcp", "multiturn", "kevin", "trloo", "ppo"))
    with pytest.raises(ValueError, match="unknown algorithm"):
        algorithms.dcp_mode("nope")


def test_env_error_rows_get_no_credit():
    first, c, a, sp, st, rm = _case()
    rm = rm.copy()
    rm[0, 3] = False
    for name in ("leap", "multiturn", "kevin", "trloo"):
        cr = algorithms.compute_credit(name, c, a, sp, st, rm)
        assert not cr.advantages[0, 3].any()
        assert math.isfinite(float(cr.advantages.sum()))

def test_old_logprobs_in_row_chunks_match_one_pass_and_compile_once():
    from leap_jax.models import decoder
    from leap_jax.models.config import ModelConfig
    from leap_jax.models.logprobs import token_logprobs
    from leap_jax.train.update import fill_old_logprobs, make_logprob_fn, map_row_chunks

    cfg = ModelConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=2,
                      num_kv_heads=1, dtype="float32", param_dtype="float32")
    params = {"model": decoder.init(cfg, jax.random.key(3))}
    rng = np.random.default_rng(1)
    B, L = 5, 10
    seg = np.ones((B, L), np.int32)
    seg[3, 7:] = 0
    mask = (rng.random((B, L)) < 0.5) & (seg == 1)
    batch = {"tokens": rng.integers(0, 40, (B, L)).astype(np.int32),
             "positions": np.tile(np.arange(L, dtype=np.int32), (B, 1)), "segment_ids": seg,
             "targets": rng.integers(0, 40, (B, L)).astype(np.int32), "mask": mask,
             "old_logp": np.where(mask & (rng.random((B, L)) < 0.5), np.nan, -1.0).astype(np.float32)}
    want_nan = int((mask & np.isnan(batch["old_logp"])).sum())
    ref = np.asarray(token_logprobs(params["model"], cfg, jnp.asarray(batch["tokens"]),
                                    jnp.asarray(batch["positions"]), jnp.asarray(batch["targets"]),
                                    segment_ids=jnp.asarray(seg)))
    fn = make_logprob_fn(cfg)
    before = batch["old_logp"].copy()
    assert fill_old_logprobs(fn, params, batch, micro_batch_size=2) == want_nan  # chunks 2, 2, 1(+pad)
    assert fn._cache_size() == 1  # one shape for every chunk, the padded last one included
    filled = mask & np.isnan(before)
    np.testing.assert_allclose(batch["old_logp"][filled], ref[filled], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(batch["old_logp"][~filled], before[~filled])
    with pytest.raises(ValueError, match="rows=0"):
        map_row_chunks(lambda x: x, [np.zeros((3, 1))], 0)


@pytest.mark.parametrize("algo,extra,train_timed", [
    ("grpo", ["rollout.max_turns=1"], False), ("multiturn", [], False), ("leap", [], False),
    ("leap", ["algorithm.rank_speedup_tiebreak=true"], True), ("kevin", [], True), ("trloo", [], True)])
def test_training_rollouts_time_only_when_the_reward_reads_speed(algo, extra, train_timed):
    """env.timing auto: timing is most of an evaluation's cost, so rewards that ignore speed ask for
    correctness only; evaluations still time (fast_p). true/false force both."""
    from leap_jax.train.trainer import env_config
    cfg = load_config(None, [f"algorithm.name={algo}", *extra])
    assert cfg.env.timing == "auto"
    assert env_config(cfg, "train").timing is train_timed
    assert env_config(cfg, "eval").timing is True
    # no fixed seed: every evaluation draws fresh inputs (a table of answers to repeated inputs fails)
    assert env_config(cfg, "train").seed is None and env_config(cfg, "eval").seed is None
    for forced in (True, False):
        cfg = load_config(None, [f"algorithm.name={algo}", f"env.timing={str(forced).lower()}", *extra])
        assert env_config(cfg, "train").timing is forced and env_config(cfg, "eval").timing is forced


def test_trainer_sends_correctness_only_jobs_for_grpo(tmp_path):
    tr = _trainer(tmp_path / "g", ["algorithm.name=grpo", "rollout.max_turns=1"])
    assert tr._rollout(4, 1, "all").env_config.timing is False
    assert tr._rollout(1, 2, "all", evaluation=True).env_config.timing is True
    tr.close()


def test_the_step_clock_covers_the_dcp_history(tmp_path, monkeypatch):
    """With dcp.history on, each step is folded into the history after the update: that work is part of
    time/step (so of the net training clock the headline compares), not left between steps."""
    tr = _trainer(tmp_path / "h", ["algorithm.name=leap", "dcp.history=true"])
    assert tr.dcp_history is not None
    slow = 0.2
    update_history = tr._update_history

    def slow_history(out, tasks):
        time.sleep(slow)
        update_history(out, tasks)

    monkeypatch.setattr(tr, "_update_history", slow_history)
    m = tr.train_step()
    assert m["time/step"] - (m["time/rollout"] + m["time/batch"] + m["time/update"]) >= slow
    tr.close()
