"""Training on the generated task family: task selection, evaluation samples and the cheap corpus.

The generator itself is tested in tests/kernels_env/test_generated_tasks.py; these tests check how
the trainer and the SFT bootstrap pick tasks from it: training, held-out and validation tasks are
disjoint and split by composition, evaluations measure a fixed sample, and the corpus mutates only
`mutant_tasks` tasks.
"""
from __future__ import annotations

import pytest

from kernels_env.tasks import subsample
from kernels_env.tasks.generated import split_of
from leap_jax.bootstrap import corpus as C
from leap_jax.train.config import ConfigError, load_config
from leap_jax.train.trainer import select_tasks, validation_tasks

GEN = ["tasks.source=generated", "tasks.generated_train=300", "tasks.generated_held_out=40",
       "tasks.generated_validation=20"]


def test_subsample_is_a_fixed_seeded_sample_in_input_order():
    names = [f"t{i}" for i in range(50)]
    a = subsample(names, 10, seed=3)
    assert len(a) == 10 and a == subsample(names, 10, seed=3)
    assert a == [n for n in names if n in set(a)]  # input order kept
    assert subsample(names, 10, seed=4) != a
    assert set(subsample(names, 5, seed=3)) <= set(a)  # a smaller sample is a prefix of the same ranking
    assert subsample(names, None) == names and subsample(names, 99) == names
    with pytest.raises(ValueError, match="max_count=-1"):
        subsample(names, -1)


def test_generated_selection_is_disjoint_and_split_by_composition():
    cfg = load_config(None, GEN)
    train, held = select_tasks(cfg)
    val = validation_tasks(cfg)
    assert (len(train), len(held), len(val)) == (300, 40, 20)
    assert not (set(train) & set(held)) and not (set(val) & set(held)) and not (set(val) & set(train))
    assert {split_of(n) for n in train} == {"train"}
    assert {split_of(n) for n in held + val} == {"held_out"}
    assert select_tasks(cfg) == (train, held)  # deterministic
    assert select_tasks(load_config(None, GEN + ["tasks.split_seed=1"]))[0] != train


def test_suite_selection_is_unchanged_by_the_generated_keys():
    train, held = select_tasks(load_config(None, ["tasks.generated_train=5"]))
    assert not any(n.startswith("gen") for n in train + held) and len(train) + len(held) >= 50
    assert validation_tasks(load_config(None, [])) == []


@pytest.mark.parametrize("override, needle", [
    (["tasks.source=random"], "tasks.source"),
    (["tasks.source=generated", "tasks.generated_train=0"], "tasks.generated_train"),
    (["tasks.source=generated", "tasks.names=[relu]"], "tasks.names lists suite tasks"),
    (["sft.band_split=validation"], "needs tasks.source=generated and tasks.generated_validation"),
    (["sft.band_split=test"], "sft.band_split"),
    (["eval.max_tasks=0"], "eval.max_tasks"),
])
def test_bad_generated_settings_are_named(override, needle):
    with pytest.raises(ConfigError, match=needle):
        load_config(None, override)


def test_corpus_mutates_only_mutant_tasks(monkeypatch):
    def fake_score(variants, cfg, pool=None):  # statuses are not what this test is about
        return [{**v, "status": "correct" if v["intent"] == "correct" else "wrong_output",
                 "message": "", "feedback": "wrong output"} for v in variants]

    monkeypatch.setattr(C, "score_variants", fake_score)
    tasks = ["relu", "sigmoid", "tanh", "softplus"]
    records, _ = C.build_corpus(C.CorpusCfg(tasks=tasks, variants_per_task=6, mutant_tasks=1))
    per_task = {t: sum(r["task"] == t for r in records) for t in tasks}
    assert sorted(per_task.values())[:3] == [1, 1, 1] and max(per_task.values()) > 1
    again, _ = C.build_corpus(C.CorpusCfg(tasks=tasks, variants_per_task=6, mutant_tasks=1))
    assert [r["id"] for r in again] == [r["id"] for r in records]
    every, _ = C.build_corpus(C.CorpusCfg(tasks=tasks, variants_per_task=6, mutant_tasks=0))
    assert min(sum(r["task"] == t for r in every) for t in tasks) > 1
    with pytest.raises(ValueError, match="mutant_tasks=-1"):
        C.build_corpus(C.CorpusCfg(tasks=tasks, mutant_tasks=-1))
