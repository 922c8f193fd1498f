"""NCHW normalisations of a float32 x [B, C, H, W] with eps = 1e-5 and biased variance: batch norm
(training-mode statistics over B, H, W per channel, affine w, b [C]), instance norm (per (b, c), no
affine), group norm (G groups of C / G channels per sample, affine w, b [C]) and layer norm (over
C, H, W per sample, no affine). Tokens: the norm, e.g. gen_w_nm_gn_f32_s2."""
from __future__ import annotations

from typing import Any

from kernels_env.tasks.generated.emit import BLOCK_SUM
from kernels_env.tasks.spec import Buffer, Scalar, Task
from kernels_env.tasks.world.base import WorldSpec, per_group, rng, size, tolerance

FAMILY = "nm"
KINDS = ("bn", "in", "gn", "ln")
EPS = 1e-5
AFFINE = ("bn", "gn")


def combos() -> list[tuple[tuple[str, ...], str]]:
    return [((k,), "f32") for k in KINDS]


def reference_fn(kind: str, groups: int) -> Any:
    def reference(xp: Any, x: Any, w: Any = None, b: Any = None, eps: float = EPS) -> Any:
        t = x.astype(xp.float64)
        bsz, c = t.shape[:2]
        g = t.reshape(bsz, groups, -1) if kind == "gn" else t
        axes = {"bn": (0, 2, 3), "in": (2, 3), "gn": (2,), "ln": (1, 2, 3)}[kind]
        mu = g.mean(axis=axes, keepdims=True)
        var = ((g - mu) ** 2).mean(axis=axes, keepdims=True)
        y = ((g - mu) / xp.sqrt(var + eps)).reshape(t.shape)
        if kind in AFFINE:
            y = y * w.astype(xp.float64).reshape(1, c, 1, 1) + b.astype(xp.float64).reshape(1, c, 1, 1)
        return y.astype(xp.float32)
    return reference


# Per norm: (number of groups, elements per group, flat address of element j of group g, channel of it).
_GROUPS = {"bn": ("C", "B * H * W", "(j / (H * W)) * C * H * W + g * H * W + j % (H * W)", "g"),
           "in": ("B * C", "H * W", "g * H * W + j", ""),
           "gn": ("B * G", "(C / G) * H * W", "g * n + j", "(g % G) * (C / G) + j / (H * W)"),
           "ln": ("B", "C * H * W", "g * n + j", "")}


def solution(kind: str) -> str:
    """One block per statistics group: a sum pass, a squared-deviation pass, a write pass."""
    groups, count, addr, ch = _GROUPS[kind]
    loop = "    for (int j = threadIdx.x; j < n; j += blockDim.x) "
    affine = f" * w[{ch}] + b[{ch}]" if kind in AFFINE else ""
    body = "\n".join([f"    int n = {count};", "    float s = 0.0f, q = 0.0f;", f"{loop}s += x[{addr}];",
                      "    float mu = block_sum(s, sh) / n;", f"{loop}{{ float d = x[{addr}] - mu; q += d * d; }}",
                      "    float r = rsqrtf(block_sum(q, sh) / n + eps);",
                      f"{loop}y[{addr}] = (x[{addr}] - mu) * r{affine};"])
    params = ["const float* __restrict__ x"]
    args = ["x"]
    if kind in AFFINE:
        params += ["const float* __restrict__ w", "const float* __restrict__ b"]
        args += ["w", "b"]
    sizes = ["B", "C", "H", "W"] + (["G"] if kind == "gn" else [])
    params += ["float* __restrict__ y"] + [f"int {s}" for s in sizes] + ["float eps"]
    return per_group("norm_kernel", params, groups, body, args + ["y"] + sizes + ["eps"], BLOCK_SUM)


_TEXT = {"bn": "batch norm with batch statistics: per channel c, mean and biased variance over (b, h, w); "
               "y = (x - mean) / sqrt(var + eps) * w[c] + b[c]",
         "in": "instance norm: per (b, c), mean and biased variance over (h, w); y = (x - mean) / sqrt(var + eps)",
         "gn": "group norm: channels split into G contiguous groups of C / G; per (b, group), mean and biased "
               "variance over the group's (c, h, w); y = (x - mean) / sqrt(var + eps) * w[c] + b[c]",
         "ln": "layer norm over (C, H, W): per b, mean and biased variance over (c, h, w); "
               "y = (x - mean) / sqrt(var + eps), no affine"}


def build(spec: WorldSpec) -> Task:
    kind = spec.tokens[0]
    r = rng(spec)
    g = r.choice((4, 8))
    c_eval = g * r.randint(4, 12) if kind == "gn" else size(r, (32, 64), 17, 96)
    c_small = g * r.randint(1, 2) if kind == "gn" else r.randint(3, 7)
    sizes = {"eval": {"B": r.choice((8, 16)), "C": c_eval, "H": size(r, (64, 128), 50, 150),
                      "W": size(r, (64, 128), 50, 150)},
             "small": {"B": r.randint(2, 4), "C": c_small, "H": r.randint(3, 9), "W": r.randint(5, 11)}}
    if kind == "gn":
        sizes["eval"]["G"] = sizes["small"]["G"] = g
    ev = sizes["eval"]
    per_group_count = {"bn": ev["B"] * ev["H"] * ev["W"], "in": ev["H"] * ev["W"],
                       "gn": ev["C"] // g * ev["H"] * ev["W"], "ln": ev["C"] * ev["H"] * ev["W"]}[kind]
    inputs = [Buffer("x", "float32", ("B", "C", "H", "W"))]
    if kind in AFFINE:
        inputs += [Buffer("w", "float32", ("C",)), Buffer("b", "float32", ("C",))]
    desc = (f"NCHW normalisation, {_TEXT[kind]}. x and y are float32 [B, C, H, W], row-major contiguous"
            + ("; w, b float32 [C]" if kind in AFFINE else "") + f"; scalar eps (float) = {EPS}"
            + ("; G (the group count) is a size" if kind == "gn" else "") + ". Inputs are any finite values.")
    return Task(name=spec.name, level=1, description=desc, sizes=sizes, inputs=tuple(inputs),
                outputs=(Buffer("y", "float32", ("B", "C", "H", "W")),), reference=reference_fn(kind, g),
                solution=solution(kind), scalars=(Scalar("eps", "float32", EPS),),
                tolerance=tolerance(spec.dtype, per_group_count), tags=("world", FAMILY, kind, "norm", "float32"))
