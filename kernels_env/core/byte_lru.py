"""A thread-safe least-recently-used map bounded by the bytes of its values.

The harness keeps device arrays between evaluations in two of these (judge/expected_cache.py: masked
reference outputs; execute/input_cache.py: trial inputs), each bounded by bytes of device memory.
Values report their size as `nbytes`; counters say how the cache is used (hits, misses, entries
dropped as tampered, evictions).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, Protocol, TypeVar


class Sized(Protocol):
    @property
    def nbytes(self) -> int: ...


V = TypeVar("V", bound=Sized)
C = TypeVar("C", bound="ByteLRU[Any]")


def kept_on(device: Any, name: str, make: Callable[[], C]) -> C | None:
    """The cache `name` kept on the device object (made by `make()` on first use, one per device and
    process, like the reference timing cache); None for a device without a __dict__."""
    try:
        store = device.__dict__
    except AttributeError:
        return None
    cache = store.get(name)
    if cache is None:
        cache = store.setdefault(name, make())
    return cache


class ByteLRU(Generic[V]):
    """Entries by key, least recently used evicted first to keep the sum of `nbytes` <= max_bytes."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"{type(self).__name__} max_bytes={max_bytes}; expected >= 0")
        self.max_bytes = int(max_bytes)
        self._entries: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()
        self.nbytes = 0
        self.hits = self.misses = self.tampered = self.evictions = 0

    def lookup(self, key: Hashable, count: bool = True) -> V | None:
        """The entry (now most recently used), or None. `count=False` leaves the hit and miss
        counters to a later `count` (a lookup whose use depends on later checks)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
        if count:
            self.count(entry is not None)
        return entry

    def count(self, hit: bool) -> None:
        """Count one lookup as a hit or a miss."""
        with self._lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1

    def store(self, key: Hashable, entry: V) -> bool:
        """Store an entry, evicting least recently used ones to stay within max_bytes; False (nothing
        stored) for an entry larger than the whole bound."""
        size = int(entry.nbytes)
        if size > self.max_bytes:
            return False
        with self._lock:
            self._drop(key)
            while self._entries and self.nbytes + size > self.max_bytes:
                self._drop(next(iter(self._entries)))
                self.evictions += 1
            self._entries[key] = entry
            self.nbytes += size
        return True

    def discard(self, key: Hashable, tampered: bool = False) -> None:
        """Forget an entry (after a failed checksum: `tampered`)."""
        with self._lock:
            self._drop(key)
            self.tampered += int(tampered)

    def _drop(self, key: Hashable) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.nbytes -= int(entry.nbytes)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries
