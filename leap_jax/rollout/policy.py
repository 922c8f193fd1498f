"""The policy interface of the rollout, and its implementations.

`Policy.generate(requests, seed) -> responses`: one response per request (a prompt token stream);
`Policy.set_params(params)`: the model params the next generations use (the trainer calls it before
each rollout; a policy that reads no params ignores them). A policy may also offer
`release_conversations(ids)`: the rollout calls it for conversations that take no further turn
(`SamplerPolicy` then frees their kept KV caches, sampling.kv_reuse).
- `SamplerPolicy`: the JAX sampler over the current params (the real policy).
- `ScriptedPolicy`: a stand-in that answers with the task's known-good solution or a known-bad
  variant of it (compile error / format error) with set probabilities per task and turn. It goes
  through exactly the same rollout code, so tests can check DCP, compaction and metrics against
  known outcomes, and the smoke run can exercise real evaluation with a random model.
- `MixedPolicy`: replaces a fraction of another policy's responses by scripted ones (smoke only);
  every replaced response is flagged `scripted=True` and counted in metrics.
All randomness is a pure function of (seed, request key), so runs and resumes are reproducible.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Protocol
from collections.abc import Callable, Hashable, Iterable, Sequence

import numpy as np

from kernels_env.tasks import get_task


@dataclass(frozen=True)
class GenRequest:
    """Generate the next assistant turn for one row. `key` identifies it (step, row, turn)."""
    prompt_ids: list[int]
    task: str
    turn: int  # 1-based
    key: tuple[int, ...]
    # the same id on every turn of one conversation (None: none): with sampling.kv_reuse the sampler
    # keeps the conversation's KV cache and a later turn prefills only its new tokens
    conversation: Hashable | None = None


@dataclass
class GenResponse:
    token_ids: list[int]  # response tokens as they enter the stream (ends with an end-of-turn id if finished)
    logprobs: np.ndarray | None  # per token, from the sampler; None when unknown (scripted)
    text: str  # decoded response, what the environment scores
    finished: bool  # ended with an end-of-turn token (else truncated at max_new_tokens)
    scripted: bool = False


class Policy(Protocol):
    def generate(self, requests: Sequence[GenRequest], seed: int) -> list[GenResponse]: ...

    def set_params(self, params: Any) -> None:
        """Generate with `params` (the decoder's parameter pytree) from now on."""
        ...


def _unit(seed: int, *key: Any) -> float:
    """A deterministic uniform in [0, 1) from (seed, key)."""
    h = hashlib.sha256(repr((seed,) + tuple(key)).encode()).digest()
    return int.from_bytes(h[:8], "big") / 2.0 ** 64


# ---- known-bad variants of a known-good submission ---------------------------------------------
def bad_compile(solution: str) -> str:
    """The solution with a preprocessor error in its cuda block: NVRTC must reject it."""
    return re.sub(r"```cuda\n", "```cuda\n#error scripted known-bad submission\n", solution, count=1)


def bad_format(solution: str) -> str:
    """The solution without a launch block: the parser must report a format_error."""
    return re.sub(r"```launch\n.*?```", "(launch plan omitted)", solution, count=1, flags=re.S)


BAD_VARIANTS: dict[str, Callable[[str], str]] = {"compile_error": bad_compile, "format_error": bad_format}


class ScriptedPolicy:
    """Answers with `task.solution` with probability p_good(task, turn), else a known-bad variant."""

    def __init__(self, tokenizer: Any, p_good: float | Callable[[str, int], float] = 0.5,
                 bad_kinds: Sequence[str] = ("compile_error", "format_error"),
                 end_ids: Sequence[int] = ()):
        for k in bad_kinds:
            if k not in BAD_VARIANTS:
                raise ValueError(f"unknown bad kind {k!r}; expected some of {sorted(BAD_VARIANTS)}")
        if not bad_kinds:
            raise ValueError("bad_kinds must name at least one known-bad variant")
        self.tokenizer = tokenizer
        self.p_good = p_good if callable(p_good) else (lambda task, turn, _p=float(p_good): _p)
        self.bad_kinds = tuple(bad_kinds)
        self.end_ids = list(end_ids)

    def text_for(self, request: GenRequest, seed: int) -> str:
        solution = get_task(request.task).solution
        if _unit(seed, "good", request.key) < self.p_good(request.task, request.turn):
            return solution
        kind = self.bad_kinds[int(_unit(seed, "kind", request.key) * len(self.bad_kinds))]
        return BAD_VARIANTS[kind](solution)

    def set_params(self, params: Any) -> None:
        """Scripted answers read no params."""

    def generate(self, requests: Sequence[GenRequest], seed: int) -> list[GenResponse]:
        out = []
        for r in requests:
            text = self.text_for(r, seed)
            ids = list(self.tokenizer.encode(text, allow_special=False)) + self.end_ids
            out.append(GenResponse(ids, None, text, True, scripted=True))
        return out


class MixedPolicy:
    """Route each request to `scripted` with probability `fraction`, else to `base` (smoke runs)."""

    def __init__(self, base: Policy, scripted: ScriptedPolicy, fraction: float):
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"scripted fraction={fraction!r}; expected a probability in [0, 1]")
        self.base, self.scripted, self.fraction = base, scripted, fraction

    def set_params(self, params: Any) -> None:
        self.base.set_params(params)

    def release_conversations(self, conversations: Iterable[Hashable] | None = None) -> None:
        release = getattr(self.base, "release_conversations", None)
        if release is not None:
            release(conversations)

    def generate(self, requests: Sequence[GenRequest], seed: int) -> list[GenResponse]:
        use = [_unit(seed, "mix", r.key) < self.fraction for r in requests]
        out: list[GenResponse | None] = [None] * len(requests)
        sampled_idx = [i for i, u in enumerate(use) if not u]
        if sampled_idx:  # only the non-scripted rows cost generation
            for i, resp in zip(sampled_idx, self.base.generate([requests[i] for i in sampled_idx], seed), strict=False):
                out[i] = resp
        scripted_idx = [i for i, u in enumerate(use) if u]
        if scripted_idx:
            for i, resp in zip(scripted_idx, self.scripted.generate([requests[i] for i in scripted_idx], seed), strict=False):
                out[i] = resp
        return out  # type: ignore[return-value]


class SamplerPolicy:
    """The JAX sampler over `self.params` (given at construction or by `set_params`)."""

    def __init__(self, sampler: Any, tokenizer: Any, sampling: Any, params: Any = None,
                 end_ids: Sequence[int] = ()):
        self.sampler, self.tokenizer, self.sampling, self.params = sampler, tokenizer, sampling, params
        self.end_ids = set(int(i) for i in end_ids)

    def set_params(self, params: Any) -> None:
        self.params = params

    def release_conversations(self, conversations: Iterable[Hashable] | None = None) -> None:
        """Free the sampler's kept caches of these conversations (None: all); see GenRequest."""
        release = getattr(self.sampler, "release_conversations", None)
        if release is not None:
            release(conversations)

    def generate(self, requests: Sequence[GenRequest], seed: int) -> list[GenResponse]:
        import jax
        if not requests:
            return []
        if self.params is None:
            raise RuntimeError("SamplerPolicy has no params; call set_params(params) before generating")
        prompts = [list(r.prompt_ids) for r in requests]
        key = jax.random.key(seed % (2 ** 31))
        if getattr(getattr(self.sampler, "impl", None), "kv_reuse", False):  # sampling.kv_reuse
            out = self.sampler.generate(self.params, prompts, self.sampling, key,
                                        conversations=[r.conversation for r in requests])
        else:
            out = self.sampler.generate(self.params, prompts, self.sampling, key)
        responses = []
        for toks, lps, fin in zip(out.tokens, out.logprobs, out.finished, strict=False):
            toks = [int(t) for t in toks]
            lps = np.asarray(lps, dtype=np.float32)[:len(toks)]
            body = [t for t in toks if t not in self.end_ids]
            text = self.tokenizer.decode(body)
            responses.append(GenResponse(toks, lps, text, bool(fin), scripted=False))
        return responses
