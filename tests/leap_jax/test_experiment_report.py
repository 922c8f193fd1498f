"""Experiment analysis: training clock, time to target, the headline ratio over seeds, the page."""
from __future__ import annotations

import pytest

from leap_jax.experiment import report as er
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


# ---- the sections of the experiment page (experiment_sections), on synthetic runs with known answers
def _run(evals, tokens=1000.0, step_s=10.0, groups=(2, 1, 1)):
    """A run whose held-out Acc@1 follows `evals` (start first, one step per later value), each step
    generating `tokens` tokens with DCP outcomes (easy, debug, hopeless) = groups of 4 groups."""
    rows = [{"step": -1, "time/train_total": 0.0, "heldout/acc@1": evals[0]}]
    for i, v in enumerate(evals[1:]):
        easy, debug, hopeless = groups
        rows.append({"step": i, "time/step": step_s, "time/train_total": step_s * (i + 1), "heldout/acc@1": v,
                     "tokens/generated": tokens, "rollout/groups": 4.0, "dcp/easy_groups": easy,
                     "dcp/debug_groups": debug, "dcp/hopeless_groups": hopeless, "turns_per_pass": 1.5,
                     "dcp/activated_groups_frac": debug / 4, "rollout/gen_rows_turn1": 32.0,
                     "rollout/gen_rows_turn2": 8.0 * debug, "rollout/gen_rows_turn3": 4.0 * debug})
    return rows


def test_targets_table_and_ratios_in_seconds_steps_and_tokens():
    from leap_jax.experiment import sections as es
    m = "heldout/acc@1"
    runs = {"multiturn": {0: _run([0.2, 0.3, 0.4, 0.5], tokens=2000.0, step_s=20.0),
                          1: _run([0.2, 0.25, 0.3, 0.3], tokens=2000.0, step_s=20.0)},
            "leap": {0: _run([0.2, 0.5, 0.5], tokens=1000.0), 1: _run([0.2, 0.2, 0.3, 0.3], tokens=1000.0)},
            "grpo": {0: _run([0.2, 0.3, 0.3]), 1: _run([0.2, 0.3, 0.35])}}
    h = er.headline(runs, m)
    # seed 0: target .5; multiturn at step 3 (60 s, 6000 tokens), leap at step 1 (10 s, 1000 tokens)
    # seed 1: target .3; multiturn at step 2 (40 s, 4000 tokens), leap at step 2 (20 s, 2000 tokens)
    assert h["per_seed"][0]["times"] == {"multiturn": 60.0, "leap": 10.0, "grpo": None}
    assert h["per_seed"][1]["steps"] == {"multiturn": 2, "leap": 2, "grpo": 1}
    assert h["per_seed"][1]["tokens"] == {"multiturn": 4000.0, "leap": 2000.0, "grpo": 1000.0}
    table = es.targets_markdown(h, runs, ("leap", "multiturn"))
    assert "| 0 | 0.5 | leap | 10 | 1 | 1000 | 0.5 | 2 |" in table
    assert "| 0 | 0.5 | grpo | not reached | not reached | - | 0.3 | 2 |" in table
    assert "| mean ± std (reached 2/2) | | leap | 15 ± 7.1 | 1.5 ± 0.71 | 1500 ± 7.1e+02 | | |" in table
    assert "| mean ± std (reached 1/2) | | grpo | 10 | 1 | 1000 | | |" in table
    lines = es.ratio_lines(h)
    # seconds: 60/10 = 6 and 40/20 = 2; steps: 3/1 = 3 and 2/2 = 1; tokens: 6 and 2
    assert lines[0].startswith("- training seconds to target, `multiturn` / `leap`: **4 ± 2.8** over 2 seed(s)")
    assert "(s0: 6, s1: 2)" in lines[0]
    assert "**2 ± 1.4**" in lines[1] and "**4 ± 2.8**" in lines[2]


def test_final_accuracy_table_from_final_evals_with_the_start_policy(tmp_path):
    from leap_jax.experiment import sections as es

    def fin(h1, h2, h3, t1, t3, suite=None):
        splits = {"heldout": {"acc@1": h1, "acc@2": h2, "acc@3": h3, "tasks": 256},
                  "train_eval": {"acc@1": t1, "acc@2": t1, "acc@3": t3, "tasks": 256}}
        if suite:
            splits["suite"] = {"acc@1": suite[0], "acc@2": suite[0], "acc@3": suite[1], "tasks": 86}
        return {"turns": 3, "step": 10, "splits": splits}
    for name, f in (("leap-s0", fin(0.5, 0.6, 0.7, 0.3, 0.5, (0.1, 0.2))), ("leap-s1", fin(0.6, 0.7, 0.8, 0.4, 0.4)),
                    ("grpo-s0", fin(0.55, 0.56, 0.57, 0.35, 0.36, (0.0, 0.05)))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "final_eval.json").write_text(__import__("json").dumps(f))
    (tmp_path / "multiturn-s0").mkdir()  # no final evaluation: left out
    finals = es.load_final_evals(sorted(tmp_path.iterdir()))
    assert sorted(finals) == ["grpo", "leap"] and sorted(finals["leap"]) == [0, 1]
    start = fin(0.45, 0.5, 0.52, 0.27, 0.3, (0.0, 0.0))
    page = es.final_accuracy_markdown(finals, start, ("leap",))
    lines = page.splitlines()
    assert lines[0].startswith("| policy | seeds | held-out Acc@1 | held-out Acc@2 | held-out Acc@3 | "
                               "held-out Acc@3 - Acc@1 | training Acc@1")
    assert lines[2] == ("| start policy | - | 0.45 | 0.5 | 0.52 | 0.07 | 0.27 | 0.27 | 0.3 | 0.03 | 0 | 0 | 0 | 0 |")
    # leap: held-out Acc@1 mean .55 ± .0707, gain .2 ± 0; suite only on seed 0
    assert lines[3] == ("| leap | 0,1 | 0.55 ± 0.071 | 0.65 ± 0.071 | 0.75 ± 0.071 | 0.2 ± 0 | 0.35 ± 0.071 | "
                        "0.35 ± 0.071 | 0.45 ± 0.071 | 0.1 ± 0.14 | 0.1 | 0.1 | 0.2 | 0.1 |")
    assert lines[4].startswith("| grpo | 0 | 0.55 | 0.56 | 0.57 | 0.02 |")
    assert "held-out 256, training 256, hand-written suite 86" in page
    assert "No final evaluations" in es.final_accuracy_markdown({}, None)


def test_dcp_shares_per_step_and_over_seeds():
    from leap_jax.experiment import sections as es
    rows = _run([0.1, 0.2, 0.3], groups=(2, 1, 1))
    rows[2].update({"dcp/easy_groups": 0, "dcp/debug_groups": 4, "dcp/hopeless_groups": 0})
    d = es.dcp_shares(rows)
    assert d["pruned as solved"] == pytest.approx((0.5 + 0.0) / 2)
    assert d["given turns"] == pytest.approx((0.25 + 1.0) / 2)
    assert d["pruned as hopeless"] == pytest.approx(0.125)
    assert d["turns/pass"] == 1.5 and d["rows turn 2"] == 8.0
    page = es.dcp_markdown({"leap": {0: rows, 1: _run([0.1, 0.2], groups=(4, 0, 0))}})
    # solved: seed 0 (.5 + 0)/2, seed 1 all four; hopeless .125 and 0; given turns (.25 + 1)/2 and 0
    assert "| leap | 0,1 | 0.625 ± 0.53 | 0.0625 ± 0.088 | 0.312 ± 0.44 |" in page


def test_experiment_page_holds_every_section_and_the_seed_plot(tmp_path):
    from leap_jax.experiment import plots as ep
    from leap_jax.experiment import sections as es
    runs = {"multiturn": {0: _run([0.2, 0.3, 0.4])}, "leap": {0: _run([0.2, 0.4, 0.4])}}
    page = es.experiment_page(runs, "heldout/acc@1", {}, None)
    for heading in ("# LEAP against the baselines", "## Time, steps and generated tokens to the target",
                    "## Final accuracy with turns of real feedback", "## How DCP spent the turns"):
        assert heading in page
    x, y = ep.mean_curve([[(0, 0.0), (10, 1.0)], [(0, 1.0), (5, 1.0), (20, 1.0)]], grid_points=3)
    assert x.tolist() == [0.0, 5.0, 10.0] and y.tolist() == [0.5, 0.75, 1.0]
    assert ep.seed_curves_plot(runs, "heldout/acc@1", tmp_path / "p.png").stat().st_size > 1000


def test_experiment_page_compares_the_named_pair():
    """--compare grpo_lag/grpo: the target is grpo's best, the ratio grpo's time over grpo_lag's."""
    from leap_jax.experiment import sections as es
    m = "heldout/acc@1"
    runs = {"grpo": {0: _run([0.2, 0.3, 0.4, 0.5], step_s=12.0)},  # 0.5 (its best) at step 3: 36 s
            "grpo_lag": {0: _run([0.2, 0.3, 0.5], step_s=10.0)}}    # 0.5 at step 2: 20 s
    page = es.experiment_page(runs, m, {}, None, compare=("grpo_lag", "grpo"))
    assert "Target per seed: the best `heldout/acc@1` of the `grpo` run of that seed." in page
    assert "**Headline: `grpo` time to target / `grpo_lag` time to target = 1.8**" in page
    assert "> 1 means `grpo_lag` reached the baseline's best accuracy sooner" in page
    assert "- training seconds to target, `grpo` / `grpo_lag`: **1.8** over 1 seed(s)" in page
    assert "- steps to target, `grpo` / `grpo_lag`: **1.5** over 1 seed(s)" in page
    # the pair's arm leads every table
    assert page.index("| grpo_lag | 0 |") < page.index("| grpo | 0 |")
    # without compare the default pair (leap/multiturn) is absent: no target, no ratio
    assert "No `multiturn` run: no target, no headline ratio." in es.experiment_page(runs, m, {}, None)


def test_lower_targets_compare_below_the_baselines_best():
    """At best - d the crossing moves: each row's ratio and who got there first, per seed."""
    from leap_jax.experiment import sections as es
    m = "heldout/acc@1"
    runs = {"multiturn": {0: _run([0.2, 0.3, 0.4, 0.5], step_s=20.0),    # 0.4 at 40 s, 0.5 at 60 s
                          1: _run([0.2, 0.3, 0.3, 0.4], step_s=20.0)},   # 0.3 at 20 s, 0.4 at 60 s
            "leap": {0: _run([0.2, 0.4, 0.4, 0.4], step_s=10.0),         # 0.4 at 10 s, never 0.5
                     1: _run([0.2, 0.2, 0.4], step_s=10.0)}}             # 0.4 at 20 s (0.3 too)
    table = es.lower_targets_markdown(runs, m, "multiturn", "leap", [0.1])
    rows = [line for line in table.splitlines() if line.startswith("| 0")]
    # d = 0: seed 0 leap never reaches 0.5 (no ratio), seed 1 60 / 20 = 3
    assert rows[0].startswith("| 0 | 3 | 1.5 | s0: 0.5, 60 / - s, 3 / - steps; s1: 0.4, 60 / 20 s, 3 / 2 steps |")
    assert rows[0].endswith("| 1 of 2 |")
    # d = 0.1: seed 0 40 / 10 = 4, seed 1 20 / 20 = 1 (a tie is not first)
    assert rows[1].startswith("| 0.1 | 2.5 ± 2.1 | 1.25 ± 1.1 | s0: 0.4, 40 / 10 s, 2 / 1 steps; s1: 0.3, 20 / 20 s, 1 / 2 steps |")
    assert rows[1].endswith("| 1 of 2 |")
