"""Level-1 matrix products: square, rectangular, batched, transposed A / B, fp16 with fp32 accumulation,
and matrix-vector.

Solutions use one 32x32 shared-memory tiled kernel (block 32x8, four outputs per thread, padded tiles
against bank conflicts, zero-filled edges for sizes that are not multiples of 32). Loads of the
transposed operands are arranged so consecutive threads read consecutive addresses.
"""
from __future__ import annotations

from typing import Any

from kernels_env.tasks import common
from kernels_env.tasks.registry import register
from kernels_env.tasks.spec import Buffer, Task

# K up to 4096 summed in a different order than cuBLAS: errors grow like sqrt(K) * eps * |a||b|.
MM_TOL = {"float32": (1e-2, 1e-3), "float16": (2e-2, 1e-2)}
SMALL = {"M": 65, "K": 70, "N": 63}

# Tile loaders: fill As[i][kk] (A tile, row i of C, k index kk) and Bs[kk][j] (B tile).
_LOAD_A = {
    "n": """        for (int r = 0; r < 4; ++r) {  // A row-major [M, K]: consecutive tx read consecutive k
            int i = ty + 8 * r, gm = m0 + i, gk = k0 + tx;
            As[i][tx] = (gm < M && gk < K) ? LD(A[(size_t)gm * K + gk]) : 0.0f;
        }""",
    "t": """        for (int r = 0; r < 4; ++r) {  // A stored [K, M]: consecutive tx read consecutive m
            int kk = ty + 8 * r, gk = k0 + kk, gm = m0 + tx;
            As[tx][kk] = (gm < M && gk < K) ? LD(A[(size_t)gk * M + gm]) : 0.0f;
        }""",
}
_LOAD_B = {
    "n": """        for (int r = 0; r < 4; ++r) {  // B row-major [K, N]: consecutive tx read consecutive n
            int kk = ty + 8 * r, gk = k0 + kk, gn = n0 + tx;
            Bs[kk][tx] = (gk < K && gn < N) ? LD(B[(size_t)gk * N + gn]) : 0.0f;
        }""",
    "t": """        for (int r = 0; r < 4; ++r) {  // B stored [N, K]: consecutive tx read consecutive k
            int j = ty + 8 * r, gn = n0 + j, gk = k0 + tx;
            Bs[tx][j] = (gk < K && gn < N) ? LD(B[(size_t)gn * K + gk]) : 0.0f;
        }""",
}


def gemm_kernel(name: str, a: str = "n", b: str = "n", dtype: str = "float32", batched: bool = False,
                epilogue: str = "v", extra_params: str = "") -> str:
    """CUDA source of a tiled C = op(A) @ op(B) kernel; `epilogue` maps `v` (and `col`) to the stored value.
    Launch with grid dim3(cdiv(N, 32), cdiv(M, 32)[, batch]) and block dim3(32, 8)."""
    ct = "float" if dtype == "float32" else "__half"
    ld = "#define LD(e) (e)" if dtype == "float32" else "#define LD(e) __half2float(e)"
    st = "(val)" if dtype == "float32" else "__float2half(val)"
    header = "#include <cuda_fp16.h>\n" if dtype == "float16" else ""
    batch = ("""    A += (size_t)blockIdx.z * M * K;
    B += (size_t)blockIdx.z * K * N;
    C += (size_t)blockIdx.z * M * N;
""" if batched else "")
    return f"""{header}{ld}
#define TS 32
extern "C" __global__ void {name}(const {ct}* __restrict__ A, const {ct}* __restrict__ B{extra_params},
                                 {ct}* __restrict__ C, int M, int N, int K) {{
    __shared__ float As[TS][TS + 1];
    __shared__ float Bs[TS][TS + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int m0 = blockIdx.y * TS, n0 = blockIdx.x * TS;
{batch}    float acc[4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
    for (int k0 = 0; k0 < K; k0 += TS) {{
{_LOAD_A[a]}
{_LOAD_B[b]}
        __syncthreads();
        for (int kk = 0; kk < TS; ++kk) {{
            float bv = Bs[kk][tx];
            for (int r = 0; r < 4; ++r) acc[r] += As[ty + 8 * r][kk] * bv;
        }}
        __syncthreads();
    }}
    int col = n0 + tx;
    for (int r = 0; r < 4; ++r) {{
        int row = m0 + ty + 8 * r;
        if (row < M && col < N) {{
            float v = acc[r];
            float val = {epilogue};
            C[(size_t)row * N + col] = {st};
        }}
    }}
}}"""


def _mm_task(name: str, description: str, inputs: tuple[Buffer, ...], out_shape: tuple, sizes: dict,
             reference: Any, a: str = "n", b: str = "n", dtype: str = "float32", batched: bool = False,
             launch_sizes: str = "M, N, K") -> Task:
    grid_z = ", Bt" if batched else ""
    mdim, ndim = launch_sizes.split(", ")[0], launch_sizes.split(", ")[1]
    launch = (f"{name}_kernel<<<dim3(cdiv({ndim}, 32), cdiv({mdim}, 32){grid_z}), dim3(32, 8)>>>"
              f"(A, B, C, {launch_sizes});")
    return Task(
        name=name, level=1, description=description, sizes=sizes, inputs=inputs,
        outputs=(Buffer("C", dtype, out_shape),), reference=reference, tolerance=MM_TOL,
        solution=common.solution(gemm_kernel(f"{name}_kernel", a, b, dtype, batched), launch),
        tags=("matmul",) + ((dtype,) if dtype != "float32" else ()))


_RM = "All matrices are contiguous row-major float32."

TASKS = [
    _mm_task("matmul_square", "Square matrix product C = A @ B, with A, B, C of shape [N, N]. " + _RM,
             (Buffer("A", "float32", ("N", "N")), Buffer("B", "float32", ("N", "N"))), ("N", "N"),
             {"eval": {"N": 2048}, "small": {"N": 67}},
             lambda xp, A, B: xp.matmul(A, B).astype(xp.float32, copy=False), launch_sizes="N, N, N"),
    _mm_task("matmul_rect", "Rectangular matrix product C = A @ B with A [M, K], B [K, N], C [M, N]. " + _RM,
             (Buffer("A", "float32", ("M", "K")), Buffer("B", "float32", ("K", "N"))), ("M", "N"),
             {"eval": {"M": 1024, "K": 4096, "N": 2048}, "small": SMALL},
             lambda xp, A, B: xp.matmul(A, B).astype(xp.float32, copy=False)),
    _mm_task("matmul_batched", "Batched matrix product C[b] = A[b] @ B[b] for b in [0, Bt), with A [Bt, M, K], "
             "B [Bt, K, N], C [Bt, M, N]. " + _RM,
             (Buffer("A", "float32", ("Bt", "M", "K")), Buffer("B", "float32", ("Bt", "K", "N"))), ("Bt", "M", "N"),
             {"eval": {"Bt": 64, "M": 512, "K": 512, "N": 512}, "small": {"Bt": 3, "M": 33, "K": 20, "N": 17}},
             lambda xp, A, B: xp.matmul(A, B).astype(xp.float32, copy=False), batched=True),
    _mm_task("matmul_transposed_a", "Matrix product with A transposed: C = A^T @ B where A is stored as [K, M], "
             "B is [K, N] and C is [M, N] (C[m, n] = sum_k A[k, m] * B[k, n]). " + _RM,
             (Buffer("A", "float32", ("K", "M")), Buffer("B", "float32", ("K", "N"))), ("M", "N"),
             {"eval": {"M": 2048, "K": 2048, "N": 2048}, "small": SMALL},
             lambda xp, A, B: xp.matmul(A.T, B).astype(xp.float32, copy=False), a="t"),
    _mm_task("matmul_transposed_b", "Matrix product with B transposed: C = A @ B^T where A is [M, K], B is stored "
             "as [N, K] and C is [M, N] (C[m, n] = sum_k A[m, k] * B[n, k]). " + _RM,
             (Buffer("A", "float32", ("M", "K")), Buffer("B", "float32", ("N", "K"))), ("M", "N"),
             {"eval": {"M": 2048, "K": 2048, "N": 2048}, "small": SMALL},
             lambda xp, A, B: xp.matmul(A, B.T).astype(xp.float32, copy=False), b="t"),
    _mm_task("matmul_fp16", "Half-precision matrix product C = A @ B with A [M, K], B [K, N], C [M, N], all "
             "contiguous row-major __half. Accumulate in float32 and round the result to half once.",
             (Buffer("A", "float16", ("M", "K")), Buffer("B", "float16", ("K", "N"))), ("M", "N"),
             {"eval": {"M": 2048, "K": 2048, "N": 2048}, "small": SMALL},
             lambda xp, A, B: xp.matmul(A.astype(xp.float32, copy=False), B.astype(xp.float32, copy=False)).astype(xp.float16, copy=False),
             dtype="float16"),
]

_MATVEC_CUDA = common.REDUCE_CUDA + r"""
// One block per row of A: strided, coalesced dot product, then a block reduction.
extern "C" __global__ void matvec_kernel(const float* __restrict__ A, const float* __restrict__ x,
                                         float* __restrict__ y, int M, int K) {
    __shared__ float sh[33];
    const float* a = A + (size_t)blockIdx.x * K;
    float acc = 0.0f;
    for (int k = threadIdx.x; k < K; k += blockDim.x) acc += a[k] * x[k];
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) y[blockIdx.x] = acc;
}
"""

TASKS.append(Task(
    name="matvec", level=1,
    description="Matrix-vector product y = A @ x with A [M, K] (contiguous row-major float32), x float32 [K] "
                "and y float32 [M] (y[m] = sum_k A[m, k] * x[k]).",
    sizes={"eval": {"M": 16384, "K": 16384}, "small": {"M": 37, "K": 1000}},
    inputs=(Buffer("A", "float32", ("M", "K")), Buffer("x", "float32", ("K",))),
    outputs=(Buffer("y", "float32", ("M",)),),
    reference=lambda xp, A, x: xp.matmul(A, x).astype(xp.float32, copy=False), tolerance=MM_TOL,
    solution=common.solution(_MATVEC_CUDA, "matvec_kernel<<<M, 256>>>(A, x, y, M, K);"),
    tags=("matmul",)))

for _t in TASKS:
    register(_t)
