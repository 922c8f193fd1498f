"""Convolutions on NC[D]HW float32 tensors, bias-free (KernelBench's defaults): 1-D/2-D/3-D,
standard, depthwise or transposed (1-D/2-D), optionally strided and/or dilated, with a drawn zero
padding. Tokens: dimension, mode, features, e.g. gen_w_cv_2d_dw_str_dil_f32_s1."""
from __future__ import annotations

import itertools
import random
from typing import Any

from kernels_env.tasks.spec import Buffer, Task
from kernels_env.tasks.world.base import WorldSpec, per_output, rng, tolerance, unravel

FAMILY = "cv"
DIMS = {"1d": ("L",), "2d": ("H", "W"), "3d": ("D", "H", "W")}
MODES = ("std", "dw", "tr")
FEATURES = ((), ("str",), ("dil",), ("str", "dil"))


def combos() -> list[tuple[tuple[str, ...], str]]:
    return [((d, m) + f, "f32") for d in DIMS for m in MODES for f in FEATURES if not (m == "tr" and d == "3d")]


def out_len(n: int, k: int, s: int, di: int, p: int, transposed: bool) -> int:
    """Output length along one axis (PyTorch's formula for each mode)."""
    if transposed:
        return (n - 1) * s - 2 * p + di * (k - 1) + 1
    return (n + 2 * p - di * (k - 1) - 1) // s + 1


def extent(r: random.Random, bounds: tuple[int, int], k: int, s: int, di: int, p: int) -> int:
    """An input extent drawn in `bounds`, raised where needed so a forward window fits 3 times."""
    need = di * (k - 1) + 1 - 2 * p + 2 * s
    return r.randint(max(bounds[0], need), max(bounds[1], need + 4))


def geometry(spec: WorldSpec) -> dict[str, dict[str, int]]:
    """Size sets: B, C (in channels), F (out channels), K, S (stride), DI (dilation), P (padding), the
    input extents (L | H, W | D, H, W) and the output extents (O + extent name)."""
    r = rng(spec)
    dim, mode, feats = spec.tokens[0], spec.tokens[1], spec.tokens[2:]
    axes = DIMS[dim]
    k = 3 if dim == "3d" else r.choice((3, 5))
    s = r.choice((2, 3)) if "str" in feats else 1
    di = r.choice((2, 3)) if "dil" in feats else 1
    p = r.randint(0, di * (k - 1) // 2)
    ext_eval = {"1d": (2000, 8200), "2d": (60, 260), "3d": (14, 40)}[dim]
    ext_small = {"1d": (25, 60), "2d": (9, 19), "3d": (6, 10)}[dim]
    ch_eval = {"1d": (32, 64), "2d": (16, 48), "3d": (4, 16)}[dim]
    out = {}
    for key, ext, ch, batch in (("eval", ext_eval, ch_eval, 8 if dim != "3d" else 2), ("small", ext_small, (2, 5), 2)):
        c = r.randint(*ch)
        f = c if mode == "dw" else r.randint(*ch)
        sz = {"B": batch, "C": c, "F": f, "K": k, "S": s, "DI": di, "P": p}
        for a in axes:
            n = extent(r, ext, k, s, di, p)
            sz[a], sz["O" + a] = n, out_len(n, k, s, di, p, mode == "tr")
        out[key] = sz
    return out


def reference_fn(mode: str, nd: int, s: int, di: int, p: int, k: int) -> Any:
    def reference(xp: Any, x: Any, w: Any, **_: Any) -> Any:
        x64, w64 = x.astype(xp.float64), w.astype(xp.float64)
        sp = x.shape[2:]
        if mode == "tr":
            full = xp.zeros(x.shape[:1] + (w.shape[1],) + tuple((n - 1) * s + di * (k - 1) + 1 for n in sp))
            for kk in itertools.product(range(k), repeat=nd):
                sl = tuple(slice(q * di, q * di + s * (n - 1) + 1, s) for q, n in zip(kk, sp, strict=True))
                full[(slice(None), slice(None)) + sl] += xp.einsum("bc...,cf->bf...", x64, w64[(Ellipsis,) + kk])
            o = tuple(slice(p, p + out_len(n, k, s, di, p, True)) for n in sp)
            return full[(slice(None), slice(None)) + o].astype(xp.float32)
        xp_ = xp.pad(x64, ((0, 0), (0, 0)) + ((p, p),) * nd)
        outs = tuple(out_len(n, k, s, di, p, False) for n in sp)
        y = None
        for kk in itertools.product(range(k), repeat=nd):
            sl = tuple(slice(q * di, q * di + s * (o - 1) + 1, s) for q, o in zip(kk, outs, strict=True))
            win = xp_[(slice(None), slice(None)) + sl]
            wk = w64[(Ellipsis,) + kk]
            term = win * wk[:, 0].reshape((1, -1) + (1,) * nd) if mode == "dw" else xp.einsum("bc...,fc->bf...", win, wk)
            y = term if y is None else y + term
        assert y is not None  # k >= 1: at least one kernel offset
        return y.astype(xp.float32)
    return reference


def _input_index(axes: tuple[str, ...], mode: str) -> tuple[str, str]:
    """(C statements computing input coordinates i<axis> from o<axis> and k<axis>, bounds test)."""
    lines, ok = [], []
    for a in axes:
        a_ = a.lower()
        if mode == "tr":
            lines.append(f"int t{a_} = o{a_} + P - k{a_} * DI; int i{a_} = t{a_} / S;")
            ok.append(f"t{a_} >= 0 && t{a_} % S == 0 && i{a_} < {a}")
        else:
            lines.append(f"int i{a_} = o{a_} * S - P + k{a_} * DI;")
            ok.append(f"i{a_} >= 0 && i{a_} < {a}")
    return " ".join(lines), " && ".join(ok)


def spatial_parts(axes: tuple[str, ...], channel: str) -> tuple[str, str, str, str]:
    """For a kernel with one thread per output y[b, channel, o<axis>...]: (statements unravelling `i`,
    the output count, the flat index of x[b, c, i<axis>...], the nested loops over k<axis> < K)."""
    low = [a.lower() for a in axes]
    out_dims = ["B", channel] + ["O" + a for a in axes]
    head = unravel("i", out_dims, ["b", channel.lower()] + ["o" + a for a in low])
    xi = "b * C + c"
    for a, a_ in zip(axes, low, strict=True):
        xi = f"({xi}) * {a} + i{a_}"
    loops = "".join(f"for (int k{a_} = 0; k{a_} < K; k{a_}++) " for a_ in low)
    return head, " * ".join(out_dims), xi, loops


def solution(spec: WorldSpec) -> str:
    dim, mode = spec.tokens[0], spec.tokens[1]
    axes = DIMS[dim]
    head, count, xi, loops = spatial_parts(axes, "F")
    coords, ok = _input_index(axes, mode)
    wi = {"std": "f * C + c", "dw": "f", "tr": "c * F + f"}[mode]
    for a in axes:
        wi = f"({wi}) * K + k{a.lower()}"
    cloop = "{ int c = f;" if mode == "dw" else "for (int c = 0; c < C; c++) {"
    body = (f"{head}\n        float acc = 0.0f;\n"
            f"        {cloop} {loops}{{\n"
            f"            {coords}\n"
            f"            if ({ok}) acc += x[{xi}] * w[{wi}];\n"
            f"        }} }}\n        y[i] = acc;")
    sizes = ["B", "C", "F", "K", "S", "DI", "P"] + list(axes) + ["O" + a for a in axes]
    params = ["const float* __restrict__ x", "const float* __restrict__ w", "float* __restrict__ y"]
    return per_output("conv_kernel", params + [f"int {s}" for s in sizes], count, body,
                      ["x", "w", "y"] + sizes)


_MODE_TEXT = {"std": "standard (all input channels feed every output channel), weight w [F, C, {k}]",
              "dw": "depthwise (groups = C = F: output channel f reads input channel f only), weight w [C, 1, {k}]",
              "tr": "transposed (the gradient of a standard convolution: y[b, f, o] sums x[b, c, i] * "
                    "w[c, f, k] over all c, k, i with i * S - P + k * DI = o), weight w [C, F, {k}]"}


def build(spec: WorldSpec) -> Task:
    dim, mode = spec.tokens[0], spec.tokens[1]
    axes = DIMS[dim]
    sizes = geometry(spec)
    g = sizes["eval"]
    kdims = ", ".join(["K"] * len(axes))
    outs = ", ".join("O" + a for a in axes)
    rule = ("O = (I - 1) * S - 2 * P + DI * (K - 1) + 1" if mode == "tr"
            else "O = floor((I + 2 * P - DI * (K - 1) - 1) / S) + 1")
    desc = (f"{dim.upper()} convolution, {_MODE_TEXT[mode].format(k=kdims)}, no bias, float32, row-major "
            f"contiguous. Input x [B, C, {', '.join(axes)}]; output y [B, F, {outs}]. Stride S, dilation DI, "
            f"zero padding P on every spatial side (PyTorch semantics; the size sets give B, C, F, K, S, DI, P "
            f"and every extent). Output extent per axis: {rule}. Inputs are any finite values with "
            "|value| <= 8.")
    w_lead: tuple[str | int, ...] = {"std": ("F", "C"), "dw": ("C", 1), "tr": ("C", "F")}[mode]  # type: ignore[assignment]
    w_shape = w_lead + ("K",) * len(axes)
    terms = (1 if mode == "dw" else g["C"]) * g["K"] ** len(axes)
    return Task(name=spec.name, level=1, description=desc, sizes=sizes,
                inputs=(Buffer("x", "float32", ("B", "C") + axes), Buffer("w", "float32", w_shape)),
                outputs=(Buffer("y", "float32", ("B", "F") + tuple("O" + a for a in axes)),),
                reference=reference_fn(mode, len(axes), g["S"], g["DI"], g["P"], g["K"]),
                solution=solution(spec), tolerance=tolerance(spec.dtype, terms),
                tags=("world", FAMILY, dim, mode, "conv", "float32"))
