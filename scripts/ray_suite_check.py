"""Score the suite's solutions through the process pool and through EvalPool(mode="ray") and compare
their statuses task by task; exit 1 on any difference. On a GPU machine (`bash scripts/gpu/ray_check.sh`)
the Ray pool is a local Ray cluster with one host on this machine, running the cupy backend.

    python scripts/ray_suite_check.py                              # cupy, eval sizes, every suite task
    python scripts/ray_suite_check.py --backend cpu --sizes small --limit 5 --no-timing
"""
from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def run(mode: str, jobs: list, backend: str, config, address: str | None) -> tuple[list, float, dict]:
    from kernels_env.schedule.pool import EvalPool
    extra = {"address": address} if mode == "ray" else {}
    t0 = time.perf_counter()
    with EvalPool(mode=mode, backend=backend, config=config, cache=False, **extra) as pool:
        results = pool.map(jobs)
        stats = pool.stats()
    return results, time.perf_counter() - t0, stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="cupy", choices=("auto", "cupy", "cpu"))
    ap.add_argument("--sizes", default="eval", choices=("eval", "small"))
    ap.add_argument("--level", type=int, default=None)
    ap.add_argument("--limit", type=int, default=None, help="first N tasks only")
    ap.add_argument("--no-timing", action="store_true")
    ap.add_argument("--ray-address", default=None, help="default: a local Ray started here")
    args = ap.parse_args(argv)
    from kernels_env.core.config import EnvConfig
    from kernels_env.schedule.pool import Job
    from kernels_env.tasks import list_tasks
    tasks = list_tasks(level=args.level)[: args.limit]
    cfg = EnvConfig(backend=args.backend, sizes=args.sizes, timing=not args.no_timing)
    jobs = [Job(t.name, t.solution, cfg) for t in tasks]
    proc, t_proc, _ = run("process", jobs, args.backend, cfg, None)
    ray, t_ray, stats = run("ray", jobs, args.backend, cfg, args.ray_address)
    diff = [(j.task, a.status.value, b.status.value, b.message[:100]) for j, a, b in zip(jobs, proc, ray, strict=True)
            if a.status is not b.status]
    n_ok = sum(r.correct for r in ray)
    print(f"{len(jobs)} tasks: process {t_proc:.1f} s, ray {t_ray:.1f} s (pools started and closed included); "
          f"ray correct {n_ok}/{len(jobs)}; ray pool {stats}")
    for task, a, b, msg in diff:
        print(f"DIFFERENT {task}: process {a}, ray {b}: {msg}")
    print("same statuses in the same order" if not diff else f"{len(diff)} statuses differ")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
