"""Counter-based random numbers: one formula, the same numbers under NumPy and CuPy, one GPU pass.

Element `i` of stream `s` under `key` is built from the 64-bit word
    splitmix64(key, c) with c = i + s * 2**40,  i.e. z = key + (c + 1) * GOLDEN, then two
    xor-shift-multiply rounds (Steele, Lea & Flood's SplitMix64 finaliser).
Nothing is seeded or stored, so a fresh buffer costs one elementwise kernel on the GPU. The
stateful alternative, `cupy.random.default_rng(seed)`, initialises a large array of cuRAND XORWOW
states for every new generator, and a trial needs one per input buffer.

Derived values, computed in float64 and rounded once to float32:
    uniform   (w >> 40) * 2**-24 in [0, 1), scaled to [low, high) (after the rounding, values that
              reached `high` become the float32 just below it)
    normal    Box-Muller on the word's halves: sqrt(-2 ln u1) * cos(2 pi u2),
              u1 = (hi32 + 1) * 2**-32 in (0, 1], u2 = lo32 * 2**-32 (|z| <= 6.67)
    student_t z0 / sqrt((z1^2 + ... + zdof^2) / dof) from streams s .. s + dof
    integers  low + (w >> 11) mod (high - low), int64

The NumPy path is plain array arithmetic (uint64 wraps); the CuPy path is one ElementwiseKernel per
kind with the same constants, writing a new array or, given `out` (a C-contiguous array of the
kind's dtype and size), that buffer: the timing stage draws every timed run's inputs straight into
the run's fixed buffers, no copy. Integers and uniforms agree bit for bit; normals may differ in the
last float32 bit where the two libms round log/cos differently (tests/kernels_env check both).
"""
from __future__ import annotations

from typing import Any

import numpy as np

GOLDEN = 0x9E3779B97F4A7C15
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB
STREAM_SHIFT = 40            # counters of one stream: i < 2**40 elements
MAX_ELEMENTS = 1 << STREAM_SHIFT
MASK64 = (1 << 64) - 1
TWO_PI = 6.283185307179586

_CUDA_PREAMBLE = f"""
__device__ __forceinline__ unsigned long long leap_word(unsigned long long key, unsigned long long c) {{
    unsigned long long z = key + (c + 1ull) * {GOLDEN}ull;
    z = (z ^ (z >> 30)) * {MIX1}ull;
    z = (z ^ (z >> 27)) * {MIX2}ull;
    return z ^ (z >> 31);
}}
__device__ __forceinline__ double leap_normal(unsigned long long key, unsigned long long c) {{
    unsigned long long w = leap_word(key, c);
    double u1 = ((double)(w >> 32) + 1.0) * 2.3283064365386963e-10;
    double u2 = (double)(w & 0xffffffffull) * 2.3283064365386963e-10;
    return sqrt(-2.0 * log(u1)) * cos({TWO_PI!r} * u2);
}}
"""
_CUDA_BODY = {
    "uniform": "unsigned long long w = leap_word(key, (unsigned long long)i + base);"
               "out = fminf((float)(low + (high - low) * ((double)(w >> 40) * 5.9604644775390625e-08)), top);",
    "normal": "out = (float)leap_normal(key, (unsigned long long)i + base);",
    "student_t": "unsigned long long c = (unsigned long long)i + base;"
                 "double s = 0.0;"
                 "for (int k = 1; k <= dof; ++k) { double z = leap_normal(key, c + ((unsigned long long)k << 40));"
                 " s += z * z; }"
                 "out = (float)(leap_normal(key, c) / sqrt(s / (double)dof));",
    "integers": "unsigned long long w = leap_word(key, (unsigned long long)i + base);"
                "out = low + (long long)((w >> 11) % span);",
}
_CUDA_PARAMS = {
    "uniform": ("uint64 key, uint64 base, float64 low, float64 high, float32 top", "float32 out"),
    "normal": ("uint64 key, uint64 base", "float32 out"),
    "student_t": ("uint64 key, uint64 base, int32 dof", "float32 out"),
    "integers": ("uint64 key, uint64 base, int64 low, uint64 span", "int64 out"),
}
_cuda_kernels: dict[str, Any] = {}


def _check(key: int, size: int, stream: int) -> None:
    if not 0 <= int(key) <= MASK64:
        raise ValueError(f"key={key}; expected an integer in [0, 2**64)")
    if not 0 <= size < MAX_ELEMENTS:
        raise ValueError(f"size={size}; expected 0 <= size < 2**{STREAM_SHIFT}")
    if not 0 <= stream < (1 << (64 - STREAM_SHIFT)) - 8:
        raise ValueError(f"stream={stream}; expected 0 <= stream < {(1 << (64 - STREAM_SHIFT)) - 8}")


def _is_cupy(xp: Any) -> bool:
    return getattr(xp, "__name__", "") == "cupy"


def _check_out(out: Any, n: int, dtype: str) -> None:
    """`out` must hold the draw as it is: `n` elements of `dtype`, C-contiguous."""
    if out.dtype != np.dtype(dtype) or int(out.size) != n or not out.flags.c_contiguous:
        raise ValueError(f"out: a {out.dtype} array of shape {tuple(out.shape)}; expected a C-contiguous "
                         f"{dtype} array of {n} elements")


def _cuda_into(kind: str, out: Any, shape: tuple[int, ...], n: int, *args: Any) -> Any:
    """Run kind's kernel over n elements into `out` (checked, returned as it is) or a new array of
    `shape`."""
    if out is None:
        return _cuda(kind)(*args, size=n).reshape(shape)
    _check_out(out, n, _CUDA_PARAMS[kind][1].split()[0])
    _cuda(kind)(*args, out.reshape(-1))
    return out


def _np_into(values: np.ndarray, out: Any, dtype: str, shape: tuple[int, ...]) -> Any:
    """The NumPy draw `values` as `dtype`: written into `out` (checked, returned as it is) when
    given, else in `shape`."""
    if out is None:
        return values.astype(dtype, copy=False).reshape(shape)
    _check_out(out, values.size, dtype)
    out.reshape(-1)[...] = values.reshape(-1)
    return out


def _cuda(kind: str) -> Any:
    """The CuPy ElementwiseKernel of one kind (built once per process)."""
    k = _cuda_kernels.get(kind)
    if k is None:
        import cupy
        ins, outs = _CUDA_PARAMS[kind]
        k = cupy.ElementwiseKernel(ins, outs, _CUDA_BODY[kind], f"leap_counter_rng_{kind}",
                                   preamble=_CUDA_PREAMBLE)
        _cuda_kernels[kind] = k
    return k


# ---- the NumPy path ----------------------------------------------------------------------------
def words(key: int, size: int, stream: int = 0) -> np.ndarray:
    """The stream's 64-bit words as a NumPy uint64 array of `size` (the reference formula)."""
    _check(key, size, stream)
    c = np.arange(size, dtype=np.uint64) + np.uint64(stream << STREAM_SHIFT)
    z = np.uint64(key) + (c + np.uint64(1)) * np.uint64(GOLDEN)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(MIX1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(MIX2)
    return z ^ (z >> np.uint64(31))


def _np_normal(key: int, size: int, stream: int) -> np.ndarray:
    w = words(key, size, stream)
    u1 = ((w >> np.uint64(32)).astype(np.float64) + 1.0) * 2.0 ** -32
    u2 = (w & np.uint64(0xFFFFFFFF)).astype(np.float64) * 2.0 ** -32
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(TWO_PI * u2)


# ---- the distributions (xp: numpy or cupy) -----------------------------------------------------
def _size(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        if int(d) < 0:
            raise ValueError(f"shape={shape}; expected non-negative dimensions")
        n *= int(d)
    return n


def uniform(xp: Any, key: int, shape: tuple[int, ...], low: float = 0.0, high: float = 1.0,
            stream: int = 0, out: Any = None) -> Any:
    """float32 samples in [low, high) (the top is excluded after the float32 rounding too), in a new
    array or written into `out` (float32, C-contiguous, of the shape's size)."""
    if not high > low:
        raise ValueError(f"uniform needs low < high, got [{low}, {high})")
    n = _size(shape)
    _check(key, n, stream)
    top = np.nextafter(np.float32(high), np.float32(low))
    if _is_cupy(xp):
        return _cuda_into("uniform", out, shape, n, np.uint64(key), np.uint64(stream << STREAM_SHIFT), float(low),
                          float(high), top)
    u = (words(key, n, stream) >> np.uint64(40)).astype(np.float64) * 2.0 ** -24
    values = np.minimum((float(low) + (float(high) - float(low)) * u).astype(np.float32), top)
    return _np_into(values, out, "float32", shape)


def normal(xp: Any, key: int, shape: tuple[int, ...], stream: int = 0, out: Any = None) -> Any:
    """float32 standard normal samples (in `out` when given, as `uniform`)."""
    n = _size(shape)
    _check(key, n, stream)
    if _is_cupy(xp):
        return _cuda_into("normal", out, shape, n, np.uint64(key), np.uint64(stream << STREAM_SHIFT))
    return _np_into(_np_normal(key, n, stream), out, "float32", shape)


def student_t(xp: Any, key: int, shape: tuple[int, ...], dof: int, stream: int = 0, out: Any = None) -> Any:
    """float32 Student-t samples with `dof` degrees of freedom (uses streams stream .. stream+dof; in
    `out` when given, as `uniform`)."""
    if not 1 <= int(dof) <= 7:
        raise ValueError(f"dof={dof}; expected an integer in [1, 7]")
    n = _size(shape)
    _check(key, n, stream + int(dof))
    if _is_cupy(xp):
        return _cuda_into("student_t", out, shape, n, np.uint64(key), np.uint64(stream << STREAM_SHIFT),
                          np.int32(dof))
    s = np.zeros(n, dtype=np.float64)
    for k in range(1, int(dof) + 1):
        s += _np_normal(key, n, stream + k) ** 2
    return _np_into(_np_normal(key, n, stream) / np.sqrt(s / float(dof)), out, "float32", shape)


def integers(xp: Any, key: int, shape: tuple[int, ...], low: int, high: int, stream: int = 0,
             out: Any = None) -> Any:
    """int64 samples in [low, high) (modulo of 53 random bits: bias below 2**-20 for spans < 2**33;
    in `out`, int64, when given, as `uniform`)."""
    low, high = int(low), int(high)
    if not high > low:
        raise ValueError(f"integers needs low < high, got [{low}, {high})")
    span = high - low
    if span >= 1 << 33:
        raise ValueError(f"integers span high - low = {span}; expected < 2**33")
    n = _size(shape)
    _check(key, n, stream)
    if _is_cupy(xp):
        return _cuda_into("integers", out, shape, n, np.uint64(key), np.uint64(stream << STREAM_SHIFT), np.int64(low),
                          np.uint64(span))
    w = words(key, n, stream) >> np.uint64(11)
    return _np_into(np.int64(low) + (w % np.uint64(span)).astype(np.int64), out, "int64", shape)
