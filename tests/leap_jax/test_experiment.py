"""Experiment harness: the trainer's wall-clock budget (stop with a checkpoint, resume exactly), the
periodic held-out evaluation, `base:` lists in configs, the experiment arm configs, and the driver
(`python -m leap_jax.experiment`) end to end on a tiny CPU config, resumed across two calls."""
from __future__ import annotations

import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from leap_jax.rollout.policy import ScriptedPolicy
from leap_jax.train.config import ConfigError, load_config
from leap_jax.train.metrics import read_metrics
from leap_jax.train.trainer import Trainer
from tests.leap_jax._trainer_helpers import OracleEvaluator
from tests.leap_jax.test_trainer import TINY, VOLATILE

ROOT = Path(__file__).resolve().parents[2]
ARMS = ("leap", "multiturn", "grpo", "trloo", "rank_no_dcp", "dcp_binary")


def _trainer(run_dir, extra=(), resume=False, p_good=0.5):
    if resume:
        cfg = load_config(Path(run_dir) / "config.yaml", list(extra))
    else:
        cfg = load_config(None, TINY + [f"train.run_dir={run_dir}", *extra])
    tr = Trainer(cfg, evaluator=OracleEvaluator(), resume=resume)
    tr._policy_override = ScriptedPolicy(tr.tokenizer, p_good=p_good, end_ids=[tr.streams.im_end])
    return tr


def _stable(rec):
    return {k: v for k, v in rec.items() if not k.startswith(VOLATILE)}


def test_wall_budget_stops_with_checkpoint_and_resume_is_exact(tmp_path):
    a = _trainer(tmp_path / "a", ["train.steps=3", "checkpoint.interval=10"])
    a.train()
    a.close()
    # a budget far below one step's time: stop after the first step, with a checkpoint there
    b = _trainer(tmp_path / "b", ["train.steps=3", "checkpoint.interval=10", "train.max_wall_s=1e-6"])
    b.train()
    assert b.stopped_by_budget and b.step == 1 and b.checkpointer.latest_step() == 1
    b.close()
    # each resumed piece does one more step under the same budget, until train.steps
    for want in (2, 3):
        c = _trainer(tmp_path / "b", resume=True)
        assert c.step == want - 1
        c.train()
        assert c.step == want and c.checkpointer.latest_step() == want
        assert c.stopped_by_budget == (want < 3)
        c.close()
    for x, y in zip(jax.tree_util.tree_leaves(a.params), jax.tree_util.tree_leaves(c.params), strict=False):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    ma, mb = read_metrics(tmp_path / "a"), read_metrics(tmp_path / "b")
    assert [r["step"] for r in mb] == [0, 1, 2]
    assert [_stable(r) for r in ma] == [_stable(r) for r in mb]


class _FakeClock:
    """The trainer module's `time` with a perf_counter the test advances (no real timing)."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now

    def __getattr__(self, name):
        return getattr(time, name)


@pytest.mark.parametrize("budget,eval_s,want_steps", [(35.0, None, 3), (75.0, 20.0, 3), (95.0, 20.0, 4)])
def test_wall_budget_stops_before_a_step_that_would_pass_it(tmp_path, monkeypatch, budget, eval_s, want_steps):
    """Steps take 10 s, every second one 20 s more of evaluation: the run stops once elapsed + the
    longest of the last eval.interval steps would pass train.max_wall_s, not after passing it."""
    import leap_jax.train.trainer as trainer_mod
    clock = _FakeClock()
    monkeypatch.setattr(trainer_mod, "time", clock)
    extra = ["train.steps=10", "checkpoint.interval=100", f"train.max_wall_s={budget}"]
    t = _trainer(tmp_path / "r", extra + ([] if eval_s is None else ["eval.interval=2"]))
    step, evaluate = t.train_step, t.periodic_eval_metrics

    def slow_step():
        m = step()
        clock.now += 10.0
        return m

    def slow_eval():
        m = evaluate()
        clock.now += eval_s
        return m

    t.train_step, t.periodic_eval_metrics = slow_step, slow_eval
    t.train()
    # e.g. budget 75: after step 3, 50 s passed and the next step may be a 30 s one (step + eval)
    assert t.stopped_by_budget and t.step == want_steps and t.checkpointer.latest_step() == want_steps
    assert clock.now <= budget
    t.close()


def test_no_budget_stop_on_the_last_step(tmp_path):
    t = _trainer(tmp_path / "r", ["train.steps=1", "train.max_wall_s=1e-6"])
    t.train()
    assert t.step == 1 and not t.stopped_by_budget and t.checkpointer.latest_step() == 1
    t.close()


@pytest.mark.parametrize("p_good", [1.0, 0.0])
def test_heldout_eval_every_interval_and_at_the_end(tmp_path, p_good):
    extra = ["train.steps=3", "eval.interval=2", "eval.turns=2", "eval.samples=2",
             "tasks.names=[relu, tanh, sigmoid, silu, softplus]", "tasks.held_out_fraction=0.4"]
    t = _trainer(tmp_path / "r", extra, p_good=p_good)
    held = list(t.held_out)
    assert len(held) == 2
    t.train()
    t.close()
    rows = read_metrics(tmp_path / "r")
    have = [r["step"] for r in rows if "heldout/acc@1" in r]
    assert have == [1, 2]  # after step 2 (interval) and after the last step (3)
    for r in rows:
        if "heldout/acc@1" in r:
            # the scripted policy either always submits the solution or never does
            assert r["heldout/acc@1"] == r["heldout/acc@2"] == p_good
            assert r["time/periodic_eval"] >= 0
            assert r["time/step"] < r["time/step"] + r["time/periodic_eval"] or r["time/periodic_eval"] == 0


def test_budget_and_interval_validation():
    with pytest.raises(ConfigError, match="train.max_wall_s"):
        load_config(None, ["train.max_wall_s=0"])
    with pytest.raises(ConfigError, match="eval.interval"):
        load_config(None, ["eval.interval=0"])


def test_base_list_merges_in_order(tmp_path):
    (tmp_path / "a.yaml").write_text("train: {steps: 5, seed: 1}\nrollout: {group_size: 4}\n")
    (tmp_path / "b.yaml").write_text("train: {seed: 2}\n")
    (tmp_path / "c.yaml").write_text("base: [a.yaml, b.yaml]\nrollout: {max_turns: 2}\n")
    cfg = load_config(tmp_path / "c.yaml")
    assert (cfg.train.steps, cfg.train.seed, cfg.rollout.group_size, cfg.rollout.max_turns) == (5, 2, 4, 2)
    (tmp_path / "d.yaml").write_text("base: [a.yaml, 3]\n")
    with pytest.raises(ConfigError, match="list of them"):
        load_config(tmp_path / "d.yaml")


def test_experiment_arm_configs_share_the_common_part():
    cfgs = {a: load_config(ROOT / "configs" / "experiment" / f"{a}.yaml") for a in ARMS}
    assert {a: c.algorithm.name for a, c in cfgs.items()} == {a: a for a in ARMS}
    ref = cfgs["leap"]
    for a, c in cfgs.items():
        assert c.model.source == "hf" and c.model.path == ref.model.path
        assert c.tokenizer.kind == "hf"
        assert (c.tasks.levels, c.tasks.held_out_fraction, c.tasks.split_seed) == (
            ref.tasks.levels, ref.tasks.held_out_fraction, ref.tasks.split_seed)
        assert (c.train.steps, c.train.seed, c.train.time_budget_s, c.eval.interval, c.optimizer.lr) == (
            ref.train.steps, ref.train.seed, ref.train.time_budget_s, ref.eval.interval, ref.optimizer.lr)
        assert c.train.time_budget_s is not None and c.eval.interval is not None
        assert c.eval.train_tasks and c.eval.at_start and c.eval.temperature == 0.0
        assert (c.rollout.group_size, c.rollout.prompts_per_step) == (8, 8)
        assert c.rollout.max_turns == (1 if a == "grpo" else 3) and c.eval.turns == 3
        assert c.sampling.max_new_tokens == ref.sampling.max_new_tokens
    assert cfgs["leap"].dcp.t_min == 4 and cfgs["leap"].dcp.t_max == 7
    # the single key that points every arm at another SFT policy
    c = load_config(ROOT / "configs" / "experiment" / "trloo.yaml", ["model.path=/x/model"])
    assert c.model.path == "/x/model"


def test_time_budget_finishes_the_run_with_a_final_eval_and_start_eval(tmp_path):
    extra = ["train.steps=50", "train.time_budget_s=1e-6", "eval.interval=10", "eval.train_tasks=true",
             "eval.at_start=true", "eval.turns=2", "tasks.names=[relu, tanh, sigmoid, silu, softplus]",
             "tasks.held_out_fraction=0.4"]
    t = _trainer(tmp_path / "r", extra, p_good=1.0)
    t.train()
    assert t.finished and t.step == 1 and t.checkpointer.latest_step() == 1
    t.close()
    fin = json.loads((tmp_path / "r" / "finished.json").read_text())
    assert fin["reason"] == "time_budget" and fin["step"] == 1 and fin["train_time_s"] > 0
    rows = read_metrics(tmp_path / "r")
    assert [r["step"] for r in rows] == [-1, 0]
    start, last = rows
    assert start["time/train_total"] == 0.0 and "acc@1" not in start
    for r in rows:  # scripted p_good=1 answers every task with its solution
        for k in ("train_eval/acc@1", "train_eval/acc@2", "heldout/acc@1", "heldout/acc@2"):
            assert r[k] == 1.0
    assert last["time/train_total"] == pytest.approx(last["time/step"] - last["time/compile"])
    assert 0 <= last["time/compile"] <= last["time/step"]
    # resuming a finished run does no more steps and keeps the training clock
    r2 = _trainer(tmp_path / "r", resume=True)
    assert r2.train_time == pytest.approx(fin["train_time_s"])
    assert r2.train() == [] and r2.step == 1
    r2.close()
    assert [r["step"] for r in read_metrics(tmp_path / "r")] == [-1, 0]


def test_a_run_can_reuse_another_runs_start_evaluation(tmp_path):
    """eval.start_metrics: the step -1 record is the first run's start_eval.json (same policy, tasks,
    eval settings), not a second evaluation; a start evaluation of other tasks is refused."""
    extra = ["train.steps=1", "eval.interval=10", "eval.train_tasks=true", "eval.at_start=true", "eval.turns=2",
             "tasks.names=[relu, tanh, sigmoid, silu, softplus]", "tasks.held_out_fraction=0.4"]
    first = _trainer(tmp_path / "a", extra, p_good=1.0)
    first.train()
    first.close()
    saved = json.loads((tmp_path / "a" / "start_eval.json").read_text())
    assert saved["train_tasks"] == first.train_tasks and saved["metrics"]["train_eval/acc@1"] == 1.0
    shared = str(tmp_path / "a" / "start_eval.json")
    second = _trainer(tmp_path / "b", extra + ["train.seed=5", f"eval.start_metrics={shared}"], p_good=0.0)
    calls = []
    second.periodic_eval_metrics = lambda: calls.append(1) or {}  # only the last step may evaluate
    second.train()
    second.close()
    start = read_metrics(tmp_path / "b")[0]
    assert start["step"] == -1 and start["eval/start_shared"] == 1.0 and calls == [1]
    for k in ("train_eval/acc@1", "train_eval/acc@2", "heldout/acc@1", "time/periodic_eval"):
        assert start[k] == saved["metrics"][k]
    assert not (tmp_path / "b" / "start_eval.json").exists()
    other = _trainer(tmp_path / "c", extra[:-2] + ["tasks.names=[relu, tanh, sigmoid, silu]",
                                                   "tasks.held_out_fraction=0.4", f"eval.start_metrics={shared}"])
    with pytest.raises(ValueError, match=r"measured something else \(held_out: "):
        other.train()
    other.close()
    with pytest.raises(ConfigError, match="eval.start_metrics.*needs eval.at_start=true"):
        load_config(None, [f"eval.start_metrics={shared}"])


def test_training_clock_excludes_compilation_and_sums_over_steps(tmp_path):
    t = _trainer(tmp_path / "r", ["train.steps=2"])
    rows = t.train()
    t.close()
    assert rows[0]["time/compile"] > 0  # the first step compiles the update
    total = 0.0
    for r in rows:
        total += r["time/step"] - r["time/compile"]
        assert r["time/train_total"] == pytest.approx(total)


def test_compile_clock_counts_new_compilations_only():
    from leap_jax.train.compile_clock import compile_seconds
    f = jax.jit(lambda x: jnp.tanh(x) * 3.0 + x.sum())
    c0 = compile_seconds()
    f(jnp.ones((7, 5))).block_until_ready()
    c1 = compile_seconds()
    f(jnp.ones((7, 5))).block_until_ready()
    assert c1 > c0 and compile_seconds() == c1


def test_eval_options_need_an_interval():
    with pytest.raises(ConfigError, match="eval.interval"):
        load_config(None, ["eval.train_tasks=true"])
    with pytest.raises(ConfigError, match="train.time_budget_s"):
        load_config(None, ["train.time_budget_s=-1"])
