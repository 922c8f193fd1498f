"""Run-config sections of the environment: the evaluation pool (`env`, which builds kernels_env's
EnvConfig in one place, `EnvCfg.env_config`) and the task selection (`tasks`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kernels_env import (BACKENDS, CURRENT_FAMILY_VERSION, EnvConfig, FAMILY_VERSIONS, POOL_MODES,
                         RAY_MIN_HEARTBEAT_S, SIZE_SETS, StageLimits)
from leap_jax.train.config_loader import ConfigError, choice, positive

_ENV = EnvConfig()  # the environment's defaults: the `env:` section's judging fields default to them

@dataclass
class EnvCfg:
    backend: str = "auto"  # auto | cupy | cpu
    pool_mode: str = "process"  # process | inline | ray (evaluation hosts of a Ray cluster: docs/DISTRIBUTED_EVAL.md)
    gpu_workers: int | None = None  # GPUs the cupy pool uses (None: all visible)
    exec_workers_per_gpu: int | None = None  # evaluation processes per GPU (None: the pool's default, 3)
    compile_workers: int | None = None
    cache: bool = True
    # kernels_env's EnvConfig, field by field (its docstrings say what each does); no `seed` (fresh inputs
    # every evaluation; env_config takes one for tests),
    # `timing` the trainer's choice below, the stage limits the *_timeout fields
    sizes: str = _ENV.sizes  # eval | small
    correctness_trials: int = _ENV.correctness_trials
    # draw correctness trials over each input buffer's declared domain, edges and a structured trial
    # (EnvConfig.input_domains); false reproduces the legacy draws bit for bit
    input_domains: bool = _ENV.input_domains
    # judge a trial's inputs by a keyed checksum read back with its other checks (EnvConfig.input_checksums,
    # CuPy only); false draws them again and compares: same results, more host round trips
    input_checksums: bool = _ENV.input_checksums
    # score on a GPU whose kernels can read the process's host memory (HMM/ATS; EnvConfig's field of the
    # same name): false refuses such a host, true accepts the risk (trusted kernels only)
    allow_host_memory_access: bool = _ENV.allow_host_memory_access
    # "auto": training rollouts are timed only when the algorithm's reward reads speedups
    # (algorithms.reward_reads_speedup); evaluations are always timed (fast_p). true/false: all
    timing: bool | str = "auto"
    warmup_runs: int = _ENV.warmup_runs
    min_timed_runs: int = _ENV.min_timed_runs
    timed_runs: int = _ENV.timed_runs  # the most timed runs; timing stops earlier once the median is tight
    timing_ci_rel_width: float = _ENV.timing_ci_rel_width
    timing_budget_s: float = _ENV.timing_budget_s
    arch: str | None = _ENV.arch
    flush_l2: bool = _ENV.flush_l2
    suspicious_speedup: float = _ENV.suspicious_speedup
    max_log_chars: int = _ENV.max_log_chars
    cpu_compiler: str = _ENV.cpu_compiler
    cpu_opt_level: str = _ENV.cpu_opt_level
    cache_expected: bool = _ENV.cache_expected
    expected_cache_bytes: int = _ENV.expected_cache_bytes
    parse_timeout: float = _ENV.limits.parse
    compile_timeout: float = _ENV.limits.compile
    correctness_timeout: float = _ENV.limits.correctness
    timing_timeout: float = _ENV.limits.timing
    jax_mem_fraction: float = 0.5  # XLA_PYTHON_CLIENT_MEM_FRACTION, leaves room for CuPy workers
    jax_preallocate: bool = False
    # pool_mode=ray (kernels_env/schedule/ray_pool.py): the cluster ("HEAD:6379", "ray://HEAD:10001";
    # None: $RAY_ADDRESS, else a local Ray), jobs per call to a host, batches in flight per host GPU,
    # resends of a job after host losses (then env_error), seconds with no host up before queued jobs
    # resolve to env_error, seconds a host may leave pings unanswered before it counts as hung (it is
    # killed and restarted, its jobs go elsewhere; a host busy with long jobs still answers)
    ray_address: str | None = None
    ray_batch_jobs: int = 8
    ray_inflight_per_gpu: int = 2
    ray_host_retries: int = 2
    ray_unavailable_timeout_s: float = 120.0
    ray_heartbeat_timeout_s: float = 30.0
    # the trainer stops (instead of training on a masked batch) when more than this share of a step's
    # evaluations are env_error (the environment failed, not the policy); 1 never stops
    max_env_error_fraction: float = 0.25

    def check(self) -> None:
        choice(self.backend, BACKENDS, "env.backend")
        choice(self.timing, (True, False, "auto"), "env.timing")
        choice(self.pool_mode, POOL_MODES, "env.pool_mode")
        choice(self.sizes, SIZE_SETS, "env.sizes")
        positive(self.correctness_trials, "env.correctness_trials")
        for name in ("input_domains", "input_checksums", "allow_host_memory_access"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"env.{name}={getattr(self, name)!r}: expected true or false")
        for name in ("gpu_workers", "exec_workers_per_gpu", "compile_workers"):
            if getattr(self, name) is not None:
                positive(getattr(self, name), f"env.{name}")
        if not 0 < self.jax_mem_fraction <= 1:
            raise ConfigError(f"env.jax_mem_fraction={self.jax_mem_fraction}: expected in (0, 1]")
        if not 0 <= self.max_env_error_fraction <= 1:
            raise ConfigError(f"env.max_env_error_fraction={self.max_env_error_fraction}: expected in [0, 1]")
        positive(self.ray_batch_jobs, "env.ray_batch_jobs")
        positive(self.ray_inflight_per_gpu, "env.ray_inflight_per_gpu")
        positive(self.ray_host_retries, "env.ray_host_retries", allow_zero=True)
        positive(self.ray_unavailable_timeout_s, "env.ray_unavailable_timeout_s")
        if not self.ray_heartbeat_timeout_s >= RAY_MIN_HEARTBEAT_S:
            raise ConfigError(f"env.ray_heartbeat_timeout_s={self.ray_heartbeat_timeout_s!r}: expected seconds "
                              f">= {RAY_MIN_HEARTBEAT_S:g} "
                              "(a host silent that long is killed as hung; shorter would kill busy hosts)")
        if self.ray_address is not None and self.pool_mode != "ray":
            raise ConfigError(f"env.ray_address={self.ray_address!r} is set but env.pool_mode={self.pool_mode!r}: "
                              "set env.pool_mode=ray to evaluate on the cluster, or drop env.ray_address")
        try:  # the judging fields' values and how they combine are EnvConfig's rules; named as config keys
            self.env_config(timing=self.timing is not False, seed=0)
        except ValueError as e:
            raise ConfigError("env." + str(e).removeprefix("EnvConfig.")) from e

    def pool_kwargs(self) -> dict[str, Any]:
        """EvalPool's arguments of these settings (all but `config`, which carries the backend): the one
        place pools are built from."""
        kw: dict[str, Any] = {"mode": self.pool_mode, "gpu_workers": self.gpu_workers,
                              "exec_workers_per_gpu": self.exec_workers_per_gpu,
                              "compile_workers": self.compile_workers, "cache": self.cache}
        if self.pool_mode == "ray":
            kw.update(address=self.ray_address, batch_jobs=self.ray_batch_jobs,
                      inflight_per_gpu=self.ray_inflight_per_gpu, host_retries=self.ray_host_retries,
                      unavailable_timeout_s=self.ray_unavailable_timeout_s,
                      heartbeat_timeout_s=self.ray_heartbeat_timeout_s)
        return kw

    def env_config(self, timing: bool, seed: int | None = None) -> EnvConfig:
        """kernels_env's EnvConfig of these settings (`timing` resolved: leap_jax.train.trainer.env_timing);
        `seed` None (training and evaluation): fresh inputs every evaluation (EnvConfig.seed)."""
        return EnvConfig(backend=self.backend, arch=self.arch, sizes=self.sizes,
                         correctness_trials=self.correctness_trials, input_domains=self.input_domains,
                         input_checksums=self.input_checksums,
                         allow_host_memory_access=self.allow_host_memory_access, timing=timing, warmup_runs=self.warmup_runs,
                         min_timed_runs=self.min_timed_runs, timed_runs=self.timed_runs,
                         timing_ci_rel_width=self.timing_ci_rel_width, timing_budget_s=self.timing_budget_s,
                         flush_l2=self.flush_l2, suspicious_speedup=self.suspicious_speedup,
                         max_log_chars=self.max_log_chars, cpu_compiler=self.cpu_compiler,
                         cpu_opt_level=self.cpu_opt_level, cache_expected=self.cache_expected,
                         expected_cache_bytes=self.expected_cache_bytes,
                         seed=seed, limits=StageLimits(parse=self.parse_timeout, compile=self.compile_timeout,
                                                       correctness=self.correctness_timeout,
                                                       timing=self.timing_timeout))


@dataclass
class TasksCfg:
    """`source: suite` trains on the hand-written suite (`names`, else every task of `levels`, split by
    `held_out_fraction`); `source: generated` on the procedural family of kernels_env.tasks.generated,
    `generated_train` training tasks and `generated_held_out` held-out ones whose compositions no
    training task has, both drawn with `split_seed`; `source: problems` on the KernelBench-style problem
    files under `problems_dir` (kernels_env/problems, docs/problems.md), split like the suite."""
    source: str = "suite"  # suite | generated | problems
    problems_dir: str = ""  # source: problems: a folder of problem files (a KernelBench checkout's level1/)
    names: list[str] = field(default_factory=list)  # empty: every task of `levels`
    levels: list[int] = field(default_factory=lambda: [1, 2])
    held_out_fraction: float = 0.2
    split_seed: int = 0
    generated_train: int = 2000
    generated_held_out: int = 256
    # more held-out-composition tasks, disjoint from the held-out ones, for choosing a policy (the SFT
    # run's sft.band_split: validation) without looking at the tasks it is measured on
    generated_validation: int = 0
    # the generated family's version the tasks are drawn from (one of FAMILY_VERSIONS; default the
    # newest). Recorded in the run's config.yaml; the experiment report refuses to compare runs of
    # different versions, and an earlier page re-runs by naming its version
    generated_version: str = CURRENT_FAMILY_VERSION

    def check(self) -> None:
        choice(self.source, ("suite", "generated", "problems"), "tasks.source")
        if self.source == "problems" and not self.problems_dir:
            raise ConfigError("tasks.source=problems needs tasks.problems_dir: a folder of problem files (*.py)")
        if self.problems_dir and self.source != "problems":
            raise ConfigError(f"tasks.problems_dir={self.problems_dir!r} is read only with tasks.source=problems "
                              f"(tasks.source={self.source!r})")
        if self.source == "generated":
            choice(self.generated_version, FAMILY_VERSIONS, "tasks.generated_version")
            positive(self.generated_train, "tasks.generated_train")
            positive(self.generated_held_out, "tasks.generated_held_out", allow_zero=True)
            positive(self.generated_validation, "tasks.generated_validation", allow_zero=True)
            if self.names:
                raise ConfigError("tasks.source=generated draws its own tasks; tasks.names lists suite tasks "
                                  f"({self.names[:3]}...): set one or the other")
        if not 0 <= self.held_out_fraction < 1:
            raise ConfigError(f"tasks.held_out_fraction={self.held_out_fraction}: expected in [0, 1)")
        for lv in self.levels:
            choice(lv, (1, 2, 3), "tasks.levels[]")
