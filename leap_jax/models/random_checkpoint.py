"""A HF Qwen2 model folder with random weights at a published shape (no download needed).

`write_random_checkpoint(out, QWEN25_CODER_1P5B, texts)` writes what `load_hf_checkpoint`,
`Tokenizer.from_dir` and `transformers.AutoModelForCausalLM.from_pretrained` read from a real
Qwen2.5-Coder-1.5B folder: config.json (transformers' own `Qwen2Config`), model.safetensors
(transformers' `save_pretrained`), generation_config.json, tokenizer.json and
tokenizer_config.json. What is real and what stands in:

- real: the architecture and every tensor's name, shape and dtype (hidden 1536, 28 layers, 12 query
  and 2 KV heads, intermediate 8960, vocabulary 151,936, tied embeddings, q/k/v biases, rope theta
  1e6, RMSNorm eps 1e-6, 32,768 positions), the file formats, the ChatML special tokens;
- stand-in: the weights (seeded normal draws of std `init_std`, RMSNorm gains 1 + the same noise,
  so a sampled text is noise and generation runs to its budget), and the tokenizer: a byte-level
  BPE trained on `texts` (the project's prompts and corpus) to as many merges as those texts hold,
  then padded with unreachable `<|reserved_N|>` ids up to the model's vocabulary (`bpe.pad_vocab`).

The weights are drawn on `device` (CUDA when available: a 1.5B init takes seconds there) tensor by
tensor with a seeded generator, so the same seed and device give the same folder.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from leap_jax.models.chat import END_OF_TEXT, IM_END

# transformers' Qwen2Config fields of Qwen/Qwen2.5-Coder-1.5B(-Instruct)'s config.json
QWEN25_CODER_1P5B: dict[str, Any] = dict(
    vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
    num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=32768, rms_norm_eps=1e-6,
    rope_theta=1000000.0, tie_word_embeddings=True)
# the same architecture at a size CPU tests build in a second (GQA, tied, biased q/k/v)
TINY_QWEN2: dict[str, Any] = dict(
    vocab_size=4096, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, rms_norm_eps=1e-6,
    rope_theta=1000000.0, tie_word_embeddings=True)
_TORCH_DTYPES = ("bfloat16", "float32")


def qwen2_config(shape: dict[str, Any], *, dtype: str = "bfloat16", eos_token_id: int | None = None,
                 pad_token_id: int | None = None) -> Any:
    """transformers.Qwen2Config of `shape` (the keys of QWEN25_CODER_1P5B), full attention only."""
    import inspect

    import transformers
    kw = {k: v for k, v in shape.items() if k != "rope_theta"}
    if "rope_parameters" in inspect.signature(transformers.Qwen2Config.__init__).parameters:
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": float(shape["rope_theta"])}
    else:  # transformers 4.x
        kw["rope_theta"] = float(shape["rope_theta"])
    cfg = transformers.Qwen2Config(**kw, use_sliding_window=False, hidden_act="silu",
                                   eos_token_id=eos_token_id, pad_token_id=pad_token_id,
                                   bos_token_id=None)
    cfg.architectures = ["Qwen2ForCausalLM"]
    cfg.dtype = dtype
    return cfg


def randomize_(model: Any, seed: int, init_std: float) -> None:
    """Seeded normal draws for every tensor of `model`, in place on its device: N(0, init_std)
    for matrices and biases, 1 + N(0, init_std) for RMSNorm gains (HF's init leaves those at 1 and
    the biases at 0, which would hide a mapping error)."""
    import torch
    dev = next(model.parameters()).device
    gen = torch.Generator(device=dev).manual_seed(int(seed))
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0.0, init_std, generator=gen)
            if "norm" in name:
                p.add_(1.0)


def write_random_checkpoint(out_dir: str | os.PathLike, shape: dict[str, Any], texts: Iterable[str], *,
                            dtype: str = "bfloat16", seed: int = 0, init_std: float = 0.02,
                            device: str | None = None) -> dict[str, Any]:
    """Write a Qwen2 folder of `shape` with random weights and a BPE tokenizer trained on `texts`,
    padded to shape["vocab_size"] ids; returns a summary (files, parameter count, merges learned,
    reserved ids, seconds per part)."""
    import time

    import torch
    import transformers

    from leap_jax.models.bpe import pad_vocab, train_tokenizer
    if dtype not in _TORCH_DTYPES:
        raise ValueError(f"dtype={dtype!r}; expected one of {_TORCH_DTYPES}")
    vocab = int(shape["vocab_size"])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    trained = train_tokenizer(texts, vocab)
    learned = trained.vocab_size
    tok = pad_vocab(trained, vocab, out / "tokenizer.json")
    eos, pad = tok.token_id(IM_END), tok.token_id(END_OF_TEXT)
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": IM_END, "pad_token": END_OF_TEXT,
         "bos_token": None, "model_max_length": int(shape["max_position_embeddings"])}, indent=2) + "\n")
    t_tok = time.perf_counter() - t0

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    cfg = qwen2_config(shape, dtype=dtype, eos_token_id=eos, pad_token_id=pad)
    t0 = time.perf_counter()
    with torch.device(device):
        model = transformers.Qwen2ForCausalLM(cfg).to(getattr(torch, dtype))
    randomize_(model, seed, init_std)
    model.generation_config = transformers.GenerationConfig(eos_token_id=eos, pad_token_id=pad)
    t_init = time.perf_counter() - t0
    t0 = time.perf_counter()
    model.save_pretrained(str(out))
    t_save = time.perf_counter() - t0
    n_params = sum(p.numel() for p in model.parameters())
    del model
    return {"dir": str(out), "files": sorted(os.listdir(out)), "params": int(n_params), "dtype": dtype,
            "device": device, "vocab_size": vocab, "bpe_ids_learned": learned,
            "reserved_ids": vocab - learned, "eos_id": eos, "pad_id": pad,
            "seconds": {"tokenizer": t_tok, "init": t_init, "save": t_save}}
