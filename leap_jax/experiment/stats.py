"""The statistics a skeptic asks of the comparison, in plain Python (no SciPy): targets set as
fractions of the baseline's plateau gain, the arm-to-baseline ratio over seeds with two intervals
(a seed bootstrap and a Student-t interval on log ratios), and the exact McNemar test on per-task
paired outcomes.

Why two intervals: with three seeds a bootstrap can never leave the range of the three observed
ratios, so its interval reads narrower than what three draws can support; the t interval on
log ratios is the honest width. The page prints both and says which is which.
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any

from leap_jax.experiment.report import (eval_points, start_value, steps_to_target, time_to_target,
                                        tokens_to_target)

GAIN_FRACTIONS = (0.25, 0.5, 0.75, 0.9, 1.0)
PLATEAU_LAST = 3  # the baseline's plateau: the mean of its last 3 periodic evaluations
MEASURES = (("seconds", time_to_target), ("steps", steps_to_target), ("tokens", tokens_to_target))


def plateau_value(rows: Sequence[dict[str, Any]], metric: str, last: int = PLATEAU_LAST) -> float | None:
    """The mean of the run's last `last` evaluations of `metric` (None when it has fewer): where its
    curve ended, less noisy than its best, which is a maximum over many noisy evaluations."""
    if last < 1:
        raise ValueError(f"last={last}: expected >= 1 evaluations")
    vals = [v for _, v in eval_points(rows, metric)]
    return sum(vals[-last:]) / last if len(vals) >= last else None


def gain_target(start: float, plateau: float, fraction: float) -> float:
    """start + fraction * (plateau - start): the level at `fraction` of the way to the plateau."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction={fraction}: expected a share of the gain in (0, 1]")
    return start + fraction * (plateau - start)


def geometric_mean(xs: Sequence[float]) -> float:
    """exp(mean(log x)): the mean of ratios that treats 2x and 0.5x as symmetric."""
    if not xs or any(x <= 0 for x in xs):
        raise ValueError(f"geometric_mean of {list(xs)}: expected a non-empty list of positive values")
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def bootstrap_interval(values: Sequence[float], stat: Callable[[Sequence[float]], float] = geometric_mean,
                       level: float = 0.95, draws: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap of `stat` over `values` (one per seed), resampled with replacement by a
    seeded generator, so the same inputs give the same interval."""
    if not values:
        raise ValueError("bootstrap_interval: no values")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level={level}: expected in (0, 1)")
    rng = random.Random(seed)
    n = len(values)
    stats = sorted(stat([values[rng.randrange(n)] for _ in range(n)]) for _ in range(draws))
    lo = stats[int(math.floor((1 - level) / 2 * (draws - 1)))]
    hi = stats[int(math.ceil((1 + level) / 2 * (draws - 1)))]
    return lo, hi


def student_t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom, by Simpson's rule on the density."""
    if df < 1:
        raise ValueError(f"df={df}: expected >= 1")
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def pdf(x: float) -> float:
        return c * (1 + x * x / df) ** (-(df + 1) / 2)

    a = abs(t)
    # substitute x = tan(u) so the heavy tail's integral to infinity is a finite one
    n = 2000
    u_hi = math.atan(a)
    h = u_hi / n
    total = 0.0
    for i in range(n + 1):
        u = i * h
        w = 1 if i in (0, n) else (4 if i % 2 else 2)
        total += w * pdf(math.tan(u)) / math.cos(u) ** 2
    half = total * h / 3
    return 0.5 + half if t >= 0 else 0.5 - half


def student_t_quantile(p: float, df: int) -> float:
    """The t value with P(T <= t) = p, by bisection on student_t_cdf."""
    if not 0.5 <= p < 1.0:
        raise ValueError(f"p={p}: expected an upper quantile in [0.5, 1)")
    lo, hi = 0.0, 1.0
    while student_t_cdf(hi, df) < p:
        hi *= 2
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if student_t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


def log_t_interval(ratios: Sequence[float], level: float = 0.95) -> tuple[float, float] | None:
    """The Student-t interval of the mean log ratio, mapped back by exp: the geometric mean's
    interval if the seeds' log ratios are a normal sample. None with fewer than two seeds."""
    if len(ratios) < 2:
        return None
    logs = [math.log(r) for r in ratios]
    n = len(logs)
    m = sum(logs) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / (n - 1))
    half = student_t_quantile((1 + level) / 2, n - 1) * sd / math.sqrt(n)
    return math.exp(m - half), math.exp(m + half)


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value: under no difference each discordant task (solved by one
    policy only) goes either way with probability 1/2, so min(only_a, only_b) is Binomial(n, 1/2)."""
    if only_a < 0 or only_b < 0:
        raise ValueError(f"discordant counts {only_a}, {only_b}: expected non-negative integers")
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def solved_tasks(final_eval: dict[str, Any], split: str, turns: int) -> dict[str, bool]:
    """{task: solved within `turns` turns} from a final_eval.json's per-task record (each task's
    list holds, per sample, the turn it was solved at or null; the first sample counts)."""
    per_task = final_eval.get("splits", {}).get(split, {}).get("per_task")
    if not isinstance(per_task, dict):
        raise ValueError(f"final evaluation has no per-task record for split {split!r}")
    return {t: bool(v) and v[0] is not None and int(v[0]) <= turns for t, v in per_task.items()}


def paired_test(fin_a: dict[str, Any], fin_b: dict[str, Any], split: str, turns: int) -> dict[str, Any]:
    """McNemar on the tasks both evaluations cover: accuracies, discordant counts and p."""
    a, b = solved_tasks(fin_a, split, turns), solved_tasks(fin_b, split, turns)
    common = sorted(set(a) & set(b))
    if not common:
        raise ValueError(f"split {split!r}: the two final evaluations share no task")
    only_a = sum(a[t] and not b[t] for t in common)
    only_b = sum(b[t] and not a[t] for t in common)
    return {"tasks": len(common), "acc_a": sum(a[t] for t in common) / len(common),
            "acc_b": sum(b[t] for t in common) / len(common), "only_a": only_a, "only_b": only_b,
            "p": mcnemar_exact(only_a, only_b)}


def pooled_paired_test(tests: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """McNemar over the (seed, task) pairs of several seeds' paired_test results: the discordant
    counts add up, accuracies are the means over every pair."""
    if not tests:
        raise ValueError("pooled_paired_test: no per-seed tests")
    n = sum(t["tasks"] for t in tests)
    only_a, only_b = sum(t["only_a"] for t in tests), sum(t["only_b"] for t in tests)
    return {"tasks": n, "acc_a": sum(t["acc_a"] * t["tasks"] for t in tests) / n,
            "acc_b": sum(t["acc_b"] * t["tasks"] for t in tests) / n, "only_a": only_a, "only_b": only_b,
            "p": mcnemar_exact(only_a, only_b)}


def target_curve(runs: dict[str, dict[int, list[dict[str, Any]]]], metric: str, baseline: str, arm: str,
                 fractions: Sequence[float] = GAIN_FRACTIONS) -> list[dict[str, Any]]:
    """Per fraction f: each seed's target start + f * (plateau - start) of the baseline's run, and
    per measure (seconds, steps, tokens) the ratios baseline / arm of the time to reach it (None
    where either never did), with the geometric mean and both intervals over seeds."""
    seeds = sorted(set(runs.get(baseline, {})) & set(runs.get(arm, {})))
    out = []
    for f in fractions:
        per_seed: dict[int, dict[str, Any]] = {}
        for s in seeds:
            b_rows, a_rows = runs[baseline][s], runs[arm][s]
            st, pl = start_value(b_rows, metric), plateau_value(b_rows, metric)
            if st is None or pl is None or pl <= st:
                per_seed[s] = {"target": None, **{name: None for name, _ in MEASURES}}
                continue
            target = gain_target(st, pl, f)
            cell: dict[str, Any] = {"target": target}
            for name, fn in MEASURES:
                tb, ta = fn(b_rows, metric, target), fn(a_rows, metric, target)
                cell[name] = tb / ta if tb is not None and ta else None
            per_seed[s] = cell
        summary = {name: ratio_summary([v[name] for v in per_seed.values()]) for name, _ in MEASURES}
        out.append({"fraction": f, "per_seed": per_seed, **summary})
    return out


def ratio_summary(ratios: Sequence[float | None]) -> dict[str, Any]:
    """The seeds' ratios (None: a seed where one arm never reached the target) summarised: how many
    there are, their geometric mean, and both intervals, only when every seed has a ratio (an
    interval over the seeds that got there would leave out the worst ones) and there are two or more."""
    rs = [float(r) for r in ratios if r is not None]
    full = len(rs) >= 2 and len(rs) == len(ratios)
    return {"n": len(rs), "geomean": geometric_mean(rs) if rs else None,
            "bootstrap": bootstrap_interval(rs) if full else None, "t": log_t_interval(rs) if full else None}
