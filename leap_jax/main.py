"""`python -m leap_jax.main --config FILE [dotted.overrides] [--resume RUN_DIR]`: train or evaluate.

The JAX memory settings (DESIGN 3.5: leave room for CuPy env workers on the same GPU) are put in
os.environ from the config BEFORE jax is imported, so this module imports nothing heavy at the top.
`eval.only=true` evaluates a checkpoint on the held-out tasks instead of training. `mode: sft` runs
the supervised warm-up (leap_jax.bootstrap.sft) instead of RL; `model.source: sft` in an RL config
builds (or reuses) that warm-up policy first and starts from it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any
from collections.abc import Sequence


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m leap_jax.main",
                                description="Train (or evaluate) a LEAP policy for CUDA kernels.")
    p.add_argument("--config", help="YAML config file (e.g. configs/smoke.yaml)")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="continue the run in RUN_DIR from its latest checkpoint (its config.yaml is used; "
                        "overrides still apply, e.g. train.steps=200)")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.steps=10 rollout.group_size=4")
    args = p.parse_args(argv)
    if args.config is None and args.resume is None:
        p.error("give --config FILE (or --resume RUN_DIR)")
    return args


def set_memory_env(mem_fraction: float, preallocate: bool) -> None:
    """XLA GPU memory settings; must run before jax is imported (setdefault: the user's env wins)."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", f"{mem_fraction:.3f}")
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "true" if preallocate else "false")


def _fmt(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def summary_lines(records: list[dict[str, Any]], max_turns: int) -> list[str]:
    """The final printed summary: last-step accuracy, DCP savings and per-phase time per step."""
    if not records:
        return ["no steps were run"]
    last = records[-1]
    n = len(records)
    mean = lambda k: (sum(r.get(k) or 0.0 for r in records) / n)  # noqa: E731
    lines = [f"steps run: {n} (last step {last['step']})",
             "last step: " + ", ".join(f"acc@{t}={_fmt(last.get(f'acc@{t}'))}" for t in range(1, max_turns + 1))
             + f", turns/pass={_fmt(last.get('turns_per_pass'))}, fast_1={_fmt(last.get('fast_1'))}",
             f"DCP: activated groups {_fmt(mean('dcp/activated_groups_frac'))} (mean), generation skipped: "
             f"turn-2 rows {_fmt(mean('dcp/skipped_turn2_frac'))}, later row-turns "
             f"{_fmt(mean('dcp/skipped_later_row_turns_frac'))}",
             f"time per step (mean s): step {_fmt(mean('time/step'))}, generate {_fmt(mean('time/generate'))}, "
             f"evaluate {_fmt(mean('time/evaluate'))}, update {_fmt(mean('time/update'))}",
             f"tokens generated {_fmt(sum(r.get('tokens/generated') or 0 for r in records))}, env evaluations "
             f"{_fmt(sum(r.get('env/evaluations') or 0 for r in records))}, env errors "
             f"{_fmt(sum(r.get('env/env_errors') or 0 for r in records))}, scripted share "
             f"{_fmt(mean('rollout/scripted_frac'))}"]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    from leap_jax.train.config import ConfigError, load_config
    try:
        if args.resume:
            cfg_path = Path(args.resume) / "config.yaml"
            if not cfg_path.is_file():
                raise ConfigError(f"--resume {args.resume!r}: no config.yaml there (is it a run directory?)")
            cfg = load_config(cfg_path, [*args.overrides, f"train.run_dir={args.resume}"])
        else:
            cfg = load_config(args.config, args.overrides)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    set_memory_env(cfg.env.jax_mem_fraction, cfg.env.jax_preallocate)

    if cfg.mode == "sft":
        if args.resume:
            print("config error: --resume is for RL runs; an SFT run (mode=sft) starts over", file=sys.stderr)
            return 2
        from leap_jax.bootstrap.sft import EVAL_FILE, run_sft, summary_line
        res = run_sft(cfg)
        print(f"[leap_jax] sft: {summary_line(res)}")
        print(f"[leap_jax] sft: policy in {res['model_dir']}, results in {Path(cfg.train.run_dir) / EVAL_FILE}")
        print(json.dumps({"sft_pass_rate": res["pass_rate"], "final_loss": res["final_loss"]}))
        return 0
    if cfg.model.source == "sft":
        from leap_jax.bootstrap.sft import resolve_sft_init
        try:
            cfg = resolve_sft_init(cfg, log=lambda s: print(s, flush=True))
        except ConfigError as e:
            print(f"config error: {e}", file=sys.stderr)
            return 2

    if cfg.model.source == "hf":
        from leap_jax.bootstrap.shipped_policy import ShippedPolicyError, ensure_shipped_policy
        try:
            ensure_shipped_policy(cfg.model.path, log=lambda s: print(s, flush=True))
        except ShippedPolicyError as e:
            print(f"config error: {e}", file=sys.stderr)
            return 2

    from leap_jax.train.trainer import Trainer
    trainer = Trainer(cfg, resume=bool(args.resume))
    try:
        if cfg.eval.only:
            res = trainer.evaluate()
            keys = [f"acc@{t}" for t in range(1, cfg.eval.turns + 1)] + ["fast_1", "fast_1.2",
                                                                         "speedup/mean_correct"]
            print(f"[leap_jax] eval of checkpoint step {res['checkpoint_step']} on {len(res['tasks'])} "
                  f"{'held-out' if res['held_out'] else 'training'} tasks, {res['samples']} sample(s), "
                  f"{res['turns']} turns")
            print("  " + ", ".join(f"{k}={_fmt(res.get(k))}" for k in keys))
            print(f"  written to {trainer.run_dir / 'eval.json'}")
            return 0
        print(f"[leap_jax] run dir {trainer.run_dir} | algorithm {cfg.algorithm.name} | "
              f"{len(trainer.train_tasks)} train / {len(trainer.held_out)} held-out tasks | "
              f"model {trainer.model_config.num_params() / 1e6:.2f}M params | start step {trainer.step}",
              flush=True)
        from leap_jax.train.env_health import EnvironmentFailure
        try:
            records = trainer.train()
        except EnvironmentFailure as e:
            print(f"[leap_jax] stopped: {e}", file=sys.stderr, flush=True)
            return 1
        for line in summary_lines(records, cfg.rollout.max_turns):
            print("[leap_jax] " + line)
        if cfg.logging.report:
            from leap_jax.experiment.runs_report import write_report
            out = write_report([trainer.run_dir], trainer.run_dir / "report")
            print(f"[leap_jax] report: {', '.join(str(p) for p in out)}")
        if trainer.checkpointer.latest_step() is not None:
            print(f"[leap_jax] checkpoint: step {trainer.checkpointer.latest_step()} in "
                  f"{trainer.checkpointer.directory}")
        print(json.dumps({"final": {k: records[-1].get(k) for k in records[-1] if k.startswith("acc@")}}
                         if records else {"final": None}))
    finally:
        trainer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
