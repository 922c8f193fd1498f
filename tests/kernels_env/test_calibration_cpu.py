"""Correct kernels are `correct` through the real cpu backend at the seeds that once judged them wrong.

The suite's layer_norm_residual solution was wrong_output at seeds 19, 59 and 118 against a float32
reference, and add_layer_norm kernels summing sequentially in float32 (or in float64) failed the
constant row's amplified rounding; cumsum's exact answer failed a sorted row. test_calibration.py
covers 100 seeds per draw family with NumPy stand-ins; this runs real kernels on a sample.
"""
from __future__ import annotations

import pytest

from kernels_env.core.config import EnvConfig
from kernels_env.core.status import Status
from kernels_env.tasks import common, get_task

pytestmark = pytest.mark.slow
SEEDS = (0, 19, 59, 118)

# add_layer_norm with thread 0 of each block summing the row in ACC (float: a sequential float32
# running sum; double: float64 accumulation), two passes, then every thread writes its elements.
_ROW_LN = r"""
extern "C" __global__ void add_ln(const float* __restrict__ x, const float* __restrict__ residual,
                                  const float* __restrict__ weight, const float* __restrict__ bias,
                                  float* __restrict__ y, int M, int N, float eps) {
    __shared__ float stats[2];
    size_t off = (size_t)blockIdx.x * N;
    if (threadIdx.x == 0) {
        ACC s = 0;
        for (int j = 0; j < N; ++j) s += (ACC)(x[off + j] + residual[off + j]);
        ACC mu = s / (ACC)N;
        ACC v = 0;
        for (int j = 0; j < N; ++j) { ACC d = (ACC)(x[off + j] + residual[off + j]) - mu; v += d * d; }
        stats[0] = (float)mu;
        stats[1] = (float)(1.0 / sqrt((double)(v / (ACC)N) + (double)eps));
    }
    __syncthreads();
    for (int j = threadIdx.x; j < N; j += blockDim.x)
        y[off + j] = (x[off + j] + residual[off + j] - stats[0]) * stats[1] * weight[j] + bias[j];
}
"""


def _row_ln(acc: str) -> str:
    return common.solution(_ROW_LN.replace("ACC", acc),
                           "add_ln<<<M, 128>>>(x, residual, weight, bias, y, M, N, eps);")


CASES = [("layer_norm_residual", "solution", lambda: get_task("layer_norm_residual").solution),
         ("add_layer_norm", "solution", lambda: get_task("add_layer_norm").solution),
         ("add_layer_norm", "sequential_float32", lambda: _row_ln("float")),
         ("add_layer_norm", "float64", lambda: _row_ln("double")),
         ("cumsum", "solution", lambda: get_task("cumsum").solution)]


@pytest.mark.parametrize("name,kernel,text", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_correct_kernel_is_correct_at_every_sampled_seed(name, kernel, text, cpu_device):
    from kernels_env.execute.score import score

    for seed in SEEDS:
        cfg = EnvConfig(backend="cpu", sizes="small", timing=False, correctness_trials=3, seed=seed)
        r = score(get_task(name), text(), cfg, device=cpu_device)
        assert r.status == Status.CORRECT, f"{name} {kernel} seed {seed}: {r.status.value}: {r.message}"
