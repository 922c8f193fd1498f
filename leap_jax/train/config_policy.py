"""Run-config sections of the policy: its model, tokenizer, sampler and device mesh, each with the
range checks of its own fields (`check()`); rules across sections live in `config.validate`."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from leap_jax.sampling.decode_impl import TRAINER_DECODE, DecodeImpl
from leap_jax.sampling.params import SamplingParams
from leap_jax.train.config_loader import ConfigError, choice, positive

DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class ModelCfg:
    """`source: random` builds a fresh decoder of the given size; `source: hf` loads `path`;
    `source: sft` first builds (or reuses) the SFT policy of the `sft_config` YAML (leap_jax.bootstrap.sft)
    and then loads it like `hf`, with its tokenizer."""
    source: str = "random"  # random | hf | sft
    path: str | None = None  # local HF folder (config.json + safetensors) when source=hf
    sft_config: str | None = None  # an SFT config (mode: sft) when source=sft
    hidden_size: int = 64
    intermediate_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int | None = None
    rope_theta: float = 10000.0
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = True
    qkv_bias: bool = False
    dtype: str = "float32"
    param_dtype: str = "float32"
    remat: bool = False

    def check(self) -> None:
        choice(self.source, ("random", "hf", "sft"), "model.source")
        if self.source == "hf" and not self.path:
            raise ConfigError("model.source=hf needs model.path: the local HF model folder "
                              "(config.json + *.safetensors)")
        if self.source == "sft" and not self.sft_config:
            raise ConfigError("model.source=sft needs model.sft_config: an SFT config file "
                              "(e.g. configs/bootstrap_sft_tiny.yaml)")
        choice(self.dtype, DTYPES, "model.dtype")
        choice(self.param_dtype, DTYPES, "model.param_dtype")


@dataclass
class TokenizerCfg:
    """`bpe`: train a small byte-level BPE on the task suite at run time (cached in the run dir);
    `file`: a tokenizer.json; `hf`: the tokenizer of the HF folder (defaults to model.path)."""
    kind: str = "bpe"  # bpe | file | hf
    path: str | None = None
    vocab_size: int = 512  # for kind=bpe

    def check(self, model_path: str | None) -> None:
        choice(self.kind, ("bpe", "file", "hf"), "tokenizer.kind")
        if self.kind == "file" and not self.path:
            raise ConfigError("tokenizer.kind=file needs tokenizer.path (a tokenizer.json)")
        if self.kind == "hf" and not (self.path or model_path):
            raise ConfigError("tokenizer.kind=hf needs tokenizer.path or model.path (an HF folder)")
        if self.kind == "bpe" and self.vocab_size < 300:
            raise ConfigError(f"tokenizer.vocab_size={self.vocab_size}: a byte-level BPE needs >= 300 "
                              "(256 bytes + special tokens + merges)")


@dataclass
class SamplingCfg:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    max_new_tokens: int = 256
    # sampler shape buckets (each (batch, prompt) bucket pair compiles prefill + decode once):
    # "coarse" = batch sizes max_batch/4, /2, /1 and prompt lengths 512, 1024, ... (few compilations,
    # padding rows are inactive); "fine" = every power of two (less padding, more compilations)
    buckets: str = "coarse"
    batch_buckets: list[int] = field(default_factory=list)  # explicit batch buckets (overrides `buckets`)
    prompt_buckets: list[int] = field(default_factory=list)  # explicit prompt buckets (overrides `buckets`)
    # The Sampler's decode (DecodeImpl, leap_jax/sampling/decode_impl.py, where each switch is described):
    # its defaults are TRAINER_DECODE's, the measured-fast path (docs/options.md), written once there.
    # steps_per_iter: decode steps per loop test; kv_reuse: a later turn prefills only its new tokens on
    # the conversation's kept cache; attention / prefill_attention: einsum, reduce (decode only), dpa,
    # cudnn or auto (cudnn where it runs, einsum elsewhere); skip_done_rows: the fused attentions skip
    # stopped rows; compact_factor: the live rows continue alone in a batch that much smaller (1 = off);
    # speculate: prompt-lookup drafts verified in one pass (0 = off), for all calls or only the rows
    # that continue a kept conversation (speculate_scope: all | continued)
    steps_per_iter: int = TRAINER_DECODE.steps_per_iter
    kv_reuse: bool = TRAINER_DECODE.kv_reuse
    attention: str = TRAINER_DECODE.attention
    prefill_attention: str = TRAINER_DECODE.prefill_attention
    skip_done_rows: bool = TRAINER_DECODE.skip_done_rows
    compact_factor: int = TRAINER_DECODE.compact_factor
    speculate: int = TRAINER_DECODE.speculate
    draft_ngrams: list[int] = field(default_factory=lambda: list(TRAINER_DECODE.draft_ngrams))
    speculate_scope: str = TRAINER_DECODE.speculate_scope

    def check(self) -> None:
        positive(self.temperature, "sampling.temperature", allow_zero=True)
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"sampling.top_p={self.top_p}: expected in (0, 1]")
        positive(self.top_k, "sampling.top_k", allow_zero=True)
        positive(self.max_new_tokens, "sampling.max_new_tokens")
        choice(self.buckets, ("coarse", "fine"), "sampling.buckets")
        try:  # the decode options' values and how they combine are DecodeImpl's rules; named as config keys
            self.decode_impl()
        except ValueError as e:
            raise ConfigError("sampling." + str(e).removeprefix("DecodeImpl ")) from e

    def decode_impl(self) -> DecodeImpl:
        """The Sampler's DecodeImpl of this section."""
        return TRAINER_DECODE.replace(steps_per_iter=self.steps_per_iter, kv_reuse=self.kv_reuse,
                          attention=self.attention, prefill_attention=self.prefill_attention,
                          skip_done_rows=self.skip_done_rows, compact_factor=self.compact_factor,
                          speculate=self.speculate, draft_ngrams=tuple(self.draft_ngrams),
                          speculate_scope=self.speculate_scope)

    def params(self, stop_token_ids: Sequence[int], temperature: float | None = None) -> SamplingParams:
        """The Sampler's per-call SamplingParams of this section (`temperature` overrides its own)."""
        return SamplingParams(temperature=self.temperature if temperature is None else temperature,
                              top_p=self.top_p, top_k=self.top_k, max_new_tokens=self.max_new_tokens,
                              stop_token_ids=tuple(stop_token_ids))


@dataclass
class MeshCfg:
    """Device mesh of the update (leap_jax.parallel): sizes of the ("data", "fsdp", "tensor") axes,
    -1 = all remaining devices (one axis at most). 1/1/1 is the single-device path, unchanged."""
    data: int = 1
    fsdp: int = 1
    tensor: int = 1
    # take the sharded path even on a mesh of one device (benchmarks/step_time.py compares it with
    # the plain path on one GPU; it must not be slower)
    force: bool = False

    def check(self) -> None:
        for ax in ("data", "fsdp", "tensor"):
            v = getattr(self, ax)
            if v == 0 or v < -1:
                raise ConfigError(f"mesh.{ax}={v}: expected a positive device count or -1 (the rest)")
        if [self.data, self.fsdp, self.tensor].count(-1) > 1:
            raise ConfigError("mesh: at most one of data / fsdp / tensor may be -1")
