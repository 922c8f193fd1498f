"""Run-config sections of the supervised warm-up (`mode: sft`, leap_jax.bootstrap.sft): the `sft:`
section and its `corpus:` (leap_jax.bootstrap.corpus), each with the checks of its own fields."""
from __future__ import annotations

from dataclasses import dataclass, field

from kernels_env import BACKENDS, POOL_MODES, SIZE_SETS
from leap_jax.train.config_loader import ConfigError, choice, positive


@dataclass
class CorpusCfg:
    """How the bootstrap corpus (`leap_jax.bootstrap.corpus`) is generated and verified: the `corpus:`
    section of the SFT config, and the corpus CLI's settings."""
    tasks: list[str] = field(default_factory=list)  # empty: every task of the suite
    seed: int = 0
    variants_per_task: int = 24  # mutation attempts per task (duplicates are dropped)
    # mutants (and so multi-turn examples) for at most this many tasks, a seeded sample; the others
    # give their scored canonical solution only. 0: every task. Thousands of generated tasks need it.
    mutant_tasks: int = 0
    max_chain: int = 2  # mutations applied in a row at most
    multiturn_per_task: int = 6  # multi-turn examples per task at most
    prompt_sizes: str = "eval"  # the size set the prompts show (the RL run's env.sizes)
    backend: str = "cpu"  # scoring backend: cpu | cupy | auto
    sizes: str = "small"  # size set used to score
    correctness_trials: int = 2
    feedback_budget_chars: int = 800
    pool_mode: str = "process"  # process | inline
    workers: int = 1  # exec (and compile) workers of the pool

    def check(self, where: str = "sft.corpus") -> None:
        choice(self.backend, BACKENDS, f"{where}.backend")
        choice(self.pool_mode, POOL_MODES, f"{where}.pool_mode")
        for n in ("prompt_sizes", "sizes"):
            choice(getattr(self, n), SIZE_SETS, f"{where}.{n}")
        for n in ("variants_per_task", "mutant_tasks", "multiturn_per_task"):
            positive(getattr(self, n), f"{where}.{n}", allow_zero=True)
        positive(self.max_chain, f"{where}.max_chain")
        positive(self.correctness_trials, f"{where}.correctness_trials")
        positive(self.workers, f"{where}.workers")


@dataclass
class SFTCfg:
    """Supervised warm-up (`mode: sft`, leap_jax.bootstrap.sft): corpus -> tokenizer -> packed
    batches with the assistant-token loss mask -> AdamW (the `optimizer` section) -> RUN_DIR/model,
    then the first-turn pass rate on the training (and held-out) tasks."""
    corpus: CorpusCfg = field(default_factory=CorpusCfg)  # corpus.tasks empty: the training split
    corpus_dir: str | None = None  # where the corpus JSONL lives (None: RUN_DIR/corpus)
    multiturn: bool = True  # also train on multi-turn (wrong attempt + feedback + fix) examples
    steps: int = 200
    batch_size: int = 8  # packed rows per step (micro-batched by optimizer.micro_batch_size)
    seq_len: int | None = None  # packed row length; None: longest example rounded up to optimizer.pad_to_multiple
    log_interval: int = 10
    max_train_seconds: float | None = None  # stop training early past this wall time (safety cap)
    eval_temperatures: list[float] = field(default_factory=lambda: [0.0])
    eval_samples: int = 4  # samples per task at temperature > 0 (greedy: 1)
    eval_held_out: bool = True
    eval_batch: int = 32  # rows per sampler call
    eval_interval: int | None = None  # greedy train pass rate every N steps (metrics + sft_eval.json curve)
    target_band: list[float] = field(default_factory=list)  # [lo, hi]: keep the latest evaluated policy in it
    # the split whose greedy pass rate eval_interval tracks and target_band bounds: train, or validation
    # (tasks.generated_validation: held-out compositions that the held-out evaluation never sees)
    band_split: str = "train"

    def check(self) -> None:
        """Ranges of the section's own fields; the rules that read other sections are in validate_sft."""
        for n in ("steps", "batch_size", "log_interval", "eval_samples", "eval_batch"):
            positive(getattr(self, n), f"sft.{n}")
        if self.seq_len is not None and self.seq_len < 8:
            raise ConfigError(f"sft.seq_len={self.seq_len}: expected >= 8 tokens or null (longest example)")
        if self.max_train_seconds is not None:
            positive(self.max_train_seconds, "sft.max_train_seconds")
        if self.eval_interval is not None:
            positive(self.eval_interval, "sft.eval_interval")
        if self.target_band and (len(self.target_band) != 2
                                 or not 0 <= self.target_band[0] <= self.target_band[1] <= 1):
            raise ConfigError(f"sft.target_band={self.target_band}: expected [lo, hi] with 0 <= lo <= hi <= 1 "
                              "(or [] to keep the final policy)")
        choice(self.band_split, ("train", "validation"), "sft.band_split")
        for i, t in enumerate(self.eval_temperatures):
            positive(t, f"sft.eval_temperatures[{i}]", allow_zero=True)
        self.corpus.check()
