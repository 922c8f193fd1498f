"""Train the byte-level BPE tokenizer of a from-scratch policy.

One builder for every place that needs a run-time tokenizer (the trainer's `tokenizer.kind=bpe`, the
bootstrap SFT): byte-level BPE from the `tokenizers` library, so any text round-trips exactly, with
the ChatML special tokens of `leap_jax.models.chat` as atomic added tokens. Training text is cut at
special-token strings before BPE sees it, so no merge ever spans or includes a piece of one; the
result depends only on the texts (the same input gives the same tokenizer.json bytes). What text to
train on: `leap_jax.rollout.prompts.prompt_texts` (the prompts a policy sees) and
`leap_jax.bootstrap.tokenizer_train.corpus_texts` (plus a bootstrap corpus).
"""
from __future__ import annotations

import json

import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from leap_jax.models.chat import END_OF_TEXT, IM_END, IM_START
from leap_jax.models.tokenizer import Tokenizer

SPECIAL_TOKENS: tuple[str, ...] = (END_OF_TEXT, IM_START, IM_END)
BYTE_ALPHABET = 256
MIN_VOCAB = BYTE_ALPHABET + len(SPECIAL_TOKENS)
_SPECIAL_RE = re.compile("|".join(re.escape(s) for s in SPECIAL_TOKENS))


def check_vocab(vocab_size: Any) -> int:
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
    vocab_size = check_vocab(vocab_size)
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


RESERVED_TOKEN = "<|reserved_{}|>"


def pad_vocab(tokenizer: Tokenizer, vocab_size: int, out_path: str | Path) -> Tokenizer:
    """`tokenizer` with its BPE vocabulary padded to exactly `vocab_size` ids by `<|reserved_N|>`
    entries, saved as tokenizer.json at `out_path`: a trained BPE for a model whose embedding has
    more rows than the training text yields merges (e.g. a 151,936-row Qwen2 vocabulary). No merge
    produces a reserved entry, so encoding is unchanged; decoding one gives its name."""
    vocab_size = check_vocab(vocab_size)
    have = tokenizer.vocab_size
    if have > vocab_size:
        raise ValueError(f"pad_vocab: the tokenizer already has {have} ids, more than vocab_size={vocab_size}")
    spec = json.loads(tokenizer.hf.to_str())
    vocab = spec["model"]["vocab"]
    if len(vocab) != have or sorted(vocab.values()) != list(range(have)):
        raise ValueError(f"pad_vocab: expected a BPE vocabulary of ids 0..{have - 1} (one from "
                         f"train_tokenizer); got {len(vocab)} entries")
    for i in range(have, vocab_size):
        vocab[RESERVED_TOKEN.format(i - have)] = i
    path = Path(out_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(spec, ensure_ascii=False))
    tmp.replace(path)
    return load_trained(path)
