"""The timing stage's statistics (kernels_env.judge.timing_stats) and its verified runs on the numpy
FakeDevice: cheats that pass the correctness trials must not pass the timed runs (DESIGN 3.3 step 4).
The same cheats as real CUDA code run on the cpu and cupy backends in test_timing_cheats.py."""
from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pytest

from kernels_env.core.config import TIMING_TRIAL_BASE, EnvConfig
from kernels_env.core.program import Name, ScratchDecl, Num
from kernels_env.core.status import Status
from kernels_env.execute import timing_stage
from kernels_env.judge.timing_stats import SLOWDOWN_MARGIN, Plan, ci_rel_width, median_ci, next_batch
from tests.kernels_env.test_harness import (ADD_SIG, ADD_SUB, FAST, add_kernel, add_task, device_with, launch,
                                            ptr, run, submission, val)
from kernels_env.core.program import KernelSignature


# ---- statistics ---------------------------------------------------------------------------------
def test_median_ci_uses_binomial_order_statistics():
    xs = list(range(1, 11))  # n = 10: P(Bin(10, 1/2) <= 1) = 1.07% <= 2.5% < P(<= 2) = 5.5%
    assert median_ci(xs) == (2, 9)
    assert median_ci([5.0] * 3) == (5.0, 5.0)  # too few for 95%: the range
    assert median_ci([3.0, 1.0, 2.0]) == (1.0, 3.0)
    lo, hi = median_ci(list(range(5000)))  # normal approximation: about +-69 ranks around 2500
    assert 2420 < lo < 2440 and 2560 < hi < 2580
    with pytest.raises(ValueError, match="no samples"):
        median_ci([])


def test_ci_rel_width():
    assert ci_rel_width([1.0] * 20) == 0.0
    assert ci_rel_width([1.0, 2.0, 3.0]) == pytest.approx(1.0)
    assert ci_rel_width([0.0, 0.0, 1.0]) == math.inf


def plan(**kw) -> Plan:
    base = dict(timed=0, warmup_left=2, per_run_s=0.001, allowance_s=30.0, budget_left_s=1.0, min_runs=10,
                max_runs=500, max_batch=64)
    return Plan(**{**base, **kw})


def test_next_batch_reaches_the_minimum_then_grows_within_the_budget():
    assert next_batch(plan()) == (2, 10)
    assert next_batch(plan(timed=10, warmup_left=0)) == (0, 5)
    assert next_batch(plan(timed=100, warmup_left=0)) == (0, 50)
    assert next_batch(plan(timed=100, warmup_left=0, max_batch=16)) == (0, 16)
    assert next_batch(plan(timed=498, warmup_left=0)) == (0, 2)
    assert next_batch(plan(timed=500, warmup_left=0)) == (0, 0)
    assert next_batch(plan(timed=10, warmup_left=0, budget_left_s=0.0)) == (0, 0)  # budget spent


def test_next_batch_of_a_slow_kernel_drops_the_warmup_and_takes_what_fits():
    # a batch must end inside 90% of the allowance left even at 4x the predicted time per run
    assert SLOWDOWN_MARGIN == 4.0
    assert next_batch(plan(per_run_s=1.0, allowance_s=10.0)) == (0, 2)  # 2 runs: 8 s at 4x
    assert next_batch(plan(per_run_s=1.0, allowance_s=14.0)) == (2, 1)  # 3 fit at 4x: 2 warm-up + 1
    assert next_batch(plan(per_run_s=1.0, allowance_s=5.0)) == (0, 1)
    assert next_batch(plan(per_run_s=1.0, allowance_s=4.0)) == (0, 0)  # 1 run could take 4 s: the probe stands
    assert next_batch(plan(per_run_s=1.0, allowance_s=1.5)) == (0, 0)
    # below the minimum the adaptive budget does not stop it; the stage allowance does
    assert next_batch(plan(per_run_s=0.5, budget_left_s=-3.0, warmup_left=0, allowance_s=30.0)) == (0, 10)
    assert next_batch(plan(per_run_s=0.5, budget_left_s=-3.0, warmup_left=0, allowance_s=10.0)) == (0, 4)


def test_a_batch_planned_by_next_batch_ends_inside_the_stage_at_4x_slowdown():
    """The busy-machine failure: runs 2.5x (here up to 4x) slower than the probe predicted must not
    push a batch past the allowance (the stage's deadline: a timeout for a correct kernel)."""
    for per_run in (0.05, 0.3, 1.0, 2.5):
        for allowance in (1.0, 3.0, 7.0, 30.0):
            for timed in (0, 3, 10, 40):
                p = plan(timed=timed, per_run_s=per_run, allowance_s=allowance, budget_left_s=100.0)
                w, n = next_batch(p)
                assert (w + n) * per_run * SLOWDOWN_MARGIN <= allowance, (p, w, n)


def test_config_validation_names_the_bad_value():
    for bad in (dict(timed_runs=0), dict(min_timed_runs=0), dict(warmup_runs=-1),
                dict(timing_ci_rel_width=0.0), dict(timing_ci_rel_width=1.5), dict(timing_budget_s=0)):
        (name, value), = bad.items()
        with pytest.raises(ValueError, match=f"{name}={value}"):
            EnvConfig(**bad)
    assert EnvConfig(timed_runs=3).timing_min_runs == 3


# ---- verified runs on the FakeDevice --------------------------------------------------------------
def test_timed_runs_get_fresh_inputs_every_run():
    seen = []

    def recording(grid, block, shared, a, b, y, n):
        seen.append(float(a[0]))
        add_kernel(grid, block, shared, a, b, y, n)

    res = run(device_with(add=recording), add_task(), ADD_SUB)
    assert res.status is Status.CORRECT, res.message
    assert len(set(seen)) == len(seen)  # every launch, trial or timed run, saw new inputs


def test_work_skipped_in_timed_runs_is_wrong_output():
    calls = []

    def counting(grid, block, shared, a, b, y, n):  # a launch counter: work only in the 5 trials
        calls.append(1)
        if len(calls) <= FAST.correctness_trials:
            add_kernel(grid, block, shared, a, b, y, n)

    res = run(device_with(add=(counting, 0.01)), add_task(), ADD_SUB)
    assert res.status is Status.WRONG_OUTPUT and res.timing is None
    assert "timed runs disagreed with the verified runs" in res.message and "unwritten" in res.message
    assert res.mismatch.reason == "unwritten" and res.mismatch.trial == TIMING_TRIAL_BASE


def test_memoising_on_the_input_pointer_is_wrong_output():
    memo: dict[int, np.ndarray] = {}
    calls = []

    def by_pointer(grid, block, shared, a, b, y, n):  # computes in the trials (new buffers each), then
        calls.append(1)                                # trusts its memo of what was at that address
        key = a.ctypes.data
        if key not in memo or len(calls) <= FAST.correctness_trials + 1:
            add_kernel(grid, block, shared, a, b, y, n)
            memo[key] = y.copy()
        y[:] = memo[key]

    res = run(device_with(add=(by_pointer, 0.01)), add_task(), ADD_SUB)
    assert res.status is Status.WRONG_OUTPUT and "timed runs disagreed" in res.message, res.message
    assert res.mismatch.reason == "mismatch" and res.mismatch.trial >= TIMING_TRIAL_BASE


@pytest.mark.parametrize("attack", ["repair", "tamper"])
def test_a_kernel_that_repairs_or_tampers_with_the_kept_copy_of_a_run_is_caught(monkeypatch, attack):
    """A kernel that skips the work of most timed runs (writing a marker, not the poison, so the
    device-side counts pass) and, on every run, searches memory for the copy of an earlier run kept
    for the full comparison after the batch: `repair` writes the right outputs into a copy that holds
    its marker (with plain device copies, as before, this earned `correct` and a 100x speedup on
    runs it skipped), `tamper` overwrites whatever kept data it finds. The copies are masked under a
    host-held key with a host-held checksum: the repair finds nothing it recognises (wrong_output),
    the tampering is detected (runtime_error)."""
    import sys

    from kernels_env.execute import timing_stage
    from kernels_env.judge.expected_cache import MaskedOutput
    from kernels_env.testing.fake_device import FakeDevice

    marker = np.float32(12345.0)
    dev = FakeDevice(reference_ms=1.0)

    def kept_on_the_stack(y):
        """What a GPU kernel could find by scanning device memory: array dicts of a run other than
        the live one, and the device data of masked copies (host objects stay out of reach)."""
        frame = sys._getframe(2)
        while frame is not None:
            for value in list(frame.f_locals.values()):
                inner = list(value.values()) if isinstance(value, dict) else []
                for holder in [value, *inner, *(x for v in inner if isinstance(v, list) for x in v)]:
                    if isinstance(holder, MaskedOutput):
                        yield holder.data
                    elif (isinstance(holder, dict) and {"a", "b", "y"} <= set(holder) and holder["y"] is not y
                            and isinstance(holder["y"], np.ndarray)):
                        yield holder
            frame = frame.f_back

    def cheating(grid, block, shared, a, b, y, n):
        for found in kept_on_the_stack(y):
            if isinstance(found, dict) and bool(np.all(found["y"] == marker)):  # a plain copy: repair it
                found["y"][...] = found["a"] + found["b"]
            elif attack == "tamper" and isinstance(found, np.ndarray):
                found[...] = 0
        timed = len(dev.launches) - dev.untimed  # this launch's number in the kernel's timing (1: the probe)
        if not dev.in_stage or timed in (1, 12):  # honest: trials, the probe, the stage's last run
            add_kernel(grid, block, shared, a, b, y, n)
        else:
            y[...] = marker

    dev.register("add", cheating, 0.01)
    dev.in_stage, dev.untimed = False, 0
    original = timing_stage.TimingStage._time_kernel

    def marking(self, *args):  # launches before the kernel's timing are the correctness trials'
        dev.in_stage, dev.untimed = True, len(dev.launches)
        try:
            return original(self, *args)
        finally:
            dev.in_stage = False

    monkeypatch.setattr(timing_stage.TimingStage, "_time_kernel", marking)
    monkeypatch.setattr(timing_stage.secrets, "randbelow", lambda n: n // 2)  # a skipped run is picked
    res = run(dev, add_task(), ADD_SUB)
    assert "timed runs disagreed" in res.message, res.message
    if attack == "repair":
        assert res.status is Status.WRONG_OUTPUT and res.mismatch.reason == "mismatch", res.message
    else:
        assert res.status is Status.RUNTIME_ERROR and "masked copy" in res.message, res.message


def test_memoising_on_input_content_gains_nothing():
    memo: dict[bytes, np.ndarray] = {}
    computed = []

    def by_content(grid, block, shared, a, b, y, n):
        key = a.tobytes() + b.tobytes()
        if key not in memo:
            computed.append(1)
            add_kernel(grid, block, shared, a, b, y, n)
            memo[key] = y.copy()
        y[:] = memo[key]

    res = run(device_with(add=by_content), add_task(), ADD_SUB)
    assert res.status is Status.CORRECT and len(computed) == len(memo)  # every run computed anew


def test_scratch_is_zeroed_before_every_timed_run():
    fresh = []

    def uses_scratch(grid, block, shared, a, b, y, n, s):
        fresh.append(bool((s == 0).all()))
        s[:] = 1
        add_kernel(grid, block, shared, a, b, y, n)

    sig = KernelSignature("add", (*ADD_SIG.params, ptr("s")))
    sub = submission([launch("add", (Name("a"), Name("b"), Name("y"), Name("N"), Name("s")))], [sig],
                     scratch=[ScratchDecl("s", "float32", Num(16), 1)])
    res = run(device_with(add=uses_scratch), add_task(), sub)
    assert res.status is Status.CORRECT and all(fresh) and len(fresh) > FAST.correctness_trials


def test_a_write_past_the_output_only_in_timed_runs_is_a_runtime_error():
    calls = []

    def late_oob(grid, block, shared, a, b, y, n):
        calls.append(1)
        add_kernel(grid, block, shared, a, b, y, n)
        if len(calls) > FAST.correctness_trials:
            y.base[y.size] = 0.0

    res = run(device_with(add=late_oob), add_task(), ADD_SUB)
    assert res.status is Status.RUNTIME_ERROR and "timed runs disagreed" in res.message
    assert "wrote outside output 'y'" in res.message


def test_int_outputs_are_checked_for_the_sentinel():
    task = add_task("int32")
    sig = KernelSignature("add", (ptr("a", "int", True), ptr("b", "int", True), ptr("y", "int"), val("n")))
    calls = []

    def counting(grid, block, shared, a, b, y, n):
        calls.append(1)
        if len(calls) <= FAST.correctness_trials:
            add_kernel(grid, block, shared, a, b, y, n)

    sub = submission([launch("add", (Name("a"), Name("b"), Name("y"), Name("N")))], [sig])
    assert run(device_with(add=add_kernel), task, sub).status is Status.CORRECT
    res = run(device_with(add=counting), task, sub)
    assert res.status is Status.WRONG_OUTPUT and res.mismatch.reason == "unwritten"


# ---- the spread of the timed runs ------------------------------------------------------------------
def test_timing_records_the_fastest_and_slowest_timed_kernel_run():
    """kernel_min_ms / kernel_max_ms are the extremes of the same timed runs the median comes from
    (not the probe's, the warm-up's or the reference's), so a uniformly slower window (all runs
    slow) can be told from one where only some runs were slowed."""
    from kernels_env.testing.fake_device import FakeDevice

    class Jittery(FakeDevice):
        """Every kernel run's fake time scaled by a factor cycling over 1, 1.5, ..., 4."""
        def time_runs(self, prepare, fn, check, warmup, runs, flush_l2, timeout_s=None):
            before = len(self.launches)
            times = super().time_runs(prepare, fn, check, warmup, runs, flush_l2)
            if len(self.launches) == before:  # the reference launches no kernel
                return times
            seen = sum(map(len, self.kernel_calls))
            times = [t * (1 + 0.5 * ((seen + i) % 7)) for i, t in enumerate(times)]
            self.kernel_calls.append(times)
            return times

    dev = Jittery(reference_ms=1.0)
    dev.kernel_calls = []
    dev.register("add", add_kernel, 0.25)
    res = run(dev, add_task(), ADD_SUB)
    assert res.status is Status.CORRECT, res.message
    t = res.timing
    timed = [ms for call in dev.kernel_calls[1:] for ms in call]  # the first call is the probe
    assert t.runs == len(timed) >= FAST.min_timed_runs
    assert t.kernel_min_ms == min(timed) == pytest.approx(0.25)
    assert t.kernel_max_ms == max(timed) == pytest.approx(1.0)
    assert t.kernel_min_ms <= t.kernel_median_ms <= t.kernel_max_ms
    assert t.kernel_median_ms == pytest.approx(statistics.median(timed))
    assert isinstance(t.kernel_min_ms, float) and isinstance(t.kernel_max_ms, float)


def test_timing_spread_round_trips_and_keeps_the_older_fields_positions():
    from kernels_env.core.result import Result, Timing
    t = Timing("cuda", True, 40, 1.6, 1.9, 0.39, 0.39, 0.24, kernel_ci_ms=[1.55, 1.7], ci_rel_width=0.09,
               kernel_min_ms=1.55, kernel_max_ms=4.3)
    assert (t.device, t.runs, t.kernel_median_ms, t.speedup) == ("cuda", 40, 1.6, 0.24)
    back = Result.from_dict(json.loads(json.dumps(Result(Status.CORRECT, timing=t).to_dict()))).timing
    assert back == t and (back.kernel_min_ms, back.kernel_max_ms) == (1.55, 4.3)
    old = Result(Status.CORRECT, timing=Timing("cuda", True, 10, 0.5, 0.5)).to_dict()
    for key in ("kernel_min_ms", "kernel_max_ms"):  # a Result serialised before the fields existed
        del old["timing"][key]
    back = Result.from_dict(old).timing
    assert back.kernel_min_ms is None and back.kernel_max_ms is None and back.kernel_median_ms == 0.5


def test_the_reference_is_measured_before_and_after_the_candidate_at_first_sight_then_cached():
    """What a candidate leaves behind (a GPU it heated or power-throttled) must not slow the
    reference's number, which every later speedup of the task divides by: its first measurement comes
    before any timed run of the candidate, a second one after them (apart in time from the first),
    and the lower median counts. Later evaluations reuse both."""
    from kernels_env.execute.timing_stage import REFERENCE_OPINIONS
    from kernels_env.testing.fake_device import FakeDevice

    class Recording(FakeDevice):
        def time_runs(self, prepare, fn, check, warmup, runs, flush_l2, timeout_s=None):
            before = len(self.launches)
            times = super().time_runs(prepare, fn, check, warmup, runs, flush_l2)
            self.order.append("kernel" if len(self.launches) > before else "reference")
            return times

    assert REFERENCE_OPINIONS == 2
    dev = Recording(reference_ms=1.0)
    dev.order = []
    dev.register("add", add_kernel, 0.25)
    first = run(dev, add_task(), ADD_SUB)
    assert first.status is Status.CORRECT and first.timing.speedup == pytest.approx(4.0), first.message
    kinds = dev.order  # batches: the probe, then the rest, of each measurement
    k0, k1 = kinds.index("kernel"), len(kinds) - 1 - kinds[::-1].index("kernel")
    assert set(kinds[:k0]) == {"reference"} and set(kinds[k0:k1 + 1]) == {"kernel"}, kinds
    assert kinds[k1 + 1:] and set(kinds[k1 + 1:]) == {"reference"}, kinds
    dev.order = []
    again = run(dev, add_task(), ADD_SUB)
    assert again.status is Status.CORRECT and again.timing.speedup == pytest.approx(4.0)
    assert dev.order and set(dev.order) == {"kernel"}  # the cached numbers: no third measurement


def test_a_slow_window_in_one_reference_measurement_does_not_inflate_speedups():
    """One reference measurement read 2x high on the H200 (something slowed that window), and every
    later speedup of the task on the GPU divided by it. With two measurements apart in time the lower
    median counts: the first evaluation and the later ones report the true speedup."""
    from kernels_env.execute.timing_stage import TIMING_METHOD
    from kernels_env.testing.fake_device import FakeDevice

    class SlowFirstReference(FakeDevice):
        def time_runs(self, prepare, fn, check, warmup, runs, flush_l2, timeout_s=None):
            before = len(self.launches)
            times = super().time_runs(prepare, fn, check, warmup, runs, flush_l2)
            if len(self.launches) == before:  # the reference: its first measurement's batches read 2x
                self.ref_batches += 1
                if self.ref_batches <= 2:
                    times = [2.0 * t for t in times]
            return times

    dev = SlowFirstReference(reference_ms=1.0)
    dev.ref_batches = 0
    dev.register("add", add_kernel, 0.25)
    for _ in range(2):
        res = run(dev, add_task(), ADD_SUB)
        assert res.status is Status.CORRECT, res.message
        assert res.timing.speedup == pytest.approx(4.0) and res.timing.ref_median_ms == pytest.approx(1.0)
        assert res.timing.method == TIMING_METHOD == "verified-adaptive-median/v3"
    # a worker seeded with both measurements (the pool passes them on) measures neither again
    from kernels_env.judge import reference_cache
    fresh = SlowFirstReference(reference_ms=1.0)
    fresh.ref_batches = 0
    fresh.register("add", add_kernel, 0.25)
    reference_cache.seed(fresh, dict(reference_cache.cache_of(dev)))
    res = run(fresh, add_task(), ADD_SUB)
    assert res.timing.speedup == pytest.approx(4.0) and fresh.ref_batches == 0



def test_the_kept_outputs_come_back_in_the_outputs_own_dtype(monkeypatch):
    """The masked copy stores int outputs as int64 (the expected cache's normal form); the comparison
    must get the output's own dtype back (on a GPU the fused check reads the buffer as that dtype)."""
    from kernels_env.execute import harness
    from tests.kernels_env.test_harness import KernelSignature, launch, ptr, submission, val

    sig = KernelSignature("add", (ptr("a", "int", const=True), ptr("b", "int", const=True), ptr("y", "int"), val("n")))
    sub = submission([launch("add", (Name("a"), Name("b"), Name("y"), Name("N")))], [sig])
    seen = []
    original = harness._Run.verify_outputs

    def spy(self, arrays, pristine, trial, seed, prefix):
        seen.append((trial, str(arrays["y"].dtype)))
        return original(self, arrays, pristine, trial, seed, prefix)

    monkeypatch.setattr(harness._Run, "verify_outputs", spy)
    res = run(device_with(add=(add_kernel, 0.25)), add_task("int32"), sub)
    assert res.status is Status.CORRECT, res.message
    timed = [dtype for trial, dtype in seen if trial >= TIMING_TRIAL_BASE]
    assert len(timed) >= 2 and set(timed) == {"int32"}, seen


def _record_lock_modes(monkeypatch):
    """Patch the harness's GPU lock and the timing stage's steps: a list of (step, lock mode held)."""
    import contextlib
    from kernels_env.execute import harness
    held: list[str] = []
    calls: list[tuple[str, str]] = []

    @contextlib.contextmanager
    def access(device, exclusive):
        held.append("exclusive" if exclusive else "shared")
        try:
            yield
        finally:
            held.pop()

    monkeypatch.setattr(harness, "gpu_access", access)
    for name in ("_time_runs", "_verify_run", "_verify_kept"):
        original = getattr(timing_stage.TimingStage, name)

        def wrapped(self, *args, _name=name, _original=original, **kw):
            calls.append((_name, held[-1] if held else "none"))
            return _original(self, *args, **kw)
        monkeypatch.setattr(timing_stage.TimingStage, name, wrapped)
    return calls


def test_full_comparisons_run_after_the_timed_runs_under_the_shared_lock(monkeypatch):
    """The timed runs hold the GPU alone; their full comparisons with the reference (the kept copies
    and the last run) need it but time nothing, so they wait until the measurement is done and run
    next to other workers' trials (the shared lock)."""
    calls = _record_lock_modes(monkeypatch)
    res = run(device_with(add=add_kernel), add_task(), ADD_SUB)
    assert res.status is Status.CORRECT, res.message
    timed = [mode for step, mode in calls if step == "_time_runs"]
    verified = [i for i, (step, _) in enumerate(calls) if step != "_time_runs"]
    assert timed and set(timed) == {"exclusive"}
    # every full comparison ends in _verify_run (a kept copy's through _verify_kept): the probe's run,
    # each batch's pick and the last run
    assert sum(step == "_verify_run" for step, _ in calls) == res.timing.verified_runs >= 2
    assert {calls[i][1] for i in verified} == {"shared"}
    assert min(verified) > max(i for i, (step, _) in enumerate(calls) if step == "_time_runs")


def test_kept_copies_past_the_deferral_budget_are_compared_at_once(monkeypatch):
    """With no room to hold kept copies, each batch's copy is compared right after its batch, still
    inside the measurement; only the last run's comparison (live buffers, no copy) waits."""
    monkeypatch.setattr(timing_stage, "DEFER_BYTES", 0)
    # each batch compares its first run in full, so the stage's last run is left for the live check
    # (a random pick of a batch's last run would leave none)
    monkeypatch.setattr(timing_stage.secrets, "randbelow", lambda n: 0)
    calls = _record_lock_modes(monkeypatch)
    res = run(device_with(add=add_kernel), add_task(), ADD_SUB)
    assert res.status is Status.CORRECT, res.message
    assert {mode for step, mode in calls if step == "_verify_kept"} == {"exclusive"}
    assert [mode for step, mode in calls if step == "_verify_run"][-1] == "shared"


def test_the_deferral_budget_holds_the_copies_that_fit_and_compares_the_rest_at_once(monkeypatch):
    """With room for one kept copy, the first batch's copy waits for `verify` (shared lock) and every
    later batch's is compared inside the measurement; the held bytes never pass the budget."""
    sizes: list[int] = []
    original = timing_stage.TimingStage._defer_kept

    def defer(self, kept, index):
        sizes.append(sum(int(k.nbytes) for k in kept))
        original(self, kept, index)
        held = sum(int(k.nbytes) for copies, _ in self.kept for k in copies)
        assert self.kept_bytes == held <= timing_stage.DEFER_BYTES

    monkeypatch.setattr(timing_stage.TimingStage, "_defer_kept", defer)
    res = run(device_with(add=add_kernel), add_task(), ADD_SUB)  # the copies' size, every batch alike
    assert res.status is Status.CORRECT, res.message
    assert len(set(sizes)) == 1 and sizes[0] > 0
    monkeypatch.setattr(timing_stage, "DEFER_BYTES", sizes[0])
    monkeypatch.setattr(timing_stage.secrets, "randbelow", lambda n: 0)  # the last run stays for verify
    sizes.clear()
    calls = _record_lock_modes(monkeypatch)
    res = run(device_with(add=add_kernel), add_task(), ADD_SUB)
    assert res.status is Status.CORRECT, res.message
    modes = [mode for step, mode in calls if step == "_verify_kept"]
    assert len(sizes) >= 2 and len(modes) == len(sizes)
    # the later batches' copies are compared during the measurement, the held one after it
    assert modes == ["exclusive"] * (len(sizes) - 1) + ["shared"]


@pytest.mark.parametrize("defer_bytes", [0, timing_stage.DEFER_BYTES])
def test_a_skipped_timed_run_fails_whether_its_comparison_waits_or_not(monkeypatch, defer_bytes):
    """A kernel that does the work only in the correctness trials, the probe and the stage's last run
    is caught by a batch's kept copy, compared at once or after the measurement."""
    monkeypatch.setattr(timing_stage, "DEFER_BYTES", defer_bytes)
    monkeypatch.setattr(timing_stage.secrets, "randbelow", lambda n: n // 2)
    dev = device_with(add=add_kernel)
    state = {"launches": 0}

    def lazy(grid, block, shared, a, b, y, n):
        state["launches"] += 1
        if state["launches"] <= FAST.correctness_trials + 1:  # the trials and the timing probe
            add_kernel(grid, block, shared, a, b, y, n)
        else:
            y[...] = 2.0 * y  # leaves the poison scaled: unwritten looks written, values wrong
    dev.register("add", lazy, 0.01)
    res = run(dev, add_task(), ADD_SUB)
    assert res.status is not Status.CORRECT and "timed runs disagreed" in res.message, res.message
