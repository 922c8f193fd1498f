"""Device buffers for the cpu backend.

CpuDevice allocates with `shared_empty`: a memfd the judge views as a NumPy array and the runner
process (runner.py) maps between PROT_NONE guard pages, [guard page][data pages][guard pages]. The
END of the array is placed at the end of the data pages (rounded up to 16 bytes, the widest CUDA
vector alignment), so a write or read past the end hits the trailing guard and faults; a negative
index hits the leading one. The runner turns the fault into "illegal memory access", as a GPU does,
and names the buffer the address was next to (runner.py `_Buffers.describe`).
"""
from __future__ import annotations

import ctypes
import mmap
import threading
import weakref
from typing import Any

import numpy as np

from kernels_env.backends.base import scratch_limit

PAGE = mmap.PAGESIZE
ALIGN = 16
# The scratch one evaluation may declare on this backend, summed over its buffers: the judge zeroes
# and poisons every byte of it, so 64 GiB of declared scratch would be 64 GiB resident before the
# kernel runs (the default and the rule: backends/base.py scratch_limit).
SCRATCH_ENV = "LEAP_CPU_SCRATCH_BYTES"


def max_scratch_bytes() -> int:
    """LEAP_CPU_SCRATCH_BYTES, else base.DEFAULT_SCRATCH_BYTES (ValueError naming a bad value)."""
    return scratch_limit(SCRATCH_ENV)


def _addr(m: mmap.mmap) -> int:
    buf = (ctypes.c_char * 1).from_buffer(m)
    try:
        return ctypes.addressof(buf)
    finally:
        del buf


def _layout(shape: tuple[int, ...], dtype: Any) -> tuple[np.dtype, tuple[int, ...], int, int, int, int]:
    """(dtype, shape, element count, bytes, bytes rounded to ALIGN, data pages) of a buffer: the one
    layout rule of shared_empty (the runner maps the same data pages between its guards)."""
    dt = np.dtype(dtype)
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"buffer shape {shape} has a negative dimension")
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    nbytes = count * dt.itemsize
    padded = (nbytes + ALIGN - 1) // ALIGN * ALIGN
    return dt, shape, count, nbytes, padded, max(1, (padded + PAGE - 1) // PAGE)


# ---- buffers shared with the kernel runner process (sandbox.py) ------------------------------------
# The judge's view of a device buffer is a NumPy array over a memfd mapping (no guard pages here: the
# kernel never runs in this process). The runner maps the same memfd between its own guard pages.
# The END of the array sits at the end of the data pages (16-byte rounded: see _layout).
_shared_lock = threading.RLock()
_shared: dict[int, tuple[int, int, int, int, int, int, weakref.ref]] = {}
# key -> (judge address of the data pages, their length, fd, data_pages, offset, nbytes, ref)
_next_key = [1]


def shared_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A zero-filled C-contiguous array over a memfd the kernel runner can map (see sandbox.py)."""
    import os
    dt, shape, count, nbytes, padded, data_pages = _layout(shape, dtype)
    fd = os.memfd_create("leap_buf", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, data_pages * PAGE)
        # sealed: the runner cannot shrink the file under this process's mapping (SIGBUS here)
        import fcntl
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        m = mmap.mmap(fd, data_pages * PAGE, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except BaseException:
        os.close(fd)
        raise
    offset = data_pages * PAGE - padded
    arr = np.frombuffer(m, dtype=dt, count=count, offset=offset).reshape(shape)
    with _shared_lock:
        key = _next_key[0]
        _next_key[0] += 1
        _shared[key] = (_addr(m), data_pages * PAGE, fd, data_pages, offset, nbytes, weakref.ref(m))
    weakref.finalize(m, _release, key, fd)
    return arr


def _release(key: int, fd: int) -> None:
    import os
    _shared.pop(key, None)
    try:
        os.close(fd)
    except OSError:
        pass


def shared_lookup(addr: int) -> tuple[int, int, int, int, int, int] | None:
    """(key, byte offset of `addr` from the buffer's start, fd, data_pages, offset, nbytes) of the live
    shared buffer whose data pages hold `addr`, else None."""
    with _shared_lock:
        items = list(_shared.items())
    for key, (base, length, fd, data_pages, offset, nbytes, ref) in items:
        if ref() is not None and base <= addr <= base + length:  # (== : an empty array at the end)
            return key, addr - (base + offset), fd, data_pages, offset, nbytes
    return None


def shared_is_live(key: int) -> bool:
    return key in _shared
