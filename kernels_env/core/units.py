"""Byte sizes as settings read them and as messages name them (one rule for every memory limit)."""
from __future__ import annotations

import os
from collections.abc import Mapping


def describe_bytes(nbytes: int) -> str:
    """`2 GiB`, `512 MiB`, `1.5 GiB`, `100 bytes`: a size as messages name it."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            v = nbytes / (1 << shift)
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{nbytes} bytes"


def bytes_setting(name: str, default: int, minimum: int, environ: Mapping[str, str] | None = None) -> int:
    """Environment variable `name` (a whole number of bytes) from `environ` (default os.environ), else
    `default`. Raises ValueError naming the bad value and what was expected."""
    raw = (os.environ if environ is None else environ).get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ValueError(f"{name}={raw!r}; expected a whole number of bytes >= {minimum} "
                         f"(default {default}, {describe_bytes(default)})")
    return value
