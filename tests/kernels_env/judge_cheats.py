"""Submissions that cheat the judge itself rather than the task (docs/THREAT_MODEL.md, G).

`HANG_AFTER_TRIALS` is right in the correctness trials and spins forever from the next launch on (the
timing stage's first run): it must come back as `timeout` within the stage's limit plus
HANG_GRACE_S (core/config.py), not after twice the stage limits or a retry.

`answer_table` builds a kernel that never computes: it holds corpus_sum's answers to the trials a
fixed seed draws, keyed on the bits of the first four input elements, and writes the answer whose
key matches (zero when none does). A policy scored on inputs that repeat across evaluations can
learn exactly that from the expected values the wrong-output feedback prints. With fresh inputs
every evaluation (EnvConfig.seed None, the default) no key ever matches."""
from __future__ import annotations

import numpy as np

from kernels_env.execute.inputs import make_inputs
from tests.kernels_env.broken_corpus import TASKS

KEY_ELEMENTS = 4

HANG_AFTER_TRIALS = """```cuda
__device__ int launches;
extern "C" __global__ void tick(int n) { launches += 1; }
extern "C" __global__ void affine(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    // the five correctness trials are done: spin on a value nobody ever writes
    if (launches > 5) { volatile int* f = (volatile int*)&launches; while (f[0] != -7) { } }
    if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}
```
```launch
tick<<<1, 1>>>(N);
affine<<<cdiv(N, 256), 256>>>(x, y, N);
```"""


def answer_table(seed: int, trials: int, sizes: str = "small") -> str:
    """corpus_sum's submission that looks up the answers of trials 0 .. trials-1 drawn with `seed`."""
    task = TASKS["corpus_sum"]
    keys, answers = [], []
    for trial in range(trials):
        x = make_inputs(task, task.sizes[sizes], trial, seed, np)
        keys.append(x["x"][:KEY_ELEMENTS].view(np.uint32).tolist())
        answers.append(float(np.asarray(task.reference(np, **x))[0]))
    key_rows = ", ".join("{" + ", ".join(f"{k}u" for k in row) + "}" for row in keys)
    answer_list = ", ".join(f"{a!r}f" if "e" in repr(a) or "." in repr(a) else f"{a!r}.0f" for a in answers)
    cuda = f"""
__device__ const unsigned int KEYS[{trials}][{KEY_ELEMENTS}] = {{{key_rows}}};
__device__ const float ANSWERS[{trials}] = {{{answer_list}}};
extern "C" __global__ void lookup(const float* x, float* y, int n) {{
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    const unsigned int* bits = (const unsigned int*)x;
    float answer = 0.0f;
    for (int t = 0; t < {trials}; ++t) {{
        bool same = true;
        for (int k = 0; k < {KEY_ELEMENTS}; ++k) same = same && bits[k] == KEYS[t][k];
        if (same) answer = ANSWERS[t];
    }}
    y[0] = answer;
}}"""
    return f"```cuda\n{cuda.strip()}\n```\n```launch\nlookup<<<1, 1>>>(x, y, N);\n```"
