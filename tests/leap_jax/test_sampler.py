"""Sampler tests: greedy == repeated full-forward argmax, log-probs == forward log-probs, stops,
no recompiles for new sampling values, top-k=1 == greedy, determinism, padding modes, splitting."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from leap_jax.models import decoder
from leap_jax.models.logprobs import token_logprobs
from leap_jax.sampling.buckets import batch_buckets, pick_bucket, prompt_buckets
from leap_jax.sampling.decode_impl import DecodeImpl
from leap_jax.sampling.params import SamplingParams
from leap_jax.sampling.decode_base import _filter_top_k_top_p, sample_from_logits
from leap_jax.sampling.sampler import Sampler
from tests.leap_jax.test_decoder import CFG, random_params

NEW = 6
REF_LEN = 16  # fixed padded length for the reference full-forward passes (one compile)
GREEDY = SamplingParams(temperature=0.0, stop_token_ids=())


@pytest.fixture(autouse=True)
def _fp32_matmuls():
    """Full-precision fp32 matmuls (GPUs default to TF32), so tolerances hold on every backend."""
    with jax.default_matmul_precision("highest"):
        yield


@pytest.fixture(scope="module")
def params():
    return random_params(CFG, seed=11)


@pytest.fixture(scope="module")
def sampler():
    return Sampler(CFG, max_batch=4, prompt_buckets=(8,), max_new_tokens=NEW, batch_buckets=(4,))


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(0)
    return [rng.integers(1, 97, n).tolist() for n in (3, 8, 5, 1)]


_ref_fwd = jax.jit(lambda p, tok, seg: decoder.forward(
    p, CFG, tok, jnp.tile(jnp.arange(REF_LEN), (tok.shape[0], 1)), segment_ids=seg)[0])


def ref_logits(params, seq):
    """Full-forward logits [len(seq), V] of one unpadded sequence (right-padded to REF_LEN)."""
    tok = np.zeros((1, REF_LEN), np.int32)
    seg = np.zeros((1, REF_LEN), np.int32)
    tok[0, : len(seq)], seg[0, : len(seq)] = seq, 1
    return np.asarray(_ref_fwd(params, tok, seg))[0, : len(seq)]


def ref_greedy(params, prompt, n):
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(np.argmax(ref_logits(params, seq)[-1])))
    return seq[len(prompt):]


def recomputed_logprobs(params, cfg, prompt, toks, **kw):
    """token_logprobs of the generated `toks` after `prompt`, recomputed in one full forward (the
    reference the sampler's own log-probs are checked against); kw goes to token_logprobs."""
    seq = list(prompt) + list(toks)
    tok = np.asarray(seq[:-1], np.int32)[None]
    pos = np.arange(tok.shape[1], dtype=np.int32)[None]
    want = token_logprobs(params, cfg, tok, pos, np.asarray(seq[1:], np.int32)[None], **kw)
    return np.asarray(want)[0, len(prompt) - 1:]


def test_greedy_equals_repeated_full_forward_argmax(params, sampler, prompts):
    out = sampler.generate(params, prompts, GREEDY, rng=0)
    for p, toks, lps, fin in zip(prompts, out.tokens, out.logprobs, out.finished, strict=False):
        assert toks == ref_greedy(params, p, NEW)
        assert len(lps) == NEW and lps.dtype == np.float32 and not fin


def test_logprobs_equal_forward_logprobs(params, sampler, prompts):
    out = sampler.generate(params, prompts, SamplingParams(temperature=1.3, stop_token_ids=()), 5)
    for p, toks, lps in zip(prompts, out.tokens, out.logprobs, strict=False):
        seq = p + toks
        np.testing.assert_allclose(lps, recomputed_logprobs(params, CFG, p, toks, chunk=None), atol=1e-5)
        # ...and equal log_softmax of the reference logits (unmodified distribution).
        lg = ref_logits(params, seq)[len(p) - 1:-1].astype(np.float64)
        lsm = lg - np.log(np.exp(lg - lg.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
            - lg.max(-1, keepdims=True)
        np.testing.assert_allclose(lps, lsm[np.arange(len(toks)), toks], atol=1e-5)


def test_stop_token_ends_row_and_masks_rest(params, sampler, prompts):
    greedy = [ref_greedy(params, p, NEW) for p in prompts]
    stop = greedy[0][2]  # row 0 stops after its 3rd token
    res = sampler.generate(params, prompts,
                           SamplingParams(temperature=0.0, stop_token_ids=(stop,)), 0)
    for g, toks, lps, fin in zip(greedy, res.tokens, res.logprobs, res.finished, strict=False):
        want = g[: g.index(stop) + 1] if stop in g else g
        assert toks == want and len(lps) == len(want)
        assert fin == (stop in g)
    assert res.tokens[0][-1] == stop and res.finished[0]
    # Array level: positions after the stop hold pad ids and zero log-probs.
    tok = np.zeros((4, 8), np.int32)
    tok[0, 8 - len(prompts[0]):] = prompts[0]
    lens = np.array([len(prompts[0]), 1, 1, 1], np.int32)
    active = np.array([True, False, False, False])
    arr = sampler.generate_padded(params, tok, lens, active,
                                  SamplingParams(temperature=0.0, stop_token_ids=(stop,)),
                                  jax.random.PRNGKey(0))
    n0 = greedy[0].index(stop) + 1
    assert int(arr.lengths[0]) == n0 and bool(arr.finished[0])
    assert np.asarray(arr.tokens)[0, :n0].tolist() == greedy[0][:n0]
    assert np.all(np.asarray(arr.tokens)[0, n0:] == sampler.pad_id)
    assert np.all(np.asarray(arr.logprobs)[0, n0:] == 0.0)
    assert np.all(np.asarray(arr.logprobs)[0, :n0] < 0.0)
    assert np.all(np.asarray(arr.lengths)[1:] == 0)  # inactive padding rows generate nothing


def test_changing_sampling_values_does_not_recompile(params, sampler, prompts):
    # Two decode programs at most: with and without the (static) top-k/top-p filter.
    sampler.generate(params, prompts, GREEDY, 0)
    sampler.generate(params, prompts, SamplingParams(temperature=0.5, top_p=0.8), 0)
    before = dict(sampler.trace_counts)
    for sp in (SamplingParams(temperature=0.7, top_p=0.9, top_k=5, stop_token_ids=(3,)),
               SamplingParams(temperature=1.0, top_k=1, max_new_tokens=2),
               SamplingParams(temperature=2.0, top_p=0.5, stop_token_ids=(1, 2, 3, 4)),
               SamplingParams(temperature=1.0, max_new_tokens=3),
               SamplingParams(temperature=0.0, top_k=0, top_p=1.0)):
        sampler.generate(params, prompts, sp, 1)
    assert dict(sampler.trace_counts) == before
    assert before == {"prefill": 1, "decode": 2}


@pytest.mark.parametrize("kw", [dict(steps_per_iter=4), dict(steps_per_iter=3),
                                dict(static_filter=False)])
def test_loop_variants_give_identical_samples(params, sampler, prompts, kw):
    """Several steps per loop iteration (past-the-end steps discarded) and the per-step cond
    filter produce exactly the default sampler's tokens, log-probs and lengths."""
    other = Sampler(CFG, max_batch=4, prompt_buckets=(8,), max_new_tokens=NEW, batch_buckets=(4,),
                    impl=DecodeImpl(**kw))
    first = sampler.generate(params, prompts, GREEDY, 0).tokens[0][0]
    for sp in (GREEDY, SamplingParams(temperature=1.0, top_p=0.9, stop_token_ids=()),
               SamplingParams(temperature=1.0, max_new_tokens=5, stop_token_ids=(first,))):
        for seed in (0, 1):
            a, b = sampler.generate(params, prompts, sp, seed), other.generate(params, prompts, sp, seed)
            assert a.tokens == b.tokens and a.finished == b.finished
            for x, y in zip(a.logprobs, b.logprobs, strict=False):
                np.testing.assert_allclose(x, y, atol=1e-6)


def test_cache_is_donated_and_reused(params, sampler, prompts):
    sampler.generate(params, prompts, GREEDY, 0)
    shape, held = sampler._cache
    assert shape == (4, 8 + NEW) and isinstance(held.k, tuple)  # per-layer buffers (unrolled)
    assert held.k[0].dtype == jnp.float32 and held.k[0].shape == (4, 8 + NEW, 2, 8)
    sampler.generate(params, prompts, GREEDY, 0)
    assert held.k[0].is_deleted() and held.v[1].is_deleted()  # donated into prefill, not copied
    assert not sampler._cache[1].k[0].is_deleted()


def test_top_k_1_equals_greedy(params, sampler, prompts):
    a = sampler.generate(params, prompts, GREEDY, 0)
    b = sampler.generate(params, prompts, SamplingParams(temperature=1.0, top_k=1,
                                                         stop_token_ids=()), 123)
    assert a.tokens == b.tokens


def test_deterministic_per_seed(params, sampler, prompts):
    sp = SamplingParams(temperature=1.5, top_p=0.95, stop_token_ids=())
    a = sampler.generate(params, prompts, sp, 7)
    b = sampler.generate(params, prompts, sp, jax.random.PRNGKey(7))
    c = sampler.generate(params, prompts, sp, 8)
    assert a.tokens == b.tokens
    assert all(np.array_equal(x, y) for x, y in zip(a.logprobs, b.logprobs, strict=False))
    assert a.tokens != c.tokens


def test_max_new_tokens_per_call(params, sampler, prompts):
    out = sampler.generate(params, prompts, SamplingParams(temperature=0.0, max_new_tokens=2,
                                                           stop_token_ids=()), 0)
    full = sampler.generate(params, prompts, GREEDY, 0)
    assert [len(t) for t in out.tokens] == [2] * 4
    assert out.tokens == [t[:2] for t in full.tokens]
    one = sampler.generate(params, prompts, SamplingParams(temperature=0.0, max_new_tokens=1,
                                                           stop_token_ids=()), 0)
    assert one.tokens == [t[:1] for t in full.tokens]
    np.testing.assert_allclose(np.concatenate(one.logprobs),
                               np.array([lp[0] for lp in full.logprobs]), atol=1e-6)
    with pytest.raises(ValueError, match="budget"):
        sampler.generate(params, prompts, SamplingParams(max_new_tokens=NEW + 1), 0)


def test_split_batches_and_right_padding(params, prompts):
    many = prompts + [prompts[1][:6], prompts[2][::-1]]  # 6 prompts > max_batch 4
    s = Sampler(CFG, max_batch=4, prompt_buckets=(4, 8), max_new_tokens=NEW,
                impl=DecodeImpl(padding="right", layer_loop="scan", rng_impl="rbg", attention="reduce",
                                fuse=False))
    out = s.generate(params, many, GREEDY, 0)
    assert s.trace_counts["decode"] == 2  # two buckets were used (2 and 4 rows, P=8)
    for p, toks in zip(many, out.tokens, strict=False):
        assert toks == ref_greedy(params, p, NEW)
    # Stochastic sampling on this (scan, rbg, reduce-attention, right-padded) variant: log-probs still match the
    # model, and a seed reproduces its tokens.
    sp = SamplingParams(temperature=1.0, stop_token_ids=())
    a, b = s.generate(params, many, sp, 3), s.generate(params, many, sp, 3)
    assert a.tokens == b.tokens and s.trace_counts["decode"] == 2
    for p, toks, lps in zip(many, a.tokens, a.logprobs, strict=False):
        np.testing.assert_allclose(lps, recomputed_logprobs(params, CFG, p, toks, chunk=None), atol=1e-5)


def test_filter_matches_numpy_nucleus():
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((3, 20)).astype(np.float32) * 2
    for top_k, top_p in ((0, 0.6), (5, 1.0), (4, 0.5), (0, 1e-3), (25, 0.99)):
        got = np.isfinite(np.asarray(_filter_top_k_top_p(jnp.asarray(logits), jnp.float32(top_p),
                                                         jnp.int32(top_k))))
        for r in range(3):
            order = np.argsort(-logits[r])
            k = top_k if 0 < top_k <= 20 else 20
            cand = order[:k]
            pr = np.exp(logits[r, cand] - logits[r, cand].max())
            pr /= pr.sum()
            n, mass = 0, 0.0
            while n < k and (n == 0 or mass < top_p):
                mass += pr[n]
                n += 1
            want = np.zeros(20, bool)
            want[cand[:n]] = True
            np.testing.assert_array_equal(got[r], want, err_msg=f"top_k={top_k} top_p={top_p}")


def test_sample_from_logits_respects_top_k_support():
    logits = jnp.asarray(np.random.default_rng(4).standard_normal((2000, 10)), jnp.float32)
    f = jax.jit(sample_from_logits)
    tok = np.asarray(f(logits, jax.random.PRNGKey(0), 1.0, 1.0, 3))
    top3 = np.argsort(-np.asarray(logits), axis=-1)[:, :3]
    assert all(t in row for t, row in zip(tok, top3, strict=False))
    tok_all = np.asarray(f(logits, jax.random.PRNGKey(0), 1.0, 1.0, 0))
    assert np.mean([t not in row for t, row in zip(tok_all, top3, strict=False)]) > 0.1
    greedy = np.asarray(f(logits, jax.random.PRNGKey(0), 0.0, 1.0, 0))
    np.testing.assert_array_equal(greedy, np.argmax(np.asarray(logits), -1))


def test_prompt_buckets_double_from_128_up_to_the_context():
    assert prompt_buckets(1000) == (128, 256, 512, 1000)
    assert prompt_buckets(1024) == (128, 256, 512, 1024)
    assert prompt_buckets(128) == (128,)
    assert prompt_buckets(100) == (100,)


def test_buckets_and_validation(params, sampler):
    assert batch_buckets(48) == (1, 2, 4, 8, 16, 32, 48)
    assert pick_bucket(65, (64, 128)) == 128
    with pytest.raises(ValueError, match="largest bucket"):
        pick_bucket(129, (64, 128))
    with pytest.raises(ValueError, match="prompt 0 has 9 tokens"):
        sampler.generate(params, [[1] * 9], GREEDY)
    with pytest.raises(ValueError, match="non-empty"):
        sampler.generate(params, [[]], GREEDY)
    with pytest.raises(ValueError, match="outside"):
        sampler.generate(params, [[97]], GREEDY)
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1.0)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError, match="max_stop_ids"):
        sampler.generate(params, [[1]], SamplingParams(stop_token_ids=tuple(range(9))))


@pytest.mark.parametrize("attention", ["dpa", "auto"])
def test_dot_product_attention_decode_matches_the_model(params, prompts, attention):
    s = Sampler(CFG, max_batch=4, prompt_buckets=(8,), max_new_tokens=NEW, impl=DecodeImpl(attention=attention))
    out = s.generate(params, prompts, GREEDY, 0)
    for p, toks in zip(prompts, out.tokens, strict=False):
        assert toks == ref_greedy(params, p, NEW)
    with pytest.raises(ValueError, match="attention='flash'; expected one of"):
        DecodeImpl(attention="flash")
    with pytest.raises(ValueError, match="steps_per_iter=0; expected an int >= 1"):
        DecodeImpl(steps_per_iter=0)
    with pytest.raises(ValueError, match="impl=.*expected a leap_jax.sampling.decode_impl.DecodeImpl"):
        Sampler(CFG, max_batch=4, prompt_buckets=(8,), max_new_tokens=NEW, impl={"attention": "dpa"})


@pytest.mark.parametrize("attention", ["dpa", "auto"])
def test_fused_prefill_attention_matches_the_model(params, prompts, attention):
    """The prompts' prefill through the fused attention (its padding mask passed as is): each row's
    greedy tokens and log-probs are the model's (prompts of different lengths: left padding)."""
    s = Sampler(CFG, max_batch=4, prompt_buckets=(8,), max_new_tokens=NEW,
                impl=DecodeImpl(prefill_attention=attention))
    out = s.generate(params, prompts, GREEDY, 0)
    assert len({len(p) for p in prompts}) > 1
    for p, toks, lps in zip(prompts, out.tokens, out.logprobs, strict=True):
        assert toks == ref_greedy(params, p, NEW)
        np.testing.assert_allclose(lps, recomputed_logprobs(params, CFG, p, toks), atol=1e-4)
    with pytest.raises(ValueError, match="prefill_attention='reduce'; expected one of"):
        DecodeImpl(prefill_attention="reduce")


@pytest.mark.parametrize("skip", [True, False])
def test_fused_decode_skipping_stopped_rows_keeps_every_rows_tokens(params, prompts, skip):
    """With stop ids, rows stop at different steps; the fused attention then skips the stopped rows
    (DecodeImpl.skip_done_rows) and the rows still generating get the reference's greedy tokens."""
    greedy = [ref_greedy(params, p, NEW) for p in prompts]
    stop = greedy[0][1]  # row 0 stops after its 2nd token, the others later or never
    s = Sampler(CFG, max_batch=4, prompt_buckets=(8,), max_new_tokens=NEW,
                impl=DecodeImpl(attention="dpa", skip_done_rows=skip))
    out = s.generate(params, prompts, SamplingParams(temperature=0.0, stop_token_ids=(stop,)), 0)
    lengths = []
    for g, toks, lps in zip(greedy, out.tokens, out.logprobs, strict=True):
        want = g[: g.index(stop) + 1] if stop in g else g
        assert toks == want and len(lps) == len(want)
        lengths.append(len(toks))
    assert min(lengths) == 2 and max(lengths) == NEW  # some rows went on after row 0 stopped
    with pytest.raises(ValueError, match="skip_done_rows='yes'; expected a bool"):
        DecodeImpl(skip_done_rows="yes")


@pytest.mark.gpu
def test_bf16_sampler_on_gpu_variants_agree():
    """bf16 model + bf16 donated cache on the GPU: the decode paths (unrolled / scan / cuDNN attention) produce
    log-probs that track the recomputed token_logprobs (bf16 tolerance) and agree on each row's
    first greedy token (later tokens may legitimately diverge after a bf16 near-tie)."""
    cfg = CFG.replace(dtype="bfloat16", param_dtype="bfloat16", num_layers=3)
    p = jax.tree_util.tree_map(lambda a: a.astype(jnp.bfloat16), random_params(cfg, 5))
    rng = np.random.default_rng(9)
    prompts = [rng.integers(1, 97, n).tolist() for n in (5, 30, 17, 64, 2)]
    outs = {}
    variants = {"unrolled": {}, "scan": {"layer_loop": "scan"},
                "cudnn": {"attention": "cudnn"},  # the fused cuDNN decode attention
                "cudnn-prefill": {"attention": "cudnn", "prefill_attention": "cudnn"},  # and prefill
                "auto": {"attention": "auto", "steps_per_iter": 4}}  # what sampling.attention=auto runs
    for loop, kw in variants.items():
        s = Sampler(cfg, max_batch=8, prompt_buckets=(32, 64), max_new_tokens=16, impl=DecodeImpl(**kw))
        outs[loop] = s.generate(p, prompts, GREEDY, 0)
        sampled = s.generate(p, prompts, SamplingParams(temperature=0.8, top_p=0.9, top_k=20), 1)
        assert s.trace_counts["decode"] == 2  # one (batch 8, prompt 64) bucket: unfiltered + filtered
        for out in (outs[loop], sampled):
            for pr, toks, lps in zip(prompts, out.tokens, out.logprobs, strict=False):
                np.testing.assert_allclose(lps, recomputed_logprobs(p, cfg, pr, toks), atol=0.05)
    for other in ("scan", "cudnn", "auto"):
        assert [t[0] for t in outs["unrolled"].tokens] == [t[0] for t in outs[other].tokens]
    # stop ids end rows at different steps: the cuDNN attention skips the stopped rows (query length 0)
    # while the others go on; their log-probs must still track the recomputed ones
    stops = tuple(range(1, 97, 6))
    for skip in (True, False):
        s = Sampler(cfg, max_batch=8, prompt_buckets=(32, 64), max_new_tokens=16, max_stop_ids=len(stops),
                    impl=DecodeImpl(attention="cudnn", skip_done_rows=skip))
        out = s.generate(p, prompts, SamplingParams(temperature=0.0, stop_token_ids=stops), 0)
        assert len({len(t) for t in out.tokens}) > 1, out.tokens  # rows stopped at different steps
        for pr, toks, lps in zip(prompts, out.tokens, out.logprobs, strict=True):
            np.testing.assert_allclose(lps, recomputed_logprobs(p, cfg, pr, toks), atol=0.05)


def test_casting_weights_once_is_bit_identical():
    """The sampler casts float32 master weights to the compute dtype once per call instead of at
    every use inside the decode loop; the model's outputs must not change by a single bit."""
    cfg = CFG.replace(dtype="bfloat16", param_dtype="float32", qkv_bias=True)
    p = random_params(cfg, seed=3)
    cast = decoder.cast_for_compute(decoder.fuse_projections(p), cfg.dtype)
    assert cast["embed"].dtype == jnp.bfloat16 and cast["layers"]["bqkv"].dtype == jnp.float32
    tok = jnp.asarray(np.random.default_rng(1).integers(1, 97, (2, 12)), jnp.int32)
    pos = jnp.tile(jnp.arange(12), (2, 1))
    a = decoder.forward(p, cfg, tok, pos)[0]
    b = decoder.forward(cast, cfg, tok, pos)[0]
    np.testing.assert_array_equal(np.asarray(a.astype(jnp.float32)), np.asarray(b.astype(jnp.float32)))


def test_counters_record_iterations_rows_and_truncation(params, prompts):
    """Each decode call runs until its longest row stops: the counters say how many iterations that
    took, for how many rows and tokens, and how many rows hit the budget (logged per RL step)."""
    s = Sampler(CFG, max_batch=4, prompt_buckets=(8,), max_new_tokens=NEW, batch_buckets=(4,))
    greedy_first = int(np.argmax(ref_logits(params, prompts[0])[-1]))
    out = s.generate(params, prompts, SamplingParams(temperature=0.0, stop_token_ids=(greedy_first,)), 0)
    lengths = [len(t) for t in out.tokens]
    c = s.counters
    assert c["decode_calls"] == 1 and c["decode_rows"] == 4
    assert c["decode_iterations"] == max(lengths) and c["generated_tokens"] == sum(lengths)
    assert c["truncated_rows"] == sum(not f for f in out.finished) and lengths[0] == 1 and out.finished[0]


def test_the_sampling_section_builds_the_decode_impl():
    """`sampling:`'s decode defaults are TRAINER_DECODE's; every decode knob reaches DecodeImpl, and a bad
    value is named by its config key."""
    from leap_jax.sampling.decode_impl import TRAINER_DECODE
    from leap_jax.train.config import load_config
    from leap_jax.train.config_loader import ConfigError
    assert load_config(None, []).sampling.decode_impl() == TRAINER_DECODE  # one default per knob
    assert TRAINER_DECODE == DecodeImpl(steps_per_iter=4, kv_reuse=True, attention="auto", prefill_attention="auto",
                                        compact_factor=4, speculate=8, speculate_scope="continued")
    assert load_config(None, ["sampling.attention=cudnn"]).sampling.decode_impl().attention == "cudnn"
    with pytest.raises(ConfigError, match="sampling.attention"):
        load_config(None, ["sampling.attention=flash"])
    with pytest.raises(ConfigError, match="sampling.prefill_attention='reduce'; expected one of"):
        load_config(None, ["sampling.prefill_attention=reduce"])
    with pytest.raises(ConfigError, match="sampling.speculate_scope='continued' needs kv_reuse=True"):
        load_config(None, ["sampling.kv_reuse=false"])
    for gone in ("sampling.batching=continuous", "sampling.decode_segments=2", "sampling.attention_lengths=false"):
        with pytest.raises(ConfigError, match=gone.split("=")[0].split(".")[1]):
            load_config(None, [gone])


def test_the_trainer_builds_its_sampler_from_the_sampling_section(tmp_path):
    """sampling.* reaches the trainer's Sampler (no knob that does nothing)."""
    from leap_jax.train.config import load_config
    from leap_jax.train.trainer import Trainer
    from tests.leap_jax._trainer_helpers import OracleEvaluator
    from tests.leap_jax.test_trainer import TINY
    cfg = load_config(None, TINY + [f"train.run_dir={tmp_path}", "sampling.compact_factor=2", "sampling.speculate=3"])
    tr = Trainer(cfg, evaluator=OracleEvaluator())
    impl = tr._sampler_policy(tr._sampling()).sampler.impl
    assert (impl.compact_factor, impl.speculate, impl.steps_per_iter) == (2, 3, cfg.sampling.steps_per_iter)
    tr.close()
