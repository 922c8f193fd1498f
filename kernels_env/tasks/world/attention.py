"""Scaled dot-product attention o = softmax(q k^T / sqrt(D)) v per batch-head, full or causal
(query s sees keys j <= s), float32 [B, S, D]. Tokens: e.g. gen_w_at_causal_f32_s3."""
from __future__ import annotations

import math
from typing import Any

from kernels_env.tasks.spec import Buffer, Task
from kernels_env.tasks.world.base import WorldSpec, per_output, rng, size, tolerance, unravel

FAMILY = "at"
MASKS = ("full", "causal")


def combos() -> list[tuple[tuple[str, ...], str]]:
    return [((m,), "f32") for m in MASKS]


def reference_fn(causal: bool) -> Any:
    def reference(xp: Any, q: Any, k: Any, v: Any) -> Any:
        s = xp.matmul(q.astype(xp.float64), xp.swapaxes(k.astype(xp.float64), 1, 2)) / math.sqrt(q.shape[2])
        if causal:
            n = s.shape[1]
            s = xp.where(xp.tril(xp.ones((n, n), dtype=bool))[None], s, -xp.inf)
        p = xp.exp(s - s.max(axis=2, keepdims=True))
        return xp.matmul(p / p.sum(axis=2, keepdims=True), v.astype(xp.float64)).astype(xp.float32)
    return reference


def solution(causal: bool) -> str:
    """One thread per query row: a max pass, then exp-weighted sums of v rows, then the division."""
    last = "s + 1" if causal else "S"
    dot = "float z = 0.0f; for (int d = 0; d < D; d++) z += q[i * D + d] * k[(b * S + j) * D + d]; z *= scale;"
    body = (unravel("i", ["B", "S"], ["b", "s"]) + "\n"
            "        float scale = 1.0f / sqrtf((float)D), mx = -INFINITY, den = 0.0f;\n"
            f"        for (int j = 0; j < {last}; j++) {{ {dot} mx = fmaxf(mx, z); }}\n"
            "        for (int d = 0; d < D; d++) o[i * D + d] = 0.0f;\n"
            f"        for (int j = 0; j < {last}; j++) {{\n            {dot}\n"
            "            float e = expf(z - mx); den += e;\n"
            "            for (int d = 0; d < D; d++) o[i * D + d] += e * v[(b * S + j) * D + d];\n        }\n"
            "        for (int d = 0; d < D; d++) o[i * D + d] /= den;")
    params = [f"const float* __restrict__ {n}" for n in "qkv"] + ["float* __restrict__ o", "int B", "int S", "int D"]
    return per_output("attention_kernel", params, "B * S", body, ["q", "k", "v", "o", "B", "S", "D"])


def build(spec: WorldSpec) -> Task:
    causal = spec.tokens[0] == "causal"
    r = rng(spec)
    sizes = {"eval": {"B": r.choice((16, 32, 48)), "S": size(r, (256, 512, 1024), 200, 1100),
                      "D": r.choice((32, 64, 80, 128))},
             "small": {"B": r.randint(2, 3), "S": r.randint(9, 40), "D": r.choice((8, 12, 16, 24))}}
    ev = sizes["eval"]
    mask = " Causal: query s attends to keys j <= s only." if causal else ""
    desc = ("Scaled dot-product attention: for each b < B, o[b] = softmax(q[b] k[b]^T / sqrt(D)) v[b] with the "
            f"softmax over keys; q, k, v, o float32 [B, S, D], row-major contiguous.{mask} Inputs are any finite "
            "values with |value| <= 8 (scores reach hundreds: subtract the row max before exp).")
    return Task(name=spec.name, level=1, description=desc, sizes=sizes,
                inputs=tuple(Buffer(n, "float32", ("B", "S", "D")) for n in "qkv"),
                outputs=(Buffer("o", "float32", ("B", "S", "D")),), reference=reference_fn(causal),
                solution=solution(causal), tolerance=tolerance(spec.dtype, ev["S"] * ev["D"]),
                tags=("world", FAMILY, spec.tokens[0], "attention", "float32"))
