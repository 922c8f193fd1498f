"""Run-config sections of the run itself: its length and budgets (`train`), checkpoints, logging and
evaluation, each with the checks of its own fields (`check()`)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from leap_jax.train.config_loader import ConfigError, positive


PERIODIC_METRIC = re.compile(r"^(heldout|train_eval|validation)/acc@(\d+)$")  # what eval.interval logs


@dataclass
class PlateauCfg:
    """Stop a run once `metric` (a periodic evaluation's accuracy, e.g. heldout/acc@1) has
    flattened: its last `window` evaluations each within `tol` of its best, after at least
    `min_steps` steps (leap_jax.train.stopping). metric None: off."""
    metric: str | None = None
    window: int = 3
    tol: float = 0.01
    min_steps: int = 0

    def check(self) -> None:
        if self.metric is not None and not PERIODIC_METRIC.match(self.metric):
            raise ConfigError(f"train.plateau.metric={self.metric!r}: expected a periodic evaluation's "
                              "accuracy, validation/acc@T, heldout/acc@T or train_eval/acc@T (e.g. "
                              "validation/acc@1)")
        positive(self.window, "train.plateau.window")
        positive(self.tol, "train.plateau.tol", allow_zero=True)
        positive(self.min_steps, "train.plateau.min_steps", allow_zero=True)


@dataclass
class TrainCfg:
    steps: int = 100
    seed: int = 0
    run_dir: str = "runs/default"
    # wall-clock budget of one train() call (s): checkpoint and stop after the step once the next one
    # (estimated as the longest of the last eval.interval steps, evaluation included) would pass it,
    # so a time-limited device call can be continued later with --resume (None: no budget)
    max_wall_s: float | None = None
    # training-time budget of the whole run (s, summed over resumes): the run is complete once its
    # net step time (time/step minus JAX compilation, time/train_total) reaches it, like reaching
    # train.steps. Gives every arm of an experiment the same wall-clock. None: steps only.
    time_budget_s: float | None = None
    # JAX's persistent compilation cache: a resumed or repeated run reuses every program compiled
    # before (None: RUN_DIR/../.jax_cache; an existing jax_compilation_cache_dir setting wins)
    compile_cache: bool = True
    compile_cache_dir: str | None = None
    # the run is complete once its periodic evaluation stops improving (off by default)
    plateau: PlateauCfg = field(default_factory=PlateauCfg)

    def check(self) -> None:
        positive(self.steps, "train.steps", allow_zero=True)
        self.plateau.check()
        for n in ("max_wall_s", "time_budget_s"):
            if getattr(self, n) is not None:
                positive(getattr(self, n), f"train.{n}")


@dataclass
class CheckpointCfg:
    interval: int = 10  # steps between checkpoints (the last step always saves)
    keep_last: int = 3
    enabled: bool = True

    def check(self) -> None:
        positive(self.interval, "checkpoint.interval")
        positive(self.keep_last, "checkpoint.keep_last")


@dataclass
class LoggingCfg:
    jsonl: bool = True
    tensorboard: bool = True
    progress_bar: bool = True
    report: bool = True  # write the report PNGs + summary at the end


@dataclass
class EvalCfg:
    only: bool = False
    checkpoint: str | None = None  # run dir or checkpoint dir; None: latest of train.run_dir
    turns: int = 3
    samples: int = 1  # rollouts per held-out task
    temperature: float = 0.0  # greedy by default
    # during training: held-out Acc@1..turns every `interval` steps and at the last step, logged as
    # heldout/acc@t in that step's record (None: off; its time is time/heldout_eval, not time/step)
    interval: int | None = None
    # with `interval`: also evaluate the training tasks the same way (train_eval/acc@t), the
    # experiment's accuracy measure (the held-out split is small)
    train_tasks: bool = False
    # with `interval`: also evaluate before the first update, logged as a record of step -1
    # (and written to RUN_DIR/start_eval.json, which other runs of the same policy can reuse)
    at_start: bool = False
    # with `at_start`: the step -1 record comes from this start_eval.json of another run of the same
    # policy, tasks and eval settings (checked) instead of a new evaluation: the experiment measures
    # its shared starting policy once, not once per arm and seed
    start_metrics: str | None = None
    # evaluate at most this many tasks of each split (a fixed seeded sample; None: all of them), for
    # thousands of generated tasks; the SFT run's pass-rate evaluations use it too
    max_tasks: int | None = None
    # when the run is complete: evaluate held-out and training tasks (eval.max_tasks each) once more
    # with this many turns of real feedback, into RUN_DIR/final_eval.json (None: no final evaluation)
    final_turns: int | None = None
    # with final_turns: also the hand-written suite (kernels_env.list_tasks()), as split "suite"
    final_suite: bool = False
    # with `interval`: every `feedback_interval` steps (a multiple of `interval`; and at the start) the
    # periodic evaluation gives each failing row `feedback_turns` turns of real feedback instead of
    # `turns`, logging acc@1..feedback_turns (Acc@3: what multi-turn RL's reward asks for) at a cost
    # kept down by its interval. None: off
    feedback_interval: int | None = None
    feedback_turns: int = 3

    def check(self) -> None:
        if self.final_turns is not None:
            positive(self.final_turns, "eval.final_turns")
        elif self.final_suite:
            raise ConfigError("eval.final_suite=true needs eval.final_turns (the final evaluation it extends)")
        if self.start_metrics is not None and not self.at_start:
            raise ConfigError(f"eval.start_metrics={self.start_metrics!r} needs eval.at_start=true "
                              "(it replaces the evaluation before the first update)")
        if self.max_tasks is not None:
            positive(self.max_tasks, "eval.max_tasks")
        if self.interval is not None:
            positive(self.interval, "eval.interval")
        elif self.train_tasks or self.at_start:
            raise ConfigError(f"eval.train_tasks={self.train_tasks}, eval.at_start={self.at_start} need "
                              "eval.interval (the periodic evaluation they extend); set eval.interval=N")
        positive(self.turns, "eval.turns")
        positive(self.samples, "eval.samples")
        self._check_feedback()

    def _check_feedback(self) -> None:
        if self.feedback_interval is None:
            return
        positive(self.feedback_interval, "eval.feedback_interval")
        positive(self.feedback_turns, "eval.feedback_turns")
        if self.interval is None or self.feedback_interval % self.interval:
            raise ConfigError(f"eval.feedback_interval={self.feedback_interval}: expected a multiple of "
                              f"eval.interval={self.interval} (it picks some of the periodic evaluations)")
