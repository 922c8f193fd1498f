"""Level-1 row-wise normalisations: softmax, log-softmax, layer norm, RMS norm, L2 row normalisation,
and whole-tensor Frobenius normalisation.

Row tasks use one 256-thread block per row with shared-memory + warp-shuffle block reductions; the
Frobenius task is a three-launch reduction (block partials -> one total -> scale).
"""
from __future__ import annotations

import dataclasses
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


def _rms_norm_ref(xp, x, eps):
    """KernelBench 36_RMSNorm_: x / sqrt(mean(x ** 2, dim=1, keepdim=True) + eps), no weight."""
    ms = xp.mean(x * x, axis=1, keepdims=True)
    return (x / xp.sqrt(ms + eps)).astype(xp.float32, copy=False)


def _layer_norm_nd_ref(xp, x, weight, bias, eps):
    """torch.nn.LayerNorm(normalized_shape=(F, D1, D2)) of x [B, F, D1, D2] (KernelBench 40_LayerNorm)."""
    axes = (1, 2, 3)
    mu = xp.mean(x, axis=axes, keepdims=True)
    var = xp.mean((x - mu) ** 2, axis=axes, keepdims=True)
    return ((x - mu) / xp.sqrt(var + eps) * weight + bias).astype(xp.float32, copy=False)


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

_RMS_CUDA = r"""
// One thread per (b, s), s a flattened spatial position: the F features of (b, s) are F*S apart,
// so consecutive threads read consecutive addresses.
extern "C" __global__ void rms_norm_kernel(const float* __restrict__ x, float* __restrict__ y,
                                           int B, int F, int S, float eps) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * S) return;
    int b = idx / S, s = idx - b * S;
    const float* p = x + (size_t)b * F * S + s;
    float* q = y + (size_t)b * F * S + s;
    float acc = 0.0f;
    for (int f = 0; f < F; ++f) { float v = p[(size_t)f * S]; acc += v * v; }
    float r = rsqrtf(acc / (float)F + eps);
    for (int f = 0; f < F; ++f) q[(size_t)f * S] = p[(size_t)f * S] * r;
}
"""
_NCHW = {"eval": {"B": 16, "F": 64, "D1": 256, "D2": 256}, "small": {"B": 2, "F": 17, "D1": 5, "D2": 7}}
_X4 = Buffer("x", "float32", ("B", "F", "D1", "D2"))
_Y4 = Buffer("y", "float32", ("B", "F", "D1", "D2"))

TASKS.append(Task(
    name="rms_norm", level=1,
    description=("RMS normalisation over the feature dimension, as KernelBench 36_RMSNorm_: y = x / "
                 "sqrt(mean(x ** 2, dim=1, keepdim=True) + eps) with eps = 1e-5 and no weight, i.e. "
                 "y[b, f, i, j] = x[b, f, i, j] / sqrt((1/F) sum_g x[b, g, i, j]^2 + eps). x and y are float32 "
                 "[B, F, D1, D2], contiguous row-major."),
    sizes=_NCHW, inputs=(_X4,), outputs=(_Y4,), reference=_rms_norm_ref,
    scalars=(Scalar("eps", "float32", 1e-5),), tolerance=_ROW_TOL,
    solution=common.solution(_RMS_CUDA, "rms_norm_kernel<<<cdiv(B * D1 * D2, 256), 256>>>(x, y, B, F, D1 * D2, eps);"),
    tags=("norm", "kernelbench")))

_LN = _row_task("layer_norm", "", """    float s = 0.0f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) s += p[j];
    float mu = block_sum(s, sh) / (float)N;
    float v = 0.0f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) { float d = p[j] - mu; v += d * d; }
    float rstd = rsqrtf(block_sum(v, sh) / (float)N + eps);
    for (int j = threadIdx.x; j < N; j += blockDim.x) q[j] = (p[j] - mu) * rstd * weight[j] + bias[j];""", _layer_norm_nd_ref,
                extra_inputs=(Buffer("weight", "float32", ("N",)), Buffer("bias", "float32", ("N",))),
                scalars=(Scalar("eps", "float32", 1e-5),))
TASKS.append(dataclasses.replace(
    _LN,
    description=("Layer normalisation over the trailing normalized_shape (F, D1, D2), as torch.nn.LayerNorm("
                 "normalized_shape=(F, D1, D2)) in KernelBench 40_LayerNorm: for each b, mean and biased variance "
                 "over all F*D1*D2 elements of x[b], y[b] = (x[b] - mean) / sqrt(var + eps) * weight + bias with "
                 "eps = 1e-5. x and y are float32 [B, F, D1, D2]; weight and bias (the module's affine "
                 "parameters) are float32 [F, D1, D2]; all contiguous row-major."),
    sizes={"eval": {"B": 16, "F": 64, "D1": 128, "D2": 128}, "small": {"B": 3, "F": 4, "D1": 5, "D2": 7}},
    inputs=(_X4, Buffer("weight", "float32", ("F", "D1", "D2")), Buffer("bias", "float32", ("F", "D1", "D2"))),
    outputs=(_Y4,), tolerance=_ROW_TOL, tags=("norm", "kernelbench"),
    solution=_LN.solution.replace("layer_norm_kernel<<<M, 256>>>(x, weight, bias, y, M, N, eps);",
                                  "layer_norm_kernel<<<B, 1024>>>(x, weight, bias, y, B, F * D1 * D2, eps);")))

for _t in TASKS:
    register(_t)
