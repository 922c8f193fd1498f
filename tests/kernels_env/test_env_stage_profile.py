"""benchmarks/env_stage_profile.py on the cpu backend: the timing stage taken apart by wrapped calls
(every part measured, the wrappers removed afterwards) and the kernel's own time from the runs the
stage really made."""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import env_stage_profile as prof  # noqa: E402


def test_profile_takes_the_timing_stage_apart_and_unwraps_it(cpu_device) -> None:
    from kernels_env.core.config import EnvConfig
    from kernels_env.execute import timing_stage
    from kernels_env.tasks.registry import get_task
    config = EnvConfig(backend="cpu", sizes="small", correctness_trials=1, warmup_runs=1, min_timed_runs=3,
                       timed_runs=5)
    originals = (type(cpu_device).time_runs, timing_stage._TimedBuffers.load, timing_stage.launch_all)
    row = prof.profile_task(get_task("hardtanh"), cpu_device, config)
    assert "error" not in row, row
    assert 1 + 3 <= row["t_runs"] <= 1 + 1 + 5  # the probe, warm-up and timed runs the stage made
    assert row["timing_kernel_own"] == row["t_runs"] * row["kernel_median"]
    for part in ("t_time_runs", "t_load", "t_launch", "t_counts", "t_verify"):
        assert row[part] > 0, (part, row)
    # the loop's parts happen inside it
    assert row["t_load"] + row["t_launch"] + row["t_counts"] <= row["t_time_runs"]
    assert (type(cpu_device).time_runs, timing_stage._TimedBuffers.load, timing_stage.launch_all) == originals


def test_profile_takes_the_correctness_trials_apart_with_timing_off(cpu_device) -> None:
    """--generated profiles with timing off (RL's configuration): no timing columns, the trials' steps
    measured, each inside the stage, and the harness unwrapped afterwards."""
    from kernels_env.core.config import EnvConfig
    from kernels_env.execute import harness
    from kernels_env.tasks.generated import generated_task_names
    from kernels_env.tasks.registry import get_task
    config = EnvConfig(backend="cpu", sizes="small", correctness_trials=2, timing=False)
    originals = (harness._Run.fresh_arrays, harness.launch_all, harness._Run.check_trial, harness.TrialReadout.read)
    row = prof.profile_task(get_task(generated_task_names(4000, split="all")[0]), cpu_device, config)
    assert "error" not in row, row
    assert row["stage_timing"] == 0 and row["t_runs"] == 0
    for part in ("c_inputs", "c_fresh", "c_launch", "c_checks", "c_read", "c_pristine"):
        assert row[part] > 0, (part, row)
    assert row["c_read"] + row["c_pristine"] <= row["c_checks"]  # inside the checks (no checksums on cpu)
    assert (harness._Run.fresh_arrays, harness.launch_all, harness._Run.check_trial,
            harness.TrialReadout.read) == originals
