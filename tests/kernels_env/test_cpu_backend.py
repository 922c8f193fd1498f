"""The cpu backend on its own: translation, fibers (barriers, shuffles, votes), shared memory, atomics,
fp16/bf16, math intrinsics, guard pages, traps, timeouts, unsupported features and the build cache.

Device code is handed to CpuDevice.load as a CompiledModule (as the pipeline does after NVRTC), and
every result is checked against NumPy computed from the definition of the CUDA operation.
"""
from __future__ import annotations

import numpy as np
import pytest

from kernels_env.backends.base import KernelRuntimeError, KernelTimeout
from kernels_env.backends.cpu import CpuDevice
from kernels_env.backends.cpu import build as cpu_build
from kernels_env.compiler.compile import CompileError
from kernels_env.core.config import EnvConfig, StageLimits
from kernels_env.core.program import CompiledModule
from kernels_env.source.signatures import find_kernels


def module(src: str) -> CompiledModule:
    return CompiledModule(source=src, arch="sm_90", cubin=b"", kernels=find_kernels(src))


def run(dev: CpuDevice, prog, kernel: str, grid, block, args, shared: int = 0) -> None:
    grid = grid if isinstance(grid, tuple) else (grid, 1, 1)
    block = block if isinstance(block, tuple) else (block, 1, 1)
    dev.launch(prog, kernel, grid, block, shared, args)
    dev.synchronize()


@pytest.fixture(scope="module")
def dev():
    d = CpuDevice(EnvConfig(limits=StageLimits(correctness=2.0, timing=2.0)))
    yield d
    d.close()


# ---- one module with many kernels, built once ---------------------------------------------------
SRC = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>

template <typename T, int UNROLL>
__device__ __forceinline__ T axpb(T a, T x, T b) {
#pragma unroll
    for (int k = 0; k < UNROLL; ++k) { (void)k; }
    return a * x + b;
}

extern "C" __global__ void tiled_matmul(const float* __restrict__ A, const float* __restrict__ B,
                                        float* __restrict__ C, int M, int N, int K) {
    __shared__ float As[16][16];
    __shared__ float Bs[16][16];
    int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (K + 15) / 16; ++t) {
        int ka = t * 16 + threadIdx.x, kb = t * 16 + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? A[row * K + ka] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? B[kb * N + col] : 0.0f;
        __syncthreads();
#pragma unroll 4
        for (int k = 0; k < 16; ++k) acc = fmaf(As[threadIdx.y][k], Bs[k][threadIdx.x], acc);
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

// out[5*i + j]: the five shuffles of lane i's value v = x[i]
extern "C" __global__ void shuffles(const float* x, float* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[i];
    out[5 * i + 0] = __shfl_sync(0xffffffffu, v, 3);
    out[5 * i + 1] = __shfl_up_sync(0xffffffffu, v, 2);
    out[5 * i + 2] = __shfl_down_sync(0xffffffffu, v, 5);
    out[5 * i + 3] = __shfl_xor_sync(0xffffffffu, v, 9);
    out[5 * i + 4] = __shfl_down_sync(0xffffffffu, v, 3, 8);
}

extern "C" __global__ void votes(const int* x, unsigned int* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int p = x[i] > 0;
    unsigned b = __ballot_sync(0xffffffffu, p);
    int any = __any_sync(0xffffffffu, p), all = __all_sync(0xffffffffu, p);
    int cnt = __syncthreads_count(p);
    out[4 * i + 0] = b; out[4 * i + 1] = any; out[4 * i + 2] = all; out[4 * i + 3] = cnt;
}

extern "C" __global__ void warp_sum(const float* x, float* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = x[i];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    out[i] = v;  // every lane holds its warp's sum
}

extern "C" __global__ void reverse_dyn(const float* x, float* y, int n) {
    extern __shared__ float buf[];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    buf[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    int j = blockIdx.x * blockDim.x + (blockDim.x - 1 - t);
    if (j < n) y[j] = buf[t];
}

extern "C" __global__ void atomics(const int* bins, int n, int* hist, float* fsum, int* imax,
                                   unsigned int* cas_count) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    atomicAdd(&hist[bins[i]], 1);
    atomicAdd(fsum, 0.5f);
    atomicMax(imax, bins[i] * 3 - 7);
    unsigned old = *cas_count, assumed;
    do { assumed = old; old = atomicCAS(cas_count, assumed, assumed + 2u); } while (old != assumed);
}

extern "C" __global__ void half_ops(const float* a, const float* b, __half* conv, __half* sum,
                                    __half* prod, __nv_bfloat16* bconv, float* back, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __half ha = __float2half(a[i]), hb = __float2half_rn(b[i]);
    conv[i] = ha;
    sum[i] = __hadd(ha, hb);
    prod[i] = __hmul(ha, hb);
    bconv[i] = __float2bfloat16(a[i]);
    back[i] = __half2float(ha);
}

extern "C" __global__ void math_ops(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    float a = fabsf(v) + 0.5f;
    out[8 * i + 0] = __expf(v);
    out[8 * i + 1] = rsqrtf(a);
    out[8 * i + 2] = __fdividef(v, a);
    out[8 * i + 3] = fmaf(v, 3.0f, -1.0f);
    out[8 * i + 4] = erff(v) + tanhf(v);
    out[8 * i + 5] = fmaxf(v, 0.0f) + fminf(v, 0.0f) * 2.0f;
    out[8 * i + 6] = (float)max(i - 100, 5) + (float)min(3u, (unsigned)i);  // int / unsigned overloads
    out[8 * i + 7] = axpb<float, 4>(2.0f, __ldg(&x[i]), 1.0f) + (v < -INFINITY ? FLT_MAX : 0.0f);
}

extern "C" __global__ void vec4(const float* x, float* y, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 v = reinterpret_cast<const float4*>(x)[i];
    float2 p = make_float2(v.x + v.y, v.z + v.w);
    reinterpret_cast<float4*>(y)[i] = make_float4(p.x, p.y, v.w, v.x);
}

extern "C" __global__ void write_at(float* y, int index) { y[index] = 1.0f; }

extern "C" __global__ void race_sum(const float* x, float* out) {  // no barriers: a race
    __shared__ float s[256];
    int t = threadIdx.x;
    s[t] = x[blockIdx.x * 256 + t];
    for (int k = 128; k > 0; k >>= 1) if (t < k) s[t] += s[t + k];
    if (t == 0) out[blockIdx.x] = s[0];
}

extern "C" __global__ void traps(int which) {
    if (threadIdx.x == 7 && which == 0) __trap();
    if (threadIdx.x == 7 && which == 1) assert(which == 12345);
}

extern "C" __global__ void big_block(float* y) {  // 1024 fibers, barriers and warp ops
    __shared__ float s[1024];
    int t = threadIdx.x;
    s[t] = (float)t;
    __syncthreads();
    float v = s[1023 - t];
    v = __shfl_sync(0xffffffffu, v, 0);
    __syncwarp();
    y[t] = v;
}
"""


@pytest.fixture(scope="module")
def prog(dev):
    return dev.load(module(SRC), dev.config)


def test_device_attributes(dev):
    assert dev.name == "cpu" and dev.xp is np
    assert dev.timing_device == "cpu" and dev.timing_comparable is False


def test_tiled_matmul_2d_blocks_and_barriers(dev, prog):
    rng = np.random.default_rng(0)
    M, N, K = 37, 29, 45
    A = dev.to_device(rng.standard_normal((M, K)).astype(np.float32))
    B = dev.to_device(rng.standard_normal((K, N)).astype(np.float32))
    for _ in range(3):  # forward, reverse, interleaved thread orders
        C = dev.empty((M, N), "float32")
        run(dev, prog, "tiled_matmul", ((N + 15) // 16, (M + 15) // 16, 1), (16, 16, 1),
            [A, B, C, np.int32(M), np.int32(N), np.int32(K)])
        np.testing.assert_allclose(dev.to_host(C), A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)


def test_warp_shuffles_match_their_definition(dev, prog):
    n = 96  # three warps
    x = dev.to_device(np.arange(n, dtype=np.float32) * 1.5 + 0.25)
    out = dev.zeros((n * 5,), "float32")
    run(dev, prog, "shuffles", 1, n, [x, out])
    got = dev.to_host(out).reshape(n, 5)
    xv = np.asarray(x)
    exp = np.zeros((n, 5), np.float32)
    for i in range(n):
        w, lane = i // 32 * 32, i % 32
        exp[i, 0] = xv[w + 3]
        exp[i, 1] = xv[i - 2] if lane >= 2 else xv[i]
        exp[i, 2] = xv[i + 5] if lane + 5 < 32 else xv[i]
        exp[i, 3] = xv[w + (lane ^ 9)]
        exp[i, 4] = xv[i + 3] if lane % 8 + 3 < 8 else xv[i]
    np.testing.assert_array_equal(got, exp)


def test_votes_and_syncthreads_count(dev, prog):
    n = 64
    rng = np.random.default_rng(1)
    xs = rng.integers(-3, 4, size=n).astype(np.int32)
    xs[32:64] = 5  # second warp: all positive
    x = dev.to_device(xs)
    out = dev.zeros((n * 4,), "uint32")
    run(dev, prog, "votes", 1, n, [x, out])
    got = dev.to_host(out).reshape(n, 4)
    for w in range(2):
        pred = xs[32 * w:32 * w + 32] > 0
        ballot = sum(1 << j for j in range(32) if pred[j])
        assert (got[32 * w:32 * w + 32, 0] == ballot).all()
        assert (got[32 * w:32 * w + 32, 1] == int(pred.any())).all()
        assert (got[32 * w:32 * w + 32, 2] == int(pred.all())).all()
    assert (got[:, 3] == int((xs > 0).sum())).all()


def test_warp_reduction_and_1024_thread_blocks(dev, prog):
    x = dev.to_device(np.random.default_rng(2).standard_normal(256).astype(np.float32))
    out = dev.empty((256,), "float32")
    run(dev, prog, "warp_sum", 2, 128, [x, out])
    sums = np.asarray(x, np.float64).reshape(8, 32).sum(1)
    np.testing.assert_allclose(dev.to_host(out).reshape(8, 32), np.repeat(sums[:, None], 32, 1), rtol=1e-5,
                               atol=1e-5)
    y = dev.empty((1024,), "float32")
    run(dev, prog, "big_block", 1, 1024, [y])
    lane0 = np.arange(1024) // 32 * 32  # lane 0 of each warp read s[1023 - lane0]
    np.testing.assert_array_equal(dev.to_host(y), (1023 - lane0).astype(np.float32))


def test_dynamic_shared_memory(dev, prog):
    n = 1000
    xs = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    x, y = dev.to_device(xs), dev.empty((n,), "float32")
    run(dev, prog, "reverse_dyn", 4, 256, [x, y, np.int32(n)], shared=256 * 4)
    exp = np.empty(n, np.float32)
    for b in range(4):
        for t in range(256):
            i, j = b * 256 + t, b * 256 + 255 - t
            if j < n:
                exp[j] = xs[i] if i < n else 0.0
    np.testing.assert_array_equal(dev.to_host(y), exp)


def test_dynamic_shared_memory_overrun_is_an_error(dev, prog):
    x, y = dev.to_device(np.ones(256, np.float32)), dev.empty((256,), "float32")
    dev.launch(prog, "reverse_dyn", (1, 1, 1), (256, 1, 1), 16, [x, y, np.int32(256)])  # 16 bytes: too few
    with pytest.raises(KernelRuntimeError, match="dynamic shared memory"):
        dev.synchronize()


def test_atomics(dev, prog):
    n = 700
    bins_h = np.random.default_rng(4).integers(0, 10, size=n).astype(np.int32)
    bins = dev.to_device(bins_h)
    hist, fsum = dev.zeros((10,), "int32"), dev.zeros((1,), "float32")
    imax = dev.to_device(np.array([-1000], np.int32))
    cas = dev.zeros((1,), "uint32")
    run(dev, prog, "atomics", 3, 256, [bins, np.int32(n), hist, fsum, imax, cas])
    np.testing.assert_array_equal(dev.to_host(hist), np.bincount(bins_h, minlength=10))
    assert dev.to_host(fsum)[0] == pytest.approx(0.5 * n)
    assert dev.to_host(imax)[0] == bins_h.max() * 3 - 7
    assert dev.to_host(cas)[0] == 2 * n


def _bf16_rne(a: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits by round-to-nearest-even, from the definition."""
    u = a.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(a)
    r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def test_half_and_bfloat16_match_numpy(dev, prog):
    rng = np.random.default_rng(5)
    a = np.concatenate([rng.standard_normal(200) * 10, rng.standard_normal(50) * 1e-5,
                        [65504.0, 65519.0, 65520.0, 1e6, -1e6, 6e-8, 3e-8, 0.0, -0.0, np.inf, -np.inf,
                         1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11]]).astype(np.float32)
    b = rng.standard_normal(a.size).astype(np.float32)
    n = a.size
    A, B = dev.to_device(a), dev.to_device(b)
    conv, s, p = dev.empty((n,), "float16"), dev.empty((n,), "float16"), dev.empty((n,), "float16")
    bconv, back = dev.empty((n,), "uint16"), dev.empty((n,), "float32")
    run(dev, prog, "half_ops", (n + 127) // 128, 128, [A, B, conv, s, p, bconv, back, np.int32(n)])
    with np.errstate(over="ignore"):
        ha, hb = a.astype(np.float16), b.astype(np.float16)
    np.testing.assert_array_equal(dev.to_host(conv).view(np.uint16), ha.view(np.uint16))
    with np.errstate(invalid="ignore", over="ignore"):
        ha, hb = a.astype(np.float16), b.astype(np.float16)
        exp_sum = (ha.astype(np.float32) + hb.astype(np.float32)).astype(np.float16)
        exp_prod = (ha.astype(np.float32) * hb.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(dev.to_host(s).view(np.uint16), exp_sum.view(np.uint16))
    np.testing.assert_array_equal(dev.to_host(p).view(np.uint16), exp_prod.view(np.uint16))
    np.testing.assert_array_equal(dev.to_host(bconv), _bf16_rne(a))
    np.testing.assert_array_equal(dev.to_host(back), ha.astype(np.float32))


def test_math_intrinsics_and_overloads(dev, prog):
    n = 300
    xs = np.linspace(-6, 6, n).astype(np.float32)
    x, out = dev.to_device(xs), dev.empty((n * 8,), "float32")
    run(dev, prog, "math_ops", 3, 128, [x, out, np.int32(n)])
    got = dev.to_host(out).reshape(n, 8).astype(np.float64)
    v = xs.astype(np.float64)
    a = np.abs(v) + 0.5
    from math import erf
    i = np.arange(n)
    exp = np.stack([np.exp(v), 1 / np.sqrt(a), v / a, v * 3 - 1, np.vectorize(erf)(v) + np.tanh(v),
                    np.maximum(v, 0) + np.minimum(v, 0) * 2, np.maximum(i - 100, 5) + np.minimum(3, i),
                    2 * v + 1], axis=1)
    np.testing.assert_allclose(got, exp, rtol=2e-6, atol=2e-6)


def test_vector_types(dev, prog):
    xs = np.arange(64, dtype=np.float32)
    x, y = dev.to_device(xs), dev.empty((64,), "float32")
    run(dev, prog, "vec4", 1, 32, [x, y, np.int32(16)])
    q = xs.reshape(16, 4)
    exp = np.stack([q[:, 0] + q[:, 1], q[:, 2] + q[:, 3], q[:, 3], q[:, 0]], 1).ravel()
    np.testing.assert_array_equal(dev.to_host(y), exp)


def test_out_of_bounds_write_is_an_illegal_memory_access(dev, prog):
    y = dev.empty((10,), "float32")
    dev.launch(prog, "write_at", (1, 1, 1), (1, 1, 1), 0, [y, np.int32(12)])  # 8 bytes past the end
    with pytest.raises(KernelRuntimeError, match="illegal memory access.*past the end"):
        dev.synchronize()
    dev.launch(prog, "write_at", (1, 1, 1), (1, 1, 1), 0, [y, np.int32(-2000)])  # into the leading guard
    with pytest.raises(KernelRuntimeError, match="illegal memory access.*before the start"):
        dev.synchronize()
    run(dev, prog, "write_at", 1, 1, [y, np.int32(9)])  # the device still works
    assert dev.to_host(y)[9] == 1.0


def test_launches_after_a_failure_do_not_run_until_synchronize(dev, prog):
    y = dev.zeros((4,), "float32")
    dev.launch(prog, "write_at", (1, 1, 1), (1, 1, 1), 0, [y, np.int32(100)])
    dev.launch(prog, "write_at", (1, 1, 1), (1, 1, 1), 0, [y, np.int32(0)])  # skipped: stream broken
    with pytest.raises(KernelRuntimeError):
        dev.to_host(y)
    assert dev.to_host(y)[0] == 0.0


def test_trap_and_assert_are_runtime_errors(dev, prog):
    dev.launch(prog, "traps", (1, 1, 1), (32, 1, 1), 0, [np.int32(0)])
    with pytest.raises(KernelRuntimeError, match=r"__trap\(\).*thread \(7,0,0\)"):
        dev.synchronize()
    dev.launch(prog, "traps", (1, 1, 1), (32, 1, 1), 0, [np.int32(1)])
    with pytest.raises(KernelRuntimeError, match="assertion `which == 12345` failed"):
        dev.synchronize()
    run(dev, prog, "traps", 1, 32, [np.int32(2)])


def test_missing_barrier_race_shows_in_some_thread_order(dev, prog):
    xs = np.random.default_rng(6).standard_normal(512).astype(np.float32)
    x = dev.to_device(xs)
    exp = xs.reshape(2, 256).astype(np.float64).sum(1)
    wrong = 0
    for _ in range(3):
        out = dev.zeros((2,), "float32")
        run(dev, prog, "race_sum", 2, 256, [x, out])
        wrong += not np.allclose(dev.to_host(out), exp, rtol=1e-4, atol=1e-4)
    assert wrong >= 1


def test_invalid_configuration(dev, prog):
    y = dev.zeros((4,), "float32")
    with pytest.raises(KernelRuntimeError, match="invalid configuration"):
        dev.launch(prog, "write_at", (1, 1, 1), (2048, 1, 1), 0, [y, np.int32(0)])
    with pytest.raises(KernelRuntimeError, match="arguments"):
        dev.launch(prog, "write_at", (1, 1, 1), (1, 1, 1), 0, [y])


def test_time_ms_reports_cpu_times(dev, prog):
    y = dev.zeros((4,), "float32")
    times = dev.time_ms(lambda: dev.launch(prog, "write_at", (1, 1, 1), (1, 1, 1), 0, [y, np.int32(0)]),
                        2, 5, True)
    assert len(times) == 5 and all(t >= 0.0 for t in times)


# ---- separate modules ----------------------------------------------------------------------------
def test_infinite_loop_times_out_and_device_recovers(dev):
    src = r"""
extern "C" __global__ void spin(volatile int* flag, float* y) {
    while (flag[0] == 0) { }
    y[threadIdx.x] = 1.0f;
}
extern "C" __global__ void spin_sync(volatile int* flag, float* y) {
    __syncthreads();
    while (flag[0] == 0) { }
    y[threadIdx.x] = 1.0f;
}"""
    cfg = EnvConfig(limits=StageLimits(correctness=0.5, timing=0.5))
    p = dev.load(module(src), cfg)
    flag, y = dev.zeros((1,), "int32"), dev.zeros((64,), "float32")
    for k in ("spin", "spin_sync"):
        dev.launch(p, k, (1, 1, 1), (64, 1, 1), 0, [flag, y])
        with pytest.raises(KernelTimeout, match="CPU time"):
            dev.synchronize()
    flag[0] = 1
    run(dev, p, "spin_sync", 1, 64, [flag, y])
    assert (dev.to_host(y) == 1.0).all()


def test_fiber_stack_overflow_is_reported(dev):
    src = r"""
extern "C" __global__ void deep(float* y, int n) {
    volatile float big[40000];  // 160 KB of locals: more than a fiber stack
    for (int i = 0; i < n; ++i) big[i] = (float)i;
    __syncthreads();
    y[threadIdx.x] = big[n - 1];
}"""
    p = dev.load(module(src), dev.config)
    y = dev.zeros((32,), "float32")
    dev.launch(p, "deep", (1, 1, 1), (32, 1, 1), 0, [y, np.int32(40000)])
    with pytest.raises(KernelRuntimeError, match="stack overflow"):
        dev.synchronize()


@pytest.mark.parametrize("snippet,feature", [
    ('asm volatile("membar.gl;");', "inline PTX"),
    ("wmma::fragment<int, 16, 16, 16, int> f;", "wmma"),
    ("cooperative_groups::this_grid().sync();", "cooperative groups"),
    ("float t = tex1Dfetch<float>(0, 0);", "textures"),
    ("unsigned m = __match_any_sync(0xffffffffu, 1);", "__match_any_sync"),
])
def test_unsupported_features_are_compile_errors_naming_them(dev, snippet, feature):
    src = 'extern "C" __global__ void k(float* y) {\n    ' + snippet + "\n    y[0] = 1.0f;\n}\n"
    with pytest.raises(CompileError) as ei:
        dev.load(module(src), dev.config)
    assert feature in ei.value.log and "cupy" in ei.value.log and "line 2" in ei.value.log


def test_unsupported_word_in_a_comment_is_fine(dev):
    src = ('// uses no asm and no wmma; see "tex1D" docs\n'
           'extern "C" __global__ void k(float* y) { y[threadIdx.x] = 2.0f; }\n')
    p = dev.load(module(src), dev.config)
    y = dev.zeros((4,), "float32")
    run(dev, p, "k", 1, 4, [y])
    assert (dev.to_host(y) == 2.0).all()


def test_host_compiler_errors_point_at_kernel_lines(dev):
    src = 'extern "C" __global__ void k(float* y) {\n    y[0] = not_declared_anywhere(1.0f);\n}\n'
    with pytest.raises(CompileError) as ei:
        dev.load(module(src), dev.config)
    assert "kernel.cu:2" in ei.value.log and "not_declared_anywhere" in ei.value.log


def test_build_cache_reuses_objects(dev, tmp_path, monkeypatch):
    monkeypatch.setenv("LEAP_CPU_CACHE_DIR", str(tmp_path))
    calls = []
    real_run = cpu_build.subprocess.run

    def counting_run(*a, **kw):
        if "-shared" in a[0]:  # the shared-object builds (not the symbol checks' compiles and nm)
            calls.append(a)
        return real_run(*a, **kw)

    monkeypatch.setattr(cpu_build.subprocess, "run", counting_run)
    src = 'extern "C" __global__ void k(float* y) { y[threadIdx.x] = 3.0f; }\n'
    p1 = dev.load(module(src), dev.config)
    p2 = dev.load(module(src), dev.config)
    assert len(calls) == 1 and p1.path == p2.path and p1.path.parent == tmp_path
    dev.load(module(src.replace("3.0f", "4.0f")), dev.config)
    assert len(calls) == 2


def test_guarded_buffers_behave_as_arrays(dev):
    a = dev.to_device(np.arange(12, dtype=np.float32).reshape(3, 4))
    assert a.shape == (3, 4) and a.flags.c_contiguous and a.ctypes.data % 16 == 0
    np.testing.assert_array_equal(dev.to_host(a), np.arange(12).reshape(3, 4))
    z = dev.zeros((5,), "int64")
    assert (z == 0).all() and z.dtype == np.int64
    assert dev.empty((0,), "float32").size == 0
