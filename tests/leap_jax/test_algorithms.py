"""The algorithm table (leap_jax.train.algorithms.ALGORITHMS) is the one source every reader follows:
config validation accepts each entry and applies its rules, each entry has a working credit
function, the experiment's arms are entries, and the rank tie-breaks match a NumPy formula."""
from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest

from leap_jax.experiment import driver as experiment
from leap_jax.experiment import report as experiment_report
from leap_jax.train import algorithms
from leap_jax.train.algorithms import ALGORITHMS
from leap_jax.train.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]


def _cfg_args(spec: algorithms.AlgorithmSpec) -> list[str]:
    return [f"algorithm.name={spec.name}"] + (["rollout.max_turns=1"] if spec.single_turn else [])


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_every_entry_is_a_valid_config_with_its_rules(name):
    spec = ALGORITHMS[name]
    assert spec.name == name and callable(spec.credit_fn) and spec.summary
    assert load_config(None, _cfg_args(spec)).algorithm.name == name
    assert load_config(ROOT / "configs" / f"{name}.yaml").algorithm.name == name  # one config per entry
    if spec.single_turn:
        with pytest.raises(ConfigError, match=f"{name} is single-turn"):
            load_config(None, [f"algorithm.name={name}", "rollout.max_turns=2"])
    small = _cfg_args(spec) + ["rollout.group_size=1", "dcp.t_min=0"]
    if spec.needs_group:
        with pytest.raises(ConfigError, match="group_size=1 must be >= 2"):
            load_config(None, small)
    else:
        assert load_config(None, small).rollout.group_size == 1
    never = _cfg_args(spec) + ["dcp.t_min=6", "dcp.t_max=3"]
    if spec.uses_dcp:
        with pytest.raises(ConfigError, match="no group could ever be debugged"):
            load_config(None, never)
    else:
        load_config(None, never)
    assert algorithms.dcp_mode(name) == ("dcp" if spec.uses_dcp else "all")


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_every_entry_has_a_credit_function(name):
    rng = np.random.default_rng(0)
    T = 1 if ALGORITHMS[name].single_turn else 3
    attempted = np.zeros((2, 4, T), bool)
    attempted[..., 0] = True
    attempted[:, :2] = True
    correct = attempted & (rng.random(attempted.shape) < 0.5)
    speedup = np.where(correct, 1.5, np.nan).astype(np.float32)
    status = np.where(attempted, 1, -1).astype(np.int32)
    row_mask = np.ones((2, 4), bool)
    row_mask[1, 3] = False
    cr = algorithms.compute_credit(name, correct, attempted, speedup, status, row_mask)
    assert cr.advantages.shape == (2, 4, T) and cr.row_reward.shape == (2, 4)
    assert cr.advantages.dtype == np.float32 and np.isfinite(cr.advantages).all()
    assert not cr.advantages[~attempted].any() and not cr.advantages[1, 3].any()
    assert cr.row_reward[1, 3] == 0


def test_experiment_arms_are_table_entries_with_configs():
    assert experiment.ARMS and set(experiment.ARMS) <= set(ALGORITHMS)
    assert experiment.ARMS == tuple(n for n, s in ALGORITHMS.items() if s.experiment_arm)
    for arm in experiment.ARMS:
        cfg = load_config(ROOT / "configs" / "experiment" / f"{arm}.yaml")
        assert cfg.algorithm.name == arm
    assert {algorithms.HEADLINE_ARM, algorithms.HEADLINE_BASELINE} <= set(experiment.ARMS)
    defaults = {k: v.default for k, v in inspect.signature(experiment_report.headline).parameters.items()}
    assert (defaults["baseline"], defaults["arm"]) == (algorithms.HEADLINE_BASELINE, algorithms.HEADLINE_ARM)


def test_a_bad_name_is_named_with_the_valid_ones():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["algorithm.name=trlo"])
    msg = str(e.value)
    assert "algorithm.name='trlo'" in msg and "did you mean 'trloo'" in msg
    assert all(n in msg for n in ALGORITHMS)
    with pytest.raises(ValueError, match="unknown algorithm 'nope'; expected one of leap, "):
        algorithms.spec("nope")
    with pytest.raises(ValueError, match="unknown algorithm"):
        algorithms.compute_credit("nope", *[np.zeros((1, 2, 1))] * 4, np.ones((1, 2), bool))


def test_reads_speedup_follows_the_table():
    for name, spec in ALGORITHMS.items():
        assert algorithms.reward_reads_speedup(name) is spec.reads_speedup
        assert algorithms.reward_reads_speedup(name, True) is (spec.reads_speedup or spec.rank_reward)


def test_rank_tiebreaks_order_rows_lexicographically():
    """One group of 5 over T=2: rows 0, 1 solve on turn 1 (speedups 3, 2), row 2 on turn 2, rows 3
    and 4 never (final statuses 2 and 1). Finer keys break the ties of the outcome keys only."""
    correct = np.zeros((1, 5, 2), bool)
    attempted = np.ones((1, 5, 2), bool)
    attempted[0, :2, 1] = False
    correct[0, 0, 0] = correct[0, 1, 0] = correct[0, 2, 1] = True
    speedup = np.full((1, 5, 2), np.nan, np.float32)
    speedup[0, 0, 0], speedup[0, 1, 0], speedup[0, 2, 1] = 3.0, 2.0, np.inf
    status = np.array([[[5, -1], [5, -1], [1, 5], [0, 2], [3, 1]]], np.int32)
    rm = np.ones((1, 5), bool)

    def want(order):  # order: rows from best to worst, ties as tuples
        r = np.zeros(5)
        flat = [(i, rank) for rank, grp in enumerate(order) for i in (grp if isinstance(grp, tuple) else (grp,))]
        rank = dict(flat)
        for i in range(5):
            r[i] = (sum(rank[j] > rank[i] for j in range(5)) - sum(rank[j] < rank[i] for j in range(5))) / 4
        return r

    cases = {(False, False): [(0, 1), 2, (3, 4)], (True, False): [0, 1, 2, (3, 4)],
             (False, True): [(0, 1), 2, 3, 4], (True, True): [0, 1, 2, 3, 4]}
    for (sp, st), order in cases.items():
        cr = algorithms.compute_credit("leap", correct, attempted, speedup, status, rm,
                                       rank_speedup_tiebreak=sp, rank_status_tiebreak=st)
        np.testing.assert_allclose(cr.row_reward[0], want(order), atol=1e-6)
