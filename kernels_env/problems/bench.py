"""Score a folder of problem files against a folder of submissions, and KernelBench's fast_p:
the share of problems whose submission is correct and more than p times faster than the baseline
(torch eager, or torch.compile). fast_0 is the share correct."""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kernels_env.core.config import EnvConfig
from kernels_env.core.result import Result
from kernels_env.problems.build import load_problem, problem_files, release
from kernels_env.problems.client import ProblemError

THRESHOLDS = (0.0, 1.0, 1.2)
BASELINES = ("eager", "compile")


@dataclass
class Row:
    """One problem's outcome: its file, its submission's result (None: no submission file or a
    problem that cannot be loaded, with `note` saying which)."""
    problem: str
    result: Result | None
    note: str = ""

    @property
    def correct(self) -> bool:
        return self.result is not None and self.result.correct

    def speedup(self, baseline: str) -> float | None:
        timing = self.result.timing if self.result is not None else None
        if timing is None:
            return None
        return timing.speedup_vs_eager if baseline == "eager" else timing.speedup_vs_compile


def fast_p(rows: Sequence[Row], baseline: str, p: float) -> float:
    """The share of `rows` correct and (p > 0) with a speedup over `baseline` above p."""
    if baseline not in BASELINES:
        raise ValueError(f"baseline={baseline!r}; expected one of {BASELINES}")
    if not rows:
        return 0.0
    hits = [r for r in rows if r.correct and (p <= 0 or (r.speedup(baseline) or 0.0) > p)]
    return len(hits) / len(rows)


def submission_for(problem: str, submissions: str) -> str:
    """The submission file of `problem`: <submissions>/<problem's stem>.md."""
    return os.path.join(submissions, os.path.splitext(os.path.basename(problem))[0] + ".md")


def bench(problems: str, submissions: str, config: EnvConfig, backend: str,
          score: Callable[..., Result], progress: Callable[[Row], None] | None = None) -> list[Row]:
    """Each problem under `problems` scored with its submission (`score(task, text, config)`); each
    problem's process ends after its row."""
    if not os.path.isdir(submissions):
        raise ProblemError(f"submissions folder {submissions}: not a directory")
    rows = []
    for path in problem_files(problems):
        sub = submission_for(path, submissions)
        if not os.path.isfile(sub):
            row = Row(path, None, f"no submission {sub}")
        else:
            try:
                task = load_problem(path, backend, config.seed)
            except ProblemError as e:
                row = Row(path, None, str(e))
            else:
                with open(sub, "rb") as f:
                    row = Row(path, score(task, f.read(), config))
                release(task)
        rows.append(row)
        if progress is not None:
            progress(row)
    return rows


def summary(rows: Sequence[Row], timed: bool) -> dict[str, Any]:
    """fast_p per baseline (None when the scores were not timed) and the counts."""
    return {"problems": len(rows), "correct": sum(r.correct for r in rows),
            "fast_p": {b: ({f"fast_{p:g}": fast_p(rows, b, p) for p in THRESHOLDS} if timed else None)
                       for b in BASELINES}}


def row_dict(row: Row) -> dict[str, Any]:
    r = row.result
    return {"problem": row.problem, "status": r.status.value if r is not None else "not_scored",
            "message": r.message if r is not None else row.note,
            "speedup_vs_eager": row.speedup("eager"), "speedup_vs_compile": row.speedup("compile")}


def table(rows: Sequence[Row], timed: bool) -> str:
    """Plain text: one line per problem, then fast_p against eager and compile (or why not)."""
    def x(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}x"
    lines = [f"{'problem':<36} {'status':<14} {'vs eager':>9} {'vs compile':>10}"]
    for row in rows:
        d = row_dict(row)
        lines.append(f"{os.path.basename(row.problem):<36} {d['status']:<14} {x(d['speedup_vs_eager']):>9} "
                     f"{x(d['speedup_vs_compile']):>10}" + ("" if row.correct else f"  {d['message'][:80]}"))
    s = summary(rows, timed)
    lines.append(f"{s['correct']}/{s['problems']} correct")
    if not timed:
        lines.append("timing is off (the cpu backend's times are not comparable): correctness only, no fast_p")
    for b in BASELINES:
        if s["fast_p"][b] is not None:
            lines.append(f"vs {b:<8} " + "  ".join(f"{k}={v:.3f}" for k, v in s["fast_p"][b].items()))
    return "\n".join(lines)
