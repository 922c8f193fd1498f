"""benchmarks/scale_1p5b.py: its roofline and FLOP formulas against hand counts, and a tiny CPU run
that records every part, a timed-out one included, as JSON lines."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import scale_1p5b  # noqa: E402
from leap_jax.models.config import ModelConfig  # noqa: E402

QWEN_1P5B = ModelConfig(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_layers=28,
                        num_heads=12, num_kv_heads=2, tie_word_embeddings=True, qkv_bias=True)


def test_roofline_at_the_issue_point_is_about_41k_tokens_per_s() -> None:
    weights = QWEN_1P5B.num_params() * 2  # bf16, the tied embedding stored once
    kv_per_token = 2 * 28 * 2 * 128 * 2  # K and V x layers x KV heads x head dim x bf16 bytes
    by_hand = 128 / ((weights + 128 * 2048 * kv_per_token) / 3.35e12)
    got = scale_1p5b.decode_roofline(weights, kv_per_token, 128, 2048, 3.35e12)
    assert got == pytest.approx(by_hand) and 39_000 < got < 42_000


def test_model_flops_count_every_matmul_weight_once_plus_causal_attention() -> None:
    import jax

    from leap_jax.models import decoder
    abstract = jax.eval_shape(lambda k: decoder.init(QWEN_1P5B, k), jax.random.key(0))
    matmul = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(abstract) if x.ndim >= 2)
    length = 4096
    # per token: QK^T and PV, 2 flops per multiply-add, over (t + 1) keys at position t, averaged
    attention_fwd = 28 * 2 * 2 * (12 * 128) * np.mean(np.arange(1, length + 1))
    by_hand = 3 * (2 * matmul + attention_fwd)
    assert scale_1p5b.model_flops_per_token(QWEN_1P5B, length) == pytest.approx(by_hand, rel=1e-4)


@pytest.mark.slow
def test_tiny_run_records_each_part_and_a_timed_out_one(tmp_path) -> None:
    rc = scale_1p5b.main(["--out", str(tmp_path), "--tiny", "--parts", "checkpoint,sampler,update,sampler_resume",
                          "--caps", "sampler_resume=1", "--reps", "1"])
    assert rc == 1  # a new process cannot even import JAX in a second
    rows = {}
    for line in (tmp_path / scale_1p5b.RESULTS).read_text().splitlines():
        r = json.loads(line)
        rows[r["part"]] = r
    assert rows["sampler_resume"]["failed"] and rows["sampler_resume"]["timed_out"]
    ck = rows["checkpoint"]
    assert ck["vocab_size"] == 4096 and ck["reserved_ids"] > 0 and (tmp_path / "ckpt" / "model.safetensors").is_file()
    s = rows["sampler"]
    assert s["rows"] == 4 and s["new"] == 8 and s["tok_s"] > 0 and 0 < s["roofline_frac_nominal"] < 1
    assert s["kv_bytes_per_token"] == 2 * 2 * 2 * 16 * 2  # K and V, 2 layers, 2 KV heads of 16, bf16
    u = rows["update"]
    assert u["tok_s"] > 0 and u["plan_gib"] > 0 and u["xla_tflops"] > 0
    # XLA's own count (the remat recompute in, elementwise work out) is of the model count's order
    assert 0.8 * u["model_tflops"] < u["xla_tflops"] < 2.5 * u["model_tflops"]
    assert "sampler" in scale_1p5b.summary(tmp_path)
