"""Warm spare workers: a started, warmed-up exec worker per GPU, waiting to replace one that dies.

Replacing an exec worker from scratch costs a process, the CuPy import, a CUDA context and the
warm-up (kernels_env/schedule/warmup.py): seconds during which its lane serves nothing. EvalPool keeps one
spare per GPU, started with the pool; `take` hands it over at once and starts the next spare in a
background thread. When no spare is ready (two deaths in a row, or start-up failing), `take`
returns None and the caller starts a worker itself, as before.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

Factory = Callable[[dict[str, str]], Any]  # env -> a started worker (raises when it cannot start)


def _key(env: dict[str, str]) -> tuple:
    return tuple(sorted(env.items()))


class SpareWorkers:
    """One spare per distinct worker environment (i.e. per GPU); `factory` starts a worker."""

    def __init__(self, factory: Factory) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        self._ready: dict[tuple, Any] = {}
        self._starting: set[tuple] = set()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self.failures = 0  # spares that could not start
        self.start_s: list[float] = []  # how long each spare took to start and warm up

    def ensure(self, env: dict[str, str]) -> None:
        """Start a spare for `env` in the background unless one is ready or starting."""
        key = _key(env)
        with self._lock:
            if self._closed or key in self._ready or key in self._starting:
                return
            self._starting.add(key)
            t = threading.Thread(target=self._fill, args=(env, key), name="EvalPool-spare", daemon=True)
            self._threads = [x for x in self._threads if x.is_alive()] + [t]
        t.start()

    def _fill(self, env: dict[str, str], key: tuple) -> None:
        worker = None
        t0 = time.monotonic()
        try:
            worker = self._factory(env)
        except Exception:
            with self._lock:
                self.failures += 1
        with self._lock:
            if worker is not None:
                self.start_s.append(time.monotonic() - t0)
            self._starting.discard(key)
            if worker is not None and not self._closed:
                self._ready[key] = worker
                return
        if worker is not None:  # closed while it started
            worker.stop()

    def take(self, env: dict[str, str]) -> Any | None:
        """The ready spare for `env` (None if none is ready and alive); starts the next one."""
        with self._lock:
            worker = self._ready.pop(_key(env), None)
        if worker is not None and not worker.alive:
            worker.kill()
            worker = None
        self.ensure(env)
        return worker

    def start_times(self) -> list[float]:
        """Seconds each spare took to start and warm up, so far (for stats)."""
        with self._lock:
            return list(self.start_s)

    def ready(self) -> list[Any]:
        """The spares ready now (for stats and tests)."""
        with self._lock:
            return list(self._ready.values())

    def close(self, join_s: float = 10.0) -> None:
        """Stop the ready spares; spares still starting stop themselves when they are up."""
        with self._lock:
            self._closed = True
            ready, self._ready = list(self._ready.values()), {}
            threads = list(self._threads)
        for w in ready:
            w.stop()
        for t in threads:
            t.join(join_s)
