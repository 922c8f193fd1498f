"""Sections of the experiment page beyond the headline ratio: the per-seed targets (time, steps and
generated tokens to the target, per arm), the final accuracy with turns of real feedback (does an
arm solve more on the first try, and does feedback still add to it?) and how DCP spent each arm's
turns.

Inputs are what the runs wrote: metric records (`metrics.jsonl`), and each run's `final_eval.json`
(`eval.final_turns`: the finished policy on held-out, training and suite tasks, greedy, every failing
row debugged) plus the starting policy's (the experiment's OUT/start_eval/final_eval.json).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any
from collections.abc import Sequence

from leap_jax.experiment.report import (_fmt, _fmt_ms, _mean_std, best_value, experiment_markdown, headline,
                                        parse_run_name, step_records)
from leap_jax.experiment.claims import paired_tests_markdown, target_curve_markdown
from leap_jax.train.algorithms import HEADLINE_ARM, HEADLINE_BASELINE
from leap_jax.train.metrics import FINAL_EVAL_FILE

FINAL_SPLITS = (("heldout", "held-out"), ("train_eval", "training"), ("suite", "hand-written suite"))

Runs = dict[str, dict[int, list[dict[str, Any]]]]
Finals = dict[str, dict[int, dict[str, Any]]]


def read_final_eval(run_dir: str | Path) -> dict[str, Any] | None:
    """A run's final_eval.json, or None when it has none (or it cannot be read)."""
    path = Path(run_dir) / FINAL_EVAL_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("splits"), dict) else None


def load_final_evals(run_dirs: Sequence[str | Path]) -> Finals:
    """{arm: {seed: final_eval}} of the named run directories (<arm>-s<seed>) that have one."""
    out: Finals = {}
    for d in run_dirs:
        fin = read_final_eval(d)
        if fin is not None:
            arm, seed = parse_run_name(Path(d).name)
            out.setdefault(arm, {})[seed] = fin
    return out


def _split_acc(fin: dict[str, Any], split: str, t: int) -> float | None:
    v = fin.get("splits", {}).get(split, {}).get(f"acc@{t}")
    return None if v is None else float(v)


def _gain(fin: dict[str, Any], split: str, turns: int) -> float | None:
    """Acc@turns - Acc@1: what the feedback turns add."""
    a1, at = _split_acc(fin, split, 1), _split_acc(fin, split, turns)
    return None if a1 is None or at is None else at - a1


def final_accuracy_markdown(finals: Finals, start: dict[str, Any] | None = None, arm_order: Sequence[str] = ()) -> str:
    """Per arm (mean ± std over seeds) and for the starting policy: Acc@1..T and Acc@T - Acc@1 on
    each split the final evaluations cover."""
    evals = [f for by_seed in finals.values() for f in by_seed.values()] + ([start] if start else [])
    if not evals:
        return "No final evaluations (eval.final_turns) were found.\n"
    turns = max(int(f.get("turns", 1)) for f in evals)
    splits = [(s, name) for s, name in FINAL_SPLITS if any(s in f.get("splits", {}) for f in evals)]
    head = ["policy", "seeds"]
    for _s, name in splits:
        head += [f"{name} Acc@{t}" for t in range(1, turns + 1)] + [f"{name} Acc@{turns} - Acc@1"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def row(label: str, seeds: str, fins: Sequence[dict[str, Any]]) -> str:
        cells = [label, seeds]
        for s, _ in splits:
            cells += [_fmt_ms([_split_acc(f, s, t) for f in fins]) for t in range(1, turns + 1)]
            cells.append(_fmt_ms([_gain(f, s, turns) for f in fins]))
        return "| " + " | ".join(cells) + " |"

    if start:
        lines.append(row("start policy", "-", [start]))
    order = [a for a in arm_order if a in finals] + sorted(a for a in finals if a not in arm_order)
    for a in order:
        seeds = sorted(finals[a])
        lines.append(row(a, ",".join(map(str, seeds)), [finals[a][s] for s in seeds]))
    counts = {s: max(int(f.get("splits", {}).get(s, {}).get("tasks", 0)) for f in evals) for s, _ in splits}
    note = ("Greedy, one sample per task, every failing row given the feedback of the environment for up to "
            f"{turns} turns; tasks per split: " + ", ".join(f"{n} {counts[s]}" for s, n in splits) + ".")
    return "\n".join(lines) + "\n\n" + note + "\n"


DCP_COLUMNS = (("pruned as solved", "dcp/easy_groups"), ("pruned as hopeless", "dcp/hopeless_groups"),
               ("given turns", "dcp/debug_groups"))


def dcp_shares(rows: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """Mean over a run's steps of each DCP outcome's share of the step's groups, turns per pass,
    activated groups and rows generated per turn (turn 2 and 3 are the debugging budget)."""
    steps = step_records(rows)
    out: dict[str, float | None] = {}
    for name, key in DCP_COLUMNS:
        vals = [float(r[key]) / float(r["rollout/groups"]) for r in steps
                if r.get(key) is not None and r.get("rollout/groups")]
        out[name] = sum(vals) / len(vals) if vals else None
    for name, key in (("turns/pass", "turns_per_pass"), ("activated groups", "dcp/activated_groups_frac"),
                      ("rows turn 1", "rollout/gen_rows_turn1"), ("rows turn 2", "rollout/gen_rows_turn2"),
                      ("rows turn 3", "rollout/gen_rows_turn3")):
        vals = [float(r[key]) for r in steps if r.get(key) is not None and math.isfinite(float(r[key]))]
        out[name] = sum(vals) / len(vals) if vals else None
    return out


def dcp_markdown(runs: Runs, arm_order: Sequence[str] = ()) -> str:
    """Per arm, mean ± std over seeds of dcp_shares: where DCP sent the step's prompts."""
    cols = [n for n, _ in DCP_COLUMNS] + ["turns/pass", "activated groups", "rows turn 1", "rows turn 2",
                                          "rows turn 3"]
    lines = ["| arm | seeds | " + " | ".join(cols) + " |", "|" + "---|" * (len(cols) + 2)]
    order = [a for a in arm_order if a in runs] + sorted(a for a in runs if a not in arm_order)
    for a in order:
        per_seed = [dcp_shares(runs[a][s]) for s in sorted(runs[a])]
        cells = [a, ",".join(map(str, sorted(runs[a])))] + [_fmt_ms([d[c] for d in per_seed]) for c in cols]
        lines.append("| " + " | ".join(cells) + " |")
    return ("\n".join(lines) + "\n\nShares of each step's prompt groups after turn 1, averaged over steps: "
            "solved (pruned, single-turn), hopeless (pruned) or given debugging turns; rows generated per "
            "turn are per step.\n")


def targets_markdown(h: dict[str, Any], runs: Runs, arm_order: Sequence[str] = ()) -> str:
    """Per seed and arm: the target, the seconds, steps and generated tokens to reach it, and the
    arm's best; then each arm's mean ± std over the seeds where it got there (with the count)."""
    metric, per_seed = h["metric"], h["per_seed"]
    arms = [a for a in arm_order if a in runs] + sorted(a for a in runs if a not in arm_order)
    lines = ["| seed | target | arm | s to target | steps to target | tokens to target | best | steps run |",
             "|---|---|---|---|---|---|---|---|"]
    for s, v in per_seed.items():
        for a in arms:
            if s not in runs[a]:
                continue
            t, st, tok = v["times"].get(a), v["steps"].get(a), v["tokens"].get(a)
            lines.append(f"| {s} | {_fmt(v['target'])} | {a} | {_fmt(t, 4) if t is not None else 'not reached'} | "
                         f"{st if st is not None else 'not reached'} | {_fmt(tok, 4) if tok is not None else '-'} | "
                         f"{_fmt(best_value(runs[a][s], metric))} | {len(step_records(runs[a][s]))} |")
    for a in arms:
        reached = [s for s, v in per_seed.items() if v["times"].get(a) is not None]
        if len(per_seed) > 1:
            cells = [_fmt_ms([per_seed[s][k].get(a) for s in reached], 4) for k in ("times", "steps", "tokens")]
            lines.append(f"| mean ± std (reached {len(reached)}/{len(per_seed)}) | | {a} | " + " | ".join(cells)
                         + " | | |")
    return "\n".join(lines) + "\n"


def ratio_lines(h: dict[str, Any]) -> list[str]:
    """Baseline / arm ratios per seed and mean ± std, in seconds, steps and generated tokens."""
    base, arm = h["baseline"], h["arm"]
    out = []
    for what, key in (("training seconds", "times"), ("steps", "steps"), ("generated tokens", "tokens")):
        ratios = {}
        for s, v in h["per_seed"].items():
            b, x = v[key].get(base), v[key].get(arm)
            ratios[s] = b / x if b is not None and x not in (None, 0, 0.0) else None
        m, sd, n = _mean_std(list(ratios.values()))
        per = ", ".join(f"s{s}: {_fmt(r)}" for s, r in ratios.items())
        spread = "n/a" if m is None else (_fmt(m) if n == 1 else f"{_fmt(m)} ± {_fmt(sd, 2)}")
        out.append(f"- {what} to target, `{base}` / `{arm}`: **{spread}** over {n} seed(s) ({per})")
    return out


def _or_dash(x: float | None) -> str:
    return "-" if x is None else _fmt(x, 4)


def lower_targets_markdown(runs: Runs, metric: str, baseline: str, arm: str, offsets: Sequence[float]) -> str:
    """The headline at targets below the baseline's best: the best sits on the flat end of the curves,
    where one task more or less moves the crossing by many steps. Per offset d (0 first): each
    seed's target best - d, the seconds and steps `arm` and `baseline` took to reach it, their
    ratio baseline / arm, and on how many seeds `arm` got there first ("-": never reached it)."""
    lines = [f"| below the best | seconds, `{baseline}` / `{arm}` | steps, `{baseline}` / `{arm}` | per seed: "
             f"target, s and steps (`{baseline}` / `{arm}`) | `{arm}` first |", "|---|---|---|---|---|"]
    for d in [0.0, *offsets]:
        per_seed = {s: v for s, v in headline(runs, metric, baseline, arm, below=d)["per_seed"].items()
                    if arm in v["times"]}  # seeds both arms ran
        s_ratios: list[float | None] = []
        cells, first = [], 0
        for s, v in per_seed.items():
            tb, ta = v["times"][baseline], v["times"][arm]
            sb, sa = v["steps"][baseline], v["steps"][arm]
            s_ratios.append(sb / sa if sb is not None and sa else None)
            first += ta is not None and (tb is None or ta < tb)
            cells.append(f"s{s}: {_fmt(v['target'])}, {_or_dash(tb)} / {_or_dash(ta)} s, "
                         f"{_or_dash(sb)} / {_or_dash(sa)} steps")
        t_ratios = [v["ratio"] for v in per_seed.values()]
        lines.append(f"| {_fmt(d)} | {_fmt_ms(t_ratios)} | {_fmt_ms(s_ratios)} | {'; '.join(cells)} | "
                     f"{first} of {len(per_seed)} |")
    return "\n".join(lines) + "\n"


def curve_metrics(runs: Runs, metric: str) -> list[str]:
    """`metric`, then the same split's accuracy after feedback turns when the periodic evaluation
    logged it (eval.feedback_interval): multi-turn RL's reward is "solved by turn 3", so the
    comparison is given on both."""
    split, _, _ = metric.partition("/acc@")
    logged = {k for by_seed in runs.values() for rows in by_seed.values() for r in rows for k in r
              if k.startswith(f"{split}/acc@")}
    deepest = max(logged, key=lambda k: int(k.rsplit("@", 1)[1]), default=None)
    return [metric] + ([deepest] if deepest and deepest != metric else [])


def experiment_page(runs: Runs, metric: str, finals: Finals | None = None, start_final: dict[str, Any] | None = None,
                    turns: int = 3, compare: tuple[str, str] | None = None, lower_targets: Sequence[float] = ()) -> str:
    """The whole experiment page: experiment_report's table, learning and headline, the ratio as a
    curve over target levels against every other arm, the paired tests of final accuracies, then the
    per-seed targets with the ratios in seconds, steps and tokens (and at `lower_targets` below
    the baseline's best), the final accuracy with feedback, and DCP's shares. `compare` =
    (arm, baseline): the headline's pair (default leap, multiturn)."""
    arm, baseline = compare or (HEADLINE_ARM, HEADLINE_BASELINE)
    order = (arm, baseline)
    others = [baseline] + sorted(a for a in runs if a not in order)
    page = [experiment_markdown(runs, metric, baseline, arm, turns=turns)]
    for m in curve_metrics(runs, metric):
        page += [f"## Time to target as a curve over target levels ({m})", ""]
        for other in others:
            page += [f"### `{other}` / `{arm}`", "", target_curve_markdown(runs, m, other, arm)]
    page += ["## Paired per-task tests of the final accuracies", "",
             paired_tests_markdown(finals or {}, arm, [o for o in others if o in (finals or {})])]
    h = headline(runs, metric, baseline, arm)
    if h["per_seed"]:
        page += [f"## Time, steps and generated tokens to the target ({metric})", "",
                 f"Target per seed: the best `{metric}` of the `{baseline}` run of that seed. Steps and "
                 "tokens do not depend on how busy the machine was; seconds are net training time.", "",
                 targets_markdown(h, runs, order), *ratio_lines(h), ""]
        if lower_targets:
            page += [f"### Lower targets: the best `{metric}` of `{baseline}` minus a margin", "",
                     lower_targets_markdown(runs, metric, baseline, arm, lower_targets)]
    page += ["## Final accuracy with turns of real feedback", "",
             final_accuracy_markdown(finals or {}, start_final, order),
             "## How DCP spent the turns (per step, mean over steps; mean ± std over seeds)", "",
             dcp_markdown(runs, order)]
    return "\n".join(page)
