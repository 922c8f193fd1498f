"""Three clocks side by side on the suite tasks where the env and the independent check disagree.

`env_throughput.py --workloads suite` found the environment's speedup lower than its independent
CUDA-event loop by more than 10% on 11 suite tasks (all conv / matmul / attention). This script
times each task's known-good solution and its reference in one process, on one device, with:
  env    the environment's own scoring path: `harness.evaluate` (correctness, then the timing
         stage: fresh inputs per run, L2 flush, a device-side hold that keeps the host's launch time
         out of the window, adaptive median);
  event  benchmarks/env_compare.py's independent loop (`task_fns` + `_events_ms`: flush, device
         sync, start event, fn(), end event), reused, not copied;
  prof   a third clock: CUPTI activity records through torch.profiler, the summed device time of
         every kernel / memset / memcpy of a run ("busy"; the span first-start to last-end is kept
         too, and span - busy is the idle GPU time inside the run, e.g. waiting for Python).
Also the reference's host enqueue time (its Python and CuPy launch overhead, no sync). The
speedups of the three clocks are compared pairwise; "agree" lists the pairs within --tol.

Reading it: if prof agrees with env and the event loop's reference time is about the reference's
host time, the event loop counts the reference's launch overhead (the GPU idles between its
launches) and `--event-hold` (the env's hold before the event loop's start event) must bring event
to env. If env alone is off, its timing stage is the suspect: rerun with `--no-l2-flush` or
`--warmup N`; if all three agree here but the pool disagreed, the cause lives in the pool (other
workers, cached reference times), not in a clock.

    python benchmarks/clock_check.py                           # H200: the 11 + 4 controls, < 4 min
    python benchmarks/clock_check.py --event-hold              # isolate the host launch time
    python benchmarks/clock_check.py --ref-impl torch          # torch eager as the reference
    python benchmarks/clock_check.py --tasks conv3d,relu --no-l2-flush --warmup 10
Without a CUDA GPU (or CuPy) it prints why and exits 0.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import env_compare  # noqa: E402  (after the path set-up, like the other scripts)

DISAGREED = ("conv3d", "conv_transpose2d", "conv2d_relu_bias_add", "conv2d", "conv2d_bias_scale", "matmul_batched",
             "matmul_3d_tensor", "scaled_dot_product_attention", "matmul_fp16", "gemm_sigmoid_sum",
             "conv1d_dilated_strided")
CONTROLS = ("relu", "sum_dim", "softmax", "layer_norm")  # agreed: elementwise, reduction, softmax, norm
CLOCKS = ("env", "event", "prof")
ENV_TIMED_RUNS = 100  # the env's most timed runs in env_throughput.py's before/after mode (the flagged run)
MARK_NAME = "clock_check_mark"
MARK_SOURCE = 'extern "C" __global__ void clock_check_mark() {}'
DEVICE_CATS = ("kernel", "gpu_memset", "gpu_memcpy")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--tasks", default=",".join(DISAGREED + CONTROLS),
                    help="comma-separated suite task names (default: the 11 that disagreed + 4 controls)")
    ap.add_argument("--warmup", type=int, default=10,
                    help="warm-up runs of every clock (env: warmup_runs; 10 as env_throughput.py's check)")
    ap.add_argument("--runs", type=int, default=50, help="timed runs of the event and profiler clocks")
    ap.add_argument("--no-l2-flush", action="store_true", help="no L2 flush before a run, in all three clocks")
    ap.add_argument("--event-hold", action="store_true",
                    help="event and prof clocks: enqueue a device-side hold (2x the host enqueue time) "
                         "before the start, as the env's loop does (tests: host launch time in the window)")
    ap.add_argument("--ref-impl", choices=("cupy", "torch"), default="cupy",
                    help="reference timed by event and prof: the task's CuPy reference (what the env scores "
                         "against) or torch eager (tasks/torch_models.py; env column: its torch baseline)")
    ap.add_argument("--tol", type=float, default=0.10, help="relative speedup difference counted as agreement")
    ap.add_argument("--sizes", default="eval", help="size set of the tasks")
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    return ap.parse_args(argv)


def gpu_missing() -> str | None:
    """Why this machine cannot run the check, or None when CuPy sees a CUDA GPU."""
    try:
        import cupy as cp
        if cp.cuda.runtime.getDeviceCount() > 0:
            return None
        return "CuPy sees no CUDA GPU"
    except Exception as e:
        return f"no usable CuPy / CUDA ({type(e).__name__}: {str(e)[:120]})"


def agreeing_pairs(speedups: Mapping[str, float | None], tol: float) -> list[str]:
    """The pairs of clocks ('env=prof', ...) whose speedups differ by at most `tol` relatively."""
    pairs = []
    for i, a in enumerate(CLOCKS):
        for b in CLOCKS[i + 1:]:
            x, y = speedups.get(a), speedups.get(b)
            if x and y and abs(x / y - 1) <= tol:
                pairs.append(f"{a}={b}")
    return pairs


def run_windows(events: list[dict[str, Any]], marker: str = MARK_NAME) -> list[tuple[float, float]]:
    """(busy, span) in ms of each run of a CUPTI trace: the device events strictly between
    consecutive marker launches (pairs 0-1, 2-3, ...), busy the sum of their durations, span the
    first start to the last end. `events` are chrome-trace dicts (cat, name, ts and dur in us)."""
    dev = sorted((e for e in events if e.get("cat") in DEVICE_CATS and "dur" in e), key=lambda e: e["ts"])
    marks = [i for i, e in enumerate(dev) if e.get("name") == marker]
    out = []
    for open_i, close_i in zip(marks[0::2], marks[1::2], strict=False):
        inside = dev[open_i + 1:close_i]
        if not inside:
            out.append((0.0, 0.0))
            continue
        busy = sum(float(e["dur"]) for e in inside)
        span = max(float(e["ts"]) + float(e["dur"]) for e in inside) - float(inside[0]["ts"])
        out.append((busy / 1e3, span / 1e3))
    return out


def env_clock(task: Any, device: Any, cfg: Any, ref_impl: str) -> dict[str, Any]:
    """The environment's scoring path on the task's solution: kernel and reference medians (ms)."""
    from kernels_env.execute import harness
    from kernels_env.execute.score import Prepared, prepare
    prep = prepare(task, task.solution, cfg, arch=device.arch)
    if not isinstance(prep, Prepared):
        return {"error": f"{prep.status.value}: {prep.message[:120]}"}
    program = device.load(prep.compiled, cfg)
    res = harness.evaluate(device, program, task, prep.submission, prep.sizes, cfg)
    t = res.timing
    if not res.correct or t is None:
        return {"error": f"{res.status.value}: {res.message[:120]}"}
    ref = t.ref_median_ms if ref_impl == "cupy" else (t.baseline or {}).get("torch_median_ms")
    return {"kernel_ms": t.kernel_median_ms, "ref_ms": ref, "runs": t.runs, "ref_runs": t.ref_runs}


def torch_ref_fn(task: Any, sizes: dict[str, int], seed: int) -> Callable[[], Any] | None:
    """torch eager's model of the task on trial-0 inputs (the event loop's), or None without one."""
    import cupy as cp
    import torch

    from kernels_env.execute.inputs import make_inputs
    from kernels_env.tasks.torch_models import TORCH_MODELS
    model = TORCH_MODELS.get(task.name)
    if model is None:
        return None
    tensors = {k: torch.from_dlpack(v) for k, v in make_inputs(task, sizes, 0, seed, cp).items()}
    scalars = {s.name: s.value for s in task.scalars}
    return lambda: model(torch, tensors, scalars)


def prof_clock(cp: Any, fn: Callable[[], Any], flush: Any, warmup: int, runs: int,
               hold: Callable[[], None] | None) -> dict[str, float] | str:
    """Median busy and span (ms) of fn's device work per run from CUPTI (torch.profiler), in the
    event loop's regime (flush, sync, optional hold, marker, fn, marker); a message without torch."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        return "torch not installed"
    mark = cp.RawKernel(MARK_SOURCE, MARK_NAME)
    for _ in range(warmup):
        fn()
    cp.cuda.Device().synchronize()
    torch.cuda.init()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(runs):
            if flush is not None:
                flush.fill(i & 0xFF)
            cp.cuda.Device().synchronize()
            if hold is not None:
                hold()
            mark((1,), (1,), ())
            fn()
            mark((1,), (1,), ())
        cp.cuda.Device().synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        with open(f.name) as g:
            windows = run_windows(json.load(g).get("traceEvents", []))
    if not windows:
        return "no device events seen by CUPTI"
    return {"busy_ms": statistics.median(w[0] for w in windows), "span_ms": statistics.median(w[1] for w in windows)}


def check_task(task: Any, device: Any, cfg: Any, args: argparse.Namespace) -> dict[str, Any]:
    """One row: the three clocks' kernel and reference times and speedups of one task."""
    import cupy as cp
    row: dict[str, Any] = {"task": task.name, "env": env_clock(task, device, cfg, args.ref_impl)}
    fns = env_compare.task_fns(task, cfg, device)
    if isinstance(fns, str):
        return {**row, "error": fns}
    kernel_fn, ref_fn = fns
    if args.ref_impl == "torch":
        ref_fn = torch_ref_fn(task, task.size_set(args.sizes), cfg.seed)
        if ref_fn is None:
            return {**row, "error": "no torch model for this task"}
    flush = None if args.no_l2_flush else cp.empty(max(2 * device.l2_bytes, 1 << 20), dtype=cp.uint8)
    for name, fn in (("kernel", kernel_fn), ("ref", ref_fn)):
        enqueue = env_compare.enqueue_ms(cp, fn)
        hold = env_compare.hold_for(device, enqueue) if args.event_hold else None
        row[f"{name}_host_ms"] = enqueue
        row[f"event_{name}_ms"] = statistics.median(env_compare._events_ms(cp, fn, flush, args.warmup, args.runs,
                                                                           hold=hold))
        row[f"prof_{name}"] = prof_clock(cp, fn, flush, args.warmup, args.runs, hold)
    return row


def speedups(row: dict[str, Any]) -> dict[str, float | None]:
    """Each clock's speedup (reference / kernel) of a row; None where a clock has no numbers."""
    def ratio(ref: Any, k: Any) -> float | None:
        return ref / k if isinstance(ref, float) and isinstance(k, float) and k > 0 else None
    env, pk, pr = row.get("env", {}), row.get("prof_kernel"), row.get("prof_ref")
    return {"env": ratio(env.get("ref_ms"), env.get("kernel_ms")),
            "event": ratio(row.get("event_ref_ms"), row.get("event_kernel_ms")),
            "prof": ratio(pr.get("busy_ms"), pk.get("busy_ms")) if isinstance(pk, dict) and isinstance(pr, dict)
            else None}


def env_hold_cap_ms() -> float:
    """The env's longest device-side hold (cupy_backend.HOLD_MAX_S) in ms: it covers host enqueue
    times up to half of it, so a longer reference enqueue leaks into the env's window as well."""
    from kernels_env.backends.cupy_backend import HOLD_MAX_S
    return HOLD_MAX_S * 1e3


def render(rows: list[dict[str, Any]], tol: float) -> str:
    """The markdown table of the rows, then one line per task that could not be measured."""
    def f(x: Any, spec: str = ".4g") -> str:
        return format(x, spec) if isinstance(x, float) else "-"

    def busy(x: Any) -> Any:
        return x.get("busy_ms") if isinstance(x, dict) else None

    def gap(x: Any) -> Any:
        return x["span_ms"] - x["busy_ms"] if isinstance(x, dict) else None
    head = ("task", "env sol ms", "env ref ms", "event sol ms", "event ref ms", "prof sol ms", "prof ref ms",
            "ref gaps ms", "ref host ms", "speedup env / event / prof", f"agree (<= {tol:.0%})")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes = []
    for r in rows:
        env, s = r.get("env", {}), speedups(r)
        lines.append("| " + " | ".join([
            r["task"], f(env.get("kernel_ms")), f(env.get("ref_ms")), f(r.get("event_kernel_ms")),
            f(r.get("event_ref_ms")), f(busy(r.get("prof_kernel"))), f(busy(r.get("prof_ref"))),
            f(gap(r.get("prof_ref"))), f(r.get("ref_host_ms")), " / ".join(f(s[c], ".3g") for c in CLOCKS),
            ", ".join(agreeing_pairs(s, tol)) or "none"]) + " |")
        for key in ("error", "prof_kernel", "prof_ref"):
            if isinstance(r.get(key), str):
                notes.append(f"{r['task']}: {key}: {r[key]}")
        if "error" in env:
            notes.append(f"{r['task']}: env: {env['error']}")
        if isinstance(r.get("ref_host_ms"), float) and r["ref_host_ms"] > env_hold_cap_ms() / 2:
            notes.append(f"{r['task']}: the reference's host time {r['ref_host_ms']:.3g} ms is over half the env's "
                         f"hold cap ({env_hold_cap_ms():g} ms): part of it is inside the env's window too")
    return "\n".join(lines + notes)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    why = gpu_missing()
    if why is not None:
        print(f"clock_check: skipped: {why}; it needs a CUDA GPU with CuPy (see --help)")
        return 0
    os.environ["LEAP_TORCH_BASELINE"] = "1" if args.ref_impl == "torch" else "0"
    from kernels_env.backends.cupy_backend import CupyDevice
    from kernels_env.core.config import EnvConfig
    from kernels_env.tasks import list_tasks
    names = [n for n in args.tasks.split(",") if n]
    by_name = {t.name: t for t in list_tasks()}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        print(f"clock_check: unknown tasks {unknown}; expected suite task names", file=sys.stderr)
        return 2
    cfg = EnvConfig(backend="cupy", sizes=args.sizes, warmup_runs=args.warmup, timed_runs=ENV_TIMED_RUNS,
                    flush_l2=not args.no_l2_flush, seed=0)  # one draw for every clock
    device = CupyDevice()
    rows = []
    t0 = time.monotonic()
    for n in names:
        try:
            rows.append(check_task(by_name[n], device, cfg, args))
        except Exception as e:  # report and go on: one odd task must not hide the others
            rows.append({"task": n, "error": f"{type(e).__name__}: {str(e)[:160]}"})
        finally:
            device.free_pool()
        print(f"  {n}: done at {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    print(render(rows, args.tol))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
