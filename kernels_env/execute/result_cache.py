"""Result cache keyed by (task, normalised CUDA source, launch block, config) (DESIGN 3.5).

Normalisation drops comments and trailing whitespace and collapses whitespace runs, so cosmetic
edits of a resubmission hit the cache while any code change misses. `env_error` results are never
cached: they say nothing about the submission and may succeed on a retry.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import threading
from collections import OrderedDict

from kernels_env.core.config import RESULT_NEUTRAL_FIELDS, EnvConfig
from kernels_env.core.result import Result
from kernels_env.source.source_text import strip_comments
from kernels_env.source.submission import Answer
from kernels_env.execute.domain_draws import draws_version
from kernels_env.core.status import Status

KEY_VERSION = "2"  # 2: std prelude, null pointers, KernelBench-aligned task semantics


def normalize_source(src: str) -> str:
    """Comments removed, each line stripped, blank lines dropped, whitespace runs collapsed.

    Line structure is kept (preprocessor directives end at a newline)."""
    lines = (re.sub(r"[ \t\f\v\r]+", " ", ln).strip() for ln in strip_comments(src).split("\n"))
    return "\n".join(ln for ln in lines if ln)


def cache_key(task_name: str, text: Answer, config: EnvConfig) -> str:
    """sha256 hex over the task name, the normalised blocks and the config (less its
    RESULT_NEUTRAL_FIELDS, which never change a result). Text without both blocks (a format error)
    is keyed by its raw content."""
    from kernels_env.source.launch import FormatError
    from kernels_env.source.submission import extract_blocks
    try:
        cuda, launch = extract_blocks(text)
        body = {"cuda": normalize_source(cuda), "launch": normalize_source(launch)}
    except FormatError:
        body = {"raw": text if isinstance(text, str) else repr(text)}
    config_key = {k: v for k, v in config.to_dict().items() if k not in RESULT_NEUTRAL_FIELDS}
    # legacy draws keep the keys they had before input domains existed; domain draws carry their version
    draws = draws_version(config.input_domains)
    if draws:
        config_key["input_domains"] = draws
    else:
        del config_key["input_domains"]
    # a result scored where kernels could reach the judge's host memory is never served to a config
    # that forbids it; the default keeps the keys it had before the setting existed
    if not config.allow_host_memory_access:
        config_key.pop("allow_host_memory_access", None)
    payload = json.dumps({"v": KEY_VERSION, "task": task_name, **body, "config": config_key},
                         sort_keys=True, default=str)
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


class ResultCache:
    """Thread-safe in-memory LRU of Results, optionally backed by a directory of JSON files."""

    def __init__(self, max_entries: int = 10_000, directory: str | None = None) -> None:
        if max_entries < 1:
            raise ValueError(f"ResultCache max_entries={max_entries}; expected >= 1")
        self.max_entries = max_entries
        self.directory = directory
        if directory:
            os.makedirs(directory, exist_ok=True)
        self._mem: OrderedDict[str, dict] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def _path(self, key: str) -> str:
        if not re.fullmatch(r"[0-9a-f]{16,128}", key):
            raise ValueError(f"cache key {key!r} is not a hex digest")
        return os.path.join(self.directory, key[:2], key + ".json")  # type: ignore[arg-type]

    def get(self, key: str) -> Result | None:
        """The cached Result (a fresh copy with `cached=True`), or None."""
        with self._lock:
            d = self._mem.get(key)
            if d is not None:
                self._mem.move_to_end(key)
        if d is None and self.directory:
            try:
                with open(self._path(key), encoding="utf-8") as f:
                    d = json.load(f)
                self._remember(key, d)
            except (OSError, ValueError):
                d = None
        with self._lock:
            if d is None:
                self.misses += 1
            else:
                self.hits += 1
        if d is None:
            return None
        r = Result.from_dict(d)
        r.cached = True
        return r

    def _remember(self, key: str, d: dict) -> None:
        with self._lock:
            self._mem[key] = d
            self._mem.move_to_end(key)
            while len(self._mem) > self.max_entries:
                self._mem.popitem(last=False)

    def put(self, key: str, result: Result) -> bool:
        """Store a result; returns False (and stores nothing) for env_error or an empty key."""
        if not key or result.status is Status.ENV_ERROR:
            return False
        d = result.to_dict()
        d["cached"] = False
        self._remember(key, d)
        if self.directory:
            path = self._path(key)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(d, f)
            os.replace(tmp, path)  # atomic: readers never see half a file
        return True

    def __len__(self) -> int:
        return len(self._mem)

    def __contains__(self, key: str) -> bool:
        return key in self._mem
