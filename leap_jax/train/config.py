"""Typed run configuration (DESIGN 4.9): the run's sections, loaded from YAML with dotted overrides.

`load_config(path, overrides)` reads a YAML file (`base:` inheritance), applies `a.b=value` overrides,
type-checks every leaf (the generic loader, `leap_jax.train.config_loader`), then `validate`s: each
section checks its own fields (`check()` next to its dataclass: the policy's sections in
`config_policy`, the environment's in `config_env`, the run's length, checkpoints, logging and
evaluation in `config_run`, the SFT ones in `config_sft`, the RL sections here) and `validate` adds
the rules across sections (e.g. G < 2 for a group method; the per-algorithm rules read the table
`leap_jax.train.algorithms.ALGORITHMS`).
`to_dict` / `save_config` write the resolved config back out so a run directory is self-describing.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Sequence

from leap_jax.rl.options import AGGREGATION_MODES, DEFAULT_T_MAX, DEFAULT_T_MIN, check_threshold, dcp_band
from leap_jax.sampling.params import check_preempt
from leap_jax.train.algorithms import ALGORITHMS
from leap_jax.train.config_env import EnvCfg, TasksCfg
from leap_jax.train.config_loader import (ConfigError, apply_overrides, build, choice, positive, read_yaml,
                                          save_yaml, to_dict)
from leap_jax.train.config_policy import MeshCfg, ModelCfg, SamplingCfg, TokenizerCfg
from leap_jax.train.config_run import PERIODIC_METRIC, CheckpointCfg, EvalCfg, LoggingCfg, PlateauCfg, TrainCfg
from leap_jax.train.config_sft import CorpusCfg, SFTCfg

__all__ = ["AlgorithmCfg", "CheckpointCfg", "Config", "ConfigError", "CorpusCfg", "DCPCfg", "EnvCfg", "EvalCfg",
           "LoggingCfg", "LossCfg", "LowPrecisionParamsWarning", "MeshCfg", "ModelCfg", "OptimizerCfg",
           "PlateauCfg", "RolloutCfg", "SFTCfg", "SamplingCfg", "ScriptedMixCfg", "TasksCfg", "TokenizerCfg", "TrainCfg",
           "from_dict", "load_config", "save_config", "to_dict", "validate", "validate_sft"]

MODES = ("rl", "sft")
SCHEDULES = ("constant", "cosine", "linear")


class LowPrecisionParamsWarning(UserWarning):
    """Training would update low-precision (bf16/fp16) master weights: small optimizer steps vanish."""


@dataclass
class ScriptedMixCfg:
    """Smoke-only: replace a fraction of sampled responses by known-good / known-bad suite
    submissions so a random tiny model still exercises real evaluation, DCP and later turns.
    Scripted rows are counted in metrics (`rollout/scripted_frac`); never enable in real runs."""
    enabled: bool = False
    fraction: float = 0.5  # probability a response is replaced by a scripted one
    p_good: float = 0.5  # probability a scripted response is the task's known-good solution

    def check(self) -> None:
        for name in ("fraction", "p_good"):
            v = getattr(self, name)
            if not 0 <= v <= 1:
                raise ConfigError(f"rollout.scripted_mix.{name}={v}: expected a probability in [0, 1]")


@dataclass
class RolloutCfg:
    group_size: int = 8  # G
    max_turns: int = 3  # T
    prompts_per_step: int = 4
    feedback_budget_chars: int = 800
    max_context_tokens: int = 4096  # rows whose next prompt would exceed this stop early
    overlap: bool = True  # evaluate one chunk while the next generates
    overlap_chunks: int = 1
    # a row's next turn generates as soon as its group's DCP decision (turn 1) or its own result
    # (later turns) is in, next to other rows' earlier turns (leap_jax/rollout/pipelined.py; the same
    # distribution); training rollouts only (evaluation stays turn by turn). The defaults here are the
    # measured-fast path (docs/options.md)
    pipeline_turns: bool = True
    # with pipeline_turns: a generate call ends once at most this
    # fraction of its rows still generate; those continue from their tokens so far in a later call,
    # next to newly ready turns, instead of holding back the rows that stopped (0 = off)
    preempt: float = 0.25
    # opt-in 1, with pipeline_turns: a step's turn-T evaluations finish while the next step generates,
    # and the update on its rollouts comes one step later, from a policy one update newer than the one
    # that sampled them (the loss's ratio to the sampler's log-probs, clipped, corrects for it); the
    # first step of each train() call (a run, a resumed run) updates nothing, and its last step's
    # rollouts are not trained on. 0: each step updates on its own rollouts (on-policy)
    update_lag: int = 0
    scripted_mix: ScriptedMixCfg = field(default_factory=ScriptedMixCfg)

    def check(self) -> None:
        for n in ("group_size", "max_turns", "prompts_per_step", "feedback_budget_chars", "overlap_chunks"):
            positive(getattr(self, n), f"rollout.{n}")
        if self.pipeline_turns and not self.overlap:
            raise ConfigError("rollout.pipeline_turns=true generates while earlier turns are evaluated; "
                              "it needs rollout.overlap=true (got rollout.overlap=false)")
        try:
            check_preempt(self.preempt, "rollout.preempt")
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if self.preempt and not self.pipeline_turns:
            raise ConfigError(f"rollout.preempt={self.preempt} continues cut rows in later calls of the "
                              "pipelined rollout; it needs rollout.pipeline_turns=true (without pipelining, "
                              "set rollout.preempt=0)")
        choice(self.update_lag, (0, 1), "rollout.update_lag")
        if self.update_lag and not self.pipeline_turns:
            raise ConfigError(f"rollout.update_lag={self.update_lag} lets the next step generate while the "
                              "pipelined rollout's last evaluations run; it needs rollout.pipeline_turns=true")
        self.scripted_mix.check()


@dataclass
class AlgorithmCfg:
    name: str = "leap"  # a key of leap_jax.train.algorithms.ALGORITHMS
    credit: str = "trajectory"  # trajectory | per_turn (rank reward)
    rank_speedup_tiebreak: bool = False
    rank_status_tiebreak: bool = False
    eps: float = 1e-6  # z-score std epsilon
    kevin_gamma: float = 0.4
    kevin_correct_bonus: float = 0.3
    gamma: float = 1.0  # ppo / gae
    gae_lambda: float = 0.95

    def check(self) -> None:
        choice(self.name, tuple(ALGORITHMS), "algorithm.name")
        choice(self.credit, ("trajectory", "per_turn"), "algorithm.credit")
        if not 0 < self.kevin_gamma <= 1 or not 0 < self.gamma <= 1 or not 0 <= self.gae_lambda <= 1:
            raise ConfigError(f"algorithm gammas must be in (0, 1] and gae_lambda in [0, 1]; got kevin_gamma="
                              f"{self.kevin_gamma}, gamma={self.gamma}, gae_lambda={self.gae_lambda}")


@dataclass
class DCPCfg:
    """Debug a group iff t_min <= n_fail <= t_max (leap_jax.rl.dcp): an int is a count of failed
    rows, a float in [0, 1] a fraction of the group's valid rows; t_max=None means one fewer than the
    group's valid rows (G-1 when none is masked: only all-failed groups are hopeless). The defaults
    (rl.options) are the paper's t_min=4, t_max=7 for G=8."""
    t_min: int | float = DEFAULT_T_MIN
    t_max: int | float | None = DEFAULT_T_MAX
    history: bool = False  # per-task recovery-rate history (extension; off keeps paper behaviour)

    def check(self, group_size: int, uses_dcp: bool) -> None:
        """Both thresholds against G (rollout.group_size); with DCP on, some group must be debuggable."""
        if self.t_min is None:
            raise ConfigError("dcp.t_min=None: expected an int count or a float fraction of G")
        check_threshold("dcp.t_min", self.t_min, group_size, ConfigError)
        check_threshold("dcp.t_max", self.t_max, group_size, ConfigError)
        lo, hi = dcp_band(self.t_min, self.t_max, group_size)
        if uses_dcp and lo > hi:
            raise ConfigError(f"dcp.t_min={self.t_min} (= {lo} failed of G={group_size}) > dcp.t_max="
                              f"{self.t_max} (= {hi}): no group could ever be debugged")


@dataclass
class LossCfg:
    eps_low: float = 0.2
    eps_high: float = 0.28
    kl_beta: float = 0.0
    aggregation: str = "token-mean"
    ppo_epochs: int = 1
    value_coef: float = 0.5
    value_clip: float = 0.2

    def check(self) -> None:
        choice(self.aggregation, AGGREGATION_MODES, "loss.aggregation")
        positive(self.eps_low, "loss.eps_low")
        positive(self.eps_high, "loss.eps_high")
        positive(self.kl_beta, "loss.kl_beta", allow_zero=True)
        if self.kl_beta > 0:
            raise ConfigError(f"loss.kl_beta={self.kl_beta}: a frozen reference model is not loaded by this "
                              "trainer yet; use 0")
        positive(self.ppo_epochs, "loss.ppo_epochs")


@dataclass
class OptimizerCfg:
    lr: float = 1e-6
    weight_decay: float = 0.0
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    grad_clip: float = 1.0
    schedule: str = "constant"
    warmup_steps: int = 0
    micro_batch_size: int = 8  # rows per micro-batch (exact (sum, denom) accumulation)
    # at most this many token slots (rows x row length) per update micro-batch: long rows go through
    # fewer at a time (a divisor of micro_batch_size), so the update's memory does not grow with the
    # row length (None: micro_batch_size rows whatever their length)
    micro_batch_tokens: int | None = None
    pad_to_multiple: int = 64  # sequence length bucket
    # pack several conversations into one update row (segment ids, per-segment positions; no
    # attention across them), rows of `pack_len` slots (None: the length bucket of the longest)
    pack: bool = True
    pack_len: int | None = None
    # leave conversations with advantage exactly 0 on every trainable token out of the update; the
    # loss denominator still counts them, so loss and gradient are unchanged (never for ppo)
    drop_zero_advantage: bool = True
    # "loop": a jitted micro-batch gradient step per micro-batch (compiles once per row length,
    # whatever the row count); "scan": one program over the batch (compiles per (rows, length))
    accumulate: str = "loop"
    # the update's (and old log-probs') attention: einsum (fp32 scores in query chunks), cudnn (the
    # fused GPU kernel, bf16/fp16 models), dpa (jax.nn.dot_product_attention's XLA form) or auto
    # (cudnn where it runs, einsum elsewhere: `layers.resolve_attention`)
    attention: str = "auto"

    def check(self) -> None:
        positive(self.lr, "optimizer.lr")
        positive(self.weight_decay, "optimizer.weight_decay", allow_zero=True)
        positive(self.grad_clip, "optimizer.grad_clip", allow_zero=True)
        choice(self.schedule, SCHEDULES, "optimizer.schedule")
        positive(self.warmup_steps, "optimizer.warmup_steps", allow_zero=True)
        positive(self.micro_batch_size, "optimizer.micro_batch_size")
        if self.micro_batch_tokens is not None:
            positive(self.micro_batch_tokens, "optimizer.micro_batch_tokens")
        choice(self.accumulate, ("loop", "scan"), "optimizer.accumulate")
        choice(self.attention, ("auto", "einsum", "cudnn", "dpa"), "optimizer.attention")
        if self.pack_len is not None:
            positive(self.pack_len, "optimizer.pack_len")
        positive(self.pad_to_multiple, "optimizer.pad_to_multiple")


@dataclass
class Config:
    mode: str = "rl"  # rl (the RL trainer) | sft (supervised warm-up)
    model: ModelCfg = field(default_factory=ModelCfg)
    tokenizer: TokenizerCfg = field(default_factory=TokenizerCfg)
    sampling: SamplingCfg = field(default_factory=SamplingCfg)
    rollout: RolloutCfg = field(default_factory=RolloutCfg)
    algorithm: AlgorithmCfg = field(default_factory=AlgorithmCfg)
    dcp: DCPCfg = field(default_factory=DCPCfg)
    loss: LossCfg = field(default_factory=LossCfg)
    optimizer: OptimizerCfg = field(default_factory=OptimizerCfg)
    env: EnvCfg = field(default_factory=EnvCfg)
    tasks: TasksCfg = field(default_factory=TasksCfg)
    train: TrainCfg = field(default_factory=TrainCfg)
    checkpoint: CheckpointCfg = field(default_factory=CheckpointCfg)
    logging: LoggingCfg = field(default_factory=LoggingCfg)
    eval: EvalCfg = field(default_factory=EvalCfg)
    sft: SFTCfg = field(default_factory=SFTCfg)
    mesh: MeshCfg = field(default_factory=MeshCfg)


def from_dict(data: dict[str, Any]) -> Config:
    """Build and validate a Config from a nested dict (missing keys keep their defaults)."""
    cfg: Config = build(Config, data)
    validate(cfg)
    return cfg


def load_config(path: str | Path | None, overrides: Sequence[str] = ()) -> Config:
    """Read YAML (or start from defaults when path is None), apply overrides, validate."""
    data: dict[str, Any] = {} if path is None else read_yaml(Path(path))
    return from_dict(apply_overrides(Config, data, list(overrides)))


def save_config(cfg: Config, path: str | Path) -> None:
    save_yaml(cfg, path)


# ---- validation: each section's own check(), then the rules across sections ----------------------
def validate(cfg: Config) -> None:
    """Check value ranges and impossible combinations; raise ConfigError naming the problem."""
    choice(cfg.mode, MODES, "mode")
    cfg.model.check()
    if cfg.model.source == "sft" and cfg.mode == "sft":
        raise ConfigError("mode=sft with model.source=sft: an SFT run starts from model.source=random or hf")
    if cfg.model.param_dtype != "float32" and not cfg.eval.only:
        warnings.warn(LowPrecisionParamsWarning(
            f"model.param_dtype={cfg.model.param_dtype}: the optimizer will update {cfg.model.param_dtype} "
            "master weights, and a step below a weight's rounding spacing (about |w| / 256 in bfloat16) "
            "is lost; with lr 5e-5 every weight above ~0.02 in magnitude stops moving. Use "
            "model.param_dtype=float32 (compute stays in model.dtype)"), stacklevel=2)
    cfg.tokenizer.check(cfg.model.path)
    cfg.sampling.check()
    r, a = cfg.rollout, cfg.algorithm
    r.check()
    a.check()
    spec = ALGORITHMS[a.name]
    if spec.needs_group and r.group_size < 2:
        raise ConfigError(f"algorithm.name={a.name} normalises within a group: rollout.group_size="
                          f"{r.group_size} must be >= 2")
    if spec.single_turn and r.max_turns != 1:
        raise ConfigError(f"algorithm.name={a.name} is single-turn: rollout.max_turns={r.max_turns} must be 1")
    cfg.dcp.check(r.group_size, spec.uses_dcp)
    cfg.loss.check()
    o = cfg.optimizer
    o.check()
    if o.pack_len is not None and o.pack_len < r.max_context_tokens:
        raise ConfigError(f"optimizer.pack_len={o.pack_len} must be >= rollout.max_context_tokens="
                          f"{r.max_context_tokens} (a conversation must fit one row)")
    for section in (cfg.env, cfg.tasks, cfg.train, cfg.eval, cfg.mesh, cfg.checkpoint):
        section.check()
    _check_plateau(cfg)
    validate_sft(cfg)


def _check_plateau(cfg: Config) -> None:
    """train.plateau.metric must be something the periodic evaluation logs."""
    metric = cfg.train.plateau.metric
    if metric is None:
        return
    m = PERIODIC_METRIC.match(metric)
    assert m is not None  # PlateauCfg.check
    if cfg.eval.interval is None:
        raise ConfigError(f"train.plateau.metric={metric!r} needs eval.interval (the periodic evaluation "
                          "it watches); set eval.interval=N")
    if m.group(1) == "train_eval" and not cfg.eval.train_tasks:
        raise ConfigError(f"train.plateau.metric={metric!r} needs eval.train_tasks=true")
    if m.group(1) == "validation" and not (cfg.tasks.source == "generated" and cfg.tasks.generated_validation):
        raise ConfigError(f"train.plateau.metric={metric!r} needs a validation split: tasks.source=generated "
                          "and tasks.generated_validation > 0")
    if int(m.group(2)) > cfg.eval.turns:
        raise ConfigError(f"train.plateau.metric={metric!r}: the periodic evaluation logs acc@1..acc@"
                          f"{cfg.eval.turns} (eval.turns={cfg.eval.turns})")


def validate_sft(cfg: Config) -> None:
    """The `sft:` section (checked in every mode, so a bad value never waits for mode=sft)."""
    f = cfg.sft
    f.check()
    if cfg.mode == "sft" and f.batch_size % cfg.optimizer.micro_batch_size:
        raise ConfigError(f"sft.batch_size={f.batch_size} must be a multiple of optimizer.micro_batch_size="
                          f"{cfg.optimizer.micro_batch_size} (rows are accumulated in micro-batches)")
    if f.band_split == "validation" and not (cfg.tasks.source == "generated" and cfg.tasks.generated_validation):
        raise ConfigError("sft.band_split=validation needs tasks.source=generated and tasks.generated_validation > 0")
