"""What the decode tests share: a small Sampler over tests/leap_jax/test_decoder.py's CFG, random
prompts, greedy settings with early stops, the exact top-k distribution of two sampled tokens and a
chi-square check against it, and a tiny chat policy for multi-turn rollouts.

Used by test_compact_decode, test_kv_reuse, test_preemption, test_speculative_decode and
test_rollout_pipelined: each compares another decode path with the plain static loop.
"""
from __future__ import annotations

import numpy as np
from scipy import stats

from kernels_env.tasks import get_task
from leap_jax.models.config import ModelConfig
from leap_jax.rollout.multiturn import ChatStreams
from leap_jax.rollout.prompts import initial_messages
from leap_jax.sampling.decode_impl import DecodeImpl
from leap_jax.sampling.params import SamplingParams
from leap_jax.sampling.sampler import Sampler
from leap_jax.train.config import load_config
from leap_jax.train.trainer import build_tokenizer
from tests.leap_jax.test_decoder import CFG, random_params
from tests.leap_jax.test_sampler import ref_logits

NEW = 10


def sample_prompts():
    """Eleven random prompts of 1-16 tokens."""
    rng = np.random.default_rng(3)
    return [rng.integers(1, 97, n).tolist() for n in (3, 8, 5, 1, 12, 7, 2, 16, 6, 4, 9)]


def make(impl=None, **kw):
    args = dict(max_batch=8, prompt_buckets=(8, 16), max_new_tokens=NEW, batch_buckets=(4, 8))
    args.update(kw)
    return Sampler(CFG, impl=impl or DecodeImpl(), **args)


def assert_same(a, b):
    assert a.tokens == b.tokens
    assert a.finished == b.finished
    for x, y in zip(a.logprobs, b.logprobs, strict=True):
        assert x.shape == y.shape
        np.testing.assert_allclose(x, y, atol=1e-5)


def stop_settings(out):
    """Greedy settings with stop ids that end some rows early, others at max_new_tokens."""
    stops = tuple(sorted({out.tokens[0][2], out.tokens[4][5], out.tokens[7][0]}))
    return [SamplingParams(temperature=0.0, stop_token_ids=()),
            SamplingParams(temperature=0.0, stop_token_ids=stops),
            SamplingParams(temperature=0.0, max_new_tokens=6, stop_token_ids=stops),
            SamplingParams(temperature=0.0, max_new_tokens=1, stop_token_ids=stops)]


TOP_K, TEMP = 4, 0.8


def top_k_dist(params, seq):
    """The next token's support and probabilities after `seq` under temperature TEMP and top-k TOP_K."""
    lg = ref_logits(params, seq)[-1].astype(np.float64) / TEMP
    keep = np.argsort(-lg)[:TOP_K]
    pr = np.exp(lg[keep] - lg[keep].max())
    return keep, pr / pr.sum()


def exact_pair_probs(params, prompt):
    """P(t1, t2) of the first two sampled tokens under temperature TEMP and top-k TOP_K."""
    out = {}
    for t1, p1 in zip(*top_k_dist(params, prompt), strict=True):
        for t2, p2 in zip(*top_k_dist(params, prompt + [int(t1)]), strict=True):
            out[(int(t1), int(t2))] = p1 * p2
    return out


def pair_counts(sampler, params, prompt, calls, rows):
    sp = SamplingParams(temperature=TEMP, top_k=TOP_K, max_new_tokens=2, stop_token_ids=())
    counts: dict[tuple[int, int], int] = {}
    for seed in range(calls):
        for toks in sampler.generate(params, [prompt] * rows, sp, seed).tokens:
            counts[(toks[0], toks[1])] = counts.get((toks[0], toks[1]), 0) + 1
    return counts


def assert_pairs_follow(samples, probs, n):
    """Each sample of n pair counts fits `probs` (chi-square), and the samples fit each other."""
    keys = sorted(probs)
    for name, counts in samples.items():
        assert set(counts) <= set(keys), name  # nothing outside the top-k support
        obs = np.array([counts.get(k, 0) for k in keys], float)
        exp = np.array([probs[k] for k in keys]) * n
        p = stats.chisquare(obs, exp).pvalue
        assert p > 1e-3, (name, p, obs, exp)
    table = np.array([[samples[s].get(k, 0) for k in keys] for s in samples], float)
    table = table[:, table.sum(0) > 0]
    assert stats.chi2_contingency(table).pvalue > 1e-3


def tiny_chat_policy(tmp_path, tasks):
    """A BPE tokenizer on `tasks`, a tiny random decoder over it, its ChatStreams and greedy
    SamplingParams of 12 new tokens that stop on the end-of-turn ids and a frequent id (a random
    model seldom emits <|im_end|>, so some turns end early): (tok, config, params, streams, sampling)."""
    tok = build_tokenizer(load_config(None, ["tokenizer.vocab_size=600"]), tmp_path,
                          [get_task(t) for t in tasks])
    cfg = ModelConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_layers=2,
                      num_heads=2, num_kv_heads=1, dtype="float32", param_dtype="float32")
    params = random_params(cfg, seed=5)
    streams = ChatStreams(tok)
    probe = Sampler(cfg, max_batch=8, prompt_buckets=(1024,), max_new_tokens=12).generate(
        params, [streams.initial(initial_messages(get_task(tasks[0]), "small"))], SamplingParams(temperature=0.0, stop_token_ids=()))
    stops = tuple(streams.end_ids) + (probe.tokens[0][3],)
    return tok, cfg, params, streams, SamplingParams(temperature=0.0, max_new_tokens=12, stop_token_ids=stops)


def assert_same_rollouts(a, b):
    """Two rollouts of 12-token turns: the same conversations, stop flags, log-probs and outcomes,
    with early stops and truncation among the turns."""
    lengths = [tr.length for row in a.rows for tr in row.turns]
    assert min(lengths) < 12 and max(lengths) == 12  # early stops and truncation both happen
    for ra, rb in zip(a.rows, b.rows, strict=True):
        assert ra.tokens == rb.tokens and ra.trainable == rb.trainable
        assert [t.finished for t in ra.turns] == [t.finished for t in rb.turns]
        np.testing.assert_allclose(np.asarray(ra.logprobs), np.asarray(rb.logprobs), atol=1e-5)
    np.testing.assert_array_equal(a.status_rank, b.status_rank)
