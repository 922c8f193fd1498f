"""Live-row compaction of the static decode loop (`DecodeImpl.compact_factor`, sampling/compact.py)
against the loop without it: greedy decoding gives the same tokens, log-probs, lengths and stop flags
(rows stopping at different steps, truncation, both paddings and layer layouts, several steps per loop
test, preemption, KV reuse across turns, a multi-turn rollout); sampling draws from the same
distribution (chi-square against the exact model distribution, fixed seeds so it never flakes)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from leap_jax.models import decoder
from leap_jax.sampling import compact
from leap_jax.sampling.decode_impl import DecodeImpl
from leap_jax.sampling.params import SamplingParams
from leap_jax.train.config import ConfigError, load_config
from tests.leap_jax.decode_helpers import (TEMP, TOP_K, assert_pairs_follow, assert_same, make,
                                           stop_settings, top_k_dist)
from tests.leap_jax.test_decoder import CFG, random_params
# _fp32_matmuls: the static sampler tests' autouse fixture (fp32 matmuls on every backend)
from tests.leap_jax.test_sampler import _fp32_matmuls, ref_logits  # noqa: F401


@pytest.fixture(scope="module")
def params():
    return random_params(CFG, seed=11)  # the tiny decoder whose rows stop_settings was written for


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(3)
    return [rng.integers(1, 97, n).tolist() for n in (3, 8, 5, 1, 12, 7, 2, 16, 6, 4, 9)]


@pytest.mark.parametrize("layout", ["stacked", "per-layer"])
def test_take_and_put_rows_match_numpy(layout):
    cache = decoder.init_cache(CFG, 5, 7, jnp.float32)
    rng = np.random.default_rng(0)
    cache = jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape).astype(x.dtype)), cache)
    if layout == "per-layer":
        cache = decoder.unstack_cache(cache)
    rows = jnp.array([3, 0], jnp.int32)
    part = compact.take_rows(cache, rows)

    def batch(buf, r):  # the rows r of every layer, as one numpy array [L, R, ...]
        arr = np.stack(buf) if isinstance(buf, tuple) else np.asarray(buf)
        return arr[:, r]
    np.testing.assert_array_equal(batch(part.k, slice(None)), batch(cache.k, [3, 0]))
    np.testing.assert_array_equal(np.asarray(part.seg), np.asarray(cache.seg)[[3, 0]])
    new = jax.tree.map(lambda x: x + 1, part)
    back = compact.put_rows(cache, rows, new)
    want = batch(cache.v, slice(None)).copy()
    want[:, [3, 0]] += 1
    np.testing.assert_array_equal(batch(back.v, slice(None)), want)
    np.testing.assert_array_equal(np.asarray(back.seg)[[1, 2, 4]], np.asarray(cache.seg)[[1, 2, 4]])
    assert [compact.compact_size(b, k) for b, k in ((8, 2), (8, 3), (1, 4), (8, 1))] == [4, 3, 1, 8]
    with pytest.raises(ValueError, match="compact_factor=0; expected an int >= 1"):
        compact.compact_size(8, 0)


@pytest.mark.parametrize("kw", [dict(compact_factor=2), dict(compact_factor=4, steps_per_iter=3),
                                dict(compact_factor=2, padding="right"),
                                dict(compact_factor=2, layer_loop="scan", fuse=False),
                                dict(compact_factor=2, attention="dpa"),
                                dict(compact_factor=4, speculate=4, padding="right", draft_ngrams=(1,))])
def test_greedy_equals_the_uncompacted_loop(params, prompts, kw, monkeypatch):
    calls = []
    take = compact.take_rows
    for where in ("sampler", "speculative"):  # the plain loop's and the speculative one's
        monkeypatch.setattr(f"leap_jax.sampling.{where}.take_rows", lambda *a: calls.append(1) or take(*a))
    static, packed = make(), make(DecodeImpl(**kw))
    base = static.generate(params, prompts, SamplingParams(temperature=0.0, stop_token_ids=()), 0)
    settings = stop_settings(base)
    early = static.generate(params, prompts, settings[1], 0)
    assert len({len(t) for t in early.tokens}) > 2  # rows stop at different steps
    for sp in settings:
        assert_same(static.generate(params, prompts, sp, 0), packed.generate(params, prompts, sp, 0))
    assert calls  # the compacted loop was built (traced), not only the full-batch one


def test_preempted_and_kv_reused_rows_are_unchanged(params):
    """With preemption (the loop also ends once few rows generate) and with kept caches across a
    second turn (the compacted rows' cache writes go back to the full cache), the same greedy output."""
    from tests.leap_jax import test_preemption as pre
    rng = np.random.default_rng(7)  # test_preemption's prompts: 2 chunks, some rows cut at 0.25
    prompts = [rng.integers(1, 97, int(n)).tolist() for n in rng.permutation(np.arange(1, 17))[:12]]
    sp = stop_settings(pre.make().generate(params, prompts, SamplingParams(temperature=0.0,
                                                                           stop_token_ids=())))[1]
    ref, _, _ = pre.run_to_the_end(pre.make(), params, prompts, sp, preempt=0.25)
    got, cuts, _ = pre.run_to_the_end(pre.make(DecodeImpl(compact_factor=2)), params, prompts, sp,
                                      preempt=0.25)
    assert cuts > 0
    assert_same(ref, got)

    convs = [("c", j) for j in range(len(prompts))]
    outs = []
    for impl in (DecodeImpl(kv_reuse=True), DecodeImpl(kv_reuse=True, compact_factor=2),
                 DecodeImpl(kv_reuse=True, compact_factor=2, speculate=3)):
        s = pre.make(impl)
        first = s.generate(params, prompts, sp, 0, conversations=convs)
        second = [p + t + [7, 8] for p, t in zip(prompts, first.tokens, strict=True)]
        outs.append((first, s.generate(params, second, sp, 1, conversations=convs)))
        assert s.counters["kv_reuse_rows"] == len(prompts)  # the second turn continued every kept cache
    for other in outs[1:]:
        for a, b in zip(outs[0], other, strict=True):
            assert_same(a, b)


def exact_pair_probs_with_stops(params, prompt, stops):
    """P(t1, t2) of the first two tokens at temperature TEMP, top-k TOP_K; t2 = -1 after a stop id."""
    out = {}
    for t1, p1 in zip(*top_k_dist(params, prompt), strict=True):
        if int(t1) in stops:
            out[(int(t1), -1)] = p1
            continue
        for t2, p2 in zip(*top_k_dist(params, prompt + [int(t1)]), strict=True):
            out[(int(t1), int(t2))] = p1 * p2
    return out


def test_sampled_pairs_follow_the_model_distribution(params, prompts):
    """Stop ids end most rows after their first token, so the second token of the others is drawn in
    the compacted loop (another random stream: the tokens differ from the plain loop's for the same
    seeds); both samples fit the exact distribution and each other."""
    prompt = prompts[1]
    first = np.argsort(-ref_logits(params, prompt)[-1])[:TOP_K]
    stops = tuple(int(t) for t in first[:2])
    probs = exact_pair_probs_with_stops(params, prompt, stops)
    assert sum(p for (a, b), p in probs.items() if b == -1) > 0.55  # most rows stop at once
    calls, rows = 24, 32
    kw = dict(max_batch=32, prompt_buckets=(8,), max_new_tokens=2, batch_buckets=(32,))
    sp = SamplingParams(temperature=TEMP, top_k=TOP_K, max_new_tokens=2, stop_token_ids=stops)
    samples, tokens = {}, {}
    for name, impl in (("static", DecodeImpl()), ("compact", DecodeImpl(compact_factor=2))):
        s, counts, toks = make(impl, **kw), {}, []
        for seed in range(calls):
            for t in s.generate(params, [prompt] * rows, sp, seed).tokens:
                pair = (t[0], t[1] if len(t) > 1 else -1)
                counts[pair] = counts.get(pair, 0) + 1
                toks.append(pair)
        samples[name], tokens[name] = counts, toks
    assert_pairs_follow(samples, probs, calls * rows)
    firsts = [(a[0] == b[0]) for a, b in zip(tokens["static"], tokens["compact"], strict=True)]
    assert all(firsts)  # the first token is drawn before any compaction: the same stream
    assert tokens["static"] != tokens["compact"]  # later tokens: the compacted loop's own stream


def test_validation_and_config():
    assert DecodeImpl().compact_factor == 1  # off in the library's Sampler, on in the trainer's config
    assert load_config(None, []).sampling.compact_factor == 4
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="compact_factor="):
            DecodeImpl(compact_factor=bad)
    assert load_config(None, ["sampling.compact_factor=4"]).sampling.decode_impl().compact_factor == 4
    with pytest.raises(ConfigError, match="sampling.compact_factor"):
        load_config(None, ["sampling.compact_factor=0"])
