"""EnvConfig: every knob of scoring (DESIGN 3.3, 3.5). Part of the cache key."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

# Trial indices: correctness trials are 0 .. correctness_trials - 1; timing run r draws the inputs of
# trial TIMING_TRIAL_BASE + r (execute/timing_stage.py), always the typical draw (execute/domain_draws.py).
TIMING_TRIAL_BASE = 1000

BACKENDS = ("auto", "cupy", "cpu")
SIZE_SETS = ("eval", "small")
# How EvalPool runs its jobs: worker processes, in the calling process, or
# on Ray evaluation hosts (schedule/ray_pool.py). Here, not in the pool's
# heavy module, so a run config (leap_jax/train/config_env.py) checks the mode without importing it.
POOL_MODES = ("process", "inline", "ray")
# The shortest heartbeat timeout of EvalPool(mode="ray"): a host silent that long counts as hung, and a
# shorter one would kill busy hosts. Here so the run config checks it without importing the pool.
RAY_MIN_HEARTBEAT_S = 1.0
# Fields that change how fast a result is computed, never the result: left out of the result cache's
# key (kernels_env/execute/result_cache.py), so cached results are shared and keys stay as they were.
RESULT_NEUTRAL_FIELDS = ("cache_expected", "expected_cache_bytes", "input_checksums")


# The hang bound (docs/THREAT_MODEL.md): a kernel that never returns, in any stage of an evaluation,
# ends as `timeout` within its stage's limit plus HANG_GRACE_S (the cpu runner's wall deadline past the
# stage's time left; a hung GPU stream polled against it); the process pool's watchdog kills a worker
# that still overruns its job's limits (StageLimits.job_s) and, being the submission's timeout, never
# retries it.
HANG_GRACE_S = 3.0


@dataclass(frozen=True)
class StageLimits:
    """Wall-clock limits per stage, seconds."""
    parse: float = 2.0
    compile: float = 30.0
    correctness: float = 30.0  # all trials together
    timing: float = 60.0

    def job_s(self, parse: bool = False) -> float:
        """The process pool's watchdog for one evaluation job: compile (the cpu backend builds its
        C++ when loading), trials and timing (and parse, for a job that parses too)."""
        return (self.parse if parse else 0.0) + self.compile + self.correctness + self.timing


@dataclass(frozen=True)
class EnvConfig:
    backend: str = "auto"  # auto | cupy | cpu
    arch: str | None = None  # e.g. "sm_90"; None: from the device, else "sm_90"
    sizes: str = "eval"  # which size set of the task: eval | small
    correctness_trials: int = 5
    timing: bool = True
    # Timing (DESIGN 3.3 step 4): `warmup_runs` untimed runs, then at least `min_timed_runs` timed
    # runs, then more in batches until the median's 95% confidence interval is within
    # `timing_ci_rel_width` of it, `timing_budget_s` of timing has passed or `timed_runs` (the
    # most timed runs; it also caps min_timed_runs) is reached.
    warmup_runs: int = 3
    min_timed_runs: int = 10
    timed_runs: int = 500
    timing_ci_rel_width: float = 0.03
    timing_budget_s: float = 1.0
    flush_l2: bool = True
    suspicious_speedup: float = 10.0
    # The seed of the trials' and timed runs' input draws. None (the default): every evaluation draws
    # its own from fresh entropy (execute/inputs.evaluation_seed), so no submission can know or learn
    # its inputs (a kernel that looks answers up in a table keyed on a few input elements fails). An
    # integer makes every evaluation draw the same inputs: for tests and debugging only (never train
    # with one); only then are the expected-output and input caches used (docs/THREAT_MODEL.md).
    seed: int | None = None
    limits: StageLimits = field(default_factory=StageLimits)
    max_log_chars: int = 4000
    cpu_compiler: str = "c++"  # the cpu backend's host compiler
    cpu_opt_level: str = "-O1"
    # Reuse each trial's reference outputs across evaluations, stored masked on the device
    # (kernels_env/judge/expected_cache.py; CuPy devices only); the bound is per device, in bytes.
    cache_expected: bool = True
    expected_cache_bytes: int = 1 << 30
    # Judge a trial's inputs unchanged by a keyed checksum taken before its launch and read back with
    # the trial's other checks (kernels_env/judge/trial_readout.py; CuPy devices only); False draws
    # them again after the run and compares element by element. Same results, fewer host round trips.
    input_checksums: bool = True
    # Correctness trials draw over each input buffer's declared domain (kernels_env/tasks/domains.py):
    # edges, extremes and a structured (duplicated/correlated/sorted rows) trial besides the legacy
    # distributions (execute/domain_draws.py). False reproduces the legacy draws bit for bit.
    input_domains: bool = True
    # Score on a GPU whose device code can dereference its process's host memory (HMM or ATS:
    # cudaDevAttrPageableMemoryAccess = 1), where a submitted kernel could reach the judge's keys.
    # False (the default) refuses such a GPU when its device is created (backends.check_host_isolation).
    allow_host_memory_access: bool = False

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"EnvConfig.backend={self.backend!r}; expected one of {BACKENDS}")
        if self.sizes not in SIZE_SETS:
            raise ValueError(f"EnvConfig.sizes={self.sizes!r}; expected one of {SIZE_SETS}")
        if not 1 <= self.correctness_trials <= TIMING_TRIAL_BASE:
            raise ValueError(f"EnvConfig.correctness_trials={self.correctness_trials}; expected 1 .. "
                             f"{TIMING_TRIAL_BASE} (trials from {TIMING_TRIAL_BASE} on are the timing runs')")
        self._check_timing()
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0):
            raise ValueError(f"EnvConfig.seed={self.seed!r}; expected null (fresh inputs every evaluation) or "
                             "an integer >= 0 (the same inputs every evaluation: tests and debugging)")
        for name in ("cache_expected", "input_checksums", "input_domains", "allow_host_memory_access"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"EnvConfig.{name}={getattr(self, name)!r}; expected true or false")
        if (isinstance(self.expected_cache_bytes, bool) or not isinstance(self.expected_cache_bytes, int)
                or self.expected_cache_bytes < 0):
            raise ValueError(f"EnvConfig.expected_cache_bytes={self.expected_cache_bytes!r}; expected an "
                             "integer >= 0 (bytes of masked expected outputs kept per device)")
        if isinstance(self.limits, dict):  # allow from_dict / YAML
            object.__setattr__(self, "limits", StageLimits(**self.limits))

    def _check_timing(self) -> None:
        """Reject timing knobs that cannot work, naming the bad value."""
        bad = [(f"timed_runs={self.timed_runs}", "an integer >= 1 (the most timed runs)")
               if self.timed_runs < 1 else None,
               (f"warmup_runs={self.warmup_runs}", "an integer >= 0") if self.warmup_runs < 0 else None,
               (f"min_timed_runs={self.min_timed_runs}", "an integer >= 1")
               if self.min_timed_runs < 1 else None,
               (f"timing_ci_rel_width={self.timing_ci_rel_width}", "a fraction in (0, 1), e.g. 0.03")
               if not 0 < self.timing_ci_rel_width < 1 else None,
               (f"timing_budget_s={self.timing_budget_s}", "seconds > 0")
               if not self.timing_budget_s > 0 else None]
        for what, expected in filter(None, bad):
            raise ValueError(f"EnvConfig.{what}; expected {expected}")

    @property
    def reuses_draws(self) -> bool:
        """Whether evaluations draw the same inputs (an explicit seed): only then can trial inputs and
        expected outputs be reused across evaluations (execute/input_cache.py, judge/expected_cache.py)."""
        return self.seed is not None

    @property
    def timing_min_runs(self) -> int:
        """The fewest timed runs of a kernel that fits the limits: min_timed_runs capped by timed_runs."""
        return min(self.min_timed_runs, self.timed_runs)

    def replace(self, **changes: Any) -> EnvConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EnvConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown EnvConfig keys {sorted(unknown)}; expected some of {sorted(known)}")
        return cls(**d)
