"""benchmarks/clock_check.py and the independent loop it reuses (benchmarks/env_compare.py), on the
CPU: the trace parsing of the profiler clock, the agreement rule, the loop's order of flush, sync,
hold and events (a fake CuPy), and the skip without a GPU."""
from __future__ import annotations

import os
import sys
from typing import Any

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import clock_check, env_compare  # noqa: E402


def _ev(name: str, ts: float, dur: float, cat: str = "kernel") -> dict[str, Any]:
    return {"cat": cat, "name": name, "ts": ts, "dur": dur}


def test_run_windows_counts_only_device_work_between_marker_pairs() -> None:
    m = clock_check.MARK_NAME
    events = [
        _ev("flush_fill", 0, 50), _ev("leap_timing_hold", 60, 30),  # before the first marker: not a run's
        _ev(m, 100, 1), _ev("gemm", 110, 40), _ev("Memset", 200, 10, "gpu_memset"), _ev(m, 300, 1),
        _ev("cpu_op", 150, 500, "cpu_op"),  # host events never count
        _ev("flush_fill", 400, 50),  # between runs
        _ev(m, 500, 1), _ev("axpy", 520, 20), _ev(m, 560, 1),
    ]
    windows = clock_check.run_windows(list(reversed(events)))  # order comes from the timestamps
    assert windows == [pytest.approx((0.050, 0.100)), pytest.approx((0.020, 0.020))]


def test_run_windows_of_a_run_without_device_work_is_zero() -> None:
    m = clock_check.MARK_NAME
    assert clock_check.run_windows([_ev(m, 0, 1), _ev(m, 5, 1)]) == [(0.0, 0.0)]
    assert clock_check.run_windows([]) == []


def test_agreeing_pairs_uses_the_relative_tolerance() -> None:
    s = {"env": 1.92, "event": 7.55, "prof": 2.0}
    assert clock_check.agreeing_pairs(s, 0.10) == ["env=prof"]
    assert clock_check.agreeing_pairs({"env": 1.0, "event": 1.04, "prof": None}, 0.05) == ["env=event"]
    assert clock_check.agreeing_pairs({"env": 1.0, "event": 1.2, "prof": 1.4}, 0.10) == []


def test_speedups_and_render_of_one_row() -> None:
    row = {"task": "conv3d", "env": {"kernel_ms": 2.0, "ref_ms": 4.0},
           "event_kernel_ms": 2.0, "event_ref_ms": 15.0, "ref_host_ms": 13.0,
           "prof_kernel": {"busy_ms": 1.9, "span_ms": 1.9}, "prof_ref": {"busy_ms": 3.9, "span_ms": 14.0}}
    s = clock_check.speedups(row)
    assert s["env"] == pytest.approx(2.0) and s["event"] == pytest.approx(7.5)
    assert s["prof"] == pytest.approx(3.9 / 1.9)
    table = clock_check.render([row, {"task": "relu", "error": "format_error: x"}], 0.10)
    lines = table.splitlines()
    assert lines[0].startswith("| task | env sol ms")
    assert "| 10.1 |" in lines[2] and lines[2].endswith("| env=prof |")  # ref gaps: span - busy
    assert lines[3].startswith("| relu | - |") and lines[-1] == "relu: error: format_error: x"
    assert "hold cap" not in table  # 13 ms of host time: inside the env's hold (cap 50 ms)
    slow = clock_check.render([{**row, "ref_host_ms": 30.0}], 0.10)
    assert "over half the env's hold cap (50 ms)" in slow.splitlines()[-1]  # part of it leaks in


class _FakeCupy:
    """Just what env_compare._events_ms touches; every call appended to `log`."""

    def __init__(self) -> None:
        self.log: list[str] = []
        log = self.log

        class Event:
            def record(self) -> None:
                log.append("record")

        class Device:
            def synchronize(self) -> None:
                log.append("sync")

        class Cuda:
            pass
        self.cuda = Cuda()
        self.cuda.Event = Event  # type: ignore[attr-defined]
        self.cuda.Device = Device  # type: ignore[attr-defined]
        self.cuda.get_elapsed_time = lambda s, e: 1.5  # type: ignore[attr-defined]


class _Flush:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def fill(self, v: int) -> None:
        self.log.append("flush")


def test_events_loop_puts_the_hold_between_the_sync_and_the_start_event() -> None:
    cp = _FakeCupy()
    times = env_compare._events_ms(cp, lambda: cp.log.append("fn"), _Flush(cp.log), 1, 2,
                                   hold=lambda: cp.log.append("hold"))
    assert times == [1.5, 1.5]
    run = ["flush", "sync", "hold", "record", "fn", "record"]
    assert cp.log == ["flush", "sync", "hold", "fn", *run, *run, "sync"]  # the warm-up run records nothing


def test_events_loop_without_flush_or_hold_is_sync_event_fn_event() -> None:
    cp = _FakeCupy()
    env_compare._events_ms(cp, lambda: cp.log.append("fn"), None, 0, 1)
    assert cp.log == ["sync", "record", "fn", "record", "sync"]


def test_hold_for_covers_twice_the_host_time_within_the_cap() -> None:
    held: list[float] = []

    class Dev:
        def _hold(self, seconds: float) -> None:
            held.append(seconds)
    env_compare.hold_for(Dev(), 2.0)()
    env_compare.hold_for(Dev(), 1e6)()
    from kernels_env.backends.cupy_backend import HOLD_MAX_S, HOLD_MIN_S
    assert held == [pytest.approx(4e-3 + HOLD_MIN_S), HOLD_MAX_S]


def test_default_tasks_are_suite_tasks_and_cli_parses() -> None:
    from kernels_env.tasks import list_tasks
    names = {t.name for t in list_tasks()}
    args = clock_check.parse_args([])
    default = args.tasks.split(",")
    assert len(default) == 15 and set(default) <= names
    args = clock_check.parse_args(["--tasks", "conv3d", "--no-l2-flush", "--event-hold", "--ref-impl", "torch"])
    assert (args.tasks, args.no_l2_flush, args.event_hold, args.ref_impl) == ("conv3d", True, True, "torch")


def test_main_without_a_gpu_skips_with_a_message(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(clock_check, "gpu_missing", lambda: "CuPy sees no CUDA GPU")
    assert clock_check.main(["--tasks", "conv3d"]) == 0
    assert capsys.readouterr().out.startswith("clock_check: skipped: CuPy sees no CUDA GPU")


def test_env_hold_covers_the_slowest_suite_reference_launch() -> None:
    """conv3d's reference took 4.7-5.1 ms of host enqueue on the H200: the hold must outlast it twice."""
    from kernels_env.backends.cupy_backend import hold_seconds
    assert hold_seconds(5.1e-3) >= 2 * 5.1e-3


def test_gen_workload_is_rl_shaped_correctness_only_on_generated_tasks():
    """`--workloads gen`: generated training tasks at eval sizes, every job a known-good solution."""
    from kernels_env.tasks.generated import generated_task_names
    tasks, sizes = env_compare.workload_tasks("gen", 5, only=["relu"])  # `only` names suite tasks
    assert sizes == "eval" and [t.name for t in tasks] == generated_task_names(env_compare.GEN_TASKS)[:5]
    rounds = env_compare.workload_rounds("gen", tasks, 2)
    assert [want for r in rounds for _, _, want in r] == ["correct"] * 10


def test_independent_table_shows_which_clock_moved() -> None:
    """A flagged task lists each evaluation's kernel and reference ms beside the independent loop's, so
    a run tells whether the kernel's clock or the reference's disagreed."""
    arm = {"workload": "suite", "arm": "after", "steady_evals_per_s": 6.7, "first_sight_evals_per_s": 3.3,
           "stage_ms_mean": {}, "statuses": {"correct": 4}, "startup_s": 11.0,
           "speedup_median": {"slow": 0.155, "fine": 2.0},
           "clocks_ms": {"slow": [[4.0, 0.34], [1.5, 0.34]], "fine": [[1.0, 2.0], [1.0, 2.0]]}}
    report = {"arms": [arm], "independent": {"slow": {"speedup": 0.225, "kernel_ms": 1.52, "ref_ms": 0.343},
                                             "fine": {"speedup": 2.02, "kernel_ms": 0.99, "ref_ms": 2.0}}}
    text = env_compare.render(report)
    assert "1 of the 2 tasks" in text
    slow_row = next(line for line in text.splitlines() if line.startswith("slow "))
    assert slow_row.split()[4:8] == ["2.75", "1.52", "0.34", "0.343"] and slow_row.endswith("FLAG")
    assert "slow: env kernel / reference ms per evaluation 4 / 0.34, 1.5 / 0.34; independent 1.52 / 0.343" in text
    assert "fine: env kernel" not in text
    assert "after: 1 of 4 evaluations more than 10% off the independent clock (slow #1)" in text


def test_every_arm_counts_its_evaluations_off_the_independent_clock() -> None:
    """The before arm's evaluations are counted too, one by one (a task's median hides one bad of two)."""
    ind = {"a": {"speedup": 0.25, "kernel_ms": 1.5, "ref_ms": 0.375}, "b": {"speedup": 2.0}, "c": {"error": "x"}}
    clocks = {"a": [[4.0, 0.375], [1.5, 0.375], [1.52, 0.375]], "b": [[1.0, 2.0]], "c": [[1.0, 1.0]]}
    assert env_compare.evaluations_off(clocks, ind) == (["a #1"], 4)
    arms = [{"workload": "suite", "arm": arm, "steady_evals_per_s": 1.0, "first_sight_evals_per_s": 1.0,
             "stage_ms_mean": {}, "statuses": {}, "startup_s": 1.0, "speedup_median": {}, "clocks_ms": c}
            for arm, c in (("before", clocks), ("after", {"a": [[1.5, 0.375]]}))]
    text = env_compare.render({"arms": arms, "independent": ind})
    assert "before: 1 of 4 evaluations more than 10% off the independent clock (a #1)" in text
    assert "after: 0 of 1 evaluations more than 10% off the independent clock" in text


def test_independent_table_shows_each_evaluations_spread_of_timed_runs() -> None:
    """5-element entries ([kernel, reference, fastest run, slowest run, runs]) show the kernel's spread:
    a few slowed runs (another context time-slicing) leave the fastest near the independent loop's,
    a slower window moves all of them; 2-element entries of older reports still render."""
    arm = {"workload": "suite", "arm": "after", "steady_evals_per_s": 6.7, "first_sight_evals_per_s": 3.3,
           "stage_ms_mean": {}, "statuses": {"correct": 3}, "startup_s": 11.0,
           "speedup_median": {"matmul_rect": 0.1},
           "clocks_ms": {"matmul_rect": [[4.07, 0.3884, 1.55, 4.3, 40], [1.566, 0.3884, None, None, 40],
                                         [1.5, 0.34]]}}
    report = {"arms": [arm], "independent": {"matmul_rect": {"speedup": 0.25, "kernel_ms": 1.553,
                                                             "ref_ms": 0.3853}}}
    text = env_compare.render(report)
    assert ("  matmul_rect: env kernel / reference ms per evaluation 4.07 / 0.3884 (runs 1.55-4.3 ms, n=40), "
            "1.566 / 0.3884, 1.5 / 0.34; independent 1.553 / 0.3853") in text
    row = next(line for line in text.splitlines() if line.startswith("matmul_rect "))
    assert row.split()[4:8] == ["1.566", "1.553", "0.3884", "0.3853"] and row.endswith("FLAG")
    assert env_compare._clock([2.0, 1.0, 1.9, 2.2, None]) == "2 / 1 (runs 1.9-2.2 ms)"


def test_clock_entry_records_the_spread_and_tolerates_an_older_timing() -> None:
    """run_arm's per-evaluation entry: the spread from this tree's Timing, None from an older
    kernels_env's (the "before" arm) whose Timing has no kernel_min_ms / kernel_max_ms."""
    from types import SimpleNamespace

    from kernels_env.core.result import Timing
    t = Timing("cuda", True, 40, 1.6, 1.9, 0.39, 0.39, 0.24, kernel_min_ms=1.55, kernel_max_ms=4.3,
               flush_median_ms=0.05, launch_late_ms=0.0)
    assert env_compare.clock_entry(t) == [1.6, 0.39, 1.55, 4.3, 40, 0.05, 0.0]
    assert (env_compare._clock(env_compare.clock_entry(t))
            == "1.6 / 0.39 (runs 1.55-4.3 ms, n=40, flush 0.05 ms, launch late 0 ms)")
    old = SimpleNamespace(kernel_median_ms=1.6, ref_median_ms=0.39, runs=40)
    entry = env_compare.clock_entry(old)
    assert entry == [1.6, 0.39, None, None, 40, None, None]
    assert env_compare._clock(entry) == "1.6 / 0.39"


def test_mix_with_one_failing_kind_keeps_the_failing_share() -> None:
    """`--fail-kinds illegal`: the mix's 30% failing jobs, all of that kind (a sticky fault's cost alone)."""
    assert env_compare.fail_shares() == env_compare.FAIL_SHARE
    assert env_compare.fail_shares(["illegal"]) == {"illegal": pytest.approx(0.30)}
    tasks, _ = env_compare.workload_tasks("suite", None)
    rounds = env_compare.workload_rounds("mix", tasks, 4, fail_kinds=["illegal"])
    wants = [want for r in rounds for _, _, want in r]
    assert set(wants) == {"correct", "runtime_error"}
    assert 0.2 < wants.count("runtime_error") / len(wants) < 0.4
    for bad in (["sticky"], ["illegal", "illegal"]):
        with pytest.raises(ValueError, match="expected distinct names from"):
            env_compare.fail_shares(bad)


def test_clocks_apart_names_the_clock_a_speedup_gap_is_in() -> None:
    """An H100 run without the hold: conv3d's kernel agreed (0.62 vs 0.627 ms) and its reference
    did not (1.229 vs 4.08 ms); relu agreed on both."""
    clocks = {"conv3d": [[0.6206, 1.229], [0.619, 1.229]], "relu": [[0.2854, 0.478], [0.29, 0.48]],
              "tanh": [[0.3, 0.5]]}
    independent = {"conv3d": {"kernel_ms": 0.6266, "ref_ms": 4.08}, "relu": {"kernel_ms": 0.2901, "ref_ms": 0.4921},
                   "tanh": {"error": "no solution"}}
    lines = env_compare.clocks_apart(clocks, independent, hold=False)
    assert lines[0] == "which clock: kernel ms more than 10% apart on 0 of 2 tasks, reference ms on 1 (conv3d)"
    assert "without --independent-hold" in lines[1]
    slow_kernel = {**independent, "relu": {"kernel_ms": 0.2, "ref_ms": 0.48}}
    held = env_compare.clocks_apart(clocks, slow_kernel, hold=True)
    assert held == ["which clock: kernel ms more than 10% apart on 1 of 2 tasks (relu), reference ms on 1 (conv3d)"]
    assert env_compare.clocks_apart({}, independent, hold=True) == []
