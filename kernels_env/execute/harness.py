"""Backend-agnostic correctness trials and timing of a loaded submission (DESIGN 3.3 steps 3-4).

`evaluate` is written once against the `Device` protocol (backends/base.py) and used by every
backend: it draws fresh inputs per trial, poisons outputs (and a guard region after each, so a write
past an output's end is a `runtime_error` whether or not the device faults), launches the launch
plan, checks the guards and that inputs are untouched, runs the reference, compares, and, when
correct, times kernel and reference with the device's timer. Policy code can only cause statuses
here; environment faults (a broken reference, a backend bug) become `env_error`.

Optional extensions of the Device protocol that the harness uses when present:
  `synchronize(timeout_s=...)`  the soft time left in the stage, so a hang raises instead of blocking;
  `time_ms(..., timeout_s=...)` the same for the timing stage's runs (a kernel may hang only sometimes);
  `end_job()`                   called after every evaluation (CupyDevice frees its memory pool);
  `healthy`                     False after a sticky error (read by the pipeline to replace the worker).
The reference's timing is measured once per (device, task, sizes, timing settings) and reused.
"""
from __future__ import annotations

import secrets
import statistics
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernels_env.backends.base import Device, FatalDeviceError, KernelRuntimeError, KernelTimeout, Program
from kernels_env.core.config import EnvConfig
from kernels_env.core.program import Submission
from kernels_env.core.result import Mismatch, Result, Timing
from kernels_env.core.status import Status
from kernels_env.execute.buffers import alloc_poisoned, fill_poison, poison
from kernels_env.execute.gpu_lock import gpu_access
from kernels_env.execute.inputs import describe_distributions, make_inputs
from kernels_env.execute.launching import bind_plan, launch_all, takes_timeout
from kernels_env.judge import expected_cache
from kernels_env.judge.compare import check_input_unchanged, compare_output, mismatch_message
from kernels_env.judge.faults import EnvFault, Failed
from kernels_env.judge.poison import guard_changed, poison_count
from kernels_env.judge.timing_stats import Plan, ci_rel_width, median_ci, next_batch
from kernels_env.source.launch import FormatError, ResolvedPlan
from kernels_env.source.submission import in_launch_block
from kernels_env.tasks.spec import Task

REVERIFY_SEED_OFFSET = 1_000_003  # "another seed" for re-verifying a suspicious speedup
# Timing (DESIGN 3.3 step 4): timing run r draws the inputs of trial TIMING_TRIAL_BASE + r (never a
# correctness trial's); the reference's cache key names TIMING_METHOD (numbers of another method
# are not comparable); a time_runs call enqueues at most MAX_BATCH_RUNS runs; a slow kernel may use
# KERNEL_SHARE of the stage time left while the reference is still to be measured.
TIMING_TRIAL_BASE = 1000
TIMING_METHOD = "verified-adaptive-median/v2"
MAX_BATCH_RUNS = 64
KERNEL_SHARE = 0.5


class _StageTimeout(Exception):
    pass


# ---- the stages ---------------------------------------------------------------------------------
def _reference_outputs(task: Task, xp: Any, inputs: dict[str, Any]) -> list[Any]:
    scalars = {s.name: s.value for s in task.scalars}
    try:
        out = task.reference(xp, **inputs, **scalars)
    except Exception as e:  # a task bug, never the policy's
        raise EnvFault(f"the reference of task {task.name!r} raised {type(e).__name__}: {e}") from e
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(outs) != len(task.outputs):
        raise EnvFault(f"the reference of task {task.name!r} returned {len(outs)} outputs; the task "
                       f"declares {len(task.outputs)}")
    return outs


class _Run:
    """State of one evaluate() call: device, plan, limits, bookkeeping."""

    def __init__(self, device: Device, program: Program, task: Task, plan: ResolvedPlan,
                 sizes: dict[str, int], config: EnvConfig) -> None:
        self.device, self.program, self.task, self.plan = device, program, task, plan
        self.sizes, self.config, self.xp = sizes, config, device.xp
        self.trials = 0
        self.stage = "correctness"
        self.stage_seconds: dict[str, float] = {}

    def result(self, status: Status, message: str, **kw: Any) -> Result:
        return Result(status=status, message=message, task=self.task.name, backend=self.device.name,
                      trials=self.trials, stage_seconds=dict(self.stage_seconds), **kw)

    def _device_failure(self, e: Exception, stage: str) -> Result:
        where = getattr(e, "where", "")
        prefix = f"{where}: " if where else ""
        if isinstance(e, KernelTimeout):
            return self.result(Status.TIMEOUT, f"{stage}: {prefix}kernel timed out: {e}", details=str(e))
        return self.result(Status.RUNTIME_ERROR, f"{stage}: {prefix}{e}", details=str(e))

    def fresh_arrays(self, trial: int, seed: int) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """(candidate arrays: inputs + poisoned outputs + zeroed scratch, pristine input copies,
        each output's poisoned guard: see buffers.poison)."""
        try:
            inputs = make_inputs(self.task, self.sizes, trial, seed, self.xp)
            if getattr(self.device, "name", "") == "cpu":  # into guard-paged memory: reads past faults
                inputs = {k: self.device.to_device(v) for k, v in inputs.items()}
            pristine = {k: v.copy() for k, v in inputs.items()}
            arrays, guards = dict(inputs), {}
            for b in self.task.outputs:
                arrays[b.name], guards[b.name] = poison(self.device, b.resolve_shape(self.sizes), b.dtype)
        except EnvFault:
            raise
        except (KernelRuntimeError, KernelTimeout):
            raise
        except Exception as e:
            raise EnvFault(f"could not make the inputs of task {self.task.name!r}: "
                           f"{type(e).__name__}: {e}") from e
        for name, dtype, count in self.plan.scratch:
            # zeroed, between poisoned guards: a write outside a scratch buffer is caught like one
            # outside an output (names of scratch buffers and outputs never collide)
            arrays[name], guards[name] = poison(self.device, (count,), dtype, zero=True)
        return arrays, pristine, guards

    # ---- reference outputs: the only way the stages get them (see kernels_env/judge/expected_cache.py) ----
    # check_outputs   the correctness stages: compares with the masked per-trial cache (fused check,
    #                 no plaintext expected output on the device on a hit that passes);
    # expected_outputs plaintext lists, for code that needs the values themselves (e.g. timing
    #                 inputs); pass them to scrub_expected when done.
    def _expected_cache(self) -> expected_cache.ExpectedCache | None:
        cfg = self.config
        if not (cfg.cache_expected and expected_cache.used_on(self.xp)):
            return None
        return expected_cache.cache_for(self.device, cfg.expected_cache_bytes)

    def _expected_key(self, trial: int, seed: int) -> tuple[Any, ...]:
        """What a trial's expected outputs are a pure function of (the cache key)."""
        t = self.task
        ref = getattr(t.reference, "__module__", ""), getattr(t.reference, "__qualname__", repr(t.reference))
        return (t.name, ref, tuple(sorted(self.sizes.items())), int(seed), int(trial), t.inputs, t.scalars,
                tuple((b.name, b.dtype, b.resolve_shape(self.sizes)) for b in t.outputs))

    def _cached(self, trial: int, seed: int) -> list[expected_cache.MaskedOutput] | None:
        cache = self._expected_cache()
        return cache.get(self._expected_key(trial, seed)) if cache is not None else None

    def _compute_expected(self, trial: int, seed: int, pristine: dict[str, Any]) -> list[Any]:
        """Run the reference (plaintext outputs: scrub them) and, with the cache on, store them masked."""
        expected = _reference_outputs(self.task, self.xp, pristine)
        cache = self._expected_cache()
        if cache is None:
            return expected
        normal, masked = [], []
        try:
            for b, exp in zip(self.task.outputs, expected, strict=False):
                e = expected_cache.normalise_expected(self.xp, exp, b.dtype, b.resolve_shape(self.sizes))
                if e is None:  # wrong element count: compare_output raises the env_error
                    return expected
                normal.append(e)
                masked.append(expected_cache.mask_output(self.xp, e))
            cache.put(self._expected_key(trial, seed), masked)
        finally:
            # normalised copies; those that are views of the reference's outputs go with them later
            expected_cache.scrub(self.xp, normal, keep=[*expected, *pristine.values()])
        return expected

    def expected_outputs(self, trial: int, seed: int, pristine: dict[str, Any]) -> list[Any]:
        """The reference outputs of (trial, seed) as plaintext device arrays, one per task output,
        from the masked cache when present (checksum verified), else from the reference on
        `pristine`. The caller must hand them to `scrub_expected` once done with them."""
        cached = self._cached(trial, seed)
        if cached is not None:
            if all(m.verify(self.xp) for m in cached):
                return [m.unmask(self.xp) for m in cached]
            self._discard_tampered(trial, seed)
        return self._compute_expected(trial, seed, pristine)

    def scrub_expected(self, expected: list[Any], pristine: dict[str, Any] | None = None) -> None:
        """Zero plaintext expected outputs before release on CuPy (those aliasing an input excepted)."""
        expected_cache.scrub(self.xp, expected, keep=(pristine or {}).values())

    def _discard_tampered(self, trial: int, seed: int) -> None:
        cache = self._expected_cache()
        if cache is not None:
            cache.discard(self._expected_key(trial, seed), tampered=True)

    def check_outputs(self, trial: int, seed: int, pristine: dict[str, Any], arrays: dict[str, Any],
                      dist: str) -> Mismatch | None:
        """Compare the outputs in `arrays` with the reference of (trial, seed): the first Mismatch in
        task order, else None. A cache hit runs the fused check per output (reference skipped); a
        failing element, a miss, a tampered entry or the cache off take the detailed compare_output
        path, so results and messages are those of the uncached harness."""
        cached = self._cached(trial, seed)
        if cached is not None:
            verdict = self._check_cached(cached, trial, arrays, dist)
            if verdict is not False:
                return verdict  # type: ignore[return-value]
            self._discard_tampered(trial, seed)
        expected = self._compute_expected(trial, seed, pristine)
        try:
            for b, exp in zip(self.task.outputs, expected, strict=False):
                atol, rtol = self.task.tol(b.dtype)
                m = compare_output(self.xp, b.name, arrays[b.name], exp, b.dtype, atol, rtol, trial, dist)
                if m is not None:
                    return m
            return None
        finally:
            self.scrub_expected(expected, pristine)

    def _check_cached(self, cached: list[expected_cache.MaskedOutput], trial: int, arrays: dict[str, Any],
                      dist: str) -> Mismatch | None | bool:
        """check_outputs on a cache hit: None (all pass), a Mismatch, or False (an entry's checksum
        failed: recompute)."""
        for b, masked in zip(self.task.outputs, cached, strict=True):
            atol, rtol = self.task.tol(b.dtype)
            bad = masked.check(self.xp, arrays[b.name], b.dtype, atol, rtol)
            if bad is None:
                return False
            if bad:
                plain = masked.unmask(self.xp)
                try:
                    m = compare_output(self.xp, b.name, arrays[b.name], plain, b.dtype, atol, rtol, trial, dist)
                finally:
                    expected_cache.scrub(self.xp, [plain])
                if m is not None:
                    return m
        return None

    def verify_outputs(self, arrays: dict[str, Any], pristine: dict[str, Any], trial: int, seed: int,
                       prefix: str) -> None:
        """Raise Failed (wrong_output, message starting with `prefix`) when an input of `arrays` was
        modified or an output differs from the reference's for `pristine` (check_outputs: the
        masked cache's fused check on a hit). Used by the correctness trials and the timed runs."""
        dist = describe_distributions(self.task, trial)
        for b in self.task.inputs:
            m = check_input_unchanged(self.xp, b.name, pristine[b.name], arrays[b.name], trial, dist)
            if m is not None:
                raise Failed(self.result(Status.WRONG_OUTPUT, prefix + mismatch_message(m), mismatch=m))
        m = self.check_outputs(trial, seed, pristine, arrays, dist)
        if m is not None:
            raise Failed(self.result(Status.WRONG_OUTPUT, prefix + mismatch_message(m), mismatch=m))

    def correctness(self, seed: int, stage: str) -> Result | None:
        """Run the trials; None when all pass, else the failing Result."""
        cfg = self.config
        self.stage = stage
        start = time.monotonic()
        # The limit is charged with the candidate's launches only: the environment's own work
        # (fresh inputs, the reference, the comparison; on a cold worker CuPy first builds the
        # elementwise kernels they use) must not make a correct kernel time out. The pool's
        # per-job limit still bounds the whole stage.
        spent = [0.0]
        launched_at = [start]
        def remaining():
            return max(0.0, cfg.limits.correctness - spent[0]
                                        - (time.monotonic() - launched_at[0]))
        try:
            for trial in range(cfg.correctness_trials):
                arrays, pristine, guards = self.fresh_arrays(trial, seed)
                self.trials += 1
                launched_at[0] = time.monotonic()
                launch_all(self.device, self.program, self.plan, arrays, remaining)
                spent[0] += time.monotonic() - launched_at[0]
                if spent[0] > cfg.limits.correctness:
                    raise _StageTimeout(f"trial {trial}")
                checked = [(b.name, b.dtype, "output") for b in self.task.outputs]
                checked += [(name, dtype, "scratch buffer") for name, dtype, _ in self.plan.scratch]
                for name, dtype, kind in checked:
                    changed = guard_changed(self.xp, guards[name], dtype)
                    if changed:
                        lead, trail = guards[name]
                        where = ("past the end of" if guard_changed(self.xp, trail, dtype)
                                 else "before the start of")
                        raise Failed(self.result(
                            Status.RUNTIME_ERROR,
                            f"{stage}: out-of-bounds write: the kernels wrote {where} {kind} "
                            f"{name!r} ({arrays[name].size} elements); {changed} of the "
                            f"{lead.size + trail.size} guard elements around it changed (trial {trial}). "
                            f"Check the bounds of every store against the {kind}'s size."))
                self.verify_outputs(arrays, pristine, trial, seed, f"{stage}: ")
                del arrays, pristine, guards
            return None
        except _StageTimeout as e:
            return self.result(Status.TIMEOUT, f"{stage}: exceeded its {cfg.limits.correctness:g} s limit "
                                               f"(at {e})")
        except Failed as f:
            return f.result
        except FatalDeviceError:
            raise
        except (KernelRuntimeError, KernelTimeout) as e:
            return self._device_failure(e, stage)
        finally:
            self.stage_seconds[stage] = self.stage_seconds.get(stage, 0.0) + time.monotonic() - start

    def timing(self) -> Timing | Result:
        """Time the plan on verified runs (fresh inputs every run, outputs checked) and the reference,
        adaptively (DESIGN 3.3 step 4); a Result when a timed run fails or hangs."""
        cfg, dev = self.config, self.device
        self.stage = "timing"
        start = time.monotonic()
        deadline = start + cfg.limits.timing
        try:
            buffers = _TimedBuffers(self)
            # a slow kernel leaves room for the reference unless the reference is already measured
            share = 1.0 if not dev.timing_comparable or self._reference_key() in self._reference_cache() \
                else KERNEL_SHARE
            kernel = self._time_kernel(buffers, deadline, share)
            ref_ms = self._reference_times(deadline) if dev.timing_comparable else None
        except Failed as f:
            return f.result
        except FatalDeviceError:
            raise
        except (KernelRuntimeError, KernelTimeout) as e:
            return self._device_failure(e, "timing")
        finally:
            self.stage_seconds["timing"] = time.monotonic() - start
        timing = _make_timing(dev, kernel, ref_ms)
        if ref_ms is not None:
            timing.baseline = self._torch_baseline(deadline, timing.kernel_median_ms)
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
            pick = secrets.randbelow(n)  # unpredictable: which run of the batch is compared in full
            snaps: dict[int, dict[str, Any]] = {}

            def check(i: int, arrays: dict[str, Any]) -> None:
                buffers.count_into(counts[i])
                if i == pick:
                    snaps[first + i] = buffers.snapshot()

            times = self._time_runs(lambda i: buffers.load(first + i),
                                    lambda arrays: launch_all(dev, self.program, self.plan, arrays, None),
                                    check, warmup, runs, deadline)
            self._verify_counts(buffers, first, dev.to_host(counts))
            for index, snap in snaps.items():
                self._verify_run(snap, index)
            measured.checked += n
            measured.verified += len(snaps)
            measured.last = first + n - 1 if first + n - 1 not in snaps else -1
            return times

        measured.times, measured.warmup = self._adaptive(batch, deadline, share)
        if measured.last >= 0:  # the final run, always compared in full: its outputs are still there
            self._verify_run(buffers.arrays, measured.last)
            measured.verified += 1
        return measured

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
            return self.result(Status.RUNTIME_ERROR, f"{head} wrote outside {kind} {name!r}: {count} of the "
                                                     f"{sum(v.size for v in views)} guard elements around it "
                                                     "changed. Check the bounds of every store.")
        size = int(views[0].size)
        m = Mismatch(reason="unwritten", buffer=name, trial=trial,
                     distribution=describe_distributions(self.task, trial), frac_mismatched=count / size)
        return self.result(Status.WRONG_OUTPUT, f"{head} left {count} of the {size} elements of output "
                                                f"{name!r} unwritten (still the poison). Every launch must "
                                                "compute all of its outputs from its inputs.", mismatch=m)

    def _verify_run(self, arrays: dict[str, Any], index: int) -> None:
        """Compare timing run `index`'s inputs and outputs (`arrays`) in full with the reference."""
        trial, seed = TIMING_TRIAL_BASE + index, self.config.seed
        pristine = self._inputs(trial, seed)
        self.verify_outputs(arrays, pristine, trial, seed,
                            f"timing: the timed runs disagreed with the verified runs: timing run "
                            f"{index + 1} (fresh inputs of trial {trial}): ")

    def _inputs(self, trial: int, seed: int) -> dict[str, Any]:
        """make_inputs, its failures an environment fault."""
        try:
            return make_inputs(self.task, self.sizes, trial, seed, self.xp)
        except Exception as e:
            raise EnvFault(f"could not make the inputs of task {self.task.name!r}: "
                           f"{type(e).__name__}: {e}") from e

    def _torch_baseline(self, deadline: float, kernel_ms: float) -> dict[str, float] | None:
        """torch eager's median time for the task's KernelBench-style model (`tasks/torch_models.py`)
        on the reference's timing inputs, cached like the reference's; None without torch, off the
        cupy backend, with LEAP_TORCH_BASELINE=0, or on any failure (it never changes the status)."""
        import importlib.util
        import os
        from kernels_env.tasks.torch_models import TORCH_MODELS
        model = TORCH_MODELS.get(self.task.name)
        if (model is None or self.device.name != "cupy" or os.environ.get("LEAP_TORCH_BASELINE", "1") == "0"
                or importlib.util.find_spec("torch") is None):
            return None
        try:
            import torch
            key = ("torch", *self._reference_key())
            cache = self._reference_cache()
            if key not in cache:
                stream = torch.cuda.ExternalStream(self.xp.cuda.get_current_stream().ptr)
                inputs = self._inputs(TIMING_TRIAL_BASE, self.config.seed)
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
                cfg.timing_min_runs, cfg.timed_runs, cfg.timing_ci_rel_width, cfg.timing_budget_s, cfg.flush_l2)

    def _reference_cache(self) -> dict[tuple[Any, ...], list[float]]:
        """The per-device cache of reference run times (`device.__dict__['_harness_reference_ms']`)."""
        try:
            return self.device.__dict__.setdefault("_harness_reference_ms", {})
        except AttributeError:  # a device without a __dict__: no caching
            return {}

    def _reference_times(self, deadline: float) -> list[float]:
        """The reference's run times, measured once per device, task, sizes and timing settings with
        the kernel's method. The reference is trusted: it runs on one input set, unchecked.

        The reference does not depend on the submission, so a long-lived worker times it once and
        reuses the numbers (the cache lives on the device object; a new device measures anew)."""
        key, cache = self._reference_key(), self._reference_cache()
        if key not in cache:
            inputs = self._inputs(TIMING_TRIAL_BASE, self.config.seed)
            scalars = {s.name: s.value for s in self.task.scalars}

            def ref(_state: Any) -> None:
                self.task.reference(self.xp, **inputs, **scalars)

            try:
                cache[key] = self._adaptive(_trusted_batch(self, ref, deadline), deadline, 1.0)[0]
            except (KernelRuntimeError, KernelTimeout):
                raise
            except Exception as e:
                raise EnvFault(f"timing the reference of task {self.task.name!r} raised "
                               f"{type(e).__name__}: {e}") from e
        return list(cache[key])


@dataclass
class _Measured:
    """The kernel's timing: timed run times and what was checked."""
    times: list[float] = field(default_factory=list)
    warmup: int = 0
    checked: int = 0  # runs checked on the device (poison, guards)
    verified: int = 0  # runs compared in full with the reference
    last: int = -1  # the last run, when not already compared in full


class _TimedBuffers:
    """The buffers of the timing stage's verified runs, allocated once and refilled before every
    run: fresh inputs (trial TIMING_TRIAL_BASE + run index, never a correctness trial's), poisoned
    outputs and guards, zeroed scratch. Same pointers every run, new contents: memoising on either
    buys nothing, and a run that skips its work leaves the poison."""

    def __init__(self, run: _Run) -> None:
        self.run = run
        dev, sizes = run.device, run.sizes
        self.inputs = {b.name: dev.empty(b.resolve_shape(sizes), b.dtype) for b in run.task.inputs}
        self.arrays: dict[str, Any] = dict(self.inputs)
        self.refills: list[tuple[Any, str, Any]] = []  # (allocation, dtype, scratch buffer to zero or None)
        self.checks: list[tuple[str, str, str, str, tuple[Any, ...]]] = []  # (name, kind, test, dtype, views)
        for b in run.task.outputs:
            full, buf, guards = alloc_poisoned(dev, b.resolve_shape(sizes), b.dtype)
            self.arrays[b.name] = buf
            self.refills.append((full, b.dtype, None))
            self.checks += [(b.name, "output", "unwritten", b.dtype, (buf,)),
                            (b.name, "output", "guard", b.dtype, guards)]
        for name, dtype, count in run.plan.scratch:
            full, buf, guards = alloc_poisoned(dev, (count,), dtype, zero=True)
            self.arrays[name] = buf
            self.refills.append((full, dtype, buf))
            self.checks.append((name, "scratch buffer", "guard", dtype, guards))

    def load(self, index: int) -> dict[str, Any]:
        """Enqueue run `index`'s fresh inputs, poison and zeroed scratch; the arrays to launch on."""
        run = self.run
        fresh = run._inputs(TIMING_TRIAL_BASE + index, run.config.seed)
        for name, buf in self.inputs.items():
            buf[...] = fresh[name]
        for full, dtype, scratch in self.refills:
            fill_poison(full, dtype)
            if scratch is not None:
                scratch.fill(0)
        return self.arrays

    def count_into(self, row: Any) -> None:
        """Enqueue the run's checks: row[j] = poisoned elements of output j / changed guard elements."""
        xp = self.run.xp
        for j, (_name, _kind, test, dtype, views) in enumerate(self.checks):
            if test == "unwritten":
                row[j] = poison_count(xp, views[0], dtype)
            else:
                row[j] = sum(v.size - poison_count(xp, v, dtype) for v in views)

    def snapshot(self) -> dict[str, Any]:
        """Device copies of the inputs and outputs (for a full comparison after the batch)."""
        names = [*self.inputs, *(b.name for b in self.run.task.outputs)]
        return {name: self.arrays[name].copy() for name in names}


def _costed(batch: Callable[[int, int, int], list[float]], first: int, warmup: int,
            runs: int) -> tuple[list[float], float]:
    """(times, cost in seconds): a batch's run times and its cost, the larger of its wall time and
    its runs' device time (a fake device's runs take no wall time)."""
    t0 = time.monotonic()
    times = batch(first, warmup, runs)
    return times, max(time.monotonic() - t0, sum(times) / 1e3)


def _trusted_batch(run: _Run, fn: Callable[[Any], None], deadline: float) -> Callable[[int, int, int], list[float]]:
    """A batch of the trusted reference (or torch baseline): nothing to prepare or check."""
    def batch(first: int, warmup: int, runs: int) -> list[float]:
        return run._time_runs(lambda i: None, fn, lambda i, state: None, warmup, runs, deadline)
    return batch


def _make_timing(dev: Device, kernel: _Measured, ref_ms: list[float] | None) -> Timing:
    """The Timing of a measured kernel (and reference, where comparable)."""
    times = kernel.times
    lo, hi = median_ci(times)
    k_med = statistics.median(times)
    timing = Timing(device=dev.timing_device, comparable=bool(dev.timing_comparable), runs=len(times),
                    kernel_median_ms=k_med, kernel_mean_ms=statistics.fmean(times), warmup_runs=kernel.warmup,
                    kernel_ci_ms=[lo, hi], ci_rel_width=ci_rel_width(times), checked_runs=kernel.checked,
                    verified_runs=kernel.verified, method=TIMING_METHOD)
    if ref_ms is not None:
        timing.ref_median_ms = statistics.median(ref_ms)
        timing.ref_mean_ms = statistics.fmean(ref_ms)
        timing.ref_runs = len(ref_ms)
        timing.speedup = timing.ref_median_ms / max(k_med, 1e-9)
    return timing


def plan_callable(device: Device, program: Program, task: Task, submission: Submission,
                  sizes: dict[str, int], config: EnvConfig, trial: int = 0) -> Callable[[], None]:
    """A zero-argument function that launches the whole plan (no sync) on fresh trial inputs: exactly
    what the timing stage measures. For benchmarks; raises FormatError for bad plans."""
    kernels = dict(getattr(program, "kernels", {}) or {})
    kernels.update(submission.kernels)
    plan = bind_plan(submission, task, sizes, kernels)
    arrays, _, _ = _Run(device, program, task, plan, sizes, config).fresh_arrays(trial, config.seed)
    return lambda: launch_all(device, program, plan, arrays, None)


def evaluate(device: Device, program: Program, task: Task, submission: Submission,
             sizes: dict[str, int], config: EnvConfig) -> Result:
    """Correctness trials, then timing, of a loaded submission on `device` (DESIGN 3.3 steps 3-4).

    Returns `correct` (with Timing when config.timing), `wrong_output` (with a Mismatch),
    `runtime_error`, `timeout`, `format_error` (a launch plan `launch.check_plan` rejects with these
    sizes, a launch configuration CUDA would reject included: the same status and message as the
    parse-time checks) or `env_error` (the reference or the backend failed).

    Contract for sticky device errors: a `FatalDeviceError` from the device is NOT returned; it is
    re-raised with an attribute `.result` holding the `runtime_error` (or `timeout`, when the error
    is also a KernelTimeout: a hung kernel) Result to report. The pipeline/pool must return that
    result and replace the worker, whose CUDA context is unusable.
    """
    run = _Run(device, program, task, ResolvedPlan((), ()), sizes, config)  # _evaluate binds the plan
    try:
        res = _evaluate(run, submission)
        res.stage_seconds = {**res.stage_seconds, **run.stage_seconds}  # include the stage that failed
        res.trials = run.trials
        return res
    except FatalDeviceError as e:
        res = run._device_failure(e, run.stage)
        res.message += " (sticky CUDA error: the worker's context is unusable)"
        e.result = res
        raise
    except EnvFault as e:
        return Result.env_error(str(e), task=task.name, details=traceback.format_exc(limit=3))
    except Exception as e:  # a backend bug must not crash the caller nor be blamed on the policy
        return Result.env_error(f"{run.stage}: the {device.name} backend raised {type(e).__name__}: {e}",
                                task=task.name, details=traceback.format_exc(limit=5))
    finally:
        end_job = getattr(device, "end_job", None)
        if end_job is not None:
            try:
                end_job()
            except Exception:
                pass


def _evaluate(run: _Run, submission: Submission) -> Result:
    """evaluate()'s stages; exceptions are handled by the caller."""
    task, config = run.task, run.config
    kernels = dict(getattr(run.program, "kernels", {}) or {})
    kernels.update(submission.kernels)
    try:
        run.plan = bind_plan(submission, task, run.sizes, kernels)
    except FormatError as e:  # the message `prepare` gives the same plan (see bind_plan)
        return run.result(Status.FORMAT_ERROR, in_launch_block(str(e)))
    with gpu_access(run.device, exclusive=False):  # other workers' timing waits; trials overlap
        failure = run.correctness(config.seed, "correctness")
    if failure is not None:
        return failure
    if not config.timing:
        return run.result(Status.CORRECT, f"correct on {run.trials} trials (timing off)")
    with gpu_access(run.device, exclusive=True):  # no other GPU work while timing
        timing = run.timing()
    if isinstance(timing, Result):
        return timing
    if timing.speedup is not None and timing.speedup > config.suspicious_speedup:
        timing.suspicious = True
        with gpu_access(run.device, exclusive=False):
            failure = run.correctness(config.seed + REVERIFY_SEED_OFFSET, "re-verification")
        if failure is not None:
            failure.message = (f"suspicious {timing.speedup:.1f}x speedup; {failure.message}")
            return failure
        timing.reverified = True
    return run.result(Status.CORRECT, _timing_message(timing, run.trials), timing=timing,
                      details=_timing_details(timing, config))


def _timing_message(t: Timing, trials: int) -> str:
    if t.speedup is None:
        return (f"correct on {trials} trials; kernel {t.kernel_median_ms:.4g} ms median ({t.device} timing, "
                f"not comparable: no speedup)")
    flag = " (suspicious, re-verified on new inputs)" if t.suspicious else ""
    return (f"correct on {trials} trials; {t.speedup:.3g}x speedup{flag}: kernel {t.kernel_median_ms:.4g} ms "
            f"vs reference {t.ref_median_ms:.4g} ms (median of {t.runs} verified runs)")


def _timing_details(t: Timing, config: EnvConfig) -> str:
    ci = t.kernel_ci_ms or [t.kernel_median_ms, t.kernel_median_ms]
    return (f"timing ({t.method}): {t.warmup_runs} warm-up + {t.runs} timed runs of the kernel on {t.device} "
            f"(adaptive: at least {config.timing_min_runs}, at most {config.timed_runs}, until the median's "
            f"95% CI is within {config.timing_ci_rel_width:.3g} of it or {config.timing_budget_s:g} s); "
            f"every run on fresh inputs with poisoned outputs, checked on the device ({t.checked_runs} "
            f"runs), {t.verified_runs} compared in full with the reference; L2 flush before each run: "
            f"{'on' if config.flush_l2 else 'off'}; kernel median {t.kernel_median_ms:.6g} ms "
            f"(95% CI [{ci[0]:.6g}, {ci[1]:.6g}] ms), mean {t.kernel_mean_ms:.6g} ms"
            + (f"; reference median {t.ref_median_ms:.6g} ms over {t.ref_runs} runs, mean {t.ref_mean_ms:.6g} ms"
               if t.ref_median_ms is not None else "")
            + (f"; torch eager median {t.baseline['torch_median_ms']:.6g} ms (speedup vs torch "
               f"{t.baseline['speedup_vs_torch']:.3g}x, informational)" if t.baseline else ""))
