"""Turn pipelining for the multi-turn rollout (`rollout.pipeline_turns`, opt-in).

The sequential rollout (`MultiTurnRollout._run_sequential`) finishes a whole turn before the next
starts: the generator idles while the last chunk's evaluations run, and each small later-turn batch
waits for the slowest evaluation of the previous turn. Here generation instead draws from a queue of
ready requests. A row's turn t+1 becomes ready as soon as it is decided: for t = 1 when all G rows of
its group have their turn-1 results (DCP decides per group), for a later t when its own turn-t result
is in. Each generate call takes up to one turn-1 chunk (`ceil(active rows / overlap_chunks)`) of
ready requests in the order they became ready, so turn-1 rows of a later chunk and later-turn rows of
an early group can share a call; it submits their evaluations, then harvests the finished ones
(`Future.done()`, no waiting) and unlocks the turns they decide. It blocks only when nothing is ready.

It is a module of its own so that the sequential rollout, which the running experiments use, reads
as before; both share the per-row steps (`_request`, `_record`, `_continues`, `_decide`).

Equivalence. For a policy whose response to a request depends on the request only (prompt ids, task,
turn, key `(step, row, turn)`, conversation), not on the call's `seed` nor on the other requests in
the call, the result is the sequential rollout's: the same rows (streams, masks, log-probs, turn
records, env_error, context_limited), `correct` / `attempted` / `status_rank` / `speedup`,
`decisions`, `row_mask`, and every stat but `time/*`. Greedy sampling (temperature 0) is such a policy
up to floating point: calls batch other rows, so log-probs agree to rounding and tokens are equal
unless two logits tie within rounding. A policy that draws with the call's seed (sampling at
temperature > 0, `ScriptedPolicy`, `MixedPolicy`'s routing) draws from the same distributions but not
the same samples; each call gets its own seed (a hash of the run's seed and the call's index), and
which requests share a call depends on evaluation timing, so such runs are not bit-reproducible.
A conversation is released (`release_conversations`) once it takes no further turn, turn-T rows
included (the sequential rollout releases those at the end), and every one again at the end
(once: a deferred rollout releases them all at its yield, and `finish` then does not).

Preemption (`preempt` > 0, `rollout.preempt`, opt-in). A generate call otherwise lasts as long as
its longest row: a few long rows hold back the rows that stopped early (their evaluations, and the
next turns those decide). With preemption the policy ends a call once at most that fraction of its
rows still generate (`SamplerPolicy.generate(preempt=)`); the unfinished rows come back
`preempted`, are not evaluated, and go to the front of the ready queue as continuations
(`continue_request`: the tokens so far as the request's prefix, the rest of the budget), to share
the next call with newly ready turns. A continuation samples from the same conditional
distribution, so a row's response is distributed as if it had not been interrupted; with greedy
decoding it is the same response up to rounding (tests/leap_jax/test_preemption.py). Each row is
evaluated once, when its response is whole.

Deferred collection (`defer=True`, `MultiTurnRollout.start`; `rollout.update_lag`). Once nothing
is left to generate and every evaluation still running is of a turn-T response (no result can start
another turn), the loop yields instead of waiting: the caller may generate the next step meanwhile,
and resumes the loop (`MultiTurnRollout.finish`) to collect those results. What is collected is
what the loop without the yield collects; every conversation is released at the yield (none can
take a further turn).
"""
from __future__ import annotations

import concurrent.futures as cf
import hashlib
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Protocol

import numpy as np

from kernels_env import Result
from leap_jax.rollout.policy import GenRequest, GenResponse, Policy, continue_request
from leap_jax.rollout.run_state import RunState

_InFlight = tuple[int, int, GenRequest, GenResponse, cf.Future]  # row, turn, request, response, evaluation


class TurnSteps(Protocol):
    """The per-row steps and settings of the rollout that runs this loop (`MultiTurnRollout`): the
    sequential loop uses the same steps, so both rollouts record, decide and continue rows alike."""
    G: int
    T: int
    chunks: int
    preempt: float

    def _request(self, st: RunState, r: int, t: int) -> GenRequest: ...

    def _record(self, st: RunState, r: int, t: int, resp: GenResponse, res: Result) -> None: ...

    def _continues(self, st: RunState, r: int, t: int) -> bool: ...

    def _decide(self, correct_t1: np.ndarray, row_mask: np.ndarray) -> np.ndarray: ...

    def _submit(self, task: str, text: str) -> cf.Future: ...

    def _collect(self, fut: cf.Future, task: str) -> Result: ...


def call_seed(seed: int, call: int) -> int:
    """The seed of the run's `call`-th generate call: a hash of both, so calls draw apart."""
    h = hashlib.sha256(repr(("pipelined", seed, call)).encode()).digest()
    return int.from_bytes(h[:4], "big") % 2 ** 31


def run_pipelined(ro: TurnSteps, st: RunState, active: list[int], policy: Policy, seed: int,
                  release: Callable[[list], None] | None, defer: bool = False) -> Iterator[None]:
    """Fill `st` for the rows `active` on turn 1 (the module docstring says how) as the generator is
    run to its end; with `defer`, it yields once when only turn-T evaluations are left to collect."""
    G, T, times = ro.G, ro.T, st.times
    if not active:
        return
    chunk = -(-len(active) // ro.chunks)
    ready: deque[tuple[int, int]] = deque((r, 1) for r in active)  # (row, turn)
    waiting: dict[int, list[int]] = {}  # group -> its active rows whose turn-1 result is not in
    for r in active:
        waiting.setdefault(r // G, []).append(r)
    for g in range(len(st.decisions)):  # groups with no row to generate are decided as they are
        if g not in waiting:
            st.decisions[g] = ro._decide(st.correct[g:g + 1, :, 0], st.row_mask[g:g + 1])[0]
    turn1_rows = {g: list(rs) for g, rs in waiting.items()}
    continuing: dict[tuple[int, int], GenRequest] = {}  # (row, turn) -> its preempted response's continuation
    pending: list[_InFlight] = []
    calls = 0
    t_eval_start = None
    while ready or pending:
        if defer and not ready and all(p[1] == T for p in pending):
            defer = False
            if release is not None:
                release([(st.run_id, r) for r in range(len(st.rows))])
                st.released_all = True
            yield  # the caller generates meanwhile; it resumes the loop to collect the rest
        if ready:
            batch = [ready.popleft() for _ in range(min(chunk, len(ready)))]
            requests = [continuing.pop(b) if b in continuing else ro._request(st, *b) for b in batch]
            t0 = time.perf_counter()
            if ro.preempt:
                out = policy.generate(requests, call_seed(seed, calls), preempt=ro.preempt)
            else:  # policies without preemption need not take the argument
                out = policy.generate(requests, call_seed(seed, calls))
            times["generate"] += time.perf_counter() - t0
            calls += 1
            if len(out) != len(requests):
                raise RuntimeError(f"policy returned {len(out)} responses for {len(requests)} requests")
            t1 = time.perf_counter()
            t_eval_start = t1 if t_eval_start is None else t_eval_start
            cut = [(b, req, resp) for b, req, resp in zip(batch, requests, out, strict=True) if resp.preempted]
            for b, req, resp in reversed(cut):  # first in the queue, in their order
                continuing[b] = continue_request(req, resp)
                ready.appendleft(b)
            st.preempted += len(cut)
            pending += [(r, t, req, resp, ro._submit(req.task, resp.text))
                        for (r, t), req, resp in zip(batch, requests, out, strict=True) if not resp.preempted]
            times["evaluate_submit"] += time.perf_counter() - t1
        else:  # nothing to generate: wait for any evaluation
            t2 = time.perf_counter()
            cf.wait([p[4] for p in pending], return_when=cf.FIRST_COMPLETED)
            times["evaluate_wait"] += time.perf_counter() - t2
        done: list[_InFlight] = []
        still: list[_InFlight] = []
        for p in pending:
            (done if p[4].done() else still).append(p)
        pending = still
        decided: list[tuple[int, int]] = []  # (row, turn) whose next turn is now known
        for r, t, req, resp, fut in done:
            ro._record(st, r, t, resp, ro._collect(fut, req.task))
            if t > 1:
                decided.append((r, t))
                continue
            g = r // G
            waiting[g].remove(r)
            if not waiting[g]:  # the group's turn 1 is complete: DCP decides it
                st.decisions[g] = ro._decide(st.correct[g:g + 1, :, 0], st.row_mask[g:g + 1])[0]
                decided += [(r2, 1) for r2 in turn1_rows[g]]
        t0 = time.perf_counter()
        stopped = []
        for r, t in decided:
            if t < T and ro._continues(st, r, t):
                ready.append((r, t + 1))
            else:
                stopped.append((st.run_id, r))
        if release is not None and stopped and not st.released_all:
            release(stopped)
        times["feedback"] += time.perf_counter() - t0
        if t_eval_start is not None and not pending:
            times["evaluate_span"] = time.perf_counter() - t_eval_start
