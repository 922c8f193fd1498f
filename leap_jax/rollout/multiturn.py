"""The DCP-driven multi-turn rollout (DESIGN 4.3, 4.4).

For P prompts x G rows: turn 1 generates and scores every row; DCP then classifies each group
(easy / debug / hopeless) and only the failed rows of debugged groups continue, each with
`context + response + feedback`, until correct or T turns. Every turn generates only the active rows
(compaction: pruned rows cost nothing). Each row keeps one conversation token stream; the sampled
response tokens are trainable (mask 1, with the sampler's log-probs), prompt and feedback tokens
are not. `env_error` results exclude their row from rewards and are counted in the stats.

Generation and evaluation overlap: the active rows of a turn are generated in chunks and each
chunk's jobs are submitted to the pool before the next chunk generates. Phase times are measured.
With `pipeline_turns` (opt-in, leap_jax/rollout/pipelined.py) turns overlap too: a row's next turn
is generated as soon as its group's DCP decision (turn 1) or its own result (later turns) is in,
alongside other rows' earlier turns, instead of after the whole turn; same outputs for a policy
whose answer depends on the request only (see that module for the exact guarantee).

`start` and `finish` split `run` for a caller that generates the next step while this one's last
evaluations run (`rollout.update_lag`): with pipeline_turns, `start` returns once nothing is left to
generate and only turn-T evaluations are outstanding, `finish` collects them; the output is `run`'s.

Each row's requests carry one conversation id for the run (`GenRequest.conversation`); a policy
with `release_conversations` (the sampler with sampling.kv_reuse, which keeps a conversation's KV
cache between turns) is told when a row takes no further turn, and at the end of the run.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernels_env import EnvConfig, Job, Result, Status, get_task, render_feedback
from leap_jax.models import chat
from leap_jax.models.chat import Message
from leap_jax.rl.dcp import decide_on_host
from leap_jax.rl.options import DEFAULT_T_MAX, DEFAULT_T_MIN
from leap_jax.rollout.pipelined import run_pipelined
from leap_jax.rollout.policy import GenRequest, GenResponse, Policy
from leap_jax.rollout.prompts import feedback_message, initial_messages
from leap_jax.rollout.run_state import DEBUG, EASY, HOPELESS, PAD, Row, RunState, TurnRecord
from leap_jax.sampling.params import check_preempt


@dataclass
class RolloutOutput:
    """Everything the update and the metrics need from one step's rollouts."""
    tasks: list[str]  # [P]
    rows: list[Row]  # [P * G], row r is group r // G, index r % G
    group_size: int
    max_turns: int
    decisions: np.ndarray  # int32 [P]
    correct: np.ndarray  # bool [P, G, T]
    attempted: np.ndarray  # bool [P, G, T]
    status_rank: np.ndarray  # int32 [P, G, T] (-1 where not attempted or env_error)
    speedup: np.ndarray  # float32 [P, G, T] (nan where unknown)
    row_mask: np.ndarray  # bool [P, G]: False for env_error rows
    stats: dict[str, float]


@dataclass
class StartedRollout:
    """A rollout whose generation is done; its last evaluations may still run (`MultiTurnRollout.start`).
    `start_times` are its phase seconds up to `start`'s return; `finish` collects the rest."""
    tasks: list[str]
    state: RunState
    release: Callable[[list], None] | None
    rest: Iterator[None] | None  # the pipelined loop, resumed by `finish`; None when nothing is left
    start_times: dict[str, float]


class ChatStreams:
    """Token-level ChatML conversations grown piece by piece (leap_jax.models.chat).

    A conversation's ids are the concatenation of its pieces, so a row's stream is: the rendered
    first prompt, then per turn the sampled response (trainable), the closing `<|im_end|>` if the
    model did not emit it and the newline (not trainable), and for a further turn the feedback user
    message and the next assistant header (not trainable).
    """

    def __init__(self, tokenizer: Any):
        self._chat = chat
        self.tokenizer = tokenizer
        self.end_ids = list(chat.stop_token_ids(tokenizer))
        if not self.end_ids:
            raise ValueError("the tokenizer has no end-of-turn token (<|im_end|> or an EOS id)")
        self.im_end = tokenizer.token_id(chat.IM_END)

    def initial(self, messages: list[Message]) -> list[int]:
        return self._chat.render_chat(self.tokenizer, messages, add_generation_prompt=True)[0]

    def close(self, response_ids: Sequence[int]) -> list[int]:
        """The untrainable tokens that close a sampled assistant turn."""
        ids, _ = self._chat.close_assistant_turn(self.tokenizer, response_ids)
        return ids[len(response_ids):]

    def feedback_delta(self, feedback: Message) -> list[int]:
        """The feedback user turn plus the next assistant header."""
        return (self._chat.render_turn(self.tokenizer, feedback)[0]
                + self._chat.generation_prompt(self.tokenizer))


class MultiTurnRollout:
    """Runs one step's rollouts; see the module docstring."""

    def __init__(self, streams: ChatStreams, evaluator: Any, env_config: EnvConfig, *,
                 group_size: int, max_turns: int, dcp_mode: str = "dcp", t_min: Any = DEFAULT_T_MIN,
                 t_max: Any = DEFAULT_T_MAX, feedback_budget_chars: int = 800, max_new_tokens: int = 256,
                 max_context_tokens: int = 4096, overlap_chunks: int = 1,
                 feedback_fn: Callable[[Result, int], str] | None = None, sizes: str = "eval",
                 pipeline_turns: bool = False, preempt: float = 0.0):
        if dcp_mode not in ("dcp", "all"):
            raise ValueError(f"dcp_mode={dcp_mode!r}; expected 'dcp' (LEAP pruning) or 'all' (debug every group)")
        if group_size < 1 or max_turns < 1:
            raise ValueError(f"group_size={group_size}, max_turns={max_turns}; expected both >= 1")
        self.streams, self.evaluator, self.env_config = streams, evaluator, env_config
        self.G, self.T = group_size, max_turns
        self.dcp_mode, self.t_min, self.t_max = dcp_mode, t_min, t_max
        self.feedback_budget = feedback_budget_chars
        self.max_new_tokens, self.max_context = max_new_tokens, max_context_tokens
        self.chunks = max(1, overlap_chunks)
        self.pipeline_turns = pipeline_turns
        self.preempt = check_preempt(preempt)  # pipelined only: end a generate call early (rollout/pipelined.py)
        if self.preempt and not pipeline_turns:
            raise ValueError(f"preempt={preempt!r} continues cut rows in later generate calls; it needs "
                             f"pipeline_turns=True (got {pipeline_turns})")
        self.sizes = sizes
        if feedback_fn is None:
            feedback_fn = lambda result, budget: render_feedback(result, budget)  # noqa: E731
        self.feedback_fn = feedback_fn
        self._prompt_cache: dict[str, list[int]] = {}

    # ---- evaluation -----------------------------------------------------------------------------
    def _submit(self, task: str, text: str) -> Future:
        job = Job(task=task, text=text, config=self.env_config)
        submit = getattr(self.evaluator, "submit", None)
        if submit is not None:
            return submit(job)
        fut: Future = Future()
        try:
            fut.set_result(self.evaluator.map([job])[0])
        except Exception as e:  # the environment failed, not the policy
            fut.set_result(Result.env_error(f"evaluation failed: {type(e).__name__}: {e}", task=task))
        return fut

    @staticmethod
    def _collect(fut: Future, task: str) -> Result:
        try:
            res = fut.result()
        except Exception as e:
            return Result.env_error(f"evaluation failed: {type(e).__name__}: {e}", task=task)
        if not isinstance(res, Result):
            return Result.env_error(f"evaluator returned {type(res).__name__}, expected Result", task=task)
        return res

    def _generate_and_score(self, policy: Policy, requests: list[GenRequest], seed: int,
                            times: dict[str, float]) -> tuple[list[GenResponse], list[Result]]:
        """Generate in chunks; submit each chunk's evaluations before generating the next."""
        n = len(requests)
        bounds = np.linspace(0, n, min(self.chunks, n) + 1).astype(int) if n else np.array([0])
        responses: list[GenResponse] = []
        futures: list[Future] = []
        t_eval_start = None
        for c in range(len(bounds) - 1):
            chunk = requests[bounds[c]:bounds[c + 1]]
            t0 = time.perf_counter()
            out = policy.generate(chunk, seed * 1000 + c)
            times["generate"] += time.perf_counter() - t0
            if len(out) != len(chunk):
                raise RuntimeError(f"policy returned {len(out)} responses for {len(chunk)} requests")
            responses.extend(out)
            t1 = time.perf_counter()
            t_eval_start = t1 if t_eval_start is None else t_eval_start
            futures.extend(self._submit(r.task, resp.text) for r, resp in zip(chunk, out, strict=False))
            times["evaluate_submit"] += time.perf_counter() - t1
        t2 = time.perf_counter()
        results = [self._collect(f, r.task) for f, r in zip(futures, requests, strict=False)]
        times["evaluate_wait"] += time.perf_counter() - t2
        if t_eval_start is not None:
            times["evaluate_span"] += time.perf_counter() - t_eval_start
        return responses, results

    # ---- the rollout ----------------------------------------------------------------------------
    def _prompt_ids(self, task: str) -> list[int]:
        if task not in self._prompt_cache:
            self._prompt_cache[task] = self.streams.initial(initial_messages(get_task(task), self.sizes))
        return self._prompt_cache[task]

    def _decide(self, correct_t1: np.ndarray, row_mask: np.ndarray) -> np.ndarray:
        if self.dcp_mode == "all":
            return np.where(row_mask.any(axis=1), DEBUG, PAD).astype(np.int32)
        return decide_on_host(correct_t1, self.t_min, self.t_max, row_mask)

    def _request(self, st: RunState, r: int, t: int) -> GenRequest:
        """Row r's turn-t request (the key and conversation id identify it in both rollouts)."""
        return GenRequest(list(st.rows[r].tokens), st.rows[r].task, t, (st.step, r, t), (st.run_id, r))

    def _record(self, st: RunState, r: int, t: int, resp: GenResponse, res: Result) -> None:
        """Append row r's turn-t response to its stream and its result to the arrays and counters."""
        row, g, i = st.rows[r], r // self.G, r % self.G
        ids = list(resp.token_ids)
        lp = None if resp.logprobs is None else np.asarray(resp.logprobs)[:len(ids)]
        start = len(row.tokens)
        row.append(ids, True, lp, t)
        row.append(self.streams.close(ids), False, None, 0)
        row.turns.append(TurnRecord(t, start, len(ids), resp.text, res, resp.scripted, resp.finished))
        st.gen_rows[t - 1] += 1
        st.gen_tokens[t - 1] += 0 if resp.scripted else len(ids)
        st.scripted += int(resp.scripted)
        st.env_evals += 1
        st.cache_hits += int(bool(res.cached))
        for stage, sec in res.stage_seconds.items():
            st.env_stage_s[stage] = st.env_stage_s.get(stage, 0.0) + float(sec)
        st.attempted[g, i, t - 1] = True
        if res.status is Status.ENV_ERROR:
            st.env_errors += 1
            row.env_error = True
            st.row_mask[g, i] = False
            return
        st.status_rank[g, i, t - 1] = res.status.rank
        st.correct[g, i, t - 1] = res.status is Status.CORRECT
        if res.speedup is not None:
            st.speedup[g, i, t - 1] = res.speedup

    def _continues(self, st: RunState, r: int, t: int) -> bool:
        """Whether row r (its group decided, its turn t < T recorded) takes turn t + 1; if so its
        feedback and the next assistant header are appended, if it would not fit it is context_limited."""
        row, g, i = st.rows[r], r // self.G, r % self.G
        if st.decisions[g] != DEBUG or not st.row_mask[g, i] or st.correct[g, i, t - 1]:
            return False
        delta = self.streams.feedback_delta(
            feedback_message(self.feedback_fn(row.turns[-1].result, self.feedback_budget)))
        if len(row.tokens) + len(delta) + self.max_new_tokens > self.max_context:
            row.context_limited = True
            return False
        row.append(delta, False, None, 0)
        return True

    def run(self, tasks: Sequence[str], policy: Policy, seed: int, step: int = 0) -> RolloutOutput:
        """Roll out G rows for each task in `tasks`; `seed` and `step` make it reproducible."""
        return self.finish(self._begin(tasks, policy, seed, step, defer=False))

    def start(self, tasks: Sequence[str], policy: Policy, seed: int, step: int = 0) -> StartedRollout:
        """`run` up to the point where nothing is left to generate: with pipeline_turns, the turn-T
        evaluations may still run (the policy is not called again); `finish` gives `run`'s output."""
        return self._begin(tasks, policy, seed, step, defer=True)

    def _begin(self, tasks: Sequence[str], policy: Policy, seed: int, step: int, defer: bool) -> StartedRollout:
        P, G, T = len(tasks), self.G, self.T
        t_start = time.perf_counter()
        st = RunState(P, G, T, step)
        st.rows = [Row(task=tasks[r // G], group=r // G, index=r % G) for r in range(P * G)]
        for row in st.rows:
            row.append(self._prompt_ids(row.task), False, None, 0)
        for row in st.rows:  # a task whose first prompt leaves no room for a response is not attempted
            row.context_limited = len(row.tokens) + self.max_new_tokens > self.max_context
        active = [r for r in range(P * G) if not st.rows[r].context_limited]
        release = getattr(policy, "release_conversations", None)
        rest: Iterator[None] | None = None
        if self.pipeline_turns:
            rest = run_pipelined(self, st, active, policy, seed, release, defer=defer)
            if next(rest, StopIteration) is StopIteration:
                rest = None
        else:
            self._run_sequential(st, active, policy, seed, release)
        st.times["rollout_total"] = time.perf_counter() - t_start
        return StartedRollout(list(tasks), st, release, rest, dict(st.times))

    def finish(self, started: StartedRollout) -> RolloutOutput:
        """Collect a started rollout's outstanding evaluations (waiting for them); its RolloutOutput."""
        t0 = time.perf_counter()
        st, G, T = started.state, self.G, self.T
        if started.rest is not None:
            for _ in started.rest:
                pass
            started.rest = None
        if started.release is not None and not st.released_all:
            started.release([(st.run_id, r) for r in range(len(st.rows))])
            st.released_all = True
        st.times["rollout_total"] += time.perf_counter() - t0
        stats = self._stats(st)
        return RolloutOutput(list(started.tasks), st.rows, G, T, st.decisions, st.correct, st.attempted,
                             st.status_rank, st.speedup, st.row_mask, stats)

    def _run_sequential(self, st: RunState, active: list[int], policy: Policy, seed: int,
                        release: Callable[[list], None] | None) -> None:
        """Turn by turn: all of turn t's evaluations are in before DCP decides and turn t + 1 starts."""
        for t in range(1, self.T + 1):
            if not active:
                break
            requests = [self._request(st, r, t) for r in active]
            responses, results = self._generate_and_score(policy, requests, seed + 7919 * t, st.times)
            for r, resp, res in zip(active, responses, results, strict=False):
                self._record(st, r, t, resp, res)
            if t == 1:
                st.decisions = self._decide(st.correct[:, :, 0], st.row_mask)
            if t == self.T:
                break
            t0 = time.perf_counter()
            nxt = [r for r in active if self._continues(st, r, t)]
            if release is not None:  # rows that take no further turn
                going = set(nxt)
                release([(st.run_id, r) for r in active if r not in going])
            st.times["feedback"] += time.perf_counter() - t0
            active = nxt

    def _stats(self, st: RunState) -> dict[str, float]:
        rows, decisions, correct, row_mask = st.rows, st.decisions, st.correct, st.row_mask
        gen_rows, gen_tokens, env_evals = st.gen_rows, st.gen_tokens, st.env_evals
        P, G, T = correct.shape
        live = decisions != PAD
        failed_t1 = (~correct[:, :, 0]) & row_mask & live[:, None]
        debug_rows = failed_t1 & (decisions == DEBUG)[:, None]
        n_failed_t1 = int(failed_t1.sum())
        s: dict[str, float] = {
            "rollout/groups": float(live.sum()),
            "rollout/rows": float(P * G),
            "dcp/activated_groups_frac": float((decisions == DEBUG).sum() / max(int(live.sum()), 1)),
            "dcp/easy_groups": float((decisions == EASY).sum()),
            "dcp/debug_groups": float((decisions == DEBUG).sum()),
            "dcp/hopeless_groups": float((decisions == HOPELESS).sum()),
            # of the rows that failed turn 1 (each a candidate for turn 2), the share DCP pruned
            "dcp/skipped_turn2_frac": (float((n_failed_t1 - int(debug_rows.sum())) / n_failed_t1)
                                       if n_failed_t1 else 0.0),
            "env/evaluations": float(env_evals),
            "env/cache_hits": float(st.cache_hits),
            "env/env_errors": float(st.env_errors),
            "rollout/scripted_frac": float(st.scripted / max(env_evals, 1)),
            "rollout/context_limited": float(sum(r.context_limited for r in rows)),
            "rollout/preempted_responses": float(st.preempted),
            "tokens/generated": float(sum(gen_tokens)),
        }
        for t in range(T):
            s[f"rollout/gen_rows_turn{t + 1}"] = float(gen_rows[t])
            s[f"tokens/generated_turn{t + 1}"] = float(gen_tokens[t])
        # generation skipped relative to debugging every failed row for all T-1 later turns
        if T > 1:
            full = n_failed_t1 * (T - 1)
            s["dcp/skipped_later_row_turns_frac"] = (
                float(max(full - sum(gen_rows[1:]), 0) / full) if full else 0.0)
        for k, v in st.times.items():
            s[f"time/{k}"] = float(v)
        for stage, sec in st.env_stage_s.items():  # e.g. env/stage_s/compile: where the evaluations' time went
            s[f"env/stage_s/{stage}"] = sec
        return s


def select_groups(out: RolloutOutput, groups: Sequence[int]) -> RolloutOutput:
    """The groups `groups` (indices into out.tasks) of a rollout as a rollout of their own, for
    per-split metrics of one rollout over several task splits; stats stay those of the whole rollout."""
    idx = np.asarray(groups, dtype=np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= len(out.tasks)):
        raise IndexError(f"groups {list(groups)} out of range for a rollout of {len(out.tasks)} groups")
    G = out.group_size
    return RolloutOutput(
        tasks=[out.tasks[i] for i in idx], rows=[out.rows[i * G + g] for i in idx for g in range(G)],
        group_size=G, max_turns=out.max_turns, decisions=out.decisions[idx], correct=out.correct[idx],
        attempted=out.attempted[idx], status_rank=out.status_rank[idx], speedup=out.speedup[idx],
        row_mask=out.row_mask[idx], stats=dict(out.stats))


def solved_turns_by_task(out: RolloutOutput, tasks: Sequence[str]) -> dict[str, list[int | None]]:
    """{task: the turn each of its rows first solved it on (None: never)}, for an evaluation's record."""
    return {t: [r.solved_turn for r in out.rows if r.task == t] for t in tasks}


def outcome_metrics(out: RolloutOutput, fast_thresholds: Sequence[float] = (1.0, 1.2)) -> dict[str, float | None]:
    """Acc@t for every t, fast_p, mean speedup of correct kernels, turns per pass (DESIGN 4.8).

    Over valid rows (env_error rows excluded): Acc@t = share solved on some turn <= t;
    fast_p = share whose first correct kernel has speedup > p (None when no speedup is comparable,
    e.g. the cpu backend); turns per pass = attempted turns / solved rows (None without a solve).
    """
    valid = out.row_mask
    n = int(valid.sum())
    solved_by = np.cumsum(out.correct & out.attempted, axis=-1) > 0  # [P, G, T]
    m: dict[str, float | None] = {}
    for t in range(out.max_turns):
        m[f"acc@{t + 1}"] = float((solved_by[..., t] & valid).sum() / n) if n else None
    solved = solved_by[..., -1] & valid
    first = np.argmax(out.correct & out.attempted, axis=-1)  # first correct turn (0-based)
    sp = np.take_along_axis(out.speedup, first[..., None], axis=-1)[..., 0]
    sp_solved = sp[solved]
    known = sp_solved[np.isfinite(sp_solved)]
    m["speedup/mean_correct"] = float(known.mean()) if known.size else None
    for p in fast_thresholds:
        m[f"fast_{p:g}"] = (float((solved & np.isfinite(sp) & (np.nan_to_num(sp) > p)).sum() / n)
                            if n and known.size else None)
    n_solved = int(solved.sum())
    m["turns_per_pass"] = float((out.attempted & valid[..., None]).sum() / n_solved) if n_solved else None
    m["rollout/solved_rows"] = float(n_solved)
    unscripted_t1 = [r for r in out.rows if r.turns and not r.turns[0].scripted and not r.env_error]
    m["acc_unscripted@1"] = (float(np.mean([r.turns[0].result.status is Status.CORRECT for r in unscripted_t1]))
                             if unscripted_t1 else None)
    return m
