"""The Qwen2.5-Coder-1.5B-shaped random checkpoint: a tiny folder of the same architecture built by
the same code, loaded by leap_jax and by transformers (logits compared on CPU, fp32), its padded
tokenizer, and the full shape checked by arithmetic and abstract shapes only (nothing allocated)."""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the random checkpoint is written with torch + transformers")
transformers = pytest.importorskip("transformers")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from leap_jax.models import decoder  # noqa: E402
from leap_jax.models.bpe import RESERVED_TOKEN  # noqa: E402
from leap_jax.models.config import ModelConfig  # noqa: E402
from leap_jax.models.hf import load_hf_checkpoint  # noqa: E402
from leap_jax.models.random_checkpoint import QWEN25_CODER_1P5B, TINY_QWEN2, qwen2_config, write_random_checkpoint  # noqa: E402
from leap_jax.models.tokenizer import Tokenizer  # noqa: E402
from leap_jax.rollout.prompts import prompt_texts  # noqa: E402

TASKS = ["relu", "softmax", "matmul_rect"]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("qwen_tiny")
    summary = write_random_checkpoint(out, TINY_QWEN2, prompt_texts(TASKS), dtype="float32", seed=3,
                                      init_std=0.15, device="cpu")
    return out, summary


def test_tiny_checkpoint_logits_match_transformers(tiny_dir):
    out, summary = tiny_dir
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"} <= set(summary["files"])
    config, params = load_hf_checkpoint(str(out), dtype="float32")
    assert config.architecture == "Qwen2ForCausalLM" and config.qkv_bias and config.tie_word_embeddings
    assert (config.vocab_size, config.hidden_size, config.num_layers) == (4096, 64, 2)
    assert config.rope_theta == 1e6 and config.eos_token_ids == (summary["eos_id"],)
    assert sum(x.size for x in jax.tree_util.tree_leaves(params)) == summary["params"] == config.num_params()
    model = transformers.AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32,
                                                              attn_implementation="eager").eval()
    tokens = np.random.default_rng(0).integers(0, config.vocab_size, (2, 17))
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(tokens)).logits.numpy()
    pos = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
    with jax.default_matmul_precision("highest"):
        ours, _ = decoder.forward(params, config, jnp.asarray(tokens, jnp.int32), pos)
    assert np.abs(ref).max() > 0.5  # not a comparison of near-zero logits
    np.testing.assert_allclose(np.asarray(ours, np.float32), ref, atol=1e-4, rtol=0)


def test_tiny_checkpoint_tokenizer_is_padded_with_unreachable_ids(tiny_dir):
    out, summary = tiny_dir
    tok = Tokenizer.from_dir(str(out))
    learned = summary["bpe_ids_learned"]
    assert tok.vocab_size == 4096 == learned + summary["reserved_ids"] and summary["reserved_ids"] > 0
    assert tok.eos_ids == (summary["eos_id"],) and tok.pad_id == summary["pad_id"]
    text = next(iter(prompt_texts(["softmax"])))
    ids = tok.encode(text)
    assert tok.decode(ids) == text and max(ids) < learned  # BPE never produces a reserved id
    assert tok.decode([learned + 7]) == RESERVED_TOKEN.format(7)
    assert json.loads((out / "tokenizer_config.json").read_text())["eos_token"] == "<|im_end|>"


def test_published_shape_by_arithmetic_and_abstract_init():
    """The 1.5B shape without allocating it: transformers' own count on the meta device, ours from
    the config formula and from jax.eval_shape, against the model card (1.54B, 1.31B non-embedding)."""
    hf_cfg = qwen2_config(QWEN25_CODER_1P5B)
    with torch.device("meta"):
        hf_count = sum(p.numel() for p in transformers.Qwen2ForCausalLM(hf_cfg).parameters())
    config = ModelConfig.from_hf_dict(hf_cfg.to_dict())
    abstract = jax.eval_shape(lambda k: decoder.init(config, k), jax.random.key(0))
    jax_count = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(abstract))
    assert hf_count == jax_count == config.num_params()
    assert round(config.num_params() / 1e9, 2) == 1.54
    embed = config.vocab_size * config.hidden_size
    assert round((config.num_params() - embed) / 1e9, 2) == 1.31
    assert abstract["layers"]["wk"].shape == (28, 1536, 256) and abstract["embed"].shape == (151936, 1536)
    assert config.rope_theta == 1e6 and config.rms_norm_eps == 1e-6 and config.max_position_embeddings == 32768


def test_rejects_an_unknown_dtype(tmp_path):
    with pytest.raises(ValueError, match="dtype='float16'; expected one of"):
        write_random_checkpoint(tmp_path, TINY_QWEN2, ["x"], dtype="float16")


def test_qwen_config_builds_its_policy_from_a_tiny_stand_in(tiny_dir, tmp_path):
    """configs/qwen2.5-coder-1.5b.yaml with model.path at the tiny folder: the config validates and
    the trainer's own builders give fp32 master weights, bf16 compute, the folder's tokenizer."""
    from pathlib import Path

    from leap_jax.train.config import load_config
    from leap_jax.train.trainer import build_model, build_tokenizer
    out, summary = tiny_dir
    root = Path(__file__).resolve().parents[2]
    cfg = load_config(root / "configs" / "qwen2.5-coder-1.5b.yaml",
                      [f"model.path={out}", f"train.run_dir={tmp_path / 'run'}"])
    assert cfg.model.source == "hf" and cfg.tokenizer.kind == "hf" and cfg.algorithm.name == "leap"
    tok = build_tokenizer(cfg, tmp_path, [])
    mcfg, params = build_model(cfg, tok, jax.random.key(0))
    assert tok.vocab_size == mcfg.vocab_size == 4096 and tok.eos_ids == (summary["eos_id"],)
    assert mcfg.param_dtype == "float32" and mcfg.dtype == "bfloat16" and mcfg.remat
    assert {x.dtype for x in jax.tree_util.tree_leaves(params)} == {jnp.dtype("float32")}


def test_pad_vocab_refuses_a_smaller_vocabulary(tmp_path):
    from leap_jax.models.bpe import pad_vocab, train_tokenizer
    tok = train_tokenizer(prompt_texts(["relu"]), 400)
    with pytest.raises(ValueError, match=r"already has 400 ids, more than vocab_size=300"):
        pad_vocab(tok, 300, tmp_path / "t.json")
    assert pad_vocab(tok, 400, tmp_path / "same.json").vocab_size == 400  # nothing to add


def test_tokenizer_texts_are_the_prompts_without_a_corpus(tmp_path):
    from leap_jax.bootstrap.tokenizer_train import tokenizer_texts
    assert list(tokenizer_texts(None, ["relu"])) == list(prompt_texts(["relu"]))
    with pytest.raises(FileNotFoundError, match=r"no examples.jsonl there"):
        tokenizer_texts(tmp_path, ["relu"])
