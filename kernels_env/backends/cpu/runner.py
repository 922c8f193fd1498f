"""The cpu backend's kernel runner: a separate process that runs a submission's native code.

Started by `kernels_env.backends.cpu.sandbox.Runner` as `python -I -S runner.py FD` (standard library
only: no numpy, no kernels_env, no environment variables of the judge). It holds nothing the verdict
depends on: no pristine inputs, no expected outputs, no harness. The judge sends it, over a
SOCK_SEQPACKET socket, the shared object to load, the device buffers (memfds, which it maps between
PROT_NONE guard pages) and launches; it answers each launch with the runtime's code, message, the
nearest buffer to a faulting address and the CPU time used. After loading the shared object it drops
what a kernel could use to reach the host: a seccomp filter (x86_64) answers EPERM to opening files,
stat/readlink, sockets, fork/exec, ptrace, io_uring and signals to other processes.

Whatever the kernel does here (patch this loop, stop the hang timer, forge an answer, write any
buffer) can only change the bytes of the buffers the judge gave it, which the judge checks against
its own copies, or make this process hang or die, which the judge turns into timeout/runtime_error.
"""
import ctypes
from collections.abc import Callable
import json
import os
import platform
import socket
import struct
import sys
import time

PAGE = os.sysconf("SC_PAGE_SIZE")
TRAIL_PAGES = 16
MSG_LEN = 512
PROT_NONE, PROT_RW = 0, 3
MAP_SHARED, MAP_PRIVATE, MAP_FIXED, MAP_ANONYMOUS, MAP_NORESERVE = 0x01, 0x02, 0x10, 0x20, 0x4000
MAP_FIXED_NOREPLACE = 0x100000
# Every buffer gets a slot of its own in an arena far below where mmap puts anything else (it
# allocates top-down from below the stack, near 0x7f..): SLOT_BYTES apart, with nothing mapped in
# between. A write or read up to SLOT_REACH bytes before or after a buffer (any 32-bit index of
# 16-byte elements reaches 32 GiB) lands in unmapped memory and faults, as far writes do on a GPU,
# instead of landing in another buffer or the runner's own memory. Buffers larger than SLOT_REACH
# (or an arena that cannot be mapped) go where mmap puts them, behind their guard pages only.
ARENA_BASE = 0x100000000000  # 16 TiB
SLOT_BYTES = 1 << 38  # 256 GiB
SLOT_REACH = 1 << 36  # the buffer sits this far into its slot; at most this long
ARENA_SLOTS = 256  # 64 TiB of address space, none of it mapped but the buffers

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
libc.prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
MAP_FAILED = ctypes.c_void_p(-1).value

# x86_64 system calls the runner may make once the kernel code may run (an allow-list: everything
# else answers EPERM): memory, its own signals and timers, the socket to the judge, clocks, sleeping,
# identity queries, exit. Nothing that names a path, makes a process, thread or socket, or acts on
# another process.
ALLOWED_X86_64 = (
    0, 1, 3, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17, 18, 19, 20, 24, 25, 26, 27, 28, 35, 36, 37, 38, 39,
    44, 45, 46, 47, 48, 51, 52, 55, 60, 63, 72, 79, 96, 97, 98, 99, 100, 102, 104, 107, 108, 110, 111,
    131, 158, 186, 201, 202, 204, 218, 219, 222, 223, 224, 225, 226, 228, 229, 230, 231, 273, 318, 334)
SELF_ONLY = (62, 234, 302)  # kill(pid, ..), tgkill(tgid, ..), prlimit64(pid, ..): this process (or 0) only


def seccomp_filter() -> bytes:
    """A classic-BPF seccomp program: other architectures and x32 calls get EPERM; ALLOWED_X86_64 are
    allowed; SELF_ONLY are allowed when their first argument is this process's pid (prlimit64 also 0);
    everything else gets EPERM."""
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, eperm = 0x7FFF0000, 0x00050000 | 1
    ins = []

    def op(code, k, jt=0, jf=0):
        ins.append(struct.pack("=HBBI", code, jt, jf, k))

    op(ld, 4)                      # seccomp_data.arch
    op(jeq, 0xC000003E, 1, 0)      # AUDIT_ARCH_X86_64
    op(ret, eperm)
    op(ld, 0)                      # seccomp_data.nr
    op(jge, 0x40000000, 0, 1)      # x32 ABI
    op(ret, eperm)
    for nr in ALLOWED_X86_64:
        op(jeq, nr, 0, 1)
        op(ret, allow)
    op(jeq, SELF_ONLY[0], 3, 0)    # kill, tgkill -> CHECK_PID
    op(jeq, SELF_ONLY[1], 2, 0)
    op(jeq, SELF_ONLY[2], 3, 0)    # prlimit64 -> CHECK_ZERO
    op(ret, eperm)
    op(ld, 16)                     # CHECK_PID: args[0], low 32 bits
    op(jeq, os.getpid(), 3, 4)     # -> allow / -> eperm
    op(ld, 16)                     # CHECK_ZERO
    op(jeq, 0, 1, 0)               # pid 0: this process
    op(jeq, os.getpid(), 0, 1)
    op(ret, allow)
    op(ret, eperm)
    return b"".join(ins)


def install_seccomp() -> bool:
    if platform.machine() != "x86_64":
        return False
    prog = seccomp_filter()
    n = len(prog) // 8
    buf = ctypes.create_string_buffer(prog)
    fprog = struct.pack("=HxxxxxxQ", n, ctypes.addressof(buf))
    fbuf = ctypes.create_string_buffer(fprog)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return False
    return libc.prctl(22, 2, ctypes.addressof(fbuf), 0, 0) == 0  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER


class Buffers:
    """Judge buffers mapped here: [guard page][data pages (the memfd)][TRAIL_PAGES guard pages]."""

    def __init__(self) -> None:
        self.live: dict[str, tuple[int, int, int, int]] = {}  # key -> (base, total, start, nbytes)
        self.slots: dict[str, int] = {}  # key -> its arena slot
        self.free_slots = list(range(ARENA_SLOTS - 1, -1, -1))

    def _reserve(self, key, total: int) -> int | None:
        """A PROT_NONE reservation of `total` bytes: in a free arena slot where one fits, else anywhere."""
        flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE
        while total <= SLOT_REACH and self.free_slots:
            slot = self.free_slots.pop()
            want = ARENA_BASE + slot * SLOT_BYTES + SLOT_REACH
            got = libc.mmap(want, total, PROT_NONE, flags | MAP_FIXED_NOREPLACE, -1, 0)
            if got == want:
                self.slots[key] = slot
                return got
            if got not in (None, MAP_FAILED):  # a kernel without MAP_FIXED_NOREPLACE: took it as a hint
                libc.munmap(got, total)
                break
        return libc.mmap(None, total, PROT_NONE, flags, -1, 0)

    def add(self, key, fd, data_pages, offset, nbytes) -> None:
        total = (1 + data_pages + TRAIL_PAGES) * PAGE
        base = self._reserve(key, total)
        try:
            if base in (None, MAP_FAILED):
                raise MemoryError("cannot reserve a device buffer")
            r = libc.mmap(base + PAGE, data_pages * PAGE, PROT_RW, MAP_SHARED | MAP_FIXED, fd, 0)
            if r != base + PAGE:
                libc.munmap(base, total)
                self._release_slot(key)
                raise MemoryError("cannot map a device buffer")
        finally:
            os.close(fd)
        self.live[key] = (base, total, base + PAGE + offset, nbytes)

    def free(self, key) -> None:
        ent = self.live.pop(key, None)
        if ent:
            libc.munmap(ent[0], ent[1])
        self._release_slot(key)

    def _release_slot(self, key) -> None:
        slot = self.slots.pop(key, None)
        if slot is not None:
            self.free_slots.append(slot)

    def describe(self, addr: int) -> str:
        best = None
        for base, total, start, nbytes in self.live.values():
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


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    bufs = Buffers()
    run: Callable[..., int] | None = None  # the loaded library's __cpu_launch
    entries = {}
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, 256)
        except OSError:
            return
        if not data:
            return
        req = json.loads(data)
        fds = list(fds)
        op = req["op"]
        if op == "load":
            try:
                lib = ctypes.CDLL(req["path"])
                run = lib["__cpu_launch"]
                missing = [k for k in req["kernels"] if not hasattr(lib, f"__cpu_entry_{k}")]
                entries = {k: ctypes.cast(getattr(lib, f"__cpu_entry_{k}"), ctypes.c_void_p).value
                           for k in req["kernels"] if k not in missing}
            except (OSError, AttributeError) as e:
                sock.send(json.dumps({"ok": False, "error": type(e).__name__}).encode())
                continue
            run.restype = ctypes.c_int
            run.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int,
                            ctypes.c_int, ctypes.c_double, ctypes.c_char_p, ctypes.c_int,
                            ctypes.POINTER(ctypes.c_ulonglong))
            confined = install_seccomp() if req.get("seccomp", True) else False
            sock.send(json.dumps({"ok": True, "missing": missing, "seccomp": confined}).encode())
        elif op == "launch":
            for key in req.get("free", ()):
                bufs.free(key)
            for (key, data_pages, offset, nbytes), fd in zip(req.get("bufs", ()), fds, strict=False):
                bufs.add(key, fd, data_pages, offset, nbytes)
            cells: list[ctypes.c_uint64 | ctypes.Array[ctypes.c_char]] = []
            for a in req["args"]:
                if a[0] == "b":
                    cells.append(ctypes.c_uint64(bufs.live[a[1]][2] + a[2]))
                elif a[0] == "n":
                    cells.append(ctypes.c_uint64(0))
                else:
                    cells.append(ctypes.create_string_buffer(bytes.fromhex(a[1]), max(8, len(a[1]) // 2)))
            ptrs = (ctypes.c_void_p * max(1, len(cells)))(*[ctypes.addressof(c) for c in cells])
            dims = (ctypes.c_longlong * 6)(*req["dims"])
            msg = ctypes.create_string_buffer(MSG_LEN)
            addr = ctypes.c_ulonglong(0)
            assert run is not None, "a launch before any load"  # the device loads a module first
            t0 = time.thread_time_ns()
            code = run(entries[req["kernel"]], ptrs, dims, req["shared"], req["sync"], req["order"],
                       req["timeout"], msg, MSG_LEN, ctypes.byref(addr))
            cpu_ns = time.thread_time_ns() - t0
            near = bufs.describe(addr.value) if code == 1 else ""
            sock.send(json.dumps({"code": code, "msg": msg.value.decode(errors="replace"), "near": near,
                                  "cpu_ns": cpu_ns}).encode())
        elif op == "exit":
            return


if __name__ == "__main__":
    main()
