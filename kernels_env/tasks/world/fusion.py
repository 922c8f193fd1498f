"""KernelBench level-2 style fusions: a main op (a float32 matmul x [M, K] @ w [K, N], or a stride-1
unpadded 2-D convolution of x [B, C, H, W] with w [F, C, K, K]) followed by one to three epilogues:
element-wise (per-column/channel bias, residual add, relu, sigmoid, tanh, gelu, scale) and at most one
reduction, last (sum, max or mean over the matmul's columns or the convolution's channels; max and
mean never follow sigmoid or tanh, see `_saturated`).
Tokens: main op then epilogues, e.g. gen_w_fu_mm_bias_relu_f32_s0, gen_w_fu_cv2_scale_sigmoid_rsum_f32_s1."""
from __future__ import annotations

import itertools
from typing import Any

from kernels_env.tasks.generated.ops import DEFINITIONS, UNARY
from kernels_env.tasks.spec import Buffer, Task
from kernels_env.tasks.world import conv
from kernels_env.tasks.world.base import WorldSpec, per_output, rng, size, tolerance, unravel

FAMILY = "fu"
MAINS = ("mm", "cv2")
ELEMENTWISE = ("bias", "res", "relu", "sigmoid", "tanh", "gelu", "scale")
REDUCTIONS = ("rsum", "rmax", "rmean")
MAX_EPILOGUES = 3


def combos() -> list[tuple[tuple[str, ...], str]]:
    out = []
    for n in range(1, MAX_EPILOGUES + 1):
        for ew in itertools.permutations(ELEMENTWISE, n):
            out += [((m,) + ew, "f32") for m in MAINS]
        for ew in itertools.permutations(ELEMENTWISE, n - 1):
            out += [((m,) + ew + (red,), "f32") for m in MAINS for red in REDUCTIONS if not _saturated(ew, red)]
    return out


def _saturated(ew: tuple[str, ...], red: str) -> bool:
    """Whether the chain is left out: a contraction's outputs are large (tens), so sigmoid / tanh
    saturate them to their bounds, and the max or mean of a row of saturated values is close to a
    constant whatever the inputs (the judge's cheats pass). Sums still count the signs."""
    return red in ("rmax", "rmean") and bool({"sigmoid", "tanh"} & set(ew))


def _split(tokens: tuple[str, ...]) -> tuple[str, tuple[str, ...], str | None]:
    """(main op, element-wise epilogues, reduction or None)."""
    red = tokens[-1] if tokens[-1] in REDUCTIONS else None
    return tokens[0], tokens[1:len(tokens) - (red is not None)], red


def _main_ref(main: str, k: int) -> Any:
    if main == "mm":
        return lambda xp, x, w: xp.matmul(x.astype(xp.float64), w.astype(xp.float64))
    conv_ref = conv.reference_fn("std", 2, 1, 1, 0, k)
    return lambda xp, x, w: conv_ref(xp, x, w).astype(xp.float64)  # float32 rounding: below the tolerance


def reference_fn(tokens: tuple[str, ...], k: int) -> Any:
    main, ew, red = _split(tokens)
    main_ref = _main_ref(main, k)

    def reference(xp: Any, x: Any, w: Any, v: Any = None, r: Any = None) -> Any:
        t = main_ref(xp, x, w)
        for e in ew:
            if e == "bias":
                t = t + (v.astype(xp.float64)[None, :] if main == "mm" else v.astype(xp.float64)[None, :, None, None])
            elif e == "res":
                t = t + r.astype(xp.float64)
            else:
                t = UNARY[e].ref(xp, t)
        axis = 1
        if red == "rsum":
            t = t.sum(axis=axis)
        elif red == "rmax":
            t = t.max(axis=axis)
        elif red == "rmean":
            t = t.mean(axis=axis)
        return t.astype(xp.float32)
    return reference


_MAIN_C = {
    "mm": "__device__ float main_op(const float* x, const float* w, int m, int n, int K, int N) {\n"
          "    float acc = 0.0f;\n    for (int k = 0; k < K; k++) acc += x[m * K + k] * w[k * N + n];\n"
          "    return acc;\n}\n",
    "cv2": "__device__ float main_op(const float* x, const float* w, int b, int f, int oh, int ow, int C, int H,\n"
           "                         int W, int K) {\n    float acc = 0.0f;\n"
           "    for (int c = 0; c < C; c++) for (int kh = 0; kh < K; kh++) for (int kw = 0; kw < K; kw++)\n"
           "        acc += x[((b * C + c) * H + oh + kh) * W + ow + kw] * w[((f * C + c) * K + kh) * K + kw];\n"
           "    return acc;\n}\n",
}


def solution(tokens: tuple[str, ...]) -> str:
    """One thread per output; a reduction's thread loops over the reduced axis (columns or channels)."""
    main, ew, red = _split(tokens)
    if main == "mm":
        full, coords, ch, call = ["M", "N"], ["m", "n"], "n", "main_op(x, w, m, n, K, N)"
        flat, sizes = "m * N + n", ["M", "K", "N"]
    else:
        full, coords, ch = ["B", "F", "OH", "OW"], ["b", "f", "oh", "ow"], "f"
        call, flat, sizes = "main_op(x, w, b, f, oh, ow, C, H, W, K)", "((b * F + f) * OH + oh) * OW + ow", \
            ["B", "C", "F", "H", "W", "K", "OH", "OW"]
    steps = []
    for e in ew:
        steps.append({"bias": f"t = t + v[{ch}];", "res": f"t = t + r[{flat}];"}.get(e) or f"t = {UNARY[e].c_expr};")
    value = f"float t = {call}; {' '.join(steps)}".rstrip()
    if red is None:
        body = unravel("i", full, coords) + f"\n        {value}\n        y[i] = t;"
        count = " * ".join(full)
    else:
        axis = full[1]
        kept = [d for d in full if d != axis]
        kcoords = [c for c, d in zip(coords, full, strict=True) if d != axis]
        acc0, upd = ("-INFINITY", "acc = fmaxf(acc, t);") if red == "rmax" else ("0.0f", "acc += t;")
        res = f"acc / {axis}" if red == "rmean" else "acc"
        body = (unravel("i", kept, kcoords) + f"\n        float acc = {acc0};\n"
                f"        for (int {coords[1]} = 0; {coords[1]} < {axis}; {coords[1]}++) {{ {value} {upd} }}\n"
                f"        y[i] = {res};")
        count = " * ".join(kept)
    params = ["const float* __restrict__ x", "const float* __restrict__ w"]
    args = ["x", "w"]
    if "bias" in ew:
        params.append("const float* __restrict__ v")
        args.append("v")
    if "res" in ew:
        params.append("const float* __restrict__ r")
        args.append("r")
    params += ["float* __restrict__ y"] + [f"int {s}" for s in sizes]
    return per_output("fused_kernel", params, count, body, args + ["y"] + sizes, helpers=_MAIN_C[main])


def _sizes(spec: WorldSpec) -> dict[str, dict[str, int]]:
    r = rng(spec)
    if spec.tokens[0] == "mm":
        return {"eval": {"M": size(r, (1024, 2048), 700, 2100), "K": size(r, (512, 1024), 300, 1100),
                         "N": size(r, (512, 1024), 300, 1100)},
                "small": {"M": r.randint(5, 30), "K": r.randint(9, 40), "N": r.randint(7, 33)}}
    k = r.choice((3, 5))
    out = {}
    for key, (b, ch, hw) in (("eval", (8, (8, 32), (40, 130))), ("small", (2, (2, 5), (7, 14)))):
        h, w = r.randint(*hw), r.randint(*hw)
        out[key] = {"B": b, "C": r.randint(*ch), "F": r.randint(*ch), "H": h, "W": w, "K": k,
                    "OH": h - k + 1, "OW": w - k + 1}
    return out


_EPI_TEXT = {"bias": "add v[{ch}]", "res": "add r (same shape as the main output)", "relu": "relu",
             "sigmoid": "sigmoid", "tanh": "tanh", "gelu": "gelu_tanh", "scale": "multiply by 1.5",
             "rsum": "sum over {axis}", "rmax": "max over {axis}", "rmean": "mean over {axis}"}


def build(spec: WorldSpec) -> Task:
    main, ew, red = _split(spec.tokens)
    sizes = _sizes(spec)
    ev = sizes["eval"]
    shape: tuple[str, ...]
    xs: tuple[str, ...]
    ws: tuple[str, ...]
    if main == "mm":
        shape, ch, axis, xs, ws = ("M", "N"), "n", "n (the columns)", ("M", "K"), ("K", "N")
        head = "matmul t = x @ w with x [M, K], w [K, N], t [M, N]"
        terms = ev["K"]
    else:
        shape, ch, axis, xs, ws = ("B", "F", "OH", "OW"), "f", "f (the channels)", ("B", "C", "H", "W"), \
            ("F", "C", "K", "K")
        head = ("2-D convolution (stride 1, no padding, no bias) t = conv(x, w) with x [B, C, H, W], "
                "w [F, C, K, K], t [B, F, OH, OW], OH = H - K + 1, OW = W - K + 1")
        terms = ev["C"] * ev["K"] ** 2
    steps = [_EPI_TEXT[e].format(ch=ch, axis=axis) for e in ew + ((red,) if red else ())]
    out_shape = shape if red is None else tuple(d for d in shape if d != shape[1])
    defs = [DEFINITIONS[e] for e in ew if e in DEFINITIONS]
    desc = (f"Fused kernel: {head}; then, in order: {'; '.join(steps)}. Output y float32 [{', '.join(out_shape)}]. "
            "All tensors float32, row-major contiguous; inputs are any finite values with |value| <= 8."
            + (" Where " + "; ".join(defs) + "." if defs else ""))
    inputs = [Buffer("x", "float32", xs), Buffer("w", "float32", ws)]
    if "bias" in ew:
        inputs.append(Buffer("v", "float32", (shape[1],)))
    if "res" in ew:
        inputs.append(Buffer("r", "float32", shape))
    if red is not None:
        terms *= ev[shape[1]]
    return Task(name=spec.name, level=2, description=desc, sizes=sizes, inputs=tuple(inputs),
                outputs=(Buffer("y", "float32", out_shape),), reference=reference_fn(spec.tokens, ev.get("K", 0)),
                solution=solution(spec.tokens), tolerance=tolerance(spec.dtype, terms),
                tags=("world", FAMILY, main, "matmul" if main == "mm" else "conv", "float32"))
