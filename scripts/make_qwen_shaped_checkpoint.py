"""Write a Qwen2.5-Coder-1.5B-shaped HF folder with random weights and a tokenizer trained here.

    python scripts/make_qwen_shaped_checkpoint.py --out /tmp/qwen1.5b-random            # bf16, CUDA if present
    python scripts/make_qwen_shaped_checkpoint.py --out /tmp/q --dtype float32 --corpus data/bootstrap
    python scripts/make_qwen_shaped_checkpoint.py --out /tmp/tiny --shape tiny         # CPU, a second

Then: `python -m leap_jax.main --config configs/qwen2.5-coder-1.5b.yaml model.path=OUT`. What is real
and what stands in: leap_jax/models/random_checkpoint.py. Prints one JSON summary line.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from leap_jax.models.random_checkpoint import QWEN25_CODER_1P5B, TINY_QWEN2, write_random_checkpoint  # noqa: E402

SHAPES = {"1.5b": QWEN25_CODER_1P5B, "tiny": TINY_QWEN2}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="output folder (created)")
    p.add_argument("--shape", choices=sorted(SHAPES), default="1.5b")
    p.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16", help="stored dtype")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init-std", type=float, default=0.02, help="std of the random weights")
    p.add_argument("--device", default=None, help="torch device of the init (default: cuda if available)")
    p.add_argument("--corpus", default=None, help="bootstrap corpus folder (examples.jsonl) for the "
                                                  "tokenizer; default: the suite's prompts alone")
    a = p.parse_args(argv)
    from kernels_env.tasks import list_tasks
    from leap_jax.bootstrap.tokenizer_train import tokenizer_texts
    try:
        texts = tokenizer_texts(a.corpus, list_tasks())
    except FileNotFoundError as e:
        p.error(f"--corpus: {e}")
    summary = write_random_checkpoint(a.out, SHAPES[a.shape], texts, dtype=a.dtype, seed=a.seed,
                                      init_std=a.init_std, device=a.device)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
