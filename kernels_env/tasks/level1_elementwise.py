"""Level-1 element-wise activations (fp32 and a few fp16): y[i] = f(x[i]) over a flat vector.

Eval size N = 96M elements (384 MB per fp32 buffer) so one read + one write take ~0.2 ms on an H200;
the small size N = 3001 is odd so grid-stride bounds checks matter.
"""
from __future__ import annotations

import math
from typing import Any
from collections.abc import Callable

from kernels_env.tasks import common
from kernels_env.tasks.domains import Domain
from kernels_env.tasks.registry import register
from kernels_env.tasks.spec import Buffer, Scalar, Task

EVAL_N = 96 * 1024 * 1024
SMALL_N = 3001

_CTYPE = {"float32": "float", "float16": "__half"}


def _kernel(name: str, dtype: str, expr: str, scalars: tuple[Scalar, ...]) -> str:
    ct = _CTYPE[dtype]
    load = "float v = x[i];" if dtype == "float32" else "float v = __half2float(x[i]);"
    store = "y[i] = r;" if dtype == "float32" else "y[i] = __float2half(r);"
    params = "".join(f", float {s.name}" for s in scalars)
    header = "#include <cuda_fp16.h>\n\n" if dtype == "float16" else ""
    return f"""{header}// Grid-stride loop: coalesced loads/stores, any N.
extern "C" __global__ void {name}_kernel(const {ct}* __restrict__ x, {ct}* __restrict__ y, int n{params}) {{
    int stride = blockDim.x * gridDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {{
        {load}
        float r = {expr};
        {store}
    }}
}}"""


def unary_task(name: str, what: str, ref: Callable[..., Any], expr: str, *, dtype: str = "float32",
               scalars: tuple[Scalar, ...] = (), tags: tuple[str, ...] = (),
               tolerance: dict[str, tuple[float, float]] | None = None, positive: bool = False) -> Task:
    """Build an element-wise task: `ref(xp, x32, **scalars)` computes in float32, `expr` is the C
    expression of the solution over `float v` and the scalar names. `positive` declares the strictly
    positive domain (for log / sqrt); otherwise the whole real line up to the dtype's max_abs."""
    sc = "".join(f", {s.name}" for s in scalars)
    sdesc = "".join(f" Scalar argument `{s.name}` = {s.value}." for s in scalars)
    description = (
        f"Element-wise {what}. Input `x` is a contiguous 1-D {dtype} vector of N elements; write "
        f"`y[i] = f(x[i])` for every i into the {dtype} vector `y` of N elements.{sdesc} "
        + ("Compute in float32 and round the result to half precision. " if dtype == "float16" else "")
        + ("Inputs are strictly positive." if positive else
           "Inputs may be large in magnitude (heavy-tailed); the result must stay finite wherever the "
           "mathematical value is finite (no overflow in intermediate exponentials)."))

    def reference(xp: Any, x: Any, **kw: Any) -> Any:
        return ref(xp, x.astype(xp.float32, copy=False), **kw).astype(getattr(xp, dtype), copy=False)

    launch = f"{name}_kernel<<<min(cdiv(N, 256), 8192), 256>>>(x, y, N{sc});"
    return Task(
        name=name, level=1, description=description,
        sizes={"eval": {"N": EVAL_N}, "small": {"N": SMALL_N}},
        inputs=(Buffer("x", dtype, ("N",), distributions=("positive",), domain=Domain("positive"))
                if positive else Buffer("x", dtype, ("N",), domain=Domain("real")),),
        outputs=(Buffer("y", dtype, ("N",)),),
        reference=reference, scalars=scalars, tolerance=tolerance or {},
        solution=common.solution(_kernel(name, dtype, expr, scalars), launch),
        tags=("elementwise", "activation") + tags + ((dtype,) if dtype != "float32" else ()))


_GELU_C = math.sqrt(2.0 / math.pi)
_SELU_ALPHA = 1.6732632423543772
_SELU_SCALE = 1.0507009873554805


def _gelu_tanh(xp, x):
    return 0.5 * x * (1.0 + xp.tanh(_GELU_C * (x + 0.044715 * x * x * x)))


TASKS = [
    unary_task("relu", "ReLU: f(x) = max(x, 0)", lambda xp, x: xp.maximum(x, 0), "fmaxf(v, 0.0f)"),
    unary_task("leaky_relu", "leaky ReLU: f(x) = x if x > 0 else negative_slope * x",
               lambda xp, x, negative_slope: xp.where(x > 0, x, x * xp.float32(negative_slope)),
               "v > 0.0f ? v : v * negative_slope", scalars=(Scalar("negative_slope", "float32", 0.01),)),
    unary_task("sigmoid", "logistic sigmoid: f(x) = 1 / (1 + exp(-x))",
               lambda xp, x: common.sigmoid(xp, x), "1.0f / (1.0f + expf(-v))"),
    unary_task("tanh", "hyperbolic tangent: f(x) = tanh(x)", lambda xp, x: xp.tanh(x), "tanhf(v)"),
    unary_task("gelu_tanh", "GELU, tanh approximation: f(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))",
               _gelu_tanh, "0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)))"),
    unary_task("gelu_erf", "exact GELU: f(x) = 0.5 x (1 + erf(x / sqrt(2)))",
               lambda xp, x: 0.5 * x * (1.0 + common.erf(xp, x / math.sqrt(2.0))),
               "0.5f * v * (1.0f + erff(v * 0.7071067811865476f))"),
    unary_task("silu", "SiLU / swish: f(x) = x * sigmoid(x)",
               lambda xp, x: x * common.sigmoid(xp, x), "v / (1.0f + expf(-v))"),
    unary_task("softplus", "softplus: f(x) = log(1 + exp(x)), computed stably as max(x,0) + log1p(exp(-|x|))",
               lambda xp, x: common.softplus(xp, x), "fmaxf(v, 0.0f) + log1pf(expf(-fabsf(v)))"),
    unary_task("elu", "ELU: f(x) = x if x > 0 else alpha * (exp(x) - 1)",
               lambda xp, x, alpha: xp.where(x > 0, x, xp.float32(alpha) * xp.expm1(xp.minimum(x, 0))),
               "v > 0.0f ? v : alpha * expm1f(v)", scalars=(Scalar("alpha", "float32", 1.0),)),
    unary_task("hardtanh", "hardtanh (torch.nn.Hardtanh defaults): f(x) = min(max(x, min_val), max_val)",
               lambda xp, x, min_val, max_val: xp.minimum(xp.maximum(x, xp.float32(min_val)), xp.float32(max_val)),
               "fminf(fmaxf(v, min_val), max_val)",
               scalars=(Scalar("min_val", "float32", -1.0), Scalar("max_val", "float32", 1.0))),
    unary_task("selu", f"SELU: f(x) = scale * (x if x > 0 else alpha * (exp(x) - 1)) with alpha = "
               f"{_SELU_ALPHA!r}, scale = {_SELU_SCALE!r}",
               lambda xp, x: _SELU_SCALE * xp.where(x > 0, x, _SELU_ALPHA * xp.expm1(xp.minimum(x, 0))),
               f"{_SELU_SCALE!r}f * (v > 0.0f ? v : {_SELU_ALPHA!r}f * expm1f(v))"),
    unary_task("hardsigmoid", "hard sigmoid: f(x) = min(max(x / 6 + 1/2, 0), 1)",
               lambda xp, x: xp.minimum(xp.maximum(x / 6.0 + 0.5, 0), 1),
               "fminf(fmaxf(v * (1.0f / 6.0f) + 0.5f, 0.0f), 1.0f)"),
    unary_task("hardswish", "hard swish: f(x) = x * min(max(x + 3, 0), 6) / 6",
               lambda xp, x: x * xp.minimum(xp.maximum(x + 3.0, 0), 6.0) / 6.0,
               "v * fminf(fmaxf(v + 3.0f, 0.0f), 6.0f) * (1.0f / 6.0f)"),
    unary_task("softsign", "softsign: f(x) = x / (1 + |x|)", lambda xp, x: x / (1.0 + xp.abs(x)),
               "v / (1.0f + fabsf(v))"),
    unary_task("mish", "Mish: f(x) = x * tanh(softplus(x)), softplus(x) = log(1 + exp(x))",
               lambda xp, x: x * xp.tanh(common.softplus(xp, x)),
               "v * tanhf(fmaxf(v, 0.0f) + log1pf(expf(-fabsf(v))))"),
    unary_task("sqrt", "square root: f(x) = sqrt(x)", lambda xp, x: xp.sqrt(x), "sqrtf(v)", positive=True),
    unary_task("log", "natural logarithm: f(x) = log(x)", lambda xp, x: xp.log(x), "logf(v)", positive=True),
    unary_task("relu_fp16", "ReLU on half precision: f(x) = max(x, 0)", lambda xp, x: xp.maximum(x, 0),
               "fmaxf(v, 0.0f)", dtype="float16"),
    unary_task("silu_fp16", "SiLU on half precision: f(x) = x * sigmoid(x)",
               lambda xp, x: x * common.sigmoid(xp, x), "v / (1.0f + expf(-v))", dtype="float16"),
]

for _t in TASKS:
    register(_t)
