"""SamplingParams: per-call sampling settings. All numeric fields reach the jitted sampler as traced
values, so changing them never recompiles (only the sampler's static buckets do)."""
from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence

import numpy as np


def check_preempt(preempt: object, name: str = "preempt") -> float:
    """`preempt` as a float if it is a fraction in [0, 1) (0 = off), else a ValueError naming `name`.

    The one rule for a preemption fraction (the rollout's `rollout.preempt`, the Sampler's
    `preempt=`): a generate call ends once at most that fraction of its rows still generate."""
    if isinstance(preempt, bool) or not isinstance(preempt, (int, float)) or not 0.0 <= preempt < 1.0:
        raise ValueError(f"{name}={preempt!r}: expected a fraction in [0, 1) (0 = off)")
    return float(preempt)


@dataclass(frozen=True)
class SamplingParams:
    """temperature 0 = greedy; top_k 0 = off; top_p 1 = off.

    max_new_tokens: None = the sampler's maximum (its static cache budget); otherwise at most that.
    stop_token_ids: None = the model config's eos_token_ids; () = never stop early. A row stops
    after emitting any of these ids (the stop token is kept in the output).
    """
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int | None = None
    stop_token_ids: Sequence[int] | None = None

    def __post_init__(self) -> None:
        if not (np.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"SamplingParams.temperature={self.temperature!r}; expected a finite "
                             f"value >= 0 (0 = greedy)")
        if not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"SamplingParams.top_p={self.top_p!r}; expected 0 < top_p <= 1")
        if int(self.top_k) != self.top_k or self.top_k < 0:
            raise ValueError(f"SamplingParams.top_k={self.top_k!r}; expected an int >= 0 (0 = off)")
        if self.max_new_tokens is not None and (int(self.max_new_tokens) != self.max_new_tokens
                                                or self.max_new_tokens < 1):
            raise ValueError(f"SamplingParams.max_new_tokens={self.max_new_tokens!r}; expected a "
                             f"positive int or None")
        if self.stop_token_ids is not None:
            ids = tuple(int(t) for t in self.stop_token_ids)
            if any(t < 0 for t in ids):
                raise ValueError(f"SamplingParams.stop_token_ids={ids!r}; ids must be >= 0")
            object.__setattr__(self, "stop_token_ids", ids)

    def resolved_stop_ids(self, default: Sequence[int]) -> tuple[int, ...]:
        """The stop ids to use, falling back to `default` (the model's EOS ids) when unset."""
        return tuple(default) if self.stop_token_ids is None else tuple(self.stop_token_ids)
