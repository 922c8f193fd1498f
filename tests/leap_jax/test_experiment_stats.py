"""The comparison's statistics: targets from the baseline's plateau gain, ratios over seeds with their
intervals, and the exact McNemar test, on synthetic curves and counts with known answers."""
from __future__ import annotations

import math

import pytest

from leap_jax.experiment import stats as es

M = "heldout/acc@1"


def _curve(values, step_s=10.0, tokens=100.0):
    """A run: the start evaluation (step -1), then one step per value, each evaluated."""
    rows = [{"step": -1, "time/train_total": 0.0, M: values[0]}]
    for i, v in enumerate(values[1:]):
        rows.append({"step": i, "time/train_total": step_s * (i + 1), "tokens/generated": tokens, M: v})
    return rows


def test_plateau_is_the_mean_of_the_last_three_evaluations():
    rows = _curve([0.4, 0.5, 0.6, 0.7, 0.5, 0.6])
    assert es.plateau_value(rows, M) == pytest.approx((0.7 + 0.5 + 0.6) / 3)
    assert es.plateau_value(rows[:2], M) is None  # two evaluations: no plateau of three
    with pytest.raises(ValueError, match="last=0"):
        es.plateau_value(rows, M, last=0)


def test_gain_target_and_its_bounds():
    assert es.gain_target(0.4, 0.6, 0.5) == pytest.approx(0.5)
    assert es.gain_target(0.4, 0.6, 1.0) == pytest.approx(0.6)
    with pytest.raises(ValueError, match="fraction=0"):
        es.gain_target(0.4, 0.6, 0.0)


def test_target_curve_crossings_and_ratios_are_known():
    # baseline: start 0.4, plateau (last three) 0.6; arm: twice as fast in steps, half the tokens per step
    base = _curve([0.4, 0.45, 0.5, 0.55, 0.6, 0.6, 0.6], step_s=10.0, tokens=100.0)
    arm = _curve([0.4, 0.5, 0.6, 0.6, 0.6], step_s=20.0, tokens=50.0)
    runs = {"b": {0: base, 1: base}, "a": {0: arm, 1: arm}}
    curve = es.target_curve(runs, M, "b", "a", fractions=(0.5, 1.0))
    half, full = curve
    # target 0.5: baseline at step 2 (20 s, 200 tokens), arm at step 1 (20 s, 50 tokens)
    assert half["per_seed"][0] == {"target": pytest.approx(0.5), "seconds": 1.0, "steps": 2.0, "tokens": 4.0}
    # target 0.6: baseline at step 4 (40 s, 400 tokens), arm at step 2 (40 s, 100 tokens)
    assert full["per_seed"][1] == {"target": pytest.approx(0.6), "seconds": 1.0, "steps": 2.0, "tokens": 4.0}
    assert full["steps"]["geomean"] == pytest.approx(2.0) and full["steps"]["n"] == 2
    assert full["steps"]["bootstrap"] == pytest.approx((2.0, 2.0))
    assert full["steps"]["t"] == pytest.approx((2.0, 2.0))  # no spread, no width


def test_target_curve_leaves_a_never_reached_target_out_of_the_intervals():
    base = _curve([0.4, 0.5, 0.6, 0.6, 0.6])
    slow = _curve([0.4, 0.45, 0.45, 0.45])
    curve = es.target_curve({"b": {0: base}, "a": {0: slow}}, M, "b", "a", fractions=(1.0,))
    assert curve[0]["per_seed"][0]["steps"] is None
    assert curve[0]["steps"] == {"n": 0, "geomean": None, "bootstrap": None, "t": None}
    assert es.ratio_summary([2.0]) == {"n": 1, "geomean": 2.0, "bootstrap": None, "t": None}  # one seed: no interval


def test_geometric_mean_and_its_refusals():
    assert es.geometric_mean([1.0, 4.0]) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="positive"):
        es.geometric_mean([1.0, 0.0])


def test_bootstrap_is_deterministic_with_a_seed_and_stays_inside_the_values():
    many = [0.8, 1.1, 1.3, 1.6, 1.9, 2.4, 3.0, 3.9]
    a = es.bootstrap_interval(many, seed=3, draws=500)
    assert a == es.bootstrap_interval(many, seed=3, draws=500)
    assert a != es.bootstrap_interval(many, seed=4, draws=500)
    three = [1.31, 1.92, 2.96]
    lo, hi = es.bootstrap_interval(three)
    assert min(three) <= lo < hi <= max(three)  # three seeds: a bootstrap cannot leave their range
    assert es.log_t_interval(three)[1] > 1.5 * hi  # the t interval is far wider


def test_student_t_against_the_closed_form_for_two_degrees_of_freedom():
    # df = 2: F(t) = 1/2 + t / (2 sqrt(2 + t^2)); F(q) = 0.975 solves to q = 0.95 sqrt(2 / (1 - 0.95^2))
    for t in (0.3, 1.0, 4.3, 10.0):
        assert es.student_t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-7)
    q = 0.95 * math.sqrt(2 / (1 - 0.95 ** 2))  # 2F - 1 = t / sqrt(2 + t^2) = 0.95
    assert es.student_t_quantile(0.975, 2) == pytest.approx(q, rel=1e-6)
    # df = 1 is the Cauchy distribution: F(t) = 1/2 + atan(t) / pi
    assert es.student_t_cdf(-2.0, 1) == pytest.approx(0.5 + math.atan(-2.0) / math.pi, abs=1e-7)


def test_log_t_interval_of_the_three_headline_ratios():
    """The page's seconds ratios 1.92, 2.96, 1.31: the interval of their geometric mean is wide."""
    logs = [math.log(r) for r in (1.92, 2.96, 1.31)]
    m = sum(logs) / 3
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / 2)
    half = 0.95 * math.sqrt(2 / (1 - 0.95 ** 2)) * sd / math.sqrt(3)
    lo, hi = es.log_t_interval([1.92, 2.96, 1.31])
    assert (lo, hi) == pytest.approx((math.exp(m - half), math.exp(m + half)), rel=1e-6)
    assert round(lo, 2) == 0.71 and round(hi, 1) == 5.4
    assert es.log_t_interval([2.0]) is None


def test_mcnemar_exact_against_hand_computed_binomials():
    # 16 vs 5 discordant: 2 * sum_{k<=5} C(21, k) / 2^21
    assert es.mcnemar_exact(16, 5) == pytest.approx(2 * sum(math.comb(21, k) for k in range(6)) / 2 ** 21)
    assert es.mcnemar_exact(3, 0) == pytest.approx(0.25)  # 2 * (1/8)
    assert es.mcnemar_exact(5, 5) == 1.0 and es.mcnemar_exact(0, 0) == 1.0
    assert es.mcnemar_exact(1, 0) == 1.0
    with pytest.raises(ValueError, match="-1"):
        es.mcnemar_exact(-1, 2)


def _final(per_task):
    return {"turns": 3, "splits": {"heldout": {"per_task": {t: [v] for t, v in per_task.items()}}}}


def test_paired_test_counts_discordant_tasks_at_each_turn():
    a = _final({"t1": 1, "t2": 1, "t3": 3, "t4": None, "t5": 2})
    b = _final({"t1": 1, "t2": None, "t3": 1, "t4": 1, "t5": None, "only_b": 1})
    one = es.paired_test(a, b, "heldout", 1)
    assert (one["tasks"], one["only_a"], one["only_b"]) == (5, 1, 2)  # t2 | t3, t4
    assert one["acc_a"] == pytest.approx(2 / 5) and one["p"] == pytest.approx(1.0)
    three = es.paired_test(a, b, "heldout", 3)
    assert (three["only_a"], three["only_b"]) == (2, 1)  # t2, t5 | t4
    with pytest.raises(ValueError, match="no per-task record for split 'suite'"):
        es.paired_test(a, b, "suite", 1)


def test_pooled_test_adds_the_seeds_discordant_pairs():
    s0 = {"tasks": 4, "acc_a": 0.75, "acc_b": 0.5, "only_a": 2, "only_b": 1, "p": 1.0}
    s1 = {"tasks": 4, "acc_a": 0.25, "acc_b": 0.25, "only_a": 0, "only_b": 0, "p": 1.0}
    pooled = es.pooled_paired_test([s0, s1])
    assert (pooled["tasks"], pooled["only_a"], pooled["only_b"]) == (8, 2, 1)
    assert pooled["acc_a"] == pytest.approx(0.5) and pooled["p"] == es.mcnemar_exact(2, 1)


def test_the_page_sections_state_the_curve_and_the_pooled_test():
    from leap_jax.experiment.claims import paired_tests_markdown, target_curve_markdown
    base = _curve([0.4, 0.45, 0.5, 0.55, 0.6, 0.6, 0.6])
    arm = _curve([0.4, 0.5, 0.6, 0.6, 0.6])
    page = target_curve_markdown({"b": {0: base, 1: base}, "a": {0: arm, 1: arm}}, M, "b", "a", fractions=(0.5,))
    assert "| 50% of the gain | s0: 0.5, s1: 0.5 | 2 (2/2; bootstrap 2-2; t 2-2) | 2 (2/2;" in page
    a = _final({"t1": 1, "t2": 1, "t3": None})
    b = _final({"t1": None, "t2": 1, "t3": None})
    table = paired_tests_markdown({"a": {0: a, 1: a}, "b": {0: b, 1: b}}, "a", ["b"], turns=(1,))
    assert "| b | 1 | pooled (2 seeds) | 0.667 | 0.333 | 2 | 0 | **0.5** |" in table


def test_the_page_gives_the_curve_on_acc3_when_the_runs_logged_it():
    from leap_jax.experiment.sections import curve_metrics
    rows = _curve([0.4, 0.5, 0.6])
    assert curve_metrics({"a": {0: rows}}, M) == [M]
    rows[0]["heldout/acc@3"] = rows[0]["heldout/acc@2"] = 0.5
    assert curve_metrics({"a": {0: rows}}, M) == [M, "heldout/acc@3"]
    assert curve_metrics({"a": {0: rows}}, "heldout/acc@3") == ["heldout/acc@3"]
