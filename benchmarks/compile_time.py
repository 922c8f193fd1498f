"""NVRTC compile time of the known-good solutions, per prelude arm, side by side in one process.

The environment compiles every new submission with NVRTC on a CPU core (`kernels_env/build/compile.py`);
in the RL configuration (the generated family, correctness only) that is the costliest stage of an
evaluation (~80 ms of ~100 on the GPU host, where 12 compile workers share the cores). Arms:
  always     libcu++'s climits/cstdint/cfloat pre-included for every source (the first prelude)
  any-cuda   only for sources that include any CUDA header (the second prelude)
  as-needed  only for sources that `needs_libcudacxx`: a CUDA header other than cuda_fp16.h and
             cuda_bf16.h (the current prelude)
  pch        as-needed, with NVRTC's automatic precompiled headers (`-pch -pch-messages=false`,
             NVRTC 12.8+); the table says how many cubins equal as-needed's. Not the environment's
             setting: NVRTC reuses a precompiled header after the pre-included in-memory prelude has
             changed (a stale prelude compiles the next source; tests/kernels_env/
             test_compile_time_benchmark.py shows it), writes under /tmp, and keeps a 256 MiB heap
Rounds alternate the arms so drift hits both.

    python benchmarks/compile_time.py --workload gen --tasks 64 --rounds 2
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Iterator
from unittest import mock


def sources(workload: str, n: int) -> list[str]:
    from kernels_env.source.submission import parse_submission
    if workload == "gen":
        from kernels_env.tasks.generated import generated_task_names, get_generated_task
        tasks = [get_generated_task(name) for name in generated_task_names(n)]
    else:
        from kernels_env.tasks import list_tasks
        tasks = list_tasks()[:n]
    return [parse_submission(t.solution).cuda_source for t in tasks]


PCH_OPTIONS = ["-pch", "-pch-messages=false"]
ARMS = ("always", "any-cuda", "as-needed", "pch")


@contextlib.contextmanager
def pch_compiles() -> Iterator[None]:
    """compile_cuda with PCH_OPTIONS added to NVRTC's options, inside the block."""
    from kernels_env.build import compile as compile_mod
    options = compile_mod.nvrtc_options
    with mock.patch.object(compile_mod, "nvrtc_options", lambda arch: options(arch) + PCH_OPTIONS):
        yield


def time_arm(srcs: list[str], arm: str, cubins: list[bytes] | None = None) -> list[float]:
    """Seconds per compile_cuda of each source under `arm` (`cubins`, when given, gets each cubin)."""
    from kernels_env.build import compile as compile_mod
    from kernels_env.build import std_prelude
    if arm not in ARMS:
        raise ValueError(f"arm {arm!r}: expected one of {ARMS}")
    with contextlib.ExitStack() as stack:
        rule = std_prelude.needs_libcudacxx
        if arm == "always":
            stack.enter_context(mock.patch.object(std_prelude, "needs_libcudacxx", lambda s: True))
        elif arm == "any-cuda":  # no CUDA header counted as plain
            stack.enter_context(mock.patch.object(std_prelude, "needs_libcudacxx", lambda s: rule(s, ())))
        if arm == "pch":
            stack.enter_context(pch_compiles())
        out = []
        for s in srcs:
            t0 = time.perf_counter()
            module = compile_mod.compile_cuda(s)
            out.append(time.perf_counter() - t0)
            if cubins is not None:
                cubins.append(module.cubin)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", choices=["gen", "suite"], default="gen")
    ap.add_argument("--tasks", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    srcs = sources(args.workload, args.tasks)
    time_arm(srcs[:2], "always")  # NVRTC's first call loads the library
    times: dict[str, list[float]] = {arm: [] for arm in ARMS}
    cubins: dict[str, list[bytes]] = {arm: [] for arm in ARMS}
    for _ in range(args.rounds):
        for arm in ARMS:
            times[arm] += time_arm(srcs, arm, cubins[arm])
    print(f"{args.workload}: {len(srcs)} solutions x {args.rounds} rounds, one process, ms per compile")
    print(f"{'arm':10s} {'median':>8s} {'mean':>8s} {'cubins equal to as-needed':>26s}")
    for arm, ts in times.items():
        same = sum(a == b for a, b in zip(cubins[arm], cubins["as-needed"], strict=True))
        print(f"{arm:10s} {statistics.median(ts) * 1e3:8.1f} {statistics.mean(ts) * 1e3:8.1f} "
              f"{same:>19d} of {len(ts)}")


if __name__ == "__main__":
    main()
