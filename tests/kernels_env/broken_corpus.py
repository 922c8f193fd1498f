"""The broken-kernel corpus: small self-contained tasks, submissions with one known defect each, and
the status every backend must give them (the cpu/cupy agreement test, test_broken_corpus.py).

Each entry has an id, a Task built from kernels_env.tasks.spec types (no dependency on the suite),
the submission text and the expected status. Where a backend cannot give the same status, the
entry says so in `expected_by_backend` with the reason in `note`.

Decisions on cases whose GPU behaviour could be non-deterministic:
- out-of-bounds write: the grid overshoots N by ~16M threads with no bounds check, so the GPU writes
  far past every allocation (deterministic "illegal memory access"); the cpu backend faults on the
  guard page right after the output. (A small overrun would be silent on a GPU: allocations are
  padded and pooled; the cpu backend is stricter there, which this corpus does not test.)
- uninitialised scratch: scratch buffers are zero-initialised by the harness, so reading scratch no
  launch ever wrote is deterministic: the two-pass sum below skips its first pass, reads zeros and
  produces 0 -> wrong_output on every backend.
- race: the shared-memory reduction lacks every __syncthreads, and warps further from warp 0 wait
  (clock64 spin) before storing, so on a GPU warp 0 reads slots not yet written (wrong_output);
  the cpu backend runs the threads in forward / reverse / interleaved order across trials, and the
  forward order reads unwritten slots.
- infinite loop: a volatile spin on a zero flag (a loop without side effects could legally be
  removed by the compiler).
- input domains: a few cases take a suite task (by name) and are wrong only outside what the legacy
  draws reached (naive softplus overflowing for x > 88, a log series accurate only near 1) or write
  a constant near the reference's typical value; trials over the declared domain reject them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kernels_env.core.config import EnvConfig, StageLimits
from kernels_env.core.result import Result
from kernels_env.tasks.spec import Buffer, Task

SMALL_N = 3000


def _affine_ref(xp: Any, x: Any) -> Any:
    return (x * xp.float32(2.0) + xp.float32(1.0)).astype(xp.float32)


def _sum_ref(xp: Any, x: Any) -> Any:
    return xp.sum(x.astype(xp.float64), keepdims=True).reshape(1).astype(xp.float32)


AFFINE_SOLUTION = """```cuda
extern "C" __global__ void affine(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}
```
```launch
affine<<<cdiv(N, 256), 256>>>(x, y, N);
```"""

SUM_SOLUTION = """```cuda
extern "C" __global__ void block_sum(const float* __restrict__ x, float* __restrict__ partial, int n) {
    __shared__ float s[256];
    int t = threadIdx.x, i = blockIdx.x * 256 + t;
    s[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int k = 128; k >= 32; k >>= 1) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t < 32) {
        float v = s[t];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (t == 0) partial[blockIdx.x] = v;
    }
}
extern "C" __global__ void finish(const float* __restrict__ partial, float* __restrict__ y, int m) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        float acc = 0.0f;
        for (int j = 0; j < m; ++j) acc += partial[j];
        y[0] = acc;
    }
}
```
```launch
scratch float partial[cdiv(N, 256)];
block_sum<<<cdiv(N, 256), 256>>>(x, partial, N);
finish<<<1, 32>>>(partial, y, cdiv(N, 256));
```"""

AFFINE = Task(
    name="corpus_affine", level=1,
    description="y[i] = 2 * x[i] + 1 for a float32 vector of N elements.",
    sizes={"eval": {"N": 1 << 22}, "small": {"N": SMALL_N}},
    inputs=(Buffer("x", "float32", ("N",)),), outputs=(Buffer("y", "float32", ("N",)),),
    reference=_affine_ref, solution=AFFINE_SOLUTION)

SUM = Task(
    name="corpus_sum", level=1,
    description="y[0] = sum of the N float32 elements of x.",
    sizes={"eval": {"N": 1 << 22}, "small": {"N": 5000}},
    inputs=(Buffer("x", "float32", ("N",), distributions=("uniform", "normal")),),
    outputs=(Buffer("y", "float32", (1,)),),
    reference=_sum_ref, solution=SUM_SOLUTION, tolerance={"float32": (1e-2, 1e-3)})

TASKS = {t.name: t for t in (AFFINE, SUM)}


def _affine_variant(body: str, launch: str = "affine<<<cdiv(N, 256), 256>>>(x, y, N);",
                    signature: str = "const float* __restrict__ x, float* __restrict__ y, int n") -> str:
    return (f'```cuda\nextern "C" __global__ void affine({signature}) {{\n'
            f"    int i = blockIdx.x * blockDim.x + threadIdx.x;\n{body}\n}}\n```\n```launch\n{launch}\n```")


@dataclass(frozen=True)
class Case:
    id: str
    task: str
    text: str
    expected: str
    expected_by_backend: dict[str, str] = field(default_factory=dict)  # where a backend must differ
    note: str = ""
    # its wrong values are whatever uninitialised memory held (e.g. shared memory read before any
    # thread wrote it): the status and the wrong buffer are fixed, the values differ run to run
    garbage_values: bool = False
    # on a GPU its fault is sticky (an illegal address): the CUDA context is lost for every later
    # evaluation in the process, so it runs only where a worker process can be replaced (EvalPool)
    kills_context: bool = False

    def expected_for(self, backend: str) -> str:
        return self.expected_by_backend.get(backend, self.expected)


CASES: tuple[Case, ...] = (
    Case("good_affine", "corpus_affine", AFFINE_SOLUTION, "correct", note="control"),
    Case("good_sum", "corpus_sum", SUM_SOLUTION, "correct", note="control: barriers + shuffles"),
    Case("syntax_error", "corpus_affine",
         _affine_variant("    if (i < n) y[i] = 2.0f * x[i] + 1.0f\n"), "compile_error",
         note="missing semicolon"),
    Case("undefined_symbol", "corpus_affine",
         _affine_variant("    if (i < n) y[i] = scale_and_shift(x[i]);"), "compile_error",
         note="calls a function that is declared nowhere"),
    Case("wrong_launch_arity", "corpus_affine", _affine_variant(
        "    if (i < n) y[i] = 2.0f * x[i] + 1.0f;", launch="affine<<<cdiv(N, 256), 256>>>(x, y);"),
         "format_error", note="two arguments for a three-parameter kernel"),
    Case("oob_write_no_bounds_check", "corpus_affine", _affine_variant(
        "    y[i] = 2.0f * x[i % n] + 1.0f;", launch="affine<<<65536, 256>>>(x, y, N);"),
         "runtime_error", note="16M threads write y[i] with no bounds check: far past the allocation",
         kills_context=True),
    Case("off_by_one_write_past_end", "corpus_affine", _affine_variant(
        "    if (i <= n) y[i] = 2.0f * x[i % n] + 1.0f;"), "runtime_error",
         note="one element written past y: too close to fault; the poisoned guard after y catches it"),
    Case("off_by_one_last_unwritten", "corpus_affine",
         _affine_variant("    if (i < n - 1) y[i] = 2.0f * x[i] + 1.0f;"), "wrong_output",
         note="the last element keeps its NaN poison"),
    Case("wrong_formula", "corpus_affine",
         _affine_variant("    if (i < n) y[i] = 2.0f * x[i] - 1.0f;"), "wrong_output"),
    Case("writes_input", "corpus_affine", _affine_variant(
        "    if (i < n) { y[i] = 2.0f * x[i] + 1.0f; x[i] = 0.0f; }",
        signature="float* x, float* __restrict__ y, int n"), "wrong_output",
         note="correct output, but the input is modified"),
    Case("reads_unwritten_scratch", "corpus_sum", SUM_SOLUTION.replace(
        "block_sum<<<cdiv(N, 256), 256>>>(x, partial, N);\n", ""), "wrong_output",
         note="the first pass is never launched: finish() sums the zero-initialised scratch"),
    Case("infinite_loop", "corpus_affine", """```cuda
extern "C" __global__ void affine(const float* __restrict__ x, float* __restrict__ y, int n,
                                  volatile int* flag) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    while (flag[0] == 0) { }  // nobody ever sets the flag
    if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}
```
```launch
scratch int flag[1];
affine<<<cdiv(N, 256), 256>>>(x, y, N, flag);
```""", "timeout", note="spins forever on a flag no thread sets"),
    Case("missing_syncthreads_race", "corpus_sum", """```cuda
extern "C" __global__ void block_sum(const float* __restrict__ x, float* __restrict__ partial, int n) {
    __shared__ float s[256];
    int t = threadIdx.x, i = blockIdx.x * 256 + t;
    float v = i < n ? x[i] : 0.0f;
    long long start = clock64();  // later warps store later
    while (clock64() - start < (long long)(t / 32) * 20000) { }
    s[t] = v;
    for (int k = 128; k > 0; k >>= 1) {  // BUG: no __syncthreads() anywhere
        if (t < k) s[t] += s[t + k];
    }
    if (t == 0) partial[blockIdx.x] = s[0];
}
extern "C" __global__ void finish(const float* __restrict__ partial, float* __restrict__ y, int m) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        float acc = 0.0f;
        for (int j = 0; j < m; ++j) acc += partial[j];
        y[0] = acc;
    }
}
```
```launch
scratch float partial[cdiv(N, 256)];
block_sum<<<cdiv(N, 256), 256>>>(x, partial, N);
finish<<<1, 32>>>(partial, y, cdiv(N, 256));
```""", "wrong_output", note="tree reduction in shared memory without barriers", garbage_values=True),
    Case("inline_ptx_asm", "corpus_affine", _affine_variant(
        "    float r;\n    if (i < n) {\n        asm(\"mul.f32 %0, %1, %2;\" : \"=f\"(r) : \"f\"(x[i]), \"f\"(2.0f));\n"
        "        y[i] = r + 1.0f;\n    }"), "correct", expected_by_backend={"cpu": "compile_error"},
         note="cannot agree: the cpu backend does not emulate inline PTX and rejects it with a "
              "compile_error that names the feature and points to the cupy backend; on a GPU it is correct"),
)



def _suite_task(name: str) -> Task:
    from kernels_env.tasks import get_task
    return get_task(name)


def _suite_variant(task: str, old: str, new: str) -> str:
    """A suite task's known-good solution with `old` (which must occur) replaced by `new`."""
    text = _suite_task(task).solution
    if old not in text:
        raise ValueError(f"{task}: solution lacks {old!r}")
    return text.replace(old, new)


LOG_SERIES = ("float z = (v - 1.0f) / (v + 1.0f), z2 = z * z, term = z, s = 0.0f;\n"
              "        for (int k = 1; k < 80; k += 2) { s += term / (float)k; term *= z2; }\n"
              "        float r = 2.0f * s;")
DOMAIN_CASES: tuple[Case, ...] = (
    Case("naive_softplus_overflows", "softplus", _suite_variant(
        "softplus", "fmaxf(v, 0.0f) + log1pf(expf(-fabsf(v)))", "logf(1.0f + expf(v))"), "wrong_output",
         note="log(1 + exp(x)) is inf for x > 88: only the edges trial draws that far"),
    Case("log_series_near_one", "log", _suite_variant("log", "float r = logf(v);", LOG_SERIES),
         "wrong_output", note="atanh series: exact on [0.1, 2), off by ~0.1 at 100 and far off near 0"),
    Case("cosine_loss_constant_one", "cosine_similarity_loss", _suite_variant(
        "cosine_similarity_loss", "row_loss[blockIdx.x] = 1.0f - dot / fmaxf(sqrtf(xx) * sqrtf(yy), eps);",
        "row_loss[blockIdx.x] = 1.0f;"), "wrong_output",
         note="independent random rows give a loss of ~1; the structured trial's correlated rows ~0"),
)
CASES = CASES + DOMAIN_CASES
TASKS.update({c.task: _suite_task(c.task) for c in DOMAIN_CASES})  # suite tasks, resolved by name
CASES_BY_ID = {c.id: c for c in CASES}


def corpus_config(backend: str) -> EnvConfig:
    """Small sizes, no timing, short limits (the infinite loop must end quickly)."""
    return EnvConfig(backend=backend, sizes="small", timing=False, correctness_trials=5,
                     limits=StageLimits(parse=2.0, compile=30.0, correctness=4.0, timing=4.0))


_STATE: dict[str, Any] = {}


def register_corpus_tasks() -> None:
    """Add the corpus tasks to this process's task registry (the pipeline resolves tasks by name)."""
    from kernels_env.tasks import get_task, register
    for t in TASKS.values():
        try:
            get_task(t.name)
        except KeyError:
            register(t)


def corpus_evaluator(task: str, text: str, config: EnvConfig) -> Result:
    """EvalPool evaluator (runs in the worker): score `text` against a corpus task by name.

    Keeps one device per worker. After a fatal (sticky) device error the device is unusable: the
    error is raised (FatalDeviceError carrying the result), and the pool replaces the worker at once,
    as for its own `execute` requests, without a retry.
    """
    from kernels_env.backends import get_device
    from kernels_env.backends.base import FatalDeviceError
    from kernels_env.execute import score as scoring
    device = _STATE.get("device")
    if device is None:
        register_corpus_tasks()
        device = _STATE["device"] = get_device(config.backend, config)
    prep = scoring.prepare(TASKS[task], text, config, arch=getattr(device, "arch", None))
    if isinstance(prep, Result):
        return prep
    result, fatal = scoring.execute(prep, device, config)
    if fatal:
        e = FatalDeviceError(result.message)
        e.result = result
        raise e
    return result
