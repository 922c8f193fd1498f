"""CupyDevice's waiting and timing loop against a scripted stand-in for CuPy's CUDA API (CPU).

The stand-in plays a stream whose work completes after a given number of status queries (or never:
a kernel that hangs). It checks the control flow only; the GPU tests in test_cupy_backend.py run the
same code on a real device."""
from __future__ import annotations

import types

import pytest

from kernels_env.backends.cupy_backend import CupyDevice, DeviceHang

NOT_READY = 600


class FakeCuda:
    """Just enough of cupy.cuda: a stream, events, eventQuery, memsetAsync, elapsed times."""

    def __init__(self, queries_until_idle: int | None):
        self.pending = 0
        self.queries_until_idle = queries_until_idle
        self.memsets = 0
        self.stream = types.SimpleNamespace(ptr=1, synchronize=self._sync)
        cuda = self

        class Event:
            def __init__(self, disable_timing: bool = False):
                self.ptr = id(self)

            def record(self, stream):
                cuda.pending = cuda.queries_until_idle if cuda.queries_until_idle is not None else -1

        class Err(Exception):
            status = 0

        self.runtime = types.SimpleNamespace(
            eventQuery=self._query, check_status=lambda s: None, CUDARuntimeError=Err,
            memsetAsync=self._memset)
        self.driver = types.SimpleNamespace(CUDADriverError=Err)
        self.Event = Event
        self.get_current_stream = lambda: self.stream
        self.get_elapsed_time = lambda s, e: 0.25

    def _sync(self):
        if self.queries_until_idle is None:
            raise AssertionError("a blocking synchronize on a hung stream would never return")

    def _query(self, ptr):
        if self.pending < 0:
            return NOT_READY  # hung
        if self.pending == 0:
            return 0
        self.pending -= 1
        return NOT_READY

    def _memset(self, ptr, value, nbytes, stream):
        self.memsets += 1


def device(queries_until_idle: int | None) -> CupyDevice:
    dev = object.__new__(CupyDevice)
    cuda = FakeCuda(queries_until_idle)
    dev.cp = types.SimpleNamespace(cuda=cuda, empty=lambda n, dtype=None: types.SimpleNamespace(
        data=types.SimpleNamespace(ptr=0)), uint8="uint8")
    dev.healthy, dev.flushes, dev.flush_bytes, dev.l2_bytes = True, 0, 1 << 20, 1 << 19
    return dev


def test_time_ms_with_a_budget_polls_and_returns_the_event_times():
    dev = device(queries_until_idle=3)
    launched = []
    times = dev.time_ms(lambda: launched.append(1), warmup=2, runs=5, flush_l2=True, timeout_s=5.0)
    assert times == [0.25] * 5 and len(launched) == 7
    assert dev.cp.cuda.memsets == 7 and dev.flushes == 7 and dev.healthy


def test_time_runs_orders_prepare_flush_window_check_and_waits_only_runs_behind():
    dev = device(queries_until_idle=0)
    log = []
    memset = dev.cp.cuda.runtime.memsetAsync
    dev.cp.cuda.runtime.memsetAsync = lambda *a: (log.append("flush"), memset(*a))
    times = dev.time_runs(lambda i: log.append(f"prepare {i}") or i, lambda s: log.append(f"fn {s}"),
                          lambda i, s: log.append(f"check {i}"), warmup=1, runs=2, flush_l2=True, timeout_s=5.0)
    assert times == [0.25, 0.25]
    assert log == [x for i in range(3) for x in (f"prepare {i}", "flush", f"fn {i}", f"check {i}")]


def test_a_run_that_never_finishes_raises_device_hang_within_the_budget():
    dev = device(queries_until_idle=None)
    with pytest.raises(DeviceHang, match="still running"):
        dev.time_ms(lambda: None, warmup=0, runs=3, flush_l2=False, timeout_s=0.05)
    assert dev.healthy is False  # the worker must be replaced
    with pytest.raises(Exception, match="unusable"):
        dev.time_ms(lambda: None, warmup=0, runs=1, flush_l2=False)


def test_synchronize_with_a_timeout_detects_a_hang_and_passes_otherwise():
    ok = device(queries_until_idle=10)
    ok.synchronize(timeout_s=1.0)
    assert ok.healthy
    hung = device(queries_until_idle=None)
    with pytest.raises(DeviceHang):
        hung.synchronize(timeout_s=0.02)
