"""What every world family shares: the task spec and its name, the seeded size draws, the tolerance
rule, and the one-thread-per-output kernel skeleton the canonical solutions are written in.

A world task name is `gen_w_<family>_<tokens>_<dtype>_s<seed>`, e.g. `gen_w_mm_bat_f16_s3` or
`gen_w_fu_cv2_bias_relu_f32_s0`; the tokens say which op (and which variant of it), the seed picks
the sizes. Names use only [a-z0-9_] and fully determine the task.
"""
from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass

from kernels_env.tasks import common

PREFIX = "gen_w_"
DTYPES = {"f32": "float32", "f16": "float16"}
SEEDS = 8  # sizes drawn per composition: seeds 0..SEEDS-1
CT = {"f32": "float", "f16": "__half"}


@dataclass(frozen=True)
class WorldSpec:
    family: str
    tokens: tuple[str, ...]  # op and variant tokens, in name order
    dtype: str  # "f32" | "f16"
    seed: int

    @property
    def name(self) -> str:
        return f"{PREFIX}{self.family}_{'_'.join(self.tokens)}_{self.dtype}_s{self.seed}"


def rng(spec: WorldSpec) -> random.Random:
    """The size draws of a task: a generator seeded by its name alone (stable across processes)."""
    return random.Random(int.from_bytes(hashlib.sha256(spec.name.encode()).digest()[:8], "big"))


def tolerance(dtype: str, terms: int, cancelling: bool = True) -> dict[str, tuple[float, float]]:
    """(atol, rtol) for an output each element of which sums `terms` rounded products or values.

    Float32 rounding of a sum grows like sqrt(terms) for the random orders kernels sum in, so both
    parts scale with it from the element-wise (1e-4, 1e-4); rtol is capped at 1e-2 (a wrong kernel is
    off by O(1) relative). A sum of terms of one sign (`cancelling=False`: a loss) never cancels, so
    its error is relative only and atol stays at 1e-6: a loss near zero must still be near zero.
    Float16 outputs add their own rounding, 1e-2 relative. The one place a world task's tolerance is
    decided.
    """
    s = math.sqrt(max(int(terms), 1))
    if dtype == "f16":
        return {"float16": (1e-2 + 1e-4 * s, 1e-2)}
    return {"float32": (1e-4 * s if cancelling else 1e-6, min(1e-4 * s, 1e-2))}


def ld(dtype: str, e: str) -> str:
    """A C expression reading `e` as float (half inputs widen)."""
    return f"__half2float({e})" if dtype == "f16" else e


def st(dtype: str, e: str) -> str:
    """A C expression converting float `e` to the output type."""
    return f"__float2half({e})" if dtype == "f16" else e


def per_output(kernel: str, params: list[str], count: str, body: str, args: list[str], dtype: str = "f32",
               helpers: str = "") -> str:
    """A solution whose kernel gives each of `count` outputs (index `i`) to one thread of a grid-stride
    loop; `body` (C statements) computes output i."""
    hdr = "#include <cuda_fp16.h>\n" if dtype == "f16" else ""
    cuda = (f'{hdr}{helpers}extern "C" __global__ void {kernel}({", ".join(params)}) {{\n'
            f"    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < {count}; i += blockDim.x * gridDim.x) {{\n"
            f"{body}\n    }}\n}}")
    launch = f"{kernel}<<<min(cdiv({count}, 256), 8192), 256>>>({', '.join(args)});"
    return common.solution(cuda, launch)


def per_group(kernel: str, params: list[str], groups: str, body: str, args: list[str], helpers: str) -> str:
    """A solution with one block of 256 threads per group (index `g = blockIdx.x`), for outputs that
    depend on a whole group of inputs (norm statistics, loss sums); `body` uses `sh` for block sums."""
    cuda = (f'{helpers}extern "C" __global__ void {kernel}({", ".join(params)}) {{\n'
            f"    __shared__ float sh[32];\n    int g = blockIdx.x;\n{body}\n}}")
    return common.solution(cuda, f"{kernel}<<<{groups}, 256>>>({', '.join(args)});")


def unravel(index: str, dims: list[str], names: list[str]) -> str:
    """C statements splitting flat `index` over row-major `dims` into ints `names`."""
    out, rest = [], index
    for k in range(len(dims) - 1, 0, -1):
        out.append(f"int {names[k]} = {rest} % {dims[k]};")
        rest = f"({rest} / {dims[k]})"
    out.append(f"int {names[0]} = {rest};")
    return "        " + " ".join(reversed(out))


def odd_size(r: random.Random, lo: int, hi: int) -> int:
    """A size in [lo, hi] that is not a multiple of 16 (tiles must handle a ragged edge)."""
    while True:
        v = r.randint(lo, hi)
        if v % 16:
            return v


def size(r: random.Random, choices: tuple[int, ...], lo: int, hi: int) -> int:
    """Half the draws a tile-friendly size from `choices`, half a ragged one in [lo, hi]."""
    return r.choice(choices) if r.random() < 0.5 else odd_size(r, lo, hi)
