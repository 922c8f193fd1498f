"""Speculative decoding in the static loop (`DecodeImpl(speculate=k)`, sampling/speculative.py)
against the plain loop: greedy decoding gives the same tokens, log-probs, lengths and stop flags
(rows stopping at different steps, truncation, both paddings and layer layouts, the fused attention,
preemption) in fewer loop iterations; sampled pairs whose second token is always drafted follow the
exact model distribution (chi-square, fixed seeds)."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from leap_jax.models import decoder
from leap_jax.sampling.decode_impl import DecodeImpl
from leap_jax.sampling.params import SamplingParams
from tests.leap_jax.decode_helpers import (TEMP, TOP_K, assert_pairs_follow, assert_same, make,
                                           sample_prompts, stop_settings)
from tests.leap_jax.test_decoder import CFG, random_params
# _fp32_matmuls: the static sampler tests' autouse fixture (fp32 matmuls on every backend)
from tests.leap_jax.test_sampler import _fp32_matmuls  # noqa: F401


@pytest.fixture(scope="module")
def params():
    return random_params(CFG, seed=11)


@pytest.fixture(scope="module")
def prompts():
    return sample_prompts() + [[5, 6, 7, 5, 6, 7, 5, 6], [9, 9, 9, 9]]  # repeats: drafts from the prompt too


@pytest.mark.parametrize("kw", [dict(speculate=1), dict(speculate=3), dict(speculate=8, draft_ngrams=(1,)),
                                dict(speculate=4, padding="right"),
                                dict(speculate=4, layer_loop="scan", fuse=False),
                                dict(speculate=4, attention="dpa")])
def test_greedy_equals_the_plain_loop_in_fewer_iterations(params, prompts, kw):
    static, spec = make(), make(DecodeImpl(**kw))
    base = static.generate(params, prompts, SamplingParams(temperature=0.0, stop_token_ids=()), 0)
    settings = stop_settings(base)
    assert len({len(t) for t in static.generate(params, prompts, settings[1], 0).tokens}) > 2
    static.counters.clear()
    for sp in settings:
        assert_same(static.generate(params, prompts, sp, 0), spec.generate(params, prompts, sp, 0))
    # the same tokens, some of them accepted drafts, in no more loop iterations
    assert spec.counters["generated_tokens"] == static.counters["generated_tokens"]
    assert spec.counters["draft_accepted"] > 0
    assert spec.counters["decode_iterations"] <= static.counters["decode_iterations"]


def test_preempted_rows_continue_to_the_same_output(params):
    from tests.leap_jax import test_preemption as pre
    rng = np.random.default_rng(7)
    prompts = [rng.integers(1, 97, int(n)).tolist() for n in rng.permutation(np.arange(1, 17))[:12]]
    sp = stop_settings(pre.make().generate(params, prompts, SamplingParams(temperature=0.0,
                                                                           stop_token_ids=())))[1]
    ref, _, _ = pre.run_to_the_end(pre.make(), params, prompts, sp, preempt=0.25)
    got, cuts, _ = pre.run_to_the_end(pre.make(DecodeImpl(speculate=4)), params, prompts, sp, preempt=0.25)
    assert cuts > 0
    assert_same(ref, got)


def exact_pair_probs_long(params, prompt):
    """P(t1, t2) of the first two tokens at temperature TEMP, top-k TOP_K, from full forwards of
    prompt + [t1] (any length: test_sampler's reference forward stops at 16 tokens)."""
    def dist(seq):
        tok = jnp.asarray([seq], jnp.int32)
        lg = np.asarray(decoder.forward(params, CFG, tok, jnp.arange(len(seq))[None, :])[0])[0, -1]
        lg = lg.astype(np.float64) / TEMP
        keep = np.argsort(-lg)[:TOP_K]
        pr = np.exp(lg[keep] - lg[keep].max())
        return keep, pr / pr.sum()
    out = {}
    for t1, p1 in zip(*dist(prompt), strict=True):
        for t2, p2 in zip(*dist(prompt + [int(t1)]), strict=True):
            out[(int(t1), int(t2))] = p1 * p2
    return out


def test_sampled_pairs_follow_the_model_distribution(params, prompts):
    """The prompt holds every token once, so with 1-gram lookup the second token is always drafted
    (the token that followed the first one in the prompt) and accepted or corrected by the
    speculative rule; pairs fit the exact distribution and the plain loop's sample."""
    prompt = prompts[1] + list(range(1, 97))
    probs = exact_pair_probs_long(params, prompt)
    calls, rows = 24, 32
    kw = dict(max_batch=32, prompt_buckets=(128,), max_new_tokens=3, batch_buckets=(32,))
    sp = SamplingParams(temperature=TEMP, top_k=TOP_K, max_new_tokens=3, stop_token_ids=())
    samples = {}
    for name, impl in (("static", DecodeImpl()), ("speculative", DecodeImpl(speculate=2, draft_ngrams=(1,)))):
        s, counts = make(impl, **kw), {}
        for seed in range(calls):
            for t in s.generate(params, [prompt] * rows, sp, seed).tokens:
                counts[(t[0], t[1])] = counts.get((t[0], t[1]), 0) + 1
        samples[name] = counts
    assert_pairs_follow(samples, probs, calls * rows)


def test_scope_continued_drafts_only_for_continued_conversations(params, prompts):
    """speculate_scope="continued": a first turn runs the plain loop (its steps_per_iter), the next turn
    of the same conversations (kept caches) verifies drafts; "all" drafts on the first turn already
    (the repeating prompts give it drafts); both give the plain loop's tokens."""
    greedy = SamplingParams(temperature=0.0, stop_token_ids=())
    convs = [("c", j) for j in range(len(prompts))]
    kw = dict(max_batch=16, batch_buckets=(16,), prompt_buckets=(16, 32, 64), max_new_tokens=8)
    plain = make(DecodeImpl(kv_reuse=True), **kw)
    scoped = make(DecodeImpl(kv_reuse=True, speculate=4, speculate_scope="continued", steps_per_iter=3), **kw)
    every = make(DecodeImpl(kv_reuse=True, speculate=4), **kw)
    firsts = [s.generate(params, prompts, greedy, 0, conversations=convs) for s in (plain, scoped, every)]
    assert scoped.counters["draft_accepted"] == 0 < every.counters["draft_accepted"]
    second = [p + t + [7] + p for p, t in zip(prompts, firsts[0].tokens, strict=True)]  # repeats to copy
    outs = [s.generate(params, second, greedy, 1, conversations=convs) for s in (plain, scoped, every)]
    assert scoped.counters["draft_accepted"] > 0 and scoped.counters["kv_reuse_rows"] == len(prompts)
    for first, out in zip(firsts[1:], outs[1:], strict=True):
        assert_same(firsts[0], first)
        assert_same(outs[0], out)


def test_validation():
    assert DecodeImpl().speculate == 0  # off by default
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="speculate="):
            DecodeImpl(speculate=bad)
    for bad_ngrams in ((), (0,), (2, "3"), 3):
        with pytest.raises(ValueError, match="DecodeImpl draft_ngrams="):
            DecodeImpl(speculate=4, draft_ngrams=bad_ngrams)
    with pytest.raises(ValueError, match="speculate=4 with speculate_scope='all' needs steps_per_iter=1"):
        DecodeImpl(speculate=4, steps_per_iter=2)
    DecodeImpl(speculate=4, kv_reuse=True, compact_factor=4)  # both combine with drafts
    DecodeImpl(speculate=4, kv_reuse=True, speculate_scope="continued", steps_per_iter=4)  # first turns: plain
    with pytest.raises(ValueError, match="speculate_scope='continued' needs kv_reuse=True"):
        DecodeImpl(speculate=4, speculate_scope="continued")
    with pytest.raises(ValueError, match="speculate_scope='later'; expected one of"):
        DecodeImpl(speculate=4, speculate_scope="later")


def test_multiturn_rollout_same_with_speculative_decoding(tmp_path):
    """A greedy 3-turn rollout (every failed row debugged; later turns see the earlier ones, which
    drafts copy from) through SamplerPolicy: the same conversations, log-probs and outcomes, with
    drafts alone and with drafts on kept caches (kv_reuse) and compaction."""
    from kernels_env.core.config import EnvConfig
    from leap_jax.rollout.multiturn import MultiTurnRollout
    from leap_jax.rollout.policy import SamplerPolicy
    from leap_jax.sampling.sampler import Sampler
    from tests.leap_jax._trainer_helpers import OracleEvaluator
    from tests.leap_jax.decode_helpers import assert_same_rollouts, tiny_chat_policy

    tasks = ["relu", "tanh"]
    tok, cfg, params, streams, sampling = tiny_chat_policy(tmp_path, tasks)
    outs, accepted = [], []
    for impl in (DecodeImpl(), DecodeImpl(speculate=4), DecodeImpl(speculate=4, kv_reuse=True, compact_factor=2)):
        sampler = Sampler(cfg, max_batch=8, prompt_buckets=(1024,), max_new_tokens=12, impl=impl)
        policy = SamplerPolicy(sampler, tok, sampling, params=params, end_ids=streams.end_ids)
        rollout = MultiTurnRollout(streams, OracleEvaluator(), EnvConfig(backend="cpu", sizes="small"),
                                   group_size=3, max_turns=3, dcp_mode="all", max_new_tokens=12,
                                   max_context_tokens=1024, sizes="small",
                                   feedback_fn=lambda res, budget: f"status: {res.status.value}"[:budget])
        outs.append(rollout.run(tasks, policy, seed=0))
        accepted.append(sampler.counters["draft_accepted"])
        reused = sampler.counters["kv_reused_tokens"]
    assert reused > 0  # the last arm's later turns continued their kept caches
    for other in outs[1:]:
        assert outs[0].attempted.sum() == other.attempted.sum() == 2 * 3 * 3
        assert_same_rollouts(outs[0], other)
    assert min(accepted[1:]) > 0


def test_config():
    from leap_jax.train.config import ConfigError, load_config
    impl = load_config(None, ["sampling.speculate=8", "sampling.steps_per_iter=1",
                              "sampling.draft_ngrams=[3,2]"]).sampling.decode_impl()
    assert (impl.speculate, impl.draft_ngrams) == (8, (3, 2))
    assert load_config(None, []).sampling.decode_impl().speculate == 8  # on continued rows by default
    scoped = load_config(None, ["sampling.speculate=8", "sampling.kv_reuse=true",
                                "sampling.speculate_scope=continued"]).sampling.decode_impl()
    assert (scoped.speculate_scope, scoped.steps_per_iter) == ("continued", 4)
    with pytest.raises(ConfigError, match="sampling.speculate=8 with speculate_scope='all' needs steps_per_iter=1, "
                                          "got steps_per_iter=4"):
        load_config(None, ["sampling.speculate_scope=all"])
    with pytest.raises(ConfigError, match=r"sampling.draft_ngrams=\(0,\)"):
        load_config(None, ["sampling.speculate=8", "sampling.steps_per_iter=1", "sampling.draft_ngrams=[0]"])


@pytest.mark.gpu
@pytest.mark.parametrize("attention,compact", [("cudnn", 1), ("auto", 1), ("einsum", 1), ("auto", 2)])
def test_bf16_speculative_decoding_on_gpu(attention, compact):
    """bf16 model and cache on the GPU, the verify pass through the fused cuDNN attention (k + 1
    queries a row at per-row cache slots), with and without compaction: log-probs track the recomputed
    ones (bf16 tolerance), each row's first greedy token is the plain loop's, drafts are accepted."""
    import jax

    from leap_jax.sampling.sampler import Sampler
    from tests.leap_jax.test_sampler import GREEDY, recomputed_logprobs
    cfg = CFG.replace(dtype="bfloat16", param_dtype="bfloat16", num_layers=3)
    p = jax.tree_util.tree_map(lambda a: a.astype(jnp.bfloat16), random_params(cfg, 5))
    rng = np.random.default_rng(9)
    prompts = [rng.integers(1, 97, n).tolist() for n in (5, 30, 17, 64, 2)] + [[5, 6, 7] * 10]
    plain = Sampler(cfg, max_batch=8, prompt_buckets=(32, 64), max_new_tokens=24,
                    impl=DecodeImpl(attention=attention)).generate(p, prompts, GREEDY, 0)
    s = Sampler(cfg, max_batch=8, prompt_buckets=(32, 64), max_new_tokens=24,
                impl=DecodeImpl(attention=attention, speculate=4, compact_factor=compact))
    outs = [s.generate(p, prompts, GREEDY, 0),
            s.generate(p, prompts, SamplingParams(temperature=0.8, top_p=0.9, top_k=20), 1)]
    for out in outs:
        for pr, toks, lps in zip(prompts, out.tokens, out.logprobs, strict=True):
            np.testing.assert_allclose(lps, recomputed_logprobs(p, cfg, pr, toks), atol=0.05)
    assert [t[0] for t in plain.tokens] == [t[0] for t in outs[0].tokens]
    assert s.counters["draft_accepted"] > 0
