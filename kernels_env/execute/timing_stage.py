"""The timing stage of an evaluation (DESIGN 3.3.1): the plan and the reference, timed adaptively.

`TimingStage` times the whole launch plan on verified runs: every run gets fresh inputs, poisoned
outputs and guards, zeroed scratch (`_TimedBuffers`), device-side counts of surviving poison and
changed guards, and a copy of its outputs at SAMPLED_ELEMENTS secret positions (all of a smaller
output); one run per batch (picked with `secrets`; its outputs kept masked) plus the last is compared
in full with the reference, and every other run's sampled elements with the reference's for its
inputs: a kernel that skips its work (or writes anything but its outputs) in any run is caught, not
just in the runs it cannot know are compared. Batches follow `judge/timing_stats.py` until the median is
known well enough. `TimingStage.measure` runs the timed runs (the caller holds the GPU alone);
`TimingStage.verify` then makes the full comparisons, which need the GPU but not alone (the harness
runs them under the shared lock, so other workers' trials proceed): regenerating a run's inputs and
computing its reference is most of a comparison's cost and none of the measurement. Kept copies
wait for `verify` up to DEFER_BYTES; past that a batch's copy is compared right after its batch.
The reference (and torch eager, informational) is timed the same way, trusted, and cached per
device, task, sizes and timing settings (judge/reference_cache.py `cache_of(device)`; the pool
shares a worker's numbers with every worker of its GPU). The reference gets REFERENCE_OPINIONS
independent measurements, at its first sight before and after the candidate's, and its time is the
lowest of their medians: one window that something slowed down (it happened: a 2x reading on the
H200) would otherwise inflate every later speedup of the task on that GPU; nothing makes a
reference faster than it is.
"""
from __future__ import annotations

import secrets
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from kernels_env.backends.base import (Device, KernelRuntimeError, KernelTimeout, Program,
                                       launches_xp_arrays)
from kernels_env.core.config import TIMING_TRIAL_BASE, EnvConfig
from kernels_env.core.result import Mismatch, Result, Timing
from kernels_env.core.status import Status
from kernels_env.execute.buffers import alloc_poisoned, fill_poison
from kernels_env.execute import domain_draws
from kernels_env.execute.inputs import describe_distributions
from kernels_env.execute.launching import launch_all, takes_timeout
from kernels_env.judge import expected_cache, reference_cache
from kernels_env.judge.compare import compare_output, mismatch_message
from kernels_env.judge.faults import EnvFault, Failed, stage_outcome
from kernels_env.judge.poison import poison_count
from kernels_env.judge.timing_stats import Plan, ci_rel_width, median_ci, next_batch
from kernels_env.source.launch import ResolvedPlan
from kernels_env.tasks.spec import Task

# Timing run r draws the inputs of trial TIMING_TRIAL_BASE + r (never a correctness trial's, always
# the typical draw: execute/domain_draws.py); the reference's cache key names TIMING_METHOD (numbers
# of another method are not comparable); a time_runs call enqueues at most MAX_BATCH_RUNS runs; a
# slow reference may use 1 - KERNEL_SHARE of the stage time when it is measured (before the kernel).
TIMING_METHOD = "verified-adaptive-median/v3"
MAX_BATCH_RUNS = 64
DEFER_BYTES = 512 << 20  # kept outputs held for TimingStage.verify at most (the rest compared at once)
KERNEL_SHARE = 0.5
REFERENCE_OPINIONS = 2
# Output elements of every timed run compared with the reference (positions secret, fresh per stage):
# a run that computes less than all of them is caught unless it is wrong in under ~1/SAMPLED_ELEMENTS
# of its outputs, a kernel no faster for it.
SAMPLED_ELEMENTS = 1024


class Evaluation(Protocol):
    """What the timing stage needs of the evaluation it times (`harness._Run`)."""
    device: Device
    program: Program
    task: Task
    plan: ResolvedPlan
    sizes: dict[str, int]
    config: EnvConfig
    seed: int  # the evaluation's draws (execute/inputs.evaluation_seed)
    xp: Any
    stage: str
    stage_seconds: dict[str, float]

    def result(self, status: Status, message: str, **kw: Any) -> Result: ...

    def device_failure(self, e: Exception, stage: str) -> Result: ...

    def trial_inputs(self, trial: int, seed: int, out: dict[str, Any] | None = None) -> dict[str, Any]: ...

    def verify_outputs(self, arrays: dict[str, Any], pristine: dict[str, Any], trial: int, seed: int,
                       prefix: str) -> None: ...

    def expected_outputs(self, trial: int, seed: int, pristine: dict[str, Any]) -> list[Any]: ...

    def scrub_expected(self, expected: list[Any], pristine: dict[str, Any] | None = None) -> None: ...


class TimingStage:
    """The timing stage of one evaluation (DESIGN 3.3 step 4): the plan timed adaptively on verified
    runs (fresh inputs every run, outputs checked) and the reference. `measure` (a Result when a
    timed run fails or hangs), then, unless it returned a Result, `verify`."""

    def __init__(self, run: Evaluation) -> None:
        self.run = run
        self.device, self.program, self.task, self.plan = run.device, run.program, run.task, run.plan
        self.sizes, self.config, self.xp = run.sizes, run.config, run.xp
        self.kept: list[tuple[list[Any], int]] = []  # (kept outputs, run index) left for `verify`
        self.kept_bytes = 0  # what `kept` holds
        self.last: int | None = None  # the last run, compared by `verify` on the live buffers
        self.sampled: dict[int, list[Any]] = {}  # run index -> its outputs' sampled elements (host arrays)
        self.compared: set[int] = set()  # runs compared in full already (their samples need no check)
        self.buffers: _TimedBuffers | None = None
        self.torch_ms: dict[str, Any] | None = None  # a problem task's torch run times (eager_ms, compile_ms)

    def verify(self) -> Result | None:
        """The measured runs' comparisons with the reference (kept copies in full, every other run's
        sampled elements, then the last run in full on the live buffers): None when all agree, else
        the failing Result. Counted in the timing stage's seconds."""
        start = time.monotonic()

        def compare() -> None:
            for kept, index in self.kept:
                self._verify_kept(kept, index)
            full = self.compared | ({self.last} if self.last is not None else set())
            if self.buffers is not None:
                for index, rows in sorted(self.sampled.items()):
                    if index not in full:
                        self._verify_sampled(self.buffers, rows, index)
            if self.last is not None and self.buffers is not None:
                self._verify_run(self.buffers.arrays, self.last)

        try:
            return stage_outcome(self.run, "timing", compare)
        finally:
            self.kept, self.kept_bytes, self.last, self.buffers = [], 0, None, None
            self.sampled, self.compared = {}, set()
            self.run.stage_seconds["timing"] = self.run.stage_seconds.get("timing", 0.0) + time.monotonic() - start

    def measure(self) -> Timing | Result:
        """The timed runs and the reference's timing; the run's stage name and stage seconds updated.
        The full comparisons are left for `verify`."""
        cfg, dev, run = self.config, self.device, self.run
        run.stage = "timing"
        start = time.monotonic()
        deadline = start + cfg.limits.timing
        # a problem task's reference is a torch Model: it is timed in torch, eager and compiled
        torch_times = getattr(self.task.reference, "torch_times", None) if dev.timing_comparable else None

        def timed() -> tuple[_Measured, list[float] | None]:
            buffers = self.buffers = _TimedBuffers(self)
            # The reference first (once per worker and task: cached), before any timed run of the
            # candidate, so what the candidate leaves behind (a GPU it heated or power-throttled)
            # cannot slow the reference's one measurement and inflate every later speedup of the task;
            # a slow reference leaves the kernel its share of the stage
            ref_ms = (self._reference_times(deadline, 1.0 - KERNEL_SHARE)
                      if dev.timing_comparable and torch_times is None else None)
            kernel = self._time_kernel(buffers, deadline, 1.0)
            if torch_times is not None:
                self.torch_ms = torch_times(self.run.trial_inputs(TIMING_TRIAL_BASE, self.run.seed), cfg.timing_budget_s,
                                            getattr(dev, "flush_bytes", 0) if cfg.flush_l2 else 0)
            if ref_ms is not None and len(self._reference_opinions()) < REFERENCE_OPINIONS:
                # another opinion, apart in time from the first (the candidate's runs between them)
                ref_ms = self._reference_times(deadline, 1.0, another=True)
            return kernel, ref_ms

        try:
            outcome = stage_outcome(run, "timing", timed)
        finally:
            run.stage_seconds["timing"] = time.monotonic() - start
        if isinstance(outcome, Result):
            return outcome
        kernel, ref_ms = outcome
        timing = _make_timing(dev, kernel, ref_ms)
        if ref_ms is not None:
            timing.baseline = self._torch_baseline(deadline, timing.kernel_median_ms)
        if self.torch_ms is not None:
            _against_torch(timing, self.torch_ms)
        return timing

    def _time_runs(self, prepare: Callable[[int], Any], fn: Callable[[Any], None],
                   check: Callable[[int, Any], None], warmup: int, runs: int, deadline: float) -> list[float]:
        """device.time_runs with the stage's remaining time as its hang limit (where accepted)."""
        dev, flush = self.device, self.config.flush_l2
        if takes_timeout(type(dev), "time_runs"):
            times = dev.time_runs(prepare, fn, check, warmup, runs, flush,
                                  timeout_s=max(0.0, deadline - time.monotonic()))
        else:
            times = dev.time_runs(prepare, fn, check, warmup, runs, flush)
        return [float(t) for t in times]

    def _time_kernel(self, buffers: _TimedBuffers, deadline: float, share: float) -> _Measured:
        """The kernel's adaptive timing on verified runs; raises Failed when a run is caught."""
        measured = _Measured()
        dev = self.device

        def batch(first: int, warmup: int, runs: int) -> list[float]:
            n = warmup + runs
            counts = dev.zeros((n, len(buffers.checks)), "int64")
            samples = buffers.sample_rows(n)
            pick = secrets.randbelow(n)  # unpredictable: which run of the batch is compared in full
            snaps: dict[int, list[Any]] = {}

            def check(i: int, arrays: dict[str, Any]) -> None:
                buffers.count_into(counts[i])
                buffers.sample_into(samples, i)
                if i == pick:
                    snaps[first + i] = buffers.keep_outputs()

            times = self._time_runs(lambda i: buffers.load(first + i),
                                    lambda arrays: launch_all(dev, self.program, self.plan, arrays, None),
                                    check, warmup, runs, deadline)
            self._verify_counts(buffers, first, dev.to_host(counts))
            host = [np.asarray(dev.to_host(s)) for s in samples]
            self.sampled.update({first + i: [h[i] for h in host] for i in range(n)})
            for index, snap in snaps.items():
                self._defer_kept(snap, index)
            last = getattr(dev, "last_timing", {})
            measured.flush_ms += last.get("flush_ms", [])
            measured.late_ms += last.get("late_ms", [])
            measured.checked += n
            measured.verified += len(snaps)
            measured.last = first + n - 1 if first + n - 1 not in snaps else -1
            return times

        measured.times, measured.warmup = self._adaptive(batch, deadline, share)
        if measured.last >= 0:  # the final run, always compared in full (by verify): its outputs stay
            self.last = measured.last
            measured.verified += 1
        return measured

    def _defer_kept(self, kept: list[Any], index: int) -> None:
        """Leave run `index`'s kept outputs for `verify`, or compare them now once DEFER_BYTES are held."""
        size = sum(int(k.nbytes) for k in kept)
        self.compared.add(index)
        if self.kept_bytes + size > DEFER_BYTES:
            self._verify_kept(kept, index)
            return
        self.kept.append((kept, index))
        self.kept_bytes += size

    def _adaptive(self, batch: Callable[[int, int, int], list[float]], deadline: float,
                  share: float) -> tuple[list[float], int]:
        """(timed run times, warm-up runs): a probe run, then batches (timing_stats.next_batch) until
        the median's CI is within `timing_ci_rel_width`, the budget or `timed_runs` is spent, or no
        further run fits `share` of the stage time left. A kernel too slow for the minimum gets the
        runs that fit: at least the probe, whose time is then the result (never a timeout)."""
        cfg = self.config
        start = time.monotonic()
        allowance_end = start + share * max(0.0, deadline - start)
        probe, spent = _costed(batch, 0, 0, 1)
        per_run, done, warmup_done, warmup_left = spent, 1, 1, max(0, cfg.warmup_runs - 1)
        timed: list[float] = []
        while not (len(timed) >= cfg.timing_min_runs and ci_rel_width(timed) <= cfg.timing_ci_rel_width):
            elapsed = max(time.monotonic() - start, spent)
            w, n = next_batch(Plan(
                timed=len(timed), warmup_left=warmup_left, per_run_s=per_run,
                allowance_s=allowance_end - start - elapsed, budget_left_s=cfg.timing_budget_s - elapsed,
                min_runs=cfg.timing_min_runs, max_runs=cfg.timed_runs, max_batch=MAX_BATCH_RUNS))
            if n == 0:
                break
            ms, cost = _costed(batch, done, w, n)
            spent, per_run = spent + cost, cost / (w + n)
            done, warmup_done, warmup_left = done + w + n, warmup_done + w, 0
            timed += ms
        return (timed, warmup_done) if timed else (probe, 0)

    def _verify_counts(self, buffers: _TimedBuffers, first: int, counts: Any) -> None:
        """Raise Failed for the first run of a batch whose device-side checks found a surviving
        poison (wrong_output) or a changed guard (runtime_error)."""
        for i, row in enumerate(np.asarray(counts)):
            for (name, kind, test, _dtype, views), count in zip(buffers.checks, row, strict=True):
                if count:
                    raise Failed(self._timed_run_failure(name, kind, test, views, int(count), first + i))

    def _timed_run_failure(self, name: str, kind: str, test: str, views: tuple[Any, ...], count: int,
                           index: int) -> Result:
        """The Result of a timed run whose output was left unwritten or whose guard changed."""
        trial = TIMING_TRIAL_BASE + index
        head = (f"timing: the timed runs disagreed with the verified runs: timing run {index + 1} "
                f"(fresh inputs of trial {trial})")
        if test == "guard":
            return self.run.result(Status.RUNTIME_ERROR, f"{head} wrote outside {kind} {name!r}: {count} of "
                                                         f"the {sum(v.size for v in views)} guard elements "
                                                         "around it changed. Check the bounds of every store.")
        size = int(views[0].size)
        m = Mismatch(reason="unwritten", buffer=name, trial=trial,
                     distribution=describe_distributions(self.task, trial, self.config.input_domains), frac_mismatched=count / size)
        return self.run.result(Status.WRONG_OUTPUT, f"{head} left {count} of the {size} elements of output "
                                                    f"{name!r} unwritten (still the poison). Every launch must "
                                                    "compute all of its outputs from its inputs.", mismatch=m)

    def _verify_kept(self, kept: list[Any], index: int) -> None:
        """Compare the outputs of timing run `index`, kept by `_TimedBuffers.keep_outputs` while later
        runs executed, with the reference; raise Failed when the kept copy was changed (a write into
        the judge's memory: runtime_error) or the outputs are wrong. The run's inputs are
        regenerated (a pure function of the trial), so the comparison checks outputs only; the
        stage's final run, compared on the live buffers, checks its inputs too."""
        xp, outputs = self.xp, {}
        for b, k in zip(self.task.outputs, kept, strict=True):
            if isinstance(k, expected_cache.MaskedOutput):
                if not k.verify(xp):
                    raise Failed(self.run.result(
                        Status.RUNTIME_ERROR,
                        f"timing: the timed runs disagreed with the verified runs: the judge's masked copy "
                        f"of timing run {index + 1}'s output {b.name!r} changed while later runs executed "
                        "(a write outside the kernel's buffers). Check the bounds of every store."))
                # stored normalised (int outputs as int64): back to the output's own dtype, as the
                # comparison (and the expected cache's fused check on a GPU) reads the live buffers
                k = k.unmask(xp).astype(b.dtype, copy=False)
            outputs[b.name] = k
        self._verify_run(outputs, index)

    def _verify_run(self, arrays: dict[str, Any], index: int) -> None:
        """Compare timing run `index`'s outputs (and its inputs, where `arrays` has them: the live
        buffers) in full with the reference; missing inputs are the regenerated ones."""
        trial, seed = TIMING_TRIAL_BASE + index, self.run.seed
        pristine = self.run.trial_inputs(trial, seed)
        self.run.verify_outputs({**pristine, **arrays}, pristine, trial, seed,
                                f"timing: the timed runs disagreed with the verified runs: timing run "
                                f"{index + 1} (fresh inputs of trial {trial}): ")

    def _verify_sampled(self, buffers: _TimedBuffers, rows: list[Any], index: int) -> None:
        """Compare timing run `index`'s sampled output elements (`rows`, host arrays, one per output)
        with the reference's at the same positions for the run's regenerated inputs; raise Failed
        (wrong_output) naming the first bad element by its index in the output."""
        trial, seed, run = TIMING_TRIAL_BASE + index, self.run.seed, self.run
        pristine = run.trial_inputs(trial, seed)
        expected = run.expected_outputs(trial, seed, pristine)
        try:
            dist = describe_distributions(self.task, trial, self.config.input_domains)
            for b, exp, got, (where, positions) in zip(self.task.outputs, expected, rows, buffers.samples,
                                                       strict=True):
                shape = b.resolve_shape(self.sizes)
                if int(exp.size) != int(np.prod(shape, dtype=np.int64)):
                    raise EnvFault(f"the reference of task {self.task.name!r} gave output {b.name!r} "
                                   f"{int(exp.size)} elements; its declared shape {shape} has another count")
                want = np.asarray(self.device.to_host(exp.reshape(-1)[where]))
                atol, rtol = self.task.tol(b.dtype)
                m = compare_output(np, b.name, got, want, b.dtype, atol, rtol, trial, dist)
                if m is None:
                    continue
                if m.first_bad_index:  # the sample's index -> the output's
                    m.first_bad_index = [int(k) for k in np.unravel_index(int(positions[m.first_bad_index[0]]), shape)]
                raise Failed(run.result(Status.WRONG_OUTPUT, (
                    f"timing: the timed runs disagreed with the verified runs: timing run {index + 1} (fresh "
                    f"inputs of trial {trial}), {got.size} of its elements of {b.name!r} checked: ")
                    + mismatch_message(m), mismatch=m))
        finally:
            run.scrub_expected(expected, pristine)

    def _torch_baseline(self, deadline: float, kernel_ms: float) -> dict[str, float] | None:
        """torch eager's median time for the task's KernelBench-style model (`tasks/torch_models.py`)
        on the reference's timing inputs, cached like the reference's. Opt-in (LEAP_TORCH_BASELINE=1):
        None by default, without torch, off the cupy backend, or on any failure (it never changes the
        status). Off by default because timing torch eager at a task's first sight in a worker cost a
        fifth of the first-sight rate and went with the speedups the independent clock flagged
        (docs/results/env-clock/)."""
        import importlib.util
        import os
        from kernels_env.tasks.torch_models import TORCH_MODELS
        model = TORCH_MODELS.get(self.task.name)
        if (model is None or self.device.name != "cupy" or os.environ.get("LEAP_TORCH_BASELINE", "0") != "1"
                or importlib.util.find_spec("torch") is None):
            return None
        try:
            import torch
            key = ("torch", *self._reference_key())
            cache = self._reference_cache()
            if key not in cache:
                stream = torch.cuda.ExternalStream(self.xp.cuda.get_current_stream().ptr)
                inputs = self.run.trial_inputs(TIMING_TRIAL_BASE, self.run.seed)
                tensors = {k: torch.from_dlpack(v) for k, v in inputs.items()}
                scalars = {s.name: s.value for s in self.task.scalars}

                def run(_state: Any) -> None:
                    with torch.cuda.stream(stream):
                        model(torch, tensors, scalars)

                cache[key] = self._adaptive(_trusted_batch(self, run, deadline), deadline, 1.0)[0]
            med = statistics.median(cache[key])
            return {"torch_median_ms": med, "speedup_vs_torch": med / max(kernel_ms, 1e-9)}
        except Exception:
            return None

    def _reference_key(self) -> tuple[Any, ...]:
        """The reference timing cache's key: the method's version, task, sizes and timing settings."""
        cfg = self.config
        return (TIMING_METHOD, self.task.name, tuple(sorted(self.sizes.items())), cfg.warmup_runs,
                cfg.timing_min_runs, cfg.timed_runs, cfg.timing_ci_rel_width, cfg.timing_budget_s, cfg.flush_l2,
                domain_draws.draws_version(cfg.input_domains))

    def _reference_cache(self) -> dict[tuple[Any, ...], list[float]]:
        """The per-device cache of reference run times (judge/reference_cache.py)."""
        return reference_cache.cache_of(self.device)

    def _reference_opinions(self) -> list[list[float]]:
        """The cached measurements of the reference (run times each), in the order they were made."""
        key, cache = self._reference_key(), self._reference_cache()
        return [list(cache[(*key, j)]) for j in range(REFERENCE_OPINIONS) if (*key, j) in cache]

    def _reference_times(self, deadline: float, share: float = 1.0, another: bool = False) -> list[float]:
        """The run times of the reference's measurement with the lowest median, measuring one first
        when none is cached (or, `another`, one more), with the kernel's method, within `share` of
        the stage time left. The reference is trusted: it runs on one input set, unchecked.

        The reference does not depend on the submission: its measurements are cached on the device
        object, each under its own key (the task's key + its index), so the pool can pass every one
        to the other workers of the GPU; a new device measures anew."""
        key, cache = self._reference_key(), self._reference_cache()
        free = [j for j in range(REFERENCE_OPINIONS) if (*key, j) not in cache]
        if free and (another or len(free) == REFERENCE_OPINIONS):
            inputs = self.run.trial_inputs(TIMING_TRIAL_BASE, self.run.seed)
            scalars = {s.name: s.value for s in self.task.scalars}

            def ref(_state: Any) -> None:
                self.task.reference(self.xp, **inputs, **scalars)

            try:
                cache[(*key, free[0])] = self._adaptive(_trusted_batch(self, ref, deadline), deadline, share)[0]
            except (KernelRuntimeError, KernelTimeout):
                raise
            except Exception as e:
                raise EnvFault(f"timing the reference of task {self.task.name!r} raised "
                               f"{type(e).__name__}: {e}") from e
        return min(self._reference_opinions(), key=statistics.median)


@dataclass
class _Measured:
    """The kernel's timing: timed run times and what was checked."""
    times: list[float] = field(default_factory=list)
    warmup: int = 0
    checked: int = 0  # runs checked on the device (poison, guards)
    verified: int = 0  # runs compared in full with the reference
    last: int = -1  # the last run, when not already compared in full
    flush_ms: list[float] = field(default_factory=list)  # the L2 flush's duration per run (where recorded)
    late_ms: list[float] = field(default_factory=list)  # the host's lateness past the hold per run (cupy)


class _TimedBuffers:
    """The buffers of the timing stage's verified runs, allocated once and refilled before every
    run: fresh inputs (trial TIMING_TRIAL_BASE + run index, never a correctness trial's; drawn
    straight into the buffers where the draw allows, inputs.make_input), poisoned outputs and
    guards, zeroed scratch. Same pointers every run, new contents: memoising on either
    buys nothing, and a run that skips its work leaves the poison."""

    def __init__(self, stage: TimingStage) -> None:
        self.stage = stage
        dev, sizes = stage.device, stage.sizes
        self.inputs = {b.name: dev.empty(b.resolve_shape(sizes), b.dtype) for b in stage.task.inputs}
        self.arrays: dict[str, Any] = dict(self.inputs)
        self.refills: list[tuple[Any, str, Any]] = []  # (allocation, dtype, scratch buffer to zero or None)
        self.checks: list[tuple[str, str, str, str, tuple[Any, ...]]] = []  # (name, kind, test, dtype, views)
        for b in stage.task.outputs:
            full, buf, guards = alloc_poisoned(dev, b.resolve_shape(sizes), b.dtype)
            self.arrays[b.name] = buf
            self.refills.append((full, b.dtype, None))
            self.checks += [(b.name, "output", "unwritten", b.dtype, (buf,)),
                            (b.name, "output", "guard", b.dtype, guards)]
        for name, dtype, count in stage.plan.scratch:
            full, buf, guards = alloc_poisoned(dev, (count,), dtype, zero=True)
            self.arrays[name] = buf
            self.refills.append((full, dtype, buf))
            self.checks.append((name, "scratch buffer", "guard", dtype, guards))
        # each output's sampled positions (flat, sorted, distinct): on the device and on the host
        rng = np.random.default_rng(secrets.randbits(128))
        self.samples: list[tuple[Any, Any]] = []
        for b in stage.task.outputs:
            size = int(np.prod(b.resolve_shape(sizes), dtype=np.int64))
            positions = np.arange(size) if size <= SAMPLED_ELEMENTS else \
                np.sort(rng.choice(size, SAMPLED_ELEMENTS, replace=False))
            self.samples.append((stage.xp.asarray(positions), positions))

    def load(self, index: int) -> dict[str, Any]:
        """Enqueue run `index`'s fresh inputs, poison and zeroed scratch; the arrays to launch on."""
        stage = self.stage
        stage.run.trial_inputs(TIMING_TRIAL_BASE + index, stage.run.seed, out=self.inputs)
        for full, dtype, scratch in self.refills:
            fill_poison(full, dtype)
            if scratch is not None:
                scratch.fill(0)
        return self.arrays

    def sample_rows(self, runs: int) -> list[Any]:
        """Per output, a (runs, sampled elements) device array of its dtype for `sample_into`."""
        dev = self.stage.device
        return [dev.empty((runs, int(positions.size)), b.dtype)
                for b, (_, positions) in zip(self.stage.task.outputs, self.samples, strict=True)]

    def sample_into(self, rows: list[Any], i: int) -> None:
        """Enqueue the copy of run i's outputs at the sampled positions into rows[*][i]."""
        for b, row, (where, _) in zip(self.stage.task.outputs, rows, self.samples, strict=True):
            row[i] = self.arrays[b.name].reshape(-1)[where]

    def count_into(self, row: Any) -> None:
        """Enqueue the run's checks: row[j] = poisoned elements of output j / changed guard elements."""
        xp = self.stage.xp
        for j, (_name, _kind, test, dtype, views) in enumerate(self.checks):
            if test == "unwritten":
                row[j] = poison_count(xp, views[0], dtype)
            else:
                row[j] = sum(v.size - poison_count(xp, v, dtype) for v in views)

    def keep_outputs(self) -> list[Any]:
        """The run's outputs, kept for a full comparison after the batch (`TimingStage._verify_kept`) out
        of later runs' reach: where kernels share the judge's memory (backends.base.launches_xp_arrays)
        masked under a fresh key with a checksum held on the host (judge/expected_cache.py: a later
        run can neither recognise the copy nor repair it unnoticed; computing the checksum
        synchronises once per batch), else plain copies (the cpu backend's kernels cannot see them)."""
        stage = self.stage
        xp, kept = stage.xp, []
        for b in stage.task.outputs:
            live = self.arrays[b.name]
            if not launches_xp_arrays(stage.device):
                kept.append(live.copy())
                continue
            plain = expected_cache.normalise_expected(xp, live, b.dtype, tuple(live.shape))
            if plain is None:  # cannot happen: the live buffer has the declared shape
                raise EnvFault(f"timing: output {b.name!r} has {live.size} elements, not its declared shape's")
            kept.append(expected_cache.mask_output(xp, plain))
            expected_cache.scrub(xp, [plain], keep=[live])
        return kept


def _costed(batch: Callable[[int, int, int], list[float]], first: int, warmup: int,
            runs: int) -> tuple[list[float], float]:
    """(times, cost in seconds): a batch's run times and its cost, the larger of its wall time and
    its runs' device time (a fake device's runs take no wall time)."""
    t0 = time.monotonic()
    times = batch(first, warmup, runs)
    return times, max(time.monotonic() - t0, sum(times) / 1e3)


def _trusted_batch(stage: TimingStage, fn: Callable[[Any], None], deadline: float) -> Callable[[int, int, int], list[float]]:
    """A batch of the trusted reference (or torch baseline): nothing to prepare or check."""
    def batch(first: int, warmup: int, runs: int) -> list[float]:
        return stage._time_runs(lambda i: None, fn, lambda i, state: None, warmup, runs, deadline)
    return batch


def _make_timing(dev: Device, kernel: _Measured, ref_ms: list[float] | None) -> Timing:
    """The Timing of a measured kernel (and reference, where comparable)."""
    times = kernel.times
    lo, hi = median_ci(times)
    k_med = statistics.median(times)
    timing = Timing(device=dev.timing_device, comparable=bool(dev.timing_comparable), runs=len(times),
                    kernel_median_ms=k_med, kernel_mean_ms=statistics.fmean(times), warmup_runs=kernel.warmup,
                    kernel_ci_ms=[lo, hi], ci_rel_width=ci_rel_width(times), checked_runs=kernel.checked,
                    verified_runs=kernel.verified, method=TIMING_METHOD, kernel_min_ms=min(times),
                    kernel_max_ms=max(times),
                    flush_median_ms=statistics.median(kernel.flush_ms) if kernel.flush_ms else None,
                    launch_late_ms=statistics.median(kernel.late_ms) if kernel.late_ms else None)
    if ref_ms is not None:
        timing.ref_median_ms = statistics.median(ref_ms)
        timing.ref_mean_ms = statistics.fmean(ref_ms)
        timing.ref_runs = len(ref_ms)
        timing.speedup = timing.ref_median_ms / max(k_med, 1e-9)
    return timing


def _against_torch(timing: Timing, torch_ms: dict[str, Any]) -> None:
    """Fill a problem task's timing from torch's run times: torch eager is its reference (`speedup`),
    torch.compile a second one (`speedup_vs_compile`); a mode without times stays None."""
    kernel_ms = max(timing.kernel_median_ms, 1e-9)
    eager, compiled = torch_ms.get("eager_ms"), torch_ms.get("compile_ms")
    if eager:
        timing.ref_median_ms = timing.eager_median_ms = statistics.median(eager)
        timing.ref_mean_ms, timing.ref_runs = statistics.fmean(eager), len(eager)
        timing.speedup = timing.speedup_vs_eager = timing.eager_median_ms / kernel_ms
    if compiled:
        timing.compile_median_ms = statistics.median(compiled)
        timing.speedup_vs_compile = timing.compile_median_ms / kernel_ms


def timing_message(t: Timing, trials: int) -> str:
    """The message of a correct, timed Result: the speedup (or why there is none)."""
    if t.speedup is None:
        return (f"correct on {trials} trials; kernel {t.kernel_median_ms:.4g} ms median ({t.device} timing, "
                f"not comparable: no speedup)")
    flag = " (suspicious, re-verified on new inputs)" if t.suspicious else ""
    return (f"correct on {trials} trials; {t.speedup:.3g}x speedup{flag}: kernel {t.kernel_median_ms:.4g} ms "
            f"vs reference {t.ref_median_ms:.4g} ms (median of {t.runs} verified runs)")


def timing_details(t: Timing, config: EnvConfig) -> str:
    """The details of a correct, timed Result: how the kernel and the reference were timed."""
    ci = t.kernel_ci_ms or [t.kernel_median_ms, t.kernel_median_ms]
    return (f"timing ({t.method}): {t.warmup_runs} warm-up + {t.runs} timed runs of the kernel on {t.device} "
            f"(adaptive: at least {config.timing_min_runs}, at most {config.timed_runs}, until the median's "
            f"95% CI is within {config.timing_ci_rel_width:.3g} of it or {config.timing_budget_s:g} s); "
            f"every run on fresh inputs with poisoned outputs, checked on the device ({t.checked_runs} "
            f"runs), {t.verified_runs} compared in full with the reference and every other at up to "
            f"{SAMPLED_ELEMENTS} secret elements of each output; L2 flush before each run: "
            f"{'on' if config.flush_l2 else 'off'}; kernel median {t.kernel_median_ms:.6g} ms "
            f"(95% CI [{ci[0]:.6g}, {ci[1]:.6g}] ms), mean {t.kernel_mean_ms:.6g} ms"
            + (f"; reference median {t.ref_median_ms:.6g} ms over {t.ref_runs} runs, mean {t.ref_mean_ms:.6g} ms"
               if t.ref_median_ms is not None else "")
            + (f"; torch eager median {t.baseline['torch_median_ms']:.6g} ms (speedup vs torch "
               f"{t.baseline['speedup_vs_torch']:.3g}x, informational)" if t.baseline else "")
            + (f"; torch.compile median {t.compile_median_ms:.6g} ms (speedup {t.speedup_vs_compile:.3g}x)"
               if t.compile_median_ms is not None and t.speedup_vs_compile is not None else ""))
