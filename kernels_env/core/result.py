"""The Result of scoring one submission, JSON-serialisable (it crosses process boundaries)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from kernels_env.core.status import Status


# The stages of an evaluation, in the order it runs them: the keys of Result.stage_seconds
EVAL_STAGES = ("parse", "compile", "load", "correctness", "timing")


@dataclass
class KernelResources:
    """Per-kernel resource usage reported by the compiler (ptxas)."""
    registers: int | None = None
    spill_stores_bytes: int | None = None
    spill_loads_bytes: int | None = None
    shared_bytes: int | None = None
    stack_frame_bytes: int | None = None


@dataclass
class Mismatch:
    """Why an output was judged wrong (DESIGN 3.3 step 3)."""
    reason: str  # "mismatch" | "nan_or_inf" | "unwritten" | "input_modified" | "shape"
    buffer: str
    trial: int
    distribution: str
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    frac_mismatched: float | None = None
    first_bad_index: list[int] | None = None
    expected: float | None = None
    got: float | None = None
    atol: float | None = None
    rtol: float | None = None


@dataclass
class Timing:
    """Timings in milliseconds. `speedup` is None when the device's timings are not comparable (cpu)."""
    device: str  # "cuda" | "cpu"
    comparable: bool
    runs: int  # timed runs of the kernel (adaptive: DESIGN 3.3 step 4)
    kernel_median_ms: float
    kernel_mean_ms: float
    ref_median_ms: float | None = None
    ref_mean_ms: float | None = None
    speedup: float | None = None
    suspicious: bool = False  # speedup > config.suspicious_speedup: re-verified on new inputs
    reverified: bool = False
    # Informational only (the reward uses `speedup`, against the CuPy reference): torch eager's time for
    # the task's KernelBench-style model where torch is installed, {"torch_median_ms", "speedup_vs_torch"}.
    baseline: dict[str, float] | None = None
    # How the kernel was timed (DESIGN 3.3.1); after the fields above to keep their positions.
    warmup_runs: int = 0  # untimed runs of the kernel before `runs`
    kernel_ci_ms: list[float] | None = None  # [low, high]: 95% confidence interval of the median
    ci_rel_width: float | None = None  # (high - low) / kernel median
    ref_runs: int = 0  # timed runs of the reference's measurement that counts (the lower median of two)
    checked_runs: int = 0  # kernel runs whose outputs and guards were checked on the device
    verified_runs: int = 0  # of those, runs compared in full with the reference
    method: str = ""  # the timing method's version (timing_stage.TIMING_METHOD)
    # The spread of the `runs` timed kernel runs (tells a uniformly slower window from a few slowed runs).
    kernel_min_ms: float | None = None  # fastest timed kernel run
    kernel_max_ms: float | None = None  # slowest timed kernel run
    # The L2 flush before each kernel run moves a fixed number of bytes: its median time is a probe of
    # whether something else on the GPU slowed the timing window down (cupy; None where not recorded).
    flush_median_ms: float | None = None
    # The host's median lateness past the device-side hold before a run's launches (cupy): above 0, the
    # GPU may have idled inside the timing window waiting for the launch (a CPU-starved host).
    launch_late_ms: float | None = None
    # Problem tasks (kernels_env/problems), whose reference is a PyTorch Model: torch eager's and
    # torch.compile's median times on the timing inputs and the kernel's speedups against them (`speedup`
    # is then the one against eager); None elsewhere or where one was not measured.
    eager_median_ms: float | None = None
    compile_median_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None


@dataclass
class Result:
    status: Status
    message: str = ""  # one line a human (and the feedback renderer) can use
    task: str = ""
    backend: str = ""
    details: str = ""  # bounded, cleaned log: compiler errors, runtime error text, parse error context
    resources: dict[str, KernelResources] = field(default_factory=dict)
    mismatch: Mismatch | None = None
    timing: Timing | None = None
    stage_seconds: dict[str, float] = field(default_factory=dict)  # seconds per EVAL_STAGES entry it reached
    trials: int = 0
    cached: bool = False
    key: str = ""  # content hash used by the cache

    def __post_init__(self) -> None:
        self.status = Status.parse(self.status)

    @property
    def correct(self) -> bool:
        return self.status is Status.CORRECT

    @property
    def speedup(self) -> float | None:
        return self.timing.speedup if self.timing is not None else None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["status"] = self.status.value
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Result:
        d = dict(d)
        d["resources"] = {k: KernelResources(**v) for k, v in (d.get("resources") or {}).items()}
        if d.get("mismatch") is not None:
            d["mismatch"] = Mismatch(**d["mismatch"])
        if d.get("timing") is not None:
            d["timing"] = Timing(**d["timing"])
        return cls(**d)

    @classmethod
    def env_error(cls, message: str, task: str = "", details: str = "") -> Result:
        return cls(status=Status.ENV_ERROR, message=message, task=task, details=details)
