"""The timing-cheat corpus: submissions that are right in the correctness trials and try to look
fast in the timed runs (DESIGN 3.3 step 4). Each case names the cheat, the task it runs against
(tests/kernels_env/broken_corpus.py: corpus_affine) and what it must score: `caught` cases must end
in `wrong_output` or `runtime_error`; `honest` cases gain nothing from the cheat under verified timing
and must score `correct` at about the honest solution's speed. Grow it as new cheats are found.

All cases compute y = 2x + 1 (corpus_affine) in the five correctness trials; `__device__` globals
live as long as the loaded module, i.e. one evaluation."""
from __future__ import annotations

from dataclasses import dataclass

from tests.kernels_env.broken_corpus import AFFINE_SOLUTION

CAUGHT = frozenset({"wrong_output", "runtime_error"})
HONEST = frozenset({"correct"})


@dataclass(frozen=True)
class TimingCheat:
    id: str
    text: str
    expect: frozenset[str]
    note: str
    task: str = "corpus_affine"


def _text(cuda: str, launch: str) -> str:
    return f"```cuda\n{cuda.strip()}\n```\n```launch\n{launch.strip()}\n```"


LAUNCH_COUNTER = _text(r'''
__device__ int launches;
extern "C" __global__ void tick(int n) { launches += 1; }
extern "C" __global__ void affine(const float* __restrict__ x, float* __restrict__ y, int n) {
    if (launches > 5) return;  // the five correctness trials are done: the outputs are still there
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}''', '''
tick<<<1, 1>>>(N);
affine<<<cdiv(N, 256), 256>>>(x, y, N);''')

RUN_SKIPPER = _text(r'''
__device__ int launches;
extern "C" __global__ void tick(int n) { launches += 1; }
extern "C" __global__ void affine(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    // the 4th timed run (after the 5 trials and the probe) only writes zeros: no poison survives,
    // and it is one run of a batch, which the batch's one random full comparison rarely picks
    if (launches == 9) { y[i] = 0.0f; return; }
    y[i] = 2.0f * x[i] + 1.0f;
}''', '''
tick<<<1, 1>>>(N);
affine<<<cdiv(N, 256), 256>>>(x, y, N);''')

CONTENT_MEMO = _text(r'''
__device__ int memo_valid;
__device__ float memo_key;
__device__ float memo_y[1 << 22];
extern "C" __global__ void affine(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (memo_valid && memo_key == x[0]) { y[i] = memo_y[i]; return; }  // same inputs as last time
    float v = 2.0f * x[i] + 1.0f;
    y[i] = v;
    memo_y[i] = v;
}
extern "C" __global__ void remember(const float* __restrict__ x, int n) { memo_key = x[0]; memo_valid = 1; }''', '''
affine<<<cdiv(N, 256), 256>>>(x, y, N);
remember<<<1, 1>>>(x, N);''')

POINTER_MEMO = _text(r'''
__device__ int calls;
__device__ const float* memo_ptr;
__device__ float memo_y[1 << 22];
extern "C" __global__ void affine(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (calls > 5 && memo_ptr == x) { y[i] = memo_y[i]; return; }  // same buffer as last time
    float v = 2.0f * x[i] + 1.0f;
    y[i] = v;
    memo_y[i] = v;
}
extern "C" __global__ void remember(const float* x, int n) { memo_ptr = x; calls += 1; }''', '''
affine<<<cdiv(N, 256), 256>>>(x, y, N);
remember<<<1, 1>>>(x, N);''')

FRESH_SCRATCH = _text(r'''
extern "C" __global__ void affine(const float* __restrict__ x, float* __restrict__ y, float* cache,
                                  const int* flag, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (flag[0]) { y[i] = cache[i]; return; }  // scratch already filled by an earlier run
    float v = 2.0f * x[i] + 1.0f;
    y[i] = v;
    cache[i] = v;
}
extern "C" __global__ void mark(int* flag) { flag[0] = 1; }''', '''
scratch float cache[N];
scratch int flag[1];
affine<<<cdiv(N, 256), 256>>>(x, y, cache, flag, N);
mark<<<1, 1>>>(flag);''')


def slow_affine(cycles: int) -> str:
    """The honest solution plus a `cycles`-long spin of one thread (clock64): correct and slow."""
    return _text(r'''
extern "C" __global__ void affine(const float* __restrict__ x, float* __restrict__ y, int n, long long cycles) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) { long long t0 = clock64(); while (clock64() - t0 < cycles) { } }
    if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}''', f"affine<<<cdiv(N, 256), 256>>>(x, y, N, {int(cycles)});")


CASES = (
    TimingCheat("launch_counter", LAUNCH_COUNTER, CAUGHT,
                "works only in the first five launches (a __device__ counter); timed runs do nothing"),
    TimingCheat("run_skipper", RUN_SKIPPER, CAUGHT,
                "writes zeros in one timed run mid-batch (a __device__ launch counter): every run's "
                "outputs are compared (sampled), not only a random one and the last"),
    TimingCheat("pointer_memo", POINTER_MEMO, CAUGHT,
                "after the trials, copies a remembered result when the input pointer repeats"),
    TimingCheat("content_memo", CONTENT_MEMO, HONEST,
                "copies a remembered result when x[0] repeats: fresh inputs every run, so it never does"),
    TimingCheat("fresh_scratch", FRESH_SCRATCH, HONEST,
                "computes only while its scratch flag is zero: scratch is re-zeroed before every run"),
)
HONEST_SOLUTION = AFFINE_SOLUTION
