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

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
libc.prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
MAP_FAILED = ctypes.c_void_p(-1).value

# x86_64 syscall numbers answered with EPERM once the kernel code may run: files and paths, processes,
# sockets, tracing, io_uring/bpf/perf, mounts and namespaces, keys
DENIED_X86_64 = (
    2, 4, 6, 21, 41, 42, 43, 49, 50, 53, 56, 57, 58, 59, 76, 78, 80, 82, 83, 84, 85, 86, 87, 88, 89, 90,
    92, 94, 101, 133, 134, 135, 137, 161, 165, 166, 169, 175, 176, 179, 200, 217, 248, 249, 250, 254,
    257, 258, 259, 260, 261, 262, 263, 264, 265, 266, 267, 268, 269, 272, 288, 298, 300, 301, 303, 304,
    308, 310, 311, 313, 316, 321, 322, 332, 424, 425, 426, 427, 428, 429, 430, 432, 433, 434, 435, 437,
    438, 439, 442,
    77, 285,  # ftruncate, fallocate: a shared buffer must keep its size (the judge maps it too)
    # calls that act on ANOTHER process of this uid (the judge): rlimits, priority, scheduling,
    # signals with a payload, robust lists, page migration, kcmp; and SysV / POSIX IPC, the kernel log
    302, 140, 141, 142, 144, 203, 251, 314, 256, 279, 274, 312, 129, 297,
    29, 30, 31, 64, 65, 66, 67, 68, 69, 70, 71, 220, 240, 241, 242, 243, 244, 245, 103)
SIGNAL_SELF_ONLY = (62, 234)  # kill(pid, ..), tgkill(tgid, ..): only this process


def seccomp_filter() -> bytes:
    """A classic-BPF seccomp program: other architectures and x32 calls get EPERM; DENIED_X86_64
    get EPERM; kill/tgkill only with this process's pid; everything else is allowed."""
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
    for nr in DENIED_X86_64:
        op(jeq, nr, 0, 1)
        op(ret, eperm)
    op(jeq, SIGNAL_SELF_ONLY[0], 2, 0)
    op(jeq, SIGNAL_SELF_ONLY[1], 1, 0)
    op(ret, allow)
    op(ld, 16)                     # args[0], low 32 bits
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
        self.live = {}  # key -> (base, total, start, nbytes)

    def add(self, key, fd, data_pages, offset, nbytes) -> None:
        total = (1 + data_pages + TRAIL_PAGES) * PAGE
        base = libc.mmap(None, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
        try:
            if base in (None, MAP_FAILED):
                raise MemoryError("cannot reserve a device buffer")
            r = libc.mmap(base + PAGE, data_pages * PAGE, PROT_RW, MAP_SHARED | MAP_FIXED, fd, 0)
            if r != base + PAGE:
                libc.munmap(base, total)
                raise MemoryError("cannot map a device buffer")
        finally:
            os.close(fd)
        self.live[key] = (base, total, base + PAGE + offset, nbytes)

    def free(self, key) -> None:
        ent = self.live.pop(key, None)
        if ent:
            libc.munmap(ent[0], ent[1])

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
    run = None
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
            for (key, data_pages, offset, nbytes), fd in zip(req.get("bufs", ()), fds):
                bufs.add(key, fd, data_pages, offset, nbytes)
            cells = []
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
