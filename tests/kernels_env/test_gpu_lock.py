"""The cross-process GPU readers-writer lock (kernels_env/execute/gpu_lock.py), with real spawned processes."""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import pytest

from kernels_env.execute.gpu_lock import EXCLUSIVE, FREE, GpuLock, GpuLockTimeout, attach, gpu_access

CTX = mp.get_context("spawn")


def _hold(handle, exclusive: bool, hold_s: float, log, name: str) -> None:
    """Child: take the lock, log (name, "got"/"rel", time) around holding it for hold_s."""
    with handle.access(exclusive):
        log.put((name, "got", time.monotonic()))
        time.sleep(hold_s)
        log.put((name, "rel", time.monotonic()))


def _hold_forever(handle, exclusive: bool, log) -> None:
    handle.lock.acquire(handle.slot, exclusive)
    log.put(("held", os.getpid()))
    time.sleep(3600)


def _take_mutex_forever(lock, log) -> None:
    lock.mutex.acquire()
    log.put(("mutex", os.getpid()))
    time.sleep(3600)


def _start(target, *args):
    p = CTX.Process(target=target, args=args, daemon=True)
    p.start()
    return p


def _events(log, n: int, timeout: float = 60.0) -> list:
    return [log.get(timeout=timeout) for _ in range(n)]


def test_exclusive_excludes_shared_and_shared_excludes_exclusive():
    lock = GpuLock(CTX, 3)
    log = CTX.Queue()
    a = _start(_hold, lock.handle(0), True, 0.8, log, "A")
    name, what, t_got = log.get(timeout=60)
    assert (name, what) == ("A", "got")
    with lock.handle(1).access(exclusive=False):
        t_shared = time.monotonic()
    (_, what, t_rel), = _events(log, 1)
    assert what == "rel" and t_shared >= t_rel  # the shared holder entered after the writer left
    a.join(30)
    # now the other way round: a shared holder (child) keeps a writer (this process) out
    b = _start(_hold, lock.handle(0), False, 0.8, log, "B")
    assert log.get(timeout=60)[:2] == ("B", "got")
    with lock.handle(1).access(exclusive=True):
        t_excl = time.monotonic()
    (_, what, t_rel), = _events(log, 1)
    assert what == "rel" and t_excl >= t_rel
    b.join(30)
    assert [lock.mode[i] for i in range(3)] == [FREE] * 3


def test_two_shared_holders_overlap():
    lock = GpuLock(CTX, 3)
    log = CTX.Queue()
    a = _start(_hold, lock.handle(0), False, 0.8, log, "A")
    assert log.get(timeout=60)[:2] == ("A", "got")
    t0 = time.monotonic()
    with lock.handle(1).access(exclusive=False):
        assert time.monotonic() - t0 < 0.5  # did not wait for A
    a.join(30)


def test_writer_preference_blocks_new_readers():
    """A reader holds; a writer queues; a later reader must wait for the writer (no starvation)."""
    lock = GpuLock(CTX, 4)
    log = CTX.Queue()
    reader = _start(_hold, lock.handle(0), False, 1.0, log, "R1")
    assert log.get(timeout=60)[:2] == ("R1", "got")
    writer = _start(_hold, lock.handle(1), True, 0.3, log, "W")
    deadline = time.monotonic() + 30
    while lock.mode[1] != 3 and time.monotonic() < deadline:  # WAIT_EXCLUSIVE
        time.sleep(0.01)
    assert lock.mode[1] == 3, "the writer never started waiting"
    with lock.handle(2).access(exclusive=False):
        t_r2 = time.monotonic()
    events = _events(log, 3)
    order = [(n, w) for n, w, _ in sorted(events, key=lambda e: e[2])]
    assert order == [("R1", "rel"), ("W", "got"), ("W", "rel")], order
    w_rel = next(t for n, w, t in events if (n, w) == ("W", "rel"))
    assert t_r2 >= w_rel
    assert lock.waited_s(2) > 0.5  # the second reader's wait is accounted for the parent
    reader.join(30)
    writer.join(30)


@pytest.mark.parametrize("reset", [True, False], ids=["parent-reset", "waiter-clears-dead-pid"])
def test_killed_holder_does_not_deadlock(reset):
    """A holder SIGKILLed mid-hold: the parent's reset_slot (what EvalPool does after a kill) frees it
    at once; without it, a waiter clears the slot of a reaped pid by itself."""
    lock = GpuLock(CTX, 3)
    log = CTX.Queue()
    p = _start(_hold_forever, lock.handle(0), True, log)
    assert log.get(timeout=60)[0] == "held"
    assert lock.mode[0] == EXCLUSIVE
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)  # reaped: its pid no longer exists
    if reset:
        lock.reset_slot(0)
    t0 = time.monotonic()
    with lock.handle(1).access(exclusive=False):
        pass
    assert time.monotonic() - t0 < (1.0 if reset else 5.0)


def test_worker_killed_inside_the_mutex_is_recovered_by_reset():
    lock = GpuLock(CTX, 2)
    log = CTX.Queue()
    p = _start(_take_mutex_forever, lock, log)
    assert log.get(timeout=60)[0] == "mutex"
    p.kill()
    p.join(10)
    lock.reset_slot(0)
    with lock.handle(1).access(exclusive=False):
        pass


def test_timeout_names_the_holder():
    lock = GpuLock(CTX, 2)
    log = CTX.Queue()
    p = _start(_hold_forever, lock.handle(0), True, log)
    try:
        assert log.get(timeout=60)[0] == "held"
        with pytest.raises(GpuLockTimeout, match=r"slot 0 \(pid \d+\): exclusive"):
            lock.acquire(1, exclusive=False, timeout_s=0.3)
        assert lock.mode[1] == FREE
    finally:
        p.kill()
        p.join(10)


def test_gpu_access_is_a_no_op_without_a_lock_and_uses_an_attached_one():
    class Dev:
        pass
    dev = Dev()
    with gpu_access(dev, exclusive=True):
        pass
    with gpu_access(object(), exclusive=False):  # no __dict__: still a no-op
        pass
    lock = GpuLock(CTX, 1)
    attach(dev, lock.handle(0))
    with gpu_access(dev, exclusive=True):
        assert lock.mode[0] == EXCLUSIVE
    assert lock.mode[0] == FREE
    with pytest.raises(ValueError, match="slot=1"):
        lock.handle(1)


@pytest.mark.parametrize("hung", [True, False], ids=["hung", "faulted"])
def test_only_a_hung_device_keeps_its_hold_until_the_parent_resets_it(hung):
    """A hung kernel runs until its process is gone: no timing may start next to it. A sticky fault
    (illegal address, ...) has stopped its kernel: holding the lock until the dead worker is reaped
    would stall every other worker's timing for its whole exit."""
    class Dev:
        healthy, hung = True, False
    dev = Dev()
    lock = GpuLock(CTX, 2)
    attach(dev, lock.handle(0))
    with pytest.raises(RuntimeError, match="sticky"):
        with gpu_access(dev, exclusive=False):
            dev.healthy, dev.hung = False, hung
            raise RuntimeError("sticky")
    if hung:
        assert lock.mode[0] == 1  # still shared
        with pytest.raises(GpuLockTimeout):
            lock.acquire(1, exclusive=True, timeout_s=0.2)
        lock.reset_slot(0)
    else:
        assert lock.mode[0] == FREE
    with lock.handle(1).access(exclusive=True):
        pass
