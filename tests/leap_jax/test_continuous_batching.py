"""Continuous batching (`DecodeImpl(batching="continuous")`, sampling/continuous.py) against the
static decode loop: greedy decoding gives the same tokens, log-probs, lengths and stop flags (rows of
different lengths, early stops, truncation, fewer slots than rows, a multi-turn rollout); sampling
draws from the same distribution (a chi-square test against the exact model distribution, with fixed
seeds so it never flakes)."""
from __future__ import annotations

import jax
import numpy as np
import pytest
from scipy import stats

from leap_jax.models.config import ModelConfig
from leap_jax.sampling.continuous import default_slots
from leap_jax.sampling.decode_impl import DecodeImpl
from leap_jax.sampling.params import SamplingParams
from leap_jax.sampling.sampler import Sampler
from tests.leap_jax.test_decoder import CFG, random_params
# _fp32_matmuls: the static sampler tests' autouse fixture (fp32 matmuls on every backend)
from tests.leap_jax.test_sampler import _fp32_matmuls, ref_logits  # noqa: F401

NEW = 10
CONT = DecodeImpl(batching="continuous", slots=3)


@pytest.fixture(scope="module")
def params():
    return random_params(CFG, seed=11)


def sample_prompts():
    """Eleven random prompts of 1-16 tokens (shared with test_speculative_decode)."""
    rng = np.random.default_rng(3)
    return [rng.integers(1, 97, n).tolist() for n in (3, 8, 5, 1, 12, 7, 2, 16, 6, 4, 9)]


@pytest.fixture(scope="module")
def prompts():
    return sample_prompts()


def make(impl=None, **kw):
    args = dict(max_batch=8, prompt_buckets=(8, 16), max_new_tokens=NEW, batch_buckets=(4, 8))
    args.update(kw)
    return Sampler(CFG, impl=impl or DecodeImpl(), **args)


@pytest.fixture(scope="module")
def static():
    return make()


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


@pytest.mark.parametrize("kw", [dict(slots=3), dict(slots=1, steps_per_iter=3), dict(slots=8),
                                dict(slots=2, layer_loop="scan", fuse=False), dict(slots=3, attention="dpa")])
def test_greedy_equals_static_loop(params, prompts, static, kw):
    cont = make(DecodeImpl(batching="continuous", **kw))
    base = static.generate(params, prompts, SamplingParams(temperature=0.0, stop_token_ids=()), 0)
    settings = stop_settings(base)
    early = static.generate(params, prompts, settings[1], 0)
    assert any(early.finished) and not all(early.finished)  # both kinds of rows are exercised
    assert len({len(t) for t in early.tokens}) > 2
    for sp in settings:
        assert_same(static.generate(params, prompts, sp, 0), cont.generate(params, prompts, sp, 0))
    assert cont.trace_counts["decode"] <= 2 * 2  # per batch bucket used, never per setting


def test_array_level_inactive_rows_and_counters(params, prompts):
    cont = make(CONT)
    p = 8
    tok = np.zeros((8, p), np.int32)
    lens = np.ones((8,), np.int32)
    active = np.zeros((8,), bool)
    for r, j in enumerate((0, 2, 5, 6, 9)):  # 5 live rows spread among padding rows
        tok[r * 3 // 2, p - len(prompts[j]):] = prompts[j]
        lens[r * 3 // 2], active[r * 3 // 2] = len(prompts[j]), True
    sp = SamplingParams(temperature=0.0, stop_token_ids=())
    want = make().generate_padded(params, tok, lens, active, sp, jax.random.PRNGKey(0))
    got = cont.generate_padded(params, tok, lens, active, sp, jax.random.PRNGKey(0))
    for name in ("tokens", "lengths", "finished"):
        np.testing.assert_array_equal(np.asarray(getattr(got, name)), np.asarray(getattr(want, name)))
    np.testing.assert_allclose(np.asarray(got.logprobs), np.asarray(want.logprobs), atol=1e-5)
    assert np.all(np.asarray(got.lengths)[~active] == 0)
    assert np.all(np.asarray(got.tokens)[~active] == cont.pad_id)
    # 5 rows x NEW tokens through 3 slots: ceil(50 / 3) steps at least, the static loop's NEW at most x 5
    assert 17 <= cont._last_steps <= 5 * NEW
    cont.generate(params, prompts[:5], sp, 0)
    assert cont.counters["decode_calls"] == 1 and cont.counters["generated_tokens"] == 5 * NEW
    assert cont.counters["decode_iterations"] >= 17


def test_buffers_are_reused_and_slots_bounded(params, prompts):
    cont = make(CONT)
    sp = SamplingParams(temperature=0.0, stop_token_ids=())
    cont.generate(params, prompts[:4], sp, 0)
    (store_shape, store), (slot_shape, slots) = cont._pool["store"], cont._pool["slots"]
    assert store_shape == (4, 8) and slot_shape == (3, 8 + NEW)
    cont.generate(params, prompts[:4], sp, 1)
    assert slots.k[0].is_deleted() and store.k[0].is_deleted()  # donated, not copied
    assert [default_slots(b, s) for b, s in ((8, 0), (1, 0), (8, 3), (4, 9))] == [4, 1, 3, 4]


def test_impl_validation():
    with pytest.raises(ValueError, match="batching='continuous' needs padding='left'"):
        DecodeImpl(batching="continuous", padding="right")
    with pytest.raises(ValueError, match="decode_segments=2"):
        DecodeImpl(batching="continuous", decode_segments=2)
    with pytest.raises(ValueError, match="batching='dynamic'"):
        DecodeImpl(batching="dynamic")
    with pytest.raises(ValueError, match="slots=-1"):
        DecodeImpl(slots=-1)
    assert DecodeImpl() == DecodeImpl(batching="static", slots=0)  # the default is unchanged


# ---------------------------------------------------------------------------- sampled distribution
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


def test_sampled_pairs_follow_the_model_distribution(params, prompts):
    """Chi-square of (first, second) token pairs against the exact distribution, for the static
    loop (the control) and continuous batching; and the two samples against each other."""
    prompt = prompts[1]
    probs = exact_pair_probs(params, prompt)
    calls, rows = 24, 32  # 768 draws per sampler
    kw = dict(max_batch=32, prompt_buckets=(8,), max_new_tokens=2, batch_buckets=(32,))
    samples = {name: pair_counts(make(impl, **kw), params, prompt, calls, rows)
               for name, impl in (("static", DecodeImpl()), ("continuous", CONT.replace(slots=5)))}
    assert_pairs_follow(samples, probs, calls * rows)


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


def test_sampling_is_deterministic_and_seed_dependent(params, prompts):
    cont = make(CONT)
    sp = SamplingParams(temperature=1.0, stop_token_ids=())
    a, b = cont.generate(params, prompts, sp, 7), cont.generate(params, prompts, sp, 7)
    assert a.tokens == b.tokens
    assert cont.generate(params, prompts, sp, 8).tokens != a.tokens


# ---------------------------------------------------------------------------- multi-turn rollout
def tiny_chat_policy(tmp_path, tasks):
    """A BPE tokenizer on `tasks`, a tiny random decoder over it, its ChatStreams and greedy
    SamplingParams of 12 new tokens that stop on the end-of-turn ids and a frequent id (a random
    model seldom emits <|im_end|>, so some turns end early): (tok, config, params, streams, sampling)."""
    from kernels_env.tasks import get_task
    from leap_jax.rollout.multiturn import ChatStreams
    from leap_jax.rollout.prompts import initial_messages
    from leap_jax.train.config import load_config
    from leap_jax.train.trainer import build_tokenizer
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


def test_multiturn_rollout_same_with_continuous_batching(tmp_path):
    """A greedy 3-turn rollout (every failed row debugged) through SamplerPolicy: the same
    conversations, log-probs and outcomes with the static and the continuous decode."""
    from kernels_env.core.config import EnvConfig
    from leap_jax.rollout.multiturn import MultiTurnRollout
    from leap_jax.rollout.policy import SamplerPolicy
    from tests.leap_jax._trainer_helpers import OracleEvaluator

    tasks = ["relu", "tanh"]
    tok, cfg, params, streams, sampling = tiny_chat_policy(tmp_path, tasks)
    outs = []
    for impl in (DecodeImpl(), DecodeImpl(batching="continuous", slots=3, steps_per_iter=2)):
        sampler = Sampler(cfg, max_batch=8, prompt_buckets=(1024,), max_new_tokens=12, impl=impl)
        policy = SamplerPolicy(sampler, tok, sampling, params=params, end_ids=streams.end_ids)
        rollout = MultiTurnRollout(streams, OracleEvaluator(), EnvConfig(backend="cpu", sizes="small"),
                                   group_size=3, max_turns=3, dcp_mode="all", max_new_tokens=12,
                                   max_context_tokens=1024, sizes="small",
                                   feedback_fn=lambda res, budget: f"status: {res.status.value}"[:budget])
        outs.append(rollout.run(tasks, policy, seed=0))
    a, b = outs
    assert a.attempted.sum() == b.attempted.sum() == 2 * 3 * 3  # every row took 3 turns
    assert_same_rollouts(a, b)


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


def test_sampling_config_opt_in():
    from leap_jax.sampling import decode_impl
    from leap_jax.train import config_policy
    from leap_jax.train.config import load_config
    from leap_jax.train.config_loader import ConfigError
    assert config_policy.BATCHINGS == decode_impl.BATCHINGS
    from leap_jax.models.layers import ATTN_IMPLS
    assert config_policy.ATTENTIONS == ("auto", *ATTN_IMPLS)
    assert load_config(None, ["sampling.attention=cudnn"]).sampling.decode_impl().attention == "cudnn"
    with pytest.raises(ConfigError, match="sampling.attention"):
        load_config(None, ["sampling.attention=flash"])
    assert load_config(None, ["sampling.prefill_attention=auto"]).sampling.decode_impl().prefill_attention == "auto"
    with pytest.raises(ConfigError, match="sampling.prefill_attention='reduce'; expected one of"):
        load_config(None, ["sampling.prefill_attention=reduce"])
    assert load_config(None, []).sampling.decode_impl().attention_lengths is True
    assert load_config(None, ["sampling.attention_lengths=false"]).sampling.decode_impl().attention_lengths is False
    with pytest.raises((ConfigError, ValueError), match="attention_lengths"):
        load_config(None, ["sampling.attention_lengths=sometimes"])
    cfg = load_config(None, [])
    assert cfg.sampling.decode_impl() == DecodeImpl(steps_per_iter=cfg.sampling.steps_per_iter)
    cfg = load_config(None, ["sampling.batching=continuous", "sampling.slots=16"])
    assert cfg.sampling.decode_impl() == DecodeImpl(steps_per_iter=cfg.sampling.steps_per_iter,
                                                    batching="continuous", slots=16)
    with pytest.raises(ConfigError, match="sampling.batching"):
        load_config(None, ["sampling.batching=dynamic"])
    with pytest.raises(ConfigError, match="decode_segments=1"):
        load_config(None, ["sampling.batching=continuous", "sampling.decode_segments=2"])


def test_the_trainer_builds_its_sampler_from_the_sampling_section(tmp_path):
    """sampling.batching / sampling.slots reach the trainer's Sampler (no knob that does nothing)."""
    from leap_jax.train.config import load_config
    from leap_jax.train.trainer import Trainer
    from tests.leap_jax._trainer_helpers import OracleEvaluator
    from tests.leap_jax.test_trainer import TINY
    cfg = load_config(None, TINY + [f"train.run_dir={tmp_path}", "sampling.batching=continuous", "sampling.slots=2"])
    tr = Trainer(cfg, evaluator=OracleEvaluator())
    impl = tr._sampler_policy(tr._sampling()).sampler.impl
    assert (impl.batching, impl.slots, impl.steps_per_iter) == ("continuous", 2, cfg.sampling.steps_per_iter)
    tr.close()
