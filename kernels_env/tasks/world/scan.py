"""Scans along the rows of a float32 [M, N] matrix: cumulative sum or product, optionally reversed
(suffix scans) and/or exclusive (element j left out of its own result). Tokens: e.g.
gen_w_sc_prod_rev_exc_f32_s5."""
from __future__ import annotations

from typing import Any

from kernels_env.tasks.spec import Buffer, Task
from kernels_env.tasks.world.base import WorldSpec, per_output, rng, size, tolerance

FAMILY = "sc"
OPS = ("sum", "prod")
FEATURES = ((), ("rev",), ("exc",), ("rev", "exc"))


def combos() -> list[tuple[tuple[str, ...], str]]:
    return [((o,) + f, "f32") for o in OPS for f in FEATURES]


def reference_fn(op: str, rev: bool, exc: bool) -> Any:
    def reference(xp: Any, x: Any) -> Any:
        t = x.astype(xp.float64)
        if rev:
            t = xp.flip(t, axis=1)
        y = xp.cumsum(t, axis=1) if op == "sum" else xp.cumprod(t, axis=1)
        if exc:
            first = xp.zeros_like(y[:, :1]) if op == "sum" else xp.ones_like(y[:, :1])
            y = xp.concatenate([first, y[:, :-1]], axis=1)
        if rev:
            y = xp.flip(y, axis=1)
        return y.astype(xp.float32)
    return reference


def solution(op: str, rev: bool, exc: bool) -> str:
    """One thread per row walks it in scan order (j runs N-1..0 when reversed)."""
    j = "N - 1 - s" if rev else "s"
    upd = "acc += v;" if op == "sum" else "acc *= v;"
    step = (f"float v = x[i * N + j]; y[i * N + j] = acc; {upd}" if exc
            else f"float v = x[i * N + j]; {upd} y[i * N + j] = acc;")
    body = (f"        float acc = {'0.0f' if op == 'sum' else '1.0f'};\n"
            f"        for (int s = 0; s < N; s++) {{ int j = {j}; {step} }}")
    params = ["const float* __restrict__ x", "float* __restrict__ y", "int M", "int N"]
    return per_output("scan_kernel", params, "M", body, ["x", "y", "M", "N"])


def build(spec: WorldSpec) -> Task:
    op, feats = spec.tokens[0], spec.tokens[1:]
    rev, exc = "rev" in feats, "exc" in feats
    r = rng(spec)
    n_eval = size(r, (512, 1024), 300, 1100) if op == "prod" else size(r, (2048, 4096, 8192), 1000, 8200)
    sizes = {"eval": {"M": size(r, (4096, 8192), 2000, 9000), "N": n_eval},
             "small": {"M": r.randint(3, 9), "N": r.randint(40, 300)}}
    word = {"sum": "sum", "prod": "product"}[op]
    sym = {"sum": "sum", "prod": "prod"}[op]
    rng_text = ("k > j" if exc else "k >= j") if rev else ("k < j" if exc else "k <= j")
    empty = " (an empty " + word + " is " + ("0" if op == "sum" else "1") + ")" if exc else ""
    desc = (f"{'Reverse ' if rev else ''}{'exclusive' if exc else 'inclusive'} cumulative {word} along each row of "
            f"a float32 row-major contiguous matrix x [M, N]: y[m, j] = {sym}_{{{rng_text}}} x[m, k]{empty}; "
            "y is float32 [M, N]. "
            + ("Inputs lie in [0.9, 1.1] so products stay in range." if op == "prod" else
               "Inputs are any finite values."))
    x = (Buffer("x", "float32", ("M", "N"), distributions=("uniform",), low=0.9, high=1.1) if op == "prod"
         else Buffer("x", "float32", ("M", "N")))
    return Task(name=spec.name, level=1, description=desc, sizes=sizes, inputs=(x,),
                outputs=(Buffer("y", "float32", ("M", "N")),), reference=reference_fn(op, rev, exc),
                solution=solution(op, rev, exc), tolerance=tolerance(spec.dtype, n_eval),
                tags=("world", FAMILY, op, "scan", "float32"))
