"""A correctness trial's device checks, gathered into one vector and read back to the host once.

After a trial's kernels ran the harness needs, per output and scratch buffer, how many of the
poisoned guard elements before and after it changed; per input, whether it still holds the bits it
was given; per output with a cached expected value, the expected cache's fused check (the entry's
checksum, the failing elements). Read one by one, each is a few CuPy calls and a host
synchronisation: on the generated family (small buffers) such host work, not the GPU, was most of
a trial. Here each check is one kernel that adds its counts into two slots of one uint64 device
vector, and `read` copies the vector back once.

An input is judged unchanged by a keyed checksum of its bits (judge/expected_cache.py's formula:
sum_i r_i * w_i mod 2**64, r_i a SipHash stream under a fresh 128-bit key kept in host memory),
taken before the launch and read back then (`InputDigest`), and again after the run. A kernel that
changes an input changes the sum except with probability <= 2**-32 (it cannot compute r_i without
the key), so the inputs it was given need neither a device copy (which the kernel could rewrite
together with the input) nor a second draw to compare with.

On CuPy the checks are RawKernels; on NumPy (the cpu backend in tests that turn the path on, see
expected_cache.used_on) the same numbers are computed directly.
"""
from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernels_env.judge import expected_cache
from kernels_env.judge.poison import bits, poison_bits

GUARD_THREADS = 256
GUARD_MAX_BLOCKS = 1024
_C_UINT = {2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
_GUARD_SOURCE = r"""
extern "C" __global__ void leap_guard_count(const LEAP_U* lead, const LEAP_U* trail, unsigned long long g,
                                            LEAP_U poison, unsigned long long* acc) {
    unsigned long long in_lead = 0ull, in_trail = 0ull;
    unsigned long long stride = (unsigned long long)blockDim.x * gridDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < g; i += stride) {
        in_lead += (unsigned long long)(lead[i] != poison);
        in_trail += (unsigned long long)(trail[i] != poison);
    }
    for (int off = 16; off > 0; off >>= 1) {
        in_lead += __shfl_down_sync(0xffffffffu, in_lead, off);
        in_trail += __shfl_down_sync(0xffffffffu, in_trail, off);
    }
    if ((threadIdx.x & 31) == 0 && (in_lead | in_trail)) {
        atomicAdd(acc, in_lead);
        atomicAdd(acc + 1, in_trail);
    }
}
"""
_lock = threading.Lock()
_guard_kernels: dict[int, Any] = {}


def _guard_kernel(width: int) -> Any:
    """`leap_guard_count` for unsigned words of `width` bytes, built once per process."""
    with _lock:
        k = _guard_kernels.get(width)
        if k is None:
            import cupy
            k = cupy.RawKernel(f"#define LEAP_U {_C_UINT[width]}\n" + _GUARD_SOURCE, "leap_guard_count")
            _guard_kernels[width] = k
    return k


def _flat_words(xp: Any, a: Any) -> Any:
    """`a`'s elements as flat unsigned words of its width (a view when contiguous)."""
    return bits(xp, xp.ascontiguousarray(a).reshape(-1))


class TrialReadout:
    """Checks queued on the device (CuPy) or computed at once (NumPy); `read` gives their values.

    Each check takes two slots and returns the index of its first; `read()` returns every slot as a
    host int (one device-to-host copy on CuPy)."""

    def __init__(self, xp: Any, checks: int) -> None:
        self.xp = xp
        self.cupy = expected_cache.is_cupy(xp)
        self.size = 2 * int(checks)
        self.acc: Any = xp.zeros(self.size, dtype=xp.uint64) if self.cupy else None
        self.values = [0] * self.size
        self.used = 0

    def _slots(self) -> int:
        if self.used + 2 > self.size:
            raise ValueError(f"TrialReadout made for {self.size // 2} checks; one more was queued")
        self.used += 2
        return self.used - 2

    def guards(self, guard: tuple[Any, Any], dtype: str) -> int:
        """Queue the counts of changed elements in (lead, trail) guard regions of one buffer."""
        i = self._slots()
        lead, trail = guard
        utype, value = poison_bits(dtype)
        if self.cupy:
            g = int(lead.size)
            if int(trail.size) != g:
                raise ValueError(f"guards of {g} and {int(trail.size)} elements; expected equal regions")
            if g:
                blocks = min(GUARD_MAX_BLOCKS, -(-g // GUARD_THREADS))
                _guard_kernel(np.dtype(utype).itemsize)(
                    (blocks,), (GUARD_THREADS,),
                    (bits(self.xp, lead), bits(self.xp, trail), np.uint64(g), utype(value), self.acc[i:i + 2]))
        else:
            self.values[i] = int((bits(self.xp, lead) != utype(value)).sum())
            self.values[i + 1] = int((bits(self.xp, trail) != utype(value)).sum())
        return i

    def checksum(self, array: Any, key: tuple[int, int]) -> int:
        """Queue the keyed checksum of `array`'s bits (see the module docstring)."""
        i = self._slots()
        words = _flat_words(self.xp, array)
        if self.cupy:
            expected_cache.launch_checksum(self.xp, words, key[0], key[1], self.acc[i:i + 2])
        else:
            self.values[i] = expected_cache.checksum(self.xp, words, *key)
        return i

    def expected(self, masked: expected_cache.MaskedOutput, got: Any, dtype: str, atol: float,
                 rtol: float) -> int:
        """Queue the expected cache's fused check of output `got`: slot i the entry's checksum (equal to
        masked.mac while intact), slot i + 1 the elements failing compare_output's rule."""
        i = self._slots()
        if self.cupy:
            masked.launch_check(self.xp, self.acc[i:i + 2], got, dtype, atol, rtol)
        else:
            bad = masked.check(self.xp, got, dtype, atol, rtol)  # None: the entry was overwritten
            self.values[i], self.values[i + 1] = (masked.mac, bad) if bad is not None else (masked.mac ^ 1, 0)
        return i

    def read(self) -> list[int]:
        """Every slot's value as host ints (on CuPy the one read of the trial's checks)."""
        if self.cupy and self.used:
            self.values = [int(v) for v in self.acc.get()]
        return self.values


@dataclass(frozen=True)
class InputDigest:
    """Keyed checksums of a trial's inputs as given to its kernels; key and values in host memory."""
    key: tuple[int, int]
    values: dict[str, int]

    @classmethod
    def of(cls, xp: Any, inputs: dict[str, Any], key: tuple[int, int] | None = None) -> InputDigest:
        """Checksum `inputs` under `key`, by default a fresh one (one read back on CuPy, before any
        kernel sees them)."""
        key = key if key is not None else (secrets.randbits(64), secrets.randbits(64))
        readout = TrialReadout(xp, len(inputs))
        slots = {name: readout.checksum(a, key) for name, a in inputs.items()}
        values = readout.read()
        return cls(key, {name: values[i] for name, i in slots.items()})
