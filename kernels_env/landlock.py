"""Confine a process's file system access with Linux Landlock (unprivileged, irreversible, inherited).

Used where a compiler opens files the submission names: the cpu backend's host compiler runs under
`restrict(read=..., write=...)` (applied in the child before exec), so an `#include "/etc/passwd"` or a
`__has_include("/home/...")` however disguised meets EACCES / "not found" in the kernel, not in a
pattern check. `restrict` returns False (and changes nothing) where Landlock is unavailable (kernel
older than 5.13, or disabled): callers keep their other layers (-H check, log redaction).
"""
from __future__ import annotations

import ctypes
import os
import platform
import struct

_NR = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1, 2, 4, 8
_FILE_BITS = EXECUTE | WRITE_FILE | READ_FILE | (1 << 14) | (1 << 15)  # + TRUNCATE, IOCTL_DEV
READ = EXECUTE | READ_FILE | READ_DIR


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 when unavailable."""
    nrs = _NR.get(platform.machine())
    if nrs is None:
        return 0
    r = _libc().syscall(ctypes.c_long(nrs[0]), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(0, int(r))


def _handled(abi: int) -> int:
    bits = (1 << 13) - 1  # ABI 1: EXECUTE .. MAKE_SYM
    if abi >= 2:
        bits |= 1 << 13  # REFER
    if abi >= 3:
        bits |= 1 << 14  # TRUNCATE
    if abi >= 5:
        bits |= 1 << 15  # IOCTL_DEV
    return bits


def restrict(read: list[str] | tuple[str, ...], write: list[str] | tuple[str, ...] = ()) -> bool:
    """Allow this process (and its children) to read/execute beneath `read` and to do anything beneath
    `write`; every other path is denied. Paths that do not exist are skipped. True when enforced."""
    abi = abi_version()
    if abi <= 0:
        return False
    libc = _libc()
    create, add, restrict_self = _NR[platform.machine()]
    handled = _handled(abi)
    attr = ctypes.create_string_buffer(struct.pack("=Q", handled))
    fd = libc.syscall(ctypes.c_long(create), attr, ctypes.c_size_t(8), ctypes.c_uint32(0))
    if fd < 0:
        return False
    try:
        for paths, access in ((read, READ), (write, handled)):
            for p in paths:
                try:
                    pfd = os.open(p, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    is_dir = os.path.isdir(p)
                    allowed = access if is_dir else access & _FILE_BITS
                    rule = ctypes.create_string_buffer(struct.pack("=Qi", allowed & handled, pfd))
                    if libc.syscall(ctypes.c_long(add), ctypes.c_int(fd), ctypes.c_int(1), rule,
                                    ctypes.c_uint32(0)) != 0:
                        return False
                finally:
                    os.close(pfd)
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            return False
        return libc.syscall(ctypes.c_long(restrict_self), ctypes.c_int(fd), ctypes.c_uint32(0)) == 0
    finally:
        os.close(fd)


# Directories a compiler needs to run (binaries, shared libraries, its own headers); none holds the
# scorer's secrets. Not /etc, /home, /root, /proc, /tmp, /work, the repository or the venv.
SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc/ld.so.cache", "/etc/alternatives")
