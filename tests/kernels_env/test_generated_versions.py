"""Versions of the generated family: each fixes which chains exist and so every split; an earlier
version stays selectable and draws exactly the tasks its runs drew; the validation split is disjoint
from the reported tasks."""
from __future__ import annotations

import hashlib

import pytest

from kernels_env.tasks.generated import (CURRENT_FAMILY_VERSION, FAMILY_VERSIONS, generated_task_names,
                                         get_generated_task, parse_name, validation_task_names)
from kernels_env.tasks.generated.degenerate import degenerate_reason
from kernels_env.tasks.generated.grammar import all_specs

HEADLINE_VERSION = "v1"
DEGENERATE = "gen_fu_add_col_softmax_f32_s1"  # softmax(x + v[m]) = softmax(x): left out since v2


def _digest(names):
    return hashlib.sha256("\n".join(names).encode()).hexdigest()


def test_the_headline_version_draws_its_256_held_out_and_2000_training_tasks():
    """The lists docs/results/headline/2026-12-04_h200 trained and reported on (their digests, taken from
    the names in its runs' final_eval.json and the grammar before degenerate chains were left out)."""
    held = generated_task_names(256, 0, "held_out", HEADLINE_VERSION)
    train = generated_task_names(2000, 0, "train", HEADLINE_VERSION)
    assert _digest(held) == "5331065157a5709b8c9135686f3164793ea91183da5ec61bf0b81b9a8f821b93"
    assert _digest(train) == "81e7fac387c07200b3632e84e6e71b5e03715f226d1b5915d58edddd02bdb3d6"
    current = {s.name for s in all_specs(CURRENT_FAMILY_VERSION)}
    assert (sum(n in current for n in held), sum(n in current for n in train)) == (229, 1884)


def test_versions_differ_exactly_by_the_degenerate_chains():
    old, new = set(all_specs(FAMILY_VERSIONS[0])), set(all_specs(FAMILY_VERSIONS[-1]))
    assert new < old
    assert all(degenerate_reason(s) is not None for s in old - new)
    assert CURRENT_FAMILY_VERSION == FAMILY_VERSIONS[-1]


def test_names_are_checked_against_a_version_and_any_version_builds():
    assert parse_name(DEGENERATE, HEADLINE_VERSION).name == DEGENERATE
    with pytest.raises(ValueError, match="left out of the generated task grammar"):
        parse_name(DEGENERATE)
    assert get_generated_task(DEGENERATE).name == DEGENERATE  # a run of the older version builds it by name
    with pytest.raises(ValueError, match="version 'v0': expected one of"):
        generated_task_names(3, version="v0")


def test_validation_tasks_are_disjoint_from_held_out_and_training_tasks():
    held = generated_task_names(256, 0, "held_out")
    val = validation_task_names(128, 256, 0)
    assert len(val) == len(set(val)) == 128
    assert not set(val) & set(held) and not set(val) & set(generated_task_names(2000, 0, "train"))
    assert val == generated_task_names(384, 0, "held_out")[256:]
    assert validation_task_names(64, 256, 0) == val[:64]  # prefix-stable, like every list
