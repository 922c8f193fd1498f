"""Turn pipelining (`MultiTurnRollout(pipeline_turns=True)`, rollout/pipelined.py) against the
sequential rollout: with a policy whose answer depends on the request only and an evaluator whose
futures finish in a scrambled order after random delays, both give the same RolloutOutput (rows,
arrays, decisions, stats but times) for DCP and debug-all, with env_errors (results and raised
futures), context limits (on the first prompt and on later turns) and T = 3; pipelining really
overlaps turns; greedy sampling on a tiny random decoder gives the same rollouts (plain and KV reuse).
"""
from __future__ import annotations

import hashlib
import threading
import time
from concurrent.futures import Future

import numpy as np
import pytest

from kernels_env.core.config import EnvConfig
from kernels_env.core.result import Result, Timing
from kernels_env.core.status import Status
from kernels_env.tasks import get_task
from leap_jax.rollout.multiturn import ChatStreams, MultiTurnRollout
from leap_jax.rollout.pipelined import call_seed
from leap_jax.rollout.policy import GenResponse
from leap_jax.train.config import ConfigError, load_config
from leap_jax.train.trainer import build_tokenizer

TASKS = ["relu", "sigmoid", "tanh", "silu", "conv3d"]  # conv3d: a far longer first prompt
G, T, NEW = 4, 3, 16


def _unit(*key) -> float:
    return int.from_bytes(hashlib.sha256(repr(key).encode()).digest()[:8], "big") / 2.0 ** 64


@pytest.fixture(scope="module")
def streams(tmp_path_factory):
    tok = build_tokenizer(load_config(None, ["tokenizer.vocab_size=600"]), tmp_path_factory.mktemp("tok"),
                          [get_task(t) for t in TASKS])
    return ChatStreams(tok)


class KeyPolicy:
    """Answers a request from its key (step, row, turn) alone: GOOD / BAD / ENVFAIL text with some
    padding, log-probs from the key, some turns unfinished; records each call and each release."""

    def __init__(self, streams, plan_seed, events=None):
        self.streams, self.plan_seed = streams, plan_seed
        self.calls: list[list[tuple[int, int]]] = []  # (row, turn) per call
        self.seeds: list[int] = []
        self.started: list[float] = []  # perf_counter at each call
        self.releases: list[set] = []
        self.events = events if events is not None else []

    def set_params(self, params):
        pass

    def release_conversations(self, conversations=None):
        self.releases.append({c[1] for c in conversations})
        self.events.append(("release", {c[1] for c in conversations}))

    def generate(self, requests, seed):
        self.started.append(time.perf_counter())
        self.calls.append([(r.key[1], r.turn) for r in requests])
        self.seeds.append(seed)
        self.events.append(("generate", [(r.key[1], r.turn) for r in requests]))
        out = []
        for q in requests:
            u = _unit(self.plan_seed, q.key)
            p_good = 0.8 if q.task == "relu" else 0.35  # relu's group is often easy
            kind = "GOOD" if u < p_good else "ENVFAIL" if u < p_good + 0.07 else "BAD"
            text = f"{kind} row {q.key[1]} turn {q.turn}" + " pad" * int(_unit("pad", self.plan_seed, q.key) * 9)
            ids = list(self.streams.tokenizer.encode(text, allow_special=False))
            finished = _unit("fin", self.plan_seed, q.key) < 0.8
            ids += [self.streams.im_end] if finished else []
            lps = -0.01 * (1 + np.arange(len(ids))) * (1 + q.key[1] % 3 + q.turn)
            out.append(GenResponse(ids, lps, text, finished))
        return out


class ScrambledEvaluator:
    """Scores the KeyPolicy's texts (GOOD correct with a speedup, BAD compile_error, ENVFAIL an
    env_error result or a raised future); each future completes after a random delay on a timer
    thread, or at once for `instant` tasks, so results arrive out of submission order."""

    def __init__(self, seed, max_delay=0.02, instant=(), slow=(), slow_delay=0.0):
        self.seed, self.max_delay = seed, max_delay
        self.instant, self.slow, self.slow_delay = set(instant), set(slow), slow_delay
        self.n = 0
        self.lock = threading.Lock()
        self.log: list[tuple[str, str, float]] = []  # (task, text, finish time)

    def _result(self, job):
        if job.text.startswith("GOOD"):
            sp = 1.0 + _unit("speed", job.text)
            timing = Timing(device="cuda", comparable=True, runs=1, kernel_median_ms=1.0, kernel_mean_ms=1.0,
                            ref_median_ms=sp, speedup=sp)
            return Result(Status.CORRECT, "ok", task=job.task, timing=timing)
        if job.text.startswith("ENVFAIL"):
            if _unit("raise", job.text) < 0.5:
                raise RuntimeError("worker lost")
            return Result.env_error("sandbox died", task=job.task)
        return Result(Status.COMPILE_ERROR, f"error: {job.text[:12]}", task=job.task)

    def _finish(self, fut, job):
        try:
            fut.set_result(self._result(job))
        except RuntimeError as e:
            fut.set_exception(e)
        with self.lock:
            self.log.append((job.task, job.text, time.perf_counter()))

    def submit(self, job):
        fut: Future = Future()
        with self.lock:
            self.n += 1
            n = self.n
        if job.task in self.instant:
            self._finish(fut, job)
            return fut
        delay = self.slow_delay if job.task in self.slow else self.max_delay * _unit(self.seed, n, job.text)
        timer = threading.Timer(delay, self._finish, (fut, job))
        timer.daemon = True
        timer.start()
        return fut


def _initial(task):
    from leap_jax.rollout.prompts import initial_messages
    return initial_messages(get_task(task), "small")


def make_rollout(streams, evaluator, mode, pipelined, chunks=2, max_context=None, preempt=0.0):
    longest = max(len(streams.initial(_initial(t))) for t in TASKS)
    return MultiTurnRollout(
        streams, evaluator, EnvConfig(backend="cpu", sizes="small"), group_size=G, max_turns=T,
        dcp_mode=mode, t_min=0.5, feedback_budget_chars=600, max_new_tokens=NEW,
        # the longest prompt leaves no room (its group is context-limited from the start); the others
        # room for a few turns, tanh (long feedback) for two
        max_context_tokens=max_context or longest + NEW - 1, overlap_chunks=chunks, sizes="small",
        feedback_fn=lambda res, budget: (f"status {res.status.value}: {res.message}"
                                         + (" x" * 70 if res.task == "tanh" else ""))[:budget],
        pipeline_turns=pipelined, preempt=preempt)


def untimed(stats):
    return {k: v for k, v in stats.items() if not k.startswith("time/")}


def assert_same_output(a, b):
    """Everything the update and the metrics read, bit for bit; only times may differ."""
    assert a.tasks == b.tasks and a.group_size == b.group_size and a.max_turns == b.max_turns
    for name in ("decisions", "correct", "attempted", "status_rank", "speedup", "row_mask"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    for ra, rb in zip(a.rows, b.rows, strict=True):
        assert (ra.task, ra.group, ra.index) == (rb.task, rb.group, rb.index)
        assert ra.tokens == rb.tokens and ra.trainable == rb.trainable and ra.turn_of == rb.turn_of
        np.testing.assert_array_equal(np.asarray(ra.logprobs), np.asarray(rb.logprobs))
        assert (ra.env_error, ra.context_limited) == (rb.env_error, rb.context_limited)
        assert len(ra.turns) == len(rb.turns)
        for x, y in zip(ra.turns, rb.turns, strict=True):
            assert (x.turn, x.start, x.length, x.text, x.scripted, x.finished) == \
                   (y.turn, y.start, y.length, y.text, y.scripted, y.finished)
            assert (x.result.status, x.result.message, x.result.speedup) == \
                   (y.result.status, y.result.message, y.result.speedup)
    assert untimed(a.stats) == untimed(b.stats)
    assert set(a.stats) == set(b.stats)


def _last_generate(events):
    """{row: index in `events` of the generate call of its last turn}."""
    last = {}
    for k, (kind, what) in enumerate(events):
        if kind == "generate":
            for r, _ in what:
                last[r] = k
    return last


@pytest.mark.parametrize("mode", ["dcp", "all"])
@pytest.mark.parametrize("seed", [0, 3, 4])  # plans with every case below
def test_pipelined_equals_sequential(streams, mode, seed):
    outs, policies = [], []
    for pipelined in (False, True):
        pol = KeyPolicy(streams, plan_seed=seed)
        outs.append(make_rollout(streams, ScrambledEvaluator(seed), mode, pipelined, chunks=2 + seed % 2)
                    .run(TASKS, pol, seed=seed, step=7))
        policies.append(pol)
    seq, pipe = outs
    assert_same_output(seq, pipe)
    # the cases the comparison covers
    assert seq.stats["rollout/gen_rows_turn3"] > 0 and seq.stats["env/env_errors"] > 0
    limited = [r for r in seq.rows if r.context_limited]
    assert {r.task for r in limited if not r.turns} == {"conv3d"}  # the first prompt does not fit
    assert any(r.turns for r in limited)  # a later turn does not fit
    # every conversation is released once it takes no further turn, never before its last
    # generate, and all of them at the end
    p_seq, p_pipe = policies
    assert p_seq.releases[-1] == p_pipe.releases[-1] == set(range(len(TASKS) * G))
    last = _last_generate(p_pipe.events)
    for k, (kind, what) in enumerate(p_pipe.events[:-1]):
        if kind == "release":
            assert all(last[r] < k for r in what)
    early_seq = set().union(*p_seq.releases[:-1])
    early_pipe = set().union(*p_pipe.releases[:-1])
    assert early_seq <= early_pipe == {r.group * G + r.index for r in pipe.rows if r.turns}
    # pipelined calls never exceed the turn-1 chunk and each draws with its own seed
    n_active = sum(1 for r in seq.rows if r.turns)
    assert max(len(c) for c in p_pipe.calls) <= -(-n_active // (2 + seed % 2))
    assert len(set(p_pipe.seeds)) == len(p_pipe.seeds)


def test_pipelining_overlaps_turns(streams):
    """relu's evaluations finish at once, sigmoid's take 0.4 s: relu's turn 2 is generated (next to
    turn-1 rows of the last chunk) while sigmoid's turn-1 evaluations, submitted before, still run;
    the result is the sequential rollout's."""
    tasks = ["relu", "sigmoid", "tanh", "silu"]
    outs, policies = [], []
    for pipelined in (False, True):
        pol = KeyPolicy(streams, plan_seed=1)
        ev = ScrambledEvaluator(0, max_delay=0.005, instant=("relu",), slow=("sigmoid",), slow_delay=0.4)
        outs.append(make_rollout(streams, ev, "all", pipelined, chunks=3, max_context=100_000)
                    .run(tasks, pol, seed=0))
        policies.append((pol, ev))
    assert_same_output(*outs)
    (seq_pol, _), (pol, ev) = policies
    assert all(len({t for _, t in c}) == 1 for c in seq_pol.calls)  # sequential: one turn per call
    first = next(k for k, c in enumerate(pol.calls) if any(t == 2 for _, t in c))
    assert pol.calls[0] == [(r, 1) for r in range(6)]  # chunks of ceil(16 / 3) = 6
    groups = {r // G for r, t in pol.calls[first] if t == 2}
    assert 0 in groups and 1 not in groups  # relu's turn 2, never sigmoid's yet
    assert any(t == 1 for _, t in pol.calls[first])  # sharing the call with turn-1 rows of a later chunk
    sigmoid_t1_done = min(when for task, text, when in ev.log if task == "sigmoid" and "turn 1" in text)
    assert pol.started[first] < sigmoid_t1_done


def test_config_opt_in():
    assert load_config(None, []).rollout.pipeline_turns is True  # the default
    off = ["rollout.pipeline_turns=false", "rollout.preempt=0"]
    assert load_config(None, off).rollout.pipeline_turns is False
    with pytest.raises(ConfigError, match="set rollout.preempt=0"):
        load_config(None, ["rollout.pipeline_turns=false"])
    with pytest.raises(ConfigError, match="rollout.pipeline_turns=true .* needs rollout.overlap=true"):
        load_config(None, ["rollout.pipeline_turns=true", "rollout.overlap=false"])
    with pytest.raises(ConfigError, match="expected a bool"):
        load_config(None, ["rollout.pipeline_turns=sometimes"])


def test_call_seeds_differ_per_call_and_run():
    seeds = {call_seed(s, k) for s in range(4) for k in range(200)}
    assert len(seeds) == 800 and all(0 <= s < 2 ** 31 for s in seeds)


def test_greedy_rollouts_on_a_tiny_model_are_the_same(tmp_path):
    """Greedy SamplerPolicy (tiny random decoder), results out of order: the pipelined rollout, with
    the plain static loop and with KV reuse, gives the sequential rollout's conversations, log-probs
    (to rounding: its calls batch other rows), outcomes and stats, with early stops, truncation and
    context limits."""
    from leap_jax.sampling.decode_impl import DecodeImpl
    from tests.leap_jax.decode_helpers import assert_same_rollouts
    from tests.leap_jax.test_kv_reuse import _ReluCorrect, relu_debug_rollouts

    arms = [(DecodeImpl(), False), (DecodeImpl(), True), (DecodeImpl(kv_reuse=True), True)]
    (seq, *pipelined), _ = relu_debug_rollouts(tmp_path, arms, lambda: _ReluCorrect(max_delay=0.01))
    assert list(seq.attempted.sum(axis=-1)[:, 0]) == [1, 3, 2] and sum(r.context_limited for r in seq.rows) == 4
    for other in pipelined:
        assert_same_rollouts(seq, other)
        for name in ("decisions", "correct", "attempted", "row_mask"):
            np.testing.assert_array_equal(getattr(seq, name), getattr(other, name))
        assert [r.context_limited for r in seq.rows] == [r.context_limited for r in other.rows]
        assert untimed(seq.stats) == untimed(other.stats)


def test_the_trainer_pipelines_training_rollouts_only(tmp_path):
    """rollout.pipeline_turns reaches the training rollout (no knob that does nothing); evaluation
    rollouts stay turn by turn."""
    from leap_jax.train.trainer import Trainer
    from tests.leap_jax._trainer_helpers import OracleEvaluator
    from tests.leap_jax.test_trainer import TINY
    for on in (False, True):
        cfg = load_config(None, TINY + [f"train.run_dir={tmp_path / str(on)}", f"rollout.pipeline_turns={on}",
                                        f"rollout.preempt={0.25 if on else 0}"])
        tr = Trainer(cfg, evaluator=OracleEvaluator())
        assert tr._rollout(4, 3, "dcp").pipeline_turns is on
        assert tr._rollout(4, 3, "all", evaluation=True).pipeline_turns is False
        tr.close()
