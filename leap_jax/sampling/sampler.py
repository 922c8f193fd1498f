"""Fast autoregressive sampling: jitted prefill + jitted `lax.while_loop` decode over a donated cache.

Pipeline per batch chunk (DESIGN 4.2):
  1. prompts are padded to a static prompt bucket (left padding by default: every row's last prompt
     token sits in the last prompt slot, so decode writes all rows at one scalar slot; right padding
     is supported with per-row cache slots) and the batch to a static batch bucket;
  2. `prefill` runs the decoder over the padded prompts, writing the KV cache, and computes logits
     only for the last real token of each row ([B, V], never [B, L, V]);
  3. `decode` samples a token, then loops (`lax.while_loop`) feeding one token per step through the
     decoder at its cache slot (dynamic_update_slice, no re-layout), until every row has emitted a
     stop id or `max_new` tokens.
Both jitted functions take the KV cache as a donated argument and return it; the Sampler keeps the
returned buffer and donates it again on the next call with the same shape.

Sampling values (temperature, top_p, top_k, stop ids, max_new) are traced arguments: changing them
never recompiles. temperature 0 = greedy (argmax); top_k 0 = off; top_p 1 = off. Filtering order
follows HF: temperature, then top-k, then top-p (nucleus over the top-k renormalised
probabilities); tokens tied with the cut-off logit are kept. The sort needed by top-k/top-p runs
only when one of them is active (`lax.cond`).

Returned `logprobs` are log-probs of the sampled tokens under the UNMODIFIED model distribution
(log_softmax of the raw logits: temperature 1, no top-k/top-p), i.e. exactly what
`token_logprobs(params, ...)` recomputes for the same tokens. This is the quantity PPO's ratio
pi_theta / pi_old uses when the trainer recomputes log-probs with `forward`; the temperature /
truncated behaviour distribution is not returned.

Determinism: the same params, prompts, SamplingParams, rng (and Sampler buckets) give the same
tokens; step i of a chunk uses `fold_in(chunk_rng, i)`.

Opt-in: `DecodeImpl(kv_reuse=True)` keeps each conversation's cache between its turns
(`generate(..., conversations=ids)`): a later turn prefills only its new tokens on top of a copy of
the kept K/V, then decodes as above (sampling/prefix.py).
"""
from __future__ import annotations

import collections
import time
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from leap_jax.models.config import ModelConfig
from leap_jax.models.decoder import (KVCache, Params, cast_for_compute, forward, fuse_projections, init_cache,
                                     logits_from_hidden, unstack_cache, unstack_layers)
from leap_jax.sampling.buckets import DEFAULT_PROMPT_BUCKETS, pick_bucket, validate_buckets
from leap_jax.sampling.buckets import batch_buckets as default_batch_buckets
from leap_jax.sampling.compact import compact_rows, compact_size, put_rows, take_rows
from leap_jax.sampling.decode_base import DecodeResult, gather_logprob, loop_inputs, sample_from_logits
from leap_jax.sampling.decode_impl import PADDINGS, DecodeImpl
from leap_jax.sampling.params import SamplingParams, check_preempt
from leap_jax.sampling.prefix import DEFAULT_DELTA_BUCKETS, Kept, KeptCaches, place_rows, prefill_delta, reusable_prefix
from leap_jax.sampling.speculative import decode_speculative

DEFAULT_SAMPLING = SamplingParams()  # frozen: one shared default is safe
DEFAULT_IMPL = DecodeImpl()  # frozen too


class SampleOutput(NamedTuple):
    """Per prompt: generated ids (stop token included), their fp32 log-probs, stopped-on-stop-id."""
    tokens: list[list[int]]
    logprobs: list[np.ndarray]
    finished: list[bool]


def prefill(params: Params, config: ModelConfig, cache: KVCache, tokens: jax.Array,
            lengths: jax.Array, *, padding: str = "left", unroll: int | bool = 1,
            attn_impl: str = "einsum") -> tuple[jax.Array, KVCache]:
    """Run padded prompts tokens [B, P] (real lengths [B] >= 1) into `cache` slots 0..P-1.

    Returns fp32 logits [B, V] of each row's last real token and the filled cache. attn_impl: the
    prompt's attention (`layers.attention`; "reduce" is a decode-step option).
    """
    if padding not in PADDINGS:
        raise ValueError(f"padding={padding!r}; expected one of {PADDINGS}")
    b, p = tokens.shape
    lengths = lengths.astype(jnp.int32)
    slot = jnp.arange(p, dtype=jnp.int32)[None, :]
    if padding == "left":
        start = (p - lengths)[:, None]
        seg = (slot >= start).astype(jnp.int32)
        pos = jnp.maximum(slot - start, 0)
    else:
        seg = (slot < lengths[:, None]).astype(jnp.int32)
        pos = jnp.broadcast_to(slot, (b, p))
    cache = cache._replace(seg=jnp.zeros_like(cache.seg))
    hidden, filled = forward(params, config, tokens, pos, segment_ids=seg, cache=cache,
                             cache_index=0, return_hidden=True, unroll=unroll, attn_impl=attn_impl)
    if filled is None:
        raise RuntimeError("prefill: forward with a cache returned no cache")
    if padding == "left":
        last = hidden[:, -1]
    else:
        last = jnp.take_along_axis(hidden, (lengths - 1)[:, None, None], axis=1)[:, 0]
    return logits_from_hidden(params, config, last), filled


def decode(params: Params, config: ModelConfig, cache: KVCache, logits: jax.Array,
           prompt_lengths: jax.Array, active: jax.Array, rng: jax.Array, temperature: jax.Array,
           top_p: jax.Array, top_k: jax.Array, stop_ids: jax.Array, max_new: jax.Array, *,
           max_new_tokens: int, prompt_slots: int, padding: str = "left", pad_id: int = 0,
           unroll: int | bool = 1, rng_impl: str = "threefry",
           attn_impl: str = "einsum", skip_done_rows: bool = True,
           filtered: bool | None = None, steps_per_iter: int = 1,
           exit_live: jax.Array | int = 0, compact_factor: int = 1) -> tuple[DecodeResult, KVCache]:
    """Sample up to `max_new` (traced, <= static `max_new_tokens`; a scalar or one budget per row)
    tokens per row after `prefill`.

    logits [B, V]: prefill's last-token logits. active [B] bool: rows to generate (padding rows of
    a batch bucket are inactive and never delay the early exit). stop_ids [S] int32, padded with -1.
    The cache must have >= prompt_slots + max_new_tokens - 1 slots. rng_impl "threefry" draws
    with `rng` as given (portable bit-exact streams); "rbg" derives an `unsafe_rbg` key from it
    (XLA's RngBitGenerator: much cheaper per [B, V] draw, deterministic on a given backend/version).
    attn_impl: the decode step's attention (one of layers.ATTN_IMPLS, see `layers.attention`).
    skip_done_rows: the fused attentions ("dpa", "cudnn"), which read only each row's written cache,
    also skip rows that have stopped (forward's `live_rows`); the same tokens either way.
    filtered: see `sample_from_logits` (static: no per-step `lax.cond`, whose predicate XLA:GPU
    reads back to the host every step).
    steps_per_iter: decode steps per `while_loop` iteration (each loop test is a device->host
    read on GPU); steps past the end are computed and discarded, never recorded.
    exit_live (traced): the loop also ends once at most this many rows are still generating (0:
    only when every row stopped or used its budget). The rows it leaves are neither finished nor at
    their budget: a caller continues them from prompt + tokens so far (`Sampler.generate(preempt=)`).
    compact_factor (static): 1 = off; k >= 2: once at most ceil(B / k) rows still
    generate, the loop continues with those rows alone in a batch of ceil(B / k) rows (its cache rows
    copied out and back, sampling/compact.py): cheaper steps for a long tail, one more compiled loop
    body; the same greedy tokens, the same sampling distribution from another random stream.
    """
    b = logits.shape[0]
    n = max_new_tokens
    lens, base, stop_ids, max_new, exit_live, rng = loop_inputs(
        b, n, prompt_lengths, prompt_slots, padding, stop_ids, max_new, exit_live, rng, rng_impl)

    def is_stop(tok):
        return jnp.any(tok[:, None] == stop_ids[None, :], axis=-1)

    def record(i, tok, lg, state_done, out_tok, out_lp, rows=None):
        """Write column i of the [B, n] outputs: for every row, or (compacted) for rows `rows`."""
        live = ~state_done
        tok = jnp.where(live, tok, pad_id).astype(jnp.int32)
        lp = jnp.where(live, gather_logprob(lg, tok), 0.0)
        if rows is None:
            out_tok = jax.lax.dynamic_update_slice(out_tok, tok[:, None], (0, i))
            out_lp = jax.lax.dynamic_update_slice(out_lp, lp[:, None], (0, i))
        else:
            out_tok = out_tok.at[rows, i].set(tok)
            out_lp = out_lp.at[rows, i].set(lp)
        stop = live & is_stop(tok)
        return tok, live, stop, out_tok, out_lp

    if int(steps_per_iter) < 1:
        raise ValueError(f"decode steps_per_iter={steps_per_iter}; expected an int >= 1")
    tok0 = sample_from_logits(logits, jax.random.fold_in(rng, 0), temperature, top_p, top_k,
                              filtered)
    out_tok = jnp.full((b, n), pad_id, jnp.int32)
    out_lp = jnp.zeros((b, n), jnp.float32)
    tok0, live0, stop0, out_tok, out_lp = record(0, tok0, logits, ~active, out_tok, out_lp)
    # `done`: stopped, out of budget (a row's token i is recorded while i < its max_new) or inactive
    state = (jnp.int32(1), cache, tok0, out_tok, out_lp, ~active | stop0 | (max_new <= 1),
             live0.astype(jnp.int32), stop0)

    def cond(s):
        i, _, _, _, _, done, _, _ = s
        return (i < n) & (jnp.sum((~done).astype(jnp.int32)) > exit_live)

    def make_body(rows=None):
        """The loop body; `rows` (compacted loop): the full batch's row of each of the state's rows."""
        def pick(x):  # a per-row value of the full batch, for the state's rows
            return x if rows is None or jnp.ndim(x) == 0 else jnp.take(x, rows, axis=0)
        lens_r, base_r, max_new_r = pick(lens), pick(base), pick(max_new)

        def step(s):
            i, cache, tok, out_tok, out_lp, done, lengths, finished = s
            slot = base_r + i - 1
            pos = (lens_r + i - 1)[:, None]
            lg, cache = forward(params, config, tok[:, None], pos, cache=cache, cache_index=slot,
                                unroll=unroll, attn_impl=attn_impl,
                                live_rows=~done if skip_done_rows else None)
            lg = lg[:, 0]
            new = sample_from_logits(lg, jax.random.fold_in(rng, i), temperature, top_p, top_k,
                                     filtered)
            new, live, stop, out_tok, out_lp = record(i, new, lg, done, out_tok, out_lp, rows)
            if rows is None:
                lengths, finished = lengths + live.astype(jnp.int32), finished | stop
            else:
                lengths = lengths.at[rows].add(live.astype(jnp.int32))
                finished = finished.at[rows].set(jnp.take(finished, rows) | stop)
            return (i + 1, cache, new, out_tok, out_lp, done | stop | (max_new_r <= i + 1),
                    lengths, finished)

        def body(s):
            s = step(s)
            for _ in range(int(steps_per_iter) - 1):
                # A step past the budget or the last live row is discarded: its cache write
                # lands on a slot no recorded step reads before rewriting it.
                # The cache is taken as written (a select would copy it every step).
                nxt = step(s)
                ok = cond(s)
                s = tuple(n if k == 1 else jnp.where(ok, n, o)
                          for k, (n, o) in enumerate(zip(nxt, s, strict=False)))
            return s
        return body

    small = compact_size(b, compact_factor)
    if small < b:  # the full batch while more than `small` rows generate, then the live rows alone
        def wide_cond(s):
            return cond(s) & (jnp.sum((~s[5]).astype(jnp.int32)) > small)

        state = jax.lax.while_loop(wide_cond, make_body(), state)
        i, full, tok, out_tok, out_lp, done, lengths, finished = state
        rows = compact_rows(done, small)
        state = (i, take_rows(full, rows), jnp.take(tok, rows), out_tok, out_lp, jnp.take(done, rows),
                 lengths, finished)
        state = jax.lax.while_loop(cond, make_body(rows), state)
        _, part, _, out_tok, out_lp, _, lengths, finished = state
        return DecodeResult(out_tok, out_lp, lengths, finished), put_rows(full, rows, part)
    state = jax.lax.while_loop(cond, make_body(), state)
    _, cache, _, out_tok, out_lp, _, lengths, finished = state
    return DecodeResult(out_tok, out_lp, lengths, finished), cache


# ------------------------------------------------------------------------------ Python API
def exit_rows(preempt: float, rows: int) -> int:
    """`decode`'s exit_live for a chunk of `rows` rows: floor(preempt x rows), below rows."""
    return min(int(preempt * rows), max(rows - 1, 0))


class Sampler:
    """Bucketed, jitted generation for one ModelConfig.

    max_batch: rows per jitted call (larger requests are split); batch sizes are padded up to
    `batch_buckets` (default: powers of two up to max_batch). prompt_buckets: static prompt
    lengths (a prompt longer than the largest is an error). max_new_tokens: static decode budget
    (cache slots); SamplingParams.max_new_tokens may lower it per call without recompiling.
    cache_dtype: KV cache dtype (default: the compute dtype, i.e. bfloat16 for bf16 models).
    pad_id: the token of padding (default: the config's pad token, else 0).
    impl: how the decode loop is built (`DecodeImpl`: padding side, layer loop, RNG, attention,
    fused projections, steps per loop iteration, compaction, speculation); every alternative samples
    the same greedy tokens (`kv_reuse=True`: conversations keep their caches between turns, see
    sampling/prefix.py).
    delta_buckets: kv_reuse only: static lengths of a later turn's new tokens (a longer delta is
    prefilled in full).
    `trace_counts` counts traces (= compilations) of the jitted functions.
    """

    def __init__(self, config: ModelConfig, max_batch: int = 64,
                 prompt_buckets: Sequence[int] = DEFAULT_PROMPT_BUCKETS,
                 max_new_tokens: int = 512, batch_buckets: Sequence[int] | None = None,
                 pad_id: int | None = None, impl: DecodeImpl = DEFAULT_IMPL,
                 max_stop_ids: int = 8, cache_dtype: str | None = None,
                 delta_buckets: Sequence[int] = DEFAULT_DELTA_BUCKETS):
        if not isinstance(impl, DecodeImpl):
            raise ValueError(f"Sampler impl={impl!r}; expected a leap_jax.sampling.decode_impl.DecodeImpl")
        if max_new_tokens < 1:
            raise ValueError(f"Sampler max_new_tokens={max_new_tokens}; expected a positive int")
        if max_stop_ids < 1:
            raise ValueError(f"Sampler max_stop_ids={max_stop_ids}; expected a positive int")
        self.config = config
        self.max_batch = int(max_batch)
        self.batch_buckets = validate_buckets(
            "batch_buckets",
            batch_buckets if batch_buckets is not None else default_batch_buckets(max_batch))
        if self.batch_buckets[-1] < self.max_batch:
            raise ValueError(f"batch_buckets {self.batch_buckets} must reach max_batch={max_batch}")
        self.prompt_buckets = validate_buckets("prompt_buckets", prompt_buckets)
        self.delta_buckets = validate_buckets("delta_buckets", delta_buckets)
        self.max_new_tokens = int(max_new_tokens)
        self.impl = impl
        self.max_stop_ids = int(max_stop_ids)
        self.cache_dtype = jnp.dtype(cache_dtype or config.dtype)  # bf16 for bf16 models

        def prep(p):  # once per call, outside the decode loop: layout and dtype for the fast path
            p = fuse_projections(p) if impl.fuse else p
            p = cast_for_compute(p, config.dtype)
            return unstack_layers(p) if impl.layer_loop == "unrolled" else p
        self.pad_id = int(pad_id if pad_id is not None else (config.pad_token_id or 0))
        self.trace_counts: collections.Counter[str] = collections.Counter()
        self.last_timings: dict[str, float] = {}
        # running totals (read as deltas by callers): jitted decode calls, decode-loop iterations
        # (each call runs until its longest row stops: max generated length), rows cut at the budget
        self.counters: collections.Counter[str] = collections.Counter()
        self._cache: tuple[tuple[int, int], KVCache] | None = None

        def prefill_fn(params, cache, tokens, lengths):
            self.trace_counts["prefill"] += 1
            return prefill(prep(params), config, cache, tokens, lengths, padding=impl.padding,
                           unroll=impl.unroll, attn_impl=impl.prefill_attention)

        def decode_fn(params, cache, logits, lengths, active, rng, temperature, top_p, top_k,
                      stop_ids, max_new, exit_live, filtered=None):
            self.trace_counts["decode"] += 1
            prompt_slots = cache.seg.shape[1] - self.max_new_tokens
            return decode(prep(params), config, cache, logits, lengths, active, rng, temperature,
                          top_p, top_k, stop_ids, max_new, max_new_tokens=self.max_new_tokens,
                          prompt_slots=prompt_slots, padding=impl.padding, pad_id=self.pad_id,
                          unroll=impl.unroll, rng_impl=impl.rng_impl, attn_impl=impl.attention,
                          skip_done_rows=impl.skip_done_rows, filtered=filtered,
                          steps_per_iter=impl.steps_per_iter, exit_live=exit_live,
                          compact_factor=impl.compact_factor)

        def decode_speculative_fn(params, cache, logits, tokens, lengths, active, rng, temperature, top_p,
                                  top_k, stop_ids, max_new, exit_live, filtered=None):
            self.trace_counts["decode"] += 1
            prompt_slots = cache.seg.shape[1] - self.max_new_tokens - impl.speculate
            return decode_speculative(prep(params), config, cache, logits, tokens, lengths, active, rng,
                                      temperature, top_p, top_k, stop_ids, max_new,
                                      max_new_tokens=self.max_new_tokens, prompt_slots=prompt_slots,
                                      ngrams=impl.draft_ngrams, k=impl.speculate, padding=impl.padding,
                                      pad_id=self.pad_id, unroll=impl.unroll, rng_impl=impl.rng_impl,
                                      attn_impl=impl.attention, skip_done_rows=impl.skip_done_rows, filtered=filtered,
                                      exit_live=exit_live, compact_factor=impl.compact_factor)

        self.prefill_jit = jax.jit(prefill_fn, donate_argnums=(1,))
        # speculate > 0 (sampling/speculative.py): the padded prompts go along for the drafts' lookup
        self.decode_speculative_jit = jax.jit(decode_speculative_fn, donate_argnums=(1,),
                                              static_argnames=("filtered",))
        self.decode_jit = jax.jit(decode_fn, donate_argnums=(1,), static_argnames=("filtered",))

        # kv_reuse: kept caches by conversation id; copying kept rows into a new cache, and the
        # prefill of a later turn's new tokens on top of them (sampling/prefix.py)
        self._kept = KeptCaches()

        def place_fn(dst, src, src_rows, src_end, dst_lo, count, reset=False):
            self.trace_counts["place"] += 1
            return place_rows(dst, src, src_rows, src_end, dst_lo, count, reset=reset)

        def prefill_delta_fn(params, cache, tokens, lengths, offsets, prompt_slots):
            self.trace_counts["prefill_delta"] += 1
            return prefill_delta(prep(params), config, cache, tokens, lengths, offsets,
                                 prompt_slots=prompt_slots, unroll=impl.unroll,
                                 attn_impl=impl.prefill_attention)

        self.place_jit = jax.jit(place_fn, donate_argnums=(0,), static_argnames=("reset",))
        self.prefill_delta_jit = jax.jit(prefill_delta_fn, donate_argnums=(1,),
                                         static_argnames=("prompt_slots",))
        self._last_steps: int | None = None  # speculative: loop iterations of the last call

    # -- helpers
    def _get_cache(self, batch: int, slots: int) -> KVCache:
        key = (batch, slots)
        if self._cache is not None and self._cache[0] == key:
            cache = self._cache[1]
        else:
            self._cache = None  # free the old shape's buffer before allocating the new one
            cache = init_cache(self.config, batch, slots, self.cache_dtype)
            if self.impl.layer_loop == "unrolled":  # one buffer per layer
                cache = unstack_cache(cache)
        self._cache = None
        return cache

    def with_impl(self, impl: DecodeImpl) -> Sampler:
        """A new Sampler of the same model, buckets and budgets that decodes with `impl`."""
        return Sampler(self.config, max_batch=self.max_batch, prompt_buckets=self.prompt_buckets,
                       max_new_tokens=self.max_new_tokens, batch_buckets=self.batch_buckets,
                       pad_id=self.pad_id, impl=impl, max_stop_ids=self.max_stop_ids,
                       cache_dtype=str(self.cache_dtype), delta_buckets=self.delta_buckets)

    def _stop_array(self, sampling: SamplingParams) -> np.ndarray:
        ids = sampling.resolved_stop_ids(self.config.eos_token_ids)
        if len(ids) > self.max_stop_ids:
            raise ValueError(f"{len(ids)} stop ids {ids} exceed Sampler max_stop_ids="
                             f"{self.max_stop_ids}")
        out = np.full((self.max_stop_ids,), -1, np.int32)
        out[: len(ids)] = ids
        return out

    def _check_prompts(self, prompts: Sequence[Sequence[int]]) -> list[np.ndarray]:
        if isinstance(prompts, (str, bytes)) or not hasattr(prompts, "__len__"):
            raise ValueError(f"prompts must be a list of token-id lists, got {type(prompts).__name__}")
        out = []
        for i, p in enumerate(prompts):
            a = np.asarray(p)
            if a.ndim != 1 or a.size == 0 or not np.issubdtype(a.dtype, np.integer):
                raise ValueError(f"prompt {i} must be a non-empty list of ints, got {p!r:.80}")
            if a.min() < 0 or a.max() >= self.config.vocab_size:
                raise ValueError(f"prompt {i} has token ids outside [0, {self.config.vocab_size})")
            if a.size > self.prompt_buckets[-1]:
                raise ValueError(f"prompt {i} has {a.size} tokens; the largest prompt bucket is "
                                 f"{self.prompt_buckets[-1]}")
            out.append(a.astype(np.int32))
        return out

    # -- public
    def generate_padded(self, params: Params, tokens: np.ndarray, lengths: np.ndarray,
                        active: np.ndarray, sampling: SamplingParams, rng: jax.Array,
                        budgets: np.ndarray | None = None, exit_live: int = 0) -> DecodeResult:
        """Array-level generate for one already-padded chunk: tokens [B, P] (left- or
        right-padded to match `impl.padding`), lengths [B], active [B]; B and P must be buckets.
        budgets [B]: each row's new-token budget (None: the sampling's max_new_tokens for all);
        exit_live: end the decode once at most this many rows still generate."""
        b, p = tokens.shape
        if b not in self.batch_buckets or p not in self.prompt_buckets:
            raise ValueError(f"padded shape {(b, p)} must use a batch bucket {self.batch_buckets} "
                             f"and a prompt bucket {self.prompt_buckets}")
        max_new = self.call_budget(sampling)
        row_budgets = self._row_budgets(budgets, b, max_new)
        speculate = self.impl.speculate_scope == "all"  # "continued": only kv_reuse's continued rows
        slots = self._static_slots(p, speculate)
        cache = self._get_cache(b, slots)
        t0 = time.perf_counter()
        logits, cache = self.prefill_jit(params, cache, jnp.asarray(tokens, jnp.int32),
                                         jnp.asarray(lengths, jnp.int32))
        logits.block_until_ready()
        t1 = time.perf_counter()
        res, cache = self._decode_static(params, cache, logits, tokens, lengths, active, sampling, rng,
                                         row_budgets, exit_live, speculate=speculate)
        res.tokens.block_until_ready()
        t2 = time.perf_counter()
        self._cache = ((b, slots), cache)
        self.last_timings = {"prefill_s": t1 - t0, "decode_s": t2 - t1}
        return res

    def _static_slots(self, p: int, speculate: bool) -> int:
        """Cache slots of a static decode after a prefill of P slots: the new tokens', and with
        `speculate` (when impl.speculate is on) k more, which a verify pass writes ahead."""
        return p + self.max_new_tokens + (self.impl.speculate if speculate else 0)

    def _decode_static(self, params: Params, cache: KVCache, logits: jax.Array, context: Any,
                       lengths: np.ndarray, active: np.ndarray, sampling: SamplingParams, rng: jax.Array,
                       budgets: np.ndarray, exit_live: int, speculate: bool) -> tuple[DecodeResult, KVCache]:
        """The static decode loop after a prefill: the plain one, or (`speculate`, when impl.speculate
        is on) the speculative one, whose drafts look up `context` (each row's whole context [B, P],
        padded as the prefill's tokens; unused otherwise)."""
        args = (jnp.asarray(lengths, jnp.int32), jnp.asarray(active, bool), rng,
                np.float32(sampling.temperature), np.float32(sampling.top_p), np.int32(sampling.top_k),
                jnp.asarray(self._stop_array(sampling)), jnp.asarray(budgets), np.int32(exit_live))
        filtered = (sampling.top_k > 0 or sampling.top_p < 1.0) if self.impl.static_filter else None
        if not (speculate and self.impl.speculate):
            return self.decode_jit(params, cache, logits, *args, filtered=filtered)
        res, cache, passes, accepted = self.decode_speculative_jit(
            params, cache, logits, jnp.asarray(context, jnp.int32), *args, filtered=filtered)
        self._last_steps = int(passes)  # loop iterations (+ the first token's draw), for `counters`
        self.counters["draft_accepted"] += int(accepted)
        return res, cache

    def _count(self, lengths: np.ndarray, finished: np.ndarray, budgets: np.ndarray) -> None:
        """Add one decode call's rows to `counters` (the plain loop ran max(lengths) iterations;
        the speculative one reports its own): rows that used their budget without
        stopping are truncated, those an early exit left (`preempt`) preempted."""
        self.counters["decode_calls"] += 1
        if self._last_steps is not None:
            self.counters["decode_iterations"] += self._last_steps
            self._last_steps = None
        else:
            self.counters["decode_iterations"] += int(lengths.max()) if lengths.size else 0
        self.counters["decode_rows"] += int(lengths.size)
        self.counters["generated_tokens"] += int(lengths.sum())
        self.counters["truncated_rows"] += int((~finished & (lengths >= budgets)).sum())
        self.counters["preempted_rows"] += int((~finished & (lengths < budgets)).sum())

    def call_budget(self, sampling: SamplingParams) -> int:
        """A call's new-token budget: the sampling's max_new_tokens (None: the static one), checked
        against the static budget."""
        max_new = sampling.max_new_tokens or self.max_new_tokens
        if max_new > self.max_new_tokens:
            raise ValueError(f"max_new_tokens={max_new} exceeds the Sampler's static budget "
                             f"{self.max_new_tokens}")
        return int(max_new)

    @staticmethod
    def _check_budgets(budgets: Sequence[int] | None, n: int, max_new: int) -> list[int]:
        if budgets is None:
            return [max_new] * n
        if isinstance(budgets, (str, bytes)) or len(budgets) != n:
            raise ValueError(f"budgets must be a list of {n} ints, one per prompt; got {budgets!r:.80}")
        out = []
        for i, v in enumerate(budgets):
            if isinstance(v, bool) or int(v) != v or not 1 <= v <= max_new:
                raise ValueError(f"budgets[{i}]={v!r}; expected an int in [1, {max_new}] "
                                 f"(max_new_tokens)")
            out.append(int(v))
        return out

    def _check_preempt(self, preempt: float) -> None:
        check_preempt(preempt)

    @staticmethod
    def _row_budgets(budgets: np.ndarray | None, b: int, max_new: int) -> np.ndarray:
        """[b] int32: the chunk's row budgets (capped at max_new), padding rows at max_new."""
        out = np.full((b,), max_new, np.int32)
        if budgets is not None:
            out[: len(budgets)] = np.minimum(np.asarray(budgets, np.int32), max_new)
        return out

    def _pad_chunk(self, arrs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One chunk's prompts padded to its buckets (`impl.padding`): tokens [B, P], lengths [B],
        active [B] (False: rows that only fill the batch bucket)."""
        b = pick_bucket(len(arrs), self.batch_buckets, "batch size")
        p = pick_bucket(max(a.size for a in arrs), self.prompt_buckets, "prompt length")
        tok = np.full((b, p), self.pad_id, np.int32)
        lens = np.ones((b,), np.int32)
        active = np.zeros((b,), bool)
        for r, a in enumerate(arrs):
            if self.impl.padding == "left":
                tok[r, p - a.size:] = a
            else:
                tok[r, : a.size] = a
            lens[r], active[r] = a.size, True
        return tok, lens, active

    def generate(self, params: Params, prompts: Sequence[Sequence[int]],
                 sampling: SamplingParams = DEFAULT_SAMPLING,
                 rng: jax.Array | int = 0,
                 conversations: Sequence[Hashable | None] | None = None,
                 budgets: Sequence[int] | None = None, preempt: float = 0.0) -> SampleOutput:
        """Generate for prompts of mixed lengths (bucketed, split into chunks of max_batch).

        conversations: one id per prompt (None: none), distinct within a call. With
        `impl.kv_reuse` the cache of each such row is kept, and a later call's prompt of the same
        id that starts with the kept tokens prefills only the rest (sampling/prefix.py); without
        kv_reuse they are ignored. `release_conversations` frees kept caches.
        budgets: one new-token budget per prompt, 1..max_new_tokens (None: max_new_tokens each).
        preempt in [0, 1): a chunk's decode ends once at most floor(preempt x its rows) rows still
        generate. Those rows come back neither finished nor at their budget
        (`preempted`); generating again from prompt + their tokens with the rest of the budget
        continues them, drawing from the same distribution as an uninterrupted decode."""
        max_new = self.call_budget(sampling)
        budget_list = self._check_budgets(budgets, len(prompts), max_new)
        self._check_preempt(preempt)
        if self.impl.kv_reuse and conversations is not None:
            return self._generate_reusing(params, prompts, sampling, rng, conversations, budget_list, preempt)
        arrs = self._check_prompts(prompts)
        n = len(arrs)
        self._stop_array(sampling)  # validate before any work
        if isinstance(rng, int):
            rng = jax.random.PRNGKey(rng)
        order = sorted(range(n), key=lambda j: arrs[j].size)  # similar lengths share a chunk
        tokens: list[list[int]] = [[] for _ in range(n)]
        logps: list[np.ndarray] = [np.zeros((0,), np.float32) for _ in range(n)]
        finished = [False] * n
        timings: collections.Counter[str] = collections.Counter()
        for ci, start in enumerate(range(0, n, self.max_batch)):
            idx = order[start:start + self.max_batch]
            tok, lens, active = self._pad_chunk([arrs[j] for j in idx])
            chunk_budgets = np.asarray([budget_list[j] for j in idx], np.int32)
            res = self.generate_padded(params, tok, lens, active, sampling,
                                       jax.random.fold_in(rng, ci), budgets=chunk_budgets,
                                       exit_live=exit_rows(preempt, len(idx)))
            self.counters["prefill_tokens"] += int(lens[active].sum())
            timings.update(self.last_timings)
            out_tok, out_lp = np.asarray(res.tokens), np.asarray(res.logprobs)
            out_len, out_fin = np.asarray(res.lengths), np.asarray(res.finished)
            self._count(out_len[active], out_fin[active], chunk_budgets)
            for r, j in enumerate(idx):
                k = int(out_len[r])
                tokens[j] = out_tok[r, :k].tolist()
                logps[j] = out_lp[r, :k].astype(np.float32)
                finished[j] = bool(out_fin[r])
        self.last_timings = dict(timings)
        return SampleOutput(tokens, logps, finished)

    # -- kv_reuse (sampling/prefix.py)
    def release_conversations(self, conversations: Iterable[Hashable] | None = None) -> None:
        """Free the kept caches of these conversation ids (None: all of them)."""
        self._kept.release(None if conversations is None else list(conversations))

    def kept_bytes(self) -> int:
        """Device bytes held by kept caches (kv_reuse)."""
        return self._kept.nbytes()

    def _reuse_plan(self, arrs: list[np.ndarray],
                    conversations: Sequence[Hashable | None]) -> list[tuple[Kept, int, int] | None]:
        """Per prompt: (kept entry, tokens reused, delta bucket), or None for a full prefill."""
        plans: list[tuple[Kept, int, int] | None] = []
        for a, conv in zip(arrs, conversations, strict=True):
            kept = None if conv is None else self._kept.get(conv)
            plan = None
            if kept is not None:
                m = reusable_prefix(kept, a)
                d = a.size - m
                if m > 0 and d <= self.delta_buckets[-1]:
                    db = pick_bucket(d, self.delta_buckets)
                    if db <= self.prompt_buckets[-1]:  # else: the block passes the prompt region
                        plan = (kept, m, db)
                self.counters["kv_reuse_rows" if plan else "kv_fallback_rows"] += 1
            plans.append(plan)
        return plans

    def _generate_reusing(self, params: Params, prompts: Sequence[Sequence[int]],
                          sampling: SamplingParams, rng: jax.Array | int,
                          conversations: Sequence[Hashable | None], budget_list: list[int],
                          preempt: float) -> SampleOutput:
        """`generate` with kv_reuse: rows without a usable kept cache go through the plain chunks,
        the others through `_extend_chunk`; every row with an id keeps its cache afterwards."""
        arrs = self._check_prompts(prompts)
        n = len(arrs)
        if isinstance(conversations, (str, bytes)) or len(conversations) != n:
            raise ValueError(f"conversations must be a list of {n} ids (or None), one per prompt")
        ids = [c for c in conversations if c is not None]
        if len(set(ids)) != len(ids):
            raise ValueError("conversation ids must be distinct within one generate call")
        self._stop_array(sampling)
        max_new = self.call_budget(sampling)
        if isinstance(rng, int):
            rng = jax.random.PRNGKey(rng)
        self._kept.check_params(params)
        plans = self._reuse_plan(arrs, conversations)
        full = sorted((j for j in range(n) if plans[j] is None), key=lambda j: arrs[j].size)
        reuse = sorted((j for j in range(n) if plans[j] is not None), key=lambda j: arrs[j].size)
        chunks = [(full[i:i + self.max_batch], False) for i in range(0, len(full), self.max_batch)]
        chunks += [(reuse[i:i + self.max_batch], True) for i in range(0, len(reuse), self.max_batch)]
        tokens: list[list[int]] = [[] for _ in range(n)]
        logps: list[np.ndarray] = [np.zeros((0,), np.float32) for _ in range(n)]
        finished = [False] * n
        timings: collections.Counter[str] = collections.Counter()
        new_entries: list[tuple[Hashable, Kept]] = []
        for ci, (idx, extend) in enumerate(chunks):
            crng = jax.random.fold_in(rng, ci)
            chunk_budgets = np.asarray([budget_list[j] for j in idx], np.int32)
            exit_live = exit_rows(preempt, len(idx))
            if extend:
                res, cache, p = self._extend_chunk(params, [(arrs[j], plans[j]) for j in idx],
                                                   sampling, crng, max_new, chunk_budgets, exit_live)
                active = np.arange(res.lengths.shape[0]) < len(idx)
            else:
                tok, lens, active = self._pad_chunk([arrs[j] for j in idx])
                p = tok.shape[1]
                res = self.generate_padded(params, tok, lens, active, sampling, crng,
                                           budgets=chunk_budgets, exit_live=exit_live)
                self.counters["prefill_tokens"] += int(lens[active].sum())
                if self._cache is None:
                    raise RuntimeError("kv_reuse: the decode left no cache to keep")
                cache, self._cache = self._cache[1], None  # kept, not donated to the next call
            timings.update(self.last_timings)
            out_tok, out_lp = np.asarray(res.tokens), np.asarray(res.logprobs)
            out_len, out_fin = np.asarray(res.lengths), np.asarray(res.finished)
            self._count(out_len[active], out_fin[active], chunk_budgets)
            key = self._kept.add_buffer(cache)
            for r, j in enumerate(idx):
                k = int(out_len[r])
                tokens[j] = out_tok[r, :k].tolist()
                logps[j] = out_lp[r, :k].astype(np.float32)
                finished[j] = bool(out_fin[r])
                if conversations[j] is not None and k >= 1:
                    held = np.concatenate([arrs[j], out_tok[r, :k - 1]]).astype(np.int32)
                    new_entries.append((conversations[j], Kept(key, r, p + k - 1, held)))
        for conv, kept in new_entries:  # after every chunk: earlier buffers were read until here
            self._kept.put(conv, kept)
        self._kept.collect()
        self.last_timings = dict(timings)
        return SampleOutput(tokens, logps, finished)

    def _extend_chunk(self, params: Params, rows: list[tuple[np.ndarray, Any]],
                      sampling: SamplingParams, rng: jax.Array, max_new: int,
                      budgets: np.ndarray, exit_live: int) -> tuple[DecodeResult, KVCache, int]:
        """One chunk of rows with kept caches: copy their kept K/V into a cache of the chunk's
        buckets, prefill the deltas (in the largest of their delta buckets), decode. Returns the
        result, the cache and its prompt slots."""
        b = pick_bucket(len(rows), self.batch_buckets, "batch size")
        dpad = max(int(plan[2]) for _, plan in rows)  # shorter deltas: more padding, which writes nothing
        # the bucket a full prefill would pick (unless the delta block is longer)
        p = pick_bucket(max(max(a.size for a, _ in rows), dpad), self.prompt_buckets, "prompt length")
        cache = self._get_cache(b, self._static_slots(p, True))
        t0 = time.perf_counter()
        by_buf: dict[int, list[int]] = collections.defaultdict(list)
        for r, (_, plan) in enumerate(rows):
            by_buf[plan[0].buf].append(r)
        for i, (key, members) in enumerate(by_buf.items()):
            src_rows, src_end, dst_lo, count = (np.zeros((b,), np.int32) for _ in range(4))
            for r in members:
                kept, m = rows[r][1][0], rows[r][1][1]
                src_rows[r], src_end[r], dst_lo[r], count[r] = kept.row, kept.end, p - rows[r][0].size, m
            cache = self.place_jit(cache, self._kept.buffers[key], jnp.asarray(src_rows),
                                   jnp.asarray(src_end), jnp.asarray(dst_lo), jnp.asarray(count),
                                   reset=i == 0)
        tok = np.full((b, dpad), self.pad_id, np.int32)
        lens, offs, full = np.ones((b,), np.int32), np.zeros((b,), np.int32), np.ones((b,), np.int32)
        active = np.zeros((b,), bool)
        for r, (a, plan) in enumerate(rows):
            m = plan[1]
            tok[r, dpad - (a.size - m):] = a[m:]
            lens[r], offs[r], full[r], active[r] = a.size - m, m, a.size, True
        logits, cache = self.prefill_delta_jit(params, cache, jnp.asarray(tok), jnp.asarray(lens),
                                               jnp.asarray(offs), prompt_slots=p)
        logits.block_until_ready()
        t1 = time.perf_counter()
        self.counters["prefill_tokens"] += int(lens[active].sum())
        self.counters["kv_reused_tokens"] += int(offs[active].sum())
        row_budgets = self._row_budgets(budgets, b, max_new)
        context = None
        if self.impl.speculate:  # the drafts look up the whole conversation, not only the delta
            context = np.full((b, p), self.pad_id, np.int32)
            for r, (a, _) in enumerate(rows):
                context[r, p - a.size:] = a
        res, cache = self._decode_static(params, cache, logits, context, full, active, sampling, rng,
                                         row_budgets, exit_live, speculate=True)
        res.tokens.block_until_ready()
        t2 = time.perf_counter()
        self.last_timings = {"prefill_s": t1 - t0, "decode_s": t2 - t1}
        return res, cache, p
