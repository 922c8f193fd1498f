"""Train the byte-level BPE tokenizer of a from-scratch policy (issue 7).

One builder for every place that needs a run-time tokenizer (the trainer's `tokenizer.kind=bpe`, the
bootstrap SFT): byte-level BPE from the `tokenizers` library, so any text round-trips exactly, with
the ChatML special tokens of `leap_jax.models.chat` as atomic added tokens. Training text is cut at
special-token strings before BPE sees it, so no merge ever spans or includes a piece of one; the
result depends only on the texts (the same input gives the same tokenizer.json bytes).

CLI: `python -m leap_jax.bootstrap.tokenizer_train --corpus DIR --vocab 2048 --out DIR/tokenizer.json`
trains on DIR/examples.jsonl (the corpus) plus the prompts of every task of the suite.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any
from collections.abc import Iterable, Iterator, Sequence

from leap_jax.models.chat import END_OF_TEXT, IM_END, IM_START, render_text
from leap_jax.models.tokenizer import Tokenizer

SPECIAL_TOKENS: tuple[str, ...] = (END_OF_TEXT, IM_START, IM_END)
BYTE_ALPHABET = 256
MIN_VOCAB = BYTE_ALPHABET + len(SPECIAL_TOKENS)
_SPECIAL_RE = re.compile("|".join(re.escape(s) for s in SPECIAL_TOKENS))


def _check_vocab(vocab_size: Any) -> int:
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise TypeError(f"vocab_size={vocab_size!r}; expected an int >= {MIN_VOCAB}")
    if vocab_size < MIN_VOCAB:
        raise ValueError(f"vocab_size={vocab_size}: a byte-level BPE needs at least {MIN_VOCAB} ids "
                         f"({BYTE_ALPHABET} bytes + {len(SPECIAL_TOKENS)} special tokens {SPECIAL_TOKENS})")
    return vocab_size


def _plain_pieces(texts: Iterable[str]) -> Iterator[str]:
    """The texts cut at special-token strings (the specials themselves dropped), empty pieces skipped."""
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"training text #{i} is a {type(t).__name__}; expected str")
        for piece in _SPECIAL_RE.split(t):
            if piece:
                yield piece


def load_trained(path: str | Path) -> Tokenizer:
    """A tokenizer.json written by `train_tokenizer`, with its ChatML EOS (`<|im_end|>`) and pad
    (`<|endoftext|>`) set."""
    return Tokenizer.from_file(os.fspath(path), eos_token=IM_END, pad_token=END_OF_TEXT)


def train_tokenizer(texts: Iterable[str], vocab_size: int, out_path: str | Path | None = None) -> Tokenizer:
    """Train a byte-level BPE of at most `vocab_size` ids (the 256 byte symbols, the ChatML special
    tokens, then merges) on `texts`; save it as tokenizer.json at `out_path` when given (atomically,
    parent directories created). Returns the wrapped tokenizer (EOS `<|im_end|>`, pad `<|endoftext|>`)."""
    from tokenizers import Tokenizer as HFTokenizer, decoders, models, pre_tokenizers, trainers
    vocab_size = _check_vocab(vocab_size)
    tk = HFTokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tk.train_from_iterator(_plain_pieces(texts), trainer=trainer)
    if out_path is None:
        return Tokenizer(tk, eos_token=IM_END, pad_token=END_OF_TEXT)
    path = Path(out_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tk.save(str(tmp))
    tmp.replace(path)
    return load_trained(path)


def corpus_texts(examples: Iterable[dict[str, Any]], tasks: Iterable[Any],
                 prompt_sizes: str | Sequence[str] = ("eval", "small")) -> Iterator[str]:
    """The text a policy's tokenizer is trained on: every corpus example rendered through the ChatML
    template, then for every task (a Task or a task name) its first-turn prompt (system + user +
    generation prompt) for each size set, the feedback request, and its known-good solution."""
    from kernels_env.tasks import get_task
    from leap_jax.rollout.prompts import FEEDBACK_SUFFIX, initial_messages
    sizes = (prompt_sizes,) if isinstance(prompt_sizes, str) else tuple(prompt_sizes)
    for s in sizes:
        if s not in ("eval", "small"):
            raise ValueError(f"prompt size set {s!r}; expected 'eval' or 'small'")
    for i, ex in enumerate(examples):
        if not isinstance(ex, dict) or not isinstance(ex.get("messages"), list):
            raise ValueError(f"corpus example #{i} has no 'messages' list (got {type(ex).__name__})")
        yield render_text({"role": m["role"], "content": m["content"]} for m in ex["messages"])
    yield FEEDBACK_SUFFIX
    for t in tasks:
        task = get_task(t) if isinstance(t, str) else t
        for s in sizes:
            yield render_text(initial_messages(task, s), add_generation_prompt=True)
        yield task.solution


def main(argv: Sequence[str] | None = None) -> int:
    from kernels_env.tasks import list_tasks
    from leap_jax.bootstrap.corpus import EXAMPLES_FILE, read_jsonl
    p = argparse.ArgumentParser(prog="python -m leap_jax.bootstrap.tokenizer_train",
                                description="Train the byte-level BPE tokenizer on a bootstrap corpus "
                                            "and the suite's prompts.")
    p.add_argument("--corpus", required=True, help=f"corpus directory (with {EXAMPLES_FILE})")
    p.add_argument("--vocab", type=int, default=2048, help=f"vocabulary size (ids), >= {MIN_VOCAB}")
    p.add_argument("--out", default=None, help="tokenizer.json path (default: CORPUS/tokenizer.json)")
    a = p.parse_args(argv)
    ex_path = Path(a.corpus) / EXAMPLES_FILE
    if not ex_path.is_file():
        p.error(f"--corpus {a.corpus}: no {EXAMPLES_FILE} there (build it with "
                "`python -m leap_jax.bootstrap.corpus --out DIR`)")
    try:
        _check_vocab(a.vocab)
    except ValueError as e:
        p.error(f"--vocab: {e}")
    out = Path(a.out) if a.out else Path(a.corpus) / "tokenizer.json"
    examples = read_jsonl(ex_path)
    tok = train_tokenizer(corpus_texts(examples, list_tasks()), a.vocab, out)
    print(f"wrote {out}: {tok.vocab_size} ids from {len(examples)} examples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
