"""ChatML conversations (as Qwen uses) rendered to token ids with an assistant-token mask.

Each message renders to `<|im_start|>{role}\\n{content}<|im_end|>\\n`; the generation prompt is
`<|im_start|>assistant\\n`. The mask marks what the policy is trained on: an assistant message's
content tokens AND its closing `<|im_end|>`; role headers, the newline after `<|im_end|>`, system,
user and feedback turns are 0. A conversation's ids are exactly the concatenation of its messages'
ids (`render_turn`), so the multi-turn rollout can grow a conversation by appending pieces:

    ids, mask = render_chat(tok, [system, user], add_generation_prompt=True)
    response = <sampled ids>                       # all trainable
    more, more_mask = close_assistant_turn(tok, response)
    fb, fb_mask = render_turn(tok, Message("user", feedback))
    ids += more + fb + generation_prompt(tok); ...

Tokenization is per piece (header | content | <|im_end|> | "\\n"), matching how a sampler sees an
assistant turn (content generated after a separately tokenized header). Message content is encoded
with special-token strings treated as plain text, so text in a feedback turn cannot inject
control tokens. It equals tokenizing the rendered string in one go, except where content begins
with characters that byte-level BPE would merge with the header's newline (e.g. a leading "\\n").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Iterable, Mapping, Sequence

from leap_jax.models.tokenizer import Tokenizer

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"
ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class Message:
    """One chat turn. role: one of ROLES; content: the text."""
    role: str
    content: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"Message role {self.role!r}; expected one of {ROLES}")
        if not isinstance(self.content, str):
            raise TypeError(f"Message content must be a str, got {type(self.content).__name__} "
                            f"(role {self.role!r})")


def as_message(m: Message | Mapping[str, Any] | Sequence[str]) -> Message:
    """Accept a Message, a {"role", "content"} dict, or a (role, content) pair."""
    if isinstance(m, Message):
        return m
    if isinstance(m, Mapping):
        if "role" not in m or "content" not in m:
            raise ValueError(f"chat message dict {dict(m)!r} needs 'role' and 'content' keys")
        return Message(m["role"], m["content"])
    if isinstance(m, (tuple, list)) and len(m) == 2:
        return Message(m[0], m[1])
    raise TypeError(f"chat message {m!r}; expected a Message, a dict with role/content, or a "
                    "(role, content) pair")


def render_text(messages: Iterable[Any], add_generation_prompt: bool = False) -> str:
    """The ChatML string of a conversation (what a HF ChatML chat template renders)."""
    out = [f"{IM_START}{m.role}\n{m.content}{IM_END}\n" for m in map(as_message, messages)]
    if add_generation_prompt:
        out.append(f"{IM_START}assistant\n")
    return "".join(out)


def _special(tokenizer: Tokenizer, token: str) -> int:
    i = tokenizer.maybe_token_id(token)
    if i is None:
        raise KeyError(f"ChatML needs the special token {token!r}, which the tokenizer lacks "
                       "(is this a ChatML / Qwen tokenizer?)")
    return i


def _header(tokenizer: Tokenizer, role: str) -> list[int]:
    return [_special(tokenizer, IM_START)] + tokenizer.encode(f"{role}\n", allow_special=False)


def generation_prompt(tokenizer: Tokenizer) -> list[int]:
    """Ids of `<|im_start|>assistant\\n`, after which the policy generates (all mask 0)."""
    return _header(tokenizer, "assistant")


def _turn_end(tokenizer: Tokenizer) -> tuple[int, list[int]]:
    return _special(tokenizer, IM_END), tokenizer.encode("\n", allow_special=False)


def render_turn(tokenizer: Tokenizer, message: Any) -> tuple[list[int], list[bool]]:
    """Ids and assistant mask of one message, header to trailing newline."""
    m = as_message(message)
    header = _header(tokenizer, m.role)
    body = tokenizer.encode(m.content, allow_special=False)
    end, nl = _turn_end(tokenizer)
    trainable = m.role == "assistant"
    ids = header + body + [end] + nl
    mask = [False] * len(header) + [trainable] * (len(body) + 1) + [False] * len(nl)
    return ids, mask


def render_chat(tokenizer: Tokenizer, messages: Iterable[Any],
                add_generation_prompt: bool = False) -> tuple[list[int], list[bool]]:
    """A whole conversation: the concatenation of `render_turn` of each message, plus the
    generation prompt when asked (mask 0). Returns (ids, assistant_mask) of equal length."""
    ids: list[int] = []
    mask: list[bool] = []
    for m in messages:
        i, k = render_turn(tokenizer, m)
        ids += i
        mask += k
    if add_generation_prompt:
        g = generation_prompt(tokenizer)
        ids += g
        mask += [False] * len(g)
    return ids, mask


def close_assistant_turn(tokenizer: Tokenizer, response_ids: Sequence[int]) -> tuple[list[int], list[bool]]:
    """Finish a sampled assistant turn so the next message can follow it.

    The sampled tokens are all trainable (mask 1), including a final `<|im_end|>` the model emitted.
    If the model stopped otherwise (another EOS, or the length limit), `<|im_end|>` is appended with
    mask 0: the policy never sampled it, so it has no old logprob to train against. Then the "\\n"
    (mask 0). With a response that ends in `<|im_end|>`, the result equals `render_turn` of the
    decoded assistant message minus its header.
    """
    resp = [int(t) for t in response_ids]
    end, nl = _turn_end(tokenizer)
    ids = list(resp)
    mask = [True] * len(resp)
    if not resp or resp[-1] != end:
        ids.append(end)
        mask.append(False)
    ids += nl
    mask += [False] * len(nl)
    return ids, mask


def stop_token_ids(tokenizer: Tokenizer, model_eos: Iterable[int] = ()) -> tuple[int, ...]:
    """Ids that end an assistant turn: `<|im_end|>` and `<|endoftext|>` where the vocabulary has
    them, the tokenizer's EOS ids and the model's (config.eos_token_ids), in that order, unique."""
    out: list[int] = []
    for t in (tokenizer.maybe_token_id(IM_END), tokenizer.maybe_token_id(END_OF_TEXT),
              *tokenizer.eos_ids, *model_eos):
        if t is not None and int(t) not in out:
            out.append(int(t))
    return tuple(out)
