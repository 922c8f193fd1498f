"""validate_task: no suite task and no generated task accepts a constant or input-ignoring output at
the small sizes, nor an output computed without one of its inputs (the grammar leaves the compositions
it flagged out: tests/kernels_env/test_generated_degenerate.py)."""
from __future__ import annotations

import dataclasses

import pytest

from kernels_env.tasks import list_tasks
from kernels_env.tasks.generated import generated_task_names, get_generated_task
from kernels_env.execute.validate import validate_task
from tests.kernels_env.broken_corpus import SUM, TASKS

SUITE = list_tasks()
GENERATED_SAMPLE = generated_task_names(4000, split="all")[::20]  # 200, every family and dtype


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

    def same_every_trial(b, sizes, trial, seed, task_name, xp, domains=True, out=None):
        return real(b, sizes, 0, seed, task_name, xp, domains, out)

    inputs_mod.make_input = same_every_trial
    try:
        assert validate_task(frozen)  # replayed (or, one element, its mean as a constant)
    finally:
        inputs_mod.make_input = real


@pytest.mark.parametrize("name", GENERATED_SAMPLE)
def test_generated_task_rejects_input_ignoring_outputs(name):
    assert validate_task(get_generated_task(name)) == []


def test_an_input_that_cancels_is_found():
    """softmax(x + v[row]) == softmax(x): the reference computed with v zeroed, or with another trial's
    v, passes every trial, and validate_task says which input and how."""
    from kernels_env.tasks.generated.emit import build_task
    from kernels_env.tasks.generated.grammar import Spec
    task = build_task(Spec("fu", ("add",), "col", "softmax", (), "f32", 1))  # the grammar leaves it out
    assert validate_task(task) == [
        "gen_fu_add_col_softmax_f32_s1: output 'y' passes every trial ignoring input 'v' (zeros in its place)",
        "gen_fu_add_col_softmax_f32_s1: output 'y' passes every trial ignoring input 'v' "
        "(the next trial's draw in its place)"]


def test_a_reference_that_barely_reads_an_input_is_rejected():
    """A task whose output depends on one input far below its tolerance accepts a kernel that skips it;
    the input it does depend on is not flagged."""
    from kernels_env.tasks.spec import Buffer
    two = dataclasses.replace(
        SUM, name="sum_plus_a_trace_of_w",
        inputs=SUM.inputs + (Buffer("w", "float32", ("N",), distributions=("uniform", "normal")),),
        reference=lambda xp, x, w, **kw: SUM.reference(xp, x, **kw) + 1e-9 * xp.sum(w))
    problems = validate_task(two)
    assert any("ignoring input 'w' (zeros in its place)" in p for p in problems)
    assert any("ignoring input 'w' (the next trial's draw in its place)" in p for p in problems)
    assert not any("ignoring input 'x'" in p for p in problems)
