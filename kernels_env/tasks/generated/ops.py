"""The op catalogue of the generated tasks: every op's name token, formula, array-API reference and C
expression, plus the broadcast modes, row ops, dtypes and shape ids.

Why one table: the description, the reference and the CUDA solution of a generated task are all
rendered from these entries, so an op reads the same (and compiles to the same short C expression) in
every task that uses it. C expressions are over `float t` (and `float u`, the second operand).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

from kernels_env.tasks import common

GELU_C = math.sqrt(2.0 / math.pi)  # gelu_tanh's constant (0.7978845608 in the CUDA text)


@dataclass(frozen=True)
class Unary:
    token: str
    formula: str  # over "{}"
    c_expr: str  # over t
    ref: Callable[[Any, Any], Any]


@dataclass(frozen=True)
class Binary:
    token: str
    formula: str  # over "{a}", "{b}"
    c_expr: str  # over t, u
    ref: Callable[[Any, Any, Any], Any]


UNARY: dict[str, Unary] = {u.token: u for u in (
    Unary("relu", "relu({})", "fmaxf(t, 0.0f)", lambda xp, t: xp.maximum(t, 0.0)),
    Unary("sigmoid", "sigmoid({})", "1.0f / (1.0f + expf(-t))", lambda xp, t: common.sigmoid(xp, t)),
    Unary("tanh", "tanh({})", "tanhf(t)", lambda xp, t: xp.tanh(t)),
    Unary("abs", "|{}|", "fabsf(t)", lambda xp, t: xp.abs(t)),
    Unary("sq", "({})^2", "t * t", lambda xp, t: t * t),
    Unary("neg", "-({})", "-t", lambda xp, t: -t),
    Unary("softplus", "softplus({})", "fmaxf(t, 0.0f) + log1pf(expf(-fabsf(t)))",
          lambda xp, t: common.softplus(xp, t)),
    Unary("silu", "silu({})", "t / (1.0f + expf(-t))", lambda xp, t: t * common.sigmoid(xp, t)),
    Unary("gelu", "gelu_tanh({})", "0.5f * t * (1.0f + tanhf(0.7978845608f * (t + 0.044715f * t * t * t)))",
          lambda xp, t: 0.5 * t * (1.0 + xp.tanh(GELU_C * (t + 0.044715 * t * t * t)))),
    Unary("expn", "exp(-|{}|)", "expf(-fabsf(t))", lambda xp, t: xp.exp(-xp.abs(t))),
    Unary("scale", "1.5 * ({})", "1.5f * t", lambda xp, t: 1.5 * t),
    Unary("clamp", "clamp({}, -1, 1)", "fminf(fmaxf(t, -1.0f), 1.0f)", lambda xp, t: xp.clip(t, -1.0, 1.0)),
    Unary("log1pabs", "log(1 + |{}|)", "log1pf(fabsf(t))", lambda xp, t: xp.log1p(xp.abs(t))),
)}

# Definitions of the named functions used in formulas (quoted in descriptions that use them).
DEFINITIONS = {
    "relu": "relu(z) = max(z, 0)",
    "sigmoid": "sigmoid(z) = 1 / (1 + exp(-z))",
    "softplus": "softplus(z) = log(1 + exp(z)) (compute stably, e.g. max(z, 0) + log1p(exp(-|z|)))",
    "silu": "silu(z) = z * sigmoid(z)",
    "gelu": "gelu_tanh(z) = 0.5 z (1 + tanh(0.7978845608 (z + 0.044715 z^3)))",
    "clamp": "clamp(z, lo, hi) = min(max(z, lo), hi)",
}

BINARY: dict[str, Binary] = {b.token: b for b in (
    Binary("add", "{a} + {b}", "t + u", lambda xp, t, u: t + u),
    Binary("sub", "{a} - {b}", "t - u", lambda xp, t, u: t - u),
    Binary("mul", "{a} * {b}", "t * u", lambda xp, t, u: t * u),
    Binary("max", "max({a}, {b})", "fmaxf(t, u)", lambda xp, t, u: xp.maximum(t, u)),
    Binary("min", "min({a}, {b})", "fminf(t, u)", lambda xp, t, u: xp.minimum(t, u)),
)}

# Broadcast modes of the second operand: token -> (buffer shape or None for the scalar, index in the
# element-wise kernel, index in the row kernel, formula text).
SCALAR_C = 0.5
BCAST: dict[str, tuple[tuple[str, ...] | None, str, str, str]] = {
    "row": (("N",), "v[n]", "v[n]", "v[n]"),
    "col": (("M",), "v[m]", "v[m]", "v[m]"),
    "full": (("M", "N"), "v[i]", "v[m * N + n]", "v[m, n]"),
    "sc": (None, "c", "c", "c"),
}

REDUCE = ("rsum", "rmax", "rmean", "rsumsq", "rl2")
NORM = ("softmax", "lsm", "rms", "ln")
ROWOPS = REDUCE + NORM
EPS = 1e-5

DTYPES = {"f32": "float32", "f16": "float16"}
# Reductions whose float16 output cannot overflow for the input domain (sums of squares can).
F16_REDUCE = ("rmax", "rmean", "rl2")

# shape id -> {"eval": (M, N), "small": (M, N)}; N is odd in every small set (bounds checks matter)
# and not a multiple of 256 in two of the eval sets.
SHAPES: dict[int, dict[str, tuple[int, int]]] = {
    0: {"eval": (2048, 1024), "small": (37, 67)},
    1: {"eval": (1024, 2000), "small": (29, 129)},
    2: {"eval": (4096, 739), "small": (16, 255)},
}
