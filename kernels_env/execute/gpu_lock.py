"""A cross-process readers-writer lock per GPU, so timed regions never overlap other GPU work.

Several exec workers share one GPU (EvalPool's `exec_workers_per_gpu`). Timing takes the lock
exclusive; other GPU work (correctness trials: inputs, candidate, reference, comparison) takes it
shared; host work (module loading, parsing) takes nothing. Writers are preferred: once a worker waits
to time, no new shared holder enters, so timing is never starved by a stream of correctness trials.

Robustness (a worker may be SIGKILLed at any instant, lock held or not):
  * the state is one small slot per worker in shared memory (the slot's mode and pid), not a
    condition variable whose internal counters a killed process could leave inconsistent;
  * waiters poll (short sleeps, backing off to POLL_MAX_S) instead of blocking on a semaphore;
  * the only blocking primitive is a mutex held for a few microseconds per state change; the parent
    that kills a worker calls `reset_slot`, which clears the worker's slot and, if the mutex stays
    taken (the worker died inside that tiny window), releases it;
  * a waiter also clears slots whose process no longer exists, and gives up after `timeout_s` with
    GpuLockTimeout naming the holders, so a lost parent cannot block a worker for ever.
Each slot also records how long its worker waited in this job (`waited_s`), so the parent can
extend the job's wall-clock limit by that wait: a job is never timed out for queueing behind others.

Primitives are created by the parent (`GpuLock(ctx, slots)`) and passed to spawned workers as
process arguments (`GpuLock.handle(slot)`); in the worker, `gpu_access(device, exclusive)` uses the
handle stored on the device (`attach`) and is a no-op for a device without one (inline mode, cpu).
"""
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

FREE, SHARED, EXCLUSIVE, WAIT_EXCLUSIVE = 0, 1, 2, 3
MODE_NAMES = {FREE: "free", SHARED: "shared", EXCLUSIVE: "exclusive", WAIT_EXCLUSIVE: "waiting for exclusive"}
POLL_MIN_S = 5e-5
POLL_MAX_S = 2e-3
MUTEX_TIMEOUT_S = 5.0  # the mutex guards microsecond-long state changes only
DEFAULT_TIMEOUT_S = 900.0
DEVICE_ATTR = "_gpu_lock"


class GpuLockTimeout(RuntimeError):
    """Waiting for the GPU lock took longer than its timeout (a holder that never released)."""


def _pid_exists(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class GpuLock:
    """The shared state of one GPU's lock: `slots` worker slots (mode, pid, waited seconds)."""

    def __init__(self, ctx: Any, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"GpuLock slots={slots}; expected >= 1")
        self.slots = slots
        self.mutex = ctx.Lock()
        self.mode = ctx.Array("i", slots, lock=False)
        self.pid = ctx.Array("i", slots, lock=False)
        self.waited = ctx.Array("d", slots, lock=False)  # seconds waited since the parent's last reset
        self.wait_since = ctx.Array("d", slots, lock=False)  # time.monotonic() when a wait began, else 0

    def handle(self, slot: int) -> GpuLockHandle:
        """What a worker needs to use slot `slot` (pass it as a spawned process's argument)."""
        if not 0 <= slot < self.slots:
            raise ValueError(f"GpuLock slot={slot}; expected 0 <= slot < {self.slots}")
        return GpuLockHandle(self, slot)

    # ---- the mutex ----
    def _enter(self) -> None:
        if not self.mutex.acquire(timeout=MUTEX_TIMEOUT_S):
            raise GpuLockTimeout(f"the GPU lock's mutex was not free within {MUTEX_TIMEOUT_S:g} s; "
                                 f"holders: {self.describe()}")

    def _leave(self) -> None:
        self.mutex.release()

    # ---- parent side ----
    def reset_slot(self, slot: int) -> None:
        """Clear `slot` after its worker was killed (or exited). Releases the mutex if the dead
        worker took it with it (no live worker holds it for more than microseconds)."""
        if not self.mutex.acquire(timeout=1.0):
            with contextlib.suppress(ValueError):
                self.mutex.release()  # orphaned by the killed worker
            if not self.mutex.acquire(timeout=MUTEX_TIMEOUT_S):
                raise GpuLockTimeout(f"could not reset GPU lock slot {slot}: the mutex stays taken")
        try:
            self.mode[slot] = FREE
            self.pid[slot] = 0
            self.wait_since[slot] = 0.0
        finally:
            self._leave()

    def reset_wait(self, slot: int) -> None:
        """Start a new job's wait accounting for `slot` (the parent, before sending the job)."""
        self.waited[slot] = 0.0
        self.wait_since[slot] = 0.0

    def waited_s(self, slot: int) -> float:
        """Seconds the worker in `slot` waited for the lock since the last reset_wait, current wait
        included (read without the mutex: a torn read only shifts a deadline by one poll)."""
        since = self.wait_since[slot]
        return self.waited[slot] + (max(0.0, time.monotonic() - since) if since > 0 else 0.0)

    def describe(self) -> str:
        """The non-free slots, e.g. "slot 0 (pid 123): exclusive"."""
        out = [f"slot {i} (pid {self.pid[i]}): {MODE_NAMES.get(self.mode[i], self.mode[i])}"
               for i in range(self.slots) if self.mode[i] != FREE]
        return "; ".join(out) or "none"

    # ---- worker side ----
    def _clear_dead(self) -> None:
        """Under the mutex: free slots whose process is gone (the parent normally does this)."""
        for i in range(self.slots):
            if self.mode[i] != FREE and not _pid_exists(self.pid[i]):
                self.mode[i] = FREE
                self.pid[i] = 0

    def _try(self, slot: int, exclusive: bool) -> bool:
        """Under the mutex: take the lock if the rules allow; else record that a writer waits."""
        others = [self.mode[i] for i in range(self.slots) if i != slot]
        if exclusive:
            if all(m in (FREE, WAIT_EXCLUSIVE) for m in others):
                self.mode[slot] = EXCLUSIVE
                return True
            self.mode[slot] = WAIT_EXCLUSIVE  # from now on no new shared holder enters
            return False
        if all(m in (FREE, SHARED) for m in others):  # no holder nor waiting writer
            self.mode[slot] = SHARED
            return True
        return False

    def acquire(self, slot: int, exclusive: bool, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        """Take the lock for `slot` (shared or exclusive), polling; GpuLockTimeout after timeout_s."""
        start = time.monotonic()
        pause = POLL_MIN_S
        checked_dead = start
        self._enter()
        try:
            self.pid[slot] = os.getpid()
            got = self._try(slot, exclusive)
            if not got:
                self.wait_since[slot] = start
        finally:
            self._leave()
        try:
            while not got:
                time.sleep(pause)
                pause = min(pause * 2, POLL_MAX_S)
                now = time.monotonic()
                self._enter()
                try:
                    if now - checked_dead > 1.0:
                        self._clear_dead()
                        checked_dead = now
                    got = self._try(slot, exclusive)
                    if not got and now - start > timeout_s:
                        self.mode[slot] = FREE
                        raise GpuLockTimeout(
                            f"waited {now - start:.0f} s for the GPU lock ({'exclusive' if exclusive else 'shared'}, "
                            f"slot {slot}); holders: {self.describe()}")
                finally:
                    self._leave()
        finally:
            since = self.wait_since[slot]
            if since > 0:
                self.waited[slot] += max(0.0, time.monotonic() - since)
                self.wait_since[slot] = 0.0

    def release(self, slot: int) -> None:
        self._enter()
        try:
            self.mode[slot] = FREE
        finally:
            self._leave()


class GpuLockHandle:
    """One worker's slot of a GpuLock: `with handle.access(exclusive): ...`."""

    def __init__(self, lock: GpuLock, slot: int) -> None:
        self.lock, self.slot = lock, slot

    @contextlib.contextmanager
    def access(self, exclusive: bool, timeout_s: float = DEFAULT_TIMEOUT_S) -> Iterator[None]:
        self.lock.acquire(self.slot, exclusive, timeout_s)
        try:
            yield
        finally:
            self.lock.release(self.slot)


def attach(device: Any, handle: GpuLockHandle | None) -> None:
    """Make `gpu_access(device, ...)` use `handle` (None: no lock)."""
    if handle is None:
        device.__dict__.pop(DEVICE_ATTR, None)
    else:
        device.__dict__[DEVICE_ATTR] = handle


@contextlib.contextmanager
def gpu_access(device: Any, exclusive: bool) -> Iterator[None]:
    """Hold the device's GPU lock (exclusive for timing, shared for other GPU work) around the block;
    a no-op for a device without a lock (inline mode, the cpu backend, tests' fake devices). A hung
    device (`hung`: a kernel still running past its limit) keeps the hold until the parent resets the
    worker's slot; any other device releases it, a faulted one (sticky CUDA error) included."""
    handle = getattr(device, "__dict__", {}).get(DEVICE_ATTR)
    if handle is None:
        yield
        return
    handle.lock.acquire(handle.slot, exclusive)
    try:
        yield
    finally:
        # A hung kernel occupies the GPU until its process exits: keep holding, so no timing starts
        # next to it; the parent's reset_slot frees the slot when it reaps the worker. A faulted kernel
        # (illegal address, ...) has stopped when its error is reported: holding on would stall every
        # other worker's timing for as long as the dead worker takes to exit (its context's teardown).
        if not getattr(device, "hung", False):
            handle.lock.release(handle.slot)
