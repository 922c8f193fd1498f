"""The memory one compile may use, and how a compile that ran out of it is reported.

A submission whose templates or constexpr evaluation explode at compile time makes the compiler
grow without bound (3 GB resident seen on NVRTC and the host C++ compiler). Every compile of
untrusted code runs under `compile_memory_bytes()` of address space (`LEAP_COMPILE_MEMORY_BYTES`,
default 2 GiB), and running out of it is `compile_error` with a message naming the limit:
  - the cpu backend's host C++ compiler: RLIMIT_AS in the compiler's own process (`preexec_limit`);
  - NVRTC: RLIMIT_AS of the compiling process, raised by the limit over what the process already
    maps, only around the compile and only in a process marked CUDA-free (`mark_cuda_free`: pool
    compile workers and cpu-backend workers). A CUDA process reserves huge address space at any time
    (contexts, unified memory), so its address space is never capped: in-process `score` in a process
    that may hold a CUDA context compiles uncapped (docs/THREAT_MODEL.md).
"""
from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Mapping

from kernels_env.core.units import bytes_setting, describe_bytes

ENV_VAR = "LEAP_COMPILE_MEMORY_BYTES"
DEFAULT_BYTES = 2 << 30
MIN_BYTES = 64 << 20  # below this even an empty kernel does not compile
_OUT_OF_MEMORY_RE = re.compile(r"out of memory|memory exhausted|cannot allocate memory|std::bad_alloc", re.I)
_status_fd: int | None = None  # /proc/self/status, open once this process is marked CUDA-free


def compile_memory_bytes(environ: Mapping[str, str] | None = None) -> int:
    """The limit, from LEAP_COMPILE_MEMORY_BYTES (bytes) in `environ` (default os.environ), else 2 GiB.
    Raises ValueError naming a bad value."""
    return bytes_setting(ENV_VAR, DEFAULT_BYTES, MIN_BYTES, environ)


def limit_message(compiler: str, nbytes: int) -> str:
    """The compile_error line of a compile that ran out of the limit."""
    return (f"kernel.cu: error: {compiler} ran out of memory: a compile may use {describe_bytes(nbytes)} "
            f"({ENV_VAR}); look for template instantiation or constexpr evaluation that grows without bound")


def ran_out_of_memory(log: str) -> bool:
    """Whether a compiler log (NVRTC's or GCC's) says the compiler could not allocate memory."""
    return _OUT_OF_MEMORY_RE.search(log) is not None


def preexec_limit(nbytes: int) -> None:
    """Cap this process's address space at `nbytes` (call in a freshly forked compiler child)."""
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (nbytes, nbytes))


def mark_cuda_free() -> None:
    """Declare that this process never holds a CUDA context: NVRTC compiles in it are capped. Call it
    before any Landlock confinement: /proc/self/status is opened here and read through this descriptor
    (a confined compile worker may not open /proc)."""
    global _status_fd
    if _status_fd is None:
        try:
            _status_fd = os.open("/proc/self/status", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # not Linux: nothing to measure the cap from, so none
            pass


def _mapped_bytes() -> int | None:
    """VmSize of this process when it is marked CUDA-free, else None."""
    if _status_fd is None:
        return None
    try:
        for line in os.pread(_status_fd, 1 << 16, 0).decode("ascii", "replace").splitlines():
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


@contextlib.contextmanager
def capped(nbytes: int) -> Iterator[bool]:
    """Within the block, this process may map at most `nbytes` more than it does now (soft
    RLIMIT_AS, restored after). Yields whether the cap is on: only in a process marked CUDA-free."""
    base = _mapped_bytes()
    if base is None:
        yield False
        return
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = min([base + nbytes] + [v for v in (soft, hard) if v != resource.RLIM_INFINITY])
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield True
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
