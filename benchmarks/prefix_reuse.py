"""How much of a multi-turn rollout's generate time is prefill of earlier turns, and what KV reuse
(`sampling.kv_reuse`, leap_jax/sampling/prefix.py) saves: the Sampler alone, no environment.

Conversations of the generated family's shape (configs/generated/common.yaml): ROWS rows, a first
prompt of --prompt tokens, up to --max-new new tokens per turn (sampled at temperature 1 from random
weights; --stops stop ids make responses end after about vocab/stops tokens), a feedback of 100-200
tokens, --turns turns, every row continuing (DCP's worst case), the trainer's coarse buckets for
--context. Per turn and arm (plain: every turn prefills the whole conversation; reuse: the kept
cache + the new tokens): rows, real prefill tokens, reused tokens, seconds in prefill (the reuse
arm's includes copying kept K/V) and decode, and the prefill share of generate time.

CPU (tiny model, ~2 minutes on two loaded cores):
    python benchmarks/prefix_reuse.py
GPU (the experiment policy's shape, random weights, bf16):
    python benchmarks/prefix_reuse.py --shape experiment --rows 128
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPES = {
    "tiny": dict(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, num_kv_heads=2,
                 dtype="float32"),
    "experiment": dict(hidden_size=512, intermediate_size=1536, num_layers=8, num_heads=8, num_kv_heads=4,
                       dtype="bfloat16"),
}


def run_arm(sampler, params, args, reuse: bool) -> list[dict]:
    import jax
    import numpy as np
    from leap_jax.sampling.params import SamplingParams
    rng = np.random.default_rng(args.seed)
    vocab = sampler.config.vocab_size
    stops = tuple(range(vocab - args.stops, vocab))
    sp = SamplingParams(temperature=1.0, max_new_tokens=args.max_new, stop_token_ids=stops)
    convs = [rng.integers(0, vocab - args.stops, args.prompt).tolist() for _ in range(args.rows)]
    live = list(range(args.rows))
    out = []
    for t in range(args.turns):
        before = dict(sampler.counters)
        t0 = time.perf_counter()
        res = sampler.generate(params, [convs[r] for r in live], sp, jax.random.PRNGKey(1000 * args.seed + t),
                               conversations=[("c", r) for r in live] if reuse else None)
        wall = time.perf_counter() - t0
        timing = sampler.last_timings
        c = {k: sampler.counters[k] - before.get(k, 0) for k in sampler.counters}
        out.append({"turn": t + 1, "rows": len(live), "prefill_tokens": c.get("prefill_tokens", 0),
                    "reused_tokens": c.get("kv_reused_tokens", 0), "fallback_rows": c.get("kv_fallback_rows", 0),
                    "generated": c.get("generated_tokens", 0), "prefill_s": timing.get("prefill_s", 0.0),
                    "decode_s": timing.get("decode_s", 0.0), "wall_s": wall})
        nxt = []
        for r, toks in zip(live, res.tokens, strict=True):
            fb = rng.integers(0, vocab - args.stops, int(rng.integers(100, 201))).tolist()
            p = convs[r] + toks + [0] + fb
            if len(p) + args.max_new <= args.context:
                convs[r] = p
                nxt.append(r)
        live = nxt
        if not live:
            break
    if reuse:
        out[-1]["kept_bytes_end"] = sampler.kept_bytes()
        sampler.release_conversations()
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=600)
    ap.add_argument("--max-new", type=int, default=768)
    ap.add_argument("--context", type=int, default=3072)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--stops", type=int, default=4, help="stop ids (mean response ~ vocab / stops)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=2, help="runs per arm; the last is reported (the "
                    "first compiles)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    import jax
    from leap_jax.models import decoder
    from leap_jax.models.config import ModelConfig
    from leap_jax.sampling.decode_impl import DecodeImpl
    from leap_jax.sampling.sampler import Sampler
    from leap_jax.train.trainer import _coarse_prompt_buckets
    shape = SHAPES[args.shape]
    cfg = ModelConfig(vocab_size=args.vocab, rope_theta=10000.0, tie_word_embeddings=True, qkv_bias=False,
                      param_dtype="float32", max_position_embeddings=args.context, **shape)
    params = decoder.init(cfg, jax.random.PRNGKey(0))
    pb = tuple(sorted(set(_coarse_prompt_buckets(args.context)) | {args.context - args.max_new}))
    bb = tuple(sorted({max(args.rows // 4, 1), max(args.rows // 2, 1), args.rows}))
    results = {}
    for name, impl in (("plain", DecodeImpl()), ("reuse", DecodeImpl(kv_reuse=True))):
        s = Sampler(cfg, max_batch=args.rows, prompt_buckets=pb, max_new_tokens=args.max_new,
                    batch_buckets=bb, impl=impl, max_stop_ids=max(8, args.stops))
        for _ in range(args.repeat):
            results[name] = run_arm(s, params, args, name == "reuse")
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"prefix_reuse: shape={args.shape} rows={args.rows} prompt={args.prompt} max_new={args.max_new} "
          f"context={args.context} device={jax.devices()[0].device_kind}")
    print(f"{'arm':6} {'turn':>4} {'rows':>5} {'prefill tok':>11} {'reused tok':>10} {'gen tok':>8} "
          f"{'prefill s':>9} {'decode s':>9} {'prefill %':>9}")
    for name, turns in results.items():
        for r in turns:
            share = r["prefill_s"] / max(r["prefill_s"] + r["decode_s"], 1e-9)
            print(f"{name:6} {r['turn']:>4} {r['rows']:>5} {r['prefill_tokens']:>11} {r['reused_tokens']:>10} "
                  f"{r['generated']:>8} {r['prefill_s']:>9.3f} {r['decode_s']:>9.3f} {100 * share:>8.1f}%")
        pre = sum(r["prefill_s"] for r in turns)
        dec = sum(r["decode_s"] for r in turns)
        later = sum(r["prefill_s"] for r in turns[1:])
        print(f"{name:6}  all: prefill {pre:.3f} s + decode {dec:.3f} s; prefill of turns >= 2 is "
              f"{100 * later / max(pre + dec, 1e-9):.1f}% of generate time"
              + (f"; kept caches at the end {turns[-1].get('kept_bytes_end', 0) / 2**20:.1f} MiB"
                 if name == "reuse" else ""))


if __name__ == "__main__":
    main()
