"""A thin wrapper over a HF `tokenizers` tokenizer.json with the special-token facts the RL loop needs.

`Tokenizer.from_dir(model_dir)` reads tokenizer.json and, when present, tokenizer_config.json (for
the eos/pad/bos token strings) and generation_config.json (EOS ids). `encode` never adds special
tokens implicitly (the chat template places every special token itself); `decode` can drop them.
"""
from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from tokenizers import Tokenizer as HFTokenizer


def _token_str(v: Any) -> str | None:
    """tokenizer_config.json stores special tokens as "<s>" or {"content": "<s>", ...}."""
    if v is None:
        return None
    if isinstance(v, dict):
        return v.get("content")
    return str(v)


class Tokenizer:
    """Encode/decode text and expose vocab size, EOS ids and the pad id.

    eos_token / pad_token / bos_token: token strings (looked up in the vocabulary; unknown ones raise
    KeyError). extra_eos_ids: more ids that end a sequence (e.g. from generation_config.json).
    pad_id falls back to `<|endoftext|>` when present, else the first EOS id, else None.
    """

    def __init__(self, tokenizer: Any, *, eos_token: str | None = None, pad_token: str | None = None,
                 bos_token: str | None = None, extra_eos_ids: Iterable[int] = ()):
        self._tk = tokenizer
        self._lock = threading.Lock()
        self.eos_token, self.pad_token, self.bos_token = eos_token, pad_token, bos_token
        eos: list[int] = []
        if eos_token is not None:
            eos.append(self.token_id(eos_token))
        for t in extra_eos_ids:
            t = int(t)
            if not 0 <= t < self.vocab_size:
                raise ValueError(f"EOS id {t} is outside the vocabulary [0, {self.vocab_size})")
            if t not in eos:
                eos.append(t)
        self._eos_ids = tuple(eos)
        self.bos_id = self.token_id(bos_token) if bos_token is not None else None
        if pad_token is not None:
            self._pad_id: int | None = self.token_id(pad_token)
        elif self.maybe_token_id("<|endoftext|>") is not None:
            self._pad_id = self.maybe_token_id("<|endoftext|>")
        else:
            self._pad_id = self._eos_ids[0] if self._eos_ids else None

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_file(cls, path: str, **kwargs: Any) -> Tokenizer:
        """Load a tokenizer.json file; kwargs as for the constructor."""
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"tokenizer file {path!r} does not exist; expected a tokenizer.json")
        try:
            tk = HFTokenizer.from_file(path)
        except Exception as e:  # the Rust side raises its own exception type
            raise ValueError(f"{path}: cannot be read as a `tokenizers` tokenizer.json ({e})") from None
        return cls(tk, **kwargs)

    @classmethod
    def from_dir(cls, model_dir: str) -> Tokenizer:
        """Load `model_dir/tokenizer.json` plus special tokens from tokenizer_config.json and EOS ids
        from generation_config.json / config.json when present."""
        model_dir = os.fspath(model_dir)
        tk_path = os.path.join(model_dir, "tokenizer.json")
        if not os.path.isfile(tk_path):
            raise FileNotFoundError(f"{model_dir}: no tokenizer.json (only the fast-tokenizer JSON "
                                    "format is supported)")
        cfg = _read_json_if(os.path.join(model_dir, "tokenizer_config.json"))
        extra: list[int] = []
        for name in ("generation_config.json", "config.json"):
            eos = _read_json_if(os.path.join(model_dir, name)).get("eos_token_id")
            if eos is not None:
                extra += list(eos) if isinstance(eos, (list, tuple)) else [eos]
                break
        return cls.from_file(tk_path, eos_token=_token_str(cfg.get("eos_token")),
                             pad_token=_token_str(cfg.get("pad_token")),
                             bos_token=_token_str(cfg.get("bos_token")), extra_eos_ids=extra)

    # ------------------------------------------------------------------ API

    @property
    def vocab_size(self) -> int:
        """Number of ids the tokenizer can produce (base vocabulary plus added tokens)."""
        return int(self._tk.get_vocab_size(with_added_tokens=True))

    @property
    def eos_ids(self) -> tuple[int, ...]:
        return self._eos_ids

    @property
    def pad_id(self) -> int | None:
        return self._pad_id

    def encode(self, text: str, add_special_tokens: bool = False, allow_special: bool = True) -> list[int]:
        """Token ids of `text`.

        allow_special: special-token strings inside the text (e.g. "<|im_end|>") map to their ids;
        with False they are tokenized as plain text, so untrusted text cannot inject control tokens.
        add_special_tokens: apply the tokenizer's post-processor (e.g. a BOS); off by default.
        """
        if not isinstance(text, str):
            raise TypeError(f"Tokenizer.encode expects a str, got {type(text).__name__}")
        with self._lock:  # `encode_special_tokens` is tokenizer state: toggle it under a lock
            old = self._tk.encode_special_tokens
            self._tk.encode_special_tokens = not allow_special
            try:
                return list(self._tk.encode(text, add_special_tokens=add_special_tokens).ids)
            finally:
                self._tk.encode_special_tokens = old

    def encode_batch(self, texts: Sequence[str], allow_special: bool = True) -> list[list[int]]:
        """`encode` of each text (one call into the Rust tokenizer, parallel there)."""
        for t in texts:
            if not isinstance(t, str):
                raise TypeError(f"Tokenizer.encode_batch expects strs, got {type(t).__name__}")
        with self._lock:
            old = self._tk.encode_special_tokens
            self._tk.encode_special_tokens = not allow_special
            try:
                return [list(e.ids) for e in self._tk.encode_batch(list(texts), add_special_tokens=False)]
            finally:
                self._tk.encode_special_tokens = old

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self._tk.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def maybe_token_id(self, token: str) -> int | None:
        """The id of an exact token string, or None when the vocabulary lacks it."""
        i = self._tk.token_to_id(token)
        return None if i is None else int(i)

    def token_id(self, token: str) -> int:
        """The id of an exact token string; KeyError naming it when absent."""
        i = self.maybe_token_id(token)
        if i is None:
            raise KeyError(f"token {token!r} is not in the tokenizer's vocabulary")
        return i

    def id_to_token(self, i: int) -> str | None:
        return self._tk.id_to_token(int(i))

    @property
    def hf(self) -> Any:
        """The underlying `tokenizers.Tokenizer`."""
        return self._tk


def _read_json_if(path: str) -> dict[str, Any]:
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(d, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(d).__name__}")
    return d
