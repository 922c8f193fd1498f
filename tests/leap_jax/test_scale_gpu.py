"""GPU: the full Qwen2.5-Coder-1.5B-shaped random checkpoint (bf16 on disk) loaded by leap_jax matches
transformers' logits on the same GPU, both computing in fp32 at full matmul precision (no TF32).

Builds the folder in a temporary directory (seconds on the GPU), or reuses LEAP_SCALE_CKPT when it
names one made by scripts/make_qwen_shaped_checkpoint.py (the scale benchmark's folder).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ATOL = 2e-3  # fp32 through 28 layers in two frameworks (cuBLAS vs XLA summation orders)


@pytest.fixture(scope="module")
def ckpt_1p5b(tmp_path_factory):
    given = os.environ.get("LEAP_SCALE_CKPT")
    if given and os.path.isfile(os.path.join(given, "config.json")):
        return given
    from leap_jax.models.random_checkpoint import QWEN25_CODER_1P5B, write_random_checkpoint
    from leap_jax.rollout.prompts import prompt_texts
    out = tmp_path_factory.mktemp("qwen1p5b")
    write_random_checkpoint(out, QWEN25_CODER_1P5B, prompt_texts(["relu", "softmax"]), device="cuda")
    return str(out)


def test_1p5b_checkpoint_logits_match_transformers_on_gpu(ckpt_1p5b):
    import jax
    import jax.numpy as jnp

    from leap_jax.models import decoder
    from leap_jax.models.hf import load_hf_checkpoint
    config, params = load_hf_checkpoint(ckpt_1p5b, dtype="float32")
    assert (config.hidden_size, config.num_layers, config.num_heads, config.num_kv_heads,
            config.intermediate_size, config.vocab_size) == (1536, 28, 12, 2, 8960, 151936)
    assert config.tie_word_embeddings and round(config.num_params() / 1e9, 2) == 1.54
    tokens = np.random.default_rng(0).integers(0, 150000, (2, 96))
    pos = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
    with jax.default_matmul_precision("highest"):
        ours = np.asarray(decoder.forward(params, config, jnp.asarray(tokens, jnp.int32), pos)[0], np.float32)
    del params
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = transformers.AutoModelForCausalLM.from_pretrained(ckpt_1p5b, dtype=torch.float32,
                                                              attn_implementation="eager").cuda().eval()
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(tokens).cuda()).logits.float().cpu().numpy()
    diff = float(np.max(np.abs(ours - ref)))
    print(f"1.5B logits: max|ref| {np.abs(ref).max():.3f}, max abs diff {diff:.2e}")
    assert np.abs(ref).max() > 0.3 and np.isfinite(ours).all()
    assert diff <= ATOL, f"leap_jax vs transformers on the 1.5B shape: max abs diff {diff:.2e} > {ATOL}"
    assert (ours.argmax(-1) == ref.argmax(-1)).mean() > 0.99
