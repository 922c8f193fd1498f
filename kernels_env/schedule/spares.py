"""Warm spare workers: started, warmed-up exec workers per GPU, waiting to replace ones that die.

Replacing an exec worker from scratch costs a process, the CuPy import, a CUDA context and the
warm-up (kernels_env/schedule/warmup.py): seconds during which its lane serves nothing (about 4 s on an
H100, `EvalPool.stats()["spare_start_ms_mean"]`). EvalPool keeps `depth` spares per GPU, started with
the pool; `take` hands one over at once and starts its replacement in a background thread. More than one
matters when sticky faults come faster than one spare restarts: on an H100, a mix whose failures were all
illegal addresses (44 in 172 jobs) found a spare ready for 21 of its 44 restarts with one spare. When no
spare is ready, `take` returns None and the caller starts a worker itself, as before.
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
    """`depth` spares per distinct worker environment (i.e. per GPU), started in parallel; `factory`
    starts a worker."""

    def __init__(self, factory: Factory, depth: int = 1) -> None:
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"SpareWorkers depth={depth!r}; expected an integer >= 1")
        self._factory = factory
        self.depth = depth
        self._lock = threading.Lock()
        self._ready: dict[tuple, list[Any]] = {}
        self._starting: dict[tuple, int] = {}
        self._threads: list[threading.Thread] = []
        self._closed = False
        self.failures = 0  # spares that could not start
        self.start_s: list[float] = []  # how long each spare took to start and warm up

    def ensure(self, env: dict[str, str]) -> None:
        """Start spares for `env` in the background until `depth` are ready or starting."""
        key = _key(env)
        with self._lock:
            if self._closed:
                return
            missing = self.depth - len(self._ready.get(key, ())) - self._starting.get(key, 0)
            if missing <= 0:
                return
            self._starting[key] = self._starting.get(key, 0) + missing
            new = [threading.Thread(target=self._fill, args=(env, key), name="EvalPool-spare", daemon=True)
                   for _ in range(missing)]
            self._threads = [x for x in self._threads if x.is_alive()] + new
        for t in new:
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
            self._starting[key] -= 1
            if worker is not None and not self._closed:
                self._ready.setdefault(key, []).append(worker)
                return
        if worker is not None:  # closed while it started
            worker.stop()

    def take(self, env: dict[str, str]) -> Any | None:
        """A ready spare for `env`, the longest ready first (None if none is ready and alive); starts
        replacements for those taken (or found dead)."""
        while True:
            with self._lock:
                ready = self._ready.get(_key(env))
                worker = ready.pop(0) if ready else None
            if worker is None or worker.alive:
                break
            worker.kill()
        self.ensure(env)
        return worker

    def start_times(self) -> list[float]:
        """Seconds each spare took to start and warm up, so far (for stats)."""
        with self._lock:
            return list(self.start_s)

    def ready(self) -> list[Any]:
        """The spares ready now (for stats and tests)."""
        with self._lock:
            return [w for ready in self._ready.values() for w in ready]

    def close(self, join_s: float = 10.0) -> None:
        """Stop the ready spares; spares still starting stop themselves when they are up."""
        with self._lock:
            self._closed = True
            ready = [w for spares in self._ready.values() for w in spares]
            self._ready = {}
            threads = list(self._threads)
        for w in ready:
            w.stop()
        for t in threads:
            t.join(join_s)
