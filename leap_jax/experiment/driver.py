"""`python -m leap_jax.experiment`: LEAP against the baselines, every arm from one SFT policy.

1. Policy: `--sft-config` (mode: sft) runs once into OUT/sft; its model is exported in bf16, in
   safetensors shards of at most 15 MiB, to OUT/policy, which every arm loads (small enough to bring
   back from a GPU machine and carry to the next one, so later arms start from the same weights).
   An existing OUT/policy is used as it is; `--policy DIR` names another; `--policy none` keeps the
   arm configs' own model settings (tests).
2. Runs: the shared policy is evaluated once (OUT/start_eval; every new run reuses that record as
   its step -1 through eval.start_metrics, unless --no-shared-start). Then for each seed, for each
   arm, `CONFIG_DIR/<arm>.yaml` runs in a subprocess
   (`python -m leap_jax.main`) into OUT/<arm>-s<seed> with train.seed=<seed>. A run with
   finished.json is skipped, one with a checkpoint resumes, the others start. `--budget-s` bounds
   this call: no run starts with less than `--min-run-s` left, and each gets train.max_wall_s so it
   stops with a checkpoint in time; the next call continues where this one stopped. The runs share
   a JAX persistent compilation cache in OUT/jax_cache (concurrent runs too: JAX treats an entry it
   cannot read, e.g. one still being written, as a miss and compiles). `--parallel N` runs up to
   N at once on the same machine (when GPU time is short): each run's wall-clock then includes the
   others' contention, which OUT/launch.json records and the report states.
3. Report: `leap_jax.experiment.runs_report` over every run (OUT/report: plots, summary.md) and OUT/report/experiment.md
   (leap_jax.experiment.report: per-arm accuracies over seeds, time per phase, time to the
   baseline arm's best accuracy, and the headline ratio; `--compare ARM/BASELINE` picks the pair,
   leap/multiturn by default), opened by the protocol check of docs/protocol.md
   (leap_jax.experiment.protocol) and followed by the ratio as a curve over target levels and the
   paired tests (leap_jax.experiment.claims). A report alone refuses runs that break the protocol
   unless `--accept-protocol-breaks`, which lists the breaches on the page.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from leap_jax.experiment.plots import seed_curves_plot
from leap_jax.experiment.report import DEFAULT_METRIC, load_experiment
from leap_jax.experiment.sections import experiment_page, load_final_evals, read_final_eval
from leap_jax.experiment.runs_report import max_turn, write_report
from leap_jax.train.algorithms import ALGORITHMS, HEADLINE_ARM, HEADLINE_BASELINE
from leap_jax.train.config import load_config
from leap_jax.train.metrics import START_EVAL_FILE, read_metrics

ARMS = tuple(name for name, spec in ALGORITHMS.items() if spec.experiment_arm)  # in the table's order
MAX_SHARD_BYTES = 15 * 2 ** 20  # under the GPU machine's 16 MiB per returned file
POLICY_FILES = ("tokenizer.json", "tokenizer_config.json")
ROOT = Path(__file__).resolve().parents[2]


class ExperimentError(RuntimeError):
    """A bad argument or a failed stage; the message says which and what to look at."""


def _csv(text: str, what: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise ExperimentError(f"{what}={text!r}: expected a comma-separated list")
    return items


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m leap_jax.experiment", description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/experiment", help="experiment folder (default runs/experiment)")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma list (default {','.join(ARMS)})")
    p.add_argument("--seeds", default="0,1", help="comma list of train.seed values (default 0,1)")
    p.add_argument("--config-dir", default=str(ROOT / "configs" / "experiment"),
                   help="folder holding <arm>.yaml (default configs/experiment)")
    p.add_argument("--sft-config", default=str(ROOT / "configs" / "bootstrap_sft.yaml"),
                   help="SFT config (mode: sft) that makes the shared policy")
    p.add_argument("--sft-override", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted override for the SFT run (repeatable), e.g. sft.max_train_seconds=110")
    p.add_argument("--policy", default=None,
                   help="HF folder every arm starts from (default OUT/policy, built from --sft-config); "
                        "'none': keep the arm configs' model settings")
    p.add_argument("--budget-s", type=float, default=None, help="wall-clock budget of this call (s)")
    p.add_argument("--min-run-s", type=float, default=90.0,
                   help="with --budget-s: start or resume a run only with this much left (default 90)")
    p.add_argument("--max-runs", type=int, default=None, help="start or resume at most N runs in this call")
    p.add_argument("--no-shared-start", dest="shared_start", action="store_false",
                   help="let every run evaluate its starting policy itself (default: once, in OUT/start_eval, "
                        "reused by every new run through eval.start_metrics)")
    p.add_argument("--parallel", type=int, default=1,
                   help="run up to N runs at once (default 1; their clocks then share the machine)")
    p.add_argument("--fail-fast", action="store_true",
                   help="when a run exits with an error, stop the runs still going and start no more: "
                        "runs launched together are compared with each other, so the others' clocks "
                        "lose their companion (and a time-limited machine its time)")
    p.add_argument("--metric", default=None, help="accuracy for time-to-target (default train_eval/acc@3)")
    p.add_argument("--report-only", action="store_true", help="only write the report of the runs in OUT")
    p.add_argument("--lower-targets", default="", metavar="D,D,...",
                   help="also compare at the baseline's best minus each margin, e.g. 1/256,2/256 "
                        "(one and two held-out tasks of 256)")
    p.add_argument("--compare", default=f"{HEADLINE_ARM}/{HEADLINE_BASELINE}", metavar="ARM/BASELINE",
                   help="the headline pair: time for ARM to reach BASELINE's best accuracy "
                        f"(default {HEADLINE_ARM}/{HEADLINE_BASELINE})")
    p.add_argument("--accept-protocol-breaks", action="store_true",
                   help="write the report of runs that break the protocol (docs/protocol.md), listing every "
                        "breach at the top of the page, instead of refusing (for pages of earlier runs)")
    p.add_argument("--arm-settings", default="", metavar="KEY,KEY",
                   help="settings beyond the algorithm that the arms differ in by design (dotted keys, e.g. "
                        "rollout.update_lag for grpo_lag/grpo); the protocol check allows them and the page names them")
    p.add_argument("overrides", nargs="*", help="dotted overrides for every arm, e.g. train.time_budget_s=120")
    args = p.parse_args(argv)
    args.arm_list = _csv(args.arms, "--arms")
    try:
        args.seed_list = [int(s) for s in _csv(args.seeds, "--seeds")]
    except ValueError:
        raise ExperimentError(f"--seeds={args.seeds!r}: expected integers, e.g. 0,1") from None
    for a in args.arm_list:
        if not (Path(args.config_dir) / f"{a}.yaml").is_file():
            raise ExperimentError(f"--arms: no config {Path(args.config_dir) / (a + '.yaml')} for arm {a!r} "
                                  f"(--config-dir={args.config_dir})")
    if args.max_runs is not None and args.max_runs < 0:
        raise ExperimentError(f"--max-runs={args.max_runs}: expected >= 0")
    if args.parallel < 1:
        raise ExperimentError(f"--parallel={args.parallel}: expected >= 1")
    args.compare_pair = _compare_pair(args.compare)
    args.lower_target_list = _margins(args.lower_targets)
    args.arm_setting_list = [x.strip() for x in args.arm_settings.split(",") if x.strip()]
    return args


def _margins(text: str) -> list[float]:
    """[1/256, 2/256] from '1/256,2/256' (fractions or decimals, each in (0, 1))."""
    out = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        try:
            v = float(Fraction(item))
        except (ValueError, ZeroDivisionError):
            v = math.nan
        if not 0.0 < v < 1.0:
            raise ExperimentError(f"--lower-targets: {item!r} is not a margin in (0, 1); expected e.g. 1/256 or 0.01")
        out.append(v)
    return out


def _compare_pair(text: str) -> tuple[str, str]:
    """('grpo_lag', 'grpo') from 'grpo_lag/grpo': the headline's arm and its baseline."""
    parts = [x.strip() for x in text.split("/")]
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise ExperimentError(f"--compare={text!r}: expected ARM/BASELINE, two different arm names "
                              f"(e.g. {HEADLINE_ARM}/{HEADLINE_BASELINE})")
    return parts[0], parts[1]


# ---- the shared policy --------------------------------------------------------------------------
def export_policy(src: str | Path, dst: str | Path, dtype: str = "bfloat16",
                  max_shard_bytes: int = MAX_SHARD_BYTES) -> Path:
    """Copy a HF policy folder (an SFT model) to `dst` in `dtype`, sharded, with its tokenizer."""
    from leap_jax.models.hf import load_hf_checkpoint, save_hf_checkpoint  # JAX: only in this step
    src, dst = Path(src), Path(dst)
    mcfg, params = load_hf_checkpoint(str(src), as_numpy=True)
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_hf_checkpoint(str(tmp), mcfg, params, dtype=dtype, max_shard_bytes=max_shard_bytes)
    for name in POLICY_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, tmp / name)
    shutil.rmtree(dst, ignore_errors=True)
    tmp.rename(dst)
    return dst


def _start(cmd: list[str], log_path: Path, env_extra: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a subprocess with its output appended to log_path."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env_extra or {}))
    with open(log_path, "a") as log:
        log.write(f"\n$ {' '.join(cmd)}\n")
        log.flush()
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=os.getcwd())


def _finish(proc: subprocess.Popen, timeout: float | None = None) -> int:
    """Wait for a started subprocess; its exit code, or 124 (killed) past `timeout` seconds."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return 124


def _run(cmd: list[str], log_path: Path, timeout: float | None = None,
         env_extra: dict[str, str] | None = None) -> int:
    """Run a subprocess with its output in log_path; its exit code."""
    return _finish(_start(cmd, log_path, env_extra), timeout)


def compilation_cache_env(out: Path) -> dict[str, str]:
    """Environment for the arm subprocesses: one JAX persistent compilation cache in OUT/jax_cache,
    so runs after the first reuse the train step's and sampler's executables (the arms share the
    model and the shapes; compile time is kept out of the training clock either way). A cache the
    caller already set is kept."""
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return {}
    return {"JAX_COMPILATION_CACHE_DIR": str((out / "jax_cache").resolve())}


def _tail(path: Path, n: int = 12) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def ensure_policy(args: argparse.Namespace, out: Path, log: Any = print) -> Path | None:
    """The policy folder every arm loads (building it from the SFT config when needed), or None."""
    if args.policy == "none":
        return None
    if args.policy is not None:
        p = Path(args.policy)
        if not (p / "config.json").is_file():
            raise ExperimentError(f"--policy {p}: no config.json there (expected a HF model folder)")
        return p
    policy = out / "policy"
    if (policy / "config.json").is_file():
        log(f"[experiment] policy: {policy} (existing)")
        return policy
    sft_dir = out / "sft"
    if not (sft_dir / "model" / "config.json").is_file() or not (sft_dir / "sft_done.json").is_file():
        log(f"[experiment] SFT: {args.sft_config} -> {sft_dir}")
        t0 = time.perf_counter()
        rc = _run([sys.executable, "-m", "leap_jax.main", "--config", args.sft_config,
                   f"train.run_dir={sft_dir}", *args.sft_override], out / "logs" / "sft.log")
        if rc != 0:
            raise ExperimentError(f"the SFT run failed (exit {rc}); see {out / 'logs' / 'sft.log'}:\n"
                                  + _tail(out / "logs" / "sft.log"))
        log(f"[experiment] SFT done in {time.perf_counter() - t0:.0f} s")
    export_policy(sft_dir / "model", policy)
    sft_eval = sft_dir / "sft_eval.json"
    if sft_eval.is_file():
        shutil.copy2(sft_eval, policy / "sft_eval.json")
    log(f"[experiment] policy: {policy} (bf16 export of {sft_dir / 'model'})")
    return policy


# ---- the runs -----------------------------------------------------------------------------------
def run_state(run_dir: Path) -> str:
    """'finished' (finished.json), 'resumable' (a checkpoint) or 'new'."""
    if (run_dir / "finished.json").is_file():
        return "finished"
    ck = run_dir / "checkpoints"
    if (run_dir / "config.yaml").is_file() and ck.is_dir() and any(p.name.isdigit() for p in ck.iterdir()):
        return "resumable"
    return "new"


def memory_overcommit(args: argparse.Namespace) -> str | None:
    """A warning when `--parallel` runs may together claim more than one GPU's memory, else None. Each
    run's JAX may take up to `env.jax_mem_fraction` of the GPU it uses ($XLA_PYTHON_CLIENT_MEM_FRACTION
    wins when set), preallocated or not; on a CPU machine the warning is moot."""
    at_once = min(args.parallel, len(args.seed_list) * len(args.arm_list))
    if at_once < 2:
        return None
    from_env = os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")
    try:
        if from_env:
            top, source = float(from_env), "$XLA_PYTHON_CLIENT_MEM_FRACTION"
        else:
            top = max(load_config(Path(args.config_dir) / f"{a}.yaml", list(args.overrides)).env.jax_mem_fraction
                      for a in args.arm_list)
            source = "env.jax_mem_fraction"
    except Exception:  # a config that does not load fails its run with its own message
        return None
    if at_once * top <= 1.0:
        return None
    fits = max(1, math.floor(1.0 / top))
    return (f"[experiment] warning: --parallel {args.parallel} runs {at_once} at once, each of whose JAX may take "
            f"up to {top:.2f} of its GPU's memory ({source}): {at_once * top:.2f} of one GPU together, besides "
            f"the environment's CuPy workers. On one GPU, run at most {fits} at once or lower "
            f"env.jax_mem_fraction (four runs at 0.3 ran out of memory on an 80 GB H100)")


def run_arms(args: argparse.Namespace, out: Path, policy: Path | None, t_start: float,
             log: Any = print) -> dict[str, str]:
    """Start, resume or skip every (seed, arm) run, up to `args.parallel` at once; returns
    {run name: state after this call}."""
    states: dict[str, str] = {}
    pending = [(seed, arm) for seed in args.seed_list for arm in args.arm_list]
    running: list[tuple[str, subprocess.Popen, float, float | None]] = []  # name, proc, t0, deadline
    launched = 0
    parallel = args.parallel
    env_extra = compilation_cache_env(out)
    call = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())  # names the runs this call launched together
    warning = memory_overcommit(args)
    if warning:
        log(warning)

    def left_in_call() -> float | None:
        return None if args.budget_s is None else args.budget_s - (time.perf_counter() - t_start)

    def reap() -> bool:
        """Collect every run that ended (or passed its deadline: killed); True if any did."""
        done = [r for r in running if r[1].poll() is not None or (r[3] is not None and time.perf_counter() > r[3])]
        running[:] = [r for r in running if r not in done]  # before --fail-fast may stop the others
        for r in done:
            name, proc, t0, _ = r
            rc = _finish(proc, 0.0 if proc.poll() is None else None)
            record_end(out, name)
            after = run_state(out / name)
            states[name] = after if rc == 0 else f"{after} (exit {rc}; see {out / 'logs' / (name + '.log')})"
            log(f"[experiment] {name}: {states[name]} after {time.perf_counter() - t0:.0f} s")
            if rc != 0:
                log(_tail(out / "logs" / f"{name}.log"))
                if args.fail_fast and failed is None:
                    stop_others(name)
        return bool(done)

    failed: str | None = None  # --fail-fast: the first run that exited with an error

    def stop_others(name: str) -> None:
        """Stop every run still going (terminate all, then kill any left after 30 s) and start no more."""
        nonlocal failed
        failed = name
        for _, proc, _, _ in running:
            proc.terminate()
        for other, proc, t0, _ in running:
            rc = _finish(proc, 30.0)
            record_end(out, other)
            states[other] = f"{run_state(out / other)} (stopped: {name} failed, --fail-fast; exit {rc})"
            log(f"[experiment] {other}: {states[other]} after {time.perf_counter() - t0:.0f} s")
        running.clear()

    shared: Path | None = None
    want_shared = args.shared_start  # evaluated before the first new run starts

    for seed, arm in pending:
        name = f"{arm}-s{seed}"
        run_dir = out / name
        state = run_state(run_dir)
        if state == "finished":
            states[name] = state
            continue
        if args.max_runs is not None and launched >= args.max_runs:
            states[name] = state + " (not run: --max-runs reached)"
            continue
        while len(running) >= parallel:  # (none are running once a run failed under --fail-fast)
            if not reap():
                time.sleep(0.5)
        if failed is not None:
            states[name] = f"{state} (not run: {failed} failed, --fail-fast)"
            continue
        left = left_in_call()
        if state == "new" and want_shared and (left is None or left >= args.min_run_s):
            want_shared = False
            shared = shared_start_eval(args, out, policy, left, env_extra, log)
            left = left_in_call()
        if left is not None and left < args.min_run_s:
            states[name] = state + " (not run: this call's budget is spent)"
            continue
        # this call's wall budget (a resumed run would otherwise keep the one saved in its config)
        wall = [f"train.max_wall_s={'null' if left is None else f'{max(left - 45.0, 1.0):.0f}'}"]
        if state == "resumable":
            cmd = [sys.executable, "-m", "leap_jax.main", "--resume", str(run_dir), *wall, *args.overrides]
        else:
            model = [] if policy is None else [f"model.path={policy}"]
            start = [] if shared is None else [f"eval.start_metrics={shared}"]
            cmd = [sys.executable, "-m", "leap_jax.main", "--config", str(Path(args.config_dir) / f"{arm}.yaml"),
                   f"train.run_dir={run_dir}", f"train.seed={seed}", *model, *start, *wall, *args.overrides]
        log(f"[experiment] {name}: {'resume' if state == 'resumable' else 'start'}"
            + (f" ({left:.0f} s left in this call)" if left is not None else "")
            + (f", {len(running) + 1} running" if parallel > 1 else ""))
        record_launch(out, name, parallel, args.overrides, fresh=state == "new", call=call)
        t0 = time.perf_counter()
        proc = _start(cmd, out / "logs" / f"{name}.log", env_extra=env_extra)
        running.append((name, proc, t0, None if left is None else t0 + left + 60.0))
        launched += 1
    while running:
        if not reap():
            time.sleep(0.5)
    return {n: states[n] for n in (f"{a}-s{s}" for s, a in pending)}


def shared_start_eval(args: argparse.Namespace, out: Path, policy: Path | None, timeout: float | None,
                      env_extra: dict[str, str], log: Any = print) -> Path | None:
    """Evaluate the shared starting policy once (OUT/start_eval: the first arm's config with
    train.steps=0, so only its evaluation before the first update runs) and return its
    start_eval.json for the runs' eval.start_metrics; None when the arms do not evaluate at the start.
    Every arm starts from the same weights and evaluates greedily with the same settings, so this
    is the one measurement each run would otherwise repeat (about 150 s each on the H200 with two
    runs at once). `timeout`: what is left of this call (None: no limit)."""
    run_dir = out / "start_eval"
    path = run_dir / START_EVAL_FILE
    if path.is_file():
        return path.resolve()
    arm, seed = args.arm_list[0], args.seed_list[0]
    model = [] if policy is None else [f"model.path={policy}"]
    cmd = [sys.executable, "-m", "leap_jax.main", "--config", str(Path(args.config_dir) / f"{arm}.yaml"),
           f"train.run_dir={run_dir}", f"train.seed={seed}", *model, *args.overrides, "train.steps=0",
           "train.time_budget_s=null", "train.max_wall_s=null"]
    log(f"[experiment] start evaluation of the shared policy ({arm} config) -> {run_dir}")
    t0 = time.perf_counter()
    rc = _run(cmd, out / "logs" / "start_eval.log", timeout=timeout, env_extra=env_extra)
    if rc != 0 or not path.is_file():
        log(f"[experiment] no shared start evaluation (exit {rc}, eval.at_start off or failed); each run "
            f"evaluates its own start. {_tail(out / 'logs' / 'start_eval.log', 4)}")
        return None
    log(f"[experiment] start evaluation done in {time.perf_counter() - t0:.0f} s")
    return path.resolve()


LAUNCH_FILE = "launch.json"


def record_launch(out: Path, name: str, parallel: int, overrides: Sequence[str], fresh: bool = False,
                  call: str | None = None) -> None:
    """OUT/launch.json: per run, each call's concurrency, overrides and start time (the report states
    them; `record_end` adds the end). `fresh`: the run starts from scratch, so earlier launches
    (attempts that left no checkpoint, e.g. out of memory) contributed nothing to its results and
    are dropped. `call`: the experiment call's start time (UTC), the same for every run it launched,
    so the report can say which runs shared the machine."""
    data = _read_launches(out)
    if fresh:
        data.pop(name, None)
    entry: dict[str, Any] = {"parallel": parallel, "overrides": list(overrides), "started": round(time.time(), 1)}
    if call is not None:
        entry["call"] = call
    data.setdefault(name, []).append(entry)
    (out / LAUNCH_FILE).write_text(json.dumps(data, indent=2))


def record_end(out: Path, name: str) -> None:
    """Stamp the end time on the run's last launch in OUT/launch.json (for `shared_seconds`)."""
    data = _read_launches(out)
    if data.get(name):
        data[name][-1]["ended"] = round(time.time(), 1)
        (out / LAUNCH_FILE).write_text(json.dumps(data, indent=2))


def _read_launches(out: Path) -> dict[str, list[dict[str, Any]]]:
    path = out / LAUNCH_FILE
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, json.JSONDecodeError):
        return {}


def shared_seconds(data: dict[str, list[dict[str, Any]]], name: str) -> tuple[float, float] | None:
    """(wall seconds the run's launches lasted, of them the seconds another run of OUT was also
    running), from the launches' start and end stamps; None when a launch of the run lacks them
    (older records, or a launch still going)."""
    def spans(n: str) -> list[tuple[float, float]]:
        return [(c["started"], c["ended"]) for c in data.get(n, []) if "started" in c and "ended" in c]
    mine = spans(name)
    if not mine or len(mine) != len(data.get(name, [])):
        return None
    others = sorted(sp for n in data if n != name for sp in spans(n))
    total = shared = 0.0
    for a, b in mine:
        total += b - a
        covered_to = a  # the union of the others' spans within [a, b], swept left to right
        for c, d in others:
            lo, hi = max(c, covered_to), min(d, b)
            if hi > lo:
                shared += hi - lo
                covered_to = hi
    return total, shared


def launch_notes(out: Path, names: Sequence[str]) -> list[str]:
    """Report lines saying which runs shared the machine with others (from OUT/launch.json), and
    for how many of their seconds where the launches' times were recorded."""
    data = _read_launches(out)
    shared = {n: max(c["parallel"] for c in data[n]) for n in names if n in data
              and any(c.get("parallel", 1) > 1 for c in data[n])}
    if not shared:
        return []
    by_n: dict[tuple[int, str], list[str]] = {}
    for n, k in shared.items():  # grouped by concurrency and by the call that last launched the run
        by_n.setdefault((k, str(data[n][-1].get("call", ""))), []).append(n)
    parts = "; ".join(f"up to {k} at once: {', '.join(sorted(v))}" + (f" (call of {call})" if call else "")
                      for (k, call), v in sorted(by_n.items()))
    line = (f"Concurrency: runs were launched together on one machine ({parts}). Their clocks include "
            "the other runs' contention for the GPU and CPU cores, the same for every arm launched together.")
    walls = {n: shared_seconds(data, n) for n in sorted(shared)}
    timed = [f"{n} {sh:.0f} of {tot:.0f} s" + (f" ({tot - sh:.0f} s alone)" if tot - sh >= 1.0 else "")
             for n, w in walls.items() if w is not None for tot, sh in [w]]
    if timed:
        line += (" Wall seconds each run spent with another run of this experiment going (launch to end, "
                 "evaluations included): " + ", ".join(timed) + ".")
    return [line]


def write_reports(out: Path, arms: Sequence[str], seeds: Sequence[int], metric: str | None,
                  compare: tuple[str, str] = (HEADLINE_ARM, HEADLINE_BASELINE),
                  lower_targets: Sequence[float] = (), accept_breaks: bool = False,
                  arm_settings: Sequence[str] = ()) -> list[Path]:
    """OUT/report: the generic report of every run with metrics, plus experiment.md (its headline
    compares `compare` = (arm, baseline), also at `lower_targets` below the baseline's best).
    The runs are checked against the protocol first: a breach raises ExperimentError, or with
    `accept_breaks` opens the page, listed."""
    dirs = [out / f"{a}-s{s}" for s in seeds for a in arms if read_metrics(out / f"{a}-s{s}")]
    if not dirs:
        return []
    from leap_jax.experiment.protocol import check_protocol, protocol_markdown
    protocol = check_protocol(dirs, arm_settings)
    if protocol.refusals:
        raise ExperimentError("no report of these runs can be written:\n- " + "\n- ".join(protocol.refusals))
    if protocol.breaches and not accept_breaks:
        raise ExperimentError("the runs break the comparison protocol (docs/protocol.md); no report written "
                              "(--accept-protocol-breaks writes one that lists them):\n- "
                              + "\n- ".join(protocol.breaches))
    report = out / "report"
    written = write_report(dirs, report)
    runs = load_experiment(dirs)
    turns = max_turn([r for by_seed in runs.values() for rows in by_seed.values() for r in rows], "train_eval/",
                     default=3)
    metric = metric or DEFAULT_METRIC
    written.append(seed_curves_plot(runs, metric, report / f"seeds_{metric.replace('/', '_')}.png"))
    page = experiment_page(runs, metric, load_final_evals(dirs), read_final_eval(out / "start_eval"), turns=turns,
                           compare=compare, lower_targets=lower_targets)
    notes = launch_notes(out, [d.name for d in dirs])
    shared = sorted(f"{arm}-s{seed}" for arm, by_seed in runs.items() for seed, rows in by_seed.items()
                    if any(r.get("step") == -1 and r.get("eval/start_shared") for r in rows))
    if shared:
        notes.append(f"Start accuracy (step -1) of {', '.join(shared)}: one shared greedy evaluation of the "
                     "starting policy (OUT/start_eval), reused by each run through eval.start_metrics.")
    page = f"## Protocol\n\n{protocol_markdown(protocol)}\n{page}"
    (report / "experiment.md").write_text(page + ("\n" + "\n".join(notes) + "\n" if notes else ""))
    return [*written, report / "experiment.md"]


def main(argv: Sequence[str] | None = None) -> int:
    t_start = time.perf_counter()
    try:
        args = _parse_args(argv)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        states: dict[str, str] = {}
        if not args.report_only:
            policy = ensure_policy(args, out)
            states = run_arms(args, out, policy, t_start)
            # a report alone leaves the last launch's record of its runs as it was
            (out / "state.json").write_text(json.dumps(states, indent=2))
        # after a launch the runs may still be going: the page lists the breaches; a report alone refuses
        paths = write_reports(out, args.arm_list, args.seed_list, args.metric, args.compare_pair,
                              args.lower_target_list, args.accept_protocol_breaks or not args.report_only,
                              args.arm_setting_list)
    except ExperimentError as e:
        print(f"experiment error: {e}", file=sys.stderr)
        return 2
    for name, st in states.items():
        print(f"[experiment] {name}: {st}")
    if paths:
        print(f"[experiment] report: {paths[-1]}")
        print(paths[-1].read_text())
    unfinished = [n for n, st in states.items() if not st.startswith("finished")]
    if unfinished:
        print(f"[experiment] {len(unfinished)} run(s) not finished; run the same command again to continue")
    return 0 if not any("exit" in st for st in states.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
