"""Level-1 reductions over one dimension: sum/mean/max/min/prod over the middle dim of [B, D, I], and
argmax/argmin over dim 1 of [B, D, I] (int64, as torch).

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
        return ref(xp, x.astype(xp.float64)).astype(xp.float32, copy=False)  # exact, rounded once

    return Task(
        name=name, level=1,
        description=(f"Reduce a contiguous row-major float32 tensor x of shape [B, D, I] over its middle "
                     f"dimension D: y[b, i] = {what} over d of x[b, d, i]. Output y is float32 [B, I]. {edge}"),
        sizes=sizes, inputs=(x,), outputs=(Buffer("y", "float32", ("B", "I")),),
        reference=reference, tolerance=tolerance or {},
        solution=common.solution(_mid_kernel(name, init, step, final),
                                 f"{name}_kernel<<<cdiv(B * I, 256), 256>>>(x, y, B, D, I);"),
        tags=("reduction",))


_ARG_MID = r"""
// One thread per output (b, i): scan the D values of column i of batch b (coalesced along i).
extern "C" __global__ void NAME_kernel(const float* __restrict__ x, long long* __restrict__ out,
                                       int B, int D, int I) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * I) return;
    int b = idx / I, i = idx - b * I;
    const float* p = x + (size_t)b * D * I + i;
    float best = p[0];
    long long arg = 0;
    for (int d = 1; d < D; ++d) {
        float v = p[(size_t)d * I];
        if (v CMP best) { best = v; arg = d; }  // strict: the first index wins ties, as torch
    }
    out[idx] = arg;
}
"""


def arg_task(op: str) -> Task:
    """torch.argmax / torch.argmin(x, dim=1) of x [B, D, I]: KernelBench 51/52 (int64 indices)."""
    name = f"{op}_dim"
    cmp = ">" if op == "argmax" else "<"
    word = "largest" if op == "argmax" else "smallest"

    def reference(xp: Any, x: Any) -> Any:
        f = xp.argmax if op == "argmax" else xp.argmin
        return f(x, axis=1).astype(xp.int64, copy=False)

    return Task(
        name=name, level=1,
        description=(f"torch.{op}(x, dim=1) (KernelBench {'51_Argmax' if op == 'argmax' else '52_Argmin'}"
                     f"_over_a_dimension): x is a contiguous row-major float32 tensor [B, D, I]; out[b, i] = the "
                     f"index d in [0, D) where x[b, d, i] is {word}. If several d tie, return the smallest. "
                     "Output out is int64 [B, I]."),
        sizes={"eval": MID_EVAL, "small": MID_SMALL},
        inputs=(Buffer("x", "float32", ("B", "D", "I")),), outputs=(Buffer("out", "int64", ("B", "I")),),
        reference=reference,
        solution=common.solution(_ARG_MID.replace("NAME", name).replace("CMP", cmp),
                                 f"{name}_kernel<<<cdiv(B * I, 256), 256>>>(x, out, B, D, I);"),
        tags=("reduction", "argreduce", "kernelbench"))


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
    arg_task("argmax"),
    arg_task("argmin"),
]

for _t in TASKS:
    register(_t)
