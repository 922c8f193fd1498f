"""Kernel-environment throughput: evaluations/s through the process pool, NVRTC compile latency,
cache-hit latency and the harness's own overhead per correctness trial (DESIGN 5).

Runs the suite's known-good solutions (level 1 by default). Every submitted text is made unique by a
`#define` line (it survives the cache's normalisation), so the pool's cache and in-flight
de-duplication never hit during the throughput phase: every job is parsed, compiled (in parallel
compile workers) and executed. Afterwards one text is resubmitted to measure a cache hit.

    python benchmarks/env_throughput.py                      # H200: cupy, eval sizes, all level-1 tasks
    python benchmarks/env_throughput.py --backend cpu --sizes small --limit 5
    python benchmarks/env_throughput.py --json               # one JSON object instead of the table
    python benchmarks/env_throughput.py --pool ray --backend cpu --sizes small --limit 3   # ray vs process

Before and after side by side (benchmarks/env_compare.py): `--before-src DIR` runs each workload
(`--workloads suite,small,mix`) once with the kernels_env package in DIR and once with this tree's,
each in a subprocess, prints one table (evaluations/s steady and at first sight, stage means) and
then an independent timing check of every suite solution (own CUDA-event loop) next to the env's
speedups:

    git archive c7dc096 kernels_env | (mkdir -p .bench_before && tar -x -C .bench_before)
    python benchmarks/env_throughput.py --before-src .bench_before --repeat 2

Goals on an H200: >= 20 evaluations/s, compile p50 <= 100 ms; with the before/after arms: >= 25/s
on the suite, >= 60/s on small level-1 tasks, >= 20/s on the RL-like mix.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.environ.get("LEAP_BENCH_SRC") or ROOT  # an arm's subprocess: the kernels_env to measure
if SRC not in sys.path:
    sys.path.insert(0, SRC)

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.append(HERE)
import env_compare  # noqa: E402  (benchmarks/env_compare.py)
from env_compare import variant  # noqa: E402

GOAL_EVALS_PER_S = 20.0
GOAL_COMPILE_P50_MS = 100.0


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]) of a non-empty list."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = int(pos), min(int(pos) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def measure_compile(tasks: list[Any], arch: str, config: Any, reps: int) -> dict[str, Any]:
    """NVRTC latency of each solution's device code, serial in this process (no GPU needed)."""
    from kernels_env.compiler.compile import compile_cuda
    from kernels_env.source.submission import parse_submission
    times, failures = [], []
    try:  # first use loads NVRTC and its headers (~1 s): not a per-compile cost
        compile_cuda(parse_submission(variant(tasks[0].solution, "c_warm")).cuda_source, arch, config)
    except Exception:
        pass
    for rep in range(reps):
        for t in tasks:
            src = parse_submission(variant(t.solution, f"c{rep}")).cuda_source
            t0 = time.perf_counter()
            try:
                compile_cuda(src, arch, config)
            except Exception as e:  # report, keep measuring the rest
                failures.append(f"{t.name}: {type(e).__name__}: {str(e)[:200]}")
                continue
            times.append((time.perf_counter() - t0) * 1e3)
    return {"compile_ms_p50": percentile(times, 50), "compile_ms_p95": percentile(times, 95),
            "compile_count": len(times), "compile_failures": failures}


def measure_pool(tasks: list[Any], config: Any, backend: str, repeat: int, hits: int,
                 gpu_workers: int | None, compile_workers: int | None,
                 exec_workers_per_gpu: int | None = None, mode: str = "process",
                 mode_kwargs: dict[str, Any] | None = None, tag: str = "") -> dict[str, Any]:
    """evaluations/s through EvalPool(mode) on unique texts (`tag` makes them unique to this call: the
    cpu backend's build cache is on disk), then cache-hit latency."""
    from kernels_env.execute.result_cache import ResultCache
    from kernels_env.schedule.pool import EvalPool, Job
    t_start = time.perf_counter()
    kw: dict[str, Any] = {"exec_workers_per_gpu": exec_workers_per_gpu} if exec_workers_per_gpu else {}
    pool = EvalPool(mode=mode, backend=backend, gpu_workers=gpu_workers, compile_workers=compile_workers,
                    cache=ResultCache(), config=config, **kw, **(mode_kwargs or {}))
    try:
        # Warm-up (not counted): worker start-up, CUDA context creation, first-use costs.
        warm = pool.map([Job(t.name, variant(t.solution, f"{tag}warm"), config) for t in tasks[:2]])
        startup_s = time.perf_counter() - t_start
        # Round r submits every task once. Round 0 is each task's first sight in this process (CuPy
        # builds the elementwise kernels its reference and inputs need; the reference is timed);
        # later rounds are the steady state of a training run, where the same tasks recur.
        jobs, results, round_wall = [], [], []
        for r in range(repeat):
            batch = [Job(t.name, variant(t.solution, f"{tag}r{r}"), config) for t in tasks]
            t0 = time.perf_counter()
            results += pool.map(batch)
            round_wall.append(time.perf_counter() - t0)
            jobs += batch
        wall = sum(round_wall)
        steady_wall = sum(round_wall[1:])
        statuses: dict[str, int] = {}
        not_correct = []
        for job, res in zip(jobs, results, strict=False):
            statuses[res.status.value] = statuses.get(res.status.value, 0) + 1
            if not res.correct:
                not_correct.append(f"{job.task}: {res.status.value}: {res.message[:160]}")
        def stage(name):
            return [r.stage_seconds[name] * 1e3 for r in results if name in r.stage_seconds]
        hit_job = jobs[0]
        hit_ms = []
        for _ in range(hits):
            t1 = time.perf_counter()
            r = pool.submit(hit_job).result()
            hit_ms.append((time.perf_counter() - t1) * 1e3)
            assert r.cached, "resubmitting a scored text should be a cache hit"
        speedups = [r.speedup for r in results if r.correct and r.speedup is not None]
        return {
            "backend": getattr(pool, "backend", backend), "exec_workers": getattr(pool, "exec_workers", None),
            "compile_workers": getattr(pool, "compile_workers", None), "startup_s": startup_s,
            "warmup_statuses": [r.status.value for r in warm],
            "jobs": len(jobs), "wall_s": wall, "evals_per_s": len(jobs) / wall if wall > 0 else float("nan"),
            "first_round_evals_per_s": len(tasks) / round_wall[0] if round_wall[0] > 0 else float("nan"),
            "steady_evals_per_s": (len(tasks) * (repeat - 1) / steady_wall if steady_wall > 0
                                   else float("nan")),
            "stage_ms_mean": {k: statistics.fmean(stage(k)) for k in env_compare.STAGES
                              if stage(k)},
            "statuses": statuses, "not_correct": not_correct[:20],
            "pool_compile_ms_p50": percentile(stage("compile"), 50),
            "pool_compile_ms_p95": percentile(stage("compile"), 95),
            "load_ms_p50": percentile(stage("load"), 50),
            "correctness_ms_p50": percentile(stage("correctness"), 50),
            "timing_ms_p50": percentile(stage("timing"), 50),
            "speedup_median": statistics.median(speedups) if speedups else None,
            "cache_hit_ms_p50": percentile(hit_ms, 50), "cache_hit_ms_p95": percentile(hit_ms, 95),
            "pool_stats": pool.stats(),
        }
    finally:
        pool.close()


def measure_overhead(tasks: list[Any], config: Any, backend: str, trials: int) -> dict[str, Any]:
    """Harness wall time per correctness trial minus the plan's own device time, in this process."""
    from kernels_env.execute import harness
    from kernels_env.backends import get_device
    from kernels_env.execute.score import Prepared, prepare
    device = get_device(backend, config)
    cfg = config.replace(timing=False, correctness_trials=trials)
    rows, failures = [], []
    try:
        for t in tasks:
            prep = prepare(t, t.solution, cfg, arch=getattr(device, "arch", None))
            if not isinstance(prep, Prepared):
                failures.append(f"{t.name}: {prep.status.value}: {prep.message[:160]}")
                continue
            program = device.load(prep.compiled, cfg)
            res = harness.evaluate(device, program, t, prep.submission, prep.sizes, cfg)
            if not res.correct or res.trials == 0:
                failures.append(f"{t.name}: {res.status.value}: {res.message[:160]}")
                continue
            per_trial_ms = res.stage_seconds["correctness"] * 1e3 / res.trials
            fn = harness.plan_callable(device, program, t, prep.submission, prep.sizes, cfg)
            kernel_ms = statistics.median(device.time_ms(fn, 1, 5, False))
            rows.append({"task": t.name, "trial_ms": per_trial_ms, "kernel_ms": kernel_ms,
                         "overhead_ms": per_trial_ms - kernel_ms})
            end_job = getattr(device, "end_job", None)
            if end_job:
                end_job()
    finally:
        device.close()
    over = [r["overhead_ms"] for r in rows]
    return {"overhead_ms_p50": percentile(over, 50), "overhead_ms_max": max(over) if over else float("nan"),
            "trial_ms_p50": percentile([r["trial_ms"] for r in rows], 50),
            "kernel_ms_p50": percentile([r["kernel_ms"] for r in rows], 50),
            "overhead_rows": rows, "overhead_failures": failures}


def render_table(report: dict[str, Any]) -> str:
    """The report as an aligned text table."""
    on_gpu = report.get("backend") == "cupy"
    def ok(good):
        return ("yes" if good else "NO") if on_gpu else "-"
    eps = report.get("evals_per_s", float("nan"))
    steady = report.get("steady_evals_per_s", float("nan"))
    c50 = report.get("compile_ms_p50", float("nan"))
    rows = [
        ("backend / sizes", f"{report.get('backend')} / {report['sizes']}", "", ""),
        ("tasks x repeat = jobs", f"{report['tasks']} x {report['repeat']} = {report.get('jobs', 0)}", "", ""),
        ("workers (exec / compile)", f"{report.get('exec_workers')} / {report.get('compile_workers')}", "", ""),
        ("pool start-up + warm-up, s", f"{report.get('startup_s', float('nan')):.2f}", "", ""),
        ("evaluations / s, all rounds", f"{eps:.2f}", "", ""),
        ("evaluations / s, first sight of each task", f"{report.get('first_round_evals_per_s', float('nan')):.2f}",
         "", ""),
        ("evaluations / s, steady state (rounds 2..)", f"{steady:.2f}", f">= {GOAL_EVALS_PER_S:g}",
         ok(steady >= GOAL_EVALS_PER_S)),
        ("stage means, ms", "  ".join(f"{k} {v:.1f}" for k, v in report.get("stage_ms_mean", {}).items()),
         "", ""),
        ("statuses", json.dumps(report.get("statuses", {})), "all correct",
         "yes" if set(report.get("statuses", {})) <= {"correct"} else "NO"),
        ("NVRTC compile p50 / p95, ms (serial)", f"{c50:.1f} / {report.get('compile_ms_p95', float('nan')):.1f}",
         f"p50 <= {GOAL_COMPILE_P50_MS:g}", ok(c50 <= GOAL_COMPILE_P50_MS)),
        ("compile in pool p50 / p95, ms", f"{report.get('pool_compile_ms_p50', float('nan')):.1f} / "
                                          f"{report.get('pool_compile_ms_p95', float('nan')):.1f}", "", ""),
        ("load stage p50, ms (module load / cpu build)", f"{report.get('load_ms_p50', float('nan')):.1f}", "", ""),
        ("correctness stage p50, ms", f"{report.get('correctness_ms_p50', float('nan')):.1f}", "", ""),
        ("timing stage p50, ms", f"{report.get('timing_ms_p50', float('nan')):.1f}", "", ""),
        ("cache hit p50 / p95, ms", f"{report.get('cache_hit_ms_p50', float('nan')):.3f} / "
                                    f"{report.get('cache_hit_ms_p95', float('nan')):.3f}", "", ""),
        ("harness overhead / trial p50 (max), ms", f"{report.get('overhead_ms_p50', float('nan')):.2f} "
                                                   f"({report.get('overhead_ms_max', float('nan')):.2f})", "", ""),
        ("trial wall p50 / kernel p50, ms", f"{report.get('trial_ms_p50', float('nan')):.2f} / "
                                            f"{report.get('kernel_ms_p50', float('nan')):.3f}", "", ""),
        ("median speedup of solutions", f"{report['speedup_median']:.2f}" if report.get("speedup_median") else "-",
         "", ""),
    ]
    w = [max(len(r[i]) for r in rows + [("metric", "value", "goal", "ok")]) for i in range(4)]
    def line(r):
        return "  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip()
    out = [line(("metric", "value", "goal", "ok")), line(tuple("-" * x for x in w))] + [line(r) for r in rows]
    for key in ("not_correct", "compile_failures", "overhead_failures"):
        if report.get(key):
            out.append(f"\n{key}:")
            out.extend(f"  {s}" for s in report[key])
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="auto", choices=("auto", "cupy", "cpu"))
    ap.add_argument("--sizes", default="eval", choices=("eval", "small"))
    ap.add_argument("--level", type=int, default=1, help="task level (default 1)")
    ap.add_argument("--limit", type=int, default=None, help="first N tasks only")
    ap.add_argument("--repeat", type=int, default=None, help="copies of each solution (default 3 cupy, 1 cpu)")
    ap.add_argument("--trials", type=int, default=5, help="correctness trials per evaluation")
    ap.add_argument("--timed-runs", type=int, default=None, help="timed runs (default 100 cupy, 2 cpu)")
    ap.add_argument("--warmup-runs", type=int, default=None, help="warm-up runs (default 10 cupy, 0 cpu)")
    ap.add_argument("--compile-reps", type=int, default=2)
    ap.add_argument("--hits", type=int, default=50, help="cache-hit submissions to time")
    ap.add_argument("--overhead-tasks", type=int, default=8, help="tasks for the harness-overhead measurement")
    ap.add_argument("--gpu-workers", type=int, default=None)
    ap.add_argument("--compile-workers", type=int, default=None)
    ap.add_argument("--skip", default="", help="comma list of phases to skip: compile,pool,overhead")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    ap.add_argument("--exec-workers-per-gpu", type=int, default=None,
                    help="exec workers per GPU (cupy; the pool's default when omitted; ignored by old code)")
    ap.add_argument("--pool", default="process", choices=("process", "ray"),
                    help="ray: the process pool here against EvalPool(mode='ray') on the same jobs, one table")
    ap.add_argument("--ray-address", default=None, metavar="ADDR",
                    help="--pool ray: the cluster (HEAD:6379); default a local Ray with one host on this machine")
    ap.add_argument("--before-src", default=None, metavar="DIR",
                    help="directory holding an older kernels_env package: run before/after arms side by side")
    ap.add_argument("--workloads", default=None,
                    help=f"before/after mode: comma list of {','.join(env_compare.WORKLOADS)} (default all)")
    ap.add_argument("--independent-hold", action="store_true",
                    help="independent check: enqueue the env's device-side hold before each start event, "
                         "keeping the host's launch time out of the window as the env does (clock_check.py)")
    ap.add_argument("--no-independent", action="store_true", help="before/after mode: skip the independent "
                    "timing check")
    ap.add_argument("--fail-kinds", default=None, help="before/after mode: the mix's failing kinds, a comma "
                    f"list of {','.join(env_compare.FAIL_SHARE)} (default all; the 30%% share is kept)")
    ap.add_argument("--arm-timeout", type=float, default=600.0, help="seconds per arm subprocess")
    ap.add_argument("--arm-run", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--independent-run", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--arm-opts", default="{}", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.arm_run or args.independent_run:  # a subprocess of the before/after mode
        opts = json.loads(args.arm_opts)
        out = (env_compare.run_arm(args.arm_run, opts) if args.arm_run else env_compare.independent_timing(opts))
        print(env_compare.MARK + json.dumps(out, default=str), flush=True)
        return 0
    if args.before_src is not None or args.workloads is not None:
        return compare_main(ap, args)

    from kernels_env.backends import resolve_backend
    from kernels_env.core.config import EnvConfig
    from kernels_env.tasks import list_tasks
    backend = resolve_backend(args.backend)
    gpu = backend == "cupy"
    tasks = list_tasks(level=args.level)
    if args.limit is not None:
        if args.limit < 1:
            ap.error(f"--limit={args.limit}; expected >= 1")
        tasks = tasks[: args.limit]
    if not tasks:
        ap.error(f"no tasks at level {args.level}")
    repeat = args.repeat or (3 if gpu else 1)
    config = EnvConfig(backend=backend, sizes=args.sizes, correctness_trials=args.trials,
                       timed_runs=args.timed_runs or (100 if gpu else 2),
                       warmup_runs=args.warmup_runs if args.warmup_runs is not None else (10 if gpu else 0))
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    report: dict[str, Any] = {"backend": backend, "sizes": args.sizes, "tasks": len(tasks), "repeat": repeat,
                              "config": config.to_dict()}
    arch = config.arch or "sm_90"
    if "compile" not in skip:
        report.update(measure_compile(tasks, arch, config, args.compile_reps))
    if args.pool == "ray":  # both pools on the same workload, one after the other; nothing else
        print(ray_vs_process(tasks, config, backend, repeat, args))
        return 0
    if "pool" not in skip:
        report.update(measure_pool(tasks, config, backend, repeat, args.hits, args.gpu_workers,
                                   args.compile_workers, args.exec_workers_per_gpu))
    if "overhead" not in skip:
        report.update(measure_overhead(tasks[: args.overhead_tasks], config, backend, args.trials))
    if args.json:
        print(json.dumps(report, default=str))
    else:
        print(render_table(report))
    return 0


RAY_ROWS = (("pool start-up + warm-up, s", "startup_s", "{:.2f}"), ("evaluations / s, all rounds", "evals_per_s", "{:.2f}"),
            ("evaluations / s, first sight", "first_round_evals_per_s", "{:.2f}"),
            ("evaluations / s, steady state", "steady_evals_per_s", "{:.2f}"),
            ("compile in pool p50, ms", "pool_compile_ms_p50", "{:.1f}"),
            ("correctness stage p50, ms", "correctness_ms_p50", "{:.1f}"),
            ("cache hit p50, ms", "cache_hit_ms_p50", "{:.3f}"), ("statuses", "statuses", "{}"))


def ray_vs_process(tasks: list[Any], config: Any, backend: str, repeat: int, args: argparse.Namespace) -> str:
    """--pool ray: the same jobs through the process pool and through EvalPool(mode='ray'); a table of both
    and the Ray pool's overhead (its steady evaluations/s against the process pool's)."""
    arms = {}
    for mode, extra in (("process", {}), ("ray", {"address": args.ray_address})):
        arms[mode] = measure_pool(tasks, config, backend, repeat, args.hits, args.gpu_workers, args.compile_workers,
                                  args.exec_workers_per_gpu, mode=mode, mode_kwargs=extra,
                                  tag=f"{mode}_{os.getpid()}_{time.time_ns()}_")
    if args.json:
        return json.dumps(arms, default=str)
    rows: list[tuple[str, ...]] = [("metric", "process", "ray")]
    for label, key, fmt in RAY_ROWS:
        rows.append((label, *(fmt.format(arms[m].get(key, float("nan"))) for m in ("process", "ray"))))
    p, r = arms["process"]["steady_evals_per_s"], arms["ray"]["steady_evals_per_s"]
    same = arms["process"]["statuses"] == arms["ray"]["statuses"]
    host = {k: arms["ray"]["pool_stats"].get(k) for k in ("hosts_up", "batches", "host_deaths", "resends")}
    w = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(c.ljust(w[i]) for i, c in enumerate(row)).rstrip() for row in rows]
    return "\n".join([f"backend {backend}, {len(tasks)} tasks x {repeat} rounds", *lines,
                      f"ray / process, steady evaluations/s: {r / p:.2f}" if p == p and p > 0 else "",
                      f"same statuses: {'yes' if same else 'NO'}; ray pool: {host}"])


def compare_main(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """--before-src / --workloads: the before/after arms and the independent check (env_compare)."""
    from kernels_env.backends import resolve_backend
    backend = resolve_backend(args.backend)
    gpu = backend == "cupy"
    workloads = [w.strip() for w in (args.workloads or ",".join(env_compare.WORKLOADS)).split(",") if w.strip()]
    bad = [w for w in workloads if w not in env_compare.WORKLOADS]
    if bad:
        ap.error(f"--workloads: unknown {', '.join(bad)}; expected some of {', '.join(env_compare.WORKLOADS)}")
    if args.limit is not None and args.limit < 1:
        ap.error(f"--limit={args.limit}; expected >= 1")
    fail_kinds = [k.strip() for k in args.fail_kinds.split(",") if k.strip()] if args.fail_kinds else None
    try:
        env_compare.fail_shares(fail_kinds)
    except ValueError as e:
        ap.error(f"--fail-kinds: {e}")
    opts = {"backend": backend, "limit": args.limit, "repeat": max(2, args.repeat or 2), "trials": args.trials,
            "timed_runs": args.timed_runs or (100 if gpu else 2),
            "warmup_runs": args.warmup_runs if args.warmup_runs is not None else (10 if gpu else 0),
            "gpu_workers": args.gpu_workers, "compile_workers": args.compile_workers,
            "exec_workers_per_gpu": args.exec_workers_per_gpu, "independent_hold": args.independent_hold,
            "fail_kinds": fail_kinds}
    report = env_compare.compare(os.path.abspath(__file__), ROOT, args.before_src, workloads, opts,
                                 not args.no_independent, args.arm_timeout)
    print(json.dumps(report, default=str) if args.json else env_compare.render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
