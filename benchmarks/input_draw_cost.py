"""What a timed run's fresh inputs and checks cost on the GPU, step by step.

The timing stage refills every timed run's buffers while it holds the GPU: a counter_rng draw per
input (float64 math), its copy into the run's fixed buffer, the poison of the outputs, and the
device-side counts of surviving poison. This times each step alone on one buffer of a task's eval
size (CUDA events around `--reps` repetitions, median), next to what memory bandwidth alone allows
(a memset and a copy of the same bytes), and next to variants that would make the same draws cheaper:
  *_into      the same kernel writing straight into an existing buffer (no new array, no copy)
  normal_f32  Box-Muller in float32 (logf/cosf): NOT the project's numbers, only how much of the draw
              is float64 math
  count_fused the poison count as one reduction kernel (no boolean temporary)

    python benchmarks/input_draw_cost.py                 # 100663296 float32 elements (gelu's eval size)
    python benchmarks/input_draw_cost.py --elements 16777216 --reps 20
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

NORMAL_F32 = r"""
unsigned long long z = key + ((unsigned long long)i + 1ull) * 0x9E3779B97F4A7C15ull;
z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
z ^= z >> 31;
float u1 = ((float)(z >> 40) + 1.0f) * 5.9604644775390625e-08f;
float u2 = (float)(z & 0xffffffull) * 5.9604644775390625e-08f;
out = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
"""


def _time_ms(cp: Any, fn: Callable[[], Any], reps: int) -> float:
    """Median CUDA-event ms of `fn` on the current stream (one warm-up call first)."""
    fn()
    times = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(cp.cuda.get_elapsed_time(a, b))
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--elements", type=int, default=100663296)
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args(argv)
    try:
        import cupy as cp
        cp.cuda.runtime.getDeviceCount()
    except Exception as e:  # no CuPy, no driver, no GPU
        print(f"input_draw_cost: needs CuPy and a GPU ({type(e).__name__}: {e})")
        return 2
    import numpy as np

    from kernels_env.execute import counter_rng
    from kernels_env.execute.buffers import fill_poison
    from kernels_env.judge.poison import POISON_BITS, poison_count

    n, key = args.elements, 0x1234567
    shape = (n,)
    buf = cp.empty(shape, cp.float32)
    other = cp.empty(shape, cp.float32)
    fresh = counter_rng.normal(cp, key, shape)
    f32 = cp.ElementwiseKernel("uint64 key", "float32 out", NORMAL_F32, "bench_normal_f32")
    utype, bits = POISON_BITS["float32"]
    count_fused = cp.ReductionKernel("T x, T v", "int64 y", "x == v ? 1 : 0", "a + b", "y = a", "0",
                                     "bench_poison_count")
    fill_poison(buf, "float32")

    def draw_copy() -> None:
        buf[...] = counter_rng.normal(cp, key, shape)

    steps: dict[str, Callable[[], Any]] = {
        "memset (write floor)": lambda: buf.fill(0),
        "copy (read+write floor)": lambda: other.__setitem__(Ellipsis, buf),
        "normal (new array)": lambda: counter_rng.normal(cp, key, shape),
        "normal_into": lambda: counter_rng.normal(cp, key, shape, out=buf),
        "normal + copy (the load before draws went in)": draw_copy,
        "uniform (new)": lambda: counter_rng.uniform(cp, key, shape),
        "uniform_into": lambda: counter_rng.uniform(cp, key, shape, out=buf),
        "heavy_tailed (student_t new + clip)": lambda: cp.clip(counter_rng.student_t(cp, key, shape, 3), -8, 8),
        "student_t_into + clip in place": lambda: cp.clip(counter_rng.student_t(cp, key, shape, 3, out=buf), -8, 8,
                                                          out=buf),
        "normal_f32 (not our numbers)": lambda: f32(np.uint64(key), buf),
        "poison fill": lambda: fill_poison(buf, "float32"),
        "poison count (today)": lambda: poison_count(cp, buf, "float32"),
        "poison count fused": lambda: count_fused(buf.view(utype), utype(bits)),
    }
    mib = n * 4 / 2**20
    print(f"{n} float32 elements ({mib:.0f} MiB), {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, "
          f"median of {args.reps} (CUDA events)")
    for name, fn in steps.items():
        ms = _time_ms(cp, fn, args.reps)
        print(f"{name:40s} {ms:8.3f} ms  {mib / 1024 / (ms / 1e3):8.1f} GiB/s of the buffer")
    del fresh
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
