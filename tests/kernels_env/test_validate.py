"""validate_task: no suite task accepts a constant or input-ignoring output at the small sizes."""
from __future__ import annotations

import dataclasses

import pytest

from kernels_env.tasks import list_tasks
from kernels_env.execute.validate import validate_task
from tests.kernels_env.broken_corpus import SUM, TASKS

SUITE = list_tasks()


@pytest.mark.parametrize("task", SUITE, ids=[t.name for t in SUITE])
def test_suite_task_rejects_input_ignoring_outputs(task):
    assert validate_task(task) == []


@pytest.mark.parametrize("name", sorted(TASKS))
def test_corpus_tasks_are_valid(name):
    assert validate_task(TASKS[name]) == []


def test_a_loose_tolerance_is_rejected():
    weak = dataclasses.replace(SUM, name="weak_sum", tolerance={"float32": (1e9, 1.0)})
    assert any("constant" in p for p in validate_task(weak))


def test_inputs_identical_across_trials_are_rejected():
    """A task whose inputs never change (one distribution, fixed seed) accepts a replayed answer."""
    from kernels_env.execute import inputs as inputs_mod
    frozen = dataclasses.replace(SUM, name="frozen_sum")
    real = inputs_mod.make_input

    def same_every_trial(b, sizes, trial, seed, task_name, xp, domains=True):
        return real(b, sizes, 0, seed, task_name, xp, domains)

    inputs_mod.make_input = same_every_trial
    try:
        assert validate_task(frozen)  # replayed (or, one element, its mean as a constant)
    finally:
        inputs_mod.make_input = real
