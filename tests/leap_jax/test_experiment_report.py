"""Experiment analysis: training clock, time to target, the headline ratio over seeds, the page."""
from __future__ import annotations

import pytest

from leap_jax import experiment_report as er
from leap_jax.train.metrics import MetricsWriter


def _rows(evals, step_s=10.0, compile_first=0.0):
    """Records of a run: a start eval, then one step each with an eval value (None: no eval)."""
    rows = [{"step": -1, "time/train_total": 0.0, "train_eval/acc@3": evals[0]}]
    total = 0.0
    for i, v in enumerate(evals[1:]):
        c = compile_first if i == 0 else 0.0
        total += step_s
        r = {"step": i, "time/step": step_s + c, "time/compile": c, "time/train_total": total,
             "time/generate": 1.0 + i, "dcp/activated_groups_frac": 0.5}
        if v is not None:
            r["train_eval/acc@3"] = v
        rows.append(r)
    return rows


def test_clock_uses_train_total_and_falls_back_to_step_sums():
    assert er.train_clock(_rows([0.1, None, 0.2], compile_first=5.0)) == [0.0, 10.0, 20.0]
    old = [{"step": 0, "time/step": 2.0}, {"step": 1, "time/step": 3.0}]
    assert er.train_clock(old) == [2.0, 5.0]


def test_time_to_target_is_the_first_eval_at_or_above_it():
    rows = _rows([0.1, 0.2, None, 0.4, 0.3, 0.5])
    assert er.eval_points(rows, "train_eval/acc@3") == [(0.0, 0.1), (10.0, 0.2), (30.0, 0.4), (40.0, 0.3),
                                                          (50.0, 0.5)]
    assert er.time_to_target(rows, "train_eval/acc@3", 0.4) == 30.0
    assert er.time_to_target(rows, "train_eval/acc@3", 0.1) == 0.0
    assert er.time_to_target(rows, "train_eval/acc@3", 0.6) is None
    assert er.best_value(rows, "train_eval/acc@3") == 0.5 and er.final_value(rows, "train_eval/acc@3") == 0.5
    assert er.time_to_target(rows, "heldout/acc@3", 0.1) is None and er.best_value(rows, "heldout/acc@3") is None


def test_headline_ratio_per_seed_with_spread():
    runs = {"multiturn": {0: _rows([0.1, 0.2, 0.3, 0.4]), 1: _rows([0.1, 0.3, 0.2])},
            "leap": {0: _rows([0.1, 0.4, 0.4]), 1: _rows([0.1, 0.2, 0.25, 0.3])},
            "grpo": {0: _rows([0.1, 0.1])}}
    h = er.headline(runs)
    # seed 0: target 0.4, multiturn at 30 s, leap at 10 s; seed 1: target 0.3, multiturn 10 s, leap 30 s
    assert h["per_seed"][0]["target"] == 0.4 and h["per_seed"][1]["target"] == 0.3
    assert h["per_seed"][0]["times"] == {"multiturn": 30.0, "leap": 10.0, "grpo": None}
    assert h["per_seed"][0]["ratio"] == 3.0 and h["per_seed"][1]["ratio"] == pytest.approx(1 / 3)
    assert h["ratio_mean"] == pytest.approx((3 + 1 / 3) / 2) and h["ratio_n"] == 2
    assert h["ratio_std"] == pytest.approx(((3 - 1 / 3) ** 2 / 2) ** 0.5)
    page = er.experiment_markdown(runs)
    assert "s0: 30; s1: 10" in page and "s0: 10; s1: 30" in page and "s0: not reached" in page
    assert "**Headline" in page and "1.67 ± 1.9" in page
    assert page.index("| leap |") < page.index("| multiturn |") < page.index("| grpo |")


def test_no_baseline_means_no_headline():
    page = er.experiment_markdown({"leap": {0: _rows([0.1, 0.2])}})
    assert "No `multiturn` run" in page and "no baseline run" in page


def test_run_names_and_loading(tmp_path):
    assert er.parse_run_name("rank_no_dcp-s12") == ("rank_no_dcp", 12)
    with pytest.raises(ValueError, match="expected <arm>-s<seed>"):
        er.parse_run_name("leap")
    for name, rows in (("leap-s0", _rows([0.1, 0.2])), ("multiturn-s0", _rows([0.1, 0.3]))):
        w = MetricsWriter(tmp_path / name, tensorboard=False, progress_bar=False)
        for r in rows:
            w.write(r["step"], {k: v for k, v in r.items() if k != "step"})
        w.close()
    runs = er.load_experiment([tmp_path / "leap-s0", tmp_path / "multiturn-s0"])
    assert set(runs) == {"leap", "multiturn"} and [r["step"] for r in runs["leap"][0]] == [-1, 0]
    assert er.headline(runs)["per_seed"][0]["times"] == {"leap": None, "multiturn": 10.0}


def test_ratio_is_explained_where_it_cannot_be_computed():
    runs = {"multiturn": {0: _rows([0.3, 0.2, 0.3]), 1: _rows([0.1, 0.5])},
            "leap": {0: _rows([0.3, 0.4]), 1: _rows([0.1, 0.2])}}
    h = er.headline(runs)
    assert h["per_seed"][0]["ratio"] is None and "never beat its first evaluation" in h["per_seed"][0]["note"]
    assert h["per_seed"][1]["ratio"] is None and "`leap` never reached" in h["per_seed"][1]["note"]
    assert h["ratio_n"] == 0
    page = er.experiment_markdown(runs)
    assert "Where the ratio is n/a: s0: `multiturn` never beat" in page and "s1: `leap` never reached" in page


def test_steps_and_tokens_to_target_do_not_depend_on_the_clock():
    rows = _rows([0.1, 0.2, None, 0.4, 0.3, 0.5], step_s=7.0)
    for i, r in enumerate(er.step_records(rows)):
        r["tokens/generated"] = 100.0 * (i + 1)
    assert er.steps_to_target(rows, "train_eval/acc@3", 0.4) == 3
    assert er.tokens_to_target(rows, "train_eval/acc@3", 0.4) == 100.0 + 200.0 + 300.0
    assert er.steps_to_target(rows, "train_eval/acc@3", 0.1) == 0  # the start already has it
    assert er.tokens_to_target(rows, "train_eval/acc@3", 0.1) == 0.0
    assert er.steps_to_target(rows, "train_eval/acc@3", 0.9) is None
    assert er.tokens_to_target(rows, "train_eval/acc@3", None) is None
    h = er.headline({"multiturn": {0: rows}, "leap": {0: _rows([0.1, 0.5])}})
    assert h["per_seed"][0]["steps"] == {"multiturn": 5, "leap": 1}


def test_learning_table_reports_start_best_last_and_change_over_seeds():
    runs = {"grpo": {0: _rows([0.2, 0.3, 0.25]), 1: _rows([0.1, 0.4])}}
    for rows in runs["grpo"].values():
        for r in rows:
            if "train_eval/acc@3" in r:
                r["heldout/acc@1"] = r["train_eval/acc@3"]
    page = er.learning_markdown(runs, ("heldout/acc@1",))
    assert "| grpo | 0 | 2 | 0.2 | 0.3 | 0.25 | 0.05 |" in page
    assert "| grpo | 1 | 1 | 0.1 | 0.4 | 0.4 | 0.3 |" in page
    assert "| grpo | mean ± std |  |  |  |  | 0.175 ± 0.18 |" in page
    assert "## Learning: change from the starting policy" in er.experiment_markdown(runs)
