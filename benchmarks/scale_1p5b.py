"""The pipeline at Qwen2.5-Coder-1.5B's shape on one GPU: sampler vs the HBM roofline and transformers,
the update's tokens/s, MFU and peak memory vs `memory_plan.py`, compile times, a full LEAP step.

    # one H100, two calls of ~8 minutes (OUT gets a 3 GB checkpoint: keep it off a returned folder)
    python benchmarks/scale_1p5b.py --out /tmp/scale --budget 500 \
        --parts memplan7b,checkpoint,parity,sampler,hf,update,sampler_resume,update_resume
    python benchmarks/scale_1p5b.py --out /tmp/scale --budget 520 --parts checkpoint,step
    python benchmarks/scale_1p5b.py --out /tmp/scale --tiny           # CPU smoke: the tiny shape

Each part runs in its own process (session) under its own time cap (`--caps part=seconds`) and all
together under `--budget` seconds; each appends JSON lines to OUT/results.jsonl (a failed, timed-out
or skipped part writes one line saying so; OUT/PART.log keeps its output), so one failure loses
nothing else. Parts, in order (`--parts` picks some):
  memplan7b      benchmarks/memory_plan.py --shapes 7B --devices 8 on 8 CPU devices (compile only; in
                 the background from the start, it needs no GPU)
  checkpoint     scripts/make_qwen_shaped_checkpoint.py's folder (random bf16 weights, padded BPE) in OUT/ckpt
  parity         tests/leap_jax/test_scale_gpu.py on that folder: leap_jax vs transformers fp32 logits
  sampler        leap_jax's Sampler on it (bf16): ROWS rows, PROMPT-token prompts, NEW new tokens, no stop;
                 tokens/s against the roofline = rows / (bytes one decode step must read / bandwidth),
                 bytes = bf16 weights + the K/V of every row at its length (prompt + the step's tokens,
                 averaged over the steps); bandwidth nominal (--hbm-tbs, H100 SXM HBM3 3.35) and measured
                 (a large on-device copy); cold compile (an empty persistent cache)
  hf             transformers' generate (torch bf16, SDPA) on the same folder, prompts and lengths:
                 dynamic cache, then static cache (its decode torch.compile'd by transformers)
  update         the jitted LEAP update (make_update, accumulate="scan", donated state, as memory_plan.py)
                 with fp32 master weights, AdamW, bf16 compute, remat: tokens/s, model FLOPs (6N + causal
                 attention per token, no recompute) / time / --peak-tflops (989: H100 SXM dense bf16), XLA's
                 own FLOP count (with the recompute), the allocator's peak bytes against memory_plan.plan's
                 compiled estimate of the same program; cold compile
  sampler_resume, update_resume
                 the same in a new process on the persistent cache the cold part filled (what a resumed
                 run compiles)
  step           `python -m leap_jax.main --config configs/qwen2.5-coder-1.5b.yaml model.path=OUT/ckpt`,
                 2 steps with the real cupy environment (the labelled scripted mix on, so DCP and the
                 update have work; random weights write noise to max_new_tokens): per-step time and its
                 split, compile seconds, generated tokens/s, JAX's peak memory (`--step-overrides` adds more)
A summary table of every line is printed at the end (and `--summary OUT` reprints it).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PARTS = ("memplan7b", "checkpoint", "parity", "sampler", "hf", "update", "sampler_resume", "update_resume", "step")
CPU_PARTS = ("memplan7b",)  # need no GPU: run in the background from the start
CAPS = {"checkpoint": 90, "parity": 120, "sampler": 120, "sampler_resume": 60, "update": 180,
        "update_resume": 90, "hf": 200, "step": 420, "memplan7b": 420}
FULL = dict(rows=128, prompt=600, new=768, update_rows=8, update_len=4096, micro_batch=4, steps=3)
TINY = dict(rows=4, prompt=24, new=8, update_rows=2, update_len=64, micro_batch=1, steps=1)
RESULTS = "results.jsonl"


def emit(out: Path, part: str, **fields: Any) -> None:
    """One JSON line for `part` in OUT/results.jsonl (and on stdout)."""
    line = json.dumps({"part": part, **fields}, default=float)
    print(line, flush=True)
    with open(out / RESULTS, "a", encoding="utf-8") as f:
        f.write(line + "\n")


# ------------------------------------------------------------------------------------------ parts
def part_checkpoint(a: argparse.Namespace) -> None:
    ckpt = Path(a.out) / "ckpt"
    if (ckpt / "config.json").is_file():
        emit(a.out, "checkpoint", reused=str(ckpt))
        return
    cmd = [sys.executable, str(ROOT / "scripts" / "make_qwen_shaped_checkpoint.py"), "--out", str(ckpt),
           "--shape", "tiny" if a.tiny else "1.5b"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True)  # its stderr: this part's log
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    emit(a.out, "checkpoint", wall_s=time.perf_counter() - t0, **summary)


def part_parity(a: argparse.Namespace) -> None:
    """tests/leap_jax/test_scale_gpu.py on OUT/ckpt (it skips without a GPU)."""
    env = dict(os.environ, LEAP_SCALE_CKPT=str(Path(a.out) / "ckpt"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                           "tests/leap_jax/test_scale_gpu.py"], capture_output=True, text=True, env=env, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if "logits:" in ln or " passed" in ln or " skipped" in ln
             or " failed" in ln]
    emit(a.out, "parity", rc=proc.returncode, table=lines)
    if proc.returncode != 0:
        raise SystemExit(proc.stdout[-3000:])


def _load_bf16(a: argparse.Namespace):
    from leap_jax.models.hf import load_hf_checkpoint
    return load_hf_checkpoint(str(Path(a.out) / "ckpt"), dtype="bfloat16")


def _prompts(vocab: int, rows: int, length: int):
    import numpy as np
    return np.random.default_rng(0).integers(0, min(vocab, 2000), (rows, length))


def decode_roofline(weight_bytes: int, kv_bytes_per_token: int, rows: int, context: float,
                    bytes_per_s: float) -> float:
    """Tokens/s when every decode step reads the weights once and each row's K/V at `context`."""
    step_bytes = weight_bytes + rows * context * kv_bytes_per_token
    return rows * bytes_per_s / step_bytes


def part_sampler(a: argparse.Namespace, label: str) -> None:
    import jax

    from leap_jax.sampling.params import SamplingParams
    from leap_jax.sampling.sampler import Sampler
    s = TINY if a.tiny else FULL
    rows, prompt, new = a.rows or s["rows"], s["prompt"], s["new"]
    cfg, params = _load_bf16(a)
    weight_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(params))
    kv_per_token = 2 * cfg.num_layers * cfg.kv_dim * 2  # K and V, bf16
    sampler = Sampler(cfg, max_batch=rows, prompt_buckets=(prompt,), max_new_tokens=new, batch_buckets=(rows,))
    prompts = _prompts(cfg.vocab_size, rows, prompt).tolist()
    sp = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, stop_token_ids=())
    t0 = time.perf_counter()
    sampler.generate(params, prompts, sp, rng=0)
    first_s = time.perf_counter() - t0
    best: tuple[float, dict[str, float]] | None = None
    for r in range(a.reps):
        t0 = time.perf_counter()
        out = sampler.generate(params, prompts, sp, rng=r + 1)
        wall = time.perf_counter() - t0
        n_new = sum(len(t) for t in out.tokens)
        if n_new != rows * new:
            raise RuntimeError(f"expected {rows * new} new tokens (no stop ids), got {n_new}")
        if best is None or wall < best[0]:
            best = (wall, dict(sampler.last_timings))
    assert best is not None
    wall, tim = best
    # imported once JAX's backend is up (the module sets a default memory fraction at import)
    from benchmarks.sampler_throughput import measure_bandwidth
    measured_bw = measure_bandwidth((1 << 24) if a.tiny else (1 << 32), reps=5)
    context = prompt + (new - 1) / 2  # a decode step's mean K/V length per row
    decode_tok_s = rows * (new - 1) / tim["decode_s"]
    nominal = decode_roofline(weight_bytes, kv_per_token, rows, context, a.hbm_tbs * 1e12)
    emit(a.out, label, device=jax.devices()[0].device_kind, rows=rows, prompt=prompt, new=new,
         tok_s=rows * new / wall, decode_tok_s=decode_tok_s, prefill_s=tim["prefill_s"],
         decode_s=tim["decode_s"], ms_per_step=1e3 * tim["decode_s"] / max(new - 1, 1),
         first_call_s=first_s, compile_s=first_s - wall, weight_bytes=weight_bytes,
         kv_bytes_per_token=kv_per_token, mean_context=context, hbm_tbs_nominal=a.hbm_tbs,
         hbm_tbs_measured=measured_bw / 1e12, roofline_tok_s_nominal=nominal,
         roofline_tok_s_measured=decode_roofline(weight_bytes, kv_per_token, rows, context, measured_bw),
         roofline_frac_nominal=decode_tok_s / nominal,
         roofline_128rows_2k_nominal=decode_roofline(weight_bytes, kv_per_token, 128, 2048, a.hbm_tbs * 1e12))


def part_hf(a: argparse.Namespace) -> None:
    import torch
    import transformers
    s = TINY if a.tiny else FULL
    rows, prompt, new = a.rows or s["rows"], s["prompt"], s["new"]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(Path(a.out) / "ckpt"), dtype=torch.bfloat16, attn_implementation="sdpa").to(device).eval()
    ids = torch.from_numpy(_prompts(model.config.vocab_size, rows, prompt)).to(device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for cache in (("dynamic", "static") if device == "cuda" else ("dynamic",)):
        kw: dict[str, Any] = dict(attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                                  do_sample=True, temperature=1.0, top_p=1.0, top_k=0, pad_token_id=0)
        if cache == "static":
            kw["cache_implementation"] = "static"
        with torch.inference_mode():
            t0 = time.perf_counter()
            model.generate(ids, **kw)
            sync()
            first_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            res = model.generate(ids, **kw)
            sync()
            wall = time.perf_counter() - t0
        n_new = int(res.shape[1] - prompt)
        emit(a.out, "hf", cache=cache, rows=rows, prompt=prompt, new=n_new, tok_s=rows * n_new / wall,
             seconds=wall, first_call_s=first_s, transformers=transformers.__version__,
             torch=torch.__version__, device=device)


def model_flops_per_token(cfg: Any, length: int) -> float:
    """Training FLOPs per token without recompute: 6 x the matmul parameters (the tied embedding
    counted once, as the output head) + causal attention (QK^T and PV over (length + 1) / 2 keys)."""
    return 6.0 * cfg.num_params() + 6.0 * cfg.num_layers * cfg.q_dim * (length + 1)


def part_update(a: argparse.Namespace, label: str) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from leap_jax.train.update import make_update
    s = TINY if a.tiny else FULL
    rows, length, mb = s["update_rows"], s["update_len"], s["micro_batch"]
    from leap_jax.models.hf import load_hf_checkpoint
    cfg, model = load_hf_checkpoint(str(Path(a.out) / "ckpt"), dtype="float32", compute_dtype="bfloat16")
    cfg = cfg.replace(remat=True)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-6))
    params = {"model": model}
    opt_state = tx.init(params)
    rng = np.random.default_rng(0)
    toks = rng.integers(0, min(cfg.vocab_size, 2000), (rows, length))
    batch = {"tokens": toks, "positions": np.broadcast_to(np.arange(length), (rows, length)),
             "segment_ids": np.ones((rows, length)), "targets": np.roll(toks, -1, axis=1),
             "mask": np.ones((rows, length), bool), "old_logp": np.full((rows, length), -11.0),
             "advantages": rng.standard_normal((rows, length))}
    dtypes = {"mask": jnp.bool_, "old_logp": jnp.float32, "advantages": jnp.float32}
    batch = {k: jnp.asarray(v, dtypes.get(k, jnp.int32)) for k, v in batch.items()}
    update = make_update(cfg, tx, lambda step: 1e-6, micro_batch_size=mb, donate=True, accumulate="scan")
    times = []
    for _ in range(1 + s["steps"]):
        t0 = time.perf_counter()
        params, opt_state, metrics = update(params, opt_state, batch)
        jax.block_until_ready((params, metrics))
        times.append(time.perf_counter() - t0)
    step_s = min(times[1:])
    stats = jax.devices()[0].memory_stats() or {}
    peak = stats.get("peak_bytes_in_use")
    del params, opt_state
    tokens = rows * length
    flops = model_flops_per_token(cfg, length) * tokens
    fields: dict[str, Any] = dict(
        device=jax.devices()[0].device_kind, rows=rows, length=length, micro_batch=mb,
        params=cfg.num_params(), step_s=step_s, first_call_s=times[0], compile_s=times[0] - step_s,
        tok_s=tokens / step_s, model_tflops=flops / 1e12, model_tflop_s=flops / step_s / 1e12,
        mfu=flops / step_s / (a.peak_tflops * 1e12), peak_gib=None if peak is None else peak / 2**30)
    if label == "update":  # the plan compiles the same program abstractly: compare after measuring
        from benchmarks.memory_plan import plan
        p = plan(cfg, 1, rows, length, mb)
        fields.update(plan_gib=p["total"], plan_args_gib=p["args"], plan_temp_gib=p["temp"],
                      xla_tflops=p["tflops"], hw_tflop_s=p["tflops"] / step_s,
                      plan_vs_peak=None if peak is None else p["total"] / (peak / 2**30))
    emit(a.out, label, **fields)


STEP_KEYS = ("time/step", "time/generate", "time/evaluate", "time/update", "time/compile", "time/compile_generate",
             "time/compile_update", "tokens/generated", "update/rows", "update/seq_len", "update/trainable_tokens",
             "env/evaluations", "rollout/scripted_frac")


def part_step(a: argparse.Namespace) -> None:
    import shutil

    from leap_jax.main import main as leap_main
    shutil.rmtree(Path(a.out) / "run", ignore_errors=True)  # a fresh run, never a resume of an earlier one
    args = ["--config", str(ROOT / "configs" / "qwen2.5-coder-1.5b.yaml"), f"model.path={Path(a.out) / 'ckpt'}",
            f"train.run_dir={Path(a.out) / 'run'}", "train.steps=2", "rollout.scripted_mix.enabled=true",
            "logging.progress_bar=false", "logging.tensorboard=false", "logging.report=false",
            "checkpoint.enabled=false", *a.step_overrides]
    t0 = time.perf_counter()
    rc = leap_main(args)
    wall = time.perf_counter() - t0
    import jax
    peak = (jax.devices()[0].memory_stats() or {}).get("peak_bytes_in_use")
    emit(a.out, "step", summary=True, rc=rc, wall_s=wall, jax_peak_gib=None if peak is None else peak / 2**30,
         overrides=args[2:])


def emit_step_records(out: Path) -> None:
    """The step part's per-step records from its run's metrics file, written after each step, so a
    step part cut at its cap still reports the steps it finished."""
    from leap_jax.train.metrics import read_metrics
    for r in read_metrics(Path(out) / "run"):
        rec = {k: r.get(k) for k in STEP_KEYS}
        gen = r.get("time/generate") or 0.0
        rec["gen_tok_s"] = (r.get("tokens/generated") or 0.0) / gen if gen else None
        emit(out, "step", step=r.get("step"), **rec)


def part_memplan7b(a: argparse.Namespace) -> None:
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=8")
    cmd = [sys.executable, str(ROOT / "benchmarks" / "memory_plan.py"), "--shapes", "26M" if a.tiny else "7B",
           "--devices", "8"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith("| ") and "---" not in ln]
    emit(a.out, "memplan7b", command=" ".join(cmd[1:]), table=rows)


def run_part(a: argparse.Namespace) -> None:
    name = a.part
    if name in ("sampler", "sampler_resume", "update", "update_resume"):
        import jax
        jax.config.update("jax_compilation_cache_dir", str(Path(a.out) / f"jax_cache_{name.split('_')[0]}"))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    if name.startswith("sampler"):
        part_sampler(a, name)
    elif name.startswith("update"):
        part_update(a, name)
    else:
        {"checkpoint": part_checkpoint, "parity": part_parity, "hf": part_hf, "step": part_step,
         "memplan7b": part_memplan7b}[name](a)


# ------------------------------------------------------------------------------------------ driver
def summary(out: Path) -> str:
    lines = []
    path = out / RESULTS
    for raw in (path.read_text().splitlines() if path.is_file() else []):
        r = json.loads(raw)
        short = {k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in r.items()
                 if k not in ("part", "log_tail") and not isinstance(v, (list, dict))}
        lines.append(f"{r['part']:<15} " + ", ".join(f"{k}={v}" for k, v in short.items()))
        lines += [f"{'':<15} {row}" for row in r.get("table", [])]
    return "\n".join(lines)


def _start(cmd: list[str], log_path: Path, env: dict[str, str]) -> subprocess.Popen:
    """A part's process in its own session, so a timeout ends its children too (env workers)."""
    log = open(log_path, "w", encoding="utf-8")  # noqa: SIM115 - closed by _finish
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True)


def _finish(out: Path, part: str, proc: subprocess.Popen, cap: float) -> bool:
    """Wait up to `cap` seconds; on a timeout end the part's process group. Records a failure line."""
    try:
        rc: int | None = proc.wait(timeout=max(cap, 0.1))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        rc = None
    if proc.stdout is not None:
        proc.stdout.close()
    if rc != 0:
        tail = (out / f"{part}.log").read_text(errors="replace")[-1500:]
        emit(out, part, failed=True, timed_out=rc is None, cap_s=cap, rc=rc, log_tail=tail)
    return rc == 0


def drive(a: argparse.Namespace, argv: list[str]) -> int:
    """Every part in its own process: CPU-only parts in the background from the start, the GPU
    parts one after another, each under min(its cap, what is left of --budget)."""
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    caps = dict(CAPS)
    for item in a.caps:
        k, _, v = item.partition("=")
        if k not in caps or not v.isdigit():
            raise SystemExit(f"--caps {item!r}: expected PART=SECONDS with PART one of {PARTS}")
        caps[k] = int(v)
    parts = a.parts.split(",") if a.parts else [p for p in PARTS if not (a.tiny and p in ("step", "parity"))]
    for p in parts:
        if p not in PARTS:
            raise SystemExit(f"--parts: unknown part {p!r}; expected some of {PARTS}")
    env = dict(os.environ)
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    if a.tiny:
        env.setdefault("JAX_PLATFORMS", "cpu")
    end = time.monotonic() + a.budget
    ok = {}

    def command(p: str) -> list[str]:
        return [sys.executable, os.path.abspath(__file__), *argv, "--part", p]
    background = {p: (_start(command(p), out / f"{p}.log", env), time.monotonic()) for p in parts if p in CPU_PARTS}
    for p in parts:
        if p in CPU_PARTS:
            continue
        left = end - time.monotonic()
        if left < 10:
            emit(out, p, failed=True, skipped=f"--budget {a.budget} s spent")
            ok[p] = False
            continue
        t0 = time.monotonic()
        ok[p] = _finish(out, p, _start(command(p), out / f"{p}.log", env), min(caps[p], left))
        if p == "step":
            emit_step_records(out)
        print(f"[scale] {p}: {'ok' if ok[p] else 'FAILED'} in {time.monotonic() - t0:.1f} s", flush=True)
    for p, (proc, t0) in background.items():
        ok[p] = _finish(out, p, proc, min(caps[p] - (time.monotonic() - t0), end - time.monotonic()))
        print(f"[scale] {p} (background): {'ok' if ok[p] else 'FAILED'}", flush=True)
    print(summary(out))
    return 0 if all(ok.values()) else 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="results folder (results.jsonl, logs, ckpt/)")
    ap.add_argument("--tiny", action="store_true", help="the tiny shape on CPU (a smoke run)")
    ap.add_argument("--parts", default=None, help=f"comma list of {PARTS} (default: all; --tiny: all but step)")
    ap.add_argument("--caps", nargs="*", default=[], help="PART=SECONDS time caps")
    ap.add_argument("--budget", type=float, default=460.0,
                    help="seconds for all parts together; a part that finds less than 10 s left is skipped")
    ap.add_argument("--rows", type=int, default=None, help="sampler / transformers rows (default 128)")
    ap.add_argument("--reps", type=int, default=2, help="timed sampler calls (the best is reported)")
    ap.add_argument("--hbm-tbs", type=float, default=3.35, help="nominal HBM TB/s (H100 SXM 3.35, H200 4.8)")
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak (H100 SXM 989)")
    ap.add_argument("--step-overrides", nargs="*", default=[], help="extra dotted overrides of the step part")
    ap.add_argument("--summary", action="store_true", help="print OUT/results.jsonl as a table and exit")
    ap.add_argument("--part", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.summary:
        print(summary(a.out))
        return 0
    if a.part is None:
        return drive(a, argv)
    a.out.mkdir(parents=True, exist_ok=True)
    run_part(a)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
