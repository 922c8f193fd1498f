"""The policy interface of the rollout, and its implementations.

`Policy.generate(requests, seed) -> responses`: one response per request (a prompt token stream);
a policy may also take `preempt` (`SamplerPolicy`: end a batch's decode early, returning its last
rows `preempted`; the pipelined rollout asks again with the tokens so far as the request's prefix);
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

import dataclasses
import hashlib
import re
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import jax
import numpy as np

from kernels_env import get_task


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
    # a preempted response's tokens and log-probs so far: the response continues after them, within
    # what is left of the new-token budget, and comes back whole (prefix included)
    prefix_ids: tuple[int, ...] = ()
    prefix_logprobs: tuple[float, ...] = ()


@dataclass
class GenResponse:
    token_ids: list[int]  # response tokens as they enter the stream (ends with an end-of-turn id if finished)
    logprobs: np.ndarray | None  # per token, from the sampler; None when unknown (scripted)
    text: str  # decoded response, what the environment scores
    finished: bool  # ended with an end-of-turn token (else truncated at max_new_tokens or preempted)
    scripted: bool = False
    # neither finished nor at its budget: the call ended before this row did (`preempt`); continue it
    # with a request whose prefix is this response (`continue_request`)
    preempted: bool = False


def continue_request(request: GenRequest, response: GenResponse) -> GenRequest:
    """The request that continues a preempted `response` to `request` (its tokens become the prefix)."""
    if not response.preempted:
        raise ValueError(f"continue_request: the response to {request.key} was not preempted")
    lps = () if response.logprobs is None else tuple(float(x) for x in response.logprobs)
    return dataclasses.replace(request, prefix_ids=tuple(int(t) for t in response.token_ids),
                               prefix_logprobs=lps)


class Policy(Protocol):
    def generate(self, requests: Sequence[GenRequest], seed: int, preempt: float = 0.0) -> list[GenResponse]:
        """One response per request; `preempt` > 0 allows `preempted` responses (a policy may ignore it)."""
        ...

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

    def generate(self, requests: Sequence[GenRequest], seed: int, preempt: float = 0.0) -> list[GenResponse]:
        """Scripted answers are whole at once: never preempted (nor continued)."""
        out = []
        for r in requests:
            if r.prefix_ids:
                raise ValueError(f"ScriptedPolicy cannot continue a preempted response ({r.key})")
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

    def generate(self, requests: Sequence[GenRequest], seed: int, preempt: float = 0.0) -> list[GenResponse]:
        # a continued (preempted) response stays with the base policy that began it
        use = [not r.prefix_ids and _unit(seed, "mix", r.key) < self.fraction for r in requests]
        out: list[GenResponse | None] = [None] * len(requests)
        sampled_idx = [i for i, u in enumerate(use) if not u]
        if sampled_idx:  # only the non-scripted rows cost generation
            base = [requests[i] for i in sampled_idx]
            got = self.base.generate(base, seed, preempt=preempt) if preempt else self.base.generate(base, seed)
            for i, resp in zip(sampled_idx, got, strict=False):
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

    def generate(self, requests: Sequence[GenRequest], seed: int, preempt: float = 0.0) -> list[GenResponse]:
        """Sample one response per request. preempt (0 = off): a batch's decode ends once at most
        that fraction of its rows still generate; those come back `preempted` (Sampler.generate).
        A request with a prefix continues it: prompt + prefix, the rest of the budget; its response
        is whole (prefix tokens and log-probs first)."""
        if not requests:
            return []
        if self.params is None:
            raise RuntimeError("SamplerPolicy has no params; call set_params(params) before generating")
        max_new = self.sampler.call_budget(self.sampling)
        for r in requests:
            if len(r.prefix_ids) >= max_new or len(r.prefix_logprobs) != len(r.prefix_ids):
                raise ValueError(f"request {r.key}: a prefix of {len(r.prefix_ids)} tokens and "
                                 f"{len(r.prefix_logprobs)} log-probs; expected as many of each, "
                                 f"fewer than max_new_tokens={max_new}")
        prompts = [list(r.prompt_ids) + list(r.prefix_ids) for r in requests]
        budgets = [max_new - len(r.prefix_ids) for r in requests]
        extra: dict[str, Any] = {"budgets": budgets, "preempt": preempt}
        key = jax.random.key(seed % (2 ** 31))
        if getattr(getattr(self.sampler, "impl", None), "kv_reuse", False):  # sampling.kv_reuse
            extra["conversations"] = [r.conversation for r in requests]
        out = self.sampler.generate(self.params, prompts, self.sampling, key, **extra)
        responses = []
        for r, budget, toks, lps, fin in zip(requests, budgets, out.tokens, out.logprobs, out.finished,
                                             strict=False):
            new = [int(t) for t in toks]
            preempted = not fin and len(new) < budget
            toks = list(r.prefix_ids) + new
            lps = np.concatenate([np.asarray(r.prefix_logprobs, np.float32),
                                  np.asarray(lps, dtype=np.float32)[:len(new)]])
            body = [t for t in toks if t not in self.end_ids]
            text = self.tokenizer.decode(body)
            responses.append(GenResponse(toks, lps, text, bool(fin), scripted=False, preempted=preempted))
        return responses
