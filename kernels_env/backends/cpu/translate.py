"""CUDA device code -> C++ for the cpu backend.

Most of CUDA's device dialect becomes C++ through the prelude header (cuda_prelude.h). What macros
cannot express is rewritten here: `extern __shared__` arrays become pointers into the launch's
dynamic shared window, `static __shared__` loses its duplicate `static`, CUDA headers are dropped
(the prelude provides them), and `#pragma unroll` is removed. Features the emulation does not have
(inline PTX, wmma/mma, async copies, textures, cooperative groups, ...) are rejected up front with a
message naming the feature, so they never produce a silently wrong answer. Line numbers of the
user's code are kept (`#line`), so compiler messages point at `kernel.cu:LINE`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from collections.abc import Iterable

from kernels_env.source.source_text import strip_comments
from kernels_env.compiler.std_prelude import STD_HEADERS, defined_macros

SOURCE_NAME = "kernel.cu"

# Headers whose content the prelude provides (or that only matter to the host compiler).
_DROPPED_HEADERS = {
    "cuda_fp16.h", "cuda_fp16.hpp", "cuda_bf16.h", "cuda_bf16.hpp", "cuda_runtime.h",
    "cuda_runtime_api.h", "cuda.h", "device_launch_parameters.h", "math_constants.h",
    "device_functions.h", "vector_types.h", "vector_functions.h", "sm_20_intrinsics.h",
    "sm_30_intrinsics.h", "sm_32_intrinsics.h", "sm_35_intrinsics.h", "sm_60_atomic_functions.h",
    "sm_61_intrinsics.h", "device_atomic_functions.h", "math_functions.h", "crt/math_functions.h",
    "assert.h", "cassert", "cuda_device_runtime_api.h", "builtin_types.h", "host_defines.h",
} | set(STD_HEADERS)  # C library headers: the prelude includes the real ones, NVRTC gets std_prelude

# (pattern over code without comments/strings, feature name). Checked in order; all hits reported.
_UNSUPPORTED: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), name) for p, name in (
        (r"\b(?:asm|__asm__|__asm)\b", "inline PTX assembly (asm)"),
        (r"\bwmma\b|\bnvcuda\b|\bmma\.h\b|\b__hmma\w*|\b__imma\w*", "warp matrix operations (wmma / mma)"),
        (r"\b__pipeline_\w+|\bmemcpy_async\b|\bcuda::pipeline\b|\bcuda/pipeline\b|\bcuda::barrier\b"
         r"|\bcuda/barrier\b|\bcuda_pipeline\w*\.h|\bCUtensorMap\w*|\bcp\.async",
         "asynchronous / tensor-memory copies (cp.async, memcpy_async, pipelines, TMA)"),
        (r"\bcooperative_groups\b", "cooperative groups (cooperative_groups.h, including grid-wide sync)"),
        (r"\btex[123]D\w*|\btex1Dfetch\b|\btexture\s*<|\bcudaTextureObject_t\b|\bcudaSurfaceObject_t\b"
         r"|\bsurf[123]D\w*", "textures and surfaces"),
        (r"\b__cluster_dims__\b|\bcluster_ctarank\b|\b__cluster\w*", "thread block clusters"),
        (r"\b__managed__\b", "managed memory (__managed__)"),
        (r"\b__nv_fp8\w*|\bcuda_fp8\.h\b|\b__nv_fp6\w*|\b__nv_fp4\w*", "fp8 / fp6 / fp4 types"),
        (r"\b__match_(?:any|all)_sync\b", "__match_any_sync / __match_all_sync"),
        (r"<<<", "dynamic parallelism (a kernel launch inside device code)"),
        (r"\b__(?:isShared|isGlobal|isConstant|isLocal|cvta_\w+)\b", "address-space predicates / conversions"),
        (r"\bcudaMalloc\w*|\bcudaMemcpy\w*|\bcudaDeviceSynchronize\b|\bcudaGetLastError\b",
         "CUDA runtime API calls from device code"),
    ))

_SYNC_RE = re.compile(r"\b(?:__syncthreads\w*|__syncwarp|__shfl\w*|__ballot_sync|__any_sync|__all_sync"
                      r"|__reduce_\w+_sync)\b")
_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"\n]+)[>"][^\n]*', re.M)
_PRAGMA_UNROLL_RE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+(?:unroll|nounroll)\b[^\n]*", re.M)
_STATIC_SHARED_RE = re.compile(r"\bstatic(\s+)__shared__\b|\b__shared__(\s+)static\b")
# bounded repetitions: many `extern`s without a `;` made the unbounded form quadratic
_EXTERN_SHARED_RE = re.compile(r"\bextern\s+(?P<decl>[^;{}()]{0,256}?(?:\([^;{}()]{0,256}\)[^;{}()]{0,256}?){0,8})"
                               r"\b(?P<name>[A-Za-z_]\w{0,255})\s*\[\s*\]\s*;")
# names of the runtime (cpu_runtime.h, cuda_prelude.h internals): user code must not define or use them
_RESERVED_RE = re.compile(r"\b(?:__cpu\w*|LEAP_\w+|__leap\w*|__libc_\w+)")
_ALIGN_RE = re.compile(r"__align__\s*\(\s*\d+\s*\)|alignas\s*\(\s*\d+\s*\)|__attribute__\s*\(\(\s*aligned\s*\(\s*\d+\s*\)\s*\)\)")


class UnsupportedFeature(ValueError):
    """The device code uses a CUDA feature the cpu backend does not emulate."""


@dataclass(frozen=True)
class Translation:
    """C++ source ready for the host compiler, and whether any kernel needs fibers."""
    cpp: str
    uses_sync: bool
    user_cpp: str = ""  # the prelude and the user's code only (checked for host symbols)


def blank_comments_and_strings(src: str) -> str:
    """`src` with comments and string/char literals replaced by spaces (newlines kept), so regexes
    over the result see only code and every offset still matches the original."""
    return strip_comments(src, blank_literals=True)


def find_unsupported(src: str) -> list[str]:
    """One message per unsupported feature used, naming it and the first line where it appears."""
    code = blank_comments_and_strings(src)
    # `#include <cooperative_groups.h>` and friends are in the code (not strings) after blanking
    # quoted includes, so look at include lines in the original too.
    includes = "\n".join(m.group(1) for m in _INCLUDE_RE.finditer(src))
    found = []
    for pat, name in _UNSUPPORTED:
        m = pat.search(code)
        where = ""
        if m is not None:
            line = code.count("\n", 0, m.start()) + 1
            snippet = src[m.start():m.end()]
            where = f"`{snippet}` on line {line}"
        elif pat.search(includes):
            where = "an #include"
        else:
            continue
        found.append(f"{name} ({where})")
    return found


def uses_sync(src: str) -> bool:
    """Whether the code calls a barrier, warp shuffle, vote or warp reduction (needs fibers)."""
    return _SYNC_RE.search(blank_comments_and_strings(src)) is not None


def _brace_depth_at(code: str, positions: Iterable[int]) -> dict[int, int]:
    want = sorted(set(positions))
    depth, out, k = 0, {}, 0
    for i, c in enumerate(code):
        while k < len(want) and want[k] == i:
            out[want[k]] = depth
            k += 1
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
    for p in want[k:]:
        out[p] = depth
    return out


def _rewrite(src: str) -> str:
    """Apply the source rewrites; every replacement keeps the number of lines."""
    code = blank_comments_and_strings(src)
    edits: list[tuple[int, int, str]] = []
    for m in _INCLUDE_RE.finditer(code):
        # the include target is blanked in `code` when quoted; read it from the original
        mo = _INCLUDE_RE.match(src, m.start())
        header = mo.group(1).strip() if mo else ""
        if header in _DROPPED_HEADERS or header.startswith("cuda/std/"):
            edits.append((m.start(), m.end(), f"/* #include <{header}>: provided by the cpu prelude */"))
    for m in _PRAGMA_UNROLL_RE.finditer(code):
        edits.append((m.start(), m.end(), ""))
    for m in _STATIC_SHARED_RE.finditer(code):
        edits.append((m.start(), m.end(), "__shared__"))
    ext = list(_EXTERN_SHARED_RE.finditer(code))
    depths = _brace_depth_at(code, [m.start() for m in ext])
    for m in ext:
        decl = m.group("decl")
        if not re.search(r"\b__shared__\b", decl):
            continue
        typ = re.sub(r"\b(?:__shared__|static)\b", " ", _ALIGN_RE.sub(" ", decl))
        typ = " ".join(typ.split()) or "unsigned char"
        name = m.group("name")
        if depths[m.start()] > 0:
            rep = f"{typ}* const {name} = reinterpret_cast<{typ}*>(__cpu_dyn_smem);"
        else:  # file scope: the pointer changes per launch, so a macro reads it at each use
            rep = f"#define {name} (reinterpret_cast<{typ}*>(__cpu_dyn_smem))"
            line_start = code.rfind("\n", 0, m.start()) + 1
            if code[line_start:m.start()].strip():
                rep = "\n" + rep  # a #define must start a line (shifts later line numbers by one)
        newlines = src.count("\n", m.start(), m.end())
        rep = rep + "\n" * max(0, newlines - rep.count("\n"))
        edits.append((m.start(), m.end(), rep))
    edits.sort()
    out, last = [], 0
    for start, end, rep in edits:
        if start < last:
            continue  # overlapping matches: keep the first
        out.append(src[last:start])
        out.append(rep)
        last = end
    out.append(src[last:])
    return "".join(out)


def _shared_macros(body: str) -> set[str]:
    """Macros the rewrite itself defines (file-scope extern __shared__ arrays)."""
    return set(re.findall(r"^#define (\w+) \(reinterpret_cast<", body, re.M))


def translate(source: str, kernel_names: Iterable[str]) -> Translation:
    """Translate device code to C++ with one `__cpu_entry_<kernel>` launcher per extern "C" kernel.

    Raises UnsupportedFeature (message names every unsupported feature found).
    """
    problems = find_unsupported(source)
    code = blank_comments_and_strings(source)
    reserved = _RESERVED_RE.search(code)
    if reserved is not None:
        line = code.count("\n", 0, reserved.start()) + 1
        problems.append(f"the name `{reserved.group()}` (line {line}), which is reserved for the "
                        "emulation's runtime")
    if problems:
        raise UnsupportedFeature(
            "the cpu backend does not emulate " + "; ".join(problems)
            + ". Run this submission on the cupy (GPU) backend.")
    names = sorted(set(kernel_names))
    bad = [k for k in names if not re.fullmatch(r"[A-Za-z_]\w*", k)]
    if bad:
        raise UnsupportedFeature(f"kernel names {bad} are not C identifiers")
    body = _rewrite(source)
    entries = "\n".join(
        f'extern "C" __attribute__((visibility("default"))) void __cpu_entry_{k}(void** a) '
        f"{{ __cpu::invoke({k}, a); }}" for k in names)
    # the user's macros end with its code: none may rename anything in the runtime that follows
    undefs = "".join(f"#undef {n}\n" for n in sorted(defined_macros(source) | _shared_macros(body) | {"malloc", "free"}))
    cpp = (f'#include "cuda_prelude.h"\n#line 1 "{SOURCE_NAME}"\n{body}\n{undefs}'
           f'#line 1 "cpu_runtime.h"\n#include "cpu_runtime.h"\n{entries}\n')
    user_cpp = f'#include "cuda_prelude.h"\n#line 1 "{SOURCE_NAME}"\n{body}\n'
    return Translation(cpp=cpp, uses_sync=uses_sync(source), user_cpp=user_cpp)
