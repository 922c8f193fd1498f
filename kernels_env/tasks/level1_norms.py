"""Level-1 row-wise normalisations: softmax, log-softmax, layer norm, RMS norm, L2 row normalisation,
and whole-tensor Frobenius normalisation.

Row tasks use one 256-thread block per row with shared-memory + warp-shuffle block reductions; the
Frobenius task is a three-launch reduction (block partials -> one total -> scale).
"""
from __future__ import annotations

from typing import Any

from kernels_env.tasks import common
from kernels_env.tasks.registry import register
from kernels_env.tasks.spec import Buffer, Scalar, Task

WIDE_EVAL = {"M": 4096, "N": 16384}  # 64M fp32 elements
LN_EVAL = {"M": 16384, "N": 4096}
ROW_SMALL = {"M": 7, "N": 1000}
# Row statistics over thousands of terms, summed in a different order than the reference.
_ROW_TOL = {"float32": (1e-3, 1e-3)}


def _row_task(name: str, description: str, body: str, reference: Any, *, extra_inputs: tuple = (),
              scalars: tuple[Scalar, ...] = (), eval_sizes: dict = WIDE_EVAL, tolerance: dict | None = None,
              tags: tuple[str, ...] = ()) -> Task:
    extra_params = "".join(f", const float* __restrict__ {b.name}" for b in extra_inputs)
    scalar_params = "".join(f", float {s.name}" for s in scalars)
    extra_args = "".join(f", {b.name}" for b in extra_inputs)
    scalar_args = "".join(f", {s.name}" for s in scalars)
    cuda = common.REDUCE_CUDA + f"""
// One block per row; every thread strides over the row.
extern "C" __global__ void {name}_kernel(const float* __restrict__ x{extra_params}, float* __restrict__ y,
                                         int M, int N{scalar_params}) {{
    __shared__ float sh[33];
    const float* p = x + (size_t)blockIdx.x * N;
    float* q = y + (size_t)blockIdx.x * N;
{body}
}}"""
    return Task(
        name=name, level=1, description=description,
        sizes={"eval": eval_sizes, "small": ROW_SMALL},
        inputs=(Buffer("x", "float32", ("M", "N")),) + extra_inputs,
        outputs=(Buffer("y", "float32", ("M", "N")),),
        reference=reference, scalars=scalars, tolerance=tolerance or {},
        solution=common.solution(cuda, f"{name}_kernel<<<M, 256>>>(x{extra_args}, y, M, N{scalar_args});"),
        tags=("norm",) + tags)


_MAX_SUM = """    float m = -3.402823466e+38f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) m = fmaxf(m, p[j]);
    m = block_max(m, sh);
    float s = 0.0f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) s += expf(p[j] - m);
    s = block_sum(s, sh);
"""


def _softmax_ref(xp, x):
    e = xp.exp(x - xp.max(x, axis=1, keepdims=True))
    return (e / xp.sum(e, axis=1, keepdims=True)).astype(xp.float32, copy=False)


def _log_softmax_ref(xp, x):
    z = x - xp.max(x, axis=1, keepdims=True)
    return (z - xp.log(xp.sum(xp.exp(z), axis=1, keepdims=True))).astype(xp.float32, copy=False)


def _layer_norm_ref(xp, x, weight, bias, eps):
    mu = xp.mean(x, axis=1, keepdims=True)
    var = xp.mean((x - mu) ** 2, axis=1, keepdims=True)
    return ((x - mu) / xp.sqrt(var + eps) * weight + bias).astype(xp.float32, copy=False)


def _rms_norm_ref(xp, x, weight, eps):
    ms = xp.mean(x * x, axis=1, keepdims=True)
    return (x / xp.sqrt(ms + eps) * weight).astype(xp.float32, copy=False)


def _l2_ref(xp, x, eps):
    n = xp.sqrt(xp.sum(x * x, axis=1, keepdims=True))
    return (x / xp.maximum(n, eps)).astype(xp.float32, copy=False)


_ROWS = ("x is a contiguous row-major float32 matrix [M, N]; the output y is float32 [M, N].")

TASKS = [
    _row_task("softmax", "Softmax over each row: y[m, j] = exp(x[m, j] - max_k x[m, k]) / sum_k exp(x[m, k] "
              "- max_k x[m, k]). " + _ROWS + " Subtract the row maximum so large inputs do not overflow.",
              _MAX_SUM + """    float inv = 1.0f / s;
    for (int j = threadIdx.x; j < N; j += blockDim.x) q[j] = expf(p[j] - m) * inv;""",
              _softmax_ref, tags=("softmax",)),
    _row_task("log_softmax", "Log-softmax over each row: y[m, j] = x[m, j] - log(sum_k exp(x[m, k])), "
              "computed stably by subtracting the row maximum first. " + _ROWS,
              _MAX_SUM + """    float lse = m + logf(s);
    for (int j = threadIdx.x; j < N; j += blockDim.x) q[j] = p[j] - lse;""",
              _log_softmax_ref, tags=("softmax",)),
    _row_task("layer_norm", "Layer normalisation of each row with an affine transform: mean = mean_j x[m, j], "
              "var = mean_j (x[m, j] - mean)^2 (biased), y[m, j] = (x[m, j] - mean) / sqrt(var + eps) * "
              "weight[j] + bias[j]. " + _ROWS + " weight and bias are float32 [N]; eps = 1e-5.",
              """    float s = 0.0f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) s += p[j];
    float mu = block_sum(s, sh) / (float)N;
    float v = 0.0f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) { float d = p[j] - mu; v += d * d; }
    float rstd = rsqrtf(block_sum(v, sh) / (float)N + eps);
    for (int j = threadIdx.x; j < N; j += blockDim.x) q[j] = (p[j] - mu) * rstd * weight[j] + bias[j];""",
              _layer_norm_ref, extra_inputs=(Buffer("weight", "float32", ("N",)), Buffer("bias", "float32", ("N",))),
              scalars=(Scalar("eps", "float32", 1e-5),), eval_sizes=LN_EVAL, tolerance=_ROW_TOL),
    _row_task("rms_norm", "RMS normalisation of each row: y[m, j] = x[m, j] / sqrt(mean_k x[m, k]^2 + eps) * "
              "weight[j]. " + _ROWS + " weight is float32 [N]; eps = 1e-6.",
              """    float s = 0.0f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) s += p[j] * p[j];
    float r = rsqrtf(block_sum(s, sh) / (float)N + eps);
    for (int j = threadIdx.x; j < N; j += blockDim.x) q[j] = p[j] * r * weight[j];""",
              _rms_norm_ref, extra_inputs=(Buffer("weight", "float32", ("N",)),),
              scalars=(Scalar("eps", "float32", 1e-6),), eval_sizes=LN_EVAL, tolerance=_ROW_TOL),
    _row_task("l2_normalize", "L2 normalisation of each row: y[m, j] = x[m, j] / max(sqrt(sum_k x[m, k]^2), "
              "eps) with eps = 1e-12. " + _ROWS,
              """    float s = 0.0f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) s += p[j] * p[j];
    float inv = 1.0f / fmaxf(sqrtf(block_sum(s, sh)), eps);
    for (int j = threadIdx.x; j < N; j += blockDim.x) q[j] = p[j] * inv;""",
              _l2_ref, scalars=(Scalar("eps", "float32", 1e-12),)),
]

_FROB_CUDA = common.REDUCE_CUDA + common.FINISH_SUM_CUDA + r"""
// Stage 1: each block sums squares over a grid-stride slice into partial[blockIdx.x].
extern "C" __global__ void sumsq_partial(const float* __restrict__ x, float* __restrict__ partial, int n) {
    __shared__ float sh[33];
    float acc = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) acc += x[i] * x[i];
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// Stage 3: y = x / sqrt(total).
extern "C" __global__ void scale_by_norm(const float* __restrict__ x, const float* __restrict__ total,
                                         float* __restrict__ y, int n) {
    float inv = rsqrtf(total[0]);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = x[i] * inv;
}
"""

_FROB_LAUNCH = """scratch float partial[min(cdiv(M * N, 256), 1024)];
scratch float total[1];
sumsq_partial<<<min(cdiv(M * N, 256), 1024), 256>>>(x, partial, M * N);
finish_sum<<<1, 1024>>>(partial, total, min(cdiv(M * N, 256), 1024), 1.0);
scale_by_norm<<<min(cdiv(M * N, 256), 8192), 256>>>(x, total, y, M * N);"""


def _frob_ref(xp, x):
    return (x / xp.sqrt(xp.sum(x * x))).astype(xp.float32, copy=False)


TASKS.append(Task(
    name="frobenius_normalize", level=1,
    description=("Divide a whole matrix by its Frobenius norm: y = x / sqrt(sum over all m, j of x[m, j]^2). "
                 + _ROWS + " The norm is over all M*N elements (a grid-wide reduction)."),
    sizes={"eval": WIDE_EVAL, "small": ROW_SMALL},
    inputs=(Buffer("x", "float32", ("M", "N")),), outputs=(Buffer("y", "float32", ("M", "N")),),
    reference=_frob_ref, solution=common.solution(_FROB_CUDA, _FROB_LAUNCH),
    tolerance={"float32": (1e-5, 1e-3)},  # outputs are ~1/sqrt(M*N); relative accuracy is what matters
    tags=("norm", "reduction")))

for _t in TASKS:
    register(_t)
