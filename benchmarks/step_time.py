"""Seconds per RL step, by phase, with the former update/sampler path ("before") and the new one
("after") side by side in one run: the real `Trainer.train_step` (generate, evaluate, update).

Arms (each a fresh Trainer on the same config, seed and evaluation pool):
  before   optimizer.pack=false drop_zero_advantage=false accumulate=scan, sampling.buckets=fine,
           no persistent compilation cache (the former behaviour)
  after    the defaults: packed update rows, zero-advantage conversations left out, the
           per-micro-batch update loop, coarse sampler buckets, a fresh persistent compile cache
  resume   `after` again in a new Trainer on the same compile cache: what a resumed run compiles
Per arm: total compile seconds (all steps), then means over the steps after --warmup of: step,
generate, evaluate and update seconds (step, generate, update net of compilation), generated tokens/s,
update rows x length, padded slots, real and trainable tokens, slots per trainable token.

H200 (the experiment's GRPO arm and its 26M SFT policy at runs/experiment/policy; ~3 minutes):
    timeout 235 python benchmarks/step_time.py --config configs/experiment/grpo.yaml --steps 2 --warmup 1
Without that policy: `--model-shape experiment` (random weights of its shape; the tokenizer of
model.path if present, else a BPE trained on the suite) or `--model-shape qwen0.5b` (Qwen2-0.5B).
Random weights never stop early (every row generates max_new_tokens) and solve nothing, so every
advantage is 0: the `after` arm then keeps zero-advantage rows (packing alone is compared).
CPU smoke (tiny random model, oracle evaluator, scripted mix; ~2-4 minutes on a loaded machine):
    python benchmarks/step_time.py --tiny
Dotted overrides apply to every arm, e.g. `rollout.prompts_per_step=4`. `--arms after,resume` runs a
subset; `--arm 'NAME: k=v ...'` adds an arm of the defaults plus overrides (it reuses after's compile
cache, so its compile seconds count only its new programs), e.g. the options not on by default:
    --arm 'cudnn: optimizer.attention=cudnn' --arm 'k1: sampling.steps_per_iter=1 sampling.speculate=0'
Arms share one evaluation pool (no result cache, so each evaluates all its rows); an arm whose overrides
change the pool's arguments (`env.compile_workers=15`) gets its own, started before its clock.
`--trace ARMS` traces one more rollout of those arms after their steps (left out of the means) and
prints the GPU's busy share of its wall time (kernels' union over streams) and the kernel families per
decode iteration: a kernel-bound rollout keeps the GPU busy, a host-bound one leaves gaps.
`--json` prints the records instead of the table. `--rollout-only` times generation and evaluation
alone (no update; its columns read 0), e.g. rollout schedules on the CPU, where the update is slow.
`decode loop iterations` counts decode loop iterations: the longest row per plain call, the verify
passes of a speculative one.
KV reuse across turns (opt-in `sampling.kv_reuse`: a debugging turn prefills only its feedback on
top of the conversation's kept cache) next to the default, on a multi-turn arm's config:
    timeout 560 python benchmarks/step_time.py --config configs/generated/multiturn.yaml --arms after,kvreuse \
        --steps 2 --warmup 1
`prefill tokens` counts the prompt tokens run through prefill, `reused tokens` those whose kept K/V
a later turn used instead.
Turn pipelining (opt-in `rollout.pipeline_turns`: a row's next turn generates as soon as it is decided,
next to other rows' earlier turns, rollout/pipelined.py) next to the default, on a multi-turn arm's config:
    timeout 560 python benchmarks/step_time.py --config configs/generated/multiturn.yaml --arms after,pipelined \
        --steps 2 --warmup 1
Both together (`pkv`), with one generate call per turn (`pkv1c`), and
an update of larger micro-batches for a run that has the GPU alone:
    timeout 560 python benchmarks/step_time.py --config configs/generated/multiturn.yaml \
        --arms after,pkv,pkv1c --arm 'pkv1c16k: rollout.pipeline_turns=true sampling.kv_reuse=true \
        rollout.overlap_chunks=1 optimizer.micro_batch_tokens=16384' --steps 2 --warmup 1
(the decode loop is bound by its kernels' count, not its rows: one call of all a turn's rows runs
about as fast per step as one of half of them, so `pkv1c` halves the sequential decode loops)
Update lag (`lag1`: rollout.update_lag=1, off-policy by one update; a run's first step updates
nothing, so such an arm warms up one step more than --warmup) against the on-policy step, e.g. on GRPO's config:
    python benchmarks/step_time.py --config configs/generated/grpo.yaml --arms after,lag1 --steps 4 --warmup 1
Preemption on top (`pkvp`, `pkv1cp`: a call ends once a quarter of its rows still generate, and those
continue in the next call next to newly ready turns, so a few long rows stop holding back the rest):
    timeout 560 python benchmarks/step_time.py --config configs/generated/multiturn.yaml \
        --arms pkv,pkvp,pkv1c,pkv1cp --steps 2 --warmup 1
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernels_env.core.result import EVAL_STAGES  # noqa: E402  (the repository root is on the path now)

PIPELINED = ["rollout.pipeline_turns=true"]
KV_REUSE = ["sampling.kv_reuse=true"]
PREEMPT = ["rollout.preempt=0.25"]
ARMS = {
    "before": ["optimizer.pack=false", "optimizer.drop_zero_advantage=false", "optimizer.accumulate=scan",
               "sampling.buckets=fine", "train.compile_cache=false"],
    "after": [],
    "resume": [],
    # opt-in KV reuse across turns (sampling/prefix.py): later turns prefill only their new tokens
    "kvreuse": KV_REUSE,
    # opt-in turn pipelining (rollout/pipelined.py): later turns generate as soon as they are decided
    "pipelined": PIPELINED,
    # the fastest measured multi-turn arm (docs/performance.md): pipelined turns and
    # KV reuse, then the same with one generate call per turn
    "pkv": PIPELINED + KV_REUSE,
    "pkv1c": PIPELINED + KV_REUSE + ["rollout.overlap_chunks=1"],
    # opt-in preemption (rollout.preempt, rollout/pipelined.py): a generate call ends once a quarter
    # of its rows still generate; they continue next to newly ready turns
    "pkvp": PIPELINED + KV_REUSE + PREEMPT,
    "pkv1cp": PIPELINED + KV_REUSE + PREEMPT + ["rollout.overlap_chunks=1"],
    # opt-in update lag (rollout.update_lag=1, with pipelined turns): a step's last evaluations run while
    # the next step generates; each step updates on the previous step's rollouts (one update stale)
    "lag1": PIPELINED + ["rollout.update_lag=1"],
}
SHAPES = {
    "experiment": dict(hidden_size=512, intermediate_size=1536, num_layers=8, num_heads=8, num_kv_heads=4,
                       rope_theta=10000.0, tie_word_embeddings=True, qkv_bias=False),
    "qwen0.5b": dict(hidden_size=896, intermediate_size=4864, num_layers=24, num_heads=14, num_kv_heads=2,
                     rope_theta=1000000.0, tie_word_embeddings=True, qkv_bias=True),
}
TINY = ["model.source=random", "model.hidden_size=32", "model.intermediate_size=64", "model.num_layers=2",
        "model.num_heads=2", "model.num_kv_heads=1", "model.dtype=float32", "model.param_dtype=float32",
        "tokenizer.kind=bpe", "tokenizer.vocab_size=600", "tasks.names=[relu, tanh, sigmoid]",
        "tasks.held_out_fraction=0", "algorithm.name=multiturn", "rollout.group_size=4",
        "rollout.max_turns=2", "rollout.prompts_per_step=2", "rollout.max_context_tokens=2048",
        "rollout.scripted_mix.enabled=true", "rollout.scripted_mix.fraction=0.5", "sampling.max_new_tokens=16",
        "optimizer.micro_batch_size=2", "optimizer.pad_to_multiple=256", "optimizer.lr=1e-3",
        "env.sizes=small", "env.backend=cpu", "env.pool_mode=inline", "env.timing=false",
        "env.correctness_trials=1", "logging.progress_bar=false", "logging.tensorboard=false"]


def shape_overrides(shape: str, cfg_path: str | None) -> list[str]:
    """model.source=random of `shape`, keeping the config's tokenizer when its files exist."""
    from leap_jax.train.config import load_config
    base = load_config(cfg_path, [])
    out = ["model.source=random"] + [f"model.{k}={v}" for k, v in SHAPES[shape].items()]
    out += ["model.dtype=bfloat16", "model.param_dtype=float32", "optimizer.drop_zero_advantage=false"]
    tok = Path(base.tokenizer.path or base.model.path or "") / "tokenizer.json"
    if base.tokenizer.kind == "hf" and tok.is_file():
        out += ["tokenizer.kind=file", f"tokenizer.path={tok}"]
    elif base.tokenizer.kind == "hf":
        out += ["tokenizer.kind=bpe", "tokenizer.vocab_size=4096"]
    return out


def reset_compile_cache(path: str | None) -> None:
    import jax
    jax.config.update("jax_compilation_cache_dir", path)
    try:
        from jax._src import compilation_cache
        compilation_cache.reset_cache()
    except Exception:
        pass


def rollout_record(tr) -> dict:
    """One step of generation and evaluation alone (`Trainer.rollout_step`, no update), in
    train_step's metric names: for comparing rollout schedules where the update is slow (the CPU)."""
    from leap_jax.train.compile_clock import compile_seconds
    c0, t0 = compile_seconds(), time.perf_counter()
    _, out = tr.rollout_step()
    t1 = time.perf_counter()
    tr.step += 1
    compile_s = min(compile_seconds() - c0, t1 - t0)
    st = out.stats
    rec = {"time/step": t1 - t0, "time/compile": compile_s, "time/compile_generate": compile_s,
           "time/compile_update": 0.0, "time/generate": st["time/generate"], "time/update": 0.0,
           "time/evaluate": st["time/evaluate_wait"] + st["time/evaluate_submit"],
           "tokens/generated": st["tokens/generated"],
           **{k: v for k, v in st.items() if k.startswith("env/")}}
    rec.update(tr.sampler_counter_deltas())
    return rec


TOP_KERNELS = 15  # the traced rollout's costliest kernels printed by name


def traced_rollout(tr) -> dict:
    """One more rollout (generate + evaluate, no update) under `jax.profiler.trace`: its wall
    seconds, the GPU's busy seconds (kernels' union) and kernel families per decode iteration, to tell
    a kernel-bound rollout (busy ~ wall) from one that waits on the host between kernels."""
    import jax
    from benchmarks import decode_profile
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d, create_perfetto_trace=True):
            rec = rollout_record(tr)  # its clock leaves the trace's writing out
        prof = decode_profile.read_perfetto(d)
    wall, iters = rec["time/step"], max(rec.get("sampler/decode_iterations", 0.0), 1.0)
    busy = prof["device_busy_us"] / 1e6
    return {"wall_s": wall, "gpu_busy_s": busy, "gpu_busy_frac": busy / wall if wall > 0 else 0.0,
            "generate_s": float(rec["time/generate"]), "decode_iterations": float(iters),
            "families": decode_profile.families(prof["by_kernel"], prof["kernel_count"], iters),
            "top_kernels": sorted(((k[1], us / iters, prof["kernel_count"][k] / iters)
                                   for k, us in prof["by_kernel"].items() if decode_profile.is_device(k[0])),
                                  key=lambda t: -t[1])[:TOP_KERNELS]}


class ArmPools:
    """The arms' evaluation pools: one for every arm with the same pool arguments (worker start-up
    paid once), another where an arm's overrides change them (e.g. `env.compile_workers=15`); none
    keeps a result cache, so every arm evaluates all its rows. A pool closes after its last arm."""

    def __init__(self, cfg_path: str | None, overrides: list[str], arms: list[str], tiny: bool = False):
        from leap_jax.train.config import load_config
        self.tiny = tiny
        self.cfgs = {a: load_config(cfg_path, overrides + ARMS[a]) for a in arms}
        self.keys = {a: self.key(a) for a in arms}
        self.left = list(arms)  # arms not yet done, in order
        self.pools: dict[str, object] = {}

    def key(self, arm: str) -> str:
        return "oracle" if self.tiny else repr(sorted(self.cfgs[arm].env.pool_kwargs().items()))

    def get(self, arm: str):
        k = self.keys[arm]
        if k not in self.pools:
            if self.tiny:
                from tests.leap_jax._trainer_helpers import OracleEvaluator
                self.pools[k] = OracleEvaluator()
            else:
                from kernels_env.schedule.pool import EvalPool
                from leap_jax.train.trainer import env_config
                cfg = self.cfgs[arm]
                self.pools[k] = EvalPool(**{**cfg.env.pool_kwargs(), "cache": False}, config=env_config(cfg))
        return self.pools[k]

    def done(self, arm: str) -> None:
        self.left.remove(arm)
        k = self.keys[arm]
        if k in self.pools and all(self.keys[a] != k for a in self.left):
            self._close(self.pools.pop(k))

    def close(self) -> None:
        while self.pools:
            self._close(self.pools.popitem()[1])

    @staticmethod
    def _close(pool) -> None:
        if hasattr(pool, "close"):
            pool.close()


def run_arm(name: str, cfg_path: str | None, overrides: list[str], evaluator, steps: int, warmup: int,
            work: Path, cache_dir: Path, rollout_only: bool = False, trace: bool = False) -> dict:
    from leap_jax.train.config import load_config
    from leap_jax.train.trainer import Trainer
    ov = overrides + ARMS[name] + [f"train.run_dir={work / name}", "checkpoint.enabled=false",
                                   f"train.compile_cache_dir={cache_dir}", "train.steps=1000",
                                   "train.time_budget_s=null"]
    cfg = load_config(cfg_path, ov)
    # with rollout.update_lag the first update (and its compilation) comes that many steps later
    warmup += 0 if rollout_only else cfg.rollout.update_lag
    reset_compile_cache(None)  # each arm decides: before none, after a fresh dir, resume the same
    t0 = time.perf_counter()
    tr = Trainer(cfg, evaluator=evaluator, resume=False)
    build_s = time.perf_counter() - t0
    recs = []
    traced = None
    try:
        for _ in range(warmup + steps):
            recs.append(rollout_record(tr) if rollout_only else tr.train_step())
        if trace:
            traced = traced_rollout(tr)
    finally:
        tr.close()
    res = summarise(name, recs, warmup, build_s)
    if traced is not None:
        print(f"[step_time] {name} traced rollout: wall {traced['wall_s']:.2f} s (generate "
              f"{traced['generate_s']:.2f} s), GPU busy {traced['gpu_busy_s']:.2f} s "
              f"({traced['gpu_busy_frac']:.0%}), {traced['decode_iterations']:.0f} decode iterations; "
              "kernel families per decode iteration:", file=sys.stderr)
        for fam, us, n in traced["families"]:
            print(f"    {fam:28s} {us:8.1f} us in {n:6.1f} kernels", file=sys.stderr)
        print(f"  the {TOP_KERNELS} costliest kernels per decode iteration:", file=sys.stderr)
        for kname, us, n in traced["top_kernels"]:
            print(f"    {us:8.1f} us in {n:6.1f}  {kname[:110]}", file=sys.stderr)
        res.update({"trace_wall_s": traced["wall_s"], "trace_gpu_busy_s": traced["gpu_busy_s"],
                    "trace_gpu_busy_frac": traced["gpu_busy_frac"]})
    return res


def summarise(name: str, recs: list[dict], warmup: int, build_s: float) -> dict:
    steady = recs[warmup:] or recs

    def mean(key, sub=None):
        vals = [float(r.get(key) or 0.0) - (float(r.get(sub) or 0.0) if sub else 0.0) for r in steady]
        return sum(vals) / len(vals)

    gen_tok = mean("tokens/generated")
    gen_s = mean("time/generate", "time/compile_generate")
    slots, trainable = mean("update/slots"), mean("update/trainable_tokens")
    step_s, eval_s, update_s = mean("time/step", "time/compile"), mean("time/evaluate"), \
        mean("time/update", "time/compile_update")
    feedback_s = mean("time/feedback")
    return {
        "arm": name, "steps": len(recs), "build_s": build_s,
        "compile_s": sum(float(r["time/compile"]) for r in recs),
        "compile_generate_s": sum(float(r["time/compile_generate"]) for r in recs),
        "compile_update_s": sum(float(r["time/compile_update"]) for r in recs),
        "step_s": step_s, "generate_s": gen_s, "evaluate_s": eval_s, "update_s": update_s,
        # the feedback texts, and the rest: the host's orchestration (prompts, DCP, credit, batch)
        "feedback_s": feedback_s, "rest_s": step_s - gen_s - eval_s - update_s - feedback_s,
        "batch_s": mean("time/batch"),  # of the rest: credit and the update batch's packing
        "gen_tokens": gen_tok, "gen_tok_per_s": gen_tok / gen_s if gen_s > 0 else 0.0,
        "decode_calls": mean("sampler/decode_calls"), "decode_iterations": mean("sampler/decode_iterations"),
        "truncated_rows": mean("sampler/truncated_rows"), "preempted_rows": mean("sampler/preempted_rows"),
        "prefill_tokens": mean("sampler/prefill_tokens"), "reused_tokens": mean("sampler/kv_reused_tokens"),
        "draft_accepted": mean("sampler/draft_accepted"),
        "rows": mean("update/rows"), "seq_len": mean("update/seq_len"), "slots": slots,
        "real_tokens": mean("update/real_tokens"), "trainable": trainable,
        "all_trainable": mean("update/all_trainable_tokens"),
        "dropped_conv": mean("update/dropped_conversations"),
        "slots_per_trainable": slots / trainable if trainable else 0.0,
        "reward": mean("reward/mean"),
        # the step's evaluations and their workers' seconds per stage, summed (not wall: they overlap)
        "evaluations": mean("env/evaluations"), "cache_hits": mean("env/cache_hits"),
        **{f"env_{stage}_s": mean(f"env/stage_s/{stage}") for stage in EVAL_STAGES},
    }


ROWS = [("compile s (all steps)", "compile_s", "{:.1f}"), ("  of it generate", "compile_generate_s", "{:.1f}"),
        ("  of it update", "compile_update_s", "{:.1f}"), ("step s (steady, no compile)", "step_s", "{:.2f}"),
        ("  generate s", "generate_s", "{:.2f}"), ("  evaluate s", "evaluate_s", "{:.2f}"),
        ("  update s", "update_s", "{:.3f}"), ("  feedback s", "feedback_s", "{:.3f}"),
        ("  rest s (host orchestration)", "rest_s", "{:.3f}"), ("    of it credit and batch", "batch_s", "{:.3f}"),
        ("generated tokens", "gen_tokens", "{:.0f}"),
        ("generate tokens/s", "gen_tok_per_s", "{:.0f}"), ("  decode calls", "decode_calls", "{:.1f}"),
        ("  decode loop iterations", "decode_iterations", "{:.0f}"),
        ("  rows cut at max_new_tokens", "truncated_rows", "{:.1f}"),
        ("  rows preempted (continued)", "preempted_rows", "{:.1f}"),
        ("  prefill tokens", "prefill_tokens", "{:.0f}"), ("  reused tokens (kv_reuse)", "reused_tokens", "{:.0f}"),
        ("  draft tokens accepted (speculate)", "draft_accepted", "{:.0f}"),
        ("update rows", "rows", "{:.1f}"),
        ("update seq_len", "seq_len", "{:.0f}"), ("update slots (padded)", "slots", "{:.0f}"),
        ("update real tokens", "real_tokens", "{:.0f}"), ("update trainable tokens", "trainable", "{:.0f}"),
        ("  trainable, all conversations", "all_trainable", "{:.0f}"),
        ("conversations dropped (adv 0)", "dropped_conv", "{:.1f}"),
        ("slots / trainable token", "slots_per_trainable", "{:.2f}"), ("reward mean", "reward", "{:.3f}"),
        ("evaluations", "evaluations", "{:.1f}"), ("  result-cache hits", "cache_hits", "{:.1f}"),
        *[(f"  env {stage} s (summed over evaluations)", f"env_{stage}_s", "{:.2f}") for stage in EVAL_STAGES],
        ("trainer build s", "build_s", "{:.1f}")]


def table(results: list[dict]) -> str:
    w = max(len(r[0]) for r in ROWS) + 2
    col = max([12] + [len(r["arm"]) + 2 for r in results])  # a long arm name keeps a space before it
    lines = ["".ljust(w) + "".join(r["arm"].rjust(col) for r in results)]
    for label, key, fmt in ROWS:
        lines.append(label.ljust(w) + "".join(fmt.format(r[key]).rjust(col) for r in results))
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=None, help="run config (default configs/experiment/grpo.yaml; "
                    "none with --tiny)")
    ap.add_argument("--model-shape", choices=["config", *SHAPES], default="config",
                    help="config: the config's model; else random weights of that shape")
    ap.add_argument("--tiny", action="store_true", help="CPU smoke: tiny random model, oracle evaluator")
    ap.add_argument("--steps", type=int, default=2, help="timed steps per arm (after --warmup)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed first steps per arm (compilation)")
    ap.add_argument("--arms", default="before,after,resume")
    ap.add_argument("--arm", action="append", default=[], metavar="'NAME: k=v k=v'",
                    help="an extra arm after --arms: the defaults plus these overrides, on after's "
                    "compile cache (e.g. 'cudnn: optimizer.attention=cudnn'); repeatable")
    ap.add_argument("--workdir", default=None, help="run dirs and compile cache (default: a temp dir)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--rollout-only", action="store_true",
                    help="generate and evaluate only (no update): rollout schedules compared where the "
                    "update is slow, e.g. on the CPU; update columns read 0")
    ap.add_argument("--trace", default="", metavar="ARMS",
                    help="comma-separated arms that trace one more rollout after their steps (not in "
                    "the means): the GPU's busy share of its wall time and kernel families")
    ap.add_argument("overrides", nargs="*", help="dotted config overrides for every arm")
    args = ap.parse_args(argv)
    arms = [a for a in args.arms.split(",") if a]
    for spec in args.arm:
        name, _, rest = spec.partition(":")
        if not name.strip() or name.strip() in ARMS:
            ap.error(f"--arm {spec!r}: expected 'NAME: k=v ...' with a new NAME")
        ARMS[name.strip()] = rest.split()
        arms.append(name.strip())
    for a in arms:
        if a not in ARMS:
            ap.error(f"unknown arm {a!r}; expected some of {','.join(ARMS)}")
    cfg_path = None if args.tiny and args.config is None else (args.config or "configs/experiment/grpo.yaml")
    overrides = list(TINY if args.tiny else [])
    if args.model_shape != "config":
        overrides += shape_overrides(args.model_shape, cfg_path)
    overrides += args.overrides

    from leap_jax.main import set_memory_env
    from leap_jax.train.config import load_config
    cfg = load_config(cfg_path, overrides)
    set_memory_env(cfg.env.jax_mem_fraction, cfg.env.jax_preallocate)
    if cfg.model.source == "hf" and not Path(cfg.model.path or "").is_dir():
        sys.exit(f"model.path={cfg.model.path!r} is not a folder: export the experiment policy first or "
                 "pass --model-shape experiment (random weights of its shape)")
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="step_time_"))
    work.mkdir(parents=True, exist_ok=True)
    cache_dir = work / "jax_cache"
    shutil.rmtree(cache_dir, ignore_errors=True)  # `after` measures a cold cache, `resume` a warm one

    pools = ArmPools(cfg_path, overrides, arms, tiny=args.tiny)
    results = []
    try:
        for a in arms:
            evaluator = pools.get(a)  # before the arm's clock: a new pool's start-up is not its step's
            t0 = time.perf_counter()
            res = run_arm(a, cfg_path, overrides, evaluator, args.steps, args.warmup, work, cache_dir,
                          rollout_only=args.rollout_only, trace=a in args.trace.split(","))
            pools.done(a)
            res["wall_s"] = time.perf_counter() - t0
            results.append(res)
            # one line per finished arm, so a run cut short by a timeout still leaves its numbers
            print(f"[step_time] {a}: wall {res['wall_s']:.1f} s " + " ".join(
                f"{k}={v:.3g}" for k, v in res.items() if isinstance(v, float) and k != "wall_s"),
                file=sys.stderr, flush=True)
    finally:
        pools.close()
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        import jax
        print(f"step_time: {cfg_path or 'tiny'} model={args.model_shape} device={jax.devices()[0].device_kind} "
              f"steps={args.steps} (+{args.warmup} warm-up) per arm; workdir {work}")
        print(table(results))
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
