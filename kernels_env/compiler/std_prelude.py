"""The C standard-library names kernels written by people use, the same on every backend.

NVRTC has no C library: `M_PI`, `INFINITY`, `FLT_MAX`, `int32_t`, `uint` and `#include <math.h>`
fail there, while the cpu backend's host compiler has them all. Kernels ported from public projects
(llm.c, tutorials) use them freely, so both backends provide one small set:

- `prelude(source)`: the definitions, pre-included before the submission (NVRTC `--pre-include`;
  the cpu backend's prelude includes the real headers, which define the same names). A name the
  submission `#define`s itself is left out, so its own definition never meets an incompatible one.
- `STD_HEADERS`: the standard headers a submission may include; both backends map them to these
  built-in definitions (NVRTC gets each as an in-memory header holding only a comment).
"""
from __future__ import annotations

import functools
import os
import re

from kernels_env.compiler.cuda_headers import cuda_include_dirs
from kernels_env.source.source_text import strip_comments

PRELUDE_NAME = "leap_std_prelude.h"

# Standard headers whose names the prelude provides; `#include` of them is allowed and a no-op.
STD_HEADERS = ("math.h", "cmath", "float.h", "cfloat", "stdint.h", "cstdint", "limits.h", "climits")

# (macro, value): glibc's spellings, so a kernel that defines one identically is no redefinition.
MACROS: tuple[tuple[str, str], ...] = (
    ("M_E", "2.7182818284590452354"), ("M_LOG2E", "1.4426950408889634074"),
    ("M_LOG10E", "0.43429448190325182765"), ("M_LN2", "0.69314718055994530942"),
    ("M_LN10", "2.30258509299404568402"), ("M_PI", "3.14159265358979323846"),
    ("M_PI_2", "1.57079632679489661923"), ("M_PI_4", "0.78539816339744830962"),
    ("M_1_PI", "0.31830988618379067154"), ("M_2_PI", "0.63661977236758134308"),
    ("M_2_SQRTPI", "1.12837916709551257390"), ("M_SQRT2", "1.41421356237309504880"),
    ("M_SQRT1_2", "0.70710678118654752440"),
    # float.h
    ("FLT_MAX", "3.40282346638528859812e+38F"), ("FLT_MIN", "1.17549435082228750797e-38F"),
    ("FLT_EPSILON", "1.1920928955078125e-07F"), ("DBL_MAX", "((double)1.79769313486231570815e+308L)"),
    ("DBL_MIN", "((double)2.22507385850720138309e-308L)"), ("DBL_EPSILON", "((double)2.22044604925031308085e-16L)"),
    ("FLT_MANT_DIG", "24"), ("DBL_MANT_DIG", "53"),
    # math.h (device code only: CUDA's own CUDART_INF_F is written the same way)
    ("INFINITY", "(__int_as_float(0x7f800000))"), ("NAN", "(__int_as_float(0x7fffffff))"),
    ("HUGE_VALF", "(__int_as_float(0x7f800000))"), ("HUGE_VAL", "(__longlong_as_double(0x7ff0000000000000LL))"),
    # limits.h / stdint.h
    ("CHAR_BIT", "8"), ("SCHAR_MIN", "(-128)"), ("SCHAR_MAX", "127"), ("UCHAR_MAX", "255"),
    ("SHRT_MIN", "(-32768)"), ("SHRT_MAX", "32767"), ("USHRT_MAX", "65535"),
    ("INT_MIN", "(-INT_MAX - 1)"), ("INT_MAX", "2147483647"), ("UINT_MAX", "4294967295U"),
    ("LONG_MIN", "(-LONG_MAX - 1L)"), ("LONG_MAX", "9223372036854775807L"), ("ULONG_MAX", "18446744073709551615UL"),
    ("LLONG_MIN", "(-LLONG_MAX - 1LL)"), ("LLONG_MAX", "9223372036854775807LL"),
    ("ULLONG_MAX", "18446744073709551615ULL"),
    ("INT8_MIN", "(-128)"), ("INT8_MAX", "(127)"), ("UINT8_MAX", "(255)"),
    ("INT16_MIN", "(-32767-1)"), ("INT16_MAX", "(32767)"), ("UINT16_MAX", "(65535)"),
    ("INT32_MIN", "(-2147483647-1)"), ("INT32_MAX", "(2147483647)"), ("UINT32_MAX", "(4294967295U)"),
    ("INT64_MIN", "(-INT64_MAX - 1)"), ("INT64_MAX", "(9223372036854775807L)"),
    ("UINT64_MAX", "(18446744073709551615UL)"), ("SIZE_MAX", "(18446744073709551615UL)"),
)

# Type names (64-bit Linux, as glibc defines them, so typedefs repeated by a kernel agree).
TYPEDEFS: tuple[tuple[str, str], ...] = (
    ("int8_t", "signed char"), ("uint8_t", "unsigned char"), ("int16_t", "short"),
    ("uint16_t", "unsigned short"), ("int32_t", "int"), ("uint32_t", "unsigned int"),
    ("int64_t", "long"), ("uint64_t", "unsigned long"), ("intptr_t", "long"), ("uintptr_t", "unsigned long"),
    ("uint", "unsigned int"), ("ushort", "unsigned short"),
)

_DEFINED_RE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)", re.M)


def defined_macros(source: str) -> set[str]:
    """Names the source `#define`s itself (comments removed first)."""
    return set(_DEFINED_RE.findall(strip_comments(source.replace("\\\r\n", "").replace("\\\n", ""))))


# With libcu++ (CUDA's cccl headers) present, NVRTC takes the integer types and limits from it: CUDA
# headers (cooperative_groups.h, cuda/std/...) include these too, and a second, different definition
# of int64_t would be an error.
CCCL_HEADERS = ("cuda/std/climits", "cuda/std/cstdint", "cuda/std/cfloat")
_CCCL_TYPES = {"int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t", "uint32_t", "int64_t", "uint64_t",
               "intptr_t", "uintptr_t"}


def _have_cccl() -> bool:
    return any(os.path.isfile(os.path.join(d, "cuda", "std", "cstdint")) for d in cuda_include_dirs())


def prelude(source: str = "", cccl: bool = False) -> str:
    """The prelude for `source`: every macro it does not define itself, and the typedefs (with
    `cccl`, libcu++'s headers first, and its own integer types instead of ours)."""
    own = defined_macros(source)
    lines = ["// LEAP-JAX: C standard-library names for device code (kernels_env/compiler/std_prelude.py)",
             "#pragma once"]
    if cccl:
        lines += [f"#include <{h}>" for h in CCCL_HEADERS]
    lines += [f"#ifndef {n}\n#define {n} {v}\n#endif" for n, v in MACROS if n not in own]
    lines += [f"typedef {t} {n};" for n, t in TYPEDEFS if n not in own and not (cccl and n in _CCCL_TYPES)]
    return "\n".join(lines) + "\n"


# CUDA headers that bring none of libcu++'s integer types or limits (CUDA 13's include
# vector_types.h, vector_functions.h and nv/target): a source whose only CUDA includes are these needs
# no libcu++ in its prelude, which saves ~11 of the ~58 ms NVRTC takes for such a source on a CPU core.
# Each process checks them once against its own NVRTC and headers (`plain_cuda_headers`).
PLAIN_CUDA_HEADERS = ("cuda_fp16.h", "cuda_bf16.h")

_INCLUDE_RE = re.compile(r"^[ \t]*(?:#|%:)[ \t]*include(_next)?\b[ \t]*(.*)$", re.M)


@functools.cache
def plain_cuda_headers() -> tuple[str, ...]:
    """The PLAIN_CUDA_HEADERS that, with this NVRTC and these CUDA headers, compile next to the
    prelude without libcu++ and without a warning, every standard name used (a probe compile of
    ~50 ms each, once per process). A header that brings libcu++'s types or limits (say in another
    CUDA version) fails the probe and gets libcu++ again: never a wrong or conflicting definition."""
    try:
        from cupy_backends.cuda.libs import nvrtc
    except Exception:  # no NVRTC: nothing compiles here, every CUDA include keeps libcu++
        return ()
    uses = "".join(f"__device__ {n} leap_probe_{n};\n" for n, _ in TYPEDEFS)
    uses += "__device__ double leap_probe_m() { return " + " + ".join(f"(double)({n})" for n, _ in MACROS) + "; }\n"
    opts = ["-std=c++17", "--gpu-architecture=compute_90", f"--pre-include={PRELUDE_NAME}",
            *(f"--include-path={d}" for d in cuda_include_dirs())]
    plain = []
    for header in PLAIN_CUDA_HEADERS:
        source = f"#include <{header}>\n{uses}"
        try:
            prog = nvrtc.createProgram(source, "probe.cu", [prelude(source, cccl=False).encode()],
                                       [PRELUDE_NAME.encode()])
        except Exception:  # NVRTC unusable here: keep libcu++ (compile_cuda reports NVRTC's failure)
            continue
        try:
            nvrtc.compileProgram(prog, opts)
            log = nvrtc.getProgramLog(prog)
            if "warning" not in (log.decode("utf-8", "replace") if isinstance(log, bytes) else log):
                plain.append(header)
        except Exception:  # the header does not compile so: it keeps libcu++
            pass
        finally:
            nvrtc.destroyProgram(prog)
    return tuple(plain)


def needs_libcudacxx(source: str, plain_headers: tuple[str, ...] | None = None) -> bool:
    """Whether the source (comments removed) #includes anything but the standard headers the prelude
    stands in for and `plain_headers` (default: `plain_cuda_headers()`): only then can a header bring
    libcu++'s own integer types and limits (an `#include_next`, or a header named by a macro, counts
    as such a header)."""
    if plain_headers is None:
        plain_headers = plain_cuda_headers() if _INCLUDE_RE.search(source) else ()
    allowed = {f"{o}{h}{c}" for h in STD_HEADERS + plain_headers for o, c in ("<>", '""')}
    text = strip_comments(source.replace("\\\r\n", "").replace("\\\n", ""))
    return any(nxt or target.strip() not in allowed for nxt, target in _INCLUDE_RE.findall(text))


def nvrtc_headers(source: str) -> tuple[list[bytes], list[bytes], list[str]]:
    """(header contents, header names, extra NVRTC options) for `nvrtc.createProgram` and
    `compileProgram`: the prelude pre-included, each standard header an empty in-memory header.
    libcu++'s headers go into the prelude only for a source that `needs_libcudacxx` (parsing them
    is ~11 of a simple kernel's ~32 ms of NVRTC on a CPU core)."""
    contents = [prelude(source, cccl=_have_cccl() and needs_libcudacxx(source)).encode()]
    names = [PRELUDE_NAME.encode()]
    for h in STD_HEADERS:
        contents.append(f"// <{h}>: provided by {PRELUDE_NAME}\n".encode())
        names.append(h.encode())
    return contents, names, [f"--pre-include={PRELUDE_NAME}"]
