"""Run-config sections of the policy: its model, tokenizer, sampler and device mesh, each with the
range checks of its own fields (`check()`); rules across sections live in `config.validate`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from collections.abc import Sequence

from leap_jax.train.config_loader import ConfigError, choice, positive

if TYPE_CHECKING:
    from leap_jax.sampling.decode_impl import DecodeImpl
    from leap_jax.sampling.params import SamplingParams

DTYPES = ("float32", "bfloat16", "float16")
# = leap_jax.sampling.decode_impl.BATCHINGS, spelled out so config checks import no JAX
# (tests/leap_jax/test_continuous_batching.py checks they agree)
BATCHINGS = ("static", "continuous")
# = ("auto", *leap_jax.models.layers.ATTN_IMPLS), spelled out for the same reason (same test)
ATTENTIONS = ("auto", "einsum", "reduce", "dpa", "cudnn")


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
    # padding rows are inactive); "fine" = every power of two (the former behaviour, less padding)
    buckets: str = "coarse"
    batch_buckets: list[int] = field(default_factory=list)  # explicit batch buckets (overrides `buckets`)
    prompt_buckets: list[int] = field(default_factory=list)  # explicit prompt buckets (overrides `buckets`)
    # decode loop options of the Sampler (leap_jax.sampling.sampler.decode): consecutive while_loops
    # with growing static KV windows, and decode steps per loop test; tokens are the same either way
    decode_segments: int = 1
    steps_per_iter: int = 4  # H200, 26M policy, batch 64: 0.49 ms/step vs 0.58 with 1 (decode_profile.py)
    # opt-in continuous batching (DecodeImpl.batching / .slots, leap_jax/sampling/continuous.py):
    # "continuous" decodes each generate call's rows through `slots` decode slots (0 = half the
    # batch bucket), a slot taking the next row when its row stops (the trainer's Sampler reads
    # `decode_impl()`)
    batching: str = "static"
    slots: int = 0
    # KV reuse across turns (DecodeImpl.kv_reuse, leap_jax/sampling/prefix.py): the sampler keeps each
    # rollout conversation's KV cache between its turns and a debugging turn prefills only its feedback
    # (not the prompt and earlier turns again); the same tokens up to rounding. Costs the kept caches'
    # memory between turns (at most every row's cache of the previous turn; with batching=continuous
    # also a cache of every row of a call). The defaults below are the measured-fast path (docs/options.md)
    kv_reuse: bool = True
    # the decode step's attention (models.layers.attention): einsum, reduce, dpa, cudnn (the fused
    # GPU kernel) or auto (cudnn where it runs, einsum elsewhere); the tokens are the same up to rounding
    attention: str = "auto"
    # the prefills' attention (whole prompts and kv_reuse's deltas): einsum, dpa, cudnn or auto
    prefill_attention: str = "auto"
    # with attention dpa / cudnn: skip each row's unwritten cache tail, and rows that have stopped
    # (the same tokens; off to compare)
    attention_lengths: bool = True
    skip_done_rows: bool = True
    # static batching: once at most 1/compact_factor of a decode call's rows still generate, the loop
    # continues with those rows alone in a batch that much smaller (leap_jax/sampling/compact.py;
    # one more compiled loop body per batch bucket); 1 = off
    compact_factor: int = 4
    # speculative decoding (DecodeImpl.speculate, leap_jax/sampling/speculative.py): up to `speculate`
    # tokens a row drafted by prompt lookup (n-gram sizes `draft_ngrams`) and verified in one forward
    # pass; the same tokens (greedy) and distribution. Static batching; with speculate_scope all also
    # steps_per_iter 1; combines with kv_reuse and compaction; 0 = off
    speculate: int = 8
    draft_ngrams: list[int] = field(default_factory=lambda: [4, 3, 2])
    # which decode calls speculate: all, or continued (needs kv_reuse: debugging turns and preempted
    # rows only; first turns, which draft little, run the plain loop with steps_per_iter)
    speculate_scope: str = "continued"

    def check(self) -> None:
        positive(self.temperature, "sampling.temperature", allow_zero=True)
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"sampling.top_p={self.top_p}: expected in (0, 1]")
        positive(self.top_k, "sampling.top_k", allow_zero=True)
        positive(self.max_new_tokens, "sampling.max_new_tokens")
        choice(self.buckets, ("coarse", "fine"), "sampling.buckets")
        choice(self.batching, BATCHINGS, "sampling.batching")
        choice(self.attention, ATTENTIONS, "sampling.attention")
        try:  # the decode options' values and how they combine are DecodeImpl's rules; named as config keys
            self.decode_impl()
        except ValueError as e:
            raise ConfigError("sampling." + str(e).removeprefix("DecodeImpl ")) from e

    def decode_impl(self) -> DecodeImpl:
        """The Sampler's DecodeImpl of this section."""
        from leap_jax.sampling.decode_impl import DecodeImpl
        return DecodeImpl(decode_segments=self.decode_segments, steps_per_iter=self.steps_per_iter,
                          batching=self.batching, slots=self.slots, kv_reuse=self.kv_reuse,
                          attention=self.attention, prefill_attention=self.prefill_attention,
                          attention_lengths=self.attention_lengths,
                          skip_done_rows=self.skip_done_rows, compact_factor=self.compact_factor,
                          speculate=self.speculate, draft_ngrams=tuple(self.draft_ngrams),
                          speculate_scope=self.speculate_scope)

    def params(self, stop_token_ids: Sequence[int], temperature: float | None = None) -> SamplingParams:
        """The Sampler's per-call SamplingParams of this section (`temperature` overrides its own)."""
        from leap_jax.sampling.params import SamplingParams  # imports numpy: only when sampling
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
