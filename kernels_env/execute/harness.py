"""One evaluation of a loaded submission: correctness trials, then timing (DESIGN 3.3 steps 3-4).

`evaluate` is written once against the `Device` protocol (backends/base.py) and used by every
backend: it binds the launch plan to the sizes, runs the correctness trials (fresh inputs, poisoned
outputs between guards, the plan, the guards and inputs checked, outputs compared with the
reference's), then, when correct, the timing stage, and re-verifies a suspicious speedup on new
inputs. Policy code can only cause statuses here; environment faults (a broken reference, a backend
bug) become `env_error`. This module holds `evaluate` and the correctness stage (`_Run`); the rest:
  execute/launching.py     bind_plan, launch_args, launch_all: the plan on the device;
  execute/buffers.py       poisoned outputs and scratch between guard regions;
  execute/timing_stage.py  TimingStage: the adaptive timing on verified runs (measure, GPU alone) and
                           their full comparisons (verify, GPU shared); the reference's timing;
  judge/compare.py         compare_output, check_input_unchanged: what a wrong output is;
  judge/poison.py          the poison, and counting what survives of it;
  judge/expected_cache.py  reference outputs cached masked per trial;
  judge/faults.py          EnvFault (env_error) and Failed (a Result to return), raised by the stages.

Optional extensions of the Device protocol that the harness uses when present:
  `synchronize(timeout_s=...)`    the soft time left in the stage, so a hang raises instead of blocking;
  `time_runs(..., timeout_s=...)` the same for the timing stage's runs (a kernel may hang only sometimes);
  `end_job()`                     called after every evaluation (CupyDevice frees its memory pool);
  `max_scratch_bytes`             the scratch one evaluation may declare (cpu), checked before allocating;
  `healthy`                       False after a sticky error (read by the pipeline to replace the worker).
  `hung`                          True while a kernel may still run (a hang): the worker keeps its GPU lock
                                  until it exits (execute/gpu_lock.gpu_access).
"""
from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from typing import Any

from kernels_env.backends.base import (Device, FatalDeviceError, KernelRuntimeError, KernelTimeout, Program,
                                       launches_xp_arrays)
from kernels_env.core.config import EnvConfig
from kernels_env.core.program import Submission
from kernels_env.core.result import Mismatch, Result
from kernels_env.core.status import Status
from kernels_env.execute.buffers import poison, scratch_refusal
from kernels_env.execute.gpu_lock import gpu_access
from kernels_env.execute import domain_draws, input_cache
from kernels_env.execute.inputs import describe_distributions, evaluation_seed, make_inputs
from kernels_env.execute import launching
from kernels_env.execute.launching import bind_plan, launch_all
from kernels_env.execute.timing_stage import TimingStage, timing_details, timing_message
from kernels_env.judge import expected_cache
from kernels_env.judge.compare import check_input_unchanged, compare_output, mismatch_message
from kernels_env.judge.faults import EnvFault, Failed, stage_outcome
from kernels_env.judge.trial_readout import InputDigest, TrialReadout
from kernels_env.source.launch import FormatError, ResolvedPlan
from kernels_env.source.submission import in_launch_block
from kernels_env.tasks.spec import Task

REVERIFY_SEED_OFFSET = 1_000_003  # "another seed" for re-verifying a suspicious speedup
SETTLE_TIMEOUT_S = 5.0  # an evaluation's closing synchronisation: a kernel still running past it hung


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
        self.seed = evaluation_seed(config.seed)  # this evaluation's draws: fresh unless EnvConfig.seed is set
        self.trials = 0
        self.stage = "correctness"
        self.stage_seconds: dict[str, float] = {}

    def result(self, status: Status, message: str, **kw: Any) -> Result:
        return Result(status=status, message=message, task=self.task.name, backend=self.device.name,
                      trials=self.trials, stage_seconds=dict(self.stage_seconds), **kw)

    def device_failure(self, e: Exception, stage: str) -> Result:
        where = getattr(e, "where", "")
        prefix = f"{where}: " if where else ""
        if isinstance(e, KernelTimeout):
            return self.result(Status.TIMEOUT, f"{stage}: {prefix}kernel timed out: {e}", details=str(e))
        return self.result(Status.RUNTIME_ERROR, f"{stage}: {prefix}{e}", details=str(e))

    def fresh_arrays(self, trial: int, seed: int, inputs: dict[str, Any] | None = None
                     ) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any]]:
        """(candidate arrays: `inputs` (by default the trial's, drawn now) + poisoned outputs + zeroed
        scratch, pristine input copies or None, each output's poisoned guard: see buffers.poison).

        Copies are made only where the kernels cannot reach them (the cpu backend: they run in
        another process and see its shared buffers only). Elsewhere they would share the device
        memory with the kernels, which could rewrite a copy together with its input and so choose
        the inputs the reference is checked on: there the inputs are judged by a keyed checksum taken
        before the launch (`given_inputs`), or regenerated after the run (`pristine_inputs`)."""
        try:
            inputs = self.trial_inputs(trial, seed) if inputs is None else inputs
            copies = None
            if not launches_xp_arrays(self.device):  # the cpu backend: into its guard-paged shared memory
                copies = inputs
                inputs = {k: self.device.to_device(v) for k, v in inputs.items()}
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
        return arrays, copies, guards

    def given_inputs(self, trial: int, seed: int) -> tuple[dict[str, Any] | None, InputDigest | None]:
        """(the trial's inputs for its kernels, their keyed checksums taken before the launch) where the
        harness judges inputs by checksums: with EnvConfig.input_checksums, on the arrays the expected
        cache is used on (expected_cache.used_on: CuPy; NumPy in tests). The inputs are copies of the
        device's cached ones when intact, else drawn (execute/input_cache.py). Else (None, None): drawn
        by fresh_arrays and judged against `pristine_inputs`. See judge/trial_readout.py."""
        if not (self.config.input_checksums and expected_cache.used_on(self.xp)):
            return None, None
        cache = input_cache.cache_for(self.device) if self.config.reuses_draws else None
        return input_cache.given_inputs(self.xp, cache, self._expected_key(trial, seed),
                                        lambda: self.trial_inputs(trial, seed))

    def pristine_inputs(self, trial: int, seed: int, copies: dict[str, Any] | None) -> dict[str, Any]:
        """The inputs of (trial, seed) to judge a run by, after its kernels ran: `copies` where they
        were out of the kernels' reach (fresh_arrays), else generated again (a pure function of the
        trial and seed, made after the kernels finished)."""
        return copies if copies is not None else self.trial_inputs(trial, seed)

    def trial_inputs(self, trial: int, seed: int, out: dict[str, Any] | None = None) -> dict[str, Any]:
        """Fresh inputs of (trial, seed) on the device's array module (make_inputs; written into
        `out`'s arrays when given); a failure to make them is the environment's (EnvFault). Every
        stage gets its inputs here."""
        try:
            return make_inputs(self.task, self.sizes, trial, seed, self.xp, self.config.input_domains, out)
        except Exception as e:
            raise EnvFault(f"could not make the inputs of task {self.task.name!r}: "
                           f"{type(e).__name__}: {e}") from e

    # ---- reference outputs: the only way the stages get them (see kernels_env/judge/expected_cache.py) ----
    # check_outputs   the correctness stages: compares with the masked per-trial cache (fused check,
    #                 no plaintext expected output on the device on a hit that passes);
    # expected_outputs plaintext lists, for code that needs the values themselves (e.g. timing
    #                 inputs); pass them to scrub_expected when done.
    def _expected_cache(self) -> expected_cache.ExpectedCache | None:
        cfg = self.config
        if not (cfg.cache_expected and cfg.reuses_draws and expected_cache.used_on(self.xp)):
            return None
        return expected_cache.cache_for(self.device, cfg.expected_cache_bytes)

    def _expected_key(self, trial: int, seed: int) -> tuple[Any, ...]:
        """What a trial's expected outputs are a pure function of (the cache key)."""
        t = self.task
        ref = getattr(t.reference, "__module__", ""), getattr(t.reference, "__qualname__", repr(t.reference))
        return (t.name, ref, tuple(sorted(self.sizes.items())), int(seed), int(trial), t.inputs, t.scalars,
                tuple((b.name, b.dtype, b.resolve_shape(self.sizes)) for b in t.outputs),
                domain_draws.draws_version(self.config.input_domains))

    def _cached(self, trial: int, seed: int, count: bool = True) -> list[expected_cache.MaskedOutput] | None:
        cache = self._expected_cache()
        return cache.get(self._expected_key(trial, seed), count) if cache is not None else None

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
        return self.judge_outputs(trial, seed, pristine, arrays, dist, self._cached(trial, seed))

    def judge_outputs(self, trial: int, seed: int, pristine: dict[str, Any], arrays: dict[str, Any], dist: str,
                      cached: list[expected_cache.MaskedOutput] | None,
                      counts: list[int | None] | None = None) -> Mismatch | None:
        """check_outputs with the cache entry looked up (`cached`) and, optionally, its fused checks
        already run (`counts`: per output the failing elements, None for a failed checksum)."""
        if cached is not None:
            verdict = self._check_cached(cached, trial, pristine, arrays, dist, counts)
            if verdict is not False:
                return verdict  # type: ignore[return-value]
            self._discard_tampered(trial, seed)
        expected = self._compute_expected(trial, seed, pristine)
        try:
            atols = self.task.atol_for(self.xp, pristine, self.sizes)
            for b, exp, atol in zip(self.task.outputs, expected, atols, strict=False):
                rtol = self.task.tol(b.dtype)[1]
                m = compare_output(self.xp, b.name, arrays[b.name], exp, b.dtype, atol, rtol, trial, dist)
                if m is not None:
                    return m
            return None
        finally:
            self.scrub_expected(expected, pristine)

    def _check_cached(self, cached: list[expected_cache.MaskedOutput], trial: int, pristine: dict[str, Any],
                      arrays: dict[str, Any], dist: str,
                      counts: list[int | None] | None = None) -> Mismatch | None | bool:
        """check_outputs on a cache hit: None (all pass), a Mismatch, or False (an entry's checksum
        failed: recompute). `counts`: the fused checks' results when already run (judge_outputs).
        The fused check uses the dtype's atol, a lower bound of Task.atol_for's: elements it flags
        are judged again by compare_output with the input-derived tolerance."""
        for j, (b, masked) in enumerate(zip(self.task.outputs, cached, strict=True)):
            atol, rtol = self.task.tol(b.dtype)
            bad = counts[j] if counts is not None else masked.check(self.xp, arrays[b.name], b.dtype, atol, rtol)
            if bad is None:
                return False
            if bad:
                plain = masked.unmask(self.xp)
                try:
                    full = self.task.atol_for(self.xp, pristine, self.sizes)[j]
                    m = compare_output(self.xp, b.name, arrays[b.name], plain, b.dtype, full, rtol, trial, dist)
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
        dist = describe_distributions(self.task, trial, self.config.input_domains)
        for b in self.task.inputs:
            if arrays[b.name] is pristine[b.name]:  # the regenerated input itself (a kept timed run's)
                continue
            m = check_input_unchanged(self.xp, b.name, pristine[b.name], arrays[b.name], trial, dist)
            if m is not None:
                raise Failed(self.result(Status.WRONG_OUTPUT, prefix + mismatch_message(m), mismatch=m))
        m = self.check_outputs(trial, seed, pristine, arrays, dist)
        if m is not None:
            raise Failed(self.result(Status.WRONG_OUTPUT, prefix + mismatch_message(m), mismatch=m))

    def check_trial(self, stage: str, trial: int, seed: int, arrays: dict[str, Any], guards: dict[str, Any],
                    digest: InputDigest | None, copies: dict[str, Any] | None) -> None:
        """Judge a correctness trial after its kernels ran; raise Failed (runtime_error for a write
        outside a buffer, wrong_output for a changed input or a wrong output, in that order, buffers in
        task order). The guards, the inputs' checksums (with `digest`) and the cached outputs' fused
        checks are counted on the device and read back once (judge/trial_readout.py); only a failure or
        a cache miss does more. Without `digest` the inputs are compared with `pristine_inputs`."""
        task, xp = self.task, self.xp
        checked = [(b.name, b.dtype, "output") for b in task.outputs]
        checked += [(name, dtype, "scratch buffer") for name, dtype, _ in self.plan.scratch]
        cached = self._cached(trial, seed, count=False)  # counted once the outputs are judged
        digested = task.inputs if digest is not None else ()
        readout = TrialReadout(xp, len(checked) + len(digested) + (len(task.outputs) if cached else 0))
        guard_slots = [readout.guards(guards[name], dtype) for name, dtype, _ in checked]
        input_slots = [readout.checksum(arrays[b.name], digest.key) for b in digested] if digest else []
        output_slots = [readout.expected(m, arrays[b.name], b.dtype, *task.tol(b.dtype))
                        for b, m in zip(task.outputs, cached or (), strict=False)]
        v = readout.read()
        for (name, _, kind), i in zip(checked, guard_slots, strict=True):
            if v[i] or v[i + 1]:
                where = "past the end of" if v[i + 1] else "before the start of"
                lead, trail = guards[name]
                raise Failed(self.result(
                    Status.RUNTIME_ERROR,
                    f"{stage}: out-of-bounds write: the kernels wrote {where} {kind} "
                    f"{name!r} ({arrays[name].size} elements); {v[i] + v[i + 1]} of the "
                    f"{lead.size + trail.size} guard elements around it changed (trial {trial}). "
                    f"Check the bounds of every store against the {kind}'s size."))
        dist = describe_distributions(task, trial, self.config.input_domains)
        prefix = f"{stage}: "
        if digest is None:
            pristine = self.pristine_inputs(trial, seed, copies)
            changed = list(task.inputs)
        else:  # inputs whose checksum held are the bits the kernels were given: the reference's inputs
            changed = [b for b, i in zip(digested, input_slots, strict=True) if v[i] != digest.values[b.name]]
            pristine = self.pristine_inputs(trial, seed, copies) if changed else \
                {b.name: arrays[b.name] for b in task.inputs}
        for b in changed:
            m = check_input_unchanged(xp, b.name, pristine[b.name], arrays[b.name], trial, dist)
            if m is not None:
                raise Failed(self.result(Status.WRONG_OUTPUT, prefix + mismatch_message(m), mismatch=m))
            if digest is not None:
                raise EnvFault(f"input {b.name!r} of task {task.name!r}: its checksum changed in trial {trial} "
                               "but its bits equal the regenerated input's (a checksum bug)")
        counts = [None if v[i] != m.mac else v[i + 1] for m, i in zip(cached, output_slots, strict=True)] \
            if cached else None
        cache = self._expected_cache()
        if cache is not None:
            cache.count(cached is not None)
        m = self.judge_outputs(trial, seed, pristine, arrays, dist, cached, counts)
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

        def trials() -> None:
            for trial in range(cfg.correctness_trials):
                given, digest = self.given_inputs(trial, seed)
                arrays, copies, guards = self.fresh_arrays(trial, seed, given)
                del given
                self.trials += 1
                launched_at[0] = time.monotonic()
                launch_all(self.device, self.program, self.plan, arrays, remaining)
                spent[0] += time.monotonic() - launched_at[0]
                if spent[0] > cfg.limits.correctness:
                    raise Failed(self.result(Status.TIMEOUT, f"{stage}: exceeded its "
                                                             f"{cfg.limits.correctness:g} s limit (at trial {trial})"))
                self.check_trial(stage, trial, seed, arrays, guards, digest, copies)
                del arrays, copies, guards

        try:
            return stage_outcome(self, stage, trials)
        finally:
            self.stage_seconds[stage] = self.stage_seconds.get(stage, 0.0) + time.monotonic() - start


def plan_callable(device: Device, program: Program, task: Task, submission: Submission,
                  sizes: dict[str, int], config: EnvConfig, trial: int = 0) -> Callable[[], None]:
    """A zero-argument function that launches the whole plan (no sync) on fresh trial inputs: exactly
    what the timing stage measures. For benchmarks; raises FormatError for bad plans."""
    kernels = dict(getattr(program, "kernels", {}) or {})
    kernels.update(submission.kernels)
    plan = bind_plan(submission, task, sizes, kernels)
    run = _Run(device, program, task, plan, sizes, config)
    arrays, _, _ = run.fresh_arrays(trial, run.seed)
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
        try:
            res = _evaluate(run, submission)
            # the job's GPU work settled: a sticky error its kernels left surfaces in this job, as a
            # FatalDeviceError (below), never in the next job of this worker
            launching.sync(device, SETTLE_TIMEOUT_S)
        except FatalDeviceError:
            raise
        except Exception as e:  # the environment's own work failed: was the context lost behind it?
            lost = _sticky_error_behind(device)
            if lost is None:
                raise
            lost.surfaced_in = f"{type(e).__name__}: {e}"[:200]
            raise lost from e
        res.stage_seconds = {**res.stage_seconds, **run.stage_seconds}  # include the stage that failed
        res.trials = run.trials
        return res
    except FatalDeviceError as e:
        res = run.device_failure(e, run.stage)
        res.message += " (sticky CUDA error: the worker's context is unusable)"
        if e.surfaced_in:
            res.message += ("; it surfaced in the environment's own work after the kernels had run and "
                            "synchronised: they left the GPU unusable, e.g. by writing far outside their "
                            "buffers")
            res.details = f"{res.details}\nthe environment's work failed first with {e.surfaced_in}"
        e.result = res
        raise
    except EnvFault as e:
        return Result.env_error(str(e), task=task.name, details=traceback.format_exc(limit=3))
    except Exception as e:  # a backend bug must not crash the caller nor be blamed on the policy
        return Result.env_error(f"{run.stage}: the {device.name} backend raised {type(e).__name__}: {e}",
                                task=task.name, details=traceback.format_exc(limit=5))
    finally:
        _end_job(device)


def _sticky_error_behind(device: Device) -> FatalDeviceError | None:
    """After the environment's own work failed in an evaluation: the device's sticky error (or hang)
    behind that failure, if its context holds one, as the FatalDeviceError a synchronisation raises.

    The environment's work (inputs, reference, comparisons) is trusted and every job ends settled
    (`evaluate` synchronises), so a context lost during this job was lost by this job's kernels:
    a kernel that corrupts memory far outside its buffers can make a later environment kernel fault
    (seen on an H100: cudaErrorIllegalInstruction in a comparison after the candidate's trial had
    synchronised cleanly). Reported as env_error, that fault would be masked out of training instead
    of scored; it is the submission's runtime_error (timeout for a hang)."""
    try:
        launching.sync(device, SETTLE_TIMEOUT_S)
    except FatalDeviceError as lost:
        return lost
    except Exception:
        return None
    return None


def _end_job(device: Device) -> None:
    """The device's between-jobs step (a sync, maybe freeing cached memory), under the shared GPU lock:
    no other worker's timing may run while this one unmaps memory. Skipped for an unusable device
    (a hung one keeps its hold; a faulted one has nothing left to free)."""
    end_job = getattr(device, "end_job", None)
    if end_job is None or getattr(device, "hung", False) or getattr(device, "healthy", True) is False:
        return
    try:
        with gpu_access(device, exclusive=False):
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
    refused = scratch_refusal(run.device, run.plan.scratch)
    if refused is not None:
        return run.result(Status.RUNTIME_ERROR, refused)
    with gpu_access(run.device, exclusive=False):  # other workers' timing waits; trials overlap
        failure = run.correctness(run.seed, "correctness")
    if failure is not None:
        return failure
    if not config.timing:
        return run.result(Status.CORRECT, f"correct on {run.trials} trials (timing off)")
    stage = TimingStage(run)
    with gpu_access(run.device, exclusive=True):  # no other GPU work while timing
        timing = stage.measure()
    if isinstance(timing, Result):
        return timing
    # the timed runs' full comparisons, then a suspicious speedup's trials on another seed: nothing
    # timed, so under one shared hold (released in between, the next queued timing would go first)
    with gpu_access(run.device, exclusive=False):
        failure = stage.verify()
        if failure is not None:
            return failure
        if timing.speedup is not None and timing.speedup > config.suspicious_speedup:
            timing.suspicious = True
            failure = run.correctness(run.seed + REVERIFY_SEED_OFFSET, "re-verification")
            if failure is not None:
                failure.message = (f"suspicious {timing.speedup:.1f}x speedup; {failure.message}")
                return failure
            timing.reverified = True
    return run.result(Status.CORRECT, timing_message(timing, run.trials), timing=timing,
                      details=timing_details(timing, config))
