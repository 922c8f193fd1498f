"""Reference timings that outlive exec workers.

The harness times a task's reference once per device and keeps the run times on the device object,
in `device.__dict__['_harness_reference_ms']` (a dict keyed by one tuple; see execute/timing_stage.py
`_reference_times`). A worker killed by a sticky CUDA error used to take those numbers with it, so
its replacement re-timed every reference. Now the worker sends the entries it measured back with
each job's reply (`new_entries`), the parent keeps them per GPU (`ReferenceStore`), and every worker,
fresh or a warm spare, is seeded with the entries it lacks along with its next job (`seed`).

Only the storage location is relied on, not the key's content: any picklable key and value travels.
"""
from __future__ import annotations

import pickle
import threading
from typing import Any

CACHE_ATTR = "_harness_reference_ms"


def cache_of(device: Any) -> dict:
    """The device's reference-timing dict (created empty); {} for an object without a __dict__."""
    try:
        return device.__dict__.setdefault(CACHE_ATTR, {})
    except AttributeError:
        return {}


def seed(device: Any, entries: dict) -> None:
    """Add entries the parent knows to the device's cache (never overwriting a local measurement)."""
    cache = cache_of(device)
    for k, v in entries.items():
        cache.setdefault(k, v)


def new_entries(device: Any, known: set) -> dict:
    """Entries of the device's cache not in `known` (which is updated), picklable ones only."""
    out = {}
    for k, v in list(cache_of(device).items()):
        if k in known:
            continue
        known.add(k)
        try:
            pickle.dumps((k, v))
        except Exception:  # a key or value that cannot travel stays local to this worker
            continue
        out[k] = v
    return out


class ReferenceStore:
    """The parent's copy of every worker's reference timings, per GPU (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_gpu: dict[str, dict] = {}

    def add(self, gpu: str, entries: dict) -> None:
        if not entries:
            return
        with self._lock:
            store = self._by_gpu.setdefault(gpu, {})
            for k, v in entries.items():
                store.setdefault(k, v)

    def missing(self, gpu: str, known: set) -> dict:
        """Entries for `gpu` not in `known`; `known` is updated as if they were delivered."""
        with self._lock:
            store = self._by_gpu.get(gpu, {})
            out = {k: v for k, v in store.items() if k not in known}
        known.update(out)
        return out

    def count(self, gpu: str | None = None) -> int:
        with self._lock:
            if gpu is not None:
                return len(self._by_gpu.get(gpu, {}))
            return sum(len(s) for s in self._by_gpu.values())


class WorkerDevice:
    """What an evaluator-mode worker (tests' injected evaluators) uses as its device: an object
    whose reference cache travels like a real device's (see `worker_cache`)."""


_WORKER_DEVICE: list[Any] = [None]


def set_worker_device(device: Any) -> None:
    _WORKER_DEVICE[0] = device


def worker_cache() -> dict:
    """In a pool worker, its device's reference cache (for injected evaluators); {} elsewhere."""
    dev = _WORKER_DEVICE[0]
    return cache_of(dev) if dev is not None else {}
