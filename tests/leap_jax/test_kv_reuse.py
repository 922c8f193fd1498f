"""KV reuse across turns (`DecodeImpl(kv_reuse=True)`, sampling/prefix.py) against the plain path that
prefills the whole conversation again: greedy multi-turn generation gives the same tokens, log-probs
and stop flags (early stops, truncation at max_new_tokens, rows that stop after turn 1 and rows that
continue, deltas too long for a delta bucket, the context-limit fallback, changed params, a
multi-turn rollout); sampling draws from the same distribution (chi-square against the exact model
distribution, fixed seeds so it never flakes)."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from leap_jax.sampling.decode_impl import DecodeImpl
from leap_jax.sampling.params import SamplingParams
from leap_jax.sampling.sampler import Sampler
from tests.leap_jax.decode_helpers import (assert_pairs_follow, assert_same, assert_same_rollouts,
                                           exact_pair_probs, tiny_chat_policy)
from tests.leap_jax.test_decoder import CFG, random_params
# _fp32_matmuls: the static sampler tests' autouse fixture (fp32 matmuls on every backend)
from tests.leap_jax.test_sampler import _fp32_matmuls  # noqa: F401

NEW = 8
REUSE = DecodeImpl(kv_reuse=True)
CLOSE = [7]  # the untrainable tokens that close a turn, as the rollout appends them


@pytest.fixture(scope="module")
def params():
    return random_params(CFG, seed=11)


def make(impl=None, **kw):
    args = dict(max_batch=4, prompt_buckets=(16, 32, 64), max_new_tokens=NEW, batch_buckets=(2, 4),
                delta_buckets=(4, 8))
    args.update(kw)
    return Sampler(CFG, impl=impl or DecodeImpl(), **args)


def multi_turn(samplers, params, prompts, sp, turns=3, stop_after_1=(0, 3, 6), seed=0):
    """Both samplers through the same conversations: after each turn a row continues with its
    response, CLOSE and a feedback of 1..9 ids (a delta of 3..11: longer than the largest delta
    bucket now and then), except rows in `stop_after_1` (they end after turn 1) and rows whose next
    prompt would pass the largest prompt bucket. Returns the per-turn outputs of each sampler."""
    rng = np.random.default_rng(seed)
    convs = {r: [list(p)] for r, p in enumerate(prompts)}  # row -> prompt per turn
    live = list(range(len(prompts)))
    outs: list[list] = [[] for _ in samplers]
    for t in range(turns):
        cur = [convs[r][-1] for r in live]
        res = [s.generate(params, cur, sp, t, conversations=[("c", r) for r in live]) for s in samplers]
        for o, x in zip(outs, res, strict=True):
            o.append(x)
        assert_same(res[0], res[1])
        nxt = []
        for r, toks in zip(live, res[0].tokens, strict=True):
            feedback = rng.integers(1, 97, int(rng.integers(1, 10))).tolist()
            p = convs[r][-1] + toks + CLOSE + feedback
            if (t == 0 and r in stop_after_1) or len(p) > 64:
                for s in samplers:
                    s.release_conversations([("c", r)])
                continue
            convs[r].append(p)
            nxt.append(r)
        live = nxt
    return outs


@pytest.mark.parametrize("kw", [{}, dict(layer_loop="scan", fuse=False, steps_per_iter=3),
                                dict(steps_per_iter=2, attention="dpa"),
                                dict(speculate=4, compact_factor=2, draft_ngrams=(2, 1)),
                                dict(speculate=4, speculate_scope="continued", steps_per_iter=3),
                                dict(prefill_attention="dpa")])
def test_greedy_multi_turn_equals_re_prefill(params, kw):
    rng = np.random.default_rng(3)
    prompts = [rng.integers(1, 97, n).tolist() for n in (3, 8, 5, 1, 12, 7, 2, 10, 4)]
    plain_kw = dict(kw)  # the re-prefill arm; a scope of kept conversations only needs kv_reuse
    if plain_kw.pop("speculate_scope", "all") != "all":
        plain_kw.pop("speculate")
    plain, reuse = make(DecodeImpl(**plain_kw)), make(REUSE.replace(**kw))
    probe = plain.generate(params, prompts, SamplingParams(temperature=0.0, stop_token_ids=()), 0)
    stops = tuple(sorted({probe.tokens[0][2], probe.tokens[4][5], probe.tokens[7][1]}))
    sp = SamplingParams(temperature=0.0, stop_token_ids=stops)
    probed = plain.counters["prefill_tokens"]
    outs = multi_turn((plain, reuse), params, prompts, sp)
    fins = [f for o in outs[1] for f in o.finished]
    assert any(fins) and not all(fins)  # early stops and truncation at max_new_tokens
    assert len(outs[1]) == 3 and len(outs[1][2].tokens) >= 2  # rows reach turn 3
    c = reuse.counters
    assert c["kv_reuse_rows"] >= 6 and c["kv_fallback_rows"] >= 1  # deltas past the largest bucket
    assert c["prefill_tokens"] + c["kv_reused_tokens"] == plain.counters["prefill_tokens"] - probed
    assert reuse.kept_bytes() > 0
    reuse.release_conversations()
    assert reuse.kept_bytes() == 0 and not reuse._kept.entries


def test_near_the_context_limit_and_the_delta_block_fallback(params):
    """A conversation that fills the largest prompt bucket reuses its cache in the bucket a full
    prefill would take (the kept K/V and the delta need no more room than the whole prompt); a delta
    whose bucket is longer than the largest prompt bucket is prefilled in full. Same results."""
    rng = np.random.default_rng(5)
    prompt = rng.integers(1, 97, 51).tolist()
    sp = SamplingParams(temperature=0.0, stop_token_ids=())
    plain, reuse, wide = make(), make(REUSE), make(REUSE, delta_buckets=(4, 128))
    first = [s.generate(params, [prompt, prompt[:20]], sp, 0, conversations=["far", "near"])
             for s in (plain, reuse, wide)]
    assert_same(first[0], first[1])
    assert_same(first[0], first[2])
    assert len(first[0].tokens[0]) == NEW
    # "far": 51 + 8 + 1 + 4 = 64 tokens, the largest bucket (63 kept, a delta of 5 in a block of 8)
    nxt = [prompt + first[0].tokens[0] + CLOSE + [9, 9, 9, 9], prompt[:20] + first[0].tokens[1] + CLOSE + [9] * 9]
    assert len(nxt[0]) == 64
    second = [s.generate(params, nxt, sp, 1, conversations=["far", "near"]) for s in (plain, reuse, wide)]
    assert_same(second[0], second[1])
    assert_same(second[0], second[2])
    # reuse: "far" reused in a cache of 64 + NEW slots, "near"'s delta of 11 passes the delta buckets
    assert (reuse.counters["kv_reuse_rows"], reuse.counters["kv_fallback_rows"]) == (1, 1)
    far = reuse._kept.get("far")
    assert far is not None and reuse._kept.buffers[far.buf].seg.shape[1] == 64 + NEW
    # wide: both deltas (5 and 11) take the bucket of 128 > 64 prompt slots: full prefills
    assert (wide.counters["kv_reuse_rows"], wide.counters["kv_fallback_rows"]) == (0, 2)
    with pytest.raises(ValueError, match="largest prompt bucket"):  # past the context: refused by both paths
        reuse.generate(params, [nxt[0] + [1]], sp, 2, conversations=["far"])
    with pytest.raises(ValueError, match="largest prompt bucket"):
        plain.generate(params, [nxt[0] + [1]], sp, 2)


def test_no_reuse_without_a_matching_prefix_or_with_new_params(params):
    rng = np.random.default_rng(6)
    prompts = [rng.integers(1, 97, n).tolist() for n in (6, 9)]
    sp = SamplingParams(temperature=0.0, stop_token_ids=())
    plain, reuse = make(), make(REUSE)
    out = reuse.generate(params, prompts, sp, 0, conversations=["a", "b"])
    # "a" continues its conversation; "b" asks for another one (a changed first token)
    nxt = [prompts[0] + out.tokens[0] + CLOSE, [1] + prompts[1][1:] + out.tokens[1] + CLOSE]
    assert_same(plain.generate(params, nxt, sp, 1), reuse.generate(params, nxt, sp, 1, conversations=["a", "b"]))
    assert (reuse.counters["kv_reuse_rows"], reuse.counters["kv_fallback_rows"]) == (1, 1)
    # other params (even equal values): nothing kept is used
    other = jax.tree_util.tree_map(lambda x: x + 0.0, params)
    again = [p + [3] for p in nxt]
    assert_same(plain.generate(other, again, sp, 2), reuse.generate(other, again, sp, 2, conversations=["a", "b"]))
    assert reuse.counters["kv_reuse_rows"] == 1
    with pytest.raises(ValueError, match="distinct"):
        reuse.generate(params, nxt, sp, 0, conversations=["a", "a"])
    with pytest.raises(ValueError, match="one per prompt"):
        reuse.generate(params, nxt, sp, 0, conversations=["a"])


def test_default_is_unchanged_and_validation():
    assert DecodeImpl().kv_reuse is False
    with pytest.raises(ValueError, match="kv_reuse=True needs padding='left'"):
        DecodeImpl(kv_reuse=True, padding="right")
    from leap_jax.train.config import load_config
    from leap_jax.train.config_loader import ConfigError
    cfg = load_config(None, [])
    assert cfg.sampling.kv_reuse is True and cfg.sampling.decode_impl().kv_reuse is True  # the trainer's default
    off = load_config(None, ["sampling.kv_reuse=false", "sampling.speculate_scope=all", "sampling.steps_per_iter=1"])
    assert off.sampling.decode_impl().kv_reuse is False
    with pytest.raises(ConfigError, match="kv_reuse"):
        load_config(None, ["sampling.kv_reuse=maybe"])


# ---------------------------------------------------------------------------- sampled distribution
def test_sampled_pairs_after_reuse_follow_the_model_distribution(params):
    """Turn 2 sampled on a kept cache: chi-square of its (first, second) token pairs against the
    exact distribution, next to the plain path (the control), and the two samples against each other."""
    from tests.leap_jax.decode_helpers import TEMP, TOP_K
    prompt = [11, 42, 7, 80]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=4, stop_token_ids=())
    sp = SamplingParams(temperature=TEMP, top_k=TOP_K, max_new_tokens=2, stop_token_ids=())
    rows, calls = 32, 24  # 768 draws per sampler
    kw = dict(max_batch=rows, prompt_buckets=(8, 16), max_new_tokens=4, batch_buckets=(rows,),
              delta_buckets=(4,))
    first = make(**kw).generate(params, [prompt], greedy, 0).tokens[0]
    turn2 = prompt + first + CLOSE + [3, 5]  # 11 tokens: 7 kept, a delta of 4
    probs = exact_pair_probs(params, turn2)
    samples = {}
    for name, impl in (("plain", DecodeImpl()), ("reuse", REUSE)):
        s = make(impl, **kw)
        counts: dict[tuple[int, int], int] = {}
        for seed in range(calls):
            convs = [(seed, r) for r in range(rows)]
            s.generate(params, [prompt] * rows, greedy, 0, conversations=convs)
            for toks in s.generate(params, [turn2] * rows, sp, 1000 + seed, conversations=convs).tokens:
                counts[(toks[0], toks[1])] = counts.get((toks[0], toks[1]), 0) + 1
            s.release_conversations()
        if name == "reuse":
            assert s.counters["kv_reuse_rows"] == calls * rows
        samples[name] = counts
    assert_pairs_follow(samples, probs, calls * rows)


# ---------------------------------------------------------------------------- multi-turn rollout
class _ReluCorrect:
    """Scores every response to `relu` correct and every other one wrong, so relu's rows stop after
    turn 1 and the others are debugged (greedy rows of one task are alike). With `max_delay` each
    future completes on a timer after a delay of its own, so results arrive out of order."""

    def __init__(self, max_delay: float = 0.0):
        self.max_delay, self.n = max_delay, 0

    def submit(self, job):
        import threading
        from concurrent.futures import Future
        from kernels_env.core.result import Result
        from kernels_env.core.status import Status
        f: Future = Future()
        ok = job.task == "relu"
        res = Result(Status.CORRECT if ok else Status.FORMAT_ERROR, "ok" if ok else "no launch", task=job.task)
        self.n += 1
        if not self.max_delay:
            f.set_result(res)
            return f
        timer = threading.Timer(self.max_delay * ((self.n * 7919) % 13) / 13, f.set_result, (res,))
        timer.daemon = True
        timer.start()
        return f


def relu_debug_rollouts(tmp_path, arms, evaluator=_ReluCorrect, max_batch=4):
    """A greedy rollout of relu, tanh, sigmoid x 4 rows, 3 turns, every failed row debugged, through
    SamplerPolicy on the tiny chat policy, once per (DecodeImpl, pipeline_turns[, preempt]) arm: relu passes
    turn 1, tanh is debugged twice, sigmoid once (its long feedback takes its rows past the context
    at turn 3). max_batch: the samplers' rows per decode chunk (a chunk of one task's rows, all
    alike, ends at once). Returns the outputs and the samplers."""
    from kernels_env.core.config import EnvConfig
    from leap_jax.rollout.multiturn import MultiTurnRollout
    from leap_jax.rollout.policy import SamplerPolicy

    tasks = ["relu", "tanh", "sigmoid"]
    tok, cfg, params, streams, sampling = tiny_chat_policy(tmp_path, tasks)

    def feedback(res, budget):
        return (f"status: {res.status.value}" + (" x" * 100 if res.task == "sigmoid" else ""))[:budget]
    outs, samplers = [], []
    for impl, pipelined, *preempt in arms:  # an optional third item: rollout preemption
        sampler = Sampler(cfg, max_batch=max_batch, prompt_buckets=(512, 1024), max_new_tokens=12, impl=impl,
                          delta_buckets=(64, 512))
        policy = SamplerPolicy(sampler, tok, sampling, params=params, end_ids=streams.end_ids)
        rollout = MultiTurnRollout(streams, evaluator(), EnvConfig(backend="cpu", sizes="small"),
                                   group_size=4, max_turns=3, dcp_mode="all", max_new_tokens=12,
                                   max_context_tokens=1024, overlap_chunks=2, sizes="small",
                                   feedback_fn=feedback, pipeline_turns=pipelined,
                                   preempt=preempt[0] if preempt else 0.0)
        outs.append(rollout.run(tasks, policy, seed=0))
        samplers.append(sampler)
    return outs, samplers


def test_multiturn_rollout_same_with_kv_reuse(tmp_path):
    """A greedy 3-turn rollout through SamplerPolicy: the same conversations, log-probs and outcomes
    with the plain static loop and with KV reuse; rows that pass turn 1 stop, the others are debugged, some until the
    context limit stops them."""
    outs, samplers = relu_debug_rollouts(tmp_path, [(DecodeImpl(), False),
                                                    (REUSE.replace(steps_per_iter=2), False)])
    a, b = outs
    turns = a.attempted.sum(axis=-1)
    assert list(turns[:, 0]) == [1, 3, 2]  # relu passes turn 1, tanh is debugged twice, sigmoid once
    limited = [r.context_limited for r in a.rows]
    assert limited == [r.context_limited for r in b.rows] and sum(limited) == 4  # sigmoid's rows
    assert_same_rollouts(a, b)
    plain, reuse = samplers
    assert reuse.counters["kv_reuse_rows"] == int(a.attempted[..., 1:].sum())  # every later turn reused
    assert reuse.counters["kv_reused_tokens"] > 1000  # the prompt and earlier turns, not prefilled again
    assert (reuse.counters["prefill_tokens"] + reuse.counters["kv_reused_tokens"]
            == plain.counters["prefill_tokens"])
    assert reuse.kept_bytes() == 0  # the rollout released every conversation at its end
