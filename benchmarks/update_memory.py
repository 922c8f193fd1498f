"""Compiled memory of the jitted RL update (XLA's own analysis: nothing is allocated or run).

    python benchmarks/update_memory.py                                   # the experiment's policy shape
    python benchmarks/update_memory.py --config runs/experiment/policy/config.json --rows 16 --length 4096
    python benchmarks/update_memory.py --config runs/gen/policy/config.json --rows 16 --micro-batch 16 \
        --length 4096 --micro-batch-tokens 32768     # optimizer.micro_batch_tokens

Why: several training processes share one GPU in the experiment (`--parallel N`), so the update's
peak memory decides how many fit. The table compares the einsum attention as one block against the
query-chunked path (`leap_jax.models.layers.MAX_SCORE_BYTES`), for the same model and batch, with
and without per-layer remat. Temp bytes are XLA's estimate for the compiled program on this
backend; the GPU's allocator adds fragmentation on top, so compare rows with each other.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

from leap_jax.models import decoder, layers  # noqa: E402
from leap_jax.models.config import ModelConfig  # noqa: E402
from leap_jax.train.update import BATCH_KEYS, make_update, rows_per_micro_batch  # noqa: E402

# the experiment's SFT policy (configs/bootstrap_sft.yaml), used when no --config is given
EXPERIMENT_POLICY = {"architectures": ["Qwen2ForCausalLM"], "vocab_size": 2334, "hidden_size": 512,
                     "intermediate_size": 1536, "num_hidden_layers": 8, "num_attention_heads": 8,
                     "num_key_value_heads": 4, "torch_dtype": "bfloat16", "tie_word_embeddings": True}
GIB = float(1 << 30)


def update_bytes(cfg: ModelConfig, rows: int, length: int, micro_batch: int,
                 micro_batch_tokens: int | None = None, accumulate: str = "loop") -> dict[str, float]:
    """XLA memory analysis (GiB) of make_update's program for a [rows, length] batch: with
    accumulate "scan" the one program over the whole batch; with "loop" (the trainer's default) the
    per-micro-batch gradient program, the largest one the update runs."""
    params = {"model": jax.eval_shape(lambda k: decoder.init(cfg, k), jax.random.PRNGKey(0))}
    tx = optax.adamw(1e-5)
    opt_state = jax.eval_shape(tx.init, params)
    update = make_update(cfg, tx, lambda step: 1e-5, micro_batch_size=micro_batch, max_len=float(length),
                         micro_batch_tokens=micro_batch_tokens, accumulate=accumulate)
    dtypes = {"tokens": jnp.int32, "positions": jnp.int32, "segment_ids": jnp.int32, "targets": jnp.int32,
              "mask": jnp.bool_, "old_logp": jnp.float32, "advantages": jnp.float32}
    if accumulate == "scan":
        batch = {k: jax.ShapeDtypeStruct((rows, length), dtypes[k]) for k in BATCH_KEYS}
        lowered = update.lower(params, opt_state, batch)
    else:
        mb_rows = rows_per_micro_batch(micro_batch, length, micro_batch_tokens)
        micro = {k: jax.ShapeDtypeStruct((mb_rows, length), dtypes[k]) for k in BATCH_KEYS}
        denom = jax.ShapeDtypeStruct((), jnp.float32)
        grads, aux = jax.eval_shape(update.grad_fn, params, micro, denom, denom)
        lowered = update.acc_jit.lower(params, grads, aux, micro, denom, denom)
    analysis = lowered.compile().memory_analysis()
    if analysis is None:
        raise SystemExit(f"backend {jax.default_backend()!r} gives no compiled memory analysis")
    return {"temp": analysis.temp_size_in_bytes / GIB, "args": analysis.argument_size_in_bytes / GIB,
            "out": analysis.output_size_in_bytes / GIB}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", help="a HF config.json (default: the experiment policy's shape)")
    ap.add_argument("--rows", type=int, default=8, help="rows in the update batch")
    ap.add_argument("--length", type=int, default=4096, help="padded tokens per row (rollout.max_context_tokens)")
    ap.add_argument("--micro-batch", type=int, default=8, help="optimizer.micro_batch_size")
    ap.add_argument("--micro-batch-tokens", type=int, default=None, help="optimizer.micro_batch_tokens")
    ap.add_argument("--accumulate", choices=("loop", "scan"), default="loop",
                    help="optimizer.accumulate: loop (the trainer's default) reports the per-micro-batch program")
    args = ap.parse_args(argv)
    if args.rows % args.micro_batch:
        ap.error(f"--rows {args.rows} is not a multiple of --micro-batch {args.micro_batch}")
    d = json.load(open(args.config)) if args.config else EXPERIMENT_POLICY
    print(f"backend {jax.default_backend()}, batch [{args.rows}, {args.length}], micro batch {args.micro_batch}, "
          f"micro-batch tokens {args.micro_batch_tokens}, accumulate {args.accumulate}")
    print("| attention | remat | temp GiB | params+opt+batch GiB |")
    print("| --- | --- | --- | --- |")
    default = layers.MAX_SCORE_BYTES
    try:
        for name, max_bytes in (("one block", 1 << 62), (f"query chunks (scores <= {default / GIB:g} GiB)", default)):
            layers.MAX_SCORE_BYTES = max_bytes
            for remat in (False, True):
                m = update_bytes(ModelConfig.from_hf_dict(d, remat=remat), args.rows, args.length, args.micro_batch,
                                 args.micro_batch_tokens, args.accumulate)
                print(f"| {name} | {remat} | {m['temp']:.2f} | {m['args']:.2f} |", flush=True)
    finally:
        layers.MAX_SCORE_BYTES = default
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
