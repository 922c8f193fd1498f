"""HF checkpoint export/import at a real model size, plus logit parity with transformers there.

    python benchmarks/hf_checkpoint_io.py                 # GPU: Qwen2.5-Coder-1.5B shape, bf16
    python benchmarks/hf_checkpoint_io.py --preset 7b     # Qwen2.5-Coder-7B shape (15 GB on disk)
    python benchmarks/hf_checkpoint_io.py --small         # CPU smoke run (tiny model)

Random params (decoder.init, perturbed) are exported with save_hf_checkpoint (sharded), loaded
back with load_hf_checkpoint onto the default device, and checked bitwise. Reported: sizes, save
and load wall time and GB/s (the load right after the save reads from the page cache), the host
peak resident set (VmHWM, which also counts touched pages of the memory-mapped files) and the
peak of numpy buffers (tracemalloc), both to compare with the checkpoint size: no stage should
hold two full copies. With torch + transformers importable, a subprocess loads the exported
directory with AutoModelForCausalLM in fp32 (TF32 off, on CUDA when available) and its logits
on a fixed batch are compared with ours (fp32, highest matmul precision): max abs diff <= 1e-4
expected (reported; the script exits 1 if it is larger or the round trip is not bitwise).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PRESETS = {
    "1.5b": dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_layers=28,
                 num_heads=12, num_kv_heads=2, tie_word_embeddings=True),
    "7b": dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_layers=28,
               num_heads=28, num_kv_heads=4, tie_word_embeddings=False),
    "small": dict(vocab_size=2048, hidden_size=128, intermediate_size=256, num_layers=3,
                  num_heads=4, num_kv_heads=2, tie_word_embeddings=False),
}


def torch_logits_worker(model_dir: str, tokens_path: str, out_path: str) -> None:
    """Subprocess: transformers fp32 logits of the tokens in tokens_path, saved to out_path."""
    import numpy as np
    import torch
    import transformers
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    kw = dict(attn_implementation="eager")
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, **kw)
    except TypeError:
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, **kw)
    model = model.to(dev).eval()
    tokens = torch.from_numpy(np.load(tokens_path).astype(np.int64)).to(dev)
    with torch.no_grad():
        logits = model(input_ids=tokens).logits.float().cpu().numpy()
    np.save(out_path, logits)
    print(json.dumps({"device": dev, "transformers": transformers.__version__, "torch": torch.__version__}))


def _fmt(nbytes: float) -> str:
    return f"{nbytes / 1e9:.2f} GB" if nbytes >= 1e8 else f"{nbytes / 1e6:.2f} MB"


def _vm_hwm_bytes() -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1e3
    except OSError:
        pass
    return float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="1.5b")
    ap.add_argument("--small", action="store_true", help="tiny CPU smoke run (same as --preset small)")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    ap.add_argument("--shard-gb", type=float, default=2.0)
    ap.add_argument("--dir", default=None, help="where to write the checkpoint (default: a temp dir)")
    ap.add_argument("--no-parity", action="store_true")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--_worker", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._worker:
        torch_logits_worker(*args._worker)
        return 0

    import tracemalloc

    import jax
    import jax.numpy as jnp
    import numpy as np

    from leap_jax.models import decoder
    from leap_jax.models.config import ModelConfig
    from leap_jax.models.hf import load_hf_checkpoint, save_hf_checkpoint

    preset = "small" if args.small else args.preset
    shape = PRESETS[preset]
    shard = int((0.0005 if preset == "small" else args.shard_gb) * 1e9)
    config = ModelConfig(**shape, qkv_bias=True, rope_theta=1e6, rms_norm_eps=1e-6,
                         architecture="Qwen2ForCausalLM", max_position_embeddings=32768,
                         eos_token_ids=(151645, 151643) if shape["vocab_size"] > 151645 else (),
                         dtype=args.dtype, param_dtype=args.dtype)
    params = decoder.init(config, jax.random.PRNGKey(0), std=0.05)
    leaves, treedef = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(jax.random.PRNGKey(1), len(leaves))
    params = jax.tree_util.tree_unflatten(treedef, [
        (x.astype(jnp.float32) + 0.02 * jax.random.normal(k, x.shape)).astype(x.dtype)
        for x, k in zip(leaves, keys, strict=False)])
    jax.block_until_ready(params)
    nbytes = sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(params))
    root = args.dir or tempfile.mkdtemp(prefix="hf_io_")
    out_dir = os.path.join(root, "ckpt")
    rows = [("device", str(jax.devices()[0])), ("preset", preset),
            ("params", f"{config.num_params() / 1e9:.3f} B"), ("checkpoint", f"{_fmt(nbytes)} {args.dtype}")]
    ok = True
    try:
        tracemalloc.start()
        t0 = time.perf_counter()
        files = save_hf_checkpoint(out_dir, config, params, max_shard_bytes=shard)
        t_save = time.perf_counter() - t0
        _, save_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        t0 = time.perf_counter()
        cfg2, loaded = load_hf_checkpoint(out_dir)
        jax.block_until_ready(loaded)
        t_load = time.perf_counter() - t0
        _, load_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        shards = sum(f.endswith(".safetensors") for f in files)
        same = cfg2 == config and all(bool(jnp.array_equal(a, b)) for a, b in zip(
            jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(loaded), strict=False))
        ok &= same
        rows += [("shards", str(shards)),
                 ("save", f"{t_save:.2f} s  {nbytes / 1e9 / t_save:.3f} GB/s"),
                 ("load (to device)", f"{t_load:.2f} s  {nbytes / 1e9 / t_load:.3f} GB/s"),
                 ("numpy peak save / load", f"{_fmt(save_peak)} / {_fmt(load_peak)}"),
                 ("host VmHWM", _fmt(_vm_hwm_bytes())),
                 ("round trip bitwise", str(same))]
        del loaded
        if not args.no_parity:
            try:
                import torch  # noqa: F401
                import transformers  # noqa: F401
                have_ref = True
            except ImportError:
                have_ref = False
                rows.append(("parity", "skipped: torch/transformers not importable"))
            if have_ref:
                c32 = config.replace(dtype="float32", param_dtype="float32")
                p32 = jax.tree_util.tree_map(lambda x: x.astype(jnp.float32), params)
                del params
                ref_dir = os.path.join(root, "fp32")
                save_hf_checkpoint(ref_dir, c32, p32, max_shard_bytes=max(shard, int(4e9)))
                tokens = np.random.default_rng(0).integers(0, config.vocab_size, (2, args.seq))
                np.save(os.path.join(root, "tokens.npy"), tokens)
                out = os.path.join(root, "ref_logits.npy")
                proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--_worker", ref_dir,
                                       os.path.join(root, "tokens.npy"), out],
                                      capture_output=True, text=True)
                if proc.returncode:
                    rows.append(("parity", "transformers worker failed: " + proc.stderr.strip()[-400:]))
                    ok = False
                else:
                    ref = np.load(out)
                    pos = jnp.broadcast_to(jnp.arange(args.seq, dtype=jnp.int32), tokens.shape)
                    with jax.default_matmul_precision("highest"):
                        ours, _ = decoder.forward(p32, c32, jnp.asarray(tokens, jnp.int32), pos)
                    diff = float(np.max(np.abs(np.asarray(ours, np.float64) - ref)))
                    ok &= diff <= 1e-4
                    info = json.loads(proc.stdout.strip().splitlines()[-1])
                    rows += [("transformers ref", f"{info['transformers']} torch {info['torch']} on {info['device']}"),
                             ("fp32 logits max |diff|", f"{diff:.2e} (max |logit| {np.abs(ref).max():.2f}; "
                                                        f"bound 1e-4)")]
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    width = max(len(k) for k, _ in rows)
    print(f"{'hf_checkpoint_io':<{width}}  result")
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
