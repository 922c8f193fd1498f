"""The Llama/Qwen2-family decoder as pure functions over a plain dict pytree of parameters.

Design choice (DESIGN 4.1): pure JAX, not Flax modules. The parameter layout is fixed by
`leap_jax.models.config` (a nested dict, layers stacked on a leading axis) because the HF
import/export code and the trainer address tensors by those names, and the layer stack runs under
`lax.scan` so compile time does not grow with depth. An NNX module tree would have to be split into
(graphdef, state) and re-flattened into that stacked dict at every API boundary, adding a second
naming scheme for no gain; the functions below are already pure, jittable, differentiable and
vmappable, and optax consumes the dict directly. The same code runs on jax 0.10.x and 0.11.x
(only long-stable `jax.lax` / `jax.numpy` APIs are used).

API:
  init(config, rng) -> params
  forward(params, config, tokens, positions, *, segment_ids=None, cache=None, cache_index=None,
          return_hidden=False) -> (logits [B,L,V] fp32 | hidden [B,L,D], cache | None)
  init_cache(config, batch, max_len, dtype=bf16) -> KVCache
  logits_from_hidden(params, config, hidden) -> fp32 logits

Masking: `segment_ids` [B, L] int, 0 = padding; a token attends to earlier (or equal) slots of the
same non-zero segment, so padded and packed batches both work. `positions` [B, L] are the RoPE
positions (give real positions for left-padded rows).

KV cache: k, v [num_layers, B, max_len, KV, head_dim] plus `seg` [B, max_len] (segment id of each
slot, 0 = empty). A forward with a cache writes its L new tokens at slots
cache_index .. cache_index+L-1 (cache_index scalar or per row [B]) and attends over the cached
slots at or before each query's slot with the same segment id. Slots beyond a query's slot are
never read, so a reused (donated) cache needs no clearing beyond what is rewritten.
Indices are not bounds-checked under jit: cache_index + L must be <= max_len.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from leap_jax.models.config import ModelConfig
from leap_jax.models.layers import apply_rope, attention, dense, rms_norm, rope_cos_sin, swiglu

Params = dict[str, Any]
# One of a cache's k / v: stacked [num_layers, ...], or a tuple of per-layer buffers
# (`unstack_cache`).
LayerBuffers = jax.Array | tuple[jax.Array, ...]


class KVCache(NamedTuple):
    """Preallocated key/value cache (a pytree; donate it to jitted steps)."""
    k: LayerBuffers  # [num_layers, B, max_len, KV, head_dim] (or per-layer tuple)
    v: LayerBuffers  # [num_layers, B, max_len, KV, head_dim] (or per-layer tuple)
    seg: jax.Array  # [B, max_len] int32 segment id per slot, 0 = empty / padding


def _dtype(name: str) -> jnp.dtype:
    return jnp.dtype(name)


def init(config: ModelConfig, rng: jax.Array, std: float = 0.02) -> Params:
    """Random parameters in the fixed layout: N(0, std) matrices, unit norms, zero biases."""
    c = config
    pd = _dtype(c.param_dtype)
    nl, d, i, v = c.num_layers, c.hidden_size, c.intermediate_size, c.vocab_size
    keys = iter(jax.random.split(rng, 9))

    def normal(shape):
        return (std * jax.random.normal(next(keys), shape, jnp.float32)).astype(pd)

    layers = {
        "attn_norm": jnp.ones((nl, d), pd),
        "wq": normal((nl, d, c.q_dim)),
        "wk": normal((nl, d, c.kv_dim)),
        "wv": normal((nl, d, c.kv_dim)),
        "wo": normal((nl, c.q_dim, d)),
        "mlp_norm": jnp.ones((nl, d), pd),
        "w_gate": normal((nl, d, i)),
        "w_up": normal((nl, d, i)),
        "w_down": normal((nl, i, d)),
    }
    if c.qkv_bias:
        layers["bq"] = jnp.zeros((nl, c.q_dim), pd)
        layers["bk"] = jnp.zeros((nl, c.kv_dim), pd)
        layers["bv"] = jnp.zeros((nl, c.kv_dim), pd)
    params: Params = {"embed": normal((v, d)), "layers": layers, "final_norm": jnp.ones((d,), pd)}
    if not c.tie_word_embeddings:
        params["lm_head"] = normal((d, v))
    return params


def init_cache(config: ModelConfig, batch: int, max_len: int,
               dtype: jnp.dtype = jnp.bfloat16) -> KVCache:
    """An empty cache for `batch` rows of `max_len` slots."""
    if batch < 1 or max_len < 1:
        raise ValueError(f"init_cache: batch={batch}, max_len={max_len}; expected positive ints")
    shape = (config.num_layers, batch, max_len, config.num_kv_heads, config.head_size)
    return KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype),
                   jnp.zeros((batch, max_len), jnp.int32))


def logits_from_hidden(params: Params, config: ModelConfig, hidden: jax.Array) -> jax.Array:
    """fp32 logits [..., V] from final-normed hidden states [..., D] (tied or separate head)."""
    if config.tie_word_embeddings:
        w = params["embed"].astype(hidden.dtype)
        return jnp.einsum("...d,vd->...v", hidden, w, preferred_element_type=jnp.float32)
    w = params["lm_head"].astype(hidden.dtype)
    return jnp.einsum("...d,dv->...v", hidden, w, preferred_element_type=jnp.float32)


def _write_rows(buf: jax.Array, new: jax.Array, index: jax.Array, lead: tuple,
                keep: jax.Array | None = None) -> jax.Array:
    """Write `new` [B, T, ...] into `buf` [*lead, B, S, ...] at slot index (scalar or [B]).
    keep [B, T] bool (scalar index only): those slots keep their previous contents."""
    n_lead = len(lead)
    trail = (0,) * (buf.ndim - n_lead - 2)
    new = new.astype(buf.dtype)
    if index.ndim == 0:
        new = new.reshape((1,) * n_lead + new.shape)
        start = (*lead, 0, index, *trail)
        if keep is not None:
            old = jax.lax.dynamic_slice(buf, start, new.shape)
            new = jnp.where(keep.reshape((1,) * n_lead + keep.shape + (1,) * len(trail)), old, new)
        return jax.lax.dynamic_update_slice(buf, new, start)
    if keep is not None:
        raise ValueError("_write_rows: keep needs a scalar index")

    def one(b_buf, b_new, b_idx):  # b_buf [*lead, S, ...], b_new [T, ...]
        b_new = b_new.reshape((1,) * n_lead + b_new.shape)
        return jax.lax.dynamic_update_slice(b_buf, b_new, (*lead, b_idx, *trail))

    return jax.vmap(one, in_axes=(n_lead, 0, 0), out_axes=n_lead)(buf, new, index)


def fuse_projections(params: Params) -> Params:
    """Params whose layers carry fused `wqkv` / `bqkv` (q|k|v) and `w_gate_up` (gate|up) matrices
    instead of the separate ones: two gemms per layer instead of five (fewer kernel launches per
    decode step). Works on stacked or unstacked layers; `forward` accepts either form."""
    def fuse(lp):
        if "wqkv" in lp:
            return lp
        out = {k: v for k, v in lp.items() if k not in ("wq", "wk", "wv", "bq", "bk", "bv",
                                                        "w_gate", "w_up")}
        out["wqkv"] = jnp.concatenate([lp["wq"], lp["wk"], lp["wv"]], axis=-1)
        if "bq" in lp:
            out["bqkv"] = jnp.concatenate([lp["bq"], lp["bk"], lp["bv"]], axis=-1)
        out["w_gate_up"] = jnp.concatenate([lp["w_gate"], lp["w_up"]], axis=-1)
        return out

    layers = params["layers"]
    if isinstance(layers, (list, tuple)):
        return dict(params, layers=tuple(fuse(lp) for lp in layers))
    return dict(params, layers=fuse(layers))


def cast_for_compute(params: Params, dtype: str) -> Params:
    """Params whose weights (matrices, embeddings, norm scales) are already in the compute `dtype`.

    `forward` casts each weight to the activations' dtype where it uses it; inside the decode loop
    XLA repeats those casts every step (a third of the kernels of a small model's step). Casting
    once per call is bit-identical: every weight is only ever used as `w.astype(x.dtype)`. Biases
    keep their dtype (`linear` adds them in float32)."""
    target = jnp.dtype(dtype)

    def cast(path: Any, leaf: Any) -> Any:
        name = str(getattr(path[-1], "key", ""))
        if name.startswith("b") or not jnp.issubdtype(leaf.dtype, jnp.floating):
            return leaf
        return leaf.astype(target)
    return jax.tree_util.tree_map_with_path(cast, params)


def unstack_layers(params: Params) -> Params:
    """Params with `layers` as a tuple of per-layer dicts (for the unrolled decode path)."""
    layers = params["layers"]
    if isinstance(layers, (list, tuple)):
        return params
    n = jax.tree_util.tree_leaves(layers)[0].shape[0]
    return dict(params, layers=tuple(jax.tree_util.tree_map(lambda a, i=i: a[i], layers)
                                     for i in range(n)))


def unstack_cache(cache: KVCache) -> KVCache:
    """A cache whose k / v are tuples of per-layer [B, S, KV, hd] buffers (unrolled path)."""
    if isinstance(cache.k, (list, tuple)):
        return cache
    return KVCache(tuple(cache.k), tuple(cache.v), cache.seg)


def forward(params: Params, config: ModelConfig, tokens: jax.Array, positions: jax.Array, *,
            segment_ids: jax.Array | None = None, cache: KVCache | None = None,
            cache_index: jax.Array | int | None = None, return_hidden: bool = False,
            unroll: int | bool = 1, attn_impl: str = "einsum",
            write_padding: bool = True,
            live_rows: jax.Array | None = None) -> tuple[jax.Array, KVCache | None]:
    """Run the decoder on tokens [B, L] at RoPE positions [B, L].

    Returns (fp32 logits [B, L, V], or final-normed hidden [B, L, D] in the compute dtype when
    `return_hidden`) and the updated cache (None without one). `attn_impl`: see
    `layers.attention` ("reduce" is a decode-step option).

    Layers run under `lax.scan` over the stacked layout (`unroll` is the scan's unroll factor).
    If `params["layers"]` is a tuple of per-layer dicts (`unstack_layers`) they run as an unrolled
    Python loop instead, and a cache must then be unstacked too (`unstack_cache`): each layer's
    k / v is its own buffer, so decode steps update and read them in place without slicing a
    stacked array (a sampler-side performance option; results are identical).
    A Python-int `cache_index` (e.g. 0 for a prefill) limits attention to the statically known
    slots < cache_index + L instead of the whole cache. With a cache, each row's written length (its
    last query slot + 1) goes to the attention, so the fused kernels ("dpa", "cudnn") skip the
    unwritten tail of the cache (`layers.attention`'s kv_lengths; the same result as the whole cache).
    live_rows [B] bool (with a cache; the fused attentions "dpa" / "cudnn" only): rows whose output the
    caller discards (a decode row that has stopped). Their attention output is zero and the fused
    kernel may skip their keys; live rows' results do not change. Their cache slots are written as
    before (with values nothing reads: a stopped row's later slots are never attended).
    write_padding=False (a cache and a scalar cache_index only): the cache slots of tokens with
    segment id 0 keep what they held (k, v and segment id), so a left-padded block can be written
    over slots whose earlier contents it must not erase (sampling/prefix.py).
    """
    c = config
    if tokens.ndim != 2 or positions.shape != tokens.shape:
        raise ValueError(f"forward: tokens {tokens.shape} and positions {positions.shape} must both "
                         f"be [B, L] with the same shape")
    if segment_ids is not None and segment_ids.shape != tokens.shape:
        raise ValueError(f"forward: segment_ids {segment_ids.shape} must match tokens {tokens.shape}")
    if cache is not None and cache_index is None:
        raise ValueError("forward: a cache needs cache_index (slot of the first new token)")
    unstacked = isinstance(params["layers"], (list, tuple))
    if cache is not None and unstacked != isinstance(cache.k, (list, tuple)):
        raise ValueError("forward: params layers and cache k/v must be both stacked or both "
                         "unstacked (see unstack_layers / unstack_cache)")
    dtype = _dtype(c.dtype)
    b, t = tokens.shape
    h, kvh, hd = c.num_heads, c.num_kv_heads, c.head_size
    seg = (jnp.ones((b, t), jnp.int32) if segment_ids is None
           else segment_ids.astype(jnp.int32))

    x = jnp.take(params["embed"], tokens, axis=0).astype(dtype)
    cos, sin = rope_cos_sin(positions, hd, c.rope_theta, dtype)

    kv_lengths = None  # with a cache: each row's keys past its last query slot are masked (see attention)
    q_lengths = None  # with live_rows: a stopped row's queries are padding (see attention)
    if cache is None:
        slot = jnp.arange(t)
        causal = slot[None, :, None] >= slot[None, None, :]
        mask = causal & (seg[:, :, None] == seg[:, None, :]) & (seg[:, None, :] != 0)
        new_seg, idx, hi, pad = None, None, t, None
    else:
        if cache.seg.shape[0] != b:
            raise ValueError(f"forward: cache batch {cache.seg.shape[0]} != tokens batch {b}")
        max_len = cache.seg.shape[1]
        hi = max_len
        if isinstance(cache_index, int):
            if not 0 <= cache_index <= max_len - t:
                raise ValueError(f"forward: cache_index={cache_index} with {t} tokens does not fit "
                                 f"a cache of {max_len} slots")
            hi = cache_index + t
        idx = jnp.asarray(cache_index, jnp.int32)
        if idx.ndim not in (0, 1) or (idx.ndim == 1 and idx.shape[0] != b):
            raise ValueError(f"forward: cache_index shape {idx.shape}; expected () or ({b},)")
        if not write_padding and idx.ndim != 0:
            raise ValueError("forward: write_padding=False needs a scalar cache_index")
        pad = None if write_padding else seg == 0
        new_seg = _write_rows(cache.seg, seg, idx, (), pad)
        qslot = jnp.broadcast_to(idx, (b,))[:, None] + jnp.arange(t)[None, :]  # [B, T]
        kslot = jnp.arange(hi)
        kseg = new_seg[:, :hi]
        mask = ((kslot[None, None, :] <= qslot[:, :, None])
                & (kseg[:, None, :] == seg[:, :, None]) & (kseg[:, None, :] != 0))
        kv_lengths = qslot[:, -1] + 1
        if live_rows is not None:
            live = jnp.asarray(live_rows, bool)
            if live.shape != (b,):
                raise ValueError(f"forward: live_rows shape {live.shape}; expected ({b},)")
            q_lengths = jnp.where(live, t, 0).astype(jnp.int32)
            kv_lengths = None if kv_lengths is None else jnp.where(live, kv_lengths, 1)

    def block(x, lp, kc, vc, layer):
        """One decoder layer; kc/vc: stacked caches (layer = traced index), per-layer buffers
        (layer = None) or None."""
        hn = rms_norm(x, lp["attn_norm"], c.rms_norm_eps)
        if "wqkv" in lp:  # fused projections (fuse_projections)
            qkv = dense(hn, lp["wqkv"], lp.get("bqkv"))
            q = qkv[..., : h * hd].reshape(b, t, h, hd)
            k = qkv[..., h * hd: (h + kvh) * hd].reshape(b, t, kvh, hd)
            v = qkv[..., (h + kvh) * hd:].reshape(b, t, kvh, hd)
        else:
            q = dense(hn, lp["wq"], lp.get("bq")).reshape(b, t, h, hd)
            k = dense(hn, lp["wk"], lp.get("bk")).reshape(b, t, kvh, hd)
            v = dense(hn, lp["wv"], lp.get("bv")).reshape(b, t, kvh, hd)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        if kc is not None:
            if idx is None:
                raise RuntimeError("forward: a cached layer without a cache index")
            lead = () if layer is None else (layer,)
            kc = _write_rows(kc, k, idx, lead, pad)
            vc = _write_rows(vc, v, idx, lead, pad)
            if layer is None:
                k, v = kc, vc
            else:
                k = jax.lax.dynamic_index_in_dim(kc, layer, 0, keepdims=False)
                v = jax.lax.dynamic_index_in_dim(vc, layer, 0, keepdims=False)
            if hi < k.shape[1]:
                k, v = k[:, :hi], v[:, :hi]
        a = attention(q, k, v, mask, attn_impl, kv_lengths=kv_lengths, q_lengths=q_lengths)
        x = x + dense(a.reshape(b, t, h * hd), lp["wo"])
        hn = rms_norm(x, lp["mlp_norm"], c.rms_norm_eps)
        if "w_gate_up" in lp:
            gu = dense(hn, lp["w_gate_up"])
            x = x + dense(jax.nn.silu(gu[..., : c.intermediate_size])
                          * gu[..., c.intermediate_size:], lp["w_down"])
        else:
            x = x + swiglu(hn, lp["w_gate"], lp["w_up"], lp["w_down"])
        return x, kc, vc

    kc: LayerBuffers | None
    vc: LayerBuffers | None
    if unstacked:
        run = jax.checkpoint(block, prevent_cse=True, static_argnums=(4,)) if c.remat else block
        ks, vs = [], []
        for i, lp in enumerate(params["layers"]):
            kc_i = None if cache is None else cache.k[i]
            vc_i = None if cache is None else cache.v[i]
            x, kc_i, vc_i = run(x, lp, kc_i, vc_i, None)
            ks.append(kc_i)
            vs.append(vc_i)
        kc, vc = tuple(ks), tuple(vs)
    else:
        def body(carry, xs):
            x, kc, vc = carry
            x, kc, vc = block(x, xs[0], kc, vc, xs[1])
            return (x, kc, vc), None

        if c.remat:
            body = jax.checkpoint(body, prevent_cse=False)
        kc0 = None if cache is None else cache.k
        vc0 = None if cache is None else cache.v
        xs = (params["layers"], jnp.arange(c.num_layers, dtype=jnp.int32))
        (x, kc, vc), _ = jax.lax.scan(body, (x, kc0, vc0), xs, unroll=unroll)

    hidden = rms_norm(x, params["final_norm"], c.rms_norm_eps)
    new_cache = None
    if cache is not None:
        if kc is None or vc is None or new_seg is None:
            raise RuntimeError("forward: a cached forward produced no updated cache")
        new_cache = KVCache(kc, vc, new_seg)
    if return_hidden:
        return hidden, new_cache
    return logits_from_hidden(params, c, hidden), new_cache
