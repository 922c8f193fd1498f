"""The name and layout mapping between our parameter pytree and HF Llama/Qwen2 safetensors names.

Our layout (see models/config.py): matrices are (in, out) and per-layer tensors are stacked on a
leading layer axis; HF stores one tensor per layer and nn.Linear weights as (out, in). Each entry
below says which of our leaves a HF tensor fills, whether it is transposed, and the HF shape
expected from a ModelConfig, so loading and exporting share one table.
"""
from __future__ import annotations

from dataclasses import dataclass

from leap_jax.models.config import ModelConfig


@dataclass(frozen=True)
class ParamSpec:
    """One leaf of our pytree: its path, full shape, and the HF tensor name(s) that fill it.

    `hf_pattern` contains `{i}` for stacked per-layer leaves (layer axis 0). `transpose`: the HF
    tensor is the (out, in) transpose of our per-layer (in, out) slice.
    """
    path: tuple[str, ...]
    shape: tuple[int, ...]
    hf_pattern: str
    transpose: bool
    stacked: bool

    def hf_names(self, num_layers: int) -> list[str]:
        if not self.stacked:
            return [self.hf_pattern]
        return [self.hf_pattern.format(i=i) for i in range(num_layers)]

    @property
    def hf_shape(self) -> tuple[int, ...]:
        """The shape of one HF tensor (a per-layer slice, transposed back where needed)."""
        s = self.shape[1:] if self.stacked else self.shape
        return tuple(reversed(s)) if self.transpose else tuple(s)

    @property
    def key(self) -> str:
        return "/".join(self.path)


_LAYER = "model.layers.{i}."


def param_specs(config: ModelConfig) -> list[ParamSpec]:
    """Every leaf that a model with this config has, in HF file order (embed, layers, norm, head)."""
    c = config
    d, i, v, n = c.hidden_size, c.intermediate_size, c.vocab_size, c.num_layers
    q, kv = c.q_dim, c.kv_dim

    def layer(name: str, shape: tuple[int, ...], hf: str, transpose: bool) -> ParamSpec:
        return ParamSpec(("layers", name), (n, *shape), _LAYER + hf, transpose, True)

    specs = [ParamSpec(("embed",), (v, d), "model.embed_tokens.weight", False, False)]
    specs.append(layer("attn_norm", (d,), "input_layernorm.weight", False))
    specs.append(layer("wq", (d, q), "self_attn.q_proj.weight", True))
    specs.append(layer("wk", (d, kv), "self_attn.k_proj.weight", True))
    specs.append(layer("wv", (d, kv), "self_attn.v_proj.weight", True))
    if c.qkv_bias:
        specs.append(layer("bq", (q,), "self_attn.q_proj.bias", False))
        specs.append(layer("bk", (kv,), "self_attn.k_proj.bias", False))
        specs.append(layer("bv", (kv,), "self_attn.v_proj.bias", False))
    specs.append(layer("wo", (q, d), "self_attn.o_proj.weight", True))
    specs.append(layer("mlp_norm", (d,), "post_attention_layernorm.weight", False))
    specs.append(layer("w_gate", (d, i), "mlp.gate_proj.weight", True))
    specs.append(layer("w_up", (d, i), "mlp.up_proj.weight", True))
    specs.append(layer("w_down", (i, d), "mlp.down_proj.weight", True))
    specs.append(ParamSpec(("final_norm",), (d,), "model.norm.weight", False, False))
    if not c.tie_word_embeddings:
        specs.append(ParamSpec(("lm_head",), (d, v), "lm_head.weight", True, False))
    return specs


def zero_o_proj_bias_names(config: ModelConfig) -> list[str]:
    """HF tensors that must be all-zero for our layout: Llama's `attention_bias` also biases o_proj.

    HF Llama/Mistral with attention_bias=True carry `o_proj.bias`; our layout has no output bias,
    so such a bias is accepted on load only when it is zero, and exported as zeros.
    """
    if config.qkv_bias and config.architecture != "Qwen2ForCausalLM":
        return [f"model.layers.{i}.self_attn.o_proj.bias" for i in range(config.num_layers)]
    return []


# Tensors some checkpoints carry that hold no weights of their own (recomputed from the config).
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
