"""Reject tasks whose correctness check a submission could pass without computing anything.

`validate_task(task)` plays the cheapest cheats against a task's own check, on NumPy at the small
sizes, over the trials the harness runs (same seeds and distributions):

- a constant output (0, 1, -1, or the mean of the first trial's expected output), and
- an input-ignoring output: the first trial's expected output replayed in every later trial (what a
  kernel that memorised one answer, or wrote a fixed table, would produce), and
- an output that ignores one input: the reference computed with that input replaced by zeros, or by
  the next trial's draw of it (what a kernel that never reads it, or reads a stale copy, produces).

If such an output passes every trial for some output buffer, the task is too weak (its inputs do not
vary enough between trials, or its tolerance is too loose, or the output is nearly constant, or it
hardly depends on one input) and `validate_task` returns the problems.
`python -m kernels_env.execute.validate` checks the whole suite.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

from kernels_env.core.config import EnvConfig


def _constants(expected0: np.ndarray) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = [("zeros", 0), ("ones", 1), ("minus ones", -1)]
    with np.errstate(all="ignore"):
        finite = expected0[np.isfinite(expected0)] if expected0.dtype.kind == "f" else expected0
        if finite.size:
            out.append(("the mean of trial 0's output", finite.astype(np.float64).mean()))
    return out


def validate_task(task: Any, sizes: str = "small", trials: int | None = None, seed: int = 0,
                  domains: bool = True) -> list[str]:
    """Problems of `task` (empty: no input-ignoring output passes its check at these sizes);
    `domains`: draw as EnvConfig.input_domains does."""
    from kernels_env.execute.harness import _reference_outputs
    from kernels_env.execute.inputs import describe_distributions, make_inputs
    from kernels_env.judge.compare import compare_output
    trials = max(2, trials or EnvConfig().correctness_trials)
    size_set = task.size_set(sizes)
    expected: list[list[np.ndarray]] = []
    dists = []
    inputs_by_trial = []
    for t in range(trials):
        inputs = make_inputs(task, size_set, t, seed, np, domains)
        inputs_by_trial.append(inputs)
        expected.append([np.asarray(e) for e in _reference_outputs(task, np, inputs)])
        dists.append(describe_distributions(task, t, domains))
    problems: list[str] = []
    ignoring = _one_input_ignored(task, inputs_by_trial)
    for k, b in enumerate(task.outputs):
        atol, rtol = task.tol(b.dtype)
        exp0 = expected[0][k]
        fakes: list[tuple[str, Any]] = [(f"constant {name}", np.full(exp0.shape, v).astype(exp0.dtype))
                                        for name, v in _constants(exp0)]
        fakes.append(("trial 0's expected output replayed", exp0))
        for name, fake in fakes:
            first = 0 if name.startswith("constant") else 1
            if all(compare_output(np, b.name, fake.copy(), expected[t][k], b.dtype, atol, rtol, t, dists[t])
                   is None for t in range(first, trials)):
                problems.append(f"{task.name}: output {b.name!r} passes every trial as {name}")
                break
        for name, outs in ignoring:
            if all(compare_output(np, b.name, outs[t][k].copy(), expected[t][k], b.dtype, atol, rtol, t,
                                  dists[t]) is None for t in range(trials)):
                problems.append(f"{task.name}: output {b.name!r} passes every trial {name}")
    return problems


def _one_input_ignored(task: Any, inputs_by_trial: list[dict[str, Any]]) -> list[tuple[str, list[list[np.ndarray]]]]:
    """Per input buffer and way of ignoring it (zeros; the next trial's draw: every trial draws at the
    same sizes), the reference outputs of every trial with that input so replaced: what a kernel that
    does not read it returns."""
    from kernels_env.execute.harness import _reference_outputs
    trials = len(inputs_by_trial)
    out = []
    for b in task.inputs:
        for how in ("zeros", "the next trial's draw"):
            outs = []
            for t in range(trials):
                real = inputs_by_trial[t][b.name]
                alt = np.zeros_like(real) if how == "zeros" else inputs_by_trial[(t + 1) % trials][b.name].copy()
                try:
                    with np.errstate(all="ignore"):
                        outs.append([np.asarray(e) for e in _reference_outputs(
                            task, np, {**inputs_by_trial[t], b.name: alt})])
                except Exception:  # e.g. zero indices a reference refuses: no such kernel passes either
                    break
            if len(outs) == trials:
                out.append((f"ignoring input {b.name!r} ({how} in its place)", outs))
    return out


def main(argv: list[str] | None = None) -> int:
    from kernels_env.tasks import list_tasks
    bad = []
    for task in list_tasks():
        bad += validate_task(task)
    print("\n".join(bad) if bad else "every task rejects constant and input-ignoring outputs")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
