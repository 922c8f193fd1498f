"""Where a decode step's time goes: one traced `Sampler.generate` call, GPU kernel time by kernel.

    python benchmarks/decode_profile.py                       # the experiment's 26M shape, batch 64
    python benchmarks/decode_profile.py --shape qwen0.5b --batch 64
    python benchmarks/decode_profile.py --shape generated --batch 128 --prompt 1024 --new 768 \
        --variants 'einsum:steps_per_iter=4' 'cudec:steps_per_iter=4,attention=cudnn'
    python benchmarks/decode_profile.py --small               # CPU smoke run (tiny model)

Builds a random model of the shape, compiles with one untimed call, then traces one call with
`jax.profiler.trace(create_perfetto_trace=True)` and reads the Perfetto JSON it writes: for each
trace process (host threads, GPU streams) the busy time, and for the device the kernels' families
(gemm, attention, reduce, ...) summed and the kernels that took the most time, per decode step (host
events nest, so their sum exceeds the wall time; kernels on a device stream do not). Wall time per
step against device busy time per step says whether the loop is bound by its kernels (busy ~ wall)
or by launches and host round trips (busy << wall).
Rows never stop early (no stop ids) unless `--stop-ids N`: then ids 3..N+2 stop a row, so with
random weights lengths are about geometric (mean ~vocab/N, cut at --new), the case where compaction
(`compact_factor=4`) continues the live rows alone. Variants of the Sampler options are compared side
by side (`--variants 'k1:steps_per_iter=1' 'k4:steps_per_iter=4' ...`); "steps" are the decode loop
iterations the sampler ran.
"""
from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SHAPES = {
    "experiment": dict(vocab_size=2048, hidden_size=512, intermediate_size=1536, num_layers=8, num_heads=8,
                       num_kv_heads=4, rope_theta=10000.0, tie_word_embeddings=True, qkv_bias=False),
    "qwen0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_layers=24, num_heads=14,
                     num_kv_heads=2, rope_theta=1000000.0, tie_word_embeddings=True, qkv_bias=True),
    # the generated family's SFT policy (artifacts/policies/gen-2026-12-04: Llama, 6 layers, vocab 1949)
    "generated": dict(vocab_size=1949, hidden_size=512, intermediate_size=1536, num_layers=6, num_heads=8,
                      num_kv_heads=4, rope_theta=10000.0, tie_word_embeddings=True, qkv_bias=False),
    "tiny": dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                 num_kv_heads=2, rope_theta=10000.0, tie_word_embeddings=True, qkv_bias=False),
}


def parse_variant(text: str) -> tuple[str, dict[str, int | str]]:
    """'name:key=value,key=value' -> (name, DecodeImpl fields)."""
    name, _, rest = text.partition(":")
    kw: dict[str, int | str] = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise SystemExit(f"variant {text!r}: {item!r} is not key=value")
        kw[key.strip()] = int(value) if value.strip().lstrip("-").isdigit() else value.strip()
    return name.strip() or "default", kw


def read_perfetto(trace_dir: str) -> dict:
    """Busy microseconds per trace process and per (device process, event name) from the newest
    perfetto_trace.json.gz under `trace_dir`."""
    files = sorted(glob.glob(os.path.join(trace_dir, "**", "perfetto_trace.json.gz"), recursive=True),
                   key=os.path.getmtime)
    if not files:
        raise SystemExit(f"no perfetto_trace.json.gz under {trace_dir}")
    with gzip.open(files[-1], "rt") as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    names = {e["pid"]: e.get("args", {}).get("name", str(e["pid"]))
             for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    busy: dict[str, float] = collections.defaultdict(float)
    count: dict[str, int] = collections.defaultdict(int)
    by_kernel: dict[tuple[str, str], float] = collections.defaultdict(float)
    kernel_count: dict[tuple[str, str], int] = collections.defaultdict(int)
    device_spans: list[tuple[float, float]] = []
    for e in events:
        if e.get("ph") != "X":
            continue
        proc = names.get(e.get("pid"), str(e.get("pid")))
        dur = float(e.get("dur", 0.0))
        busy[proc] += dur
        count[proc] += 1
        by_kernel[(proc, e.get("name", "?"))] += dur
        kernel_count[(proc, e.get("name", "?"))] += 1
        if is_device(proc):
            device_spans.append((float(e.get("ts", 0.0)), dur))
    return {"busy": dict(busy), "count": dict(count), "by_kernel": by_kernel, "kernel_count": kernel_count,
            "device_busy_us": union_us(device_spans)}


def union_us(spans: list[tuple[float, float]]) -> float:
    """Microseconds covered by at least one of the (start, duration) spans: the time the device
    was busy, kernels overlapping on several streams counted once."""
    covered, end = 0.0, -float("inf")
    for start, dur in sorted(spans):
        stop = start + dur
        if stop > end:
            covered += stop - max(start, end)
            end = stop
    return covered


# Kernel families by name (XLA:GPU's fusion names, cuDNN / cuBLAS kernels, the RNG): where a step's
# kernels go, summed, so a fused kernel can be aimed at the family that costs most.
FAMILIES = (("gemm", ("gemm", "cublas", "cutlass", "sm90_xmma", "nvjet", "dot")),
            ("attention (cuDNN)", ("cudnn", "flash", "fmha", "sdpa")),
            ("reduce", ("reduce",)),
            ("dynamic-update-slice", ("dynamic_update_slice", "dynamic-update-slice")),  # before "slice"
            ("convert / copy / slice", ("convert", "copy", "slice", "transpose", "concatenate", "bitcast")),
            ("rng / sort", ("threefry", "rng", "sort", "random")),
            ("elementwise / loop fusion", ("loop_", "fusion", "multiply", "add", "select")))


def family(kernel: str) -> str:
    """The FAMILIES name of a device kernel (first match by substring), else "other"."""
    k = kernel.lower()
    for name, keys in FAMILIES:
        if any(key in k for key in keys):
            return name
    return "other"


def families(by_kernel: dict[tuple[str, str], float], kernel_count: dict[tuple[str, str], int],
             steps: int) -> list[tuple[str, float, float]]:
    """(family, us per step, kernels per step) over the device kernels, costliest first."""
    us: dict[str, float] = collections.defaultdict(float)
    n: dict[str, float] = collections.defaultdict(float)
    for (proc, kname), dur in by_kernel.items():
        if is_device(proc):
            us[family(kname)] += dur / steps
            n[family(kname)] += kernel_count[(proc, kname)] / steps
    return sorted(((f, us[f], n[f]) for f in us), key=lambda t: -t[1])


def is_device(proc: str) -> bool:
    p = proc.lower()
    return ("gpu" in p or "/device:" in p or "stream" in p) and "host" not in p and "cpu" not in p


def run_variant(shape: dict, kw: dict, batch: int, prompt: int, new: int, trace_dir: str,
                stop_ids: int = 0) -> dict:
    import jax
    import numpy as np

    from leap_jax.models import decoder
    from leap_jax.models.config import ModelConfig
    from leap_jax.sampling.params import SamplingParams
    from leap_jax.sampling.decode_impl import DecodeImpl
    from leap_jax.sampling.sampler import Sampler

    cfg = ModelConfig(**shape, dtype="bfloat16", param_dtype="float32", max_position_embeddings=8192)
    params = decoder.init(cfg, jax.random.key(0))
    sampler = Sampler(cfg, max_batch=batch, prompt_buckets=[prompt], max_new_tokens=new, impl=DecodeImpl(**kw))
    rng = np.random.default_rng(0)
    prompts = [list(rng.integers(3, cfg.vocab_size, size=prompt - 1)) for _ in range(batch)]
    sp = SamplingParams(temperature=1.0, max_new_tokens=new, stop_token_ids=tuple(range(3, 3 + stop_ids)))
    sampler.generate(params, prompts, sp, jax.random.key(1))  # compiles
    before = sampler.counters["decode_iterations"]
    t0 = time.perf_counter()
    out = sampler.generate(params, prompts, sp, jax.random.key(2))
    untraced = time.perf_counter() - t0
    untraced_steps = sampler.counters["decode_iterations"] - before
    tokens = sum(len(t) for t in out.tokens)  # with stop ids, each call's rows differ
    before = sampler.counters["decode_iterations"]
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
        t0 = time.perf_counter()
        out = sampler.generate(params, prompts, sp, jax.random.key(3))
        traced = time.perf_counter() - t0
    steps = sampler.counters["decode_iterations"] - before
    prof = read_perfetto(trace_dir)
    return {"untraced_s": untraced, "traced_s": traced, "steps": steps,
            "untraced_steps": untraced_steps, "tokens": tokens, **prof}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="experiment")
    ap.add_argument("--small", action="store_true", help="CPU smoke run: tiny shape, batch 2, 8 new tokens")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=512)
    ap.add_argument("--stop-ids", type=int, default=0, help="stop on ids 3..N+2 (rows of varied lengths)")
    ap.add_argument("--top", type=int, default=12, help="device events listed per variant")
    ap.add_argument("--variants", nargs="*", default=["k1:steps_per_iter=1", "k4:steps_per_iter=4"])
    args = ap.parse_args()
    if args.small:
        args.shape, args.batch, args.prompt, args.new = "tiny", 2, 16, 8
    shape = SHAPES[args.shape]
    for text in args.variants:
        name, kw = parse_variant(text)
        with tempfile.TemporaryDirectory() as d:
            r = run_variant(shape, kw, args.batch, args.prompt, args.new, d, args.stop_ids)
        steps = max(r["steps"], 1)
        print(f"\n== {name} {kw}: shape {args.shape} batch {args.batch} prompt {args.prompt} new {args.new}")
        print(f"generate {r['untraced_s'] * 1e3:.1f} ms untraced ({r['tokens'] / r['untraced_s']:.0f} tokens/s, "
              f"{r['untraced_s'] / max(r['untraced_steps'], 1) * 1e3:.3f} ms/step), {r['traced_s'] * 1e3:.1f} ms traced; {steps} steps")
        for proc, us in sorted(r["busy"].items(), key=lambda kv: -kv[1]):
            print(f"  {'device' if is_device(proc) else 'host  '} {proc[:60]:60s} events {us / 1e3:9.1f} ms "
                  f"({us / steps:8.1f} us/step) in {r['count'][proc]} events ({r['count'][proc] / steps:.1f}/step)")
        for fam, us, n in families(r["by_kernel"], r["kernel_count"], steps):
            print(f"  family {fam:28s} {us:8.1f} us/step in {n:6.1f} kernels/step")
        dev = [(k, v) for k, v in r["by_kernel"].items() if is_device(k[0])]
        for (proc, kname), us in sorted(dev, key=lambda kv: -kv[1])[:args.top]:
            n = r["kernel_count"][(proc, kname)]
            print(f"    {us / steps:8.1f} us/step  x{n / steps:5.1f}/step  {kname[:90]}")


if __name__ == "__main__":
    main()
