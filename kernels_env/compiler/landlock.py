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


# ---- a private file system view (user + mount namespace) ------------------------------------------
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_RDONLY, MS_NOSUID, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 32, 4096, 16384, 1 << 18


def private_root(read: list[str] | tuple[str, ...], write: list[str] | tuple[str, ...], root: str) -> bool:
    """Call in a single-threaded child before exec (a preexec_fn): enter a new user and mount namespace
    whose `/` is a tmpfs (mounted on the existing empty directory `root`) holding only `read` (bound
    read-only) and `write` (bound read-write) at their own paths. Every other host path does not
    exist there: `__has_include("/etc/passwd")` is false, as for a path that is not on the host.
    False (nothing changed, or the caller should give up on the child) where user namespaces are
    unavailable."""
    libc = _libc()
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
        return False
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    mount = libc.mount
    mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
    if mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return False
    if mount(b"tmpfs", root.encode(), b"tmpfs", MS_NOSUID, b"size=1m,mode=755") != 0:
        return False
    binds: list[tuple[str, bool]] = []
    for paths, ro in ((write, False), (read, True)):
        for p in paths:
            if not p or not os.path.isabs(p) or not os.path.lexists(p):
                continue
            if os.path.islink(p):  # recreate the link; bind what it points to
                link = root + p
                try:
                    os.makedirs(os.path.dirname(link), exist_ok=True)
                    if not os.path.lexists(link):
                        os.symlink(os.readlink(p), link)
                except OSError:
                    return False
                p = os.path.realpath(p)
            binds.append((os.path.normpath(p), ro))
    done: list[str] = []
    for p, ro in sorted(binds, key=lambda b: (b[0].count("/"), b[0])):
        if any(p == d or p.startswith(d.rstrip("/") + "/") for d in done):
            continue  # under a directory already bound
        target = root + p
        try:
            if os.path.isdir(p):
                os.makedirs(target, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                open(target, "a").close()
        except OSError:
            return False
        if mount(p.encode(), target.encode(), None, MS_BIND | (MS_REC if ro else 0), None) != 0:
            return False
        if ro:
            mount(None, target.encode(), None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID, None)
        done.append(p)
    os.chroot(root)
    os.chdir("/")
    return True
