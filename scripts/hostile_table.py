#!/usr/bin/env python
"""Run the hostile corpus (tests/kernels_env/hostile_corpus.py and isolation_corpus.py) and print one row per case:
case, class, expected statuses, got, seconds, peak RSS of the evaluating process.

    python scripts/hostile_table.py --backend cpu
    python scripts/hostile_table.py --backend cupy          # on a GPU machine
    python scripts/hostile_table.py --backend cpu --only include_ --json out.json

Each case runs in a fresh child process (so a case's peak RSS is its own, and a GPU hang is
killed after --case-timeout seconds and reported as `killed`). Exit code 1 when any case got a
status outside its expected set, or env_error, or leaked a host path.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _child(conn, backend: str, case_id: str, timeout: float = 0.0) -> None:
    import faulthandler
    import resource
    if timeout > 5:  # a case about to be killed prints where it is stuck (stderr)
        faulthandler.dump_traceback_later(timeout - 3, exit=False)

    from kernels_env.execute.score import score
    if backend == "cpu":  # no CUDA in this child: its NVRTC compiles get the compile memory cap
        from kernels_env.compiler import memory_cap
        memory_cap.mark_cuda_free()
    from tests.kernels_env.broken_corpus import TASKS, register_corpus_tasks
    from tests.kernels_env.hostile_corpus import CASES_BY_ID, leaked
    from tests.kernels_env.isolation_corpus import ISOLATION_CASES
    register_corpus_tasks()
    case = {**CASES_BY_ID, **{c.id: c for c in ISOLATION_CASES}}[case_id]
    t0 = time.monotonic()
    r = score(TASKS[case.task], case.text, case.config(backend))
    secs = time.monotonic() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kids_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # the host compiler
    conn.send({"status": r.status.value, "seconds": secs, "rss_mb": max(rss_mb, kids_mb),
               "leaked": leaked(r.message + "\n" + r.details), "message": r.message[:160]})


def run_case(backend: str, case_id: str, timeout: float) -> dict:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child, args=(child, backend, case_id, timeout))
    t0 = time.monotonic()
    p.start()
    out = None
    if parent.poll(timeout):
        try:
            out = parent.recv()
        except EOFError:
            out = None
    p.join(5)
    if p.is_alive():
        p.kill()
        p.join()
    if out is None:
        out = {"status": "killed" if time.monotonic() - t0 >= timeout else f"crashed({p.exitcode})",
               "seconds": time.monotonic() - t0, "rss_mb": float("nan"), "leaked": [], "message": ""}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("cpu", "cupy"), default="cpu")
    ap.add_argument("--only", default="", help="run cases whose id contains this text")
    ap.add_argument("--case-timeout", type=float, default=120.0)
    ap.add_argument("--json", default="", help="also write the rows to this file")
    args = ap.parse_args(argv)
    from tests.kernels_env.hostile_corpus import CASES
    from tests.kernels_env.isolation_corpus import ISOLATION_CASES
    rows = []
    print(f"{'case':46s} {'cls':3s} {'expected':40s} {'got':14s} {'seconds':>8s} {'peak RSS MB':>11s}")
    for c in (*CASES, *ISOLATION_CASES):
        if args.only and args.only not in c.id:
            continue
        if args.backend not in c.backends:
            continue
        r = run_case(args.backend, c.id, args.case_timeout)
        ok = r["status"] in c.expected and not r["leaked"]
        rows.append({"case": c.id, "class": c.cls, "expected": sorted(c.expected), **r, "ok": ok})
        mark = "" if ok else "  <-- " + (f"leaked {r['leaked']}" if r["leaked"] else r["message"][:80])
        print(f"{c.id:46s} {c.cls:3s} {','.join(sorted(c.expected))[:40]:40s} {r['status']:14s} "
              f"{r['seconds']:8.2f} {r['rss_mb']:11.0f}{mark}", flush=True)
    counts = Counter(r["status"] for r in rows)
    bad = [r["case"] for r in rows if not r["ok"]]
    print(f"\n{len(rows)} cases on {args.backend}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
          + f"; {len(rows) - len(bad)} as expected, {len(bad)} not" + (f": {bad}" if bad else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
