"""Helpers shared by the suite modules: solution formatting, CUDA device-code snippets, array-API math.

Why: each task's `solution` is a complete, self-contained submission (DESIGN 3.2); the snippets here
are pasted into several solutions (block reductions, warp shuffles) so they are written and reviewed
once. Nothing here runs policy code.
"""
from __future__ import annotations

from typing import Any


def solution(cuda: str, launch: str, note: str = "") -> str:
    """Format a known-good submission as the policy would write it: prose, a cuda and a launch block."""
    text = note.strip() + "\n\n" if note.strip() else ""
    return f"{text}```cuda\n{cuda.strip()}\n```\n\n```launch\n{launch.strip()}\n```\n"


# Warp and block reductions. The block helpers take a caller-declared `__shared__ float sh[33]` so the
# kernels keep every shared declaration at kernel scope. Every thread of the block must call them
# (blockDim.x a multiple of 32, at most 1024); the result is returned to all threads.
REDUCE_CUDA = r"""
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
    return v;
}

// Sum of v over the block; sh must hold >= 33 floats of shared memory.
__device__ float block_sum(float v, float* sh) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // sh may still be read from a previous call
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    if (wid == 0) {
        float t = lane < nw ? sh[lane] : 0.0f;
        t = warp_sum(t);
        if (lane == 0) sh[32] = t;
    }
    __syncthreads();
    return sh[32];
}

// Max of v over the block; sh must hold >= 33 floats of shared memory.
__device__ float block_max(float v, float* sh) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    if (wid == 0) {
        float t = lane < nw ? sh[lane] : -3.402823466e+38f;
        t = warp_max(t);
        if (lane == 0) sh[32] = t;
    }
    __syncthreads();
    return sh[32];
}
"""

# A single-block kernel that sums `n` partial values and writes `total / denom` to out[0]. Used as the
# second stage of whole-tensor reductions (losses): deterministic, and it writes the output instead of
# accumulating into it (outputs are NaN-poisoned before each trial).
FINISH_SUM_CUDA = r"""
extern "C" __global__ void finish_sum(const float* __restrict__ partial, float* __restrict__ out,
                                      int n, float denom) {
    __shared__ float sh[33];
    float acc = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i];
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) out[0] = acc / denom;
}
"""


def erf(xp: Any, x: Any) -> Any:
    """erf for numpy and cupy alike (neither namespace has it): Abramowitz-Stegun 7.1.26 in float64,
    absolute error < 1.5e-7, far inside the float32 task tolerance."""
    x64 = x.astype(xp.float64)
    s = xp.sign(x64)
    a = xp.abs(x64)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return s * (1.0 - poly * xp.exp(-a * a))


def softplus(xp: Any, x: Any) -> Any:
    """log(1 + exp(x)) without overflow."""
    return xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))


def sigmoid(xp: Any, x: Any) -> Any:
    """1 / (1 + exp(-x)) without overflow warnings for large |x|."""
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))

