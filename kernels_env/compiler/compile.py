"""Compile device code with NVRTC through CuPy's bindings (DESIGN 3.3 step 2); no GPU needed.

`compile_cuda` returns a real cubin for `arch` plus per-kernel resources parsed from the ptxas
verbose log. Policy errors raise `CompileError` with a cleaned, bounded log (the source is always
called `kernel.cu`; header directories are shortened to `<cuda>/`). Environment failures (NVRTC
missing, a bad option) raise RuntimeError: they are not the policy's fault.
"""
from __future__ import annotations

import os
import re
import time

from kernels_env.core.config import EnvConfig
from kernels_env.core.program import CompiledModule
from kernels_env.core.result import KernelResources
from kernels_env.compiler import memory_cap
from kernels_env.compiler.cuda_headers import cuda_include_dirs
from kernels_env.compiler.std_prelude import PRELUDE_NAME, STD_HEADERS, nvrtc_headers
from kernels_env.source.signatures import find_kernels
from kernels_env.source.source_text import directives, strip_comments

SOURCE_NAME = "kernel.cu"
DEFAULT_ARCH = "sm_90"
_ARCH_RE = re.compile(r"^sm_\d{2,3}[a-z]?$")


class CompileError(Exception):
    """The device code does not compile (status `compile_error`); `log` is the cleaned compiler log."""

    def __init__(self, log: str) -> None:
        super().__init__(log)
        self.log = log


_INCLUDE_DIRECTIVES = frozenset({"include", "include_next", "import", "embed"})
_INCLUDE_RE = re.compile(r"^[ \t]*(?:#|%:)[ \t]*include(?:_next)?\b(.*)$", re.M)
_HEADER_RE = re.compile(r"^\s*(?:<([^<>\n]+)>|\"([^\"\n]+)\")\s*$")


def check_includes(source: str) -> None:
    """Allow only `#include`s of headers that ship with CUDA (found under `cuda_include_dirs()`).

    Untrusted code must not read other files of the machine through the preprocessor (their
    contents would come back in the compiler log). Raises CompileError naming the line."""
    allowed = cuda_include_dirs()
    for line, directive, rest in directives(source):
        if directive not in _INCLUDE_DIRECTIVES:
            continue
        h = _HEADER_RE.match(rest)
        name = (h.group(1) or h.group(2)).strip() if h else None
        if name in STD_HEADERS:  # provided by the std prelude on every backend
            continue
        ok = (name is not None and not name.startswith(("/", "~")) and ".." not in name.split("/")
              and re.fullmatch(r"[A-Za-z0-9_./+-]+", name) is not None
              and any(os.path.isfile(os.path.join(d, name)) for d in allowed))
        if not ok:
            shown = redact_paths(rest.strip() or "(nothing)")[:80]
            form = "" if directive == "include" else f"(#{directive}) "
            raise CompileError(f"{SOURCE_NAME}({line}): error: #include {form}{shown} is not allowed: only headers "
                               "that ship with CUDA may be included (e.g. <cuda_fp16.h>, <cuda_bf16.h>, "
                               "<mma.h>, <cooperative_groups.h>) and " + ", ".join(f"<{h}>" for h in STD_HEADERS))


_HAS_INCLUDE_RE = re.compile(r"\b__has_include(?:_next)?\b")
_HAS_INCLUDE_ARG_RE = re.compile(r"[ \t]*\([ \t]*(?:<([^<>\n()]{1,200})>|\"([^\"\n]{1,200})\")[ \t]*\)")


def _header_allowed(name: str | None) -> bool:
    if name is None:
        return False
    if name in STD_HEADERS:
        return True
    return (not name.startswith(("/", "~")) and ".." not in name.split("/")
            and re.fullmatch(r"[A-Za-z0-9_./+-]+", name) is not None
            and any(os.path.isfile(os.path.join(d, name)) for d in cuda_include_dirs()))


def check_has_include(source: str) -> None:
    """`__has_include` may only ask about a header #include would allow: asking about any other path
    answers whether it exists on the scoring machine. (Defence in depth: pool compile workers and the
    cpu backend's compiler cannot see host paths at all, kernels_env.compiler.landlock.)"""
    code = strip_comments(source.replace("\\\r\n", "").replace("\\\n", ""))
    blank = strip_comments(code, blank_literals=True)  # same offsets; finds the name outside literals
    for m in _HAS_INCLUDE_RE.finditer(blank):
        a = _HAS_INCLUDE_ARG_RE.match(code, m.end())
        if not a or not _header_allowed((a.group(1) or a.group(2) or "").strip()):
            line = code.count("\n", 0, m.start()) + 1
            shown = redact_paths(code[m.start():m.start() + 60].split("\n", 1)[0])
            raise CompileError(f"{SOURCE_NAME}({line}): error: {shown} is not allowed: __has_include may "
                               "only name a header that #include allows (CUDA's headers and "
                               + ", ".join(f"<{h}>" for h in STD_HEADERS) + ")")


def nvrtc_options(arch: str) -> list[str]:
    # (not --no-source-include: CUDA's own headers include their siblings with quotes, e.g. mma.hpp)
    opts = ["-std=c++17", f"--gpu-architecture={arch}", "--ptxas-options=-v"]
    opts += [f"--include-path={d}" for d in cuda_include_dirs()]
    return opts


# An absolute path: a '/' not inside a word or a relative path, then at least two path components.
_ABS_PATH_RE = re.compile(r"(?<![\w.~/<>-])/(?:[\w.+@=,-]+/)+[\w.+@=,-]*")


def redact_paths(text: str) -> str:
    """Every absolute host path replaced by `<path>/<file name>` (CUDA headers are `<cuda>/...`):
    messages the policy sees never show the machine's directories, whoever wrote the path."""
    if "/" not in text:
        return text
    return _ABS_PATH_RE.sub(lambda m: "<path>/" + m.group().rstrip("/").rsplit("/", 1)[-1], text)


def log_mentions_foreign_file(log: str) -> bool:
    """Whether a compiler log has a diagnostic located in a file other than the submission, the
    prelude, the in-memory standard headers and CUDA's own headers (then it may quote that file)."""
    for m in re.finditer(r"^(?:In file included from )?(.+?)\(\d+\)(?::|,)", log, re.M):
        where = m.group(1).strip()
        if where in (SOURCE_NAME, PRELUDE_NAME) or where in STD_HEADERS:
            continue
        if any(where.startswith(d.rstrip("/") + "/") for d in cuda_include_dirs()):
            continue
        return True
    return False


def clean_log(log: str, max_chars: int) -> str:
    """Strip temporary paths and header directories; keep the start (the first errors), bounded."""
    for d in cuda_include_dirs():
        log = log.replace(d.rstrip("/") + "/", "<cuda>/")
    log = re.sub(r"(?:/tmp|/var/tmp)/[^\s():\"']*?([A-Za-z0-9_.-]+\.(?:cu|cuh|h|hpp))", r"\1", log)
    log = re.sub(r"(?:/tmp|/var/tmp)/[^\s():\"']+", "<tmp>", log)
    log = redact_paths(log.replace("\r", "").strip())
    if len(log) > max_chars:
        cut = log.rfind("\n", 0, max_chars)
        cut = cut if cut > max_chars // 2 else max_chars
        log = log[:cut] + f"\n... [{len(log) - cut} more characters of compiler log cut]"
    return log


_ENTRY_RE = re.compile(r"Compiling entry function '([^']+)'")
_PROPS_RE = re.compile(r"Function properties for (\S+)")
_FRAME_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"Used (\d+) registers")
_SMEM_RE = re.compile(r"(\d+) bytes smem")


def parse_ptxas_resources(log: str) -> dict[str, KernelResources]:
    """Per-entry-function registers, spill bytes, static shared memory and stack frame from `ptxas -v`."""
    res: dict[str, KernelResources] = {}
    current: str | None = None
    for line in log.splitlines():
        m = _ENTRY_RE.search(line)
        if m:
            current = m.group(1)
            res.setdefault(current, KernelResources(shared_bytes=0))
            continue
        m = _PROPS_RE.search(line)
        if m:
            if m.group(1) in res:
                current = m.group(1)
            continue
        if current is None:
            continue
        r = res[current]
        m = _FRAME_RE.search(line)
        if m:
            r.stack_frame_bytes, r.spill_stores_bytes, r.spill_loads_bytes = map(int, m.groups())
        m = _USED_RE.search(line)
        if m:
            r.registers = int(m.group(1))
            s = _SMEM_RE.search(line)
            r.shared_bytes = int(s.group(1)) if s else 0
    return res


def _split_log(log: str) -> tuple[str, str]:
    """(compiler diagnostics, ptxas info lines)."""
    diag: list[str] = []
    info: list[str] = []
    for line in log.splitlines():
        (info if line.startswith("ptxas") else diag).append(line)
    return "\n".join(diag).strip(), "\n".join(info)


def resolve_arch(arch: str | None, config: EnvConfig | None = None) -> str:
    arch = arch or (config.arch if config is not None else None) or DEFAULT_ARCH
    if not _ARCH_RE.match(arch):
        raise ValueError(f"arch {arch!r}: expected a real GPU architecture like 'sm_90'")
    return arch


# first in the message, so the install hint survives a long import error being cut
NVRTC_MISSING = ("NVRTC is not available through CuPy: install both with "
                 "`pip install cupy-cuda13x nvidia-cuda-nvrtc` (or `pip install -e .[env]`)")


def compile_cuda(source: str, arch: str | None = None, config: EnvConfig | None = None) -> CompiledModule:
    """Compile with NVRTC to a cubin for `arch` (default config.arch, else sm_90).

    Raises CompileError (policy's fault) with the cleaned log, RuntimeError if NVRTC itself fails.
    """
    config = config or EnvConfig()
    arch = resolve_arch(arch, config)
    try:
        from cupy_backends.cuda.libs import nvrtc
    except Exception as e:  # pragma: no cover - depends on the install
        raise RuntimeError(f"{NVRTC_MISSING} (cause: {e})") from e
    t0 = time.perf_counter()
    check_includes(source)
    check_has_include(source)
    headers, header_names, prelude_opts = nvrtc_headers(source)
    prog = nvrtc.createProgram(source, SOURCE_NAME, headers, header_names)
    limit = memory_cap.compile_memory_bytes()
    try:
        with memory_cap.capped(limit) as is_capped:
            try:
                nvrtc.compileProgram(prog, nvrtc_options(arch) + prelude_opts)
                ok = True
            except nvrtc.NVRTCError as e:
                if is_capped and "OUT_OF_MEMORY" in str(e):
                    raise CompileError(memory_cap.limit_message("NVRTC", limit)) from None
                if "COMPILATION" not in str(e):
                    raise RuntimeError(f"NVRTC failed: {e}") from e
                ok = False
        raw = nvrtc.getProgramLog(prog) or ""
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8", "replace")
        diag, info = _split_log(raw.replace("\x00", ""))
        if not ok and is_capped and memory_cap.ran_out_of_memory(diag or raw):
            raise CompileError(memory_cap.limit_message("NVRTC", limit) + "\n"
                               + clean_log(diag or raw, config.max_log_chars))
        if not ok:
            if log_mentions_foreign_file(diag or raw):  # never quote a file the policy may not read
                raise CompileError(f"{SOURCE_NAME}: error: compilation failed in a file that is not the "
                                   "submission or a CUDA header (its log is withheld); only headers that "
                                   "ship with CUDA may be included")
            raise CompileError(clean_log(diag or raw or "compilation failed (no log)", config.max_log_chars))
        cubin = nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)
    seconds = time.perf_counter() - t0
    return CompiledModule(source=source, arch=arch, cubin=bytes(cubin), kernels=find_kernels(source),
                          resources=parse_ptxas_resources(info), log=clean_log(diag, config.max_log_chars),
                          seconds=seconds)
