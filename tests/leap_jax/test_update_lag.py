"""The update lag (`rollout.update_lag=1`): `MultiTurnRollout.start` returns once nothing is left to
generate, with only turn-T evaluations outstanding, and `finish` then gives `run`'s output (rows,
arrays, stats but times; no further generate call); the trainer's first step updates nothing, and
with a policy that reads no params its updates are the on-policy run's, one step later (params bit
for bit)."""
from __future__ import annotations

import time

import jax
import numpy as np
import pytest

from kernels_env.core.config import EnvConfig
from leap_jax.rollout.multiturn import MultiTurnRollout
from leap_jax.rollout.policy import ScriptedPolicy
from leap_jax.train.config import ConfigError, load_config
from leap_jax.train.trainer import Trainer
from tests.leap_jax._trainer_helpers import OracleEvaluator
from tests.leap_jax.test_rollout_pipelined import (G, NEW, TASKS, KeyPolicy, ScrambledEvaluator, _initial,
                                                   assert_same_output, streams)
from tests.leap_jax.test_trainer import TINY

__all__ = ["streams"]  # the module-scoped tokenizer fixture, shared with test_rollout_pipelined


def _rollout(streams, evaluator, T, mode="dcp", preempt=0.0):
    longest = max(len(streams.initial(_initial(t))) for t in TASKS)
    return MultiTurnRollout(
        streams, evaluator, EnvConfig(backend="cpu", sizes="small"), group_size=G, max_turns=T,
        dcp_mode=mode, t_min=0.5, feedback_budget_chars=600, max_new_tokens=NEW,
        max_context_tokens=longest + NEW - 1, overlap_chunks=2, sizes="small",
        feedback_fn=lambda res, budget: f"status {res.status.value}: {res.message}"[:budget],
        pipeline_turns=True, preempt=preempt)


@pytest.mark.parametrize("T,mode", [(1, "dcp"), (3, "dcp"), (3, "all")])
@pytest.mark.parametrize("seed", [0, 3])
def test_start_then_finish_is_run(streams, T, mode, seed):
    pol_run, pol_lag = KeyPolicy(streams, plan_seed=seed), KeyPolicy(streams, plan_seed=seed)
    ref = _rollout(streams, ScrambledEvaluator(seed), T, mode).run(TASKS, pol_run, seed=seed, step=7)
    ro = _rollout(streams, ScrambledEvaluator(seed), T, mode)
    started = ro.start(TASKS, pol_lag, seed=seed, step=7)
    calls = len(pol_lag.calls)
    out = ro.finish(started)
    assert len(pol_lag.calls) == calls  # collecting generates nothing
    assert_same_output(ref, out)
    everyone = set(range(len(TASKS) * G))
    assert pol_lag.releases[-1] == everyone and pol_run.releases[-1] == everyone
    assert sum(r == everyone for r in pol_lag.releases) == 1  # at the yield (or the end), once
    assert ref.stats["env/evaluations"] > 0


def test_start_returns_before_the_last_evaluations(streams):
    """Single turns whose evaluations take 0.3 s: `start` returns with them outstanding (every
    conversation released), `finish` waits for them."""
    ev = ScrambledEvaluator(0, max_delay=0.0, slow=tuple(TASKS), slow_delay=0.3)
    ro = _rollout(streams, ev, T=1)
    pol = KeyPolicy(streams, plan_seed=1)
    t0 = time.perf_counter()
    started = ro.start(TASKS, pol, seed=0)
    assert time.perf_counter() - t0 < 0.25 or len(ev.log) < ev.n  # returned before they were all in
    assert pol.releases and pol.releases[-1] == set(range(len(TASKS) * G))
    out = ro.finish(started)
    assert len(ev.log) == ev.n == out.stats["env/evaluations"] > 0
    everyone = set(range(len(TASKS) * G))
    assert sum(r == everyone for r in pol.releases) == 1  # released at the yield, not again by finish
    assert out.stats["time/evaluate_wait"] > 0


def test_config_rules():
    assert load_config(None, []).rollout.update_lag == 0
    assert load_config(None, ["rollout.update_lag=1"]).rollout.update_lag == 1  # pipelining is the default
    with pytest.raises(ConfigError, match="rollout.update_lag=1 .* needs rollout.pipeline_turns=true"):
        load_config(None, ["rollout.pipeline_turns=false", "rollout.preempt=0", "rollout.update_lag=1"])
    with pytest.raises(ConfigError, match="rollout.update_lag=2: expected one of 0, 1"):
        load_config(None, ["rollout.pipeline_turns=true", "rollout.update_lag=2"])


def _scripted_run(tmp_path, lag, steps):
    cfg = load_config(None, TINY + [f"train.run_dir={tmp_path}", "rollout.pipeline_turns=true",
                                    f"rollout.update_lag={lag}", "checkpoint.enabled=false"])
    tr = Trainer(cfg, evaluator=OracleEvaluator())
    tr._policy_override = ScriptedPolicy(tr.tokenizer, p_good=0.5, end_ids=[tr.streams.im_end])
    try:
        records = [tr.train_step() for _ in range(steps)]
        return records, jax.device_get(tr.params), tr.updates_done
    finally:
        tr.close()


def test_lagged_updates_are_the_on_policy_updates_one_step_later(tmp_path):
    """A policy that reads no params rolls out the same tasks with the same seeds whatever the params:
    three lagged steps make the two updates of two on-policy steps, on the same rollouts."""
    on, on_params, on_updates = _scripted_run(tmp_path / "on", 0, 2)
    lag, lag_params, lag_updates = _scripted_run(tmp_path / "lag", 1, 3)
    assert on_updates == lag_updates == 2
    assert lag[0]["update/skipped"] == 1.0 and "reward/mean" not in lag[0] and "loss/policy" not in lag[0]
    assert lag[0]["time/generate"] > 0 and lag[0]["time/step"] >= lag[0]["time/generate"]
    for a, b in zip(on, lag[1:], strict=True):  # the same rollouts and the same update
        for k, v in a.items():
            if not k.startswith(("time/", "sampler/", "pool/")) and isinstance(v, float):
                assert b[k] == pytest.approx(v, rel=1e-6, abs=1e-9), k
    jax.tree_util.tree_map(np.testing.assert_array_equal, on_params, lag_params)


def test_train_leaves_no_rollout_behind(tmp_path):
    """`train()` with the lag: the first record updates nothing, the others do; the last step's
    rollouts are collected (not trained on) before the final evaluation, and a resumed run starts
    again with a step that updates nothing."""
    over = TINY + [f"train.run_dir={tmp_path}", "rollout.pipeline_turns=true", "rollout.update_lag=1",
                   "train.steps=3", "eval.interval=null"]
    tr = Trainer(load_config(None, over), evaluator=OracleEvaluator())
    tr._policy_override = ScriptedPolicy(tr.tokenizer, p_good=0.5, end_ids=[tr.streams.im_end])
    try:
        recs = tr.train(max_steps=2)
        assert [r.get("update/skipped", 0.0) for r in recs] == [1.0, 0.0] and not tr._lagged
        assert tr.updates_done == 1
    finally:
        tr.close()
    tr = Trainer(load_config(None, over), evaluator=OracleEvaluator(), resume=True)
    tr._policy_override = ScriptedPolicy(tr.tokenizer, p_good=0.5, end_ids=[tr.streams.im_end])
    try:
        recs = tr.train()
        assert [r["step"] for r in recs] == [2] and recs[0]["update/skipped"] == 1.0 and not tr._lagged
        assert tr.updates_done == 1 and tr.finished
    finally:
        tr.close()
