"""Numeric cheats the trials must catch, as real submissions: a loss over every other 1024-element chunk
(half the reduction, doubled) and an instance norm with a one-pass variance (E[x^2] - E[x]^2). Each is
the suite's own solution with the cheat edited in, so everything else about it is correct.

    python -m pytest -q tests/kernels_env/test_numeric_cheats.py            # cpu, small sizes
    python -m pytest -q tests/kernels_env/test_numeric_cheats.py -m gpu     # cupy, eval sizes
"""
from __future__ import annotations

import pytest

from kernels_env.core.config import EnvConfig
from kernels_env.core.status import Status
from kernels_env.tasks import get_task


def _edited(task: str, old: str, new: str) -> str:
    text = get_task(task).solution
    assert text.count(old) == 1, f"{task}: the solution no longer contains {old!r}"
    return text.replace(old, new)


CHEATS = {
    "mse_loss": ("half_reduction", lambda: _edited(
        "mse_loss", "float d = p - t; acc += d * d;",
        "if ((i >> 10) & 1) continue; float d = p - t; acc += 2.0f * d * d;")),
    "instance_norm": ("one_pass_variance", lambda: _edited(
        "instance_norm",
        "for (int i = threadIdx.x; i < len; i += blockDim.x) { float d = p[i] - mu; v += d * d; }\n"
        "    return make_float2(mu, rsqrtf(block_sum(v, sh) / (float)len + eps));",
        "for (int i = threadIdx.x; i < len; i += blockDim.x) v += p[i] * p[i];\n"
        "    return make_float2(mu, rsqrtf(fmaxf(block_sum(v, sh) / (float)len - mu * mu, 0.0f) + eps));")),
}


@pytest.mark.parametrize("task", sorted(CHEATS), ids=[CHEATS[t][0] for t in sorted(CHEATS)])
def test_cheat_is_wrong_output_on_cpu(task, cpu_device):
    from kernels_env.execute.score import score

    cfg = EnvConfig(backend="cpu", sizes="small", timing=False, correctness_trials=5)
    r = score(get_task(task), CHEATS[task][1](), cfg, device=cpu_device)
    assert r.status == Status.WRONG_OUTPUT, f"{CHEATS[task][0]}: {r.status.value}: {r.message}"


@pytest.mark.gpu
@pytest.mark.parametrize("task", sorted(CHEATS), ids=[CHEATS[t][0] for t in sorted(CHEATS)])
def test_cheat_is_wrong_output_on_gpu_eval_sizes(task, gpu_device):
    from kernels_env.execute.score import score

    cfg = EnvConfig(backend="cupy", sizes="eval", timing=False, correctness_trials=5)
    r = score(get_task(task), CHEATS[task][1](), cfg, device=gpu_device)
    assert r.status == Status.WRONG_OUTPUT, f"{CHEATS[task][0]}: {r.status.value}: {r.message}"
