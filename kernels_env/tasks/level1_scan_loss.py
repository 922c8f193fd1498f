"""Level-1 scans (cumulative sum, reverse cumulative sum, cumulative product along rows) and losses
reduced to one number (MSE, Huber, hinge, cross-entropy, KL divergence, cosine-similarity loss).

Scans: one block per row, a warp-shuffle inclusive scan per 256-element chunk plus a running carry.
Losses: block partials into a zero-initialised scratch buffer, then one block that writes the mean
(the output is written, never accumulated into: outputs are NaN-poisoned before each trial).
"""
from __future__ import annotations

from typing import Any

from kernels_env.tasks import common
from kernels_env.tasks.domains import Domain
from kernels_env.tasks.registry import register
from kernels_env.tasks.spec import Buffer, Scalar, Task

_SCAN = r"""
// One block per row (blockDim.x = 256); chunk-wise inclusive scan with a running carry.
extern "C" __global__ void NAME_kernel(const float* __restrict__ x, float* __restrict__ y, int M, int N) {
    __shared__ float wtot[32];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const float* p = x + (size_t)blockIdx.x * N;
    float* q = y + (size_t)blockIdx.x * N;
    float carry = IDENT;
    for (int base = 0; base < N; base += blockDim.x) {
        int j = base + threadIdx.x;
        float v = j < N ? p[POS(j)] : IDENT;
        for (int o = 1; o < 32; o <<= 1) {
            float t = __shfl_up_sync(0xffffffffu, v, o);
            if (lane >= o) v = OP(v, t);
        }
        if (lane == 31) wtot[wid] = v;
        __syncthreads();
        if (wid == 0) {
            float t = lane < nw ? wtot[lane] : IDENT;
            for (int o = 1; o < 32; o <<= 1) {
                float u = __shfl_up_sync(0xffffffffu, t, o);
                if (lane >= o) t = OP(t, u);
            }
            if (lane < nw) wtot[lane] = t;  // inclusive scan of the warp totals
        }
        __syncthreads();
        float before = wid > 0 ? wtot[wid - 1] : IDENT;
        if (j < N) q[POS(j)] = OP(carry, OP(before, v));
        carry = OP(carry, wtot[nw - 1]);
        __syncthreads();  // wtot is rewritten by the next chunk
    }
}
"""


def scan_task(name: str, description: str, op: str, ident: str, pos: str, ref: Any, sizes: dict,
              tolerance: dict, x: Buffer, slack: Any = None) -> Task:
    cuda = (f"#define OP(a, b) ((a) {op} (b))\n#define POS(j) ({pos})\n"
            + _SCAN.replace("NAME", name).replace("IDENT", ident))
    return Task(name=name, level=1, description=description, sizes=sizes, inputs=(x,),
                outputs=(Buffer("y", "float32", ("M", "N")),), reference=common.float64_reference(ref),
                tolerance=tolerance, slack=slack,
                solution=common.solution(cuda, f"{name}_kernel<<<M, 256>>>(x, y, M, N);"), tags=("scan",))


_ROWS = "x is a contiguous row-major float32 matrix [M, N]; y is float32 [M, N]."
# Running sums over up to 8192 terms (partial sums of heavy-tailed inputs reach ~1e2-1e3): float32
# rounding accumulates to ~1e-3 absolute where a partial sum crosses zero, so atol is 1e-2 (a wrong
# scan is off by O(1)), plus common.scan_slack, which grows with the prefix sum of |x| (a sorted row
# sums to -1e5 and back; its exact answer is far from a float32 scan's in relative terms).
_SCAN_TOL = {"float32": (1e-2, 1e-3)}


def _prefix_slack(xp, x):
    return (common.scan_slack(xp, x),)


def _suffix_slack(xp, x):
    return (common.scan_slack(xp, x, reverse=True),)


def _exclusive_slack(xp, x):
    return (xp.concatenate([xp.zeros_like(x[:, :1], dtype=xp.float64), common.scan_slack(xp, x[:, :-1])], axis=1),)


def _masked_slack(xp, x, mask):
    return (common.scan_slack(xp, x * (mask != 0)),)

TASKS = [
    scan_task("cumsum", "Inclusive cumulative sum along each row: y[m, j] = sum_{k <= j} x[m, k]. " + _ROWS,
              "+", "0.0f", "j", lambda xp, x: xp.cumsum(x, axis=1).astype(xp.float32, copy=False),
              {"eval": {"M": 8192, "N": 8192}, "small": {"M": 5, "N": 1000}}, _SCAN_TOL,
              Buffer("x", "float32", ("M", "N")), _prefix_slack),
    scan_task("reverse_cumsum", "Reverse inclusive cumulative sum along each row: y[m, j] = sum_{k >= j} "
              "x[m, k] (suffix sums). " + _ROWS, "+", "0.0f", "N - 1 - (j)",
              lambda xp, x: xp.flip(xp.cumsum(xp.flip(x, axis=1), axis=1), axis=1).astype(xp.float32, copy=False),
              {"eval": {"M": 8192, "N": 8192}, "small": {"M": 5, "N": 1000}}, _SCAN_TOL,
              Buffer("x", "float32", ("M", "N")), _suffix_slack),
    scan_task("cumprod", "Inclusive cumulative product along each row: y[m, j] = prod_{k <= j} x[m, k]. "
              + _ROWS + " Inputs are drawn from [0.9, 1.1] so products stay in range.", "*", "1.0f", "j",
              lambda xp, x: xp.cumprod(x, axis=1).astype(xp.float32, copy=False),
              {"eval": {"M": 262144, "N": 256}, "small": {"M": 6, "N": 300}}, {"float32": (1e-4, 1e-3)},
              Buffer("x", "float32", ("M", "N"), distributions=("uniform",), low=0.9, high=1.1)),
]

# ---- losses -------------------------------------------------------------------------------

_PAIR_LOSS = r"""
// Stage 1: grid-stride over elements, one partial sum per block.
extern "C" __global__ void NAME_partial(const float* __restrict__ pred, const TTYPE* __restrict__ target,
                                        float* __restrict__ partial, int n SCALARS) {
    __shared__ float sh[33];
    float acc = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        float p = pred[i];
        float t = (float)target[i];
        EXPR
    }
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}
"""


def pair_loss_task(name: str, description: str, expr: str, ref: Any, *, target: Buffer,
                   scalars: tuple[Scalar, ...] = ()) -> Task:
    ttype = "float" if target.dtype == "float32" else "int"
    cuda = (common.REDUCE_CUDA + common.FINISH_SUM_CUDA
            + _PAIR_LOSS.replace("NAME", name).replace("TTYPE", ttype).replace("EXPR", expr)
            .replace("SCALARS", "".join(f", float {s.name}" for s in scalars)))
    sargs = "".join(f", {s.name}" for s in scalars)
    launch = (f"scratch float partial[min(cdiv(N, 256), 1024)];\n"
              f"{name}_partial<<<min(cdiv(N, 256), 1024), 256>>>(pred, target, partial, N{sargs});\n"
              f"finish_sum<<<1, 1024>>>(partial, loss, min(cdiv(N, 256), 1024), N);")
    return Task(name=name, level=1, description=description,
                sizes={"eval": {"N": 64 * 1024 * 1024}, "small": {"N": 3001}},
                inputs=(Buffer("pred", "float32", ("N",)), target),
                outputs=(Buffer("loss", "float32", (1,)),), reference=common.float64_reference(ref),
                scalars=scalars,
                tolerance={"float32": (1e-4, 1e-3)},  # a mean over 64M terms, summed as a tree
                solution=common.solution(cuda, launch), tags=("loss", "reduction"))


def _mse_ref(xp, pred, target):
    return xp.mean((pred - target) ** 2).reshape(1).astype(xp.float32, copy=False)


def _huber_ref(xp, pred, target, beta):
    d = xp.abs(pred - target)
    return xp.mean(xp.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta)).reshape(1).astype(xp.float32, copy=False)


def _hinge_ref(xp, pred, target):
    y = 2.0 * target - 1.0
    return xp.mean(xp.maximum(1.0 - y * pred, 0)).reshape(1).astype(xp.float32, copy=False)


_VEC = "pred and target are contiguous float32 vectors of N elements; loss is a float32 buffer of 1 element."
TASKS += [
    pair_loss_task("mse_loss", "Mean squared error: loss[0] = (1/N) sum_i (pred[i] - target[i])^2. " + _VEC,
                   "float d = p - t; acc += d * d;", _mse_ref, target=Buffer("target", "float32", ("N",))),
    pair_loss_task("huber_loss", "Huber / smooth-L1 loss with beta = 1.0: with d = |pred[i] - target[i]|, the "
                   "term is 0.5 * d^2 / beta if d < beta else d - 0.5 * beta; loss[0] = mean over i. " + _VEC,
                   "float d = fabsf(p - t); acc += d < beta ? 0.5f * d * d / beta : d - 0.5f * beta;",
                   _huber_ref, target=Buffer("target", "float32", ("N",)),
                   scalars=(Scalar("beta", "float32", 1.0),)),
    pair_loss_task("hinge_loss", "Hinge loss for binary labels: target is an int32 vector of N labels in {0, 1}, "
                   "mapped to y = 2 * target - 1 in {-1, +1}; loss[0] = (1/N) sum_i max(0, 1 - y[i] * pred[i]). "
                   "pred is a contiguous float32 vector of N elements; loss is a float32 buffer of 1 element.",
                   "float y = 2.0f * t - 1.0f; acc += fmaxf(1.0f - y * p, 0.0f);", _hinge_ref,
                   target=Buffer("target", "int32", ("N",), distributions=("randint",), low=0, high=2,
                                 domain=Domain("labels", low=0, high=2))),
]

_CE_CUDA = common.REDUCE_CUDA + common.FINISH_SUM_CUDA + r"""
// One block per row: row_loss[b] = logsumexp(logits[b, :]) - logits[b, target[b]].
extern "C" __global__ void ce_rows(const float* __restrict__ logits, const long long* __restrict__ target,
                                   float* __restrict__ row_loss, int B, int C) {
    __shared__ float sh[33];
    const float* p = logits + (size_t)blockIdx.x * C;
    float m = -3.402823466e+38f;
    for (int j = threadIdx.x; j < C; j += blockDim.x) m = fmaxf(m, p[j]);
    m = block_max(m, sh);
    float s = 0.0f;
    for (int j = threadIdx.x; j < C; j += blockDim.x) s += expf(p[j] - m);
    s = block_sum(s, sh);
    if (threadIdx.x == 0) row_loss[blockIdx.x] = m + logf(s) - p[target[blockIdx.x]];
}
"""


def _ce_ref(xp, logits, target):
    m = xp.max(logits, axis=1, keepdims=True)
    lse = (m + xp.log(xp.sum(xp.exp(logits - m), axis=1, keepdims=True)))[:, 0]
    picked = xp.take_along_axis(logits, target.reshape(-1, 1), axis=1)[:, 0]
    return xp.mean(lse - picked).reshape(1).astype(xp.float32, copy=False)


_KL_CUDA = common.REDUCE_CUDA + common.FINISH_SUM_CUDA + r"""
// One block per row: KL(softmax(p) || softmax(q)) from the two rows of logits.
extern "C" __global__ void kl_rows(const float* __restrict__ p_logits, const float* __restrict__ q_logits,
                                   float* __restrict__ row_kl, int B, int C) {
    __shared__ float sh[33];
    const float* p = p_logits + (size_t)blockIdx.x * C;
    const float* q = q_logits + (size_t)blockIdx.x * C;
    float mp = -3.402823466e+38f, mq = -3.402823466e+38f;
    for (int j = threadIdx.x; j < C; j += blockDim.x) { mp = fmaxf(mp, p[j]); mq = fmaxf(mq, q[j]); }
    mp = block_max(mp, sh);
    mq = block_max(mq, sh);
    float sp = 0.0f, sq = 0.0f;
    for (int j = threadIdx.x; j < C; j += blockDim.x) { sp += expf(p[j] - mp); sq += expf(q[j] - mq); }
    float lp = mp + logf(block_sum(sp, sh));
    float lq = mq + logf(block_sum(sq, sh));
    float acc = 0.0f;
    for (int j = threadIdx.x; j < C; j += blockDim.x) {
        float a = p[j] - lp, b = q[j] - lq;
        acc += expf(a) * (a - b);
    }
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) row_kl[blockIdx.x] = acc;
}
"""


_KLB_CUDA = common.REDUCE_CUDA + common.FINISH_SUM_CUDA + r"""
// One block per row: sum_c targets * (log targets - log predictions).
extern "C" __global__ void kl_prob_rows(const float* __restrict__ predictions, const float* __restrict__ targets,
                                        float* __restrict__ row_kl, int B, int C) {
    __shared__ float sh[33];
    const float* p = predictions + (size_t)blockIdx.x * C;
    const float* t = targets + (size_t)blockIdx.x * C;
    float acc = 0.0f;
    for (int j = threadIdx.x; j < C; j += blockDim.x) acc += t[j] * (logf(t[j]) - logf(p[j]));
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) row_kl[blockIdx.x] = acc;
}
"""


def _kl_batchmean_ref(xp, predictions, targets):
    p, t = predictions.astype(xp.float64), targets.astype(xp.float64)
    return (xp.sum(t * (xp.log(t) - xp.log(p))) / p.shape[0]).reshape(1).astype(xp.float32, copy=False)


def _kl_ref(xp, p_logits, q_logits):
    def log_softmax(z):
        z = z - xp.max(z, axis=1, keepdims=True)
        return z - xp.log(xp.sum(xp.exp(z), axis=1, keepdims=True))
    lp, lq = log_softmax(p_logits), log_softmax(q_logits)
    return xp.mean(xp.sum(xp.exp(lp) * (lp - lq), axis=1)).reshape(1).astype(xp.float32, copy=False)


_COS_CUDA = common.REDUCE_CUDA + common.FINISH_SUM_CUDA + r"""
// One block per row: 1 - <a, b> / max(|a| |b|, eps).
extern "C" __global__ void cos_rows(const float* __restrict__ a, const float* __restrict__ b,
                                    float* __restrict__ row_loss, int B, int D, float eps) {
    __shared__ float sh[33];
    const float* x = a + (size_t)blockIdx.x * D;
    const float* y = b + (size_t)blockIdx.x * D;
    float dot = 0.0f, xx = 0.0f, yy = 0.0f;
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        float u = x[j], v = y[j];
        dot += u * v; xx += u * u; yy += v * v;
    }
    dot = block_sum(dot, sh);
    xx = block_sum(xx, sh);
    yy = block_sum(yy, sh);
    if (threadIdx.x == 0) row_loss[blockIdx.x] = 1.0f - dot / fmaxf(sqrtf(xx) * sqrtf(yy), eps);
}
"""


def _cos_ref(xp, a, b, eps):
    dot = xp.sum(a * b, axis=1)
    na, nb = xp.sqrt(xp.sum(a * a, axis=1)), xp.sqrt(xp.sum(b * b, axis=1))
    return xp.mean(1.0 - dot / xp.maximum(na * nb, eps)).reshape(1).astype(xp.float32, copy=False)


_LOSS_TOL = {"float32": (1e-4, 1e-3)}
TASKS += [
    Task(name="cross_entropy", level=1,
         description=("Mean cross-entropy of class logits: logits is float32 [B, C] (contiguous row-major), "
                      "target is int64 [B] with class indices in [0, C). loss[0] = (1/B) sum_b "
                      "(log(sum_c exp(logits[b, c])) - logits[b, target[b]]), computed stably (subtract the "
                      "row maximum). loss is a float32 buffer of 1 element."),
         sizes={"eval": {"B": 4096, "C": 16384}, "small": {"B": 9, "C": 1000}},
         inputs=(Buffer("logits", "float32", ("B", "C")),
                 Buffer("target", "int64", ("B",), distributions=("indices",), high="C")),
         outputs=(Buffer("loss", "float32", (1,)),), reference=common.float64_reference(_ce_ref), tolerance=_LOSS_TOL,
         solution=common.solution(_CE_CUDA, "scratch float row_loss[B];\nce_rows<<<B, 256>>>(logits, target, "
                                  "row_loss, B, C);\nfinish_sum<<<1, 1024>>>(row_loss, loss, B, B);"),
         tags=("loss", "reduction", "softmax")),
    Task(name="kl_div_logits", level=1,  # KernelBench 98_KLDivLoss takes probabilities: see kl_div_batchmean
         description=("Batch-mean KL divergence between two categorical distributions given by logits: with "
                      "P = softmax(p_logits[b, :]) and Q = softmax(q_logits[b, :]) per row, loss[0] = (1/B) "
                      "sum_b sum_c P[c] * (log P[c] - log Q[c]). p_logits and q_logits are float32 [B, C], "
                      "contiguous row-major; loss is a float32 buffer of 1 element. Use stable log-softmax."),
         sizes={"eval": {"B": 4096, "C": 8192}, "small": {"B": 9, "C": 1000}},
         inputs=(Buffer("p_logits", "float32", ("B", "C")), Buffer("q_logits", "float32", ("B", "C"))),
         outputs=(Buffer("loss", "float32", (1,)),), reference=common.float64_reference(_kl_ref), tolerance=_LOSS_TOL,
         solution=common.solution(_KL_CUDA, "scratch float row_kl[B];\nkl_rows<<<B, 256>>>(p_logits, q_logits, "
                                  "row_kl, B, C);\nfinish_sum<<<1, 1024>>>(row_kl, loss, B, B);"),
         tags=("loss", "reduction", "softmax")),
    Task(name="kl_div_batchmean", level=1,
         description=("KL divergence as torch.nn.functional.kl_div(torch.log(predictions), targets, "
                      "reduction='batchmean') (KernelBench 98_KLDivLoss): loss[0] = (1/B) sum_b sum_c "
                      "targets[b, c] * (log targets[b, c] - log predictions[b, c]). predictions and targets are "
                      "float32 [B, C] (contiguous row-major) of strictly positive values (rows of probabilities; "
                      "use them as given, without renormalising); loss is a float32 buffer of 1 element."),
         sizes={"eval": {"B": 4096, "C": 8192}, "small": {"B": 9, "C": 1000}},
         inputs=(Buffer("predictions", "float32", ("B", "C"), distributions=("positive",)),
                 Buffer("targets", "float32", ("B", "C"), distributions=("positive",))),
         outputs=(Buffer("loss", "float32", (1,)),), reference=common.float64_reference(_kl_batchmean_ref), tolerance=_LOSS_TOL,
         solution=common.solution(_KLB_CUDA, "scratch float row_kl[B];\nkl_prob_rows<<<B, 256>>>(predictions, "
                                  "targets, row_kl, B, C);\nfinish_sum<<<1, 1024>>>(row_kl, loss, B, B);"),
         tags=("loss", "reduction", "kernelbench")),
    Task(name="cosine_similarity_loss", level=1,
         description=("Mean cosine-distance loss between paired rows: a and b are float32 [B, D] (contiguous "
                      "row-major); for each row, cos_b = dot(a[b], b[b]) / max(||a[b]|| * ||b[b]||, eps) with "
                      "eps = 1e-8, and loss[0] = (1/B) sum_b (1 - cos_b). loss is a float32 buffer of 1 element."),
         sizes={"eval": {"B": 8192, "D": 4096}, "small": {"B": 9, "D": 1000}},
         inputs=(Buffer("a", "float32", ("B", "D")), Buffer("b", "float32", ("B", "D"))),
         outputs=(Buffer("loss", "float32", (1,)),), reference=common.float64_reference(_cos_ref),
         scalars=(Scalar("eps", "float32", 1e-8),),
         tolerance=_LOSS_TOL,
         solution=common.solution(_COS_CUDA, "scratch float row_loss[B];\ncos_rows<<<B, 256>>>(a, b, row_loss, "
                                  "B, D, eps);\nfinish_sum<<<1, 1024>>>(row_loss, loss, B, B);"),
         tags=("loss", "reduction")),
]

for _t in TASKS:
    register(_t)


# ---- KernelBench 92_cumsum_exclusive, 93_masked_cumsum, 99_TripletMarginLoss --------------------------

def _scan_variant(name: str, description: str, load: str, ref: Any, inputs: tuple[Buffer, ...],
                  slack: Any) -> Task:
    """An inclusive row scan of `load(j)` (a macro over the row pointers p, and mp for a mask)."""
    extra = "".join(f", const int* __restrict__ {b.name}" for b in inputs[1:])
    cuda = (f"#define OP(a, b) ((a) + (b))\n#define LOAD(j) ({load})\n"
            + _SCAN.replace("NAME", name).replace("IDENT", "0.0f").replace("p[POS(j)]", "LOAD(j)")
            .replace("q[POS(j)]", "q[j]").replace("const float* __restrict__ x, float* __restrict__ y",
                                                  f"const float* __restrict__ x{extra}, float* __restrict__ y")
            .replace("    float* q = y + (size_t)blockIdx.x * N;\n",
                     "    float* q = y + (size_t)blockIdx.x * N;\n"
                     + "".join(f"    const int* mp = {b.name} + (size_t)blockIdx.x * N;\n" for b in inputs[1:])))
    args = ", ".join(b.name for b in inputs)
    return Task(name=name, level=1, description=description,
                sizes={"eval": {"M": 8192, "N": 8192}, "small": {"M": 5, "N": 1000}}, inputs=inputs,
                outputs=(Buffer("y", "float32", ("M", "N")),), reference=common.float64_reference(ref),
                tolerance=_SCAN_TOL, slack=slack,
                solution=common.solution(cuda, f"{name}_kernel<<<M, 256>>>({args}, y, M, N);"),
                tags=("scan", "kernelbench"))


def _exclusive_cumsum_ref(xp, x):
    y = xp.zeros(x.shape, dtype=x.dtype)
    y[:, 1:] = xp.cumsum(x[:, :-1], axis=1)
    return y.astype(xp.float32, copy=False)


def _masked_cumsum_ref(xp, x, mask):
    return xp.cumsum(x * (mask != 0), axis=1).astype(xp.float32, copy=False)


_TRIPLET_CUDA = common.REDUCE_CUDA + common.FINISH_SUM_CUDA + r"""
// One block per row: max(||a - p + eps|| - ||a - n + eps|| + margin, 0).
extern "C" __global__ void triplet_rows(const float* __restrict__ anchor, const float* __restrict__ positive,
                                        const float* __restrict__ negative, float* __restrict__ row_loss,
                                        int B, int D, float margin, float eps) {
    __shared__ float sh[33];
    size_t off = (size_t)blockIdx.x * D;
    float sp = 0.0f, sn = 0.0f;
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        float a = anchor[off + j];
        float dp = a - positive[off + j] + eps, dn = a - negative[off + j] + eps;
        sp += dp * dp;
        sn += dn * dn;
    }
    sp = block_sum(sp, sh);
    sn = block_sum(sn, sh);
    if (threadIdx.x == 0) row_loss[blockIdx.x] = fmaxf(sqrtf(sp) - sqrtf(sn) + margin, 0.0f);
}
"""


def _triplet_ref(xp, anchor, positive, negative, margin, eps):
    a = anchor.astype(xp.float64)
    dp = xp.sqrt(xp.sum((a - positive + eps) ** 2, axis=1))
    dn = xp.sqrt(xp.sum((a - negative + eps) ** 2, axis=1))
    return xp.mean(xp.maximum(dp - dn + margin, 0.0)).reshape(1).astype(xp.float32, copy=False)


KB_SCAN_LOSS_TASKS = [
    _scan_variant("cumsum_exclusive", "Exclusive cumulative sum along each row (KernelBench 92_cumsum_exclusive, "
                  "dim 1): y[m, 0] = 0 and y[m, j] = sum_{k < j} x[m, k], the element itself excluded. " + _ROWS,
                  "(j) > 0 ? p[(j) - 1] : 0.0f", _exclusive_cumsum_ref, (Buffer("x", "float32", ("M", "N")),),
                  _exclusive_slack),
    _scan_variant("masked_cumsum", "Masked cumulative sum along each row, torch.cumsum(x * mask, dim=1) "
                  "(KernelBench 93_masked_cumsum): y[m, j] = sum over k <= j with mask[m, k] != 0 of x[m, k]. "
                  "x is a contiguous row-major float32 matrix [M, N]; mask is int32 [M, N] of 0/1 values (the "
                  "KernelBench model takes a bool tensor; here 1 means true); y is float32 [M, N].",
                  "mp[j] != 0 ? p[j] : 0.0f", _masked_cumsum_ref,
                  (Buffer("x", "float32", ("M", "N")),
                   Buffer("mask", "int32", ("M", "N"), distributions=("randint",), low=0, high=2)),
                  _masked_slack),
    Task(name="triplet_margin_loss", level=1,
         description=("Triplet margin loss as torch.nn.TripletMarginLoss(margin=1.0) with its defaults (p = 2, "
                      "eps = 1e-6, swap = False, mean reduction; KernelBench 99_TripletMarginLoss): for each row b, "
                      "d_pos = sqrt(sum_j (anchor[b, j] - positive[b, j] + eps)^2) and d_neg likewise with "
                      "negative (eps is added to each difference, as torch.pairwise_distance does), and loss[0] = "
                      "(1/B) sum_b max(d_pos - d_neg + margin, 0). anchor, positive and negative are float32 "
                      "[B, D], contiguous row-major; loss is a float32 buffer of 1 element."),
         sizes={"eval": {"B": 8192, "D": 2048}, "small": {"B": 9, "D": 1000}},
         inputs=(Buffer("anchor", "float32", ("B", "D")), Buffer("positive", "float32", ("B", "D")),
                 Buffer("negative", "float32", ("B", "D"))),
         outputs=(Buffer("loss", "float32", (1,)),), reference=common.float64_reference(_triplet_ref), tolerance=_LOSS_TOL,
         scalars=(Scalar("margin", "float32", 1.0), Scalar("eps", "float32", 1e-6)),
         solution=common.solution(_TRIPLET_CUDA, "scratch float row_loss[B];\ntriplet_rows<<<B, 256>>>(anchor, "
                                  "positive, negative, row_loss, B, D, margin, eps);\nfinish_sum<<<1, 1024>>>"
                                  "(row_loss, loss, B, B);"),
         tags=("loss", "reduction", "kernelbench")),
]

for _t in KB_SCAN_LOSS_TASKS:
    register(_t)
