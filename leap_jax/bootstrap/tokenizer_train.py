"""The text a policy's BPE tokenizer is trained on, and the CLI that trains one on a bootstrap corpus.

The tokenizer builder itself is `leap_jax.models.bpe` (shared with the trainer's `tokenizer.kind=bpe`).

CLI: `python -m leap_jax.bootstrap.tokenizer_train --corpus DIR --vocab 2048 --out DIR/tokenizer.json`
trains on DIR/examples.jsonl (the corpus) plus the prompts of every task of the suite.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from kernels_env import list_tasks
from leap_jax.bootstrap.corpus import EXAMPLES_FILE, read_jsonl
from leap_jax.models.bpe import MIN_VOCAB, check_vocab, train_tokenizer
from leap_jax.models.chat import render_text
from leap_jax.rollout.prompts import prompt_texts


def corpus_texts(examples: Iterable[dict[str, Any]], tasks: Iterable[Any],
                 prompt_sizes: str | Sequence[str] = ("eval", "small")) -> Iterator[str]:
    """The text a policy's tokenizer is trained on: every corpus example rendered through the ChatML
    template, then `prompt_texts(tasks, prompt_sizes)` (each task's first-turn prompts, the feedback
    request, its known-good solution)."""
    prompts = prompt_texts(tasks, prompt_sizes)  # checks prompt_sizes now
    for i, ex in enumerate(examples):
        if not isinstance(ex, dict) or not isinstance(ex.get("messages"), list):
            raise ValueError(f"corpus example #{i} has no 'messages' list (got {type(ex).__name__})")
        yield render_text({"role": m["role"], "content": m["content"]} for m in ex["messages"])
    yield from prompts


def tokenizer_texts(corpus_dir: str | Path | None, tasks: Iterable[Any]) -> Iterator[str]:
    """`corpus_texts` of CORPUS_DIR/examples.jsonl and the tasks' prompts; with no corpus directory,
    the prompts alone (`prompt_texts`)."""
    if corpus_dir is None:
        return iter(prompt_texts(tasks))
    ex_path = Path(corpus_dir) / EXAMPLES_FILE
    if not ex_path.is_file():
        raise FileNotFoundError(f"corpus {corpus_dir}: no {EXAMPLES_FILE} there (build it with "
                                "`python -m leap_jax.bootstrap.corpus --out DIR`)")
    return corpus_texts(read_jsonl(ex_path), tasks)


def main(argv: Sequence[str] | None = None) -> int:
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
        check_vocab(a.vocab)
    except ValueError as e:
        p.error(f"--vocab: {e}")
    out = Path(a.out) if a.out else Path(a.corpus) / "tokenizer.json"
    examples = read_jsonl(ex_path)
    tok = train_tokenizer(corpus_texts(examples, list_tasks()), a.vocab, out)
    print(f"wrote {out}: {tok.vocab_size} ids from {len(examples)} examples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
