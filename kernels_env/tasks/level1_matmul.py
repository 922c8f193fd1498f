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
from kernels_env.tasks.spec import Buffer, Scalar, Task

# K up to 4096 summed in a different order than cuBLAS: errors grow like sqrt(K) * eps * |a||b|.
MM_TOL = {"float32": (1e-2, 1e-3), "float16": (2e-2, 1e-2)}
SMALL = {"M": 65, "K": 70, "N": 63}

# Tile loaders: fill As[i][kk] (A tile, row i of C, k index kk) and Bs[kk][j] (B tile).
_LOAD_A = {
    "n": """        for (int r = 0; r < 4; ++r) {  // A row-major [M, K]: consecutive tx read consecutive k
            int i = ty + 8 * r, gm = m0 + i, gk = k0 + tx;
            As[i][tx] = (gm < M && gk < K) ? LD(A[(size_t)gm * K + gk]) : 0.0f;
        }""",
    "l": """        for (int r = 0; r < 4; ++r) {  // lower-triangular A [M, K]: entries with k > m read as zero
            int i = ty + 8 * r, gm = m0 + i, gk = k0 + tx;
            As[i][tx] = (gm < M && gk < K && gk <= gm) ? LD(A[(size_t)gm * K + gk]) : 0.0f;
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
    "l": """        for (int r = 0; r < 4; ++r) {  // lower-triangular B [K, N]: entries with n > k read as zero
            int kk = ty + 8 * r, gk = k0 + kk, gn = n0 + tx;
            Bs[kk][tx] = (gk < K && gn < N && gn <= gk) ? LD(B[(size_t)gk * N + gn]) : 0.0f;
        }""",
    "t": """        for (int r = 0; r < 4; ++r) {  // B stored [N, K]: consecutive tx read consecutive k
            int j = ty + 8 * r, gn = n0 + j, gk = k0 + tx;
            Bs[tx][j] = (gk < K && gn < N) ? LD(B[(size_t)gn * K + gk]) : 0.0f;
        }""",
}


def gemm_kernel(name: str, a: str = "n", b: str = "n", dtype: str = "float32", batched: bool = False,
                epilogue: str = "v", extra_params: str = "", k_range: tuple[str, str] = ("0", "K")) -> str:
    """CUDA source of a tiled C = op(A) @ op(B) kernel; `epilogue` maps `v` (and `row`, `col`) to the stored
    value; `k_range` bounds the K loop (expressions of m0, n0, K, TS). Launch with grid dim3(cdiv(N, 32),
    cdiv(M, 32)[, batch]) and block dim3(32, 8)."""
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
    for (int k0 = {k_range[0]}; k0 < {k_range[1]}; k0 += TS) {{
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


# ---- KernelBench matmul shape variants and scaled dot-product attention ----------------------------

_SCALAR_MUL_CUDA = r"""
// Grid-stride over the M*N elements: C = A * s.
extern "C" __global__ void matrix_scalar_mul_kernel(const float* __restrict__ A, float* __restrict__ C,
                                                    long long n, float s) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)blockDim.x * gridDim.x)
        C[i] = A[i] * s;
}
"""

_DIAG_CUDA = r"""
// One thread per output, columns fastest: C[i, j] = A[i] * B[i, j].
extern "C" __global__ void matmul_diag_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                              float* __restrict__ C, int N, int M) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)N * M) return;
    C[idx] = A[idx / M] * B[idx];
}
"""

_SDPA_CUDA = common.REDUCE_CUDA + r"""
// One block per query row (b, h, i): q * scale and the row's S scores live in dynamic shared memory
// (D + S floats); scores, softmax (max, exp, sum), then out[d] = sum_j p[j] * V[j, d] with d across threads.
extern "C" __global__ void sdpa_kernel(const float* __restrict__ Q, const float* __restrict__ K,
                                       const float* __restrict__ V, float* __restrict__ O, int S, int D) {
    extern __shared__ float smem[];
    __shared__ float sh[33];
    float* qs = smem;
    float* ps = smem + D;
    size_t row = blockIdx.x;
    size_t head = row / S;
    const float* q = Q + row * D;
    const float* k = K + head * S * D;
    const float* v = V + head * S * D;
    float scale = 1.0f / sqrtf((float)D);
    for (int d = threadIdx.x; d < D; d += blockDim.x) qs[d] = q[d] * scale;
    __syncthreads();
    float m = -3.402823466e+38f;
    for (int j = threadIdx.x; j < S; j += blockDim.x) {
        const float* kj = k + (size_t)j * D;
        float acc = 0.0f;
        for (int d = 0; d < D; ++d) acc += qs[d] * kj[d];
        ps[j] = acc;
        m = fmaxf(m, acc);
    }
    m = block_max(m, sh);
    float s = 0.0f;
    for (int j = threadIdx.x; j < S; j += blockDim.x) { float e = expf(ps[j] - m); ps[j] = e; s += e; }
    float inv = 1.0f / block_sum(s, sh);  // block_sum's barriers also publish ps
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < S; ++j) acc += ps[j] * v[(size_t)j * D + d];
        O[row * D + d] = acc * inv;
    }
}
"""


def _sdpa_ref(xp: Any, Q: Any, K: Any, V: Any) -> Any:
    """softmax(Q @ K^T / sqrt(D)) @ V per (batch, head), as torch's scaled_dot_product_attention defaults."""
    s = xp.matmul(Q, xp.swapaxes(K, -1, -2)) * (1.0 / float(Q.shape[-1]) ** 0.5)
    e = xp.exp(s - xp.max(s, axis=-1, keepdims=True))
    p = e / xp.sum(e, axis=-1, keepdims=True)
    return xp.matmul(p, V).astype(xp.float32, copy=False)


def _tril_mm_ref(xp: Any, A: Any, B: Any) -> Any:
    return xp.tril(xp.matmul(xp.tril(A), xp.tril(B))).astype(xp.float32, copy=False)


_TRIL_NAME = "matmul_lower_triangular"
_TRIL_CUDA = gemm_kernel(f"{_TRIL_NAME}_kernel", "l", "l", epilogue="col <= row ? v : 0.0f",
                         k_range=("n0", "(m0 + TS < K ? m0 + TS : K)"))
_TRIL_NOTE = ("C[i, j] only needs k in [j, i], so each 32x32 tile runs k over [n0, m0 + 32) and tiles above "
              "the diagonal skip the loop and store zeros.")

KB_MM_TASKS = [
    Task(name="matrix_scalar_mul", level=1,
         description=("Matrix-scalar multiplication C = A * s (KernelBench 5_Matrix_scalar_multiplication) with "
                      "s = 3.14: C[m, n] = A[m, n] * s. A and C are contiguous row-major float32 [M, N]."),
         sizes={"eval": {"M": 16384, "N": 6144}, "small": {"M": 37, "N": 300}},  # 96M: memory-bound
         inputs=(Buffer("A", "float32", ("M", "N")),), outputs=(Buffer("C", "float32", ("M", "N")),),
         scalars=(Scalar("s", "float32", 3.14),),
         reference=lambda xp, A, s: (A * xp.float32(s)).astype(xp.float32, copy=False),
         solution=common.solution(_SCALAR_MUL_CUDA, "matrix_scalar_mul_kernel<<<min(cdiv(M * N, 256), 8192), 256>>>"
                                  "(A, C, M * N, s);"),
         tags=("matmul", "elementwise", "kernelbench")),
    _mm_task("matmul_tall_skinny", "Tall-skinny matrix product C = A @ B (KernelBench 9_Tall_skinny_matrix_"
             "multiplication_): A is [M, K] with small K, B is [K, M], C is [M, M] (C[i, j] = sum_k A[i, k] * "
             "B[k, j]). " + _RM,
             (Buffer("A", "float32", ("M", "K")), Buffer("B", "float32", ("K", "M"))), ("M", "M"),
             {"eval": {"M": 8192, "K": 64}, "small": {"M": 70, "K": 17}},
             lambda xp, A, B: xp.matmul(A, B).astype(xp.float32, copy=False), launch_sizes="M, M, K"),
    _mm_task("matmul_3d_tensor", "3-D tensor times matrix, torch.matmul(A, B) with A [Bt, M, K] and B [K, L] "
             "(KernelBench 10_3D_tensor_matrix_multiplication): C[b, m, l] = sum_k A[b, m, k] * B[k, l], C is "
             "[Bt, M, L]. " + _RM,
             (Buffer("A", "float32", ("Bt", "M", "K")), Buffer("B", "float32", ("K", "L"))), ("Bt", "M", "L"),
             {"eval": {"Bt": 16, "M": 256, "K": 1024, "L": 768}, "small": {"Bt": 3, "M": 21, "K": 40, "L": 35}},
             lambda xp, A, B: xp.matmul(A, B).astype(xp.float32, copy=False), launch_sizes="Bt * M, L, K"),
    Task(name="matmul_diag", level=1,
         description=("Product of a diagonal matrix and a matrix, diag(A) @ B, computed as A.unsqueeze(1) * B "
                      "(KernelBench 12_Matmul_with_diagonal_matrices_): C[i, j] = A[i] * B[i, j]. A is float32 "
                      "[N] (the diagonal), B and C are contiguous row-major float32 [N, M]."),
         sizes={"eval": {"N": 16384, "M": 6144}, "small": {"N": 37, "M": 300}},  # 96M: memory-bound
         inputs=(Buffer("A", "float32", ("N",)), Buffer("B", "float32", ("N", "M"))),
         outputs=(Buffer("C", "float32", ("N", "M")),),
         reference=lambda xp, A, B: (A[:, None] * B).astype(xp.float32, copy=False),
         solution=common.solution(_DIAG_CUDA, "matmul_diag_kernel<<<cdiv(N * M, 256), 256>>>(A, B, C, N, M);"),
         tags=("matmul", "kernelbench")),
    Task(name=_TRIL_NAME, level=1,
         description=("Product of lower-triangular matrices, torch.tril(torch.matmul(A, B)) as in KernelBench "
                      "15_Matmul_for_lower_triangular_matrices, whose inputs are lower triangular: here A and B "
                      "are any float32 [N, N] and only their lower triangles (diagonal included) are the "
                      "operands, the strictly upper entries counting as zero and never to be read as data. "
                      "C = tril(tril(A) @ tril(B)): C[i, j] = sum over k in [j, i] of A[i, k] * B[k, j] for "
                      "j <= i, and C[i, j] = 0 for j > i. A, B and C are contiguous row-major float32 [N, N]."),
         sizes={"eval": {"N": 4096}, "small": {"N": 67}},
         inputs=(Buffer("A", "float32", ("N", "N")), Buffer("B", "float32", ("N", "N"))),
         outputs=(Buffer("C", "float32", ("N", "N")),), reference=_tril_mm_ref, tolerance=MM_TOL,
         solution=common.solution(_TRIL_CUDA, f"{_TRIL_NAME}_kernel<<<dim3(cdiv(N, 32), cdiv(N, 32)), dim3(32, 8)>>>"
                                  "(A, B, C, N, N, N);", note=_TRIL_NOTE),
         tags=("matmul", "kernelbench")),
    Task(name="scaled_dot_product_attention", level=1,
         description=("Scaled dot-product attention, torch.nn.functional.scaled_dot_product_attention(Q, K, V) "
                      "with its defaults (no mask, no dropout, not causal, scale = 1 / sqrt(D); KernelBench "
                      "97_ScaledDotProductAttention): for each batch b and head h, O[b, h] = softmax_rows("
                      "Q[b, h] @ K[b, h]^T / sqrt(D)) @ V[b, h]. Q, K, V and O are contiguous row-major float32 "
                      "[B, H, S, D]."),
         sizes={"eval": {"B": 4, "H": 8, "S": 512, "D": 128}, "small": {"B": 2, "H": 2, "S": 37, "D": 16}},
         inputs=(Buffer("Q", "float32", ("B", "H", "S", "D"), distributions=("uniform", "normal")),
                 Buffer("K", "float32", ("B", "H", "S", "D"), distributions=("uniform", "normal")),
                 Buffer("V", "float32", ("B", "H", "S", "D"))),
         outputs=(Buffer("O", "float32", ("B", "H", "S", "D")),), reference=_sdpa_ref,
         tolerance={"float32": (1e-3, 1e-3)},  # sums of S and D terms in a different order
         solution=common.solution(_SDPA_CUDA, "sdpa_kernel<<<B * H * S, 128, (D + S) * 4>>>(Q, K, V, O, S, D);"),
         tags=("matmul", "softmax", "attention", "kernelbench")),
]

for _t in KB_MM_TASKS:
    register(_t)
