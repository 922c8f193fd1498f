"""Matmul shapes: square, rectangular, batched, A or B stored transposed, matrix-vector; float32, or
float16 inputs and output with float32 accumulation. Tokens: one variant, e.g. gen_w_mm_ta_f16_s2."""
from __future__ import annotations

from typing import Any

from kernels_env.tasks.spec import Buffer, Task
from kernels_env.tasks.world.base import CT, DTYPES, WorldSpec, ld, per_output, rng, size, st, tolerance, unravel

FAMILY = "mm"
VARIANTS = ("sq", "rect", "bat", "ta", "tb", "mv")
_TEXT = {
    "sq": "square matrix product c = a @ b with a, b, c all [M, M] (K = N = M)",
    "rect": "matrix product c = a @ b with a [M, K], b [K, N], c [M, N]",
    "bat": "batched matrix product c[l] = a[l] @ b[l] for l < L, with a [L, M, K], b [L, K, N], c [L, M, N]",
    "ta": "matrix product with a stored transposed: c = a^T @ b with a [K, M], b [K, N], c [M, N]",
    "tb": "matrix product with b stored transposed: c = a @ b^T with a [M, K], b [N, K], c [M, N]",
    "mv": "matrix-vector product c = a @ b with a [M, K], b [K], c [M]",
}


def combos() -> list[tuple[tuple[str, ...], str]]:
    return [((v,), d) for v in VARIANTS for d in DTYPES]


def _shapes(v: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(a, b, c) buffer shapes of variant `v`."""
    return {"sq": (("M", "M"), ("M", "M"), ("M", "M")), "rect": (("M", "K"), ("K", "N"), ("M", "N")),
            "bat": (("L", "M", "K"), ("L", "K", "N"), ("L", "M", "N")), "ta": (("K", "M"), ("K", "N"), ("M", "N")),
            "tb": (("M", "K"), ("N", "K"), ("M", "N")), "mv": (("M", "K"), ("K",), ("M",))}[v]


def _sizes(spec: WorldSpec) -> dict[str, dict[str, int]]:
    r, v = rng(spec), spec.tokens[0]
    if v == "sq":
        return {"eval": {"M": size(r, (1024, 2048), 1000, 2100)}, "small": {"M": r.randint(17, 47)}}
    if v == "mv":
        return {"eval": {"M": size(r, (4096, 8192), 3000, 9000), "K": size(r, (2048, 4096), 1500, 5000)},
                "small": {"M": r.randint(20, 70), "K": r.randint(33, 99)}}
    ev = {"M": size(r, (512, 1024, 2048), 500, 2100), "K": size(r, (256, 1024), 200, 1100),
          "N": size(r, (512, 1024, 2048), 500, 2100)}
    sm = {"M": r.randint(9, 40), "K": r.randint(17, 45), "N": r.randint(11, 41)}
    if v == "bat":
        ev = {"L": r.choice((4, 8, 12, 16)), **{k: size(r, (128, 256), 100, 300) for k in "MKN"}}
        sm = {"L": r.randint(2, 4), **sm}
    return {"eval": ev, "small": sm}


def reference_fn(v: str, dt: str) -> Any:
    def reference(xp: Any, a: Any, b: Any) -> Any:
        a64, b64 = a.astype(xp.float64), b.astype(xp.float64)
        if v == "ta":
            a64 = a64.T
        if v == "tb":
            b64 = b64.T
        return xp.matmul(a64, b64).astype(getattr(xp, dt))
    return reference


# C index of a[.., m, k] and b[.., k, n] per variant (after `unravel` names l, m, n).
_A_IDX = {"sq": "m * M + k", "rect": "m * K + k", "bat": "(l * M + m) * K + k", "ta": "k * M + m",
          "tb": "m * K + k", "mv": "m * K + k"}
_B_IDX = {"sq": "k * M + n", "rect": "k * N + n", "bat": "(l * K + k) * N + n", "ta": "k * N + n",
          "tb": "n * K + k", "mv": "k"}


def solution(v: str, d: str) -> str:
    ct = CT[d]
    dims = {"sq": ["M", "M"], "bat": ["L", "M", "N"], "mv": ["M"]}.get(v, ["M", "N"])
    names = {"bat": ["l", "m", "n"], "mv": ["m"]}.get(v, ["m", "n"])
    kk = "M" if v == "sq" else "K"
    body = (unravel("i", dims, names) + "\n"
            f"        float acc = 0.0f;\n"
            f"        for (int k = 0; k < {kk}; k++) acc += {ld(d, f'a[{_A_IDX[v]}]')} * {ld(d, f'b[{_B_IDX[v]}]')};\n"
            f"        c[i] = {st(d, 'acc')};")
    sizes = sorted({x for x in dims + [kk]}, key="LMKN".index)
    params = [f"const {ct}* __restrict__ a", f"const {ct}* __restrict__ b", f"{ct}* __restrict__ c"]
    params += [f"int {s}" for s in sizes]
    return per_output("matmul_kernel", params, " * ".join(dims), body, ["a", "b", "c"] + sizes, d)


def build(spec: WorldSpec) -> Task:
    v, dt = spec.tokens[0], DTYPES[spec.dtype]
    sa, sb, sc = _shapes(v)
    sizes = _sizes(spec)
    k_eval = sizes["eval"].get("K", sizes["eval"]["M"])
    half = ("Inputs and output are float16; accumulate in float32, round the result to half."
            if spec.dtype == "f16" else "All tensors are float32.")
    desc = (f"Matmul: {_TEXT[v]}; every tensor row-major and contiguous. {half} "
            "Inputs are any finite values with |value| <= 8.")
    return Task(name=spec.name, level=1, description=desc, sizes=sizes,
                inputs=(Buffer("a", dt, sa), Buffer("b", dt, sb)), outputs=(Buffer("c", dt, sc),),
                reference=reference_fn(v, dt), solution=solution(v, spec.dtype),
                tolerance=tolerance(spec.dtype, k_eval), tags=("world", FAMILY, v, "matmul", dt))
