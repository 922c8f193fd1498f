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
              tags: tuple[str, ...] = (), slack: Any = None) -> Task:
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
        reference=common.float64_reference(reference), scalars=scalars, tolerance=tolerance or {}, slack=slack,
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


def _layer_norm_nd_slack(xp, x, weight, bias, eps):
    return (common.norm_slack(xp, x, (1, 2, 3), eps) * xp.abs(weight),)


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
    reference=common.float64_reference(_frob_ref), solution=common.solution(_FROB_CUDA, _FROB_LAUNCH),
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
    sizes=_NCHW, inputs=(_X4,), outputs=(_Y4,), reference=common.float64_reference(_rms_norm_ref),
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
                scalars=(Scalar("eps", "float32", 1e-5),), slack=_layer_norm_nd_slack)
TASKS.append(dataclasses.replace(
    _LN,
    description=("Layer normalisation over the trailing normalized_shape (F, D1, D2), as torch.nn.LayerNorm("
                 "normalized_shape=(F, D1, D2)) in KernelBench 40_LayerNorm: for each b, mean and biased variance "
                 "over all F*D1*D2 elements of x[b], y[b] = (x[b] - mean) / sqrt(var + eps) * weight + bias with "
                 "eps = 1e-5. x and y are float32 [B, F, D1, D2]; weight and bias (the module's affine "
                 "parameters) are float32 [F, D1, D2]; all contiguous row-major. Each mean sums about a million "
                 "terms: one float32 running sum loses them to rounding (a partial sum near 5e7 drops whole "
                 "units), so sum in a tree or blocks (or in float64); such a sum is judged wrong_output."),
    sizes={"eval": {"B": 16, "F": 64, "D1": 128, "D2": 128}, "small": {"B": 3, "F": 4, "D1": 5, "D2": 7}},
    inputs=(_X4, Buffer("weight", "float32", ("F", "D1", "D2")), Buffer("bias", "float32", ("F", "D1", "D2"))),
    outputs=(_Y4,), tolerance=_ROW_TOL, tags=("norm", "kernelbench"),
    solution=_LN.solution.replace("layer_norm_kernel<<<M, 256>>>(x, weight, bias, y, M, N, eps);",
                                  "layer_norm_kernel<<<B, 1024>>>(x, weight, bias, y, B, F * D1 * D2, eps);")))

for _t in TASKS:
    register(_t)


# ---- KernelBench 33_BatchNorm / 34_InstanceNorm / 35_GroupNorm_ over NCHW -----------------------------

def _norm_over(xp: Any, x: Any, axes: tuple[int, ...], eps: float) -> Any:
    """(x - mean) / sqrt(biased var + eps) over `axes`, statistics in float64."""
    x64 = x.astype(xp.float64)
    mu = xp.mean(x64, axis=axes, keepdims=True)
    var = xp.mean((x64 - mu) ** 2, axis=axes, keepdims=True)
    return (x64 - mu) / xp.sqrt(var + eps)


def _batch_norm_slack(xp, x, weight, bias, eps):
    return (common.norm_slack(xp, x, (0, 2, 3), eps) * xp.abs(weight.reshape(1, -1, 1, 1)),)


def _instance_norm_slack(xp, x, eps):
    return (common.norm_slack(xp, x, (2, 3), eps),)


def _group_norm_slack(xp, x, weight, bias, eps, num_groups):
    n, c, h, w = x.shape
    term = common.norm_slack(xp, x.reshape(n, num_groups, c // num_groups, h, w), (2, 3, 4), eps)
    term = xp.broadcast_to(term, (n, num_groups, c // num_groups, 1, 1)).reshape(n, c, 1, 1)
    return (term * xp.abs(weight.reshape(1, -1, 1, 1)),)


def _batch_norm_ref(xp, x, weight, bias, eps):
    y = _norm_over(xp, x, (0, 2, 3), eps) * weight.reshape(1, -1, 1, 1) + bias.reshape(1, -1, 1, 1)
    return y.astype(xp.float32, copy=False)


def _instance_norm_ref(xp, x, eps):
    return _norm_over(xp, x, (2, 3), eps).astype(xp.float32, copy=False)


def _group_norm_ref(xp, x, weight, bias, eps, num_groups):
    n, c, h, w = x.shape
    y = _norm_over(xp, x.reshape(n, num_groups, c // num_groups, h, w), (2, 3, 4), eps).reshape(n, c, h, w)
    return (y * weight.reshape(1, -1, 1, 1) + bias.reshape(1, -1, 1, 1)).astype(xp.float32, copy=False)


_BN_CUDA = common.REDUCE_CUDA + r"""
// One block per channel c: mean, then biased variance (two passes), then y = (x - mean) * rstd * w + b.
// Channel c's elements are N runs of HW contiguous floats, C*HW apart.
extern "C" __global__ void batch_norm_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                                             const float* __restrict__ bias, float* __restrict__ y,
                                             int N, int C, int HW, float eps) {
    __shared__ float sh[33];
    int c = blockIdx.x;
    long long cnt = (long long)N * HW;
    float s = 0.0f;
    for (int n = 0; n < N; ++n) {
        const float* p = x + ((size_t)n * C + c) * HW;
        for (int i = threadIdx.x; i < HW; i += blockDim.x) s += p[i];
    }
    float mu = block_sum(s, sh) / (float)cnt;
    float v = 0.0f;
    for (int n = 0; n < N; ++n) {
        const float* p = x + ((size_t)n * C + c) * HW;
        for (int i = threadIdx.x; i < HW; i += blockDim.x) { float d = p[i] - mu; v += d * d; }
    }
    float rstd = rsqrtf(block_sum(v, sh) / (float)cnt + eps);
    float sc = rstd * weight[c], sb = bias[c] - mu * sc;
    for (int n = 0; n < N; ++n) {
        const float* p = x + ((size_t)n * C + c) * HW;
        float* q = y + ((size_t)n * C + c) * HW;
        for (int i = threadIdx.x; i < HW; i += blockDim.x) q[i] = p[i] * sc + sb;
    }
}
"""

# Mean and 1/sqrt(biased variance + eps) of `len` contiguous floats, two passes, the whole block calling.
_SEGMENT_STATS_CUDA = common.REDUCE_CUDA + r"""
__device__ float2 segment_stats(const float* p, int len, float eps, float* sh) {
    float s = 0.0f;
    for (int i = threadIdx.x; i < len; i += blockDim.x) s += p[i];
    float mu = block_sum(s, sh) / (float)len;
    float v = 0.0f;
    for (int i = threadIdx.x; i < len; i += blockDim.x) { float d = p[i] - mu; v += d * d; }
    return make_float2(mu, rsqrtf(block_sum(v, sh) / (float)len + eps));
}
"""

_IN_CUDA = _SEGMENT_STATS_CUDA + r"""
// One block per (n, c) plane of HW contiguous floats: normalise with its own statistics (no affine).
extern "C" __global__ void instance_norm_kernel(const float* __restrict__ x, float* __restrict__ y, int HW,
                                                float eps) {
    __shared__ float sh[33];
    const float* p = x + (size_t)blockIdx.x * HW;
    float* q = y + (size_t)blockIdx.x * HW;
    float2 st = segment_stats(p, HW, eps, sh);
    for (int i = threadIdx.x; i < HW; i += blockDim.x) q[i] = (p[i] - st.x) * st.y;
}
"""

_GN_CUDA = _SEGMENT_STATS_CUDA + r"""
// One block per (n, group): the group's CG = C / G channels are CG * HW contiguous floats.
extern "C" __global__ void group_norm_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                                             const float* __restrict__ bias, float* __restrict__ y,
                                             int C, int HW, int G, float eps) {
    __shared__ float sh[33];
    int g = blockIdx.x % G, cg = C / G;
    int len = cg * HW;
    const float* p = x + (size_t)blockIdx.x * len;
    float* q = y + (size_t)blockIdx.x * len;
    float2 st = segment_stats(p, len, eps, sh);
    for (int i = threadIdx.x; i < len; i += blockDim.x) {
        int c = g * cg + i / HW;
        q[i] = (p[i] - st.x) * st.y * weight[c] + bias[c];
    }
}
"""

_X_NCHW = Buffer("x", "float32", ("N", "C", "H", "W"))
_Y_NCHW = Buffer("y", "float32", ("N", "C", "H", "W"))
_NCHW_SIZES = {"eval": {"N": 16, "C": 64, "H": 128, "W": 128}, "small": {"N": 3, "C": 4, "H": 5, "W": 7}}
_AFFINE = (Buffer("weight", "float32", ("C",)), Buffer("bias", "float32", ("C",)))
_EPS = Scalar("eps", "float32", 1e-5)
_NCHW_TEXT = "x and y are float32 [N, C, H, W] (NCHW), contiguous row-major."
_LONG_SUM = (" Each mean sums over 100K terms at eval sizes: one float32 running sum can lose them to rounding, "
             "so sum in a tree or blocks (or in float64).")


KB_NORM_TASKS = [
    Task(name="batch_norm", level=1,
         description=("Batch normalisation as torch.nn.BatchNorm2d(C) called in its default training mode "
                      "(KernelBench 33_BatchNorm): for each channel c, mean and biased variance over all N*H*W "
                      "elements x[:, c, :, :] (the batch statistics, not running statistics), y[n, c, i, j] = "
                      "(x[n, c, i, j] - mean_c) / sqrt(var_c + eps) * weight[c] + bias[c] with eps = 1e-5. "
                      + _NCHW_TEXT + " weight and bias (the module's affine parameters) are float32 [C]. The "
                      "module's running-statistics update is not part of the output." + _LONG_SUM),
         sizes=_NCHW_SIZES, inputs=(_X_NCHW,) + _AFFINE, outputs=(_Y_NCHW,), reference=_batch_norm_ref,
         scalars=(_EPS,), tolerance=_ROW_TOL, slack=_batch_norm_slack,
         solution=common.solution(_BN_CUDA, "batch_norm_kernel<<<C, 1024>>>(x, weight, bias, y, N, C, H * W, eps);"),
         tags=("norm", "kernelbench")),
    Task(name="instance_norm", level=1,
         description=("Instance normalisation as torch.nn.InstanceNorm2d(C) with its defaults (affine=False, "
                      "track_running_stats=False; KernelBench 34_InstanceNorm): for each (n, c), mean and biased "
                      "variance over the H*W elements x[n, c, :, :], y[n, c, i, j] = (x[n, c, i, j] - mean) / "
                      "sqrt(var + eps) with eps = 1e-5; no weight or bias. " + _NCHW_TEXT),
         sizes=_NCHW_SIZES, inputs=(_X_NCHW,), outputs=(_Y_NCHW,), reference=_instance_norm_ref,
         scalars=(_EPS,), tolerance=_ROW_TOL, slack=_instance_norm_slack,
         solution=common.solution(_IN_CUDA, "instance_norm_kernel<<<N * C, 256>>>(x, y, H * W, eps);"),
         tags=("norm", "kernelbench")),
    Task(name="group_norm", level=1,
         description=("Group normalisation as torch.nn.GroupNorm(num_groups=8, num_channels=C) (KernelBench "
                      "35_GroupNorm_): the C channels split into num_groups groups of C / num_groups consecutive "
                      "channels; for each (n, group), mean and biased variance over the group's (C / num_groups)"
                      "*H*W elements, y[n, c, i, j] = (x[n, c, i, j] - mean) / sqrt(var + eps) * weight[c] + "
                      "bias[c] with eps = 1e-5. " + _NCHW_TEXT + " weight and bias (the module's per-channel "
                      "affine parameters) are float32 [C]; C is a multiple of num_groups." + _LONG_SUM),
         sizes={"eval": {"N": 16, "C": 64, "H": 128, "W": 128}, "small": {"N": 3, "C": 16, "H": 3, "W": 5}},
         inputs=(_X_NCHW,) + _AFFINE, outputs=(_Y_NCHW,), reference=_group_norm_ref,
         scalars=(_EPS, Scalar("num_groups", "int32", 8)), tolerance=_ROW_TOL, slack=_group_norm_slack,
         solution=common.solution(_GN_CUDA, "group_norm_kernel<<<N * num_groups, 1024>>>(x, weight, bias, y, C, "
                                  "H * W, num_groups, eps);"),
         tags=("norm", "kernelbench")),
]

for _t in KB_NORM_TASKS:
    register(_t)
