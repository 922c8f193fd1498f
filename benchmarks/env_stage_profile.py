"""Where one evaluation's time goes: the harness's stages taken apart, per task, on one device.

For each task's known-good solution (level 1 by default) this scores it once in-process (warming
CuPy's kernel cache and the reference-timing cache), then measures, each step synchronised:
    inputs     fresh seeded inputs for one trial (make_inputs: counter_rng, one kernel per buffer)
    inputs_rng the same buffers from a stateful generator per buffer (xp.random.default_rng(seed)),
               the harness's previous way, for comparison
    copy       the pristine copies of the inputs
    kernel     the candidate's launches of one trial
    reference  the reference on the same inputs
    compare    allclose + NaN/Inf check of every output
    check_off  the correctness stage's reference + comparison of one trial, expected cache off
               (_Run.check_outputs with cache_expected=False: reference, compare, scrub)
    check_hit  the same with the masked expected cache warm (checksum + fused check, no reference)
    flush      one L2 flush (memsetAsync of >= 2x L2, as the timing loop does)
    sync       one empty device synchronisation (host round trip)
and the timing stage's wall time against (every run it made) x the kernel's median, the part that
is the kernel's own time. The timing stage is also taken apart by wrapping its steps (host wall ms,
no extra synchronisation): the device's time_runs loop, and inside it the runs' input loads, the
plan's launches and the device-side counts; the full comparisons of picked runs; the rest. A
time_runs loop much longer than its host parts plus the kernel's own time waited on the GPU.
The correctness trials are taken apart the same way (c_* columns). Sums over the suite show which
stage to attack for evaluations/s.

    python benchmarks/env_stage_profile.py                   # H200, cupy, eval sizes, level 1
    python benchmarks/env_stage_profile.py --backend cpu --sizes small --limit 4
    python benchmarks/env_stage_profile.py --generated 64      # the generated family, correctness only
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from typing import Any
from collections.abc import Callable, Iterator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

PARTS = ("inputs", "inputs_rng", "copy", "kernel", "reference", "compare", "check_off", "check_hit", "flush", "sync")
TIMING_PARTS = ("t_time_runs", "t_load", "t_launch", "t_counts", "t_verify", "t_rest")
CORRECTNESS_PARTS = ("c_inputs", "c_fresh", "c_launch", "c_checks", "c_read", "c_pristine", "c_rest")
CORRECTNESS_OUTER = ("c_inputs", "c_fresh", "c_launch", "c_checks")  # c_read, c_pristine happen inside them


def _timed_ms(device: Any, fn: Callable[[], Any], reps: int = 3) -> float:
    """Median wall ms of `fn()` followed by a device synchronisation."""
    out = []
    for _ in range(reps):
        device.synchronize()
        t0 = time.perf_counter()
        fn()
        device.synchronize()
        out.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(out)


@contextlib.contextmanager
def _timed_calls(spent: dict[str, float], targets: list[tuple[Any, str, str]]) -> Iterator[None]:
    """Wrap each (owner, attribute, part) so its calls add their host wall ms to spent[part]."""
    saved = [(owner, attr, owner.__dict__.get(attr)) for owner, attr, _ in targets]  # None: inherited

    def wrap(fn: Callable[..., Any], part: str) -> Callable[..., Any]:
        def timed(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                spent[part] = spent.get(part, 0.0) + (time.perf_counter() - t0) * 1e3
        return timed

    try:
        for owner, attr, part in targets:
            setattr(owner, attr, wrap(getattr(owner, attr), part))
        yield
    finally:
        for owner, attr, fn in saved:
            if fn is None:
                delattr(owner, attr)
            else:
                setattr(owner, attr, fn)


def timing_breakdown(prep: Any, device: Any, config: Any, task: Any) -> dict[str, float]:
    """One more (warm) evaluation with the timing stage's steps wrapped: host wall ms per part."""
    from kernels_env.execute import timing_stage
    from kernels_env.execute.score import execute
    spent: dict[str, float] = {}
    targets = [(type(device), "time_runs", "t_time_runs"), (timing_stage._TimedBuffers, "load", "t_load"),
               (timing_stage._TimedBuffers, "count_into", "t_counts"),
               # every full comparison goes through _verify_run (the kept runs' too, after unmasking)
               (timing_stage.TimingStage, "_verify_run", "t_verify"), (timing_stage, "launch_all", "t_launch")]
    with _timed_calls(spent, targets):
        result, _ = execute(prep, device, config, task=task)
    stage = result.stage_seconds.get("timing", 0.0) * 1e3
    row = {k: spent.get(k, 0.0) for k in TIMING_PARTS}
    row["t_rest"] = stage - row["t_time_runs"] - row["t_verify"]
    return row


def correctness_breakdown(prep: Any, device: Any, config: Any, task: Any) -> dict[str, float]:
    """One more (warm) evaluation, timing off, with the correctness trials' steps wrapped (host wall
    ms, summed over the trials): the inputs given (copied from the device's cache or drawn, and
    checksummed before the launch), the rest of the fresh arrays (poisoned outputs; inputs drawn there
    without checksums), the synchronising launches, the trial's checks (guards, inputs, outputs); inside those
    the device-to-host reads of the gathered checks and any regenerated inputs; the rest."""
    from kernels_env.execute import harness
    from kernels_env.execute.score import execute
    spent: dict[str, float] = {}
    targets = [(harness._Run, "given_inputs", "c_inputs"), (harness._Run, "fresh_arrays", "c_fresh"),
               (harness, "launch_all", "c_launch"), (harness._Run, "check_trial", "c_checks"),
               (harness.TrialReadout, "read", "c_read"), (harness._Run, "pristine_inputs", "c_pristine")]
    with _timed_calls(spent, targets):  # timing off: the timed runs' full comparisons are not counted here
        result, _ = execute(prep, device, config.replace(timing=False), task=task)
    stage = result.stage_seconds.get("correctness", 0.0) * 1e3
    row = {k: spent.get(k, 0.0) for k in CORRECTNESS_PARTS}
    row["c_rest"] = stage - sum(row[k] for k in CORRECTNESS_OUTER)
    return row


def profile_task(task: Any, device: Any, config: Any) -> dict[str, Any]:
    """Score the task's solution, then time each harness step of one trial (ms)."""
    from kernels_env.execute import harness, launching
    from kernels_env.execute.inputs import evaluation_seed, make_inputs
    from kernels_env.judge.compare import compare_output
    from kernels_env.execute.score import execute, prepare
    prep = prepare(task, task.solution, config, arch=getattr(device, "arch", None))
    if not hasattr(prep, "submission"):
        return {"task": task.name, "error": f"{prep.status}: {prep.message}"}
    execute(prep, device, config, task=task)  # warm: CuPy kernels, reference timing cache
    t0 = time.perf_counter()
    result, _ = execute(prep, device, config, task=task)
    total_ms = (time.perf_counter() - t0) * 1e3
    if result.timing is None and (config.timing or result.status.value != "correct"):
        return {"task": task.name, "error": f"{result.status}: {result.message}"}
    program = device.load(prep.compiled, config)
    seed = evaluation_seed(config.seed)  # one trial's draws, as one evaluation's
    kernels = dict(getattr(program, "kernels", {}) or {})
    kernels.update(prep.submission.kernels)
    plan = launching.bind_plan(prep.submission, task, prep.sizes, kernels)
    xp = device.xp
    state: dict[str, Any] = {}

    def inputs() -> None:
        made = make_inputs(task, prep.sizes, 0, seed, xp)
        if device.name == "cpu":  # kernels there take only the backend's shared buffers (as fresh_arrays)
            made = {k: device.to_device(v) for k, v in made.items()}
        state["inputs"] = made

    def inputs_rng() -> None:
        out = {}
        for i, b in enumerate(task.inputs):
            rng = xp.random.default_rng(1000 + i)
            shape = b.resolve_shape(prep.sizes)
            out[b.name] = rng.standard_normal(shape, dtype=xp.float32).astype(b.dtype)
        state["inputs_rng"] = out

    def copy() -> None:
        state["pristine"] = {k: v.copy() for k, v in state["inputs"].items()}

    def kernel() -> None:
        arrays = dict(state["inputs"])
        for b in task.outputs:
            arrays[b.name] = device.empty(b.resolve_shape(prep.sizes), b.dtype)
        for name, dtype, count in plan.scratch:
            arrays[name] = device.zeros((count,), dtype)
        launching.launch_all(device, program, plan, arrays, None)
        state["arrays"] = arrays

    def reference() -> None:
        state["expected"] = harness._reference_outputs(task, xp, state["pristine"])

    def compare() -> None:
        for b, exp in zip(task.outputs, state["expected"], strict=False):
            atol, rtol = task.tol(b.dtype)
            compare_output(xp, b.name, state["arrays"][b.name], exp, b.dtype, atol, rtol, 0, "")

    runs_by_cache = {on: harness._Run(device, program, task, plan, prep.sizes, config.replace(cache_expected=on))
                     for on in (False, True)}

    def check(on: bool) -> None:
        runs_by_cache[on].check_outputs(0, seed, state["pristine"], state["arrays"], "")

    row: dict[str, Any] = {"task": task.name, "status": result.status.value, "total": total_ms}
    for name, fn in (("inputs", inputs), ("inputs_rng", inputs_rng), ("copy", copy), ("kernel", kernel), ("reference", reference),
                     ("compare", compare)):
        row[name] = _timed_ms(device, fn)
    row["check_off"] = _timed_ms(device, lambda: check(False))
    check(True)  # a miss: fills the cache (and builds the fused kernels)
    row["check_hit"] = _timed_ms(device, lambda: check(True))
    if getattr(device, "flush_bytes", None) and hasattr(xp, "cuda"):
        buf = xp.empty(device.flush_bytes, dtype=xp.uint8)
        stream = xp.cuda.get_current_stream()
        row["flush"] = _timed_ms(device, lambda: xp.cuda.runtime.memsetAsync(  # as Device.time_ms does
            buf.data.ptr, 1, device.flush_bytes, stream.ptr), reps=5)
        del buf
    else:
        row["flush"] = 0.0
    row["sync"] = _timed_ms(device, lambda: None, reps=20)
    stages = result.stage_seconds
    row["stage_correctness"] = stages.get("correctness", 0.0) * 1e3
    row["stage_timing"] = stages.get("timing", 0.0) * 1e3
    row["stage_load"] = stages.get("load", 0.0) * 1e3
    # the runs and the kernel's own time of the evaluation whose stage times are reported (the
    # breakdown's evaluation is another, whose adaptive run count may differ)
    row.update(correctness_breakdown(prep, device, config, task))
    if result.timing is None:  # correctness only (--generated: RL's configuration)
        row.update({"t_runs": 0.0, "timing_kernel_own": 0.0, "kernel_median": 0.0}, **dict.fromkeys(TIMING_PARTS, 0.0))
        return row
    row["t_runs"] = float(result.timing.checked_runs)
    row["timing_kernel_own"] = result.timing.checked_runs * result.timing.kernel_median_ms
    row["kernel_median"] = result.timing.kernel_median_ms
    row.update(timing_breakdown(prep, device, config, task))
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="cupy", choices=("cupy", "cpu"))
    p.add_argument("--sizes", default="eval", choices=("eval", "small"))
    p.add_argument("--level", type=int, default=1)
    p.add_argument("--limit", type=int, default=None, help="profile only the first N tasks")
    p.add_argument("--top", type=int, default=12, help="per-task rows printed (slowest first)")
    p.add_argument("--generated", type=int, default=0, metavar="N",
                   help="profile N generated-family tasks (spread over the family) with timing off, the "
                        "configuration RL uses, instead of the suite's level")
    args = p.parse_args(argv)
    from kernels_env.backends import get_device
    from kernels_env.core.config import EnvConfig
    from kernels_env.tasks.generated import generated_task_names
    from kernels_env.tasks.registry import get_task, list_tasks
    # a fixed seed: the profile compares the expected-output cache on and off, used only with one
    config = EnvConfig(backend=args.backend, sizes=args.sizes, timing=not args.generated, seed=0)
    device = get_device(args.backend, config)
    if args.generated:
        names = generated_task_names(4000, split="all")
        tasks = [get_task(n) for n in names[:: max(1, len(names) // args.generated)][: args.generated]]
    else:
        tasks = list_tasks(level=args.level)[: args.limit]
    rows, errors = [], []
    for t in tasks:
        r = profile_task(t, device, config)
        (errors if "error" in r else rows).append(r)
    if not rows:
        print("no task profiled:", errors)
        return 1
    cols = (("total", "stage_load", "stage_correctness", "stage_timing", "timing_kernel_own") + PARTS + TIMING_PARTS
            + ("t_runs",) + CORRECTNESS_PARTS)
    print(f"{len(rows)} tasks ({args.backend}, {args.sizes} sizes); ms per evaluation or per step")
    print(f"{'task':34s}" + "".join(f"{c[:12]:>13s}" for c in cols))
    for r in sorted(rows, key=lambda r: -r["total"])[: args.top]:
        print(f"{r['task'][:34]:34s}" + "".join(f"{r[c]:13.2f}" for c in cols))
    print(f"{'MEAN':34s}" + "".join(f"{statistics.fmean(r[c] for r in rows):13.2f}" for c in cols))
    trials = config.correctness_trials
    mean = {c: statistics.fmean(r[c] for r in rows) for c in cols}
    runs = max(mean["t_runs"], 1.0)
    print(f"\nper evaluation (means): {trials} trials x (inputs {mean['inputs']:.2f} "
          f"[stateful rng {mean['inputs_rng']:.2f}] + copy {mean['copy']:.2f} "
          f"+ kernel {mean['kernel']:.2f} + reference {mean['reference']:.2f} + compare {mean['compare']:.2f}) ms; "
          f"reference + compare per trial: expected cache off {mean['check_off']:.2f} ms, "
          f"warm {mean['check_hit']:.2f} ms; "
          f"timing stage {mean['stage_timing']:.1f} ms of which the kernel's own "
          f"{mean['timing_kernel_own']:.1f} ms; per timed run flush {mean['flush']:.3f} + sync {mean['sync']:.3f} ms, "
          f"all else {(mean['stage_timing'] - mean['timing_kernel_own']) / runs:.3f} ms ({runs:.1f} runs)")
    print(f"timing stage, host wall (one more warm evaluation): time_runs loop {mean['t_time_runs']:.1f} ms "
          f"[of it input loads {mean['t_load']:.1f}, launches {mean['t_launch']:.1f}, counts {mean['t_counts']:.1f}; "
          f"the kernel's own {mean['timing_kernel_own']:.1f}], full comparisons {mean['t_verify']:.1f}, "
          f"the rest {mean['t_rest']:.1f} ms")
    print(f"correctness stage, host wall (one more warm evaluation, {trials} trials): inputs given (cached "
          f"copies or drawn) and checksummed {mean['c_inputs']:.2f}, poisoned outputs (and inputs drawn there "
          f"without checksums) {mean['c_fresh']:.2f}, launches (synchronised) {mean['c_launch']:.2f}, the "
          f"trials' checks {mean['c_checks']:.2f}, the rest {mean['c_rest']:.2f} ms; device-to-host reads of "
          f"the gathered checks, in the inputs' and the checks' parts {mean['c_read']:.2f}; regenerated "
          f"inputs, in the checks' part {mean['c_pristine']:.2f} ms")
    print(f"=> one GPU serial: {1e3 / mean['total']:.1f} evaluations/s at these sizes")
    for e in errors:
        print("skipped:", e)
    device.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
