"""HF safetensors import/export against an independent writer/reader (safetensors.numpy), no torch."""
from __future__ import annotations

import json
import os

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from leap_jax.models.config import ModelConfig
from leap_jax.models.hf import CheckpointError, load_hf_checkpoint, save_hf_checkpoint
from leap_jax.models.safetensors_io import SafetensorsReader, _read_raw, list_tensors

BF16 = np.dtype(ml_dtypes.bfloat16)

QWEN = ModelConfig(vocab_size=64, hidden_size=16, intermediate_size=24, num_layers=3, num_heads=4,
                   num_kv_heads=2, qkv_bias=True, architecture="Qwen2ForCausalLM", rope_theta=1e6,
                   param_dtype="float32", dtype="float32", eos_token_ids=(5, 6), bos_token_id=1)
LLAMA = ModelConfig(vocab_size=48, hidden_size=16, intermediate_size=32, num_layers=2, num_heads=2,
                    num_kv_heads=1, head_dim=12, qkv_bias=False, architecture="LlamaForCausalLM",
                    tie_word_embeddings=True, param_dtype="float32", dtype="float32")


def random_params(c: ModelConfig, seed: int = 0, dtype=np.float32) -> dict:
    """Our layout, written out from the ModelConfig docstring (not from hf_names)."""
    r = np.random.default_rng(seed)
    d, i, v, n, q, kv = c.hidden_size, c.intermediate_size, c.vocab_size, c.num_layers, c.q_dim, c.kv_dim
    g = lambda *s: r.standard_normal(s).astype(np.float32).astype(dtype)  # noqa: E731
    layers = dict(attn_norm=g(n, d), wq=g(n, d, q), wk=g(n, d, kv), wv=g(n, d, kv), wo=g(n, q, d),
                  mlp_norm=g(n, d), w_gate=g(n, d, i), w_up=g(n, d, i), w_down=g(n, i, d))
    if c.qkv_bias:
        layers.update(bq=g(n, q), bk=g(n, kv), bv=g(n, kv))
    p = dict(embed=g(v, d), layers=layers, final_norm=g(d))
    if not c.tie_word_embeddings:
        p["lm_head"] = g(d, v)
    return p


def hf_tensors(c: ModelConfig, p: dict) -> dict[str, np.ndarray]:
    """The HF names and (out, in) layouts, spelled out independently of the code under test."""
    L = p["layers"]
    out = {"model.embed_tokens.weight": p["embed"], "model.norm.weight": p["final_norm"]}
    for k in range(c.num_layers):
        pre = f"model.layers.{k}."
        out[pre + "input_layernorm.weight"] = L["attn_norm"][k]
        out[pre + "post_attention_layernorm.weight"] = L["mlp_norm"][k]
        for ours, hf in (("wq", "q_proj"), ("wk", "k_proj"), ("wv", "v_proj"), ("wo", "o_proj")):
            out[pre + f"self_attn.{hf}.weight"] = L[ours][k].T
        for ours, hf in (("w_gate", "gate_proj"), ("w_up", "up_proj"), ("w_down", "down_proj")):
            out[pre + f"mlp.{hf}.weight"] = L[ours][k].T
        if c.qkv_bias:
            for ours, hf in (("bq", "q_proj"), ("bk", "k_proj"), ("bv", "v_proj")):
                out[pre + f"self_attn.{hf}.bias"] = L[ours][k]
    if not c.tie_word_embeddings:
        out["lm_head.weight"] = p["lm_head"].T
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def write_hf_dir(path, c: ModelConfig, tensors: dict[str, np.ndarray], **config_changes) -> str:
    os.makedirs(path, exist_ok=True)
    d = c.to_hf_dict()
    d.update(config_changes)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(d, f)
    save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    return str(path)


def assert_tree_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], dict):
            assert_tree_equal(a[k], b[k])
        else:
            x, y = np.asarray(a[k]), np.asarray(b[k])
            assert x.dtype == y.dtype and x.shape == y.shape, k
            assert np.array_equal(x.view(np.uint8), y.view(np.uint8)), k  # bitwise


def read_dir(path) -> dict[str, np.ndarray]:
    out = {}
    for f in sorted(os.listdir(path)):
        if f.endswith(".safetensors"):
            out.update(load_file(os.path.join(path, f)))
    return out


@pytest.mark.parametrize("c", [QWEN, LLAMA], ids=["qwen2", "llama_tied"])
def test_load_independently_written_dir(tmp_path, c):
    p = random_params(c)
    path = write_hf_dir(tmp_path / "m", c, hf_tensors(c, p))
    cfg, got = load_hf_checkpoint(path, as_numpy=True)
    assert_tree_equal(got, p)
    assert cfg == c  # every field survives config.json
    assert isinstance(got["layers"]["wq"], np.ndarray)


@pytest.mark.parametrize("c", [QWEN, LLAMA], ids=["qwen2", "llama_tied"])
def test_export_matches_hf_layout(tmp_path, c):
    p = random_params(c, seed=1)
    save_hf_checkpoint(str(tmp_path / "out"), c, p)
    files = read_dir(tmp_path / "out")
    want = hf_tensors(c, p)
    assert files.keys() == want.keys()  # tied: no lm_head.weight
    for k in want:
        assert files[k].dtype == want[k].dtype and np.array_equal(files[k], want[k]), k
    d = json.load(open(tmp_path / "out" / "config.json"))
    assert d["architectures"] == [c.architecture] and d["num_hidden_layers"] == c.num_layers
    assert d["torch_dtype"] == "float32"
    assert ModelConfig.from_hf_dict(d, dtype="float32", param_dtype="float32") == c


def test_roundtrip_bitwise_bf16_sharded(tmp_path):
    c = QWEN.replace(param_dtype="bfloat16", dtype="bfloat16")
    p = random_params(c, seed=2, dtype=BF16)
    src = write_hf_dir(tmp_path / "src", c, hf_tensors(c, p))
    cfg, loaded = load_hf_checkpoint(src)  # jnp arrays by default
    import jax
    assert isinstance(loaded["embed"], jax.Array) and loaded["embed"].dtype == jax.numpy.bfloat16
    out = tmp_path / "out"
    limit = 3000
    written = save_hf_checkpoint(str(out), cfg, loaded, max_shard_bytes=limit)
    shards = sorted(f for f in os.listdir(out) if f.endswith(".safetensors"))
    assert len(shards) > 2 and all(f.startswith("model-") and f"-of-{len(shards):05d}" in f for f in shards)
    index = json.load(open(out / "model.safetensors.index.json"))
    assert set(index["weight_map"].values()) == set(shards)
    tensors = {}
    for f in shards:
        t = list_tensors(str(out / f))
        sizes = sum(int(np.prod(x.shape)) * 2 for x in t.values())
        assert sizes <= limit or len(t) == 1
        assert all(index["weight_map"][n] == f for n in t)
        tensors.update(t)
    assert index["metadata"]["total_size"] == sum(int(np.prod(x.shape)) * 2 for x in tensors.values())
    assert set(tensors) == set(hf_tensors(c, p)) and all(x.dtype_code == "BF16" for x in tensors.values())
    assert all(os.path.exists(w) for w in written)
    cfg2, again = load_hf_checkpoint(str(out), as_numpy=True)
    assert cfg2 == cfg
    assert_tree_equal(again, p)
    # re-exporting unsharded into the same directory replaces the shards and the index
    save_hf_checkpoint(str(out), cfg, again)
    assert sorted(f for f in os.listdir(out) if "safetensors" in f) == ["model.safetensors"]
    assert_tree_equal(load_hf_checkpoint(str(out), as_numpy=True)[1], p)


def test_dtype_conversion_and_generation_config(tmp_path):
    c = LLAMA.replace(param_dtype="bfloat16")
    p = random_params(c, seed=3, dtype=BF16)
    path = write_hf_dir(tmp_path / "m", c, hf_tensors(c, p), eos_token_id=9)
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [9, 11], "pad_token_id": 3}, f)
    cfg, got = load_hf_checkpoint(path, dtype="float32", as_numpy=True)
    assert cfg.param_dtype == "float32" and cfg.dtype == "float32"
    assert cfg.eos_token_ids == (9, 11) and cfg.pad_token_id == 3
    assert got["embed"].dtype == np.float32
    assert np.array_equal(got["layers"]["wq"], p["layers"]["wq"].astype(np.float32))
    cfg_b, _ = load_hf_checkpoint(path, compute_dtype="float32", as_numpy=True)
    assert cfg_b.param_dtype == "bfloat16" and cfg_b.dtype == "float32"
    save_hf_checkpoint(str(tmp_path / "o"), cfg, got, dtype="bfloat16")
    g = json.load(open(tmp_path / "o" / "generation_config.json"))
    assert g == {"eos_token_id": [9, 11], "pad_token_id": 3}
    back = read_dir(tmp_path / "o")["model.layers.1.mlp.up_proj.weight"]
    assert back.dtype == BF16 and np.array_equal(back, p["layers"]["w_up"][1].T)


def test_tied_lm_head_copy_is_ignored_but_a_different_one_is_an_error(tmp_path):
    p = random_params(LLAMA, seed=4)
    t = hf_tensors(LLAMA, p)
    write_hf_dir(tmp_path / "ok", LLAMA, {**t, "lm_head.weight": p["embed"].copy()})
    _, got = load_hf_checkpoint(str(tmp_path / "ok"), as_numpy=True)
    assert "lm_head" not in got
    write_hf_dir(tmp_path / "bad", LLAMA, {**t, "lm_head.weight": p["embed"] + 1})
    with pytest.raises(CheckpointError, match="lm_head.weight differs"):
        load_hf_checkpoint(str(tmp_path / "bad"))


def test_llama_attention_bias_o_proj(tmp_path):
    c = LLAMA.replace(qkv_bias=True)
    p = random_params(c, seed=5)
    save_hf_checkpoint(str(tmp_path / "o"), c, p)
    files = read_dir(tmp_path / "o")
    assert np.array_equal(files["model.layers.0.self_attn.o_proj.bias"], np.zeros(16, np.float32))
    assert json.load(open(tmp_path / "o" / "config.json"))["attention_bias"] is True
    _, got = load_hf_checkpoint(str(tmp_path / "o"), as_numpy=True)
    assert_tree_equal(got, p)
    files["model.layers.1.self_attn.o_proj.bias"] = np.ones(16, np.float32)
    write_hf_dir(tmp_path / "bad", c, files)
    with pytest.raises(CheckpointError, match="o_proj.bias.*non-zero"):
        load_hf_checkpoint(str(tmp_path / "bad"))


# ------------------------------------------------------------------------------ bad directories


def test_no_config_json(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_hf_checkpoint(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="not a directory"):
        load_hf_checkpoint(str(tmp_path / "nope"))


def test_unsupported_architecture(tmp_path):
    p = random_params(QWEN)
    path = write_hf_dir(tmp_path / "m", QWEN, hf_tensors(QWEN, p), architectures=["GPT2LMHeadModel"])
    with pytest.raises(CheckpointError, match="GPT2LMHeadModel"):
        load_hf_checkpoint(path)
    path = write_hf_dir(tmp_path / "m2", QWEN, hf_tensors(QWEN, p), hidden_act="gelu")
    with pytest.raises(CheckpointError, match="gelu"):
        load_hf_checkpoint(path)


@pytest.mark.parametrize("changes, match", [
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0}}, "rope_type"),
    ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling"),
    ({"use_sliding_window": True}, "use_sliding_window"),
    ({"mlp_bias": True}, "mlp_bias"),
])
def test_unsupported_config_features(tmp_path, changes, match):
    path = write_hf_dir(tmp_path / "m", QWEN, hf_tensors(QWEN, random_params(QWEN)), **changes)
    with pytest.raises(CheckpointError, match=match):
        load_hf_checkpoint(path)


def test_mistral_sliding_window(tmp_path):
    c = LLAMA.replace(architecture="MistralForCausalLM")
    t = hf_tensors(c, random_params(c))
    bad = write_hf_dir(tmp_path / "a", c, t, sliding_window=32, max_position_embeddings=4096)
    with pytest.raises(CheckpointError, match="sliding_window=32"):
        load_hf_checkpoint(bad)
    cfg, _ = load_hf_checkpoint(write_hf_dir(tmp_path / "b", c, t, sliding_window=None), as_numpy=True)
    assert cfg.architecture == "MistralForCausalLM"
    save_hf_checkpoint(str(tmp_path / "o"), cfg, random_params(c))
    d = json.load(open(tmp_path / "o" / "config.json"))
    assert d["model_type"] == "mistral" and "sliding_window" in d and d["sliding_window"] is None


def test_missing_tensor_names_it_shape_and_file(tmp_path):
    t = hf_tensors(QWEN, random_params(QWEN))
    del t["model.layers.2.self_attn.k_proj.bias"]
    path = write_hf_dir(tmp_path / "m", QWEN, t)
    with pytest.raises(CheckpointError) as e:
        load_hf_checkpoint(path)
    msg = str(e.value)
    assert "model.layers.2.self_attn.k_proj.bias" in msg and "[8]" in msg and "model.safetensors" in msg


def test_wrong_shape_names_expected_and_found(tmp_path):
    t = hf_tensors(QWEN, random_params(QWEN))
    t["model.layers.1.mlp.down_proj.weight"] = t["model.layers.1.mlp.down_proj.weight"].T.copy()
    path = write_hf_dir(tmp_path / "m", QWEN, t)
    with pytest.raises(CheckpointError) as e:
        load_hf_checkpoint(path)
    msg = str(e.value)
    assert "model.layers.1.mlp.down_proj.weight" in msg and "[24, 16]" in msg and "[16, 24]" in msg
    assert "model.safetensors" in msg


def test_unexpected_tensor_and_ignored_inv_freq(tmp_path):
    t = hf_tensors(QWEN, random_params(QWEN))
    t["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.ones(2, np.float32)
    _ = load_hf_checkpoint(write_hf_dir(tmp_path / "ok", QWEN, t), as_numpy=True)
    t["model.layers.3.input_layernorm.weight"] = np.ones(16, np.float32)  # a 4th layer
    with pytest.raises(CheckpointError, match="unexpected tensor 'model.layers.3.input_layernorm"):
        load_hf_checkpoint(write_hf_dir(tmp_path / "bad", QWEN, t))


def test_index_errors_and_no_weights(tmp_path):
    path = write_hf_dir(tmp_path / "m", QWEN, hf_tensors(QWEN, random_params(QWEN)))
    os.rename(os.path.join(path, "model.safetensors"), os.path.join(path, "weights.bin"))
    with pytest.raises(CheckpointError, match="only safetensors"):
        load_hf_checkpoint(path)
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors"}}, f)
    with pytest.raises(CheckpointError, match="model-00001-of-00002.safetensors"):
        load_hf_checkpoint(path)


def test_save_rejects_params_not_matching_config(tmp_path):
    p = random_params(QWEN)
    bad = {**p, "layers": {**p["layers"], "wq": p["layers"]["wq"][:, :, :8]}}
    with pytest.raises(CheckpointError, match=r"layers/wq.*\[3, 16, 8\].*\[3, 16, 16\]"):
        save_hf_checkpoint(str(tmp_path / "a"), QWEN, bad)
    with pytest.raises(CheckpointError, match="missing param 'lm_head'"):
        save_hf_checkpoint(str(tmp_path / "b"), QWEN, {k: v for k, v in p.items() if k != "lm_head"})
    with pytest.raises(CheckpointError, match="unexpected param 'extra'"):
        save_hf_checkpoint(str(tmp_path / "c"), QWEN, {**p, "extra": np.zeros(1)})
    with pytest.raises(ValueError, match="Qwen2 checkpoints always carry"):
        c = QWEN.replace(qkv_bias=False)
        save_hf_checkpoint(str(tmp_path / "d"), c, random_params(c))


def test_raw_bf16_reader_matches_safe_open(tmp_path):
    a = np.random.default_rng(0).standard_normal((3, 5)).astype(BF16)
    f = str(tmp_path / "x.safetensors")
    save_file({"a": a, "b": np.arange(4, dtype=np.int32)}, f)
    info = list_tensors(f)
    assert info["a"].dtype_code == "BF16" and info["a"].shape == (3, 5)
    raw = _read_raw(info["a"])
    with SafetensorsReader(info) as r:
        assert np.array_equal(r.get("a").view(np.uint16), a.view(np.uint16))
    assert raw.dtype == BF16 and np.array_equal(raw.view(np.uint16), a.view(np.uint16))
    assert np.array_equal(_read_raw(info["b"]), np.arange(4, dtype=np.int32))


def test_memory_streaming_no_second_full_copy(tmp_path):
    """Export holds about one tensor beside the params; import about the params plus one tensor.

    Measured with tracemalloc, which sees numpy's data buffers (mapped file pages are not heap).
    """
    import tracemalloc
    c = ModelConfig(vocab_size=2048, hidden_size=128, intermediate_size=384, num_layers=6,
                    num_heads=4, num_kv_heads=2, qkv_bias=True, dtype="float32", param_dtype="float32")
    p = random_params(c, seed=6)
    total = sum(x.nbytes for x in [p["embed"], p["final_norm"], p["lm_head"], *p["layers"].values()])
    largest = max(p["embed"].nbytes, p["lm_head"].nbytes)
    assert total > 8 * largest / 2  # the model is much bigger than one tensor
    tracemalloc.start()
    try:
        save_hf_checkpoint(str(tmp_path / "m"), c, p, max_shard_bytes=total // 3)
        _, save_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        _, loaded = load_hf_checkpoint(str(tmp_path / "m"), as_numpy=True)
        _, load_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert save_peak < 2.5 * largest, (save_peak, largest, total)
    assert load_peak - base < total + 2.5 * largest, (load_peak - base, largest, total)
    assert_tree_equal(loaded, p)


def test_reader_falls_back_when_safe_open_cannot_give_bf16(tmp_path, monkeypatch):
    a = np.random.default_rng(1).standard_normal((4, 3)).astype(BF16)
    f = str(tmp_path / "x.safetensors")
    save_file({"a": a}, f)

    def refuse(self, file):
        raise TypeError("data type 'bfloat16' not understood")  # what an old safetensors says

    monkeypatch.setattr(SafetensorsReader, "_handle", refuse)
    with SafetensorsReader(list_tensors(f)) as r:
        got = r.get("a")
    assert got.dtype == BF16 and np.array_equal(got.view(np.uint16), a.view(np.uint16))
