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

from kernels_env.compiler import landlock, memory_cap

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


class BuildLimitError(BuildError):
    """The host compiler ran out of the memory a compile may use (build.memory_cap); `log` names it."""


def _failed(log: str, src: str, limit: int) -> BuildError:
    """The error of a failed compile: out of the memory limit (named), else the cleaned log."""
    if memory_cap.ran_out_of_memory(log):
        return BuildLimitError(memory_cap.limit_message("the host C++ compiler", limit))
    return BuildError(clean_log(log, src))


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


def _compiler_paths(exe: str) -> tuple[list[str], list[str]]:
    """(read-only, read-write) paths the host compiler may open: the system's binaries, libraries and
    headers, the backend's headers, the compiler's own directories; the build cache and /dev/null."""
    exe_dirs = {os.path.dirname(exe), os.path.dirname(os.path.realpath(exe))}
    read = [*landlock.SYSTEM_READ, str(HERE), *system_include_dirs(exe), *sorted(exe_dirs)]
    return read, [str(cache_dir()), os.devnull]


def _limit_compiler(timeout_s: float, exe: str | None, as_bytes: int):
    """preexec_fn bounding the host compiler's address space (`as_bytes`, build.memory_cap) and CPU
    time (template bombs) and, where Landlock is available, the files it can open (includes of host
    paths fail inside the kernel). Where user namespaces work it also runs in a private root holding
    only those paths, so `__has_include` of any other host path is false (Landlock alone answers
    EACCES, which GCC turns into an error: one bit). LEAP_CPU_LANDLOCK=0 / LEAP_CPU_PRIVATE_ROOT=0 turn these off."""
    paths = _compiler_paths(exe) if exe and os.environ.get("LEAP_CPU_LANDLOCK", "1") != "0" else None
    root = None
    if paths is not None and os.environ.get("LEAP_CPU_PRIVATE_ROOT", "1") != "0":
        root = str(cache_dir() / ".root")
        os.makedirs(root, exist_ok=True)

    def limit() -> None:
        import resource
        if root is not None and paths is not None:  # a file system holding only the allowed paths
            # (where namespaces work; root is set only with paths)
            landlock.private_root(*paths, root=root)
        memory_cap.preexec_limit(as_bytes)
        cpu = int(timeout_s) + 5
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
        if paths is not None:
            landlock.restrict(*paths)
    return limit


def _compiler_env() -> dict[str, str]:
    env = dict(os.environ)
    env["TMPDIR"] = str(cache_dir())  # the driver's temporary files stay where it may write
    return env


# ---- what the user's code may link against -------------------------------------------------------
# NVRTC sees the device side only: code under `#ifdef __x86_64__` (true for the host compiler, false
# for NVRTC) reaches the host compiler unchecked. So the user's part of the translation unit (the
# prelude and the user's code, without the runtime) is compiled on its own and its undefined symbols
# must be ones the prelude itself needs, libm's, or a few harmless libc functions; and it may not
# add static initialisers (code that would run when the shared object is loaded).
_LIBC_OK = frozenset({
    "memcpy", "memset", "memmove", "memcmp", "strlen", "printf", "snprintf", "puts", "putchar", "vprintf",
    "__printf_chk", "__memcpy_chk", "__memset_chk", "__assert_fail", "__stack_chk_fail", "abort",
    "__cxa_guard_acquire", "__cxa_guard_release", "__cxa_guard_abort", "__dso_handle",
    "_GLOBAL_OFFSET_TABLE_", "__gxx_personality_v0", "_Unwind_Resume", "__tls_get_addr",
})


CHECKS = "headers+symbols2+landlock"


class SymbolError(BuildError):
    """The user's code uses a host function (or a load-time initialiser) device code cannot have."""


def _tool(name: str) -> str | None:
    return shutil.which(name)


def _required_tool(name: str) -> str:
    """The path of a binutils tool; callers run only where check_user_symbols found them."""
    path = _tool(name)
    if path is None:
        raise FileNotFoundError(f"{name} is not on PATH")
    return path


def _undefined_and_init(obj: str) -> tuple[set[str], bool]:
    nm, readelf = _required_tool("nm"), _required_tool("readelf")
    out = subprocess.run([nm, "-u", "--format=posix", obj], capture_output=True, text=True, timeout=60).stdout
    syms = {ln.split()[0].split("@")[0] for ln in out.splitlines() if ln.strip()}
    sections = subprocess.run([readelf, "-S", "-W", obj], capture_output=True, text=True, timeout=60).stdout
    init = any(k in sections for k in (".init_array", ".ctors", ".preinit_array"))
    return syms, init


@functools.lru_cache(maxsize=4)
def _libm_symbols() -> frozenset:
    import ctypes.util
    names: set[str] = set()
    for lib in ("m",):
        path = ctypes.util.find_library(lib)
        for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"):
            cand = os.path.join(d, path or "")
            if path and os.path.exists(cand):
                out = subprocess.run([_required_tool("nm"), "-D", "--defined-only", "--format=posix", cand],
                                     capture_output=True, text=True, timeout=60).stdout
                names |= {ln.split()[0].split("@")[0] for ln in out.splitlines() if ln.strip()}
                break
    return frozenset(names)


def _user_object(exe: str, fl: list[str], source: str, d: Path, tag: str) -> str:
    fd, src = tempfile.mkstemp(prefix=f"u_{tag}_", suffix=".cpp", dir=d)
    obj = src[:-4] + ".o"
    with os.fdopen(fd, "w") as f:
        f.write(source)
    # -O0 (fast); -fkeep-inline-functions: every inline function of the prelude is emitted in the
    # baseline too, so what the prelude itself calls (malloc in device_malloc, snprintf) is allowed
    cflags = [("-O0" if re.fullmatch(r"-O[0-3sg]?", f) else f) for f in fl if f != "-shared"]
    cflags.append("-fkeep-inline-functions")
    limit = memory_cap.compile_memory_bytes()
    try:
        proc = subprocess.run([exe, *cflags, "-c", "-I", str(HERE), "-o", obj, src], capture_output=True,
                              text=True, timeout=120, preexec_fn=_limit_compiler(120, exe, limit),
                              env=_compiler_env())
        if proc.returncode != 0:
            raise _failed(proc.stderr, src, limit)
        return obj
    finally:
        os.unlink(src)


@functools.lru_cache(maxsize=4)
def _baseline(exe: str, fl: tuple[str, ...]) -> tuple[frozenset, bool]:
    d = cache_dir()
    obj = _user_object(exe, list(fl), '#include "cuda_prelude.h"\nstatic void k(float* y) { y[0] = 1.0f; }\n'
                       "void* __k = (void*)&k;\n", d, "base")
    try:
        syms, init = _undefined_and_init(obj)
    finally:
        os.unlink(obj)
    return frozenset(syms), init


def check_user_symbols(user_cpp: str, exe: str, fl: list[str]) -> None:
    """Raise SymbolError when the user's part links to a host function outside the allow-list or
    adds a load-time initialiser. No-op where binutils (nm, readelf) are missing."""
    if not (_tool("nm") and _tool("readelf")):
        return
    base, base_init = _baseline(exe, tuple(fl))
    d = cache_dir()
    obj = _user_object(exe, fl, user_cpp, d, hashlib.sha256(user_cpp.encode()).hexdigest()[:16])
    try:
        syms, init = _undefined_and_init(obj)
    finally:
        os.unlink(obj)
    extra = sorted(s for s in syms - base - _libm_symbols() - _LIBC_OK if not s.startswith("_ZN5__cpu"))
    if extra:
        raise SymbolError("kernel.cu: error: the code calls host functions that device code cannot call: "
                          + ", ".join(extra[:8]) + (" ..." if len(extra) > 8 else ""))
    if init and not base_init:
        raise SymbolError("kernel.cu: error: the code has static initialisers (code run when the module "
                          "loads: global objects with constructors, __attribute__((constructor))); "
                          "device code cannot have them")


def build(cpp: str, compiler: str = "c++", opt_level: str = "-O1", timeout_s: float = 60.0,
          extra_flags: tuple[str, ...] = (), user_cpp: str | None = None) -> Path:
    """Return the path of a shared object built from `cpp` (from the cache when present).

    Raises BuildError for code the compiler rejects; RuntimeError when the compiler is missing.
    """
    exe = shutil.which(compiler)
    if exe is None:
        raise RuntimeError(f"cpu backend: C++ compiler {compiler!r} not found on PATH "
                           "(set EnvConfig.cpu_compiler)")
    fl = flags(opt_level, extra_flags)
    # (CHECKS names the checks a cached object has passed: objects built before them are not reused)
    confine = os.environ.get("LEAP_CPU_LANDLOCK", "1") + os.environ.get("LEAP_CPU_PRIVATE_ROOT", "1")
    key = hashlib.sha256("\0".join([exe, *fl, _headers_digest(), CHECKS, confine, cpp]).encode()).hexdigest()[:40]
    d = cache_dir()
    out = d / f"k_{key}.so"
    if out.exists():
        return out
    if user_cpp is not None:  # before the real build: nothing of it is cached when refused
        check_user_symbols(user_cpp, exe, fl)
    fd, src = tempfile.mkstemp(prefix=f"k_{key}_", suffix=".cpp", dir=d)
    tmp_out = f"{src[:-4]}.so.tmp"
    try:
        with os.fdopen(fd, "w") as f:
            f.write(cpp)
        # -H: the compiler lists every file it opens; a file outside the allowed directories (an
        # #include the NVRTC-side check missed) fails the build with its log withheld.
        cmd = [exe, *fl, "-H", "-I", str(HERE), "-o", tmp_out, src]
        limit = memory_cap.compile_memory_bytes()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                                  preexec_fn=_limit_compiler(timeout_s, exe, limit), env=_compiler_env())
        except subprocess.TimeoutExpired:
            raise BuildError(f"the cpu backend's C++ build took longer than {timeout_s:g} s") from None
        opened, log = opened_headers(proc.stderr or "")
        foreign = foreign_headers(opened, exe)
        if foreign:
            raise BuildError("kernel.cu: error: the code includes a file that is not one of the allowed "
                             "headers (the compiler log is withheld)")
        if proc.returncode != 0:
            raise _failed(log or proc.stdout, src, limit)
        os.replace(tmp_out, out)
        return out
    finally:
        for p in (src, tmp_out):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
