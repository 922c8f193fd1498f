"""An exec worker whose CUDA context a policy kernel killed does not print CuPy's destructor errors
(one traceback per dead event) into the trainer's log; every other unraisable error still prints."""
from __future__ import annotations

import gc
import sys
import types

import pytest

from kernels_env.schedule.workers import quiet_dead_context_destructors


def _error_class(module: str) -> type[Exception]:
    return type("CUDARuntimeError", (RuntimeError,), {"__module__": module})


class _Event:
    """Raises from __del__ as CuPy's Event does once its context is gone."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def __del__(self) -> None:
        raise self.exc


@pytest.fixture
def device_hook():
    device = types.SimpleNamespace(healthy=True)
    saved = sys.unraisablehook
    sys.unraisablehook = quiet_dead_context_destructors(device)
    try:
        yield device
    finally:
        sys.unraisablehook = saved


def _drop_event(exc: Exception) -> None:
    ev = _Event(exc)
    del ev
    gc.collect()


def test_cuda_destructor_errors_of_a_dead_context_are_dropped(device_hook, capsys) -> None:
    device_hook.healthy = False
    _drop_event(_error_class("cupy_backends.cuda.api.runtime")("cudaErrorIllegalAddress: illegal access"))
    assert "cudaErrorIllegalAddress" not in capsys.readouterr().err


def test_cuda_destructor_errors_of_a_healthy_device_still_print(device_hook, capsys) -> None:
    _drop_event(_error_class("cupy_backends.cuda.api.runtime")("cudaErrorInvalidValue: first"))
    assert "cudaErrorInvalidValue: first" in capsys.readouterr().err


def test_other_destructor_errors_print_after_a_fault(device_hook, capsys) -> None:
    device_hook.healthy = False
    _drop_event(ValueError("a bug of our own"))
    assert "a bug of our own" in capsys.readouterr().err
