"""Per-evaluation latency of the cpu backend (NVRTC check + C++ build + trials) on small sizes, p50/p95.

Each suite solution is scored twice in this process: `cold` with an empty .so cache (the C++ build
runs) and `warm` with the cache filled (the build is skipped). Stage times come from Result.stage_seconds.
CPU times only: nothing here is comparable to GPU timings.

    python benchmarks/cpu_backend_latency.py [--tasks relu softmax ...] [--limit 20]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="*", help="task names (default: the whole suite)")
    ap.add_argument("--limit", type=int, default=0, help="only the first N tasks")
    ap.add_argument("--trials", type=int, default=5)
    args = ap.parse_args()
    os.environ["LEAP_CPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="leap_cpu_bench_")
    from kernels_env.backends.cpu import CpuDevice
    from kernels_env.core.config import EnvConfig
    from kernels_env.execute.score import score
    from kernels_env.tasks import get_task, list_tasks

    tasks = [get_task(n) for n in args.tasks] if args.tasks else list_tasks()
    if args.limit:
        tasks = tasks[:args.limit]
    cfg = EnvConfig(backend="cpu", sizes="small", timing=False, correctness_trials=args.trials)
    dev = CpuDevice(cfg)
    rows: dict[str, dict[str, list[float]]] = {"cold": {}, "warm": {}}
    bad = []
    for phase in ("cold", "warm"):
        for t in tasks:
            t0 = time.perf_counter()
            r = score(t, t.solution, cfg, device=dev)
            total = time.perf_counter() - t0
            if not r.correct:
                bad.append(f"{phase} {t.name}: {r.status.value} {r.message[:100]}")
            d = rows[phase]
            d.setdefault("total", []).append(total)
            for k, v in r.stage_seconds.items():
                d.setdefault(k, []).append(v)
    print(f"cpu backend, {len(tasks)} tasks, small sizes, {args.trials} trials, seconds per evaluation")
    print(f"{'phase':<6} {'stage':<14} {'p50':>8} {'p95':>8} {'mean':>8}")
    for phase, d in rows.items():
        for k in sorted(d, key=lambda s: (s == "total", s)):
            v = d[k]
            print(f"{phase:<6} {k:<14} {pct(v, 0.5):8.3f} {pct(v, 0.95):8.3f} {statistics.fmean(v):8.3f}")
    if bad:
        print("not correct:\n  " + "\n  ".join(bad))


if __name__ == "__main__":
    main()
