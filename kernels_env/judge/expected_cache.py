"""Reference outputs cached per trial, masked on the device, with a fused check (DESIGN 3.3 step 4).

Inputs and reference outputs are pure functions of (task, sizes, seed, trial), and RL scores the
same task many times, so the harness keeps each trial's expected outputs and skips the reference on
a hit: only with a fixed EnvConfig.seed (EnvConfig.reuses_draws), since by default every evaluation
draws its inputs from fresh entropy. Untrusted kernels share the GPU's address space with the
evaluator, so nothing usable may sit in device memory while a submission runs:

  * masked storage   an entry holds the expected output's bits XOR a keyed pseudo-random stream,
                     stream word i = SipHash-2-4(key, 4 i) (low bits for 16/32-bit elements). The
                     128-bit key (two 64-bit `secrets`) lives only in host memory. SipHash is a
                     keyed PRF: unlike counter_rng's SplitMix64, whose finaliser is invertible (one
                     known element would give the key away: compute one dot product, unmask the
                     rest), knowing some plaintext elements does not reveal the others.
  * keyed checksum   mac = sum_i r_i * w_i mod 2**64 over the masked data's 32/16-bit words w_i,
                     with r_i = SipHash(key, 4 i + 1) (and 4 i + 2 for the high half of 64-bit
                     elements). The value stays in host memory; a kernel that changes the stored
                     bits changes the sum except with probability <= 2**-32, so an overwritten
                     entry is detected at its next use, dropped and recomputed, never trusted.
  * fused check      one pass over (masked, got) recomputes the checksum and counts the elements that
                     fail compare_output's rule (isclose with equal_nan for float outputs; |g - e| >
                     atol + rtol |e| on int64 for int outputs). On CuPy a RawKernel
                     (`leap_expected_check`), on NumPy compare.mismatch_mask on an
                     unmasked temporary (the cpu backend's kernels run in another process and only
                     see shared buffers). A non-zero count falls back to compare_output on an
                     unmasked temporary, so messages are those of the uncached path.
  * scrubbing        plaintext temporaries (the reference's outputs, normalised copies, unmasked
                     fallbacks) are zeroed before release on CuPy, so freed pool blocks hold no
                     expected outputs either.

The harness uses the cache on CuPy only (USE_ON_NUMPY below says why); the NumPy path is the same
algorithm, kept for the cpu tests and as the formula the GPU tests check the kernels against.

Stored expected values are normalised exactly as compare_output reads them: int outputs as int64
(float references through rint), float outputs as float16/32/64 (anything else as float64).
"""
from __future__ import annotations

import secrets
import threading
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernels_env.core.byte_lru import ByteLRU, kept_on
from kernels_env.judge.compare import mismatch_mask
from kernels_env.judge.poison import INT_SENTINEL

MASK64 = (1 << 64) - 1
_SIP_INIT = (0x736F6D6570736575, 0x646F72616E646F6D, 0x6C7967656E657261, 0x7465646279746573)
_SIP_LEN8 = 8 << 56  # the final block of an 8-byte message: its length in the top byte
NP_CHUNK = 1 << 20  # NumPy works on this many elements at a time (bounds its temporaries)
INT_OUTPUTS = ("int32", "int64")
FLOAT_STORE = ("float16", "float32", "float64")
_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


# The NumPy path (SipHash as array arithmetic) costs ~0.3 s per million elements, some 30x the
# comparison it replaces, and the cpu backend's kernels cannot see this process's arrays anyway, so
# the harness uses the cache on CuPy only; tests set this to exercise the whole path on NumPy.
USE_ON_NUMPY = False


def is_cupy(xp: Any) -> bool:
    """Whether `xp` is CuPy (device memory shared with submitted kernels)."""
    return getattr(xp, "__name__", "") == "cupy"


def used_on(xp: Any) -> bool:
    """Whether the harness caches expected outputs on this array module (see USE_ON_NUMPY)."""
    return is_cupy(xp) or USE_ON_NUMPY


# ---- SipHash-2-4 of one 64-bit word ------------------------------------------------------------
def _rotl(x: np.ndarray, b: int) -> np.ndarray:
    return (x << np.uint64(b)) | (x >> np.uint64(64 - b))


def _sipround(v0: np.ndarray, v1: np.ndarray, v2: np.ndarray, v3: np.ndarray) -> tuple[np.ndarray, ...]:
    v0 = v0 + v1; v1 = _rotl(v1, 13); v1 ^= v0; v0 = _rotl(v0, 32)  # noqa: E702
    v2 = v2 + v3; v3 = _rotl(v3, 16); v3 ^= v2  # noqa: E702
    v0 = v0 + v3; v3 = _rotl(v3, 21); v3 ^= v0  # noqa: E702
    v2 = v2 + v1; v1 = _rotl(v1, 17); v1 ^= v2; v2 = _rotl(v2, 32)  # noqa: E702
    return v0, v1, v2, v3


def siphash_words(k0: int, k1: int, counters: np.ndarray) -> np.ndarray:
    """SipHash-2-4 under the key (k0, k1) of each uint64 counter, taken as an 8-byte little-endian
    message (the reference algorithm of Aumasson & Bernstein), as a uint64 array."""
    m = np.asarray(counters, dtype=np.uint64)
    with np.errstate(over="ignore"):
        v0 = np.full(m.shape, (k0 ^ _SIP_INIT[0]) & MASK64, dtype=np.uint64)
        v1 = np.full(m.shape, (k1 ^ _SIP_INIT[1]) & MASK64, dtype=np.uint64)
        v2 = np.full(m.shape, (k0 ^ _SIP_INIT[2]) & MASK64, dtype=np.uint64)
        v3 = np.full(m.shape, (k1 ^ _SIP_INIT[3]) & MASK64, dtype=np.uint64)
        for block in (m, np.uint64(_SIP_LEN8)):  # the message word, then the length block
            v3 ^= block
            v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
            v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
            v0 ^= block
        v2 ^= np.uint64(0xFF)
        for _ in range(4):
            v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
    return v0 ^ v1 ^ v2 ^ v3


_CUDA_SIPHASH = f"""
__device__ __forceinline__ unsigned long long leap_rotl(unsigned long long x, int b) {{
    return (x << b) | (x >> (64 - b));
}}
#define LEAP_SIPROUND \\
    v0 += v1; v1 = leap_rotl(v1, 13); v1 ^= v0; v0 = leap_rotl(v0, 32); \\
    v2 += v3; v3 = leap_rotl(v3, 16); v3 ^= v2; \\
    v0 += v3; v3 = leap_rotl(v3, 21); v3 ^= v0; \\
    v2 += v1; v1 = leap_rotl(v1, 17); v1 ^= v2; v2 = leap_rotl(v2, 32);
__device__ __forceinline__ unsigned long long leap_siphash(unsigned long long k0, unsigned long long k1,
                                                           unsigned long long m) {{
    unsigned long long v0 = k0 ^ {_SIP_INIT[0]}ull, v1 = k1 ^ {_SIP_INIT[1]}ull;
    unsigned long long v2 = k0 ^ {_SIP_INIT[2]}ull, v3 = k1 ^ {_SIP_INIT[3]}ull;
    v3 ^= m; LEAP_SIPROUND LEAP_SIPROUND v0 ^= m;
    v3 ^= {_SIP_LEN8}ull; LEAP_SIPROUND LEAP_SIPROUND v0 ^= {_SIP_LEN8}ull;
    v2 ^= 0xffull; LEAP_SIPROUND LEAP_SIPROUND LEAP_SIPROUND LEAP_SIPROUND
    return v0 ^ v1 ^ v2 ^ v3;
}}
"""

# The fused pass. E: stored expected type, U: its unsigned bits, G: the output's type as read.
# Per element: the checksum term of the masked word; with `compare`, the unmasked expected value
# against the output under compare_output's rule. Warp sums, then one atomicAdd per warp.
_CUDA_CHECK = _CUDA_SIPHASH + r"""
__device__ __forceinline__ double leap_bits_f64(unsigned long long b) {
    union { unsigned long long u; double d; } x; x.u = b; return x.d;
}
__device__ __forceinline__ float leap_bits_f32(unsigned int b) {
    union { unsigned int u; float f; } x; x.u = b; return x.f;
}
__device__ __forceinline__ double leap_half_f64(unsigned short h) {  // exact IEEE binary16 -> double
    int ex = (h >> 10) & 0x1f, man = h & 0x3ff;
    double v;
    if (ex == 0) v = ldexp((double)man, -24);
    else if (ex == 31) v = leap_bits_f64(man ? 0x7ff8000000000000ull : 0x7ff0000000000000ull);
    else v = ldexp((double)(man | 0x400), ex - 25);
    return (h & 0x8000) ? -v : v;
}
__device__ __forceinline__ double leap_to_f64(unsigned short b, int is_half) { return leap_half_f64(b); }
__device__ __forceinline__ double leap_to_f64(unsigned int b, int) { return (double)leap_bits_f32(b); }
__device__ __forceinline__ double leap_to_f64(unsigned long long b, int) { return leap_bits_f64(b); }
__device__ __forceinline__ double leap_got_f64(unsigned short g) { return leap_half_f64(g); }
__device__ __forceinline__ double leap_got_f64(float g) { return (double)g; }
__device__ __forceinline__ double leap_got_f64(double g) { return g; }
__device__ __forceinline__ unsigned long long leap_mac_term(unsigned long long k0, unsigned long long k1,
                                                            unsigned long long i, unsigned long long w,
                                                            int wide) {
    unsigned long long t = leap_siphash(k0, k1, 4ull * i + 1ull) * (w & 0xffffffffull);
    if (wide) t += leap_siphash(k0, k1, 4ull * i + 2ull) * (w >> 32);
    return t;
}
__device__ __forceinline__ int leap_float_bad(double g, double e, double atol, double rtol) {
    int close;  // cupy.isclose(g, e, rtol, atol, equal_nan=True), the same expression
    if (isfinite(g) && isfinite(e)) close = fabs(g - e) <= atol + rtol * fabs(e);
    else close = (g == e) || (isnan(g) && isnan(e));
    return !close;
}
__device__ __forceinline__ int leap_int_bad(long long g, long long e, double atol, double rtol,
                                            long long sentinel) {
    double e64 = (double)e;  // the difference in double: in int64 it wraps (compare._int_bad)
    double absd = fabs(__dsub_rn((double)g, e64));
    return absd > __dadd_rn(atol, __dmul_rn(rtol, fabs(e64)))  // separate ops, as in CuPy
           || (g == sentinel && e != sentinel);                 // still the sentinel: unwritten
}
extern "C" __global__ void leap_expected_check(const LEAP_U* masked, const LEAP_G* got, unsigned long long n,
                                               unsigned long long k0, unsigned long long k1, double atol,
                                               double rtol, int compare, unsigned long long* acc) {
    unsigned long long mac = 0ull, bad = 0ull;
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        LEAP_U w = masked[i];
        mac += leap_mac_term(k0, k1, i, (unsigned long long)w, sizeof(LEAP_U) == 8);
        if (compare) {
            LEAP_U bits = w ^ (LEAP_U)leap_siphash(k0, k1, 4ull * i);
            bad += (unsigned long long)LEAP_BAD;
        }
    }
    for (int off = 16; off > 0; off >>= 1) {
        mac += __shfl_down_sync(0xffffffffu, mac, off);
        bad += __shfl_down_sync(0xffffffffu, bad, off);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(acc, mac);
        atomicAdd(acc + 1, bad);
    }
}
"""
_C_UINT = {2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
_C_GOT = {"float16": "unsigned short", "float32": "float", "float64": "double", "int32": "int",
          "int64": "long long"}
CHECK_THREADS = 256
CHECK_MAX_BLOCKS = 4096
_cuda_lock = threading.Lock()
_cuda_kernels: dict[tuple[str, str], Any] = {}
_cuda_xor: list[Any] = []


def cuda_check_source(stored: str, out_dtype: str) -> str:
    """The fused kernel's CUDA source for a stored expected dtype and an output dtype."""
    if out_dtype in INT_OUTPUTS:
        if stored != "int64":
            raise ValueError(f"int output {out_dtype} needs an int64 expected, got {stored}")
        sentinel = int(INT_SENTINEL[out_dtype])
        bad = f"leap_int_bad((long long)got[i], (long long)bits, atol, rtol, ({sentinel + 1}LL - 1))"
    else:
        if stored not in FLOAT_STORE:
            raise ValueError(f"float output {out_dtype} needs a float expected, got {stored}")
        bad = "leap_float_bad(leap_got_f64(got[i]), leap_to_f64(bits, 0), atol, rtol)"
    size = np.dtype(stored).itemsize
    return (f"#define LEAP_U {_C_UINT[size]}\n#define LEAP_G {_C_GOT[out_dtype]}\n"
            f"#define LEAP_BAD {bad}\n" + _CUDA_CHECK)


def _cuda_check_kernel(stored: str, out_dtype: str) -> Any:
    """The compiled `leap_expected_check` for (stored, out_dtype), built once per process."""
    key = (stored, out_dtype)
    with _cuda_lock:
        k = _cuda_kernels.get(key)
        if k is None:
            import cupy
            k = cupy.RawKernel(cuda_check_source(stored, out_dtype), "leap_expected_check")
            _cuda_kernels[key] = k
    return k


def _cuda_xor_kernel() -> Any:
    """ElementwiseKernel y = x ^ stream(key, i): masks and unmasks (XOR is its own inverse)."""
    with _cuda_lock:
        if not _cuda_xor:
            import cupy
            _cuda_xor.append(cupy.ElementwiseKernel(
                "U x, uint64 k0, uint64 k1", "U y", "y = x ^ (U)leap_siphash(k0, k1, 4ull * (unsigned long long)i);",
                "leap_expected_xor", preamble=_CUDA_SIPHASH))
    return _cuda_xor[0]


# ---- masking and the checksum (NumPy) ----------------------------------------------------------
def _np_chunks(n: int) -> Iterable[tuple[int, int]]:
    for start in range(0, n, NP_CHUNK):
        yield start, min(n, start + NP_CHUNK)


def _np_xor_stream(bits: np.ndarray, k0: int, k1: int) -> np.ndarray:
    """bits ^ stream (a new array): the NumPy mask / unmask of flat unsigned words."""
    out = np.empty_like(bits)
    for a, b in _np_chunks(bits.size):
        stream = siphash_words(k0, k1, np.arange(a, b, dtype=np.uint64) * np.uint64(4))
        out[a:b] = bits[a:b] ^ stream.astype(bits.dtype)
    return out


def _np_mac(bits: np.ndarray, k0: int, k1: int) -> int:
    """The keyed checksum of flat unsigned words (the formula of leap_mac_term)."""
    total = np.uint64(0)
    wide = bits.dtype.itemsize == 8
    with np.errstate(over="ignore"):
        for a, b in _np_chunks(bits.size):
            c = np.arange(a, b, dtype=np.uint64) * np.uint64(4)
            w = bits[a:b].astype(np.uint64)
            t = siphash_words(k0, k1, c + np.uint64(1)) * (w & np.uint64(0xFFFFFFFF))
            if wide:
                t += siphash_words(k0, k1, c + np.uint64(2)) * (w >> np.uint64(32))
            total += t.sum(dtype=np.uint64)
    return int(total)


# ---- one masked output -------------------------------------------------------------------------
@dataclass(eq=False)
class MaskedOutput:
    """One expected output on the device: `data` holds bits XOR stream(key); key and mac in host memory."""
    data: Any  # flat unsigned array on the device
    dtype: str  # the stored expected dtype (see normalise_expected)
    shape: tuple[int, ...]
    k0: int
    k1: int
    mac: int

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    def unmask(self, xp: Any) -> Any:
        """A plaintext copy (shape, stored dtype); the caller scrubs it when done."""
        if is_cupy(xp):
            bits = _cuda_xor_kernel()(self.data, np.uint64(self.k0), np.uint64(self.k1))
        else:
            bits = _np_xor_stream(self.data, self.k0, self.k1)
        return bits.view(self.dtype).reshape(self.shape)

    def verify(self, xp: Any) -> bool:
        """Whether the stored bits still match the checksum kept in host memory."""
        return checksum(xp, self.data, self.k0, self.k1) == self.mac

    def check(self, xp: Any, got: Any, out_dtype: str, atol: float, rtol: float,
              bad_of: Any = mismatch_mask) -> int | None:
        """How many elements of `got` fail compare_output's rule, or None when the stored bits no
        longer match the checksum (the entry was overwritten: do not trust it).

        `bad_of(xp, got, expected, dtype, atol, rtol)` is the boolean mask of failing elements used
        on NumPy (compare.mismatch_mask), so the count is exactly the one compare_output would find."""
        if is_cupy(xp):
            acc = xp.zeros(2, dtype=xp.uint64)
            self.launch_check(xp, acc, got, out_dtype, atol, rtol)
            mac, bad = (int(v) for v in acc.get())
            return bad if mac == self.mac else None
        if not self.verify(xp):
            return None
        if self.data.size == 0:
            return 0
        expected = self.unmask(xp)
        try:
            with np.errstate(all="ignore"):
                return int(bad_of(xp, got, expected, out_dtype, atol, rtol).sum())
        finally:
            scrub(xp, [expected], force=True)

    def launch_check(self, xp: Any, acc: Any, got: Any, out_dtype: str, atol: float, rtol: float) -> None:
        """CuPy: add (checksum, failing count) of `check` into the two zeroed uint64 device slots `acc`,
        without reading them back (trial_readout gathers several checks into one read). A mac
        different from `self.mac` means the entry was overwritten."""
        n = int(self.data.size)
        if n == 0:
            return
        g = xp.ascontiguousarray(got).reshape(-1)
        if g.size != n:
            raise ValueError(f"output has {g.size} elements, the cached expected {n}")
        _launch_check(_cuda_check_kernel(self.dtype, out_dtype), self.data, g, n, self.k0, self.k1, atol, rtol,
                      True, acc)


def _launch_check(kernel: Any, words: Any, got: Any, n: int, k0: int, k1: int, atol: float, rtol: float,
                  compare: bool, acc: Any) -> None:
    blocks = min(CHECK_MAX_BLOCKS, -(-n // CHECK_THREADS))
    kernel((blocks,), (CHECK_THREADS,), (words, got, np.uint64(n), np.uint64(k0), np.uint64(k1),
                                         np.float64(atol), np.float64(rtol), np.int32(compare), acc))


def launch_checksum(xp: Any, words: Any, k0: int, k1: int, acc: Any) -> None:
    """CuPy: add the keyed checksum (the entries' mac formula) of the flat unsigned `words` (16, 32 or
    64 bits) into the zeroed uint64 device slot acc[0] (acc has two slots; the second stays 0), no
    read back: an entry's mac (`checksum`, MaskedOutput.verify) and a trial's inputs
    (judge/trial_readout.py)."""
    n = int(words.size)
    if n == 0:
        return
    stored = {2: "float16", 4: "float32", 8: "float64"}[words.dtype.itemsize]
    _launch_check(_cuda_check_kernel(stored, "float32"), words, words, n, k0, k1, 0.0, 0.0, False, acc)


def checksum(xp: Any, words: Any, k0: int, k1: int) -> int:
    """The keyed checksum of flat unsigned `words` as a host int (CuPy: one launch and one read)."""
    if not is_cupy(xp):
        return _np_mac(np.ascontiguousarray(words).reshape(-1), k0, k1)
    acc = xp.zeros(2, dtype=xp.uint64)
    launch_checksum(xp, words, k0, k1, acc)
    return int(acc[0].get())


def normalise_expected(xp: Any, expected: Any, out_dtype: str, shape: tuple[int, ...]) -> Any | None:
    """The reference output as compare_output reads it (int64 via rint for int outputs; float16/32/64,
    else float64, for float outputs), contiguous in the declared shape; None when the element count
    differs (compare_output reports that as an env_error, so it is never cached)."""
    e = xp.asarray(expected)
    if int(e.size) != int(np.prod(shape, dtype=np.int64)):
        return None
    if out_dtype in INT_OUTPUTS:
        e = xp.rint(e).astype(xp.int64) if e.dtype.kind == "f" else e.astype(xp.int64)
    elif str(e.dtype) not in FLOAT_STORE:
        e = e.astype(xp.float64)
    return xp.ascontiguousarray(e).reshape(shape)


def mask_output(xp: Any, plain: Any) -> MaskedOutput:
    """Mask a normalised plaintext expected output under a fresh random key and checksum it."""
    k0, k1 = secrets.randbits(64), secrets.randbits(64)
    dtype = str(plain.dtype)
    bits = plain.reshape(-1).view(_UINT[plain.dtype.itemsize])
    if is_cupy(xp):
        data = _cuda_xor_kernel()(bits, np.uint64(k0), np.uint64(k1))
    else:
        data = _np_xor_stream(np.ascontiguousarray(bits), k0, k1)
    return MaskedOutput(data, dtype, tuple(plain.shape), k0, k1, checksum(xp, data, k0, k1))


# ---- scrubbing ---------------------------------------------------------------------------------
def scrub_wanted(xp: Any) -> bool:
    """Whether plaintext temporaries must be zeroed: on CuPy only (the cpu backend's kernels run in
    another process and see only the shared buffers they are given)."""
    return is_cupy(xp)


def scrub(xp: Any, arrays: Iterable[Any], keep: Iterable[Any] = (), force: bool = False) -> None:
    """Zero plaintext temporaries before they are released, on CuPy (or always with `force`), so a
    freed pool block does not hold expected values. Arrays sharing memory with one in `keep` (a
    reference may return a view of its inputs), read-only arrays and non-arrays are left alone."""
    if not (force or scrub_wanted(xp)):
        return
    kept = [k for k in keep if hasattr(k, "flags")]  # arrays only (a scalar shares no memory)
    for a in arrays:
        # CuPy's flags have no `writeable` (device arrays always are); NumPy's may say read-only
        if not hasattr(a, "fill") or not hasattr(a, "flags") or not getattr(a.flags, "writeable", True):
            continue
        if any(_may_share(xp, a, k) for k in kept):
            continue
        a.fill(0)


def _may_share(xp: Any, a: Any, b: Any) -> bool:
    try:
        return bool(xp.may_share_memory(a, b))
    except Exception:
        return True  # unknown: do not zero what might be an input


# ---- the cache ---------------------------------------------------------------------------------
@dataclass(eq=False)
class _Entry:
    outputs: list[MaskedOutput]

    @property
    def nbytes(self) -> int:
        return sum(o.nbytes for o in self.outputs)


class ExpectedCache(ByteLRU[_Entry]):
    """A byte-bounded LRU of masked per-trial expected outputs (one device, one array module)."""

    def get(self, key: Hashable, count: bool = True) -> list[MaskedOutput] | None:
        """The masked outputs of a trial (now most recently used), or None (`count`: ByteLRU.lookup)."""
        entry = self.lookup(key, count)
        return None if entry is None else list(entry.outputs)

    def put(self, key: Hashable, outputs: list[MaskedOutput]) -> bool:
        """Store a trial's masked outputs (ByteLRU.store: False when larger than the whole bound)."""
        return self.store(key, _Entry(list(outputs)))


def cache_for(device: Any, max_bytes: int) -> ExpectedCache | None:
    """The device's cache (created on first use, kept on the device object like the reference
    timing cache; its bound follows the latest config); None for a device without a __dict__."""
    cache = kept_on(device, "_harness_expected", lambda: ExpectedCache(max_bytes))
    if cache is None:
        return None
    if cache.max_bytes != max_bytes:
        cache.max_bytes = int(max_bytes)
    return cache
