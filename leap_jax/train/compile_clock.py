"""Seconds this process has spent compiling JAX programs (tracing, lowering, XLA compilation).

A step that meets a new shape (a longer turn-2 context bucket, the first update) pays XLA
compilation, which says nothing about the algorithm and is paid once per shape; comparing arms by
wall-clock over a short run would mostly compare compilations. The trainer logs this time per step
(`time/compile`) and counts training time without it (`time/train_total`). The numbers come from
`jax.monitoring`'s duration events; the listener is registered once per process, on first use.
"""
from __future__ import annotations

import threading

from jax import monitoring

COMPILE_EVENTS = frozenset({
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
})

_lock = threading.Lock()
_state = {"registered": False, "seconds": 0.0}


def _listener(event: str, duration_secs: float, **_: object) -> None:
    if event in COMPILE_EVENTS:
        with _lock:
            _state["seconds"] += float(duration_secs)


def compile_seconds() -> float:
    """Total compile seconds seen since the first call (which registers the listener)."""
    with _lock:
        if not _state["registered"]:
            monitoring.register_event_duration_secs_listener(_listener)
            _state["registered"] = True
        return _state["seconds"]
