"""Before/after arms of env_throughput.py (`--before-src DIR`) and its independent timing check.

Each workload runs once per arm, each arm in its own subprocess whose `kernels_env` comes from DIR
(before: e.g. `git archive c7dc096 kernels_env | tar -x -C .bench_before`) or from this tree
(after). The subprocess side (`run_arm`) uses only APIs the old package had (EvalPool with
gpu_workers / compile_workers / cache / config, Job, EnvConfig, list_tasks, Result fields) and
passes `exec_workers_per_gpu` only where EvalPool's signature has it.

Workloads:
  suite  every task of the suite at eval sizes, known-good solutions only;
  small  level-1 tasks at small sizes, known-good solutions only;
  mix    every task at eval sizes, an RL-like mix: 70% solutions, 30% failing submissions (wrong
         output, compile error, illegal memory access: a sticky CUDA error that kills the worker);
         `--fail-kinds illegal` (say) keeps the 30% but of those kinds only, to cost one kind alone;
  gen    the configuration RL uses: GEN_TASKS generated training tasks at eval sizes, correctness
         only (no timing, `configs/generated`), known-good solutions (this tree's arm only: older
         packages may not have the generated family).

The independent timing check (cupy only) times every suite solution and its reference in this
module's own loop: CUDA events, an L2-flushing memset and a device sync before every run, the
kernels launched straight through CuPy (parsing, NVRTC, plan binding and input generation are the
environment's, so both time the same inputs); it prints the environment's speedup next to its own
and flags differences above 10%.
"""
from __future__ import annotations

import inspect
import json
import os
import random
import statistics
import subprocess
import sys
import time
from typing import Any

WORKLOADS = ("suite", "small", "mix", "gen")
GEN_TASKS = 128
# kernels_env.core.result.EVAL_STAGES after parse, restated: the arms may run older trees without it
STAGES = ("compile", "load", "correctness", "timing")
FAIL_KINDS = {"wrong": "wrong_output", "compile": "compile_error", "illegal": "runtime_error"}
FAIL_SHARE = {"wrong": 0.12, "compile": 0.12, "illegal": 0.06}  # 30% failing in all
FLAG_REL_DIFF = 0.10
MARK = "ENV_COMPARE_JSON "


# ---- jobs -----------------------------------------------------------------------------------
def variant(text: str, tag: str) -> str:
    """The same submission with a unique, codegen-neutral `#define` in its (last) cuda block."""
    marker = "```cuda\n"
    i = text.rfind(marker)
    if i < 0:
        raise ValueError("solution text has no ```cuda block")
    j = i + len(marker)
    return text[:j] + f"#define BENCH_VARIANT_{tag} 1\n" + text[j:]


def failing_text(task: Any, kind: str, tag: str) -> str:
    """A submission for `task` that fails as `kind` says (see FAIL_KINDS)."""
    out = task.outputs[0].name
    if kind == "compile":
        return variant(task.solution, tag).replace("#define BENCH_VARIANT", "this is not C++;\n#define BENCH_VARIANT", 1)
    if kind == "wrong":  # every byte of the first output zeroed: wrong (or unwritten other outputs)
        body = ("extern \"C\" __global__ void zero(unsigned char* y, long long n) {\n"
                "  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n  if (i < n) y[i] = 0;\n}")
        count = "*".join(str(d) for d in task.outputs[0].shape) or "1"
        size = {"float16": 2, "float32": 4, "int32": 4, "int64": 8, "float64": 8}.get(task.outputs[0].dtype, 4)
        launch = f"zero<<<cdiv({count} * {size}, 256), 256>>>({out}, {count} * {size});"
    elif kind == "illegal":
        body = 'extern "C" __global__ void bad(char* y) { ((float*)y)[1ll << 36] = 1.f; }'
        launch = f"bad<<<1, 1>>>({out});"
    else:
        raise ValueError(f"failing kind {kind!r}; expected one of {sorted(FAIL_KINDS)}")
    return f"```cuda\n// {tag}\n{body}\n```\n```launch\n{launch}\n```\n"


def fail_shares(kinds: list[str] | None = None) -> dict[str, float]:
    """The mix's failing share per kind: FAIL_SHARE, or only `kinds`, rescaled to the same 30% in all
    (`--fail-kinds illegal`: what a sticky fault costs, alone)."""
    if not kinds:
        return dict(FAIL_SHARE)
    bad = [k for k in kinds if k not in FAIL_SHARE]
    if bad or len(set(kinds)) != len(kinds):
        raise ValueError(f"fail kinds {kinds}; expected distinct names from {sorted(FAIL_SHARE)}")
    scale = sum(FAIL_SHARE.values()) / sum(FAIL_SHARE[k] for k in kinds)
    return {k: FAIL_SHARE[k] * scale for k in kinds}


def workload_rounds(workload: str, tasks: list[Any], repeat: int, seed: int = 0,
                    fail_kinds: list[str] | None = None) -> list[list[tuple]]:
    """Rounds of (task name, text, expected status or None) jobs; each round has every task once."""
    rng = random.Random(seed)
    shares = fail_shares(fail_kinds)
    rounds = []
    for r in range(repeat):
        batch = []
        for i, t in enumerate(tasks):
            kind = None
            if workload == "mix":
                x, acc = rng.random(), 0.0
                for k, share in shares.items():
                    acc += share
                    if x < acc:
                        kind = k
                        break
            tag = f"r{r}_{i}"
            text = variant(t.solution, tag) if kind is None else failing_text(t, kind, tag)
            batch.append((t.name, text, "correct" if kind is None else FAIL_KINDS[kind]))
        rounds.append(batch)
    return rounds


def workload_tasks(workload: str, limit: int | None, only: list[str] | None = None) -> tuple[list[Any], str]:
    """(tasks, size set) of a workload; `only`: the task names every arm has (arms compare the same work)."""
    from kernels_env.tasks import list_tasks
    if workload == "gen":
        from kernels_env.tasks.generated import generated_task_names, get_generated_task
        tasks = [get_generated_task(n) for n in generated_task_names(GEN_TASKS)]
    else:
        tasks = list_tasks(level=1) if workload == "small" else list_tasks()
        if only is not None:  # `only` names suite tasks
            keep = set(only)
            tasks = [t for t in tasks if t.name in keep]
    return (tasks[:limit] if limit else tasks), ("small" if workload == "small" else "eval")


def _suite_names(src: str) -> set[str]:
    """The suite's task names in the kernels_env under `src`."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])]))
    code = "from kernels_env.tasks import list_tasks; print(' '.join(t.name for t in list_tasks()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True,
                         cwd=src)  # "-c" puts the working directory first on sys.path
    return set(out.stdout.split())


# ---- one arm (runs in a subprocess) ---------------------------------------------------------------
def run_arm(workload: str, opts: dict[str, Any]) -> dict[str, Any]:
    """Throughput of one workload through EvalPool with whichever kernels_env is importable."""
    import kernels_env
    from kernels_env import EnvConfig, EvalPool  # the public API: the same in every arm
    Job = sys.modules[EvalPool.__module__].Job  # beside EvalPool, wherever the arm's package keeps it
    tasks, sizes = workload_tasks(workload, opts.get("limit"), opts.get("only"))
    config = EnvConfig(backend=opts["backend"], sizes=sizes, correctness_trials=opts["trials"],
                       timed_runs=opts["timed_runs"], warmup_runs=opts["warmup_runs"],
                       **({"timing": False} if workload == "gen" else {}))
    kw: dict[str, Any] = {"gpu_workers": opts.get("gpu_workers"), "compile_workers": opts.get("compile_workers")}
    params = inspect.signature(EvalPool).parameters
    if opts.get("exec_workers_per_gpu") and "exec_workers_per_gpu" in params:
        kw["exec_workers_per_gpu"] = opts["exec_workers_per_gpu"]
    rounds = workload_rounds(workload, tasks, opts["repeat"], fail_kinds=opts.get("fail_kinds"))
    t_start = time.perf_counter()
    pool = EvalPool(mode="process", backend=opts["backend"], cache=False, config=config, **kw)
    try:
        pool.map([Job(t.name, variant(t.solution, "warm"), config) for t in tasks[:2]])
        startup_s = time.perf_counter() - t_start
        results, expected, walls = [], [], []
        for batch in rounds:
            t0 = time.perf_counter()
            results += pool.map([Job(name, text, config) for name, text, _ in batch])
            walls.append(time.perf_counter() - t0)
            expected += [want for _, _, want in batch]
        stats = pool.stats()
        workers = getattr(pool, "exec_workers", None)
    finally:
        pool.close()
    statuses: dict[str, int] = {}
    unexpected = []
    speedups: dict[str, list[float]] = {}
    clocks: dict[str, list[list[Any]]] = {}  # task -> clock_entry of each timed evaluation
    for (name, _, _), res, want in zip([j for b in rounds for j in b], results, expected, strict=True):
        statuses[res.status.value] = statuses.get(res.status.value, 0) + 1
        if want is not None and res.status.value != want:
            unexpected.append(f"{name}: {res.status.value} (expected {want}): {res.message[:160]}")
        if res.status.value == "correct" and res.speedup is not None:
            speedups.setdefault(name, []).append(res.speedup)
            timing = getattr(res, "timing", None)
            if timing is not None and getattr(timing, "ref_median_ms", None) is not None:
                clocks.setdefault(name, []).append(clock_entry(timing))
    stage = {k: [r.stage_seconds[k] * 1e3 for r in results if k in r.stage_seconds] for k in STAGES}
    steady = sum(walls[1:])
    n = len(tasks)
    return {"workload": workload, "sizes": sizes, "tasks": n, "repeat": opts["repeat"], "jobs": len(results),
            "src": os.path.dirname(os.path.dirname(os.path.abspath(kernels_env.__file__))),
            "exec_workers": workers, "startup_s": startup_s,
            "first_sight_evals_per_s": n / walls[0] if walls and walls[0] > 0 else float("nan"),
            "steady_evals_per_s": n * (len(walls) - 1) / steady if steady > 0 else float("nan"),
            "stage_ms_mean": {k: statistics.fmean(v) for k, v in stage.items() if v},
            "statuses": statuses, "unexpected": unexpected[:20], "n_unexpected": len(unexpected),
            "speedup_median": {k: statistics.median(v) for k, v in speedups.items()}, "clocks_ms": clocks,
            "pool_stats": stats}


def clock_entry(timing: Any) -> list[Any]:
    """One timed evaluation's `clocks_ms` entry: [kernel median ms, reference median ms, fastest and
    slowest timed kernel run ms, timed runs, the L2 flush's median ms, the host's median lateness past
    the hold ms]; None for what the arm's Timing lacks (an older kernels_env has none of the last four)."""
    return [timing.kernel_median_ms, timing.ref_median_ms, getattr(timing, "kernel_min_ms", None),
            getattr(timing, "kernel_max_ms", None), getattr(timing, "runs", None),
            getattr(timing, "flush_median_ms", None), getattr(timing, "launch_late_ms", None)]


# ---- the independent timing check (runs in a subprocess, this tree) -------------------------------
def _events_ms(cp: Any, fn: Any, flush: Any, warmup: int, runs: int,
               hold: Any = None) -> list[float]:
    """Own timing loop: memset the flush buffer (evicts L2), sync, event, fn(), event. `flush` None
    skips the flush; `hold()` (benchmarks/clock_check.py) enqueues GPU work between the sync and the
    start event, so the host's launch time of fn() stays out of the window as in the env's loop."""
    starts = [cp.cuda.Event() for _ in range(runs)]
    ends = [cp.cuda.Event() for _ in range(runs)]
    for i in range(warmup + runs):
        if flush is not None:
            flush.fill(i & 0xFF)
        cp.cuda.Device().synchronize()
        if hold is not None:
            hold()
        if i >= warmup:
            starts[i - warmup].record()
        fn()
        if i >= warmup:
            ends[i - warmup].record()
    cp.cuda.Device().synchronize()
    return [cp.cuda.get_elapsed_time(s, e) for s, e in zip(starts, ends, strict=True)]


def enqueue_ms(cp: Any, fn: Any, reps: int = 5) -> float:
    """Median host time of enqueueing fn() on an idle GPU (no sync inside the window): its launch
    overhead, which the event loop's window holds unless a hold (`hold_for`) covers it."""
    out = []
    for _ in range(reps):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    cp.cuda.Device().synchronize()
    return statistics.median(out)


def hold_for(device: Any, host_ms: float) -> Any:
    """`hold` for _events_ms: the env's device-side hold kernel (CupyDevice._hold) for twice the
    host's enqueue time, as the env's loop sizes it (cupy_backend.hold_seconds, its cap included)."""
    from kernels_env.backends.cupy_backend import hold_seconds
    seconds = hold_seconds(host_ms / 1e3)
    return lambda: device._hold(seconds)


def _event_median(cp: Any, fn: Any, flush: Any, cfg: Any, device: Any, hold: bool) -> float:
    """The independent loop's median of fn (ms); with `hold`, the host's launch time kept out."""
    h = hold_for(device, enqueue_ms(cp, fn)) if hold else None
    return statistics.median(_events_ms(cp, fn, flush, cfg.warmup_runs, cfg.timed_runs, hold=h))


def task_fns(t: Any, cfg: Any, dev: Any) -> tuple[Any, Any] | str:
    """(kernel_fn, ref_fn) of task t's known-good solution for the independent loop: the plan's
    launches straight through CuPy on trial-0 inputs, and the CuPy reference on a copy of them;
    a message when the solution does not prepare."""
    import cupy as cp

    from kernels_env.execute.inputs import evaluation_seed, make_inputs
    from kernels_env.execute.launching import bind_plan, launch_args
    from kernels_env.execute.score import Prepared, prepare
    drv = cp.cuda.driver
    prep = prepare(t, t.solution, cfg, arch=dev.arch)
    if not isinstance(prep, Prepared):
        return f"{prep.status.value}: {prep.message[:120]}"
    program = dev.load(prep.compiled, cfg)
    kernels = dict(program.kernels)
    kernels.update(prep.submission.kernels)
    plan = bind_plan(prep.submission, t, prep.sizes, kernels)
    inputs = make_inputs(t, prep.sizes, 0, evaluation_seed(cfg.seed), cp)
    pristine = {k: v.copy() for k, v in inputs.items()}
    arrays = dict(inputs)
    for b in t.outputs:
        arrays[b.name] = cp.empty(b.resolve_shape(prep.sizes), dtype=b.dtype)
    for name, dtype, count in plan.scratch:
        arrays[name] = cp.zeros((count,), dtype=dtype)
    calls = []
    for bl in plan.launches:
        fn = program.functions[bl.kernel]
        if bl.shared_bytes > 48 * 1024:
            drv.funcSetAttribute(fn.ptr, drv.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bl.shared_bytes)
        args = tuple(cp.uint64(0) if a is None else a for a in launch_args(bl, arrays))
        calls.append((fn, bl.grid, bl.block, args, bl.shared_bytes))

    def kernel_fn(calls: list = calls) -> None:
        for fn, grid, block, args, shared in calls:
            fn(grid, block, args, shared_mem=shared)
    scalars = {s.name: s.value for s in t.scalars}

    def ref_fn(t: Any = t, scalars: dict = scalars, pristine: dict = pristine) -> Any:
        return t.reference(cp, **pristine, **scalars)
    return kernel_fn, ref_fn


def independent_timing(opts: dict[str, Any]) -> dict[str, Any]:
    """task -> {kernel_ms, ref_ms, speedup} from this module's own loop, for every suite solution."""
    import cupy as cp

    from kernels_env.backends.cupy_backend import CupyDevice
    from kernels_env.core.config import EnvConfig
    tasks, sizes = workload_tasks("suite", opts.get("limit"), opts.get("only"))
    cfg = EnvConfig(backend="cupy", sizes=sizes, timed_runs=opts["timed_runs"], warmup_runs=opts["warmup_runs"])
    dev = CupyDevice()
    flush = cp.empty(max(2 * dev.l2_bytes, 1 << 20), dtype=cp.uint8)
    rows: dict[str, Any] = {}
    for t in tasks:
        try:
            fns = task_fns(t, cfg, dev)
            if isinstance(fns, str):
                rows[t.name] = {"error": fns}
                continue
            kernel_fn, ref_fn = fns
            hold = bool(opts.get("independent_hold"))
            k_ms = _event_median(cp, kernel_fn, flush, cfg, dev, hold)
            r_ms = _event_median(cp, ref_fn, flush, cfg, dev, hold)
            rows[t.name] = {"kernel_ms": k_ms, "ref_ms": r_ms, "speedup": r_ms / max(k_ms, 1e-9)}
        except Exception as e:  # report and go on: one odd task must not hide the others
            rows[t.name] = {"error": f"{type(e).__name__}: {str(e)[:160]}"}
        finally:
            cp.get_default_memory_pool().free_all_blocks()
    return {"independent": rows}


# ---- the parent: subprocesses and the table --------------------------------------------------------
def _subprocess(script: str, src: str, argv: list[str], timeout_s: float) -> dict[str, Any]:
    env = dict(os.environ, LEAP_BENCH_SRC=src,
               PYTHONPATH=os.pathsep.join([src, *filter(None, [os.environ.get("PYTHONPATH")])]))
    try:
        out = subprocess.run([sys.executable, script, *argv], capture_output=True, text=True, env=env,
                             timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        return {"error": f"timed out after {timeout_s:g} s", "stderr": str(e.stderr or "")[-2000:]}
    for line in reversed(out.stdout.splitlines()):
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    return {"error": f"exit code {out.returncode}, no result", "stderr": out.stderr[-3000:]}


def compare(script: str, root: str, before: str | None, workloads: list[str], opts: dict[str, Any],
            independent: bool, timeout_s: float) -> dict[str, Any]:
    """Run every workload per arm (before first), then the independent check; the report dict."""
    if before is not None and not os.path.isfile(os.path.join(before, "kernels_env", "__init__.py")):
        raise SystemExit(f"--before-src {before!r} holds no kernels_env package (expected "
                         f"{os.path.join(before, 'kernels_env', '__init__.py')}); make one with "
                         f"`git archive <commit> kernels_env | tar -x -C {before}`")
    arms = ([("before", os.path.abspath(before))] if before else []) + [("after", root)]
    if before is not None and "only" not in opts:  # the suite grew since: time the tasks both arms have
        opts = dict(opts, only=sorted(_suite_names(os.path.abspath(before)) & _suite_names(root)))
    rows = []
    for w in workloads:
        for arm, src in arms:
            if w == "gen" and arm == "before":  # older packages may lack the generated family
                continue
            t0 = time.perf_counter()
            res = _subprocess(script, src, ["--arm-run", w, "--arm-opts", json.dumps(opts)], timeout_s)
            res.update(arm=arm, workload=w, wall_s=time.perf_counter() - t0)
            rows.append(res)
            print(f"[env_compare] {w} / {arm}: {res.get('steady_evals_per_s', res.get('error'))} evals/s steady "
                  f"({res['wall_s']:.0f} s)", file=sys.stderr, flush=True)
    report: dict[str, Any] = {"arms": rows, "options": opts}
    if independent and opts["backend"] == "cupy":
        report.update(_subprocess(script, root, ["--independent-run", "--arm-opts", json.dumps(opts)], timeout_s))
    return report


def _fmt(x: Any, spec: str = ".2f") -> str:
    return format(x, spec) if isinstance(x, (int, float)) else "-"


def _clock(c: list[Any]) -> str:
    """One evaluation's "kernel / reference" ms, with the kernel's fastest-slowest timed run and the
    number of runs where recorded ([kernel, ref] entries of older reports have none)."""
    text = f"{c[0]:.4g} / {c[1]:.4g}"
    lo, hi, n, flush, late = (list(c[2:7]) + [None] * 5)[:5]
    if lo is not None and hi is not None:
        text += f" (runs {lo:.3g}-{hi:.3g} ms" + (f", n={n}" if n is not None else "")
        text += f", flush {flush:.3g} ms" if flush is not None else ""
        text += (f", launch late {late:.3g} ms)" if late is not None else ")")
    return text


def evaluations_off(clocks: dict[str, list[list[Any]]], independent: dict[str, Any],
                    rel: float = FLAG_REL_DIFF) -> tuple[list[str], int]:
    """(the evaluations whose own speedup, reference ms / kernel ms, differs from the independent
    loop's by more than `rel`, as "task #i" (i from 1), the number compared): one arm's count per
    evaluation, where the task table compares the median over a task's evaluations."""
    off, compared = [], 0
    for task, entries in clocks.items():
        own = (independent.get(task) or {}).get("speedup")
        if not own:
            continue
        for i, c in enumerate(entries, 1):
            if c[0] and c[1] is not None:
                compared += 1
                if abs(c[1] / c[0] / own - 1) > rel:
                    off.append(f"{task} #{i}")
    return off, compared


def clocks_apart(clocks: dict[str, list[list[Any]]], independent: dict[str, Any], hold: bool,
                 rel: float = FLAG_REL_DIFF) -> list[str]:
    """Which clock a speedup gap is in: the tasks whose median kernel ms, and those whose median reference
    ms, differ by more than `rel` between the env (after arm) and the independent loop; without the
    loop's hold, a note on what that does to launch-bound functions."""
    apart: dict[int, list[str]] = {0: [], 1: []}
    compared = 0
    for task, entries in clocks.items():
        own = independent.get(task) or {}
        if not entries or not own.get("kernel_ms") or not own.get("ref_ms"):
            continue
        compared += 1
        for i, key in ((0, "kernel_ms"), (1, "ref_ms")):
            env_ms = statistics.median(c[i] for c in entries)
            if abs(env_ms / own[key] - 1) > rel:
                apart[i].append(task)
    if not compared:
        return []
    out = [f"which clock: kernel ms more than {rel:.0%} apart on {len(apart[0])} of {compared} tasks"
           + (f" ({', '.join(apart[0])})" if apart[0] else "")
           + f", reference ms on {len(apart[1])}" + (f" ({', '.join(apart[1])})" if apart[1] else "")]
    if not hold:
        out.append("(the independent loop ran without --independent-hold: a function whose launches take the host "
                   "longer than the GPU's run, e.g. a library call of several kernels, reads slower there than "
                   "under the environment's rule, which keeps the host's launch time out of the window)")
    return out


def render(report: dict[str, Any]) -> str:
    """The arms table, then the speedup check (env after / before vs independent)."""
    head = ("workload", "arm", "evals/s steady", "first-sight evals/s", "stage means ms "
            "(compile load correctness timing)", "statuses", "start-up s")
    lines = []
    for r in report["arms"]:
        if "error" in r:
            lines.append((r["workload"], r["arm"], "ERROR", "", r["error"], r.get("stderr", "")[-200:], ""))
            continue
        sm = r.get("stage_ms_mean", {})
        lines.append((r["workload"], r["arm"], _fmt(r["steady_evals_per_s"]), _fmt(r["first_sight_evals_per_s"]),
                      " ".join(_fmt(sm.get(k), ".1f") for k in STAGES), json.dumps(r["statuses"]),
                      _fmt(r["startup_s"], ".1f")))
    out = [_table(head, lines)]
    for r in report["arms"]:
        if r.get("unexpected"):
            out.append(f"\n{r['workload']} / {r['arm']}: {r['n_unexpected']} jobs with an unexpected status:")
            out.extend(f"  {u}" for u in r["unexpected"])
    ind = report.get("independent")
    if ind:
        suite = {r["arm"]: r for r in report["arms"] if r.get("workload") == "suite"}
        env = {arm: r.get("speedup_median", {}) for arm, r in suite.items()}
        clocks = suite.get("after", {}).get("clocks_ms", {})
        rows, flagged, compared, details = [], 0, 0, []
        for task, v in ind.items():
            after, before = env.get("after", {}).get(task), env.get("before", {}).get(task)
            own = v.get("speedup")
            flag = ""
            if own and after:
                rel = after / own - 1
                flag = f"{rel:+.0%}" + ("  FLAG" if abs(rel) > FLAG_REL_DIFF else "")
                flagged += abs(rel) > FLAG_REL_DIFF
                compared += 1
                if abs(rel) > FLAG_REL_DIFF and clocks.get(task):  # which clock moved: each evaluation's
                    details.append(f"  {task}: env kernel / reference ms per evaluation "
                                   + ", ".join(_clock(c) for c in clocks[task])
                                   + f"; independent {_fmt(v.get('kernel_ms'), '.4g')} / {_fmt(v.get('ref_ms'), '.4g')}")
            env_k, env_r = (statistics.median(c[i] for c in clocks[task]) if clocks.get(task) else None
                            for i in (0, 1))
            rows.append((task, _fmt(after, ".3g"), _fmt(before, ".3g"), _fmt(own, ".3g"),
                         _fmt(env_k, ".4g"), _fmt(v.get("kernel_ms"), ".4g"), _fmt(env_r, ".4g"),
                         _fmt(v.get("ref_ms"), ".4g"), flag or v.get("error", "")))
        out.append(f"\nindependent timing check (own CUDA-event loop): {flagged} of the {compared} tasks with both "
                   f"speedups (of {len(rows)}) differ by more than {FLAG_REL_DIFF:.0%} from the env's (after arm)")
        out.append(_table(("task", "env after", "env before", "independent", "env kernel ms", "own kernel ms",
                           "env ref ms", "own ref ms", "after/own-1"), rows))
        out.extend(details)
        out.extend(clocks_apart(clocks, ind, bool(report.get("options", {}).get("independent_hold"))))
        for arm, r in suite.items():  # per evaluation, every arm (the before arm's too)
            off, n = evaluations_off(r.get("clocks_ms", {}), ind)
            if n:
                out.append(f"{arm}: {len(off)} of {n} evaluations more than {FLAG_REL_DIFF:.0%} off the independent "
                           "clock" + (f" ({', '.join(off)})" if off else ""))
    return "\n".join(out)


def _table(head: tuple, rows: list[tuple]) -> str:
    w = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]

    def line(r: tuple) -> str:
        return "  ".join(str(c).ljust(w[i]) for i, c in enumerate(r)).rstrip()
    return "\n".join([line(head), line(tuple("-" * x for x in w)), *(line(r) for r in rows)])
