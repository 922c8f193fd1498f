"""Sampler throughput on a Qwen2-0.5B-shaped random bf16 model, against the HBM roofline and
(when torch + CUDA + transformers are importable) HF transformers' static-cache `generate`.

    python benchmarks/sampler_throughput.py            # GPU: batch 64 and 256, prompt 256, 256 new
    python benchmarks/sampler_throughput.py --small    # CPU smoke run (tiny model, a few tokens)

Several Sampler variants (layer loop, decode RNG, decode attention, fused projections, steps per
loop test; see --variants) are timed side by side so the fastest can become the default. Reported
per variant and batch size: new tokens / s over the whole generate wall time (after a warm-up call
that compiles), prefill time, decode ms per step, and the fraction of the roofline: the bytes one
decode step must read (all weights + the whole KV cache) over the device bandwidth measured
here with a large on-device copy. Rows never stop early (no stop ids), so every row produces
exactly --new tokens.

The transformers reference runs in a subprocess (torch and JAX then never share the allocator);
JAX is limited to XLA_PYTHON_CLIENT_MEM_FRACTION (default here 0.5) so both fit on one GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

QWEN2_05B = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_layers=24,
                 num_heads=14, num_kv_heads=2, rope_theta=1000000.0, rms_norm_eps=1e-6,
                 tie_word_embeddings=True, qkv_bias=True, max_position_embeddings=32768)
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
            num_kv_heads=2, rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
            qkv_bias=True, max_position_embeddings=512)


# ------------------------------------------------------------------------------ torch reference
def torch_worker(shape: dict, batches: list[int], prompt: int, new: int, reps: int,
                 device: str = "cuda") -> None:
    """Time transformers' generate(cache_implementation='static'); prints one JSON line."""
    import torch
    import transformers

    cfg = transformers.Qwen2Config(
        vocab_size=shape["vocab_size"], hidden_size=shape["hidden_size"],
        intermediate_size=shape["intermediate_size"], num_hidden_layers=shape["num_layers"],
        num_attention_heads=shape["num_heads"], num_key_value_heads=shape["num_kv_heads"],
        rope_theta=shape["rope_theta"], rms_norm_eps=shape["rms_norm_eps"],
        tie_word_embeddings=shape["tie_word_embeddings"],
        max_position_embeddings=shape["max_position_embeddings"])
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(cfg).to(device=device, dtype=torch.bfloat16).eval()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    out = {"transformers": transformers.__version__, "torch": torch.__version__, "rows": []}
    for b in batches:
        ids = torch.randint(0, shape["vocab_size"], (b, prompt), device=device)
        mask = torch.ones_like(ids)
        kw = dict(attention_mask=mask, max_new_tokens=new, do_sample=True,
                  temperature=1.0, top_p=1.0, top_k=0, cache_implementation="static",
                  pad_token_id=0, eos_token_id=None)
        with torch.inference_mode():
            model.generate(ids, **kw)  # warm-up (compiles when transformers auto-compiles)
            sync()
            best = float("inf")
            for _ in range(reps):
                t0 = time.perf_counter()
                res = model.generate(ids, **kw)
                sync()
                best = min(best, time.perf_counter() - t0)
        n_new = int(res.shape[1] - prompt)
        out["rows"].append({"batch": b, "seconds": best, "new_tokens": n_new,
                            "tokens_per_s": b * n_new / best})
    print("TORCH_JSON " + json.dumps(out), flush=True)


def run_torch(shape: dict, batches: list[int], prompt: int, new: int, reps: int) -> dict | None:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        if not torch.cuda.is_available():
            print("[torch] CUDA not available: skipping the transformers reference")
            return None
    except Exception as e:  # noqa: BLE001 - any import problem just skips the reference
        print(f"[torch] not importable ({type(e).__name__}: {e}): skipping the transformers reference")
        return None
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", json.dumps(
        {"shape": shape, "batches": batches, "prompt": prompt, "new": new, "reps": reps})]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("TORCH_JSON "):
            return json.loads(line[len("TORCH_JSON "):])
    print(f"[torch] reference failed (rc={proc.returncode}):\n{proc.stderr[-3000:]}")
    return None


# ------------------------------------------------------------------------------ JAX side
def measure_bandwidth(n_bytes: int, reps: int = 10) -> float:
    """Bytes/s of an on-device copy (read + write counted) of an n_bytes fp32 array."""
    import jax
    import jax.numpy as jnp

    x = jnp.ones((n_bytes // 4,), jnp.float32)
    f = jax.jit(lambda a: a * 1.0001)
    f(x).block_until_ready()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        f(x).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    del x
    return 2 * n_bytes / best


def parse_variant(s: str) -> dict:
    """'unrolled-rbg-reduce', 'scan-threefry-einsum-u4', ... -> DecodeImpl fields.

    Dash-separated words in any order: unrolled|scan (layer loop), threefry|rbg (decode RNG),
    einsum|reduce|dpa|cudnn (decode attention; dpa / cudnn: jax.nn.dot_product_attention's XLA /
    fused cuDNN kernel), fuse|nofuse (concatenated q|k|v and gate|up gemms),
    uN|ufull (layer-scan unroll),
    kN (N decode steps per while-loop iteration), cond (top-p/top-k filter behind a per-step
    lax.cond instead of the static per-call choice).
    Missing words keep the DecodeImpl defaults.
    """
    kw: dict = {}
    for part in s.split("-"):
        if part in ("unrolled", "scan"):
            kw["layer_loop"] = part
        elif part in ("threefry", "rbg"):
            kw["rng_impl"] = part
        elif part in ("einsum", "reduce", "dpa", "cudnn"):
            kw["attention"] = part
        elif part in ("fuse", "nofuse"):
            kw["fuse"] = part == "fuse"
        elif part.startswith("k") and part[1:].isdigit():
            kw["steps_per_iter"] = int(part[1:])
        elif part == "cond":
            kw["static_filter"] = False
        elif part == "ufull":
            kw["unroll"] = True
        elif part.startswith("u") and part[1:].isdigit():
            kw["unroll"] = int(part[1:])
        else:
            raise SystemExit(f"bad variant word {part!r} in {s!r}; expected unrolled|scan, "
                             f"threefry|rbg, einsum|reduce|dpa|cudnn, fuse|nofuse, sK, uN|ufull, kN, cond")
    return kw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="tiny model, few tokens (CPU smoke run)")
    ap.add_argument("--batches", default=None, help="comma list (default 64,256; small: 2,4)")
    ap.add_argument("--prompt", type=int, default=None, help="prompt length (default 256; small 16)")
    ap.add_argument("--new", type=int, default=None, help="new tokens (default 256; small 8)")
    ap.add_argument("--variants", default="unrolled-threefry-einsum,unrolled-rbg-einsum,"
                                          "unrolled-rbg-reduce",
                    help="comma list of sampler variants to compare (see parse_variant)")
    ap.add_argument("--reps", type=int, default=2, help="timed repetitions (best is reported)")
    ap.add_argument("--no-torch", action="store_true", help="skip the transformers reference")
    ap.add_argument("--torch-worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_worker:
        w = json.loads(a.torch_worker)
        torch_worker(w["shape"], w["batches"], w["prompt"], w["new"], w["reps"],
                     w.get("device", "cuda"))
        return

    shape = TINY if a.small else QWEN2_05B
    batches = [int(b) for b in (a.batches or ("2,4" if a.small else "64,256")).split(",")]
    prompt = a.prompt or (16 if a.small else 256)
    new = a.new or (8 if a.small else 256)
    variants = [(v, parse_variant(v)) for v in a.variants.split(",")]

    torch_res = None if a.no_torch else run_torch(shape, batches, prompt, new, a.reps)

    import jax
    import numpy as np

    from leap_jax.models import decoder
    from leap_jax.models.config import ModelConfig
    from leap_jax.sampling.decode_impl import DecodeImpl
    from leap_jax.sampling.params import SamplingParams
    from leap_jax.sampling.sampler import Sampler

    cfg = ModelConfig(**shape, dtype="bfloat16", param_dtype="bfloat16")
    dev = jax.devices()[0]
    print(f"[jax] {jax.__version__} on {dev.device_kind} ({dev.platform}); model "
          f"{cfg.num_params() / 1e6:.1f}M params bf16")
    params = jax.jit(lambda k: decoder.init(cfg, k))(jax.random.PRNGKey(0))
    weight_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(params))
    bw = measure_bandwidth((1 << 26) if a.small else (1 << 32))
    print(f"[jax] measured copy bandwidth {bw / 1e9:.0f} GB/s; weights {weight_bytes / 1e9:.3f} GB")

    sp = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, stop_token_ids=())
    rng = np.random.default_rng(0)
    rows = []
    for name, kw in variants:
        for b in batches:
            s = Sampler(cfg, max_batch=b, prompt_buckets=(prompt,), max_new_tokens=new,
                        batch_buckets=(b,), impl=DecodeImpl(**kw))
            prompts = rng.integers(0, cfg.vocab_size, (b, prompt)).tolist()
            t0 = time.perf_counter()
            s.generate(params, prompts, sp, rng=0)
            compile_s = time.perf_counter() - t0
            best = None
            for r in range(a.reps):
                t0 = time.perf_counter()
                out = s.generate(params, prompts, sp, rng=r + 1)
                wall = time.perf_counter() - t0
                if best is None or wall < best[0]:
                    best = (wall, dict(s.last_timings), out)
            wall, tim, out = best
            n_new = sum(len(t) for t in out.tokens)
            assert n_new == b * new, f"expected {b * new} new tokens, got {n_new}"
            slots = prompt + new  # the cache slots one decode step reads
            kv_bytes = 2 * cfg.num_layers * b * slots * cfg.kv_dim * 2
            step_bytes = weight_bytes + kv_bytes
            steps = new - 1
            decode_s = tim["decode_s"]
            rows.append(dict(impl=name, batch=b, tok_s=n_new / wall,
                             prefill_s=tim["prefill_s"], ms_step=1e3 * decode_s / max(steps, 1),
                             roofline=(steps * step_bytes / bw) / decode_s if steps else float("nan"),
                             step_gb=step_bytes / 1e9, compile_s=compile_s))
            r = rows[-1]
            print(f"[jax] {name} batch {b}: {r['tok_s']:.0f} tok/s, prefill {r['prefill_s']:.3f} s,"
                  f" {r['ms_step']:.2f} ms/step, roofline {r['roofline']:.1%}, warm-up "
                  f"{compile_s:.1f} s", flush=True)
            del s

    ref = {r["batch"]: r for r in (torch_res or {}).get("rows", [])}
    print()
    print(f"prompt {prompt}, new {new} tokens/row, sampling T=1 (no stop); bandwidth "
          f"{bw / 1e9:.0f} GB/s")
    hdr = (f"{'impl (jax variant)':<26}{'batch':>6}{'tok/s':>11}{'prefill s':>11}{'ms/step':>9}"
           f"{'GB/step':>9}{'roofline':>10}{'vs HF':>8}{'warmup s':>10}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        hf = ref.get(r["batch"])
        ratio = f"{r['tok_s'] / hf['tokens_per_s']:.2f}x" if hf else "-"
        print(f"{r['impl']:<26}{r['batch']:>6}{r['tok_s']:>11.0f}{r['prefill_s']:>11.3f}"
              f"{r['ms_step']:>9.2f}{r['step_gb']:>9.3f}{r['roofline']:>10.1%}{ratio:>8}"
              f"{r['compile_s']:>10.1f}")
    for b, hf in sorted(ref.items()):
        print(f"{'HF static cache':<26}{b:>6}{hf['tokens_per_s']:>11.0f}{'':>11}"
              f"{1e3 * hf['seconds'] / max(hf['new_tokens'], 1):>9.2f}{'':>9}{'':>10}{'1.00x':>8}")
    if torch_res:
        print(f"(HF: transformers {torch_res['transformers']}, torch {torch_res['torch']}; its "
              f"ms/step includes prefill)")


if __name__ == "__main__":
    main()
