"""NVRTC compile time of the known-good solutions, per prelude arm, side by side in one process.

The environment compiles every new submission with NVRTC on a CPU core (`kernels_env/compiler/compile.py`);
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
Rounds alternate the arms so drift hits both. `--phases` prints NVRTC's own clock instead (front end,
NVVM, ptxas, and the parse of the built-in header, the prelude and cuda_fp16.h), for the sources with and
without a CUDA #include, under the previous rule and the current one.

    python benchmarks/compile_time.py --workload gen --tasks 64 --rounds 2
    python benchmarks/compile_time.py --workload gen --tasks 32 --phases
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Iterator
from unittest import mock

from kernels_env.compiler.std_prelude import PRELUDE_NAME


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
def extra_nvrtc_options(extra: list[str]) -> Iterator[None]:
    """compile_cuda with `extra` added to NVRTC's options, inside the block."""
    from kernels_env.compiler import compile as compile_mod
    options = compile_mod.nvrtc_options
    with mock.patch.object(compile_mod, "nvrtc_options", lambda arch: options(arch) + extra):
        yield


def time_arm(srcs: list[str], arm: str, cubins: list[bytes] | None = None) -> list[float]:
    """Seconds per compile_cuda of each source under `arm` (`cubins`, when given, gets each cubin)."""
    from kernels_env.compiler import compile as compile_mod
    from kernels_env.compiler import std_prelude
    if arm not in ARMS:
        raise ValueError(f"arm {arm!r}: expected one of {ARMS}")
    with contextlib.ExitStack() as stack:
        rule = std_prelude.needs_libcudacxx
        if arm == "always":
            stack.enter_context(mock.patch.object(std_prelude, "needs_libcudacxx", lambda s: True))
        elif arm == "any-cuda":  # no CUDA header counted as plain
            stack.enter_context(mock.patch.object(std_prelude, "needs_libcudacxx", lambda s: rule(s, ())))
        if arm == "pch":
            stack.enter_context(extra_nvrtc_options(PCH_OPTIONS))
        out = []
        for s in srcs:
            t0 = time.perf_counter()
            module = compile_mod.compile_cuda(s)
            out.append(time.perf_counter() - t0)
            if cubins is not None:
                cubins.append(module.cubin)
    return out


PHASES = ("CUDA C++ Front-End", "LibNVVM", "Total PTXAS Time")  # NVRTC's own top-level phases
HEADERS = ("__nv_nvrtc_builtin_header.h", PRELUDE_NAME, "cuda_fp16.h")  # headers' parse time


def phase_ms(source: str, arm: str, trace_dir: str) -> dict[str, float]:
    """NVRTC's own time per phase and per header (ms) for one compile under `arm`, from its
    `--fdevice-time-trace` (Chrome trace events; a header counts with the headers it includes)."""
    import json
    import os
    path = os.path.join(trace_dir, "trace")
    with extra_nvrtc_options([f"--fdevice-time-trace={path}"]):
        time_arm([source], arm)
    trace = next(os.path.join(trace_dir, f) for f in os.listdir(trace_dir) if f.startswith("trace"))
    with open(trace) as f:
        data = json.load(f)
    os.remove(trace)
    events = [e for e in (data["traceEvents"] if isinstance(data, dict) else data) if e.get("ph") == "X"]
    out = {p: sum(e["dur"] for e in events if e["name"] == p) / 1e3 for p in PHASES}
    for h in HEADERS:  # the outermost event of each header
        out[h] = max((e["dur"] / 1e3 for e in events if e["name"] == "Processing Header File"
                      and str(e.get("args", {}).get("detail", "")).endswith(h)), default=0.0)
    return out


def print_phases(srcs: list[str]) -> None:
    """Mean NVRTC phase and header times per arm, sources with and without a CUDA #include apart."""
    import tempfile
    print("NVRTC's phases (--fdevice-time-trace), mean ms per compile")
    groups = {"with #include": [s for s in srcs if "#include" in s], "without": [s for s in srcs if "#include" not in s]}
    cols = PHASES + HEADERS
    print(f"{'sources':20s} {'arm':10s} " + " ".join(f"{c[:18]:>18s}" for c in cols))
    with tempfile.TemporaryDirectory() as d:
        for label, group in groups.items():
            for arm in ("any-cuda", "as-needed"):
                rows = [phase_ms(s, arm, d) for s in group]
                if rows:
                    print(f"{label + f' ({len(rows)})':20s} {arm:10s} "
                          + " ".join(f"{statistics.mean(r[c] for r in rows):18.1f}" for c in cols))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", choices=["gen", "suite"], default="gen")
    ap.add_argument("--tasks", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--phases", action="store_true", help="print NVRTC's own phase times instead")
    args = ap.parse_args()
    srcs = sources(args.workload, args.tasks)
    time_arm(srcs[:2], "always")  # NVRTC's first call loads the library
    if args.phases:
        print_phases(srcs)
        return
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
