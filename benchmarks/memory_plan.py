"""Per-device memory of the sharded RL update, from XLA's compiled estimate (nothing is allocated).

    python benchmarks/memory_plan.py                         # 26M, 0.5B, 1.5B, 7B on 1 and 8 devices
    python benchmarks/memory_plan.py --shapes 26M 0.5B --length 512

The update (`make_update`, accumulate="scan", donated params and optimizer state) is lowered with
abstract inputs (`jax.ShapeDtypeStruct`s carrying the partition rules' shardings) on a mesh of one
device, then of 8 devices with every device on `fsdp` (the 8xH200 plan in configs/qwen2.5-7b-8gpu.yaml),
and compiled; `compiled.memory_analysis()` gives the bytes one device needs: arguments (fp32 params +
AdamW moments + its share of the batch), temporaries (gradient accumulators, activations), outputs
not aliased to a donated input. XLA's FLOP count per device, times N over the one-device count, shows
how evenly the work splits (1.00 = ideal). This script forces 8 fake CPU devices when jax is not yet imported.

On CPU these are estimates from compilation only, most of all for the large shapes: XLA:CPU's buffer
assignment, fusion and bf16 handling differ from XLA:GPU's, and a GPU run adds the allocator's
fragmentation and the cuDNN / NCCL workspaces. Compare rows with each other and with the
back-of-envelope numbers, and check one step on the real machine before trusting a fit.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

if "jax" not in sys.modules and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import jax.numpy as jnp
import numpy as np
import optax

from leap_jax.models import decoder
from leap_jax.models.config import ModelConfig
from leap_jax.parallel.mesh import make_mesh
from leap_jax.parallel.rules import batch_sharding, param_shardings
from leap_jax.train.update import BATCH_KEYS, make_update

GIB = float(1 << 30)
_QWEN: dict = {"rope_theta": 1e6, "qkv_bias": True, "dtype": "bfloat16", "param_dtype": "float32", "remat": True}
SHAPES = {
    # the experiment's SFT policy (configs/bootstrap_sft.yaml, vocab of its trained BPE)
    "26M": ModelConfig(vocab_size=2334, hidden_size=512, intermediate_size=1536, num_layers=8, num_heads=8,
                       num_kv_heads=4, tie_word_embeddings=True, dtype="bfloat16", param_dtype="float32",
                       remat=True),
    "0.5B": ModelConfig(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_layers=24,
                        num_heads=14, num_kv_heads=2, tie_word_embeddings=True, **_QWEN),
    "1.5B": ModelConfig(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_layers=28,
                        num_heads=12, num_kv_heads=2, tie_word_embeddings=True, **_QWEN),
    "7B": ModelConfig(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_layers=28,
                      num_heads=28, num_kv_heads=4, tie_word_embeddings=False, **_QWEN),
}
_DTYPES = {"tokens": jnp.int32, "positions": jnp.int32, "segment_ids": jnp.int32, "targets": jnp.int32,
           "mask": jnp.bool_, "old_logp": jnp.float32, "advantages": jnp.float32}


def plan(cfg: ModelConfig, devices: int, rows: int, length: int, micro_batch: int) -> dict[str, float]:
    """Compiled per-device memory (GiB) of the update on a (1, devices, 1) mesh."""
    mesh = make_mesh((1, devices, 1), devices=jax.devices()[:devices])
    params = {"model": jax.eval_shape(lambda k: decoder.init(cfg, k), jax.random.key(0))}
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-6))
    opt_state = jax.eval_shape(tx.init, params)

    def abstract(tree):
        sh = param_shardings(tree, mesh)
        return jax.tree_util.tree_map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, sh)

    batch = {k: jax.ShapeDtypeStruct((rows, length), _DTYPES[k], sharding=batch_sharding(mesh, (rows, length)))
             for k in BATCH_KEYS}
    update = make_update(cfg, tx, lambda step: 1e-6, micro_batch_size=micro_batch, donate=True,
                         accumulate="scan")
    t0 = time.perf_counter()
    compiled = update.lower(abstract(params), abstract(opt_state), batch).compile()
    seconds = time.perf_counter() - t0
    m = compiled.memory_analysis()
    if m is None:
        raise SystemExit(f"backend {jax.default_backend()!r} gives no compiled memory analysis")
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    flops = float((cost or {}).get("flops", float("nan")))
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(params))
    args, temp = m.argument_size_in_bytes / GIB, m.temp_size_in_bytes / GIB
    out_new = max(m.output_size_in_bytes - m.alias_size_in_bytes, 0) / GIB
    return {"params_b": n_params / 1e9, "args": args, "temp": temp, "out": out_new,
            "total": args + temp + out_new, "compile_s": seconds, "tflops": flops / 1e12}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--devices", nargs="+", type=int, default=[1, 8])
    ap.add_argument("--rows", type=int, default=8, help="rows in the update batch")
    ap.add_argument("--length", type=int, default=1024, help="padded tokens per row")
    ap.add_argument("--micro-batch", type=int, default=8, help="optimizer.micro_batch_size")
    args = ap.parse_args(argv)
    if max(args.devices) > jax.device_count():
        ap.error(f"--devices {args.devices}: only {jax.device_count()} visible")
    print(f"backend {jax.default_backend()} ({jax.device_count()} devices); batch [{args.rows}, {args.length}], "
          f"micro batch {args.micro_batch}; fp32 params + AdamW, bf16 compute, remat; mesh (1, N, 1)")
    print("| model | params | devices | args GiB/dev | temp GiB/dev | new out GiB/dev | total GiB/dev "
          "| TFLOP/dev (x N / 1-dev) | compile s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in args.shapes:
        one = None
        for n in args.devices:
            r = plan(SHAPES[name], n, args.rows, args.length, args.micro_batch)
            one = r["tflops"] if n == 1 else one
            ratio = f" ({r['tflops'] * n / one:.2f})" if one and n > 1 else ""
            print(f"| {name} | {r['params_b']:.3f}B | {n} | {r['args']:.2f} | {r['temp']:.2f} | {r['out']:.2f} | "
                  f"{r['total']:.2f} | {r['tflops']:.2f}{ratio} | {r['compile_s']:.1f} |", flush=True)
    if jax.default_backend() == "cpu":
        print("CPU: estimates from XLA:CPU compilation only (no GPU buffer assignment, allocator or "
              "workspaces); the 1.5B and 7B rows were never run.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
