"""Preemption: a decode call that ends once few of its rows still generate (`Sampler.generate(preempt=)`,
`decode(exit_live=)`), per-row budgets, and the continuation of the rows it cut (`rollout.preempt`,
rollout/pipelined.py). Against the uninterrupted decode: greedy rows continued from their tokens so
far give the same tokens, log-probs and stop flags (early stops, truncation, several loop shapes,
KV reuse); sampled rows cut after their first token follow the model's distribution (chi-square);
a pipelined rollout with preemption gives the sequential rollout's conversations."""
from __future__ import annotations

import numpy as np
import pytest

from leap_jax.sampling.decode_impl import DecodeImpl
from leap_jax.sampling.params import SamplingParams
from leap_jax.sampling.sampler import SampleOutput, Sampler, exit_rows
from tests.leap_jax.decode_helpers import (TEMP, TOP_K, assert_pairs_follow, assert_same,
                                           exact_pair_probs, stop_settings)
from tests.leap_jax.test_decoder import CFG, random_params
# _fp32_matmuls: the static sampler tests' autouse fixture (fp32 matmuls on every backend)
from tests.leap_jax.test_sampler import _fp32_matmuls  # noqa: F401
from tests.leap_jax.test_rollout_pipelined import TASKS
from leap_jax.rollout.policy import GenResponse

NEW = 10


@pytest.fixture(scope="module")
def params():
    return random_params(CFG, seed=11)  # the tiny decoder whose rows stop_settings was written for


@pytest.fixture(scope="module")
def prompts():  # 12 prompts of 1-16 tokens: two decode chunks of the samplers below
    rng = np.random.default_rng(7)
    return [rng.integers(1, 97, int(n)).tolist() for n in rng.permutation(np.arange(1, 17))[:12]]


def make(impl=None, **kw):
    args = dict(max_batch=8, prompt_buckets=(8, 16, 32), max_new_tokens=NEW, batch_buckets=(4, 8),
                delta_buckets=(4, 8))
    args.update(kw)
    return Sampler(CFG, impl=impl or DecodeImpl(), **args)


def run_to_the_end(sampler, params, prompts, sp, preempt, kv_reuse=False):
    """Generate with preemption and continue every cut row (prompt + its tokens so far, the rest of
    its budget) until all rows are whole. Returns the whole output, the cuts and the calls."""
    max_new = sp.max_new_tokens or NEW
    n = len(prompts)
    toks: list[list[int]] = [[] for _ in range(n)]
    lps = [np.zeros((0,), np.float32) for _ in range(n)]
    fin = [False] * n
    todo, cuts, calls = list(range(n)), 0, 0
    while todo:
        extra = {"conversations": [("c", j) for j in todo]} if kv_reuse else {}
        out = sampler.generate(params, [prompts[j] + toks[j] for j in todo], sp, calls,
                               budgets=[max_new - len(toks[j]) for j in todo], preempt=preempt, **extra)
        calls += 1
        nxt = []
        for k, j in enumerate(todo):
            toks[j] = toks[j] + out.tokens[k]
            lps[j] = np.concatenate([lps[j], out.logprobs[k]])
            fin[j] = out.finished[k]
            if not fin[j] and len(toks[j]) < max_new:
                nxt.append(j)
        cuts += len(nxt)
        todo = nxt
    return SampleOutput(toks, lps, fin), cuts, calls


@pytest.mark.parametrize("kw", [{}, dict(steps_per_iter=3), dict(compact_factor=2),
                                dict(padding="right"), dict(layer_loop="scan", fuse=False)])
def test_greedy_cut_rows_continue_to_the_uninterrupted_output(params, prompts, kw):
    ref_sampler = make()
    settings = stop_settings(ref_sampler.generate(params, prompts, SamplingParams(temperature=0.0,
                                                                                  stop_token_ids=())))
    cut = make(DecodeImpl(**kw))
    total_cuts = 0
    for sp in settings:
        ref = ref_sampler.generate(params, prompts, sp)
        got, cuts, calls = run_to_the_end(cut, params, prompts, sp, preempt=0.5)
        assert_same(ref, got)
        total_cuts += cuts
        if sp.max_new_tokens == 1:
            assert cuts == 0 and calls == 1  # one token is the whole budget: nothing to cut
    assert total_cuts > 0
    assert cut.counters["preempted_rows"] == total_cuts


def test_one_call_cuts_at_most_the_fraction_and_returns_prefixes(params, prompts):
    """Each chunk's decode ends once at most floor(preempt x rows) rows still generate: the cut rows
    are prefixes of the uninterrupted rows, neither finished nor at their budget, and the loop ran as
    long as its longest row (the counters say so)."""
    sp = stop_settings(make().generate(params, prompts, SamplingParams(temperature=0.0,
                                                                       stop_token_ids=())))[1]
    ref = make().generate(params, prompts, sp)
    s = make()
    out = s.generate(params, prompts, sp, preempt=0.5)
    cut = [j for j in range(len(prompts)) if not out.finished[j] and len(out.tokens[j]) < NEW]
    assert cut
    order = sorted(range(len(prompts)), key=lambda j: len(prompts[j]))  # the sampler's chunks
    for start in range(0, len(prompts), 8):
        chunk = order[start:start + 8]
        assert sum(j in cut for j in chunk) <= exit_rows(0.5, len(chunk))
    for j in range(len(prompts)):
        k = len(out.tokens[j])
        assert out.tokens[j] == ref.tokens[j][:k]
        np.testing.assert_allclose(out.logprobs[j], ref.logprobs[j][:k], atol=1e-5)
        if j not in cut:
            assert out.finished[j] == ref.finished[j] and k == len(ref.tokens[j])
    assert s.counters["preempted_rows"] == len(cut)
    assert s.counters["truncated_rows"] == sum(1 for j in range(len(prompts))
                                               if j not in cut and not out.finished[j])
    assert s.counters["generated_tokens"] == sum(len(t) for t in out.tokens)


def test_row_budgets(params, prompts):
    """Per-row budgets: each row stops at its own budget (or its stop token), as a call with that
    budget alone would; rows at their budget are truncated, not preempted."""
    sp = SamplingParams(temperature=0.0, stop_token_ids=())
    ref = make().generate(params, prompts, sp)
    budgets = [1 + (j * 3) % NEW for j in range(len(prompts))]
    for impl in (DecodeImpl(), DecodeImpl(compact_factor=3), DecodeImpl(steps_per_iter=4)):
        s = make(impl)
        out = s.generate(params, prompts, sp, budgets=budgets)
        for j, b in enumerate(budgets):
            assert out.tokens[j] == ref.tokens[j][:b] and not out.finished[j]
            np.testing.assert_allclose(out.logprobs[j], ref.logprobs[j][:b], atol=1e-5)
        assert s.counters["truncated_rows"] == len(prompts) and s.counters["preempted_rows"] == 0


def test_cut_rows_continue_on_their_kept_caches(params, prompts):
    """With KV reuse a continuation prefills only the cut row's last token: its earlier tokens are
    in the cache the cut call kept."""
    sp = stop_settings(make().generate(params, prompts, SamplingParams(temperature=0.0,
                                                                       stop_token_ids=())))[1]
    ref = make().generate(params, prompts, sp)
    s = make(DecodeImpl(kv_reuse=True))
    got, cuts, _ = run_to_the_end(s, params, prompts, sp, preempt=0.5, kv_reuse=True)
    assert_same(ref, got)
    assert cuts > 0 and s.counters["kv_reuse_rows"] == cuts
    # every continuation prefilled one token: the first calls prefilled the prompts, nothing more
    assert s.counters["prefill_tokens"] == sum(len(p) for p in prompts) + cuts
    s.release_conversations()
    assert s.kept_bytes() == 0


def test_validation(params, prompts):
    s = make()
    sp = SamplingParams(temperature=0.0, max_new_tokens=6)
    with pytest.raises(ValueError, match=r"budgets\[1\]=7; expected an int in \[1, 6\]"):
        s.generate(params, prompts[:2], sp, budgets=[3, 7])
    with pytest.raises(ValueError, match="budgets must be a list of 2 ints"):
        s.generate(params, prompts[:2], sp, budgets=[3])
    with pytest.raises(ValueError, match=r"budgets\[0\]=0"):
        s.generate(params, prompts[:2], sp, budgets=[0, 1])
    for bad in (1.0, -0.1, "half", True):
        with pytest.raises(ValueError, match="expected a fraction in"):
            s.generate(params, prompts[:2], sp, preempt=bad)
    assert [exit_rows(0.5, r) for r in (0, 1, 2, 3, 8)] == [0, 0, 1, 1, 4]
    assert exit_rows(0.99, 4) == 3  # always below the chunk's rows: a call generates something


def test_sampled_rows_cut_after_one_token_follow_the_model_distribution(params):
    """Rows cut after their first token (16 rows of budget 1 stop at once; preempt 0.5 then ends the
    call with the 16 two-token rows live) and continued in another call: their (first, second) token
    pairs fit the exact distribution (chi-square), next to uninterrupted rows (the control)."""
    prompt = [11, 42, 7, 80, 5]
    probs = exact_pair_probs(params, prompt)
    sp = SamplingParams(temperature=TEMP, top_k=TOP_K, max_new_tokens=2, stop_token_ids=())
    rows, calls = 16, 48  # 768 draws per arm
    s = make(max_batch=2 * rows, batch_buckets=(2 * rows,), max_new_tokens=2)
    samples: dict[str, dict] = {"whole": {}, "cut": {}}
    for seed in range(calls):
        out = s.generate(params, [prompt] * (2 * rows), sp, seed, budgets=[1] * rows + [2] * rows,
                         preempt=0.5)
        firsts = out.tokens[rows:]
        assert all(len(t) == 1 for t in firsts) and not any(out.finished[rows:])
        again = s.generate(params, [prompt + t for t in firsts], sp, 10_000 + seed, budgets=[1] * rows)
        for a, b in zip(firsts, again.tokens, strict=True):
            samples["cut"][(a[0], b[0])] = samples["cut"].get((a[0], b[0]), 0) + 1
        for t in s.generate(params, [prompt] * rows, sp, 20_000 + seed).tokens:
            samples["whole"][(t[0], t[1])] = samples["whole"].get((t[0], t[1]), 0) + 1
    assert s.counters["preempted_rows"] == rows * calls
    assert_pairs_follow(samples, probs, rows * calls)


# ---------------------------------------------------------------------------- the rollout
class CuttingKeyPolicy:
    """The KeyPolicy's answers (tests/leap_jax/test_rollout_pipelined.py), cut: asked with `preempt`,
    about half of the new requests come back preempted after about half of their tokens; a
    continuation must carry the answer's own first tokens and log-probs and gets the whole answer."""

    def __init__(self, streams, plan_seed):
        from tests.leap_jax.test_rollout_pipelined import KeyPolicy
        self.inner = KeyPolicy(streams, plan_seed)
        self.calls: list[list[tuple[int, int, int]]] = []  # (row, turn, prefix length) per call
        self.preempts: list[float] = []

    def set_params(self, params):
        pass

    def release_conversations(self, conversations=None):
        self.inner.release_conversations(conversations)

    def generate(self, requests, seed, preempt=0.0):
        from tests.leap_jax.test_rollout_pipelined import _unit
        self.calls.append([(r.key[1], r.turn, len(r.prefix_ids)) for r in requests])
        self.preempts.append(preempt)
        whole = self.inner.generate(requests, seed)
        out = []
        for r, w in zip(requests, whole, strict=True):
            k = len(r.prefix_ids)
            if k:
                assert list(r.prefix_ids) == w.token_ids[:k]
                np.testing.assert_array_equal(np.asarray(r.prefix_logprobs, np.float32),
                                              np.asarray(w.logprobs[:k], np.float32))
            elif preempt and len(w.token_ids) >= 2 and _unit("cut", self.inner.plan_seed, r.key) < 0.5:
                h = len(w.token_ids) // 2
                w = GenResponse(w.token_ids[:h], np.asarray(w.logprobs[:h]), "", False, preempted=True)
            out.append(w)
        return out


@pytest.mark.parametrize("mode", ["dcp", "all"])
@pytest.mark.parametrize("seed", [0, 3])
def test_pipelined_rollout_continues_cut_rows(mode, seed, tmp_path_factory):
    """With results out of order: cut responses are not evaluated, come back first in the next call
    as continuations and are evaluated once whole; the rollout is the sequential one's."""
    from tests.leap_jax.test_rollout_pipelined import (ScrambledEvaluator, assert_same_output, make_rollout,
                                                       streams)
    st = streams.__wrapped__(tmp_path_factory)
    seq_ev, cut_ev = ScrambledEvaluator(seed), ScrambledEvaluator(seed)
    seq = make_rollout(st, seq_ev, mode, False).run(TASKS, CuttingKeyPolicy(st, seed), seed=seed, step=7)
    pol = CuttingKeyPolicy(st, seed)
    cut = make_rollout(st, cut_ev, mode, True, preempt=0.5).run(TASKS, pol, seed=seed, step=7)
    n_cut = sum(p > 0 for c in pol.calls for _, _, p in c)
    assert cut.stats["rollout/preempted_responses"] == n_cut > 0
    cut.stats["rollout/preempted_responses"] = 0.0
    assert_same_output(seq, cut)
    assert set(pol.preempts) == {0.5} and seq_ev.n == cut_ev.n  # each response evaluated once
    for prev, call in zip(pol.calls, pol.calls[1:], strict=False):  # continuations lead the next call
        conts = [(r, t) for r, t, p in call if p]
        assert [(r, t) for r, t, _ in call[:len(conts)]] == conts
        assert set(conts) <= {(r, t) for r, t, _ in prev}


def test_sampler_policy_continues_cut_responses(tmp_path):
    """SamplerPolicy with preempt on the tiny chat policy: cut responses continued with
    `continue_request` end as the uninterrupted responses (tokens, log-probs, text, stop flag)."""
    from leap_jax.rollout.policy import GenRequest, SamplerPolicy, continue_request
    from tests.leap_jax.decode_helpers import tiny_chat_policy
    tok, cfg, params, streams, sampling = tiny_chat_policy(tmp_path, ["relu"])
    rng = np.random.default_rng(0)
    requests = [GenRequest(rng.integers(5, tok.vocab_size, int(n)).tolist(), "relu", 1, (0, r, 1))
                for r, n in enumerate(rng.integers(3, 40, 16))]
    whole = SamplerPolicy(Sampler(cfg, max_batch=16, prompt_buckets=(64,), max_new_tokens=12),
                          tok, sampling, params=params).generate(requests, 0)
    assert len({len(w.token_ids) for w in whole}) > 2  # rows of many lengths
    policy = SamplerPolicy(Sampler(cfg, max_batch=16, prompt_buckets=(64,), max_new_tokens=12),
                           tok, sampling, params=params)
    todo, got, cuts = list(requests), {}, 0
    while todo:
        out = policy.generate(todo, 1 + cuts, preempt=0.9)  # ends once 2 of 16 rows are done
        nxt = []
        for q, o in zip(todo, out, strict=True):
            if o.preempted:
                assert not o.finished and 0 < len(o.token_ids) < 12
                nxt.append(continue_request(q, o))
            else:
                got[q.key] = o
        cuts += len(nxt)
        todo = nxt
    assert cuts > 0
    for q, w in zip(requests, whole, strict=True):
        g = got[q.key]
        assert (g.token_ids, g.text, g.finished, g.preempted) == (w.token_ids, w.text, w.finished, False)
        np.testing.assert_allclose(g.logprobs, w.logprobs, atol=1e-5)


def test_continued_requests_stay_with_the_sampled_policy(tmp_path):
    """MixedPolicy never hands a continuation to its scripted policy, which refuses one."""
    from leap_jax.rollout.policy import GenRequest, GenResponse, MixedPolicy, ScriptedPolicy, continue_request

    class Base:
        def __init__(self):
            self.seen = []

        def set_params(self, params):
            pass

        def generate(self, requests, seed, preempt=0.0):
            self.seen += [(r.key, r.prefix_ids, preempt) for r in requests]
            return [GenResponse([1, 2], np.zeros(2, np.float32), "x", True) for _ in requests]

    class Tok:
        def encode(self, text, allow_special=False):
            return [3]
    req = GenRequest([5, 6], "relu", 1, (0, 1, 1))
    cont = continue_request(req, GenResponse([9], np.array([-0.5], np.float32), "", False, preempted=True))
    assert cont.prefix_ids == (9,) and cont.prefix_logprobs == (-0.5,) and cont.prompt_ids == [5, 6]
    with pytest.raises(ValueError, match="was not preempted"):
        continue_request(req, GenResponse([9], None, "", False))
    scripted = ScriptedPolicy(Tok(), p_good=1.0)
    with pytest.raises(ValueError, match="cannot continue a preempted response"):
        scripted.generate([cont], 0)
    base = Base()
    mixed = MixedPolicy(base, scripted, fraction=1.0)  # every new request scripted
    out = mixed.generate([req, cont], seed=3, preempt=0.5)
    assert out[0].scripted and not out[1].scripted
    assert base.seen == [((0, 1, 1), (9,), 0.5)]


def test_one_preempt_rule_for_the_config_the_rollout_and_the_sampler():
    """check_preempt decides the range; the config, the rollout and the Sampler all refuse through it."""
    from leap_jax.rollout.multiturn import MultiTurnRollout
    from leap_jax.sampling.params import check_preempt
    from leap_jax.train.config import ConfigError, RolloutCfg
    assert [check_preempt(v) for v in (0, 0.0, 0.25, 0.999)] == [0.0, 0.0, 0.25, 0.999]
    for bad in (1, 1.0, -0.1, True, False, "0.5", None, float("nan")):
        with pytest.raises(ValueError, match=r"^x=.*: expected a fraction in \[0, 1\) \(0 = off\)$"):
            check_preempt(bad, "x")
        with pytest.raises(ConfigError, match=r"^rollout.preempt=.*: expected a fraction in"):
            RolloutCfg(pipeline_turns=True, preempt=bad).check()
        with pytest.raises(ValueError, match=r"^preempt=.*: expected a fraction in"):
            MultiTurnRollout(None, None, None, group_size=1, max_turns=1, pipeline_turns=True,
                             preempt=bad)


def test_config(tmp_path):
    from leap_jax.train.config import ConfigError, load_config
    from leap_jax.train.trainer import Trainer
    from tests.leap_jax._trainer_helpers import OracleEvaluator
    from tests.leap_jax.test_trainer import TINY
    assert load_config(None, []).rollout.preempt == 0.25  # the default, with turn pipelining
    on = ["rollout.pipeline_turns=true", "rollout.preempt=0.25"]
    assert load_config(None, on).rollout.preempt == 0.25
    with pytest.raises(ConfigError, match="needs rollout.pipeline_turns=true"):
        load_config(None, ["rollout.pipeline_turns=false", "rollout.preempt=0.25"])
    with pytest.raises(ConfigError, match=r"rollout.preempt=1.0: expected a fraction in \[0, 1\)"):
        load_config(None, ["rollout.pipeline_turns=true", "rollout.preempt=1.0"])
    cfg = load_config(None, TINY + [f"train.run_dir={tmp_path}", "sampling.max_new_tokens=8",
                                    "rollout.scripted_mix.enabled=true"] + on)
    tr = Trainer(cfg, evaluator=OracleEvaluator())
    assert tr._rollout(4, 3, "dcp").preempt == 0.25  # training rollouts only
    assert tr._rollout(4, 3, "all", evaluation=True).preempt == 0.0
    rec = tr.train(max_steps=1)[-1]  # a step through MixedPolicy and SamplerPolicy with preemption on
    assert rec["rollout/preempted_responses"] == rec["sampler/preempted_rows"] >= 0
    tr.close()
