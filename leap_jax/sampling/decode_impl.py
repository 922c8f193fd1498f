"""How the Sampler's jitted prefill and decode are built: one value, one place that checks it (free of
JAX, so that config checks read it).

None of these switches changes what is sampled in greedy mode (tests/leap_jax/test_sampler.py proves
the alternatives equal); they trade compile time, memory layout and kernel count. The defaults are
the measured choice on the H200 (benchmarks/sampler_throughput.py and benchmarks/decode_profile.py
compare the alternatives side by side); the trainer's `sampling:` section sets the rest (config
`sampling.*`). `rng_impl` changes the random stream of stochastic sampling, not its distribution; so
does `kv_reuse=True` (sampling/prefix.py);
`speculate=k` (sampling/speculative.py) also keeps the greedy tokens (up to rounding: a verify pass runs
k + 1 positions at once) and the distribution, with fewer loop iterations where drafts are accepted.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from leap_jax.models.config import ATTN_IMPLS

PADDINGS = ("left", "right")
LAYER_LOOPS = ("scan", "unrolled")
RNG_IMPLS = ("threefry", "rbg")
SPECULATE_SCOPES = ("all", "continued")
PREFILL_ATTENTIONS = ("auto", *(a for a in ATTN_IMPLS if a != "reduce"))  # "reduce" is decode-only


@dataclass(frozen=True)
class DecodeImpl:
    """The implementation of the decode loop (a frozen, hashable value; `replace` to vary it)."""
    padding: str = "left"  # prompts left-padded (one scalar cache slot per step) or right-padded
    # "unrolled": a Python loop over per-layer weights and per-layer cache buffers, updated in place
    # (compile time grows with depth, fine for a sampler); "scan": the stacked lax.scan path
    layer_loop: str = "unrolled"
    rng_impl: str = "threefry"  # the decode RNG (rbg: fewer kernels, another random stream)
    attention: str = "einsum"  # decode attention: models.config.ATTN_IMPLS or "auto" (resolve_attention)
    # the prefills' attention (whole prompts, kv_reuse's deltas): "einsum" materialises fp32 scores
    # (in query chunks past 1 GiB); "dpa" / "cudnn" / "auto" the fused kernel with the padding mask
    prefill_attention: str = "einsum"
    fuse: bool = True  # concatenated q|k|v and gate|up projections
    unroll: int | bool = 1  # the layer scan's unroll factor (layer_loop="scan")
    # top-k/top-p filtering chosen per call from the host-side SamplingParams (at most two decode
    # compilations) instead of a traced lax.cond inside every step
    static_filter: bool = True
    steps_per_iter: int = 1  # decode steps per while_loop iteration (steps past the end discarded)
    # opt-in (sampling.prefix): keep each conversation's decode cache between its turns; a later
    # turn of the same conversation prefills only its new tokens (`Sampler.generate(...,
    # conversations=ids)`; without ids nothing changes)
    kv_reuse: bool = False
    # the fused decode attentions skip rows that have stopped (models.decoder.forward's live_rows: a
    # static batch's long tail is mostly stopped rows); the same tokens either way
    skip_done_rows: bool = True
    # once at most ceil(B / compact_factor) rows still generate, the
    # loop continues with those rows alone in that smaller batch (sampling/compact.py); 1 = off
    compact_factor: int = 1
    # opt-in (sampling/speculative.py): draft up to `speculate` tokens a row by prompt lookup (the
    # `draft_ngrams` sizes, longest first) and verify them in one forward pass; 0 = off. One step
    # per loop test (compaction and kv_reuse combine with it)
    speculate: int = 0
    draft_ngrams: tuple[int, ...] = (4, 3, 2)
    # which decode calls speculate: "all", or "continued" (kv_reuse only): rows continuing a kept
    # conversation (debugging turns, preempted rows), whose earlier turns drafts copy from; first turns
    # then run the plain loop with its `steps_per_iter`
    speculate_scope: str = "all"

    def __post_init__(self) -> None:
        for name, value, allowed in (("padding", self.padding, PADDINGS),
                                     ("layer_loop", self.layer_loop, LAYER_LOOPS),
                                     ("rng_impl", self.rng_impl, RNG_IMPLS),
                                     ("attention", self.attention, ("auto", *ATTN_IMPLS)),
                                     ("prefill_attention", self.prefill_attention, PREFILL_ATTENTIONS),
                                     ("speculate_scope", self.speculate_scope, SPECULATE_SCOPES)):
            if value not in allowed:
                raise ValueError(f"DecodeImpl {name}={value!r}; expected one of {allowed}")
        for name, count in (("steps_per_iter", self.steps_per_iter),
                            ("compact_factor", self.compact_factor)):
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ValueError(f"DecodeImpl {name}={count!r}; expected an int >= 1")
        for name in ("kv_reuse", "skip_done_rows"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"DecodeImpl {name}={getattr(self, name)!r}; expected a bool")
        if self.kv_reuse and self.padding != "left":
            raise ValueError(f"DecodeImpl kv_reuse=True needs padding='left', got {self.padding!r}")

        if isinstance(self.speculate, bool) or not isinstance(self.speculate, int) or self.speculate < 0:
            raise ValueError(f"DecodeImpl speculate={self.speculate!r}; expected an int >= 0 (0 = off)")
        check_draft_settings(self.draft_ngrams, max(self.speculate, 1), "DecodeImpl ")
        # the plain loop runs `steps_per_iter` steps per loop test, the speculative one a verify pass:
        # with every call speculating, another value would promise what never runs
        all_calls = self.speculate_scope == "all"
        if self.speculate and all_calls and self.steps_per_iter != 1:
            raise ValueError(f"DecodeImpl speculate={self.speculate} with speculate_scope='all' needs "
                             f"steps_per_iter=1, got steps_per_iter={self.steps_per_iter}")
        if self.speculate and not all_calls and not self.kv_reuse:
            raise ValueError(f"DecodeImpl speculate_scope={self.speculate_scope!r} needs kv_reuse=True (only its "
                             f"calls know which rows continue a conversation; without kv_reuse set speculate=0, "
                             f"or speculate_scope='all' with steps_per_iter=1)")

    def replace(self, **changes: object) -> DecodeImpl:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def check_draft_settings(ngrams: object, k: object, where: str = "") -> tuple[tuple[int, ...], int]:
    """Prompt-lookup draft settings (sampling/speculative.py): the n-gram sizes (distinct, ascending)
    and the draft length k, or ValueError naming the bad value."""
    values = list(ngrams) if isinstance(ngrams, (list, tuple)) else []
    if not values or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in values):
        raise ValueError(f"{where}draft_ngrams={ngrams!r}; expected a list of ints >= 1, e.g. (4, 3, 2)")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"{where}draft length k={k!r}; expected an int >= 1")
    return tuple(sorted(set(values))), k


# The trainer's decode (config `sampling:`'s defaults): the measured-fast path, each switch sampling the
# same greedy tokens and the same distribution as the library's plain default (docs/options.md)
TRAINER_DECODE = DecodeImpl(steps_per_iter=4, kv_reuse=True, attention="auto", prefill_attention="auto",
                            compact_factor=4, speculate=8, speculate_scope="continued")
