"""Plots of an experiment over seeds: one accuracy metric against training time and against steps,
every seed a thin line and the mean over seeds a thick one, one colour per arm (matplotlib, Agg)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from leap_jax.experiment.report import eval_points


def _step_points(rows: list[dict[str, Any]], metric: str) -> list[tuple[float, float]]:
    """(steps done, value) of every record with `metric` (the start evaluation is at 0 steps)."""
    return [(int(r.get("step", -1)) + 1.0, float(r[metric])) for r in rows if r.get(metric) is not None]


def mean_curve(curves: list[list[tuple[float, float]]], grid_points: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """The mean of piecewise-linear curves on a common grid over the x range every curve covers."""
    curves = [c for c in curves if len(c) >= 2]
    if not curves:
        return np.zeros(0), np.zeros(0)
    hi = min(c[-1][0] for c in curves)
    lo = max(c[0][0] for c in curves)
    x = np.linspace(lo, hi, grid_points)
    ys = [np.interp(x, [p[0] for p in c], [p[1] for p in c]) for c in curves]
    return x, np.mean(ys, axis=0)


def seed_curves_plot(runs: dict[str, dict[int, list[dict[str, Any]]]], metric: str, path: str | Path) -> Path:
    """`metric` against training seconds (left) and steps (right): seeds thin, their mean thick."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for i, arm in enumerate(sorted(runs)):
        color = f"C{i}"
        for ax, points in ((axes[0], lambda rows: eval_points(rows, metric)),
                           (axes[1], lambda rows: _step_points(rows, metric))):
            curves = [points(runs[arm][s]) for s in sorted(runs[arm])]
            for c in curves:
                if c:
                    ax.plot([p[0] for p in c], [p[1] for p in c], color=color, lw=0.8, alpha=0.45)
            x, y = mean_curve(curves)
            if len(x):
                ax.plot(x, y, color=color, lw=2.6, label=f"{arm} (mean of {len(curves)})")
    axes[0].set_xlabel("training time (s, compilation and evaluations left out)")
    axes[1].set_xlabel("training steps")
    for ax in axes:
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out

