"""Losses reduced to one float32 value: mean squared error, Huber (beta 1), hinge on {0, 1} labels,
cross-entropy on logits with int64 class targets, KL(softmax(p) || softmax(q)) averaged over rows.
Tokens: the loss, e.g. gen_w_ls_huber_f32_s0."""
from __future__ import annotations

from typing import Any

from kernels_env.tasks.domains import Domain
from kernels_env.tasks.generated.emit import BLOCK_MAX, BLOCK_SUM
from kernels_env.tasks.spec import Buffer, Task
from kernels_env.tasks.world.base import WorldSpec, per_group, rng, size, tolerance

FAMILY = "ls"
KINDS = ("mse", "huber", "hinge", "ce", "kl")


def combos() -> list[tuple[tuple[str, ...], str]]:
    return [((k,), "f32") for k in KINDS]


def _lse(xp: Any, t: Any) -> Any:
    m = t.max(axis=1, keepdims=True)
    return m + xp.log(xp.exp(t - m).sum(axis=1, keepdims=True))


def reference_fn(kind: str) -> Any:
    def reference(xp: Any, a: Any, b: Any) -> Any:
        p = a.astype(xp.float64)
        if kind == "mse":
            v = ((p - b) ** 2).mean()
        elif kind == "huber":
            d = xp.abs(p - b)
            v = xp.where(d < 1.0, 0.5 * d * d, d - 0.5).mean()
        elif kind == "hinge":
            v = xp.maximum(1.0 - (2.0 * b - 1.0) * p, 0.0).mean()
        elif kind == "ce":
            v = (_lse(xp, p)[:, 0] - xp.take_along_axis(p, b.reshape(-1, 1).astype(xp.int64), axis=1)[:, 0]).mean()
        else:
            lp, lq = p - _lse(xp, p), b.astype(xp.float64) - _lse(xp, b.astype(xp.float64))
            v = (xp.exp(lp) * (lp - lq)).sum(axis=1).mean()
        return xp.asarray(v).reshape(1).astype(xp.float32)
    return reference


# Per-thread work: C statements adding to `acc` for row m (row losses) or element e (element losses).
_ELEM = {"mse": "float d = a[e] - b[e]; acc += d * d;",
         "huber": "float d = fabsf(a[e] - b[e]); acc += d < 1.0f ? 0.5f * d * d : d - 0.5f;",
         "hinge": "acc += fmaxf(1.0f - (2.0f * b[e] - 1.0f) * a[e], 0.0f);"}
_ROW = {"ce": """float mx = -INFINITY, s = 0.0f;
            for (int n = 0; n < N; n++) mx = fmaxf(mx, a[m * N + n]);
            for (int n = 0; n < N; n++) s += expf(a[m * N + n] - mx);
            acc += mx + logf(s) - a[m * N + b[m]];""",
        "kl": """float mp = -INFINITY, mq = -INFINITY, sp = 0.0f, sq = 0.0f;
            for (int n = 0; n < N; n++) { mp = fmaxf(mp, a[m * N + n]); mq = fmaxf(mq, b[m * N + n]); }
            for (int n = 0; n < N; n++) { sp += expf(a[m * N + n] - mp); sq += expf(b[m * N + n] - mq); }
            float lp = mp + logf(sp), lq = mq + logf(sq);
            for (int n = 0; n < N; n++) { float u = a[m * N + n] - lp; acc += expf(u) * (u - (b[m * N + n] - lq)); }"""}


def solution(kind: str) -> str:
    """One block: its threads stride over elements (or rows), then one block sum and the mean."""
    if kind in _ELEM:
        loop, div = f"    for (int e = threadIdx.x; e < M * N; e += blockDim.x) {{ {_ELEM[kind]} }}", "(float)M * N"
    else:
        loop, div = f"    for (int m = threadIdx.x; m < M; m += blockDim.x) {{\n            {_ROW[kind]}\n    }}", "M"
    btype = {"hinge": "int", "ce": "long long"}.get(kind, "float")
    body = f"    float acc = 0.0f;\n{loop}\n    acc = block_sum(acc, sh);\n    if (threadIdx.x == 0) loss[0] = acc / ({div});"
    params = ["const float* __restrict__ a", f"const {btype}* __restrict__ b", "float* __restrict__ loss", "int M",
              "int N"]
    return per_group("loss_kernel", params, "1", body, ["a", "b", "loss", "M", "N"], BLOCK_SUM + BLOCK_MAX)


_TEXT = {"mse": "mean squared error: loss[0] = mean over m, n of (a[m, n] - b[m, n])^2",
         "huber": "Huber (smooth L1, beta = 1) loss: with d = |a[m, n] - b[m, n]|, term = 0.5 d^2 if d < 1 else "
                  "d - 0.5; loss[0] = mean of the terms over m, n",
         "hinge": "hinge loss: b holds int32 labels in {0, 1}, y = 2 b - 1; loss[0] = mean over m, n of "
                  "max(0, 1 - y[m, n] * a[m, n])",
         "ce": "cross-entropy: a [M, N] are logits, b [M] int64 class indices in [0, N); loss[0] = (1/M) sum_m "
               "(logsumexp_n a[m, n] - a[m, b[m]])",
         "kl": "KL divergence between row distributions: P = softmax(a[m, :]), Q = softmax(b[m, :]); loss[0] = "
               "(1/M) sum_m sum_n P[m, n] (log P[m, n] - log Q[m, n]) (batchmean); compute the logs stably"}


def build(spec: WorldSpec) -> Task:
    kind = spec.tokens[0]
    r = rng(spec)
    sizes = {"eval": {"M": size(r, (1024, 4096), 1000, 5000), "N": size(r, (1024, 4096), 1000, 5000)},
             "small": {"M": r.randint(5, 40), "N": r.randint(7, 60)}}
    if kind == "hinge":
        b = Buffer("b", "int32", ("M", "N"), distributions=("randint",), low=0, high=2,
                   domain=Domain("labels", low=0, high=2))
    elif kind == "ce":
        b = Buffer("b", "int64", ("M",), distributions=("indices",), high="N")
    else:
        b = Buffer("b", "float32", ("M", "N"))
    desc = (f"Loss, {_TEXT[kind]}. a is float32 [M, N], row-major contiguous; loss is a float32 buffer of 1 "
            "element. Float inputs are any finite values.")
    return Task(name=spec.name, level=1, description=desc, sizes=sizes,
                inputs=(Buffer("a", "float32", ("M", "N")), b), outputs=(Buffer("loss", "float32", (1,)),),
                reference=reference_fn(kind), solution=solution(kind),
                tolerance=tolerance(spec.dtype, sizes["eval"]["N"], cancelling=False), tags=("world", FAMILY, kind, "loss", "float32"))
