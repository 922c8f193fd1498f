"""Device buffers for the cpu backend.

CpuDevice allocates with `shared_empty` (end of file): a memfd the judge views as a NumPy array and
the runner process (runner.py) maps between PROT_NONE guard pages, with the layout described below.
`guarded_empty` / `describe_address` are the same layout within one process (not used by CpuDevice).

Guarded device buffers: NumPy arrays between inaccessible pages.

Each buffer gets its own anonymous mapping: [guard page][data pages][TRAIL_PAGES guard pages]. The END of the
array is placed at the end of the data pages (rounded up to 16 bytes, the widest CUDA vector
alignment), so a write or read past the end hits the trailing PROT_NONE page and faults; a negative
index hits the leading one. The runtime turns the fault into "illegal memory access", as a GPU does.
A registry of live buffers lets the device say which buffer an address was next to.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import threading
import weakref
from typing import Any

import numpy as np

PAGE = mmap.PAGESIZE
ALIGN = 16
TRAIL_PAGES = 16  # a block's worth of wide stores past the end still lands in the guard

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_libc.mprotect.restype = ctypes.c_int

_lock = threading.RLock()  # re-entrant: a GC finalizer may run while it is held
_live: dict[int, tuple[int, int, int, int, weakref.ref]] = {}  # id -> (base, total, start, nbytes, ref)


def _addr(m: mmap.mmap) -> int:
    buf = (ctypes.c_char * 1).from_buffer(m)
    try:
        return ctypes.addressof(buf)
    finally:
        del buf


class _Mapping(mmap.mmap):
    """An mmap that unregisters itself when the last array over it is gone."""


def _layout(shape: tuple[int, ...], dtype: Any) -> tuple[np.dtype, tuple[int, ...], int, int, int, int]:
    """(dtype, shape, element count, bytes, bytes rounded to ALIGN, data pages) of a buffer; the one
    layout rule of guarded_empty and shared_empty (the runner maps shared buffers the same way)."""
    dt = np.dtype(dtype)
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"buffer shape {shape} has a negative dimension")
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    nbytes = count * dt.itemsize
    padded = (nbytes + ALIGN - 1) // ALIGN * ALIGN
    return dt, shape, count, nbytes, padded, max(1, (padded + PAGE - 1) // PAGE)


def guarded_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A zero-filled C-contiguous array whose memory is fenced by PROT_NONE pages on both sides."""
    dt, shape, count, nbytes, padded, data_pages = _layout(shape, dtype)
    total = (data_pages + 1 + TRAIL_PAGES) * PAGE
    m = _Mapping(-1, total, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                 prot=mmap.PROT_READ | mmap.PROT_WRITE)
    base = _addr(m)
    for off, size in ((0, PAGE), ((data_pages + 1) * PAGE, TRAIL_PAGES * PAGE)):
        if _libc.mprotect(base + off, size, 0) != 0:
            raise OSError(ctypes.get_errno(), "mprotect of a guard page failed")
    offset = PAGE + data_pages * PAGE - padded
    arr = np.frombuffer(m, dtype=dt, count=count, offset=offset).reshape(shape)
    start = base + offset
    key = id(m)
    with _lock:
        _live[key] = (base, total, start, nbytes, weakref.ref(m))
    weakref.finalize(m, _forget, key)
    return arr


def _forget(key: int) -> None:
    _live.pop(key, None)  # atomic under the GIL; never blocks (finalizers run at arbitrary points)


def describe_address(addr: int) -> str:
    """Where `addr` lies relative to the nearest live guarded buffer (for error messages)."""
    best = None
    with _lock:
        items = list(_live.values())
    for base, total, start, nbytes, ref in items:
        if ref() is None:
            continue
        if start + nbytes <= addr < base + total:
            d = addr - (start + nbytes)
            cand = (d, f"{d} bytes past the end of a {nbytes}-byte buffer")
        elif base <= addr < start:
            d = start - addr
            cand = (d, f"{d} bytes before the start of a {nbytes}-byte buffer")
        else:
            continue
        if best is None or cand[0] < best[0]:
            best = cand
    return best[1] if best else ""


# ---- buffers shared with the kernel runner process (sandbox.py) ------------------------------------
# The judge's view of a device buffer is a NumPy array over a memfd mapping (no guard pages here: the
# kernel never runs in this process). The runner maps the same memfd between its own guard pages.
# Same layout as guarded_empty: the END of the array at the end of the data pages (16-byte rounded).
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
        m = _Mapping(fd, data_pages * PAGE, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
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
