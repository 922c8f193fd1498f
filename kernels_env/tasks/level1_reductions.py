"""Level-1 reductions over one dimension: sum/mean/max/min/prod over the middle dim of [B, D, I], and
argmax/argmin over the last dim of [M, N].

Middle-dim reductions give one output per thread with coalesced loads along I; last-dim arg-reductions
give one row per block with warp-shuffle reductions of (value, index) pairs.
"""
from __future__ import annotations

from typing import Any

from kernels_env.tasks import common
from kernels_env.tasks.registry import register
from kernels_env.tasks.spec import Buffer, Task

MID_EVAL = {"B": 256, "D": 256, "I": 2048}  # 128M fp32 elements (512 MB) read: >= 0.1 ms at HBM speed
MID_SMALL = {"B": 3, "D": 17, "I": 67}
ROW_EVAL = {"M": 8192, "N": 16384}  # 512 MB read
ROW_SMALL = {"M": 9, "N": 1000}


def _mid_kernel(name: str, init: str, step: str, final: str) -> str:
    return f"""// One thread per output (b, i); consecutive threads read consecutive i: coalesced.
extern "C" __global__ void {name}_kernel(const float* __restrict__ x, float* __restrict__ y,
                                         int B, int D, int I) {{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * I) return;
    int b = idx / I, i = idx - b * I;
    const float* p = x + (size_t)b * D * I + i;
    float acc = {init};
    for (int d = 0; d < D; ++d) {{
        float v = p[(size_t)d * I];
        {step}
    }}
    y[idx] = {final};
}}"""


def mid_reduce_task(op: str, what: str, init: str, step: str, final: str, ref: Any, *,
                    tolerance: dict | None = None, inputs: Buffer | None = None, sizes: dict | None = None,
                    edge: str = "") -> Task:
    name = f"{op}_dim"
    sizes = sizes or {"eval": MID_EVAL, "small": MID_SMALL}
    x = inputs or Buffer("x", "float32", ("B", "D", "I"))

    def reference(xp: Any, x: Any) -> Any:
        return ref(xp, x).astype(xp.float32, copy=False)

    return Task(
        name=name, level=1,
        description=(f"Reduce a contiguous row-major float32 tensor x of shape [B, D, I] over its middle "
                     f"dimension D: y[b, i] = {what} over d of x[b, d, i]. Output y is float32 [B, I]. {edge}"),
        sizes=sizes, inputs=(x,), outputs=(Buffer("y", "float32", ("B", "I")),),
        reference=reference, tolerance=tolerance or {},
        solution=common.solution(_mid_kernel(name, init, step, final),
                                 f"{name}_kernel<<<cdiv(B * I, 256), 256>>>(x, y, B, D, I);"),
        tags=("reduction",))


_ARG = r"""
// One block per row; each thread keeps its best (value, index), ties resolved to the smaller index.
extern "C" __global__ void NAME_kernel(const float* __restrict__ x, ITYPE* __restrict__ out, int M, int N) {
    __shared__ float sval[32];
    __shared__ int sidx[32];
    int row = blockIdx.x;
    const float* p = x + (size_t)row * N;
    float best = 0.0f;
    int bi = -1;  // -1: this thread saw nothing
    for (int j = threadIdx.x; j < N; j += blockDim.x) {
        float v = p[j];
        if (bi < 0 || v CMP best) { best = v; bi = j; }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_down_sync(0xffffffffu, best, o);
        int oi = __shfl_down_sync(0xffffffffu, bi, o);
        if (oi >= 0 && (bi < 0 || ov CMP best || (ov == best && oi < bi))) { best = ov; bi = oi; }
    }
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    if (lane == 0) { sval[wid] = best; sidx[wid] = bi; }
    __syncthreads();
    if (wid == 0) {
        int nw = blockDim.x >> 5;
        best = lane < nw ? sval[lane] : 0.0f;
        bi = lane < nw ? sidx[lane] : -1;
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_down_sync(0xffffffffu, best, o);
            int oi = __shfl_down_sync(0xffffffffu, bi, o);
            if (oi >= 0 && (bi < 0 || ov CMP best || (ov == best && oi < bi))) { best = ov; bi = oi; }
        }
        if (lane == 0) out[row] = (ITYPE)bi;
    }
}
"""


def arg_task(op: str, out_dtype: str) -> Task:
    name = f"{op}_dim"
    cmp = ">" if op == "argmax" else "<"
    ctype = "long long" if out_dtype == "int64" else "int"
    word = "largest" if op == "argmax" else "smallest"

    def reference(xp: Any, x: Any) -> Any:
        f = xp.argmax if op == "argmax" else xp.argmin
        return f(x, axis=1).astype(getattr(xp, out_dtype), copy=False)

    return Task(
        name=name, level=1,
        description=(f"Index of the {word} element of each row: x is a contiguous row-major float32 "
                     f"matrix [M, N]; out[m] = the column j in [0, N) where x[m, j] is {word}. If several "
                     f"columns tie, return the smallest such j. Output out is {out_dtype} [M]."),
        sizes={"eval": ROW_EVAL, "small": ROW_SMALL},
        inputs=(Buffer("x", "float32", ("M", "N")),), outputs=(Buffer("out", out_dtype, ("M",)),),
        reference=reference,
        solution=common.solution(_ARG.replace("NAME", name).replace("ITYPE", ctype).replace("CMP", cmp),
                                 f"{name}_kernel<<<M, 256>>>(x, out, M, N);"),
        tags=("reduction", "argreduce"))


_SUM_TOL = {"float32": (1e-3, 1e-3)}  # float32 sums of 256 terms in a different order than the reference

TASKS = [
    mid_reduce_task("sum", "the sum", "0.0f", "acc += v;", "acc", lambda xp, x: xp.sum(x, axis=1),
                    tolerance=_SUM_TOL),
    mid_reduce_task("mean", "the arithmetic mean (sum divided by D)", "0.0f", "acc += v;", "acc / (float)D",
                    lambda xp, x: xp.mean(x, axis=1), tolerance={"float32": (1e-4, 1e-3)}),
    mid_reduce_task("max", "the maximum", "-3.402823466e+38f", "acc = fmaxf(acc, v);", "acc",
                    lambda xp, x: xp.max(x, axis=1)),
    mid_reduce_task("min", "the minimum", "3.402823466e+38f", "acc = fminf(acc, v);", "acc",
                    lambda xp, x: xp.min(x, axis=1)),
    mid_reduce_task("prod", "the product", "1.0f", "acc *= v;", "acc", lambda xp, x: xp.prod(x, axis=1),
                    tolerance={"float32": (1e-4, 1e-3)},
                    inputs=Buffer("x", "float32", ("B", "D", "I"), distributions=("uniform",), low=0.5, high=1.5),
                    sizes={"eval": {"B": 1024, "D": 64, "I": 2048}, "small": {"B": 3, "D": 13, "I": 67}},
                    edge="Inputs are drawn from [0.5, 1.5] so products stay in range."),
    arg_task("argmax", "int64"),
    arg_task("argmin", "int32"),
]

for _t in TASKS:
    register(_t)
