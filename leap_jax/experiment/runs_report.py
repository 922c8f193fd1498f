"""`python -m leap_jax.experiment.runs_report RUN_DIR [RUN_DIR ...] [--out DIR]`: plots and a summary table of runs.

Reads each run's metrics.jsonl (and config.yaml for its algorithm) and writes, with matplotlib's
Agg backend: accuracy (Acc@t for every t) against wall-clock and against step, one panel per
metric with the runs (arms) side by side; turn-budget usage (rows generated per turn, and the share
of turn-2 generations DCP skipped); the periodic evaluations (`eval.interval`: training and held-out
tasks) against training time when runs logged them; and summary.md, a Markdown table of every run.
Wall-clock is training time: `time/train_total` (JAX compilation left out) where logged.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np
import yaml

from leap_jax.experiment.report import step_records, train_clock
from leap_jax.train.metrics import read_metrics

EVAL_PREFIXES = (("train_eval", "training tasks"), ("heldout", "held-out tasks"))


def _label(run_dir: Path) -> str:
    cfg_path = run_dir / "config.yaml"
    algo = ""
    if cfg_path.is_file():
        try:
            algo = (yaml.safe_load(cfg_path.read_text()) or {}).get("algorithm", {}).get("name", "")
        except yaml.YAMLError:
            algo = ""
    return f"{run_dir.name} ({algo})" if algo else run_dir.name


def _series(rows: list[dict[str, Any]], key: str) -> np.ndarray:
    return np.asarray([np.nan if r.get(key) is None else float(r[key]) for r in rows], float)


def max_turn(rows: Sequence[dict[str, Any]], prefix: str = "", default: int = 1) -> int:
    """The largest t of any `<prefix>acc@t` key in the records (`default` when there is none)."""
    head = prefix + "acc@"
    ts = [int(k[len(head):]) for r in rows for k in r if k.startswith(head) and k[len(head):].isdigit()]
    return max(ts) if ts else default


def load_runs(run_dirs: Sequence[str | Path]) -> list[tuple[str, Path, list[dict[str, Any]]]]:
    runs = []
    for d in run_dirs:
        p = Path(d)
        if not p.is_dir():
            raise FileNotFoundError(f"run directory {str(p)!r} does not exist")
        rows = read_metrics(p)
        if not rows:
            raise FileNotFoundError(f"run directory {str(p)!r} has no metrics.jsonl records")
        runs.append((_label(p), p, rows))
    return runs


def summary_table(runs: list[tuple[str, Path, list[dict[str, Any]]]], last_k: int = 5) -> str:
    """Markdown: per run, accuracies averaged over the last `last_k` steps, time and DCP columns."""
    T = max(max_turn(rows) for _, _, rows in runs)
    head = (["run", "steps", "train s"] + [f"Acc@{t}" for t in range(1, T + 1)]
            + ["turns/pass", "fast_1", "activated groups", "turn-2 skipped", "s/step gen", "s/step eval",
               "s/step update", "tokens gen", "env evals", "scripted"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def f(x: float) -> str:
        return "n/a" if x is None or not np.isfinite(x) else f"{x:.3g}"

    for label, _, all_rows in runs:
        rows = step_records(all_rows)
        tail = rows[-last_k:]

        def mean(k: str, tail: list[dict[str, Any]] = tail) -> float:
            v = _series(tail, k)
            return float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")

        def total(k: str, rows: list[dict[str, Any]] = rows) -> float:
            return float(np.nansum(_series(rows, k)))

        cells = [label, str(len(rows)), f(train_clock(all_rows)[-1] if all_rows else float("nan"))]
        cells += [f(mean(f"acc@{t}")) for t in range(1, T + 1)]
        cells += [f(mean("turns_per_pass")), f(mean("fast_1")), f(mean("dcp/activated_groups_frac")),
                  f(mean("dcp/skipped_turn2_frac")), f(mean("time/generate")), f(mean("time/evaluate")),
                  f(mean("time/update")), f(total("tokens/generated")), f(total("env/evaluations")),
                  f(mean("rollout/scripted_frac"))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + f"\n\nAccuracy and rate columns: mean over the last {last_k} steps; totals over the run.\n"


def write_report(run_dirs: Sequence[str | Path], out_dir: str | Path) -> list[Path]:
    """Write accuracy_vs_time.png, accuracy_vs_step.png, turn_budget.png and summary.md to out_dir."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = load_runs(run_dirs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    T = max(max_turn(rows) for _, _, rows in runs)
    written = []
    for xname, fname in (("training time (s)", "accuracy_vs_time.png"), ("step", "accuracy_vs_step.png")):
        fig, axes = plt.subplots(1, T, figsize=(4.2 * T, 3.4), squeeze=False)
        for t in range(1, T + 1):
            ax = axes[0, t - 1]
            for label, _, all_rows in runs:
                rows = step_records(all_rows)
                x = (np.asarray(train_clock(rows)) if xname.startswith("training")
                     else _series(rows, "step"))
                ax.plot(x, _series(rows, f"acc@{t}"), marker="o", ms=3, label=label)
            ax.set_title(f"Acc@{t}")
            ax.set_xlabel(xname)
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
        axes[0, 0].set_ylabel("pass rate")
        axes[0, -1].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / fname, dpi=110)
        plt.close(fig)
        written.append(out / fname)

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    width = 0.8 / max(len(runs), 1)
    for i, (label, _, all_rows) in enumerate(runs):
        rows = step_records(all_rows)
        per_turn = []
        for t in range(1, T + 1):
            v = _series(rows, f"rollout/gen_rows_turn{t}")
            per_turn.append(float(np.nanmean(v)) if np.isfinite(v).any() else 0.0)
        axes[0].bar(np.arange(1, T + 1) + (i - (len(runs) - 1) / 2) * width, per_turn, width, label=label)
        axes[1].plot(_series(rows, "step"), _series(rows, "dcp/skipped_turn2_frac"), marker="o", ms=3, label=label)
    axes[0].set_title("turn budget: rows generated per turn (mean per step)")
    axes[0].set_xlabel("turn")
    axes[0].set_xticks(range(1, T + 1))
    axes[1].set_title("share of turn-2 generations skipped by DCP")
    axes[1].set_xlabel("step")
    axes[1].set_ylim(-0.02, 1.02)
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "turn_budget.png", dpi=110)
    plt.close(fig)
    written.append(out / "turn_budget.png")

    if any(r.get(f"{p}/acc@1") is not None for _, _, rows in runs for r in rows for p, _ in EVAL_PREFIXES):
        written.append(_eval_plot(runs, out / "eval_accuracy_vs_time.png", plt))

    (out / "summary.md").write_text("# LEAP-JAX run summary\n\n" + summary_table(runs))
    written.append(out / "summary.md")
    return written


def _eval_plot(runs: list[tuple[str, Path, list[dict[str, Any]]]], path: Path, plt: Any) -> Path:
    """Periodic-evaluation Acc@t (rows: training / held-out tasks; columns: t) against training time."""
    T = max(max_turn(rows, f"{p}/") for _, _, rows in runs for p, _ in EVAL_PREFIXES)
    fig, axes = plt.subplots(len(EVAL_PREFIXES), T, figsize=(4.2 * T, 3.2 * len(EVAL_PREFIXES)), squeeze=False)
    for i, (prefix, title) in enumerate(EVAL_PREFIXES):
        for t in range(1, T + 1):
            ax = axes[i, t - 1]
            for label, _, rows in runs:
                clock = train_clock(rows)
                pts = [(c, r[f"{prefix}/acc@{t}"]) for c, r in zip(clock, rows, strict=False) if r.get(f"{prefix}/acc@{t}") is not None]
                if pts:
                    ax.plot(*zip(*pts, strict=False), marker="o", ms=3, label=label)
            ax.set_title(f"{title}: Acc@{t}")
            ax.set_xlabel("training time (s)")
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
        axes[i, 0].set_ylabel("pass rate (greedy)")
    labelled = [ax for ax in axes.ravel() if ax.get_legend_handles_labels()[0]]
    if labelled:  # e.g. no training-task evaluations: the top row is empty
        labelled[-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m leap_jax.experiment.runs_report", description=__doc__.splitlines()[0])
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--out", help="output folder (default: RUN_DIR/report for one run, ./report for several)")
    args = p.parse_args(argv)
    out = args.out or (str(Path(args.run_dirs[0]) / "report") if len(args.run_dirs) == 1 else "report")
    try:
        paths = write_report(args.run_dirs, out)
    except FileNotFoundError as e:
        print(f"report error: {e}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    print((Path(out) / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
