"""Warm a fresh device up before it takes jobs.

The first use of CuPy in a process compiles (or loads from its disk cache) the elementwise,
random and reduction kernels that input generation and comparison use. On a cold machine that
takes seconds, which must not count against the first real job's correctness time limit (seen on
the H200: a known-good kernel timed out as the first job of a new worker). Scoring one tiny
built-in task that touches every dtype and distribution does all of that once, up front.
"""
from __future__ import annotations

from typing import Any

from kernels_env.core.config import EnvConfig
from kernels_env.tasks.spec import Buffer, Task

_SOURCE = r"""
#include <cuda_fp16.h>
extern "C" __global__ void warm(const float* a, const __half* b, const int* c, const long long* d,
                                float* oa, __half* ob, int* oc, long long* od, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { oa[i] = a[i]; ob[i] = b[i]; oc[i] = c[i]; od[i] = d[i]; }
}
"""
_TEXT = f"```cuda\n{_SOURCE}\n```\n```launch\nwarm<<<cdiv(N, 128), 128>>>(a, b, c, d, oa, ob, oc, od, N);\n```\n"


def _reference(xp: Any, a: Any, b: Any, c: Any, d: Any) -> tuple[Any, Any, Any, Any]:
    return a.copy(), b.copy(), c.copy(), d.copy()


WARMUP_TASK = Task(
    name="_warmup_copy", level=1, description="copy four buffers (environment warm-up)",
    sizes={"eval": {"N": 1000}, "small": {"N": 1000}},
    inputs=(Buffer("a", "float32", ("N",), distributions=("uniform", "normal", "heavy_tailed", "positive")),
            Buffer("b", "float16", ("N",)),
            Buffer("c", "int32", ("N",), distributions=("randint",), low=-5, high=5),
            Buffer("d", "int64", ("N",), distributions=("indices",), high="N")),
    outputs=(Buffer("oa", "float32", ("N",)), Buffer("ob", "float16", ("N",)),
             Buffer("oc", "int32", ("N",)), Buffer("od", "int64", ("N",))),
    reference=_reference, solution=_TEXT)


def warm_up(device: Any, config: EnvConfig | None = None) -> Any:
    """Score the warm-up task on `device` (all trials, a short timing) and return its Result."""
    from kernels_env.execute.score import score
    base = config or EnvConfig()
    cfg = base.replace(sizes="small", correctness_trials=4, warmup_runs=1, timed_runs=3)
    return score(WARMUP_TASK, _TEXT, cfg, device=device)
