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
              "-fstack-clash-protection", "-fmax-errors=20", "-w", "-pthread")


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
        cmd = [exe, *fl, "-I", str(HERE), "-o", tmp_out, src]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise BuildError(f"the cpu backend's C++ build took longer than {timeout_s:g} s") from None
        if proc.returncode != 0:
            raise BuildError(clean_log(proc.stderr or proc.stdout, src))
        os.replace(tmp_out, out)
        return out
    finally:
        for p in (src, tmp_out):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
