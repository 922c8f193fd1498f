"""Helpers shared by the suite modules: solution formatting, CUDA device-code snippets, array-API math.

Why: each task's `solution` is a complete, self-contained submission (DESIGN 3.2); the snippets here
are pasted into several solutions (block reductions, warp shuffles) so they are written and reviewed
once. Nothing here runs policy code.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
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



def float64_reference(reference: Callable[..., Any]) -> Callable[..., Any]:
    """`reference` run on float64 copies of its floating-point arrays (integer arrays and scalars as
    given); the reference casts its result to the output dtype. Why: a float32 reference of a long sum
    is itself off by the rounding a correct kernel is judged against (a float32 layer norm disagreed
    with a float64-accumulating kernel by 0.006), so expected outputs are the exact values rounded once."""
    @functools.wraps(reference)
    def in_float64(xp: Any, **arrays: Any) -> Any:
        wide = {k: v.astype(xp.float64) if getattr(v, "dtype", None) is not None and v.dtype.kind == "f" else v
                for k, v in arrays.items()}
        return reference(xp, **wide)
    return in_float64


# Input-derived tolerance terms (Task.slack): the rounding a correct float32 kernel makes where the
# inputs amplify it, as the reference computes it from the inputs in float64. UNIT is float32's unit
# roundoff; the factors are measured with the stand-ins of tests/kernels_env/test_calibration.py
# (sequential, tree, Welford and float64 accumulation, every draw family) with a margin of 2 or more.
UNIT = 2.0 ** -24
SCAN_SLACK = 4.0  # times sqrt(j) * UNIT * sum_{i <= j} |x_i|
NORM_SLACK = 4.0  # times sqrt(n) * UNIT * mean|x| * rstd * |w|


def scan_slack(xp: Any, x: Any, reverse: bool = False) -> Any:
    """A prefix sum's rounding along axis 1: SCAN_SLACK * sqrt(j) * UNIT * (prefix sum of |x| up to
    j), j the number of terms summed (from the end with `reverse`). A sequential float32 scan's
    error grows like sqrt(j) * UNIT * sum|x| (a random walk of roundings of partial sums of at most
    sum|x|); a term this size is far below the error of a skipped or repeated element."""
    a = xp.abs(x.astype(xp.float64))
    if reverse:
        a = xp.flip(a, axis=1)
    j = xp.arange(1, a.shape[1] + 1, dtype=xp.float64)
    term = SCAN_SLACK * UNIT * xp.sqrt(j) * xp.cumsum(a, axis=1)
    return xp.flip(term, axis=1) if reverse else term


def norm_slack(xp: Any, h: Any, axes: tuple[int, ...], eps: float) -> Any:
    """A normalisation's rounding over `axes` of `h`, before any affine weight: NORM_SLACK * sqrt(n)
    * UNIT * mean|h| * rstd, rstd = 1 / sqrt(var + eps). The mean of n float32 terms is off by about
    sqrt(n) * UNIT * mean|h| whatever the summation order, and (h - mean) * rstd multiplies that by
    rstd: a row of large mean and small spread (90 +- 0.018: rstd ~ 95) or a constant row (var 0:
    rstd = 1 / sqrt(eps) ~ 316) amplifies it. Multiply by |weight| where the task scales."""
    h = h.astype(xp.float64)
    n = 1
    for a in axes:
        n *= h.shape[a]
    mu = xp.mean(h, axis=axes, keepdims=True)
    var = xp.mean((h - mu) ** 2, axis=axes, keepdims=True)
    return NORM_SLACK * UNIT * float(n) ** 0.5 * xp.mean(xp.abs(h), axis=axes, keepdims=True) / xp.sqrt(var + eps)
