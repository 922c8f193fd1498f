"""`python -m kernels_env list [--generated N] | show TASK | score (--task T | --problem P.py) FILE | check-suite |
bench --problems DIR --submissions DIR` (DESIGN 3.7; problem files: docs/problems.md)."""
from __future__ import annotations

import argparse
import difflib
import json
import sys
from typing import Any
from collections.abc import Sequence

from kernels_env.core.config import BACKENDS, SIZE_SETS, EnvConfig
from kernels_env.core.result import Result


class CliError(Exception):
    """A user error on the command line: printed without a traceback, exit code 2."""


def _tasks() -> Any:
    from kernels_env import tasks
    return tasks


def _get_task(name: str) -> Any:
    tasks = _tasks()
    if name.startswith("gen_"):  # generated tasks (kernels_env.tasks.generated) are built from the name
        try:
            return tasks.get_task(name)
        except KeyError as e:
            raise CliError(str(e.args[0]) if e.args else f"unknown task {name!r}") from None
    names = [t.name for t in tasks.list_tasks()]
    if name not in names:
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.4)
        hint = f"; did you mean {', '.join(close)}?" if close else "; run `python -m kernels_env list`"
        raise CliError(f"unknown task {name!r}{hint}")
    return tasks.get_task(name)


def _config(args: argparse.Namespace) -> EnvConfig:
    cfg = EnvConfig(backend=args.backend, sizes=args.sizes)
    if getattr(args, "no_timing", False):
        cfg = cfg.replace(timing=False)
    if getattr(args, "trials", None):
        cfg = cfg.replace(correctness_trials=args.trials)
    if getattr(args, "legacy_inputs", False):
        cfg = cfg.replace(input_domains=False)
    if getattr(args, "allow_host_memory_access", False):
        cfg = cfg.replace(allow_host_memory_access=True)
    if getattr(args, "timing_budget", None) is not None:
        cfg = cfg.replace(timing_budget_s=args.timing_budget)
    return cfg


def cmd_list(args: argparse.Namespace, out: Any) -> int:
    if args.generated is not None:
        from kernels_env.tasks.generated import generated_task_names
        try:
            names = generated_task_names(args.generated, seed=args.seed, split=args.split)
        except ValueError as e:
            raise CliError(str(e)) from None
        ts = [_tasks().get_task(n) for n in names]
        if args.level is not None:
            ts = [t for t in ts if t.level == args.level]
    else:
        ts = _tasks().list_tasks(level=args.level)
    if args.json:
        rows = [{"name": t.name, "level": t.level, "tags": list(t.tags),
                 "description": t.description.strip().splitlines()[0] if t.description.strip() else ""}
                for t in ts]
        print(json.dumps(rows, indent=2), file=out)
        return 0
    width = max([len(t.name) for t in ts] + [4])
    print(f"{'task':<{width}}  level  description", file=out)
    for t in ts:
        first = t.description.strip().splitlines()[0] if t.description.strip() else ""
        print(f"{t.name:<{width}}  {t.level:^5}  {first[:80]}", file=out)
    print(f"{len(ts)} tasks", file=out)
    return 0


def cmd_show(args: argparse.Namespace, out: Any) -> int:
    t = _get_task(args.task)
    print(f"# {t.name} (level {t.level}{', tags: ' + ', '.join(t.tags) if t.tags else ''})", file=out)
    print(t.description.strip(), file=out)
    print("\n## signature (eval sizes)", file=out)
    print(t.signature_text("eval"), file=out)
    print("\n## sizes", file=out)
    for which in ("small", "eval"):
        print(f"{which}: " + ", ".join(f"{k}={v}" for k, v in t.size_set(which).items()), file=out)
    if args.solution or not args.no_solution:
        print("\n## solution", file=out)
        print(t.solution.strip(), file=out)
    return 0


def _read(path: str) -> bytes:
    """The submission file's bytes (`-`: stdin); scoring decodes them (not UTF-8: format_error)."""
    try:
        if path == "-":
            return sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise CliError(f"cannot read submission file {path!r}: {e.strerror}") from None


def _pool_mode(args: argparse.Namespace) -> dict[str, Any]:
    """EvalPool's mode (and Ray address) from --inline / --ray-address."""
    if args.ray_address is not None:
        if args.inline:
            raise CliError("--inline and --ray-address exclude each other: score here or on the Ray hosts")
        from kernels_env.schedule.ray_support import require_ray
        try:
            require_ray()
        except ImportError as e:
            raise CliError(str(e)) from None
        return {"mode": "ray", "address": None if args.ray_address == "local" else args.ray_address}
    return {"mode": "inline" if args.inline else "process"}


def _problem_backend(args: argparse.Namespace) -> str:
    """The backend a problem file is scored on ("auto" resolved: its torch device follows it)."""
    if args.ray_address is not None:
        raise CliError("problem files are scored in this process; --ray-address scores suite tasks only")
    from kernels_env.backends import resolve_backend
    return resolve_backend(args.backend)


def _score_problem(args: argparse.Namespace, text: bytes) -> Result:
    """Score `text` against the problem file args.problem, in this process (its reference in its own)."""
    from kernels_env.problems import ProblemError, load_problem, release
    from kernels_env.execute.score import score
    backend = _problem_backend(args)
    cfg = _config(args).replace(backend=backend)
    try:
        task = load_problem(args.problem, backend, cfg.seed)
    except ProblemError as e:
        raise CliError(str(e)) from None
    try:
        return score(task, text, cfg)
    finally:
        release(task)


def cmd_score(args: argparse.Namespace, out: Any) -> int:
    if args.budget is not None:
        raise CliError(f"--budget {args.budget}: renamed --feedback-chars (the feedback characters to print); "
                       "the timing budget per kernel is --timing-budget SECONDS")
    text = _read(args.file)
    result = _score_problem(args, text) if args.problem else _score_task(args, text)
    _print_result(result, args, out)
    return 0 if result.correct else 1


def _score_task(args: argparse.Namespace, text: bytes) -> Result:
    task = _get_task(args.task)
    from kernels_env.schedule.pool import EvalPool, Job
    cfg = _config(args)
    gpu_workers, cpu_workers = (1, None) if args.backend == "cupy" else (None, 1)
    # process mode (default): a hang or crash of the kernel is contained and time-limited
    with EvalPool(**_pool_mode(args), config=cfg, cache=False,
                  compile_workers=1, gpu_workers=gpu_workers, cpu_workers=cpu_workers) as pool:
        return pool.map([Job(task.name, text, cfg)])[0]


def _print_result(result: Result, args: argparse.Namespace, out: Any) -> None:
    from kernels_env.judge.feedback import render_feedback
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, default=str), file=out)
    else:
        print(render_feedback(result, budget_chars=args.feedback_chars), file=out)
        print(f"\n[status={result.status.value} backend={result.backend or args.backend} "
              + " ".join(f"{k}={v:.3f}s" for k, v in result.stage_seconds.items()) + "]", file=out)
        for k, r in sorted(result.resources.items()):
            print(f"[{k}: {r.registers} registers, {r.shared_bytes} B smem, {r.stack_frame_bytes} B stack, "
                  f"{r.spill_stores_bytes}/{r.spill_loads_bytes} B spill stores/loads]", file=out)
        t = result.timing
        if t is not None and t.speedup_vs_eager is not None:
            vs_compile = "-" if t.speedup_vs_compile is None else f"{t.speedup_vs_compile:.3g}x"
            print(f"[speedup_vs_eager={t.speedup_vs_eager:.3g}x speedup_vs_compile={vs_compile}]", file=out)


def suite_table(results: Sequence[Result]) -> str:
    """A plain-text table: task, status, speedup, seconds; with a summary line."""
    rows = [("task", "status", "speedup", "time_s", "message")]
    for r in results:
        sp = "-" if r.speedup is None else f"{r.speedup:.2f}x"
        secs = f"{sum(r.stage_seconds.values()):.2f}"
        msg = "" if r.correct else r.message.replace("\n", " ")[:70]
        rows.append((r.task, r.status.value, sp, secs, msg))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=False)) + ("  " + row[4] if row[4] else "")
             for row in rows]
    n_ok = sum(r.correct for r in results)
    lines.append(f"{n_ok}/{len(results)} correct")
    return "\n".join(lines)


def cmd_check_suite(args: argparse.Namespace, out: Any) -> int:
    tasks = _tasks().list_tasks(level=args.level)
    if args.tasks:
        tasks = [_get_task(n) for n in args.tasks]
    if not tasks:
        raise CliError(f"no tasks at level {args.level}")
    cfg = _config(args)
    from kernels_env.schedule.pool import EvalPool, Job
    jobs = [Job(t.name, t.solution, cfg) for t in tasks]
    kw: dict[str, Any] = {}
    if args.workers:
        kw = {"gpu_workers": args.workers} if args.backend == "cupy" else {"cpu_workers": args.workers}
    with EvalPool(**_pool_mode(args), config=cfg, cache=False, **kw) as pool:
        progress = len(jobs) > 3 and sys.stderr.isatty() and not args.json
        results = pool.map(jobs, progress=progress)
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=2, default=str), file=out)
    else:
        print(suite_table(results), file=out)
    return 0 if all(r.correct for r in results) else 1


def cmd_bench(args: argparse.Namespace, out: Any) -> int:
    from kernels_env.problems import ProblemError
    from kernels_env.problems.bench import bench, row_dict, summary, table
    from kernels_env.execute.score import score
    backend = _problem_backend(args)
    cfg = _config(args).replace(backend=backend)
    timed = cfg.timing and backend == "cupy"
    if not timed:
        cfg = cfg.replace(timing=False)
    try:
        rows = bench(args.problems, args.submissions, cfg, backend, score)
    except ProblemError as e:
        raise CliError(str(e)) from None
    if args.json:
        print(json.dumps({"backend": backend, **summary(rows, timed), "rows": [row_dict(r) for r in rows]},
                         indent=2), file=out)
    else:
        print(table(rows, timed), file=out)
    return 0 if all(r.correct for r in rows) else 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m kernels_env", description="Score CUDA kernels against tasks.")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--backend", choices=BACKENDS, default="auto")
        sp.add_argument("--sizes", choices=SIZE_SETS, default="eval")
        sp.add_argument("--no-timing", action="store_true", help="correctness only")
        sp.add_argument("--trials", type=int, default=None, help="correctness trials (default: config)")
        sp.add_argument("--timing-budget", type=float, default=None, metavar="S",
                        help="seconds of timing runs per kernel (EnvConfig.timing_budget_s; default: config)")
        sp.add_argument("--legacy-inputs", action="store_true",
                        help="the draws from before input domains (EnvConfig.input_domains=false)")
        sp.add_argument("--allow-host-memory-access", action="store_true",
                        help="score on a GPU whose kernels can read this process's host memory (HMM/ATS; "
                             "trusted kernels only: EnvConfig.allow_host_memory_access)")
        sp.add_argument("--ray-address", default=None, metavar="ADDR",
                        help="score on the evaluation hosts of this Ray cluster (HEAD:6379, ray://HEAD:10001, or "
                             "'local' for a Ray started here); needs the dist extra, docs/DISTRIBUTED_EVAL.md")

    sp = sub.add_parser("list", help="list tasks")
    sp.add_argument("--level", type=int, choices=(1, 2, 3), default=None)
    sp.add_argument("--json", action="store_true", help="print the tasks as JSON")
    sp.add_argument("--generated", type=int, default=None, metavar="N",
                    help="list the first N generated tasks (kernels_env.tasks.generated) instead of the suite")
    sp.add_argument("--seed", type=int, default=0, help="ordering seed of --generated")
    sp.add_argument("--split", choices=("train", "held_out", "all"), default="train", help="split of --generated")
    sp.set_defaults(fn=cmd_list)

    sp = sub.add_parser("show", help="show one task")
    sp.add_argument("task")
    sp.add_argument("--solution", action="store_true", help="print the known-good solution (default)")
    sp.add_argument("--no-solution", action="store_true")
    sp.set_defaults(fn=cmd_show)

    sp = sub.add_parser("score", help="score a submission file (Markdown with ```cuda and ```launch)")
    which = sp.add_mutually_exclusive_group(required=True)
    which.add_argument("--task", help="the task to score against (a name from `list`)")
    which.add_argument("--problem", metavar="PATH.py",
                       help="a KernelBench-style PyTorch problem file (docs/problems.md), scored in this process")
    sp.add_argument("file", help="the submission file, or - for stdin")
    sp.add_argument("--json", action="store_true", help="print the whole result as JSON instead of the feedback")
    sp.add_argument("--feedback-chars", type=int, default=2000, help="feedback characters to print")
    sp.add_argument("--budget", type=int, default=None, help=argparse.SUPPRESS)  # the old --feedback-chars
    sp.add_argument("--inline", action="store_true", help="score in this process (debugging; no isolation)")
    common(sp)
    sp.set_defaults(fn=cmd_score)

    sp = sub.add_parser("check-suite", help="score every task's solution; exit 1 if any is not correct")
    sp.add_argument("--level", type=int, choices=(1, 2, 3), default=None)
    sp.add_argument("--tasks", nargs="*", default=None, help="only these tasks")
    sp.add_argument("--workers", type=int, default=None, help="execution workers")
    sp.add_argument("--inline", action="store_true", help="score in this process (debugging)")
    sp.add_argument("--json", action="store_true", help="print every task's result as JSON")
    common(sp)
    sp.set_defaults(fn=cmd_check_suite)

    sp = sub.add_parser("bench", help="score a folder of problem files; fast_p against torch eager and torch.compile")
    sp.add_argument("--problems", required=True, metavar="DIR", help="problem files (*.py, subfolders included)")
    sp.add_argument("--submissions", required=True, metavar="DIR", help="one <problem name>.md per problem")
    sp.add_argument("--json", action="store_true", help="print the table's numbers and every result as JSON")
    common(sp)
    sp.set_defaults(fn=cmd_bench)
    return p


def main(argv: Sequence[str] | None = None, out: Any = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 not correct, 2 usage error)."""
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    try:
        if getattr(args, "trials", None) is not None and args.trials < 1:
            raise CliError(f"--trials {args.trials}; expected >= 1")
        return args.fn(args, out)
    except CliError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
