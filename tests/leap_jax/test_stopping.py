"""The run's end: the plateau rule (train.plateau) and the final evaluation with turns of real
feedback (eval.final_turns), on a tiny CPU trainer with a scripted policy and the oracle evaluator."""
from __future__ import annotations

import json

import pytest

from leap_jax.train.config import ConfigError, load_config
from leap_jax.train.metrics import read_metrics
from leap_jax.train.stopping import metric_history, plateaued
from tests.leap_jax.test_experiment import _trainer

SPLIT = ["tasks.names=[relu, tanh, sigmoid, silu, softplus]", "tasks.held_out_fraction=0.4"]


@pytest.mark.parametrize("values,window,tol,want", [
    ([], 3, 0.01, False),
    ([0.5, 0.5], 3, 0.01, False),                 # fewer evaluations than the window
    ([0.5, 0.5, 0.5], 3, 0.01, True),
    ([0.40, 0.45, 0.50], 3, 0.01, False),         # still rising
    ([0.40, 0.60, 0.595, 0.59], 3, 0.01, True),   # each of the last 3 within 0.01 of the best
    ([0.40, 0.60, 0.595, 0.58], 3, 0.01, False),  # 0.58 is 0.02 below the best
    ([0.70, 0.50, 0.50, 0.50], 3, 0.01, False),   # the best (the start) was never regained
    ([0.40, 0.50, 0.49], 2, 0.01, True),
])
def test_plateau_rule(values, window, tol, want):
    assert plateaued(values, window, tol) is want


def test_plateau_rule_rejects_a_bad_window_and_reads_history():
    with pytest.raises(ValueError, match="window=0"):
        plateaued([1.0], 0, 0.01)
    rows = [{"step": -1, "m": 0.1}, {"step": 0}, {"step": 1, "m": 0.3}, {"step": 2, "m": None}]
    assert metric_history(rows, "m") == [0.1, 0.3]


ACC = {-1: 0.10, 0: 0.20, 1: 0.30, 2: 0.40, 3: 0.405, 4: 0.40, 5: 0.41, 6: 0.41, 7: 0.41, 8: 0.41}


def _scripted_eval(trainer):
    """A periodic evaluation whose held-out Acc@1 follows ACC (by the last step done)."""
    def evaluate():
        return {"heldout/acc@1": ACC[trainer.step - 1], "time/periodic_eval": 0.0}
    trainer.periodic_eval_metrics = evaluate


def test_run_stops_at_its_plateau_after_min_steps_and_resume_keeps_the_history(tmp_path):
    extra = ["train.steps=50", "eval.interval=1", "eval.at_start=true", "checkpoint.interval=1",
             "train.plateau.metric=heldout/acc@1", "train.plateau.window=3", "train.plateau.tol=0.01",
             "train.plateau.min_steps=6", *SPLIT]
    t = _trainer(tmp_path / "r", extra + ["train.max_wall_s=1e-6"])  # one step per call
    _scripted_eval(t)
    t.train()
    t.close()
    steps = [t.step]
    while not (tmp_path / "r" / "finished.json").is_file():
        r = _trainer(tmp_path / "r", resume=True)
        _scripted_eval(r)
        r.train()
        r.close()
        steps.append(r.step)
        assert len(steps) < 20
    # values .405, .40, .41 after step 4 are flat already, but min_steps=6 holds the run to 6 steps
    assert steps[-1] == 6 and steps == list(range(1, 7))
    fin = json.loads((tmp_path / "r" / "finished.json").read_text())
    assert fin["reason"] == "plateau" and fin["step"] == 6
    assert [r["step"] for r in read_metrics(tmp_path / "r")] == [-1, 0, 1, 2, 3, 4, 5]


def test_plateau_metric_must_be_one_the_periodic_evaluation_logs():
    with pytest.raises(ConfigError, match="train.plateau.metric='loss'"):
        load_config(None, ["train.plateau.metric=loss"])
    with pytest.raises(ConfigError, match="needs eval.interval"):
        load_config(None, ["train.plateau.metric=heldout/acc@1"])
    with pytest.raises(ConfigError, match="needs eval.train_tasks=true"):
        load_config(None, ["train.plateau.metric=train_eval/acc@1", "eval.interval=5"])
    with pytest.raises(ConfigError, match=r"acc@1..acc@3 \(eval.turns=3\)"):
        load_config(None, ["train.plateau.metric=heldout/acc@4", "eval.interval=5"])
    with pytest.raises(ConfigError, match="eval.final_suite=true needs eval.final_turns"):
        load_config(None, ["eval.final_suite=true"])


@pytest.mark.parametrize("p_good", [1.0, 0.0])
def test_final_evaluation_with_turns_of_feedback_on_every_split(tmp_path, p_good):
    """A finished run evaluates held-out, training and suite tasks with eval.final_turns turns once
    (final_eval.json); the scripted policy's answers fix every accuracy; a resume does not redo it."""
    from kernels_env.tasks import list_tasks
    extra = ["train.steps=1", "eval.interval=10", "eval.turns=1", "eval.final_turns=2", "eval.final_suite=true",
             *SPLIT]
    t = _trainer(tmp_path / "r", extra, p_good=p_good)
    t.train()
    t.close()
    fin = json.loads((tmp_path / "r" / "final_eval.json").read_text())
    assert fin["step"] == 1 and fin["turns"] == 2 and fin["temperature"] == 0.0
    sizes = {"heldout": len(t.held_out), "train_eval": len(t.train_tasks), "suite": len(list_tasks())}
    assert {k: v["tasks"] for k, v in fin["splits"].items()} == sizes
    for split in fin["splits"].values():
        assert split["acc@1"] == split["acc@2"] == p_good
        assert split["turns_per_pass"] == (1.0 if p_good else None)
        assert all(v == ([1] if p_good else [None]) for v in split["per_task"].values())
    assert json.loads((tmp_path / "r" / "finished.json").read_text())["reason"] == "steps"
    r = _trainer(tmp_path / "r", resume=True, p_good=p_good)
    r._eval_on = None  # a second evaluation would fail here
    assert r.train() == []
    r.close()
