"""Logit parity with `transformers` Qwen2/Llama on the same weights (fp32, max abs diff <= 1e-4).

Both directions: (a) a seeded random transformers model -> save_pretrained -> load_hf_checkpoint ->
our forward; (b) our init -> save_hf_checkpoint -> AutoModelForCausalLM.from_pretrained. A NumPy
forward written from the formulas checks the loaded weights too, so a mismatch points at either the
mapping or the decoder. Needs torch + transformers (the `parity` extra); skipped without them.
"""
from __future__ import annotations

import inspect
import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="parity tests need torch (pip install -e '.[parity]')")
transformers = pytest.importorskip("transformers",
                                   reason="parity tests need transformers (pip install -e '.[parity]')")
pytestmark = pytest.mark.parity  # run on the GPU machine too (bash scripts/gpu/tests.sh)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from leap_jax.models import decoder  # noqa: E402
from leap_jax.models.config import ModelConfig  # noqa: E402
from leap_jax.models.hf import CheckpointError, load_hf_checkpoint, save_hf_checkpoint  # noqa: E402

ATOL = 1e-4

# Small configs: GQA everywhere; Qwen2 untied and tied; Llama with head_dim != hidden / heads.
HF_CASES = {
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM",
              dict(vocab_size=128, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6,
                   max_position_embeddings=256, tie_word_embeddings=False), 1e6),
    "qwen2_tied": ("Qwen2Config", "Qwen2ForCausalLM",
                   dict(vocab_size=96, hidden_size=32, intermediate_size=40, num_hidden_layers=3,
                        num_attention_heads=4, num_key_value_heads=1, rms_norm_eps=1e-5,
                        max_position_embeddings=128, tie_word_embeddings=True), 10000.0),
    "llama": ("LlamaConfig", "LlamaForCausalLM",
              dict(vocab_size=112, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=12, rms_norm_eps=1e-5,
                   max_position_embeddings=128, tie_word_embeddings=False), 500000.0),
}


def _hf_config(case: str):
    cfg_cls, _, kw, theta = HF_CASES[case]
    cls = getattr(transformers, cfg_cls)
    params = inspect.signature(cls.__init__).parameters
    if "rope_parameters" in params:  # transformers >= 5 nests rope_theta
        cfg = cls(**kw, rope_parameters={"rope_type": "default", "rope_theta": theta})
    else:
        cfg = cls(**kw, rope_theta=theta)
    try:
        cfg._attn_implementation = "eager"  # the model constructor has no attn_implementation argument
    except (AttributeError, ValueError):
        pass  # sdpa matches eager in fp32 to well within the tolerance
    return cfg


def _effective_theta(cfg) -> float:
    rp = getattr(cfg, "rope_parameters", None) or {}
    return float(rp.get("rope_theta", getattr(cfg, "rope_theta", float("nan"))))


def _randomize_torch(model, seed: int) -> None:
    """Non-trivial values everywhere (HF init leaves norms at 1 and biases at 0)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            p.copy_(1.0 + 0.1 * noise if "norm" in name else 0.15 * noise)


def _from_pretrained(path: str):
    cls = transformers.AutoModelForCausalLM
    try:
        out = cls.from_pretrained(path, dtype=torch.float32, attn_implementation="eager",
                                  output_loading_info=True)
    except TypeError:  # transformers 4.x spells it torch_dtype
        out = cls.from_pretrained(path, torch_dtype=torch.float32, attn_implementation="eager",
                                  output_loading_info=True)
    model, info = out
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        assert not info.get(key), f"transformers reported {key}: {info[key]}"
    return model.eval()


def _torch_logits(model, tokens: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(input_ids=torch.from_numpy(tokens.astype(np.int64))).logits.float().numpy()


def _our_logits(params, config: ModelConfig, tokens: np.ndarray) -> np.ndarray:
    b, t = tokens.shape
    pos = np.broadcast_to(np.arange(t, dtype=np.int32), (b, t))
    with jax.default_matmul_precision("highest"):  # no TF32 on GPUs
        logits, _ = decoder.forward(params, config, jnp.asarray(tokens, jnp.int32), jnp.asarray(pos))
    return np.asarray(logits, np.float32)


def _numpy_logits(params, c: ModelConfig, tokens: np.ndarray) -> np.ndarray:
    """Independent fp64 reference: RMSNorm, rotate-half RoPE, causal GQA softmax attention, SwiGLU."""
    p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)
    b, t = tokens.shape
    h, kv, hd = c.num_heads, c.num_kv_heads, c.head_dim

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + c.rms_norm_eps) * w

    inv = 1.0 / c.rope_theta ** (np.arange(0, hd, 2) / hd)
    ang = np.arange(t)[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))

    def rope(x):  # [b, t, heads, hd]
        rot = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], -1)
        return x * cos[None, :, None] + rot * sin[None, :, None]

    x = p["embed"][tokens]
    causal = np.tril(np.ones((t, t), bool))
    L = p["layers"]
    for i in range(c.num_layers):
        y = rms(x, L["attn_norm"][i])
        q, k, v = y @ L["wq"][i], y @ L["wk"][i], y @ L["wv"][i]
        if c.qkv_bias:
            q, k, v = q + L["bq"][i], k + L["bk"][i], v + L["bv"][i]
        q, k, v = q.reshape(b, t, h, hd), k.reshape(b, t, kv, hd), v.reshape(b, t, kv, hd)
        q, k = rope(q), rope(k)
        k, v = np.repeat(k, h // kv, axis=2), np.repeat(v, h // kv, axis=2)
        s = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(hd)
        s = np.where(causal, s, -np.inf)
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        o = np.einsum("bhqk,bkhd->bqhd", a, v).reshape(b, t, h * hd)
        x = x + o @ L["wo"][i]
        y = rms(x, L["mlp_norm"][i])
        gate = y @ L["w_gate"][i]
        x = x + (gate / (1 + np.exp(-gate)) * (y @ L["w_up"][i])) @ L["w_down"][i]
    x = rms(x, p["final_norm"])
    head = p["embed"].T if c.tie_word_embeddings else p["lm_head"]
    return x @ head


def _tokens(vocab: int, seed: int, b: int = 2, t: int = 13) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, vocab, size=(b, t))


def _max_diff(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


@pytest.fixture(scope="module", params=sorted(HF_CASES))
def hf_dir(request, tmp_path_factory):
    """A seeded random transformers model saved with save_pretrained (safetensors)."""
    case = request.param
    cfg = _hf_config(case)
    torch.manual_seed(0)
    model = getattr(transformers, HF_CASES[case][1])(cfg).eval()
    _randomize_torch(model, seed=1)
    path = str(tmp_path_factory.mktemp(case))
    model.save_pretrained(path)  # safetensors is the default (and the only format in transformers 5)
    assert "model.safetensors" in os.listdir(path)
    return case, path, model


def test_hf_to_ours_logits_match(hf_dir):
    case, path, model = hf_dir
    config, params = load_hf_checkpoint(path, dtype="float32")
    assert config.dtype == "float32" and config.architecture == HF_CASES[case][1]
    assert config.rope_theta == _effective_theta(model.config) == HF_CASES[case][3]
    assert config.tie_word_embeddings == HF_CASES[case][2]["tie_word_embeddings"]
    tokens = _tokens(config.vocab_size, seed=2)
    ref = _torch_logits(model, tokens)
    assert np.abs(ref).max() > 0.5  # the comparison is not between near-zero logits
    np_diff = _max_diff(_numpy_logits(params, config, tokens), ref)
    assert np_diff <= ATOL, f"{case}: NumPy reference on the loaded weights vs transformers: {np_diff:.2e}"
    diff = _max_diff(_our_logits(params, config, tokens), ref)
    print(f"{case}: max|logit| {np.abs(ref).max():.3f} max abs diff {diff:.2e}")
    assert diff <= ATOL, f"{case}: decoder.forward vs transformers max abs diff {diff:.2e}"


def test_hf_roundtrip_is_bitwise(hf_dir, tmp_path):
    _, path, _ = hf_dir
    config, params = load_hf_checkpoint(path, as_numpy=True)
    save_hf_checkpoint(str(tmp_path / "out"), config, params, max_shard_bytes=8000)
    assert os.path.exists(tmp_path / "out" / "model.safetensors.index.json")
    from safetensors.numpy import load_file
    orig = load_file(os.path.join(path, "model.safetensors"))
    new = {}
    for f in os.listdir(tmp_path / "out"):
        if f.endswith(".safetensors"):
            new.update(load_file(str(tmp_path / "out" / f)))
    assert orig.keys() == new.keys()
    for k in orig:
        assert orig[k].dtype == new[k].dtype and np.array_equal(orig[k], new[k]), k
    config2, params2 = load_hf_checkpoint(str(tmp_path / "out"), as_numpy=True)
    assert config2 == config
    flat1, flat2 = jax.tree_util.tree_leaves_with_path(params), jax.tree_util.tree_leaves_with_path(params2)
    assert [k for k, _ in flat1] == [k for k, _ in flat2]
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(flat1, flat2, strict=False))


@pytest.mark.parametrize("hf_dir", ["llama"], indirect=True)
def test_transformers_sharded_checkpoint_loads_the_same(hf_dir, tmp_path):
    _, path, model = hf_dir
    model.save_pretrained(str(tmp_path), max_shard_size="40KB")
    assert os.path.exists(tmp_path / "model.safetensors.index.json")
    assert sum(f.endswith(".safetensors") for f in os.listdir(tmp_path)) > 2
    c1, p1 = load_hf_checkpoint(path, as_numpy=True)
    c2, p2 = load_hf_checkpoint(str(tmp_path), as_numpy=True)
    assert c1 == c2
    l1, l2 = jax.tree_util.tree_leaves(p1), jax.tree_util.tree_leaves(p2)
    assert len(l1) == len(l2) and all(np.array_equal(a, b) for a, b in zip(l1, l2, strict=False))


OUR_CASES = {
    "qwen2": ModelConfig(vocab_size=100, hidden_size=32, intermediate_size=56, num_layers=2, num_heads=4,
                         num_kv_heads=2, qkv_bias=True, rope_theta=1e6, rms_norm_eps=1e-6,
                         architecture="Qwen2ForCausalLM", max_position_embeddings=128,
                         eos_token_ids=(3, 4), dtype="float32", param_dtype="float32"),
    "llama_tied_bias": ModelConfig(vocab_size=90, hidden_size=24, intermediate_size=40, num_layers=2,
                                   num_heads=3, num_kv_heads=1, head_dim=16, qkv_bias=True,
                                   tie_word_embeddings=True, rope_theta=10000.0, rms_norm_eps=1e-5,
                                   architecture="LlamaForCausalLM", max_position_embeddings=64,
                                   dtype="float32", param_dtype="float32"),
    "qwen2_head_dim": ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=2,
                                  num_heads=4, num_kv_heads=2, head_dim=16, qkv_bias=True,
                                  architecture="Qwen2ForCausalLM", max_position_embeddings=64,
                                  dtype="float32", param_dtype="float32"),
    "mistral": ModelConfig(vocab_size=80, hidden_size=32, intermediate_size=48, num_layers=2, num_heads=4,
                           num_kv_heads=2, qkv_bias=False, rope_theta=1e6, rms_norm_eps=1e-5,
                           architecture="MistralForCausalLM", max_position_embeddings=64,
                           dtype="float32", param_dtype="float32"),
}


@pytest.mark.parametrize("case", sorted(OUR_CASES))
def test_ours_to_hf_logits_match(case, tmp_path):
    config = OUR_CASES[case]
    params = decoder.init(config, jax.random.PRNGKey(0), std=0.15)
    # perturb every leaf so norms and biases are not their trivial init values
    leaves, treedef = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(jax.random.PRNGKey(1), len(leaves))
    params = jax.tree_util.tree_unflatten(
        treedef, [x + 0.1 * jax.random.normal(k, x.shape, x.dtype) for x, k in zip(leaves, keys, strict=False)])
    save_hf_checkpoint(str(tmp_path), config, params)
    model = _from_pretrained(str(tmp_path))
    assert _effective_theta(model.config) == config.rope_theta
    assert model.config.tie_word_embeddings == config.tie_word_embeddings
    tokens = _tokens(config.vocab_size, seed=3)
    ref = _torch_logits(model, tokens)
    assert np.abs(ref).max() > 0.5
    diff = _max_diff(_our_logits(params, config, tokens), ref)
    print(f"{case}: max|logit| {np.abs(ref).max():.3f} max abs diff {diff:.2e}")
    assert diff <= ATOL, f"{case}: decoder.forward vs transformers max abs diff {diff:.2e}"
    # and back: what transformers saves loads into the same params, bitwise
    model.save_pretrained(str(tmp_path / "hf"))
    _, again = load_hf_checkpoint(str(tmp_path / "hf"), as_numpy=True)
    flat1, flat2 = jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(again)
    assert len(flat1) == len(flat2) and all(np.array_equal(np.asarray(a), b) for a, b in zip(flat1, flat2, strict=False))


@pytest.mark.parametrize("hf_dir", ["qwen2"], indirect=True)
def test_bad_directories_give_clear_errors(hf_dir, tmp_path):
    _, path, _ = hf_dir
    import shutil
    from safetensors.numpy import load_file, save_file
    d = tmp_path / "m"
    shutil.copytree(path, d)
    os.remove(d / "config.json")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_hf_checkpoint(str(d))
    shutil.copy(os.path.join(path, "config.json"), d / "config.json")
    cfg = json.load(open(d / "config.json"))
    json.dump({**cfg, "architectures": ["MixtralForCausalLM"], "model_type": "mixtral"},
              open(d / "config.json", "w"))
    with pytest.raises(CheckpointError, match="unsupported architecture 'MixtralForCausalLM'"):
        load_hf_checkpoint(str(d))
    json.dump(cfg, open(d / "config.json", "w"))
    tensors = load_file(str(d / "model.safetensors"))
    missing = dict(tensors)
    del missing["model.layers.1.self_attn.o_proj.weight"]
    save_file(missing, str(d / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"missing tensor 'model.layers.1.self_attn.o_proj.weight' "
                                              r"\(expected shape \[32, 32\]\) in .*model.safetensors"):
        load_hf_checkpoint(str(d))
    wrong = dict(tensors)
    wrong["model.embed_tokens.weight"] = wrong["model.embed_tokens.weight"][:-1]
    save_file(wrong, str(d / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"'model.embed_tokens.weight' in .*model.safetensors has "
                                              r"shape \[127, 32\]; expected \[128, 32\]"):
        load_hf_checkpoint(str(d))


# A ChatML template in Jinja, with transformers' {% generation %} markers around what is trainable.
CHATML_JINJA = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\\n' }}"
    "{% else %}{{ message['content'] + '<|im_end|>' + '\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def test_chat_rendering_matches_transformers_apply_chat_template(tmp_path):
    from leap_jax.models.chat import render_chat, render_text
    from leap_jax.models.tokenizer import Tokenizer
    from tests.leap_jax.test_tokenizer_chat import CONVO, _build_tokenizer_json
    path = str(tmp_path / "tokenizer.json")
    _build_tokenizer_json(path)
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=path)
    hf.chat_template = CHATML_JINJA
    ours = Tokenizer.from_file(path)
    msgs = [{"role": m.role, "content": m.content} for m in CONVO]
    for gen in (False, True):
        text = hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
        assert text == render_text(CONVO, add_generation_prompt=gen)
        out = hf.apply_chat_template(msgs, tokenize=True, add_generation_prompt=gen, return_dict=True,
                                     return_assistant_tokens_mask=True)
        ids, mask = render_chat(ours, CONVO, add_generation_prompt=gen)
        assert list(out["input_ids"]) == ids
        assert list(out["assistant_masks"]) == [int(m) for m in mask]
        assert sum(mask) > 0
