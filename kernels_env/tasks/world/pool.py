"""Max and average pooling over 1-D to 3-D NC[D]HW float32 tensors: window K, stride S (= K unless
the task is strided, then S < K and windows overlap), zero padding P when padded (max ignores the
padding, average counts it: PyTorch's count_include_pad). Tokens: e.g. gen_w_pl_2d_avg_str_pad_f32_s4."""
from __future__ import annotations

import itertools
from typing import Any

from kernels_env.tasks.spec import Buffer, Task
from kernels_env.tasks.world.base import WorldSpec, per_output, rng, tolerance
from kernels_env.tasks.world.conv import DIMS, extent, out_len, spatial_parts

FAMILY = "pl"
MODES = ("max", "avg")
FEATURES = ((), ("str",), ("pad",), ("str", "pad"))


def combos() -> list[tuple[tuple[str, ...], str]]:
    return [((d, m) + f, "f32") for d in DIMS for m in MODES for f in FEATURES]


def geometry(spec: WorldSpec) -> dict[str, dict[str, int]]:
    r = rng(spec)
    dim, feats = spec.tokens[0], spec.tokens[2:]
    axes = DIMS[dim]
    k = r.choice((2, 3)) if dim == "3d" else r.choice((2, 3, 4, 5))
    s = max(1, r.randint(1, k - 1)) if "str" in feats else k
    p = r.randint(1, k // 2) if "pad" in feats else 0
    ext = {"eval": {"1d": (4000, 9000), "2d": (100, 300), "3d": (20, 60)}[dim],
           "small": {"1d": (20, 50), "2d": (8, 17), "3d": (5, 9)}[dim]}
    out = {}
    for key, (b, c) in (("eval", (16, r.randint(16, 64))), ("small", (2, r.randint(2, 4)))):
        sz = {"B": b, "C": c, "K": k, "S": s, "P": p}
        for a in axes:
            n = extent(r, ext[key], k, s, 1, p)
            sz[a], sz["O" + a] = n, out_len(n, k, s, 1, p, False)
        out[key] = sz
    return out


def reference_fn(mode: str, nd: int, k: int, s: int, p: int) -> Any:
    def reference(xp: Any, x: Any) -> Any:
        fill = -xp.inf if mode == "max" else 0.0
        xpad = xp.pad(x.astype(xp.float64), ((0, 0), (0, 0)) + ((p, p),) * nd, constant_values=fill)
        outs = tuple(out_len(n, k, s, 1, p, False) for n in x.shape[2:])
        acc = None
        for kk in itertools.product(range(k), repeat=nd):
            win = xpad[(slice(None), slice(None)) + tuple(slice(q, q + s * (o - 1) + 1, s)
                                                          for q, o in zip(kk, outs, strict=True))]
            acc = win if acc is None else (xp.maximum(acc, win) if mode == "max" else acc + win)
        assert acc is not None  # k >= 1: at least one window offset
        return (acc if mode == "max" else acc / k ** nd).astype(xp.float32)
    return reference


def solution(spec: WorldSpec) -> str:
    dim, mode = spec.tokens[0], spec.tokens[1]
    axes = DIMS[dim]
    head, count, xi, loops = spatial_parts(axes, "C")
    coords = " ".join(f"int i{a.lower()} = o{a.lower()} * S - P + k{a.lower()};" for a in axes)
    ok = " && ".join(f"i{a.lower()} >= 0 && i{a.lower()} < {a}" for a in axes)
    init, upd, res = (("-INFINITY", f"acc = fmaxf(acc, x[{xi}]);", "acc") if mode == "max"
                      else ("0.0f", f"acc += x[{xi}];", "acc / " + " / ".join(["(float)K"] * len(axes))))
    body = (f"{head}\n        float acc = {init};\n        {loops}{{\n            {coords}\n"
            f"            if ({ok}) {upd}\n        }}\n        y[i] = {res};")
    sizes = ["B", "C", "K", "S", "P"] + list(axes) + ["O" + a for a in axes]
    params = ["const float* __restrict__ x", "float* __restrict__ y"] + [f"int {s}" for s in sizes]
    return per_output("pool_kernel", params, count, body, ["x", "y"] + sizes)


def build(spec: WorldSpec) -> Task:
    dim, mode = spec.tokens[0], spec.tokens[1]
    axes = DIMS[dim]
    sizes = geometry(spec)
    g = sizes["eval"]
    how = ("the maximum over the window (padding never wins)" if mode == "max"
           else f"the window sum divided by K^{len(axes)} (padding counts as zeros)")
    outs = ", ".join("O" + a for a in axes)
    desc = (f"{dim.upper()} {mode} pooling on a float32 row-major contiguous tensor x [B, C, {', '.join(axes)}]; "
            f"output y [B, C, {outs}]. Window K per axis, stride S, zero padding P on every spatial side (the size "
            f"sets give B, C, K, S, P and every extent); each output is {how}. Output extent per axis: "
            "O = floor((I + 2 * P - K) / S) + 1. Inputs are any finite values.")
    return Task(name=spec.name, level=1, description=desc, sizes=sizes,
                inputs=(Buffer("x", "float32", ("B", "C") + axes),),
                outputs=(Buffer("y", "float32", ("B", "C") + tuple("O" + a for a in axes)),),
                reference=reference_fn(mode, len(axes), g["K"], g["S"], g["P"]), solution=solution(spec),
                tolerance=tolerance(spec.dtype, 1 if mode == "max" else g["K"] ** len(axes)),
                tags=("world", FAMILY, dim, mode, "pooling", "float32"))
