"""Stateless building blocks of the Llama/Qwen2 decoder: RMSNorm, RoPE, masked GQA attention, SwiGLU.

Each function follows HF transformers' numerics so an fp32 model matches `Qwen2ForCausalLM` /
`LlamaForCausalLM` to float rounding:
  * RMSNorm normalises in fp32 (x * rsqrt(mean(x^2) + eps)), casts back, then scales by the weight;
  * RoPE uses the "rotate_half" convention (first / second half of head_dim), inv_freq =
    theta^(-2i/d), angles computed in fp32 and cast to the activation dtype;
  * attention scales q.k by 1/sqrt(head_dim), softmax in fp32, probabilities cast back;
  * the MLP is down(silu(gate(x)) * up(x)).
Matmuls use `preferred_element_type=float32` (fp32 accumulation for bf16 operands).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from leap_jax.models.config import ATTN_IMPLS

# Finite "minus infinity" for masked scores: a fully masked row (padding queries) gives a uniform
# distribution instead of NaN, and its output is ignored by every caller.
MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)


def dense(x: jax.Array, w: jax.Array, b: jax.Array | None = None) -> jax.Array:
    """x @ w (+ b) with fp32 accumulation, result in x's dtype."""
    y = jnp.einsum("...d,de->...e", x, w.astype(x.dtype), preferred_element_type=jnp.float32)
    if b is not None:
        y = y + b.astype(jnp.float32)
    return y.astype(x.dtype)


def rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
    """HF RMSNorm: normalise in fp32, cast to x's dtype, multiply by the weight (in x's dtype)."""
    x32 = x.astype(jnp.float32)
    var = jnp.mean(x32 * x32, axis=-1, keepdims=True)
    return (x32 * jax.lax.rsqrt(var + eps)).astype(x.dtype) * weight.astype(x.dtype)


def rope_cos_sin(positions: jax.Array, head_dim: int, theta: float,
                 dtype: jnp.dtype) -> tuple[jax.Array, jax.Array]:
    """cos/sin tables [B, L, head_dim] for integer positions [B, L] (angles in fp32)."""
    inv_freq = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
    freqs = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, L, hd/2]
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb).astype(dtype), jnp.sin(emb).astype(dtype)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotate x [B, L, heads, hd] by cos/sin [B, L, hd] (rotate_half, not interleaved)."""
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, :, None, :] + rotated * sin[:, :, None, :]


# head sizes the fused cuDNN kernel takes (multiples of 8 up to 128 on every GPU generation JAX supports)
CUDNN_HEAD_DIMS = range(8, 129, 8)


def resolve_attention(impl: str, dtype: str, head_dim: int, backend: str | None = None) -> str:
    """The attention a forward runs: `impl` itself, or for "auto" the fastest one that runs here.

    "auto" is "cudnn" (the fused kernel: on the H200 it took the RL update from 0.92 s to 0.23 s)
    on a GPU with bf16/fp16 compute and a head size cuDNN takes, and "einsum" elsewhere (CPU, TPU,
    fp32 models). `backend` defaults to JAX's default backend.
    """
    if impl != "auto":
        if impl not in ATTN_IMPLS:
            raise ValueError(f"attention impl={impl!r}; expected 'auto' or one of {ATTN_IMPLS}")
        return impl
    backend = backend or jax.default_backend()
    fused = backend in ("gpu", "cuda") and dtype in ("bfloat16", "float16") and head_dim in CUDNN_HEAD_DIMS
    return "cudnn" if fused else "einsum"


# The einsum path materialises fp32 scores [B, KV, G, T, S]; past this many bytes it runs over query
# chunks one after another (a prefill of 64 rows x 4096 tokens would otherwise take ~8 GiB a head
# group: several JAX processes on one GPU ran out of memory in the experiment's first attempt).
MAX_SCORE_BYTES = 1 << 30


def attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
              impl: str = "einsum", max_score_bytes: int | None = None,
              kv_lengths: jax.Array | None = None, q_lengths: jax.Array | None = None) -> jax.Array:
    """Grouped-query attention.

    q [B, T, H, hd]; k, v [B, S, KV, hd]; mask [B, T, S] bool (True = may attend).
    Returns [B, T, H, hd] in q's dtype. Scores and softmax in fp32; no KV head repetition in memory
    (queries are grouped as [B, T, KV, H/KV, hd] instead).
    impl "einsum": two dot_generals (bf16 operands, fp32 accumulation) - the general path; when
    the fp32 scores would pass `max_score_bytes` (default MAX_SCORE_BYTES) the queries go through
    in chunks under `lax.map`, so a long prefill's memory stays bounded (same result).
    impl "reduce": broadcast-multiply + fp32 sum, which XLA emits as reduction fusions that read
    the cache in its stored layout (no transposed copy for a gemm); meant for decode (T = 1).
    impl "dpa" / "cudnn": `jax.nn.dot_product_attention` with its XLA or cuDNN (fused, GPU only)
    implementation, the mask passed as is; a decode-step option for benchmarking one fused kernel
    against the two gemms. impl "auto": `resolve_attention`'s choice for q's dtype and head size.
    kv_lengths [B] (optional): every key at slot >= kv_lengths[b] is already masked for row b (a decode
    step's unwritten cache tail); "dpa" / "cudnn" pass it on as key_value_seq_lengths, so the fused
    kernel can skip those slots instead of reading them. The result is the same; other impls ignore it.
    q_lengths [B] (optional, "dpa" / "cudnn" only; others ignore it): row b's queries past
    q_lengths[b] are padding; a row with 0 (a decode row that has stopped) gets a zero output and the
    fused kernel may skip its keys altogether.
    """
    b, t, h, hd = q.shape
    impl = resolve_attention(impl, jnp.dtype(q.dtype).name, hd)
    kv = k.shape[2]
    g = h // kv
    qg = q.reshape(b, t, kv, g, hd)
    scale = 1.0 / float(hd) ** 0.5
    if impl == "reduce":  # every tensor stays in the cache's [B, (T,) S, KV, ...] order
        prod = qg.astype(jnp.float32)[:, :, None] * k.astype(jnp.float32)[:, None, :, :, None, :]
        scores = jnp.sum(prod, axis=-1) * scale  # [B, T, S, KV, G]
        scores = jnp.where(mask[:, :, :, None, None], scores, MASK_VALUE)
        probs = jax.nn.softmax(scores, axis=2).astype(q.dtype).astype(jnp.float32)
        out = jnp.sum(probs[..., None] * v.astype(jnp.float32)[:, None, :, :, None, :], axis=2)
        return out.astype(q.dtype).reshape(b, t, h, hd)
    if impl in ("dpa", "cudnn"):
        lengths = None if kv_lengths is None else jnp.clip(kv_lengths.astype(jnp.int32), 1, k.shape[1])
        queries = None if q_lengths is None else jnp.clip(q_lengths.astype(jnp.int32), 0, t)
        out = jax.nn.dot_product_attention(q, k.astype(q.dtype), v.astype(q.dtype), mask=mask[:, None],
                                           query_seq_lengths=queries, key_value_seq_lengths=lengths,
                                           implementation="xla" if impl == "dpa" else "cudnn")
        return out.astype(q.dtype)
    k, v = k.astype(q.dtype), v.astype(q.dtype)

    def block(qb: jax.Array, mb: jax.Array) -> jax.Array:  # qb [B, Tc, KV, G, hd], mb [B, Tc, S]
        scores = jnp.einsum("btkgd,bskd->bkgts", qb, k, preferred_element_type=jnp.float32)
        scores = jnp.where(mb[:, None, None, :, :], scores * scale, MASK_VALUE)
        probs = jax.nn.softmax(scores, axis=-1).astype(q.dtype)
        return jnp.einsum("bkgts,bskd->btkgd", probs, v, preferred_element_type=jnp.float32).astype(q.dtype)

    chunk = query_chunk(b, h, t, k.shape[1], max_score_bytes)
    if chunk == t:
        return block(qg, mask).reshape(b, t, h, hd)
    n = t // chunk
    qs = jnp.moveaxis(qg.reshape(b, n, chunk, kv, g, hd), 1, 0)
    ms = jnp.moveaxis(mask.reshape(b, n, chunk, mask.shape[-1]), 1, 0)
    # checkpointed: the backward recomputes each chunk's scores instead of keeping every chunk's
    # fp32 scores and probabilities (B=8, T=S=4096: 12.3 GiB of residuals -> one chunk's worth)
    out = jax.lax.map(jax.checkpoint(lambda xs: block(*xs)), (qs, ms))  # [n, B, Tc, KV, G, hd]
    return jnp.moveaxis(out, 0, 1).reshape(b, t, h, hd)


def query_chunk(b: int, h: int, t: int, s: int, max_score_bytes: int | None = None) -> int:
    """Query rows per attention block: all `t` when fp32 scores [B, H, T, S] fit in
    `max_score_bytes` (default MAX_SCORE_BYTES), else the largest divisor of t (halving from t,
    at least 16) whose block does."""
    budget = MAX_SCORE_BYTES if max_score_bytes is None else max_score_bytes
    chunk = t
    while b * h * chunk * s * 4 > budget and chunk % 2 == 0 and chunk // 2 >= 16:
        chunk //= 2
    return chunk


def swiglu(x: jax.Array, w_gate: jax.Array, w_up: jax.Array, w_down: jax.Array) -> jax.Array:
    """down(silu(gate(x)) * up(x))."""
    g = dense(x, w_gate)
    u = dense(x, w_up)
    return dense(jax.nn.silu(g) * u, w_down)
