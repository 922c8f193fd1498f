"""The page's sections a skeptic reads first: the time-to-target ratio as a curve over target levels
(with intervals over seeds) and the paired per-task tests of the final accuracies, for the headline
arm against every other arm, each stated the same way.

The numbers come from leap_jax.experiment.stats; this module only lays them out.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from leap_jax.experiment.report import _fmt, headline
from leap_jax.experiment.stats import (GAIN_FRACTIONS, MEASURES, PLATEAU_LAST, paired_test, pooled_paired_test,
                                       ratio_summary, target_curve)

Runs = dict[str, dict[int, list[dict[str, Any]]]]
Finals = dict[str, dict[int, dict[str, Any]]]


def _ratio_cell(summary: dict[str, Any], seeds: int) -> str:
    """'1.67 (3/3; bootstrap 1.31-2.09; t 0.93-2.98)': geometric mean, seeds with a ratio, intervals."""
    if summary["geomean"] is None:
        return f"n/a (0/{seeds})"
    parts = [f"{summary['n']}/{seeds}"]
    if summary["bootstrap"]:
        parts.append("bootstrap {}-{}".format(*(_fmt(x) for x in summary["bootstrap"])))
    if summary["t"]:
        parts.append("t {}-{}".format(*(_fmt(x) for x in summary["t"])))
    return f"{_fmt(summary['geomean'])} ({'; '.join(parts)})"


def _best_target_row(runs: Runs, metric: str, baseline: str, arm: str) -> dict[str, Any]:
    """The same summaries at the baseline's best evaluation (the earlier pages' target)."""
    keys = {"seconds": "times", "steps": "steps", "tokens": "tokens"}
    per_seed = headline(runs, metric, baseline, arm)["per_seed"]
    out: dict[str, Any] = {}
    for name, _ in MEASURES:
        ratios = []
        for v in per_seed.values():
            b, a = v[keys[name]].get(baseline), v[keys[name]].get(arm)
            ratios.append(b / a if b is not None and a else None)
        out[name] = ratio_summary(ratios)
    return out


def target_curve_markdown(runs: Runs, metric: str, baseline: str, arm: str,
                          fractions: Sequence[float] = GAIN_FRACTIONS) -> str:
    """One row per target level: `baseline` / `arm` time to it, in seconds, steps and tokens."""
    seeds = len(set(runs.get(baseline, {})) & set(runs.get(arm, {})))
    if not seeds:
        return f"No seed has both `{arm}` and `{baseline}`: no curve.\n"
    curve = target_curve(runs, metric, baseline, arm, fractions)
    lines = [f"| target | per seed | seconds, `{baseline}` / `{arm}` | steps | generated tokens |",
             "|---|---|---|---|---|"]
    for row in curve:
        per = ", ".join(f"s{s}: {_fmt(v['target'])}" for s, v in row["per_seed"].items())
        lines.append(f"| {row['fraction']:.0%} of the gain | {per} | "
                     + " | ".join(_ratio_cell(row[name], seeds) for name, _ in MEASURES) + " |")
    best = _best_target_row(runs, metric, baseline, arm)
    lines.append(f"| `{baseline}`'s best (a maximum of noisy evaluations) | | "
                 + " | ".join(_ratio_cell(best[name], seeds) for name, _ in MEASURES) + " |")
    return ("\n".join(lines) + "\n\n"
            f"Target at f of the gain: the `{baseline}` run's start + f x (its plateau - start), the plateau "
            f"being the mean of its last {PLATEAU_LAST} evaluations of `{metric}`. Each cell: the geometric "
            "mean over seeds of the ratio (> 1: "
            f"`{arm}` got there first), how many seeds both arms reached it, a percentile bootstrap over seeds "
            "(10,000 draws, seed 0) and the Student-t interval of the mean log ratio, both 95%. With three seeds "
            "the bootstrap cannot leave the range of the three ratios and understates the uncertainty; the t "
            "interval is the one to quote.\n")


def paired_tests_markdown(finals: Finals, arm: str, others: Sequence[str], split: str = "heldout",
                          turns: Sequence[int] = (1, 3)) -> str:
    """Per other arm and Acc@t: McNemar on each seed's tasks and pooled over seeds."""
    lines = [f"| `{arm}` vs | Acc@ | seed | `{arm}` | other | only `{arm}` | only other | p (exact McNemar) |",
             "|---|---|---|---|---|---|---|---|"]
    for other in others:
        seeds = sorted(set(finals.get(arm, {})) & set(finals.get(other, {})))
        for t in turns:
            tests = []
            for s in seeds:
                try:
                    r = paired_test(finals[arm][s], finals[other][s], split, t)
                except ValueError:
                    continue  # an evaluation without per-task records (or of fewer turns)
                tests.append(r)
                lines.append(f"| {other} | {t} | {s} | {r['acc_a']:.3f} | {r['acc_b']:.3f} | {r['only_a']} | "
                             f"{r['only_b']} | {r['p']:.3g} |")
            if len(tests) > 1:
                r = pooled_paired_test(tests)
                lines.append(f"| {other} | {t} | pooled ({len(tests)} seeds) | {r['acc_a']:.3f} | {r['acc_b']:.3f} | "
                             f"{r['only_a']} | {r['only_b']} | **{r['p']:.3g}** |")
    return ("\n".join(lines) + "\n\n"
            f"Final evaluation on the `{split}` tasks (greedy, one sample, Acc@t: solved within t turns of real "
            "feedback). Only tasks one policy solves and the other does not carry information; under no "
            "difference each goes either way with probability 1/2 (two-sided exact binomial). Pooled: the "
            "(seed, task) pairs of every seed together.\n")
