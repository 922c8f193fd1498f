"""ModelConfig: the size and shape of a Llama/Qwen2-family decoder, convertible to/from HF config.json.

Parameter layout (a plain nested dict pytree; layers stacked on a leading axis for `lax.scan`;
matrices stored (in_features, out_features), i.e. transposed from HF's nn.Linear weights):

    embed            [V, D]
    layers/attn_norm [L, D]
    layers/wq        [L, D, H*hd]     layers/bq [L, H*hd]    (bq/bk/bv only when qkv_bias)
    layers/wk        [L, D, KV*hd]    layers/bk [L, KV*hd]
    layers/wv        [L, D, KV*hd]    layers/bv [L, KV*hd]
    layers/wo        [L, H*hd, D]
    layers/mlp_norm  [L, D]
    layers/w_gate    [L, D, I]
    layers/w_up      [L, D, I]
    layers/w_down    [L, I, D]
    final_norm       [D]
    lm_head          [D, V]           (absent when tie_word_embeddings: logits use embed.T)
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM")
_DTYPES = ("float32", "bfloat16", "float16")
# the attention implementations (models.layers.attention); here, free of JAX, for config checks
ATTN_IMPLS = ("einsum", "reduce", "dpa", "cudnn")


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int | None = None  # None: hidden_size // num_heads
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    max_position_embeddings: int = 4096
    dtype: str = "bfloat16"  # activations / compute
    param_dtype: str = "bfloat16"  # stored weights
    remat: bool = False  # gradient checkpointing per block
    architecture: str = "Qwen2ForCausalLM"
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int | None = None
    extra_hf: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                     "num_kv_heads"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"ModelConfig.{name}={v!r}; expected a positive int")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"ModelConfig: num_heads={self.num_heads} must be a multiple of "
                             f"num_kv_heads={self.num_kv_heads} (grouped-query attention)")
        hd = self.head_dim
        if hd is None:
            if self.hidden_size % self.num_heads:
                raise ValueError(f"ModelConfig: hidden_size={self.hidden_size} not divisible by "
                                 f"num_heads={self.num_heads}; set head_dim explicitly")
            hd = self.hidden_size // self.num_heads
            object.__setattr__(self, "head_dim", hd)
        if hd % 2:
            raise ValueError(f"ModelConfig.head_dim={hd}; RoPE needs an even head_dim")
        for name in ("dtype", "param_dtype"):
            if getattr(self, name) not in _DTYPES:
                raise ValueError(f"ModelConfig.{name}={getattr(self, name)!r}; expected one of {_DTYPES}")
        object.__setattr__(self, "eos_token_ids", tuple(int(t) for t in self.eos_token_ids))

    def replace(self, **changes: Any) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    @property
    def head_size(self) -> int:
        """`head_dim` as an int (`__post_init__` always resolves a None head_dim)."""
        if self.head_dim is None:
            raise RuntimeError("ModelConfig.head_dim is None; __post_init__ should have set it")
        return self.head_dim

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_size

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_size

    def num_params(self) -> int:
        d, i, v, n = self.hidden_size, self.intermediate_size, self.vocab_size, self.num_layers
        per_layer = 2 * d + d * self.q_dim + 2 * d * self.kv_dim + self.q_dim * d + 3 * d * i
        if self.qkv_bias:
            per_layer += self.q_dim + 2 * self.kv_dim
        return v * d + n * per_layer + d + (0 if self.tie_word_embeddings else d * v)

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any], **overrides: Any) -> ModelConfig:
        """Build from a HF config.json dict; raises ValueError naming an unsupported architecture."""
        archs = d.get("architectures") or []
        arch = archs[0] if archs else {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM",
                                       "mistral": "MistralForCausalLM"}.get(d.get("model_type", ""), "")
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ValueError(f"unsupported architecture {arch or d.get('model_type')!r}; "
                             f"expected one of {SUPPORTED_ARCHITECTURES}")
        if d.get("rope_scaling"):
            raise ValueError(f"rope_scaling={d['rope_scaling']!r} is not supported (plain RoPE only)")
        eos = d.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, (list, tuple)) else (() if eos is None else (eos,))
        rope_theta = d.get("rope_theta")
        if rope_theta is None:  # transformers >= 5 may nest it under rope_parameters
            rope_theta = (d.get("rope_parameters") or {}).get("rope_theta", 10000.0)
        kw = dict(
            vocab_size=d["vocab_size"], hidden_size=d["hidden_size"],
            intermediate_size=d["intermediate_size"], num_layers=d["num_hidden_layers"],
            num_heads=d["num_attention_heads"],
            num_kv_heads=d.get("num_key_value_heads") or d["num_attention_heads"],
            head_dim=d.get("head_dim"), rope_theta=float(rope_theta),
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
            qkv_bias=bool(d.get("attention_bias", arch == "Qwen2ForCausalLM")),
            max_position_embeddings=int(d.get("max_position_embeddings", 4096)),
            architecture=arch, bos_token_id=d.get("bos_token_id"), eos_token_ids=eos_ids,
            pad_token_id=d.get("pad_token_id"),
        )
        kw.update(overrides)
        return cls(**kw)

    def to_hf_dict(self) -> dict[str, Any]:
        model_type = {"Qwen2ForCausalLM": "qwen2", "LlamaForCausalLM": "llama",
                      "MistralForCausalLM": "mistral"}[self.architecture]
        d: dict[str, Any] = {
            "architectures": [self.architecture], "model_type": model_type,
            "vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size, "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads, "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim, "rope_theta": self.rope_theta,
            "rms_norm_eps": self.rms_norm_eps, "tie_word_embeddings": self.tie_word_embeddings,
            "max_position_embeddings": self.max_position_embeddings, "hidden_act": "silu",
            "torch_dtype": self.param_dtype, "bos_token_id": self.bos_token_id,
            "eos_token_id": list(self.eos_token_ids) if len(self.eos_token_ids) != 1 else self.eos_token_ids[0],
            "pad_token_id": self.pad_token_id,
        }
        if model_type == "llama":
            d["attention_bias"] = self.qkv_bias
            d["mlp_bias"] = False
        elif model_type == "qwen2" and self.qkv_bias is False:
            raise ValueError("Qwen2 checkpoints always carry q/k/v biases; set qkv_bias=True or use Llama")
        elif model_type == "mistral" and self.qkv_bias:
            raise ValueError("Mistral checkpoints have no q/k/v biases; set qkv_bias=False or use Llama")
        d.update(self.extra_hf)
        return d
