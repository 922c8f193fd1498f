"""Build translated device code into a shared object with the system C++ compiler, cached by content.

The cache key hashes the translated source, both headers, the compiler and its flags, so repeated
evaluations of the same submission (trials, timing, other tasks' workers) never rebuild. Objects are
written under a temporary name and renamed into place, so concurrent workers can share the cache.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
HEADERS = ("cuda_prelude.h", "cpu_runtime.h")
# -fwrapv: signed overflow wraps as GPUs do; -fno-strict-aliasing: kernels pun pointers freely
# (reinterpret_cast<float4*>); -U_FORTIFY_SOURCE: the runtime longjmps off fiber stacks;
# -fstack-clash-protection: big local arrays touch every page, so an overflow hits the fiber's guard page.
BASE_FLAGS = ("-std=c++17", "-fPIC", "-shared", "-fwrapv", "-fno-strict-aliasing", "-fno-exceptions",
              "-fno-rtti", "-fvisibility=hidden", "-fno-ipa-reference", "-U_FORTIFY_SOURCE",
              "-fstack-clash-protection", "-fmax-errors=20", "-w", "-pthread",
              # a load/store through a misaligned pointer (float4 at a non-16-byte address) traps
              # (SIGILL -> runtime_error), as it faults on a GPU
              "-fsanitize=alignment", "-fsanitize-undefined-trap-on-error")


class BuildError(Exception):
    """The host compiler rejected the translated code; `log` is cleaned (kernel.cu:LINE messages)."""

    def __init__(self, log: str) -> None:
        super().__init__(log)
        self.log = log


def cache_dir() -> Path:
    """$LEAP_CPU_CACHE_DIR, else a per-user directory under the system temp dir."""
    d = os.environ.get("LEAP_CPU_CACHE_DIR") or os.path.join(
        tempfile.gettempdir(), f"leap_cpu_kernels_{os.getuid() if hasattr(os, 'getuid') else 'u'}")
    p = Path(d)
    p.mkdir(parents=True, exist_ok=True)
    return p


@functools.lru_cache(maxsize=1)
def _headers_digest() -> str:
    h = hashlib.sha256()
    for name in HEADERS:
        h.update((HERE / name).read_bytes())
    return h.hexdigest()


def flags(opt_level: str, extra: tuple[str, ...] = ()) -> list[str]:
    if not re.fullmatch(r"-O[0-3sg]?", opt_level):
        raise ValueError(f"cpu_opt_level={opt_level!r}; expected one of -O0, -O1, -O2, -O3, -Os, -Og")
    return [*BASE_FLAGS, opt_level, *extra]


def clean_log(log: str, src_path: str, max_chars: int = 4000) -> str:
    """Strip temporary and package paths from a compiler log and bound its length."""
    log = log.replace(src_path, "kernel.cpp").replace(str(HERE) + os.sep, "")
    log = re.sub(r"(?:/tmp|/var/tmp)/\S*?([A-Za-z0-9_.-]+\.(?:cpp|cu|h|so))", r"\1", log)
    log = log.strip()
    if len(log) > max_chars:
        log = log[:max_chars] + f"\n... [{len(log) - max_chars} more characters cut]"
    return log


@functools.lru_cache(maxsize=8)
def system_include_dirs(exe: str) -> tuple[str, ...]:
    """The compiler's own header directories (`c++ -v -E`), real paths."""
    try:
        proc = subprocess.run([exe, "-std=c++17", "-x", "c++", "-E", "-v", os.devnull], capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    dirs, on = [], False
    for ln in proc.stderr.splitlines():
        if ln.startswith("#include <...> search starts here") or ln.startswith('#include "..." search starts here'):
            on = True
        elif ln.startswith("End of search list"):
            on = False
        elif on and ln.startswith(" "):
            dirs.append(os.path.realpath(ln.strip().split(" (")[0]))
    return tuple(dirs)


def opened_headers(stderr: str) -> tuple[list[str], str]:
    """(headers the compiler opened, per `-H`, the log without those lines)."""
    opened, rest, guards = [], [], False
    for ln in stderr.splitlines():
        m = re.match(r"^\.+ (\S.*)$", ln)
        if m:
            opened.append(m.group(1))
        elif ln.startswith("Multiple include guards may be useful for:"):
            guards = True
        elif guards and ln.startswith("/"):
            continue
        else:
            guards = False
            rest.append(ln)
    return opened, "\n".join(rest)


def foreign_headers(opened: list[str], exe: str) -> list[str]:
    """Opened headers outside the backend's own directory and the compiler's system directories."""
    allowed = tuple(d.rstrip("/") + "/" for d in (str(HERE), *system_include_dirs(exe)))
    return [h for h in opened if not os.path.realpath(h).startswith(allowed)]


COMPILER_AS_BYTES = int(os.environ.get("LEAP_CPU_COMPILER_AS_BYTES", 4 << 30))


def _limit_compiler(timeout_s: float):
    """preexec_fn bounding the host compiler's address space and CPU time (template bombs)."""
    def limit() -> None:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (COMPILER_AS_BYTES, COMPILER_AS_BYTES))
        cpu = int(timeout_s) + 5
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    return limit


def build(cpp: str, compiler: str = "c++", opt_level: str = "-O1", timeout_s: float = 60.0,
          extra_flags: tuple[str, ...] = ()) -> Path:
    """Return the path of a shared object built from `cpp` (from the cache when present).

    Raises BuildError for code the compiler rejects; RuntimeError when the compiler is missing.
    """
    exe = shutil.which(compiler)
    if exe is None:
        raise RuntimeError(f"cpu backend: C++ compiler {compiler!r} not found on PATH "
                           "(set EnvConfig.cpu_compiler)")
    fl = flags(opt_level, extra_flags)
    key = hashlib.sha256("\0".join([exe, *fl, _headers_digest(), cpp]).encode()).hexdigest()[:40]
    d = cache_dir()
    out = d / f"k_{key}.so"
    if out.exists():
        return out
    fd, src = tempfile.mkstemp(prefix=f"k_{key}_", suffix=".cpp", dir=d)
    tmp_out = f"{src[:-4]}.so.tmp"
    try:
        with os.fdopen(fd, "w") as f:
            f.write(cpp)
        # -H: the compiler lists every file it opens; a file outside the allowed directories (an
        # #include the NVRTC-side check missed) fails the build with its log withheld.
        cmd = [exe, *fl, "-H", "-I", str(HERE), "-o", tmp_out, src]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                                  preexec_fn=_limit_compiler(timeout_s))
        except subprocess.TimeoutExpired:
            raise BuildError(f"the cpu backend's C++ build took longer than {timeout_s:g} s") from None
        opened, log = opened_headers(proc.stderr or "")
        foreign = foreign_headers(opened, exe)
        if foreign:
            raise BuildError("kernel.cu: error: the code includes a file that is not one of the allowed "
                             "headers (the compiler log is withheld)")
        if proc.returncode != 0:
            raise BuildError(clean_log(log or proc.stdout, src))
        os.replace(tmp_out, out)
        return out
    finally:
        for p in (src, tmp_out):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
