"""The headline comparison of an experiment: per arm, over seeds, accuracy at the end and the
training time each arm needs to reach a target accuracy (LEAP's claim: the baseline's accuracy in
less wall-clock).

Runs are run directories named `<arm>-s<seed>` (what `leap_jax.experiment` writes). Accuracy comes
from the periodic evaluation records (`eval.interval`): `train_eval/acc@t` on the training tasks,
`heldout/acc@t` on the held-out ones, greedy and deterministic, so they move only when the policy
does. Time is `time/train_total`: the run's net training seconds (JAX compilation and evaluation
left out), summed across resumes.
"""
from __future__ import annotations

import math
import re
import statistics
from pathlib import Path
from typing import Any, Sequence

from leap_jax.train.metrics import read_metrics

RUN_NAME = re.compile(r"^(?P<arm>.+)-s(?P<seed>\d+)$")
DEFAULT_METRIC = "train_eval/acc@3"


def parse_run_name(name: str) -> tuple[str, int]:
    """('leap', 0) from 'leap-s0'; a ValueError naming the expected form otherwise."""
    m = RUN_NAME.match(name)
    if not m:
        raise ValueError(f"run directory name {name!r}: expected <arm>-s<seed>, e.g. leap-s0")
    return m.group("arm"), int(m.group("seed"))


def train_clock(rows: Sequence[dict[str, Any]]) -> list[float]:
    """Training seconds at the end of each record: time/train_total where logged, else the running
    sum of time/step (older runs)."""
    out, acc = [], 0.0
    for r in rows:
        if r.get("time/train_total") is not None:
            acc = float(r["time/train_total"])
        elif r.get("time/step") is not None:
            acc += float(r["time/step"])
        out.append(acc)
    return out


def step_records(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The training-step records (an evaluation-only record before the first step has step -1)."""
    return [r for r in rows if int(r.get("step", 0)) >= 0]


def eval_points(rows: Sequence[dict[str, Any]], metric: str) -> list[tuple[float, float]]:
    """(training seconds, value) of every record that has `metric`, in order."""
    return [(t, float(r[metric])) for t, r in zip(train_clock(rows), rows) if r.get(metric) is not None]


def best_value(rows: Sequence[dict[str, Any]], metric: str) -> float | None:
    pts = eval_points(rows, metric)
    return max(v for _, v in pts) if pts else None


def final_value(rows: Sequence[dict[str, Any]], metric: str) -> float | None:
    pts = eval_points(rows, metric)
    return pts[-1][1] if pts else None


def time_to_target(rows: Sequence[dict[str, Any]], metric: str, target: float | None) -> float | None:
    """Training seconds at the first evaluation whose `metric` is >= target; None if never."""
    if target is None:
        return None
    for t, v in eval_points(rows, metric):
        if v >= target - 1e-12:
            return t
    return None


def _mean_std(xs: Sequence[float | None]) -> tuple[float | None, float | None, int]:
    vals = [float(x) for x in xs if x is not None and math.isfinite(float(x))]
    if not vals:
        return None, None, 0
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0), len(vals)


def _fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.{digits}g}"


def _fmt_ms(xs: Sequence[float | None], digits: int = 3) -> str:
    m, s, n = _mean_std(xs)
    if m is None:
        return "n/a"
    return _fmt(m, digits) if n == 1 else f"{_fmt(m, digits)} ± {_fmt(s, 2)}"


def _step_mean(rows: Sequence[dict[str, Any]], key: str) -> float | None:
    vals = [float(r[key]) for r in step_records(rows) if r.get(key) is not None]
    return statistics.fmean(vals) if vals else None


def load_experiment(run_dirs: Sequence[str | Path]) -> dict[str, dict[int, list[dict[str, Any]]]]:
    """{arm: {seed: metric records}} of the named run directories (each named <arm>-s<seed>)."""
    out: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for d in run_dirs:
        p = Path(d)
        arm, seed = parse_run_name(p.name)
        rows = read_metrics(p)
        if rows:
            out.setdefault(arm, {})[seed] = rows
    return out


def headline(runs: dict[str, dict[int, list[dict[str, Any]]]], metric: str = DEFAULT_METRIC,
             baseline: str = "multiturn", arm: str = "leap") -> dict[str, Any]:
    """Per seed: the target (the best `metric` the baseline reached), each arm's time to it, and
    the ratio baseline time / arm time (> 1: the arm got there faster)."""
    seeds = sorted(runs.get(baseline, {}))
    per_seed: dict[int, dict[str, Any]] = {}
    for s in seeds:
        target = best_value(runs[baseline][s], metric)
        times = {a: time_to_target(by_seed[s], metric, target) for a, by_seed in runs.items() if s in by_seed}
        tb, ta = times.get(baseline), times.get(arm)
        ratio = tb / ta if tb is not None and ta not in (None, 0.0) else None
        note = None
        if tb == 0.0:
            note = (f"`{baseline}` never beat its first evaluation, so every arm starts at the target "
                    "(no time to compare)")
        elif ta is None:
            note = f"`{arm}` never reached the target within its budget"
        per_seed[s] = {"target": target, "times": times, "ratio": ratio, "note": note}
    ratios = [v["ratio"] for v in per_seed.values()]
    m, sd, n = _mean_std(ratios)
    return {"metric": metric, "baseline": baseline, "arm": arm, "per_seed": per_seed,
            "ratio_mean": m, "ratio_std": sd, "ratio_n": n}


def experiment_markdown(runs: dict[str, dict[int, list[dict[str, Any]]]], metric: str = DEFAULT_METRIC,
                        baseline: str = "multiturn", arm: str = "leap", turns: int = 3) -> str:
    """The experiment's Markdown page: the per-arm table and the headline ratio, with seeds."""
    h = headline(runs, metric, baseline, arm)
    targets = {s: v["target"] for s, v in h["per_seed"].items()}
    head = (["arm", "seeds"] + [f"train Acc@{t}" for t in range(1, turns + 1)]
            + [f"held-out Acc@{t}" for t in range(1, turns + 1)]
            + ["steps", "train s", "s/step gen", "s/step eval", "s/step update", "turns/pass",
               "activated groups", "tokens gen/step", f"s to target ({metric})"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for a in sorted(runs, key=lambda a: (a != arm, a != baseline, a)):
        by_seed = runs[a]
        seeds = sorted(by_seed)
        rows_all = [by_seed[s] for s in seeds]
        cells = [a, ",".join(map(str, seeds))]
        cells += [_fmt_ms([final_value(r, f"train_eval/acc@{t}") for r in rows_all]) for t in range(1, turns + 1)]
        cells += [_fmt_ms([final_value(r, f"heldout/acc@{t}") for r in rows_all]) for t in range(1, turns + 1)]
        cells.append(_fmt_ms([float(len(step_records(r))) for r in rows_all]))
        cells.append(_fmt_ms([train_clock(r)[-1] if r else None for r in rows_all], 4))
        for k in ("time/generate", "time/evaluate", "time/update", "turns_per_pass", "dcp/activated_groups_frac",
                  "tokens/generated"):
            cells.append(_fmt_ms([_step_mean(r, k) for r in rows_all]))
        ttt = []
        for s in seeds:
            t = time_to_target(by_seed[s], metric, targets.get(s))
            ttt.append(f"s{s}: {_fmt(t, 4) if t is not None else 'not reached'}")
        cells.append("; ".join(ttt) if targets else "no baseline run")
        lines.append("| " + " | ".join(cells) + " |")
    out = ["# LEAP against the baselines", "",
           f"Accuracy: the last periodic evaluation (greedy, {turns} turns) on the training tasks and the "
           "held-out tasks, mean ± std over seeds. Times are net training seconds (JAX compilation and "
           "the periodic evaluations left out); s/step columns are means over steps.", "",
           *lines, ""]
    if h["per_seed"]:
        out.append(f"Target per seed: the best `{metric}` the `{baseline}` arm reached: "
                   + ", ".join(f"s{s}: {_fmt(v['target'])}" for s, v in h["per_seed"].items()) + ".")
        out.append("")
        ratios = ", ".join(f"s{s}: {_fmt(v['ratio'])}" for s, v in h["per_seed"].items())
        out.append(f"**Headline: `{baseline}` time to target / `{arm}` time to target = "
                   f"{_fmt_ms([v['ratio'] for v in h['per_seed'].values()])}** (per seed: {ratios}; "
                   "> 1 means LEAP reached the baseline's best accuracy sooner).")
        notes = [f"s{s}: {v['note']}" for s, v in h["per_seed"].items() if v["note"]]
        if notes:
            out += ["", "Where the ratio is n/a: " + "; ".join(notes) + "."]
    else:
        out.append(f"No `{baseline}` run: no target, no headline ratio.")
    return "\n".join(out) + "\n"
