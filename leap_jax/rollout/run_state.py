"""One multi-turn rollout's rows and outcome arrays, below both rollout loops.

`MultiTurnRollout` (rollout/multiturn.py) creates a `RunState` per run; its sequential loop and the
pipelined one (rollout/pipelined.py) fill it, so both import this module and neither imports the other.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from kernels_env import Result, Status

# DCP decision codes (leap_jax.rl.dcp)
EASY, DEBUG, HOPELESS, PAD = 0, 1, 2, -1


@dataclass
class TurnRecord:
    """One assistant turn of one row."""
    turn: int  # 1-based
    start: int  # index in the stream of the first response token
    length: int  # number of response tokens (trainable)
    text: str
    result: Result
    scripted: bool
    finished: bool


@dataclass
class Row:
    """One rollout: a conversation token stream plus per-token training annotations."""
    task: str
    group: int
    index: int  # 0..G-1 within the group
    tokens: list[int] = field(default_factory=list)
    trainable: list[bool] = field(default_factory=list)  # the assistant mask of sampled tokens
    logprobs: list[float] = field(default_factory=list)  # sampler log-probs; nan where unknown
    turn_of: list[int] = field(default_factory=list)  # 1..T on trainable tokens, 0 elsewhere
    turns: list[TurnRecord] = field(default_factory=list)
    env_error: bool = False  # some turn's evaluation failed in the environment: excluded from rewards
    context_limited: bool = False  # stopped because its next turn (or first prompt) would not fit max_context_tokens

    def append(self, ids: Sequence[int], trainable: bool, logprobs: np.ndarray | None, turn: int) -> None:
        self.tokens.extend(int(i) for i in ids)
        self.trainable.extend([trainable] * len(ids))
        if logprobs is None:
            self.logprobs.extend([float("nan")] * len(ids))
        else:
            lp = np.asarray(logprobs, dtype=np.float64)
            if lp.shape != (len(ids),):
                raise ValueError(f"logprobs shape {lp.shape} does not match {len(ids)} response tokens")
            self.logprobs.extend(lp.tolist())
        self.turn_of.extend([turn if trainable else 0] * len(ids))

    @property
    def solved_turn(self) -> int | None:
        for tr in self.turns:
            if tr.result.status is Status.CORRECT:
                return tr.turn
        return None


class RunState:
    """One run's rows, [P, G, T] outcome arrays, counters and phase times, filled turn by turn."""

    def __init__(self, P: int, G: int, T: int, step: int):
        self.step = step
        self.run_id = object()  # conversation ids unique to this run: (run_id, row)
        self.rows: list[Row] = []
        self.correct = np.zeros((P, G, T), bool)
        self.attempted = np.zeros((P, G, T), bool)
        self.status_rank = np.full((P, G, T), -1, np.int32)
        self.speedup = np.full((P, G, T), np.nan, np.float32)
        self.row_mask = np.ones((P, G), bool)
        self.decisions = np.full((P,), PAD, np.int32)
        self.gen_rows = [0] * T
        self.gen_tokens = [0] * T
        self.env_evals = self.cache_hits = self.env_errors = self.scripted = 0
        self.env_stage_s: dict[str, float] = {}  # the evaluations' stage seconds (worker time), summed
        self.preempted = 0  # responses a generate call returned unfinished, continued in a later call
        self.released_all = False  # every conversation released (a deferred rollout does so at its yield)
        self.times = {k: 0.0 for k in ("generate", "evaluate_submit", "evaluate_wait", "evaluate_span",
                                       "feedback")}
