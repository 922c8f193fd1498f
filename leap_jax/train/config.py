"""Typed run configuration (DESIGN 4.9): dataclasses loaded from YAML, dotted overrides, validation.

`load_config(path, overrides)` reads a YAML file, applies `a.b=value` overrides (values parsed as
YAML scalars), type-checks every leaf against the dataclass annotations (unknown keys get a
did-you-mean suggestion) and checks cross-field combinations (e.g. G < 2 for a group method;
the per-algorithm rules read the table `leap_jax.train.algorithms.ALGORITHMS`).
`to_dict` / `save_config` write the resolved config back out so a run directory is self-describing.
"""
from __future__ import annotations

import dataclasses
import difflib
import types
import typing
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import yaml

from leap_jax.train.algorithms import ALGORITHMS

MODES = ("rl", "sft")
AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
SCHEDULES = ("constant", "cosine", "linear")


class ConfigError(ValueError):
    """A bad config value, key or combination; the message names it and what was expected."""


class LowPrecisionParamsWarning(UserWarning):
    """Training would update low-precision (bf16/fp16) master weights: small optimizer steps vanish."""


@dataclass
class ModelCfg:
    """`source: random` builds a fresh decoder of the given size; `source: hf` loads `path`;
    `source: sft` first builds (or reuses) the SFT policy of the `sft_config` YAML (leap_jax.bootstrap.sft)
    and then loads it like `hf`, with its tokenizer."""
    source: str = "random"  # random | hf | sft
    path: str | None = None  # local HF folder (config.json + safetensors) when source=hf
    sft_config: str | None = None  # an SFT config (mode: sft) when source=sft
    hidden_size: int = 64
    intermediate_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int | None = None
    rope_theta: float = 10000.0
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = True
    qkv_bias: bool = False
    dtype: str = "float32"
    param_dtype: str = "float32"
    remat: bool = False


@dataclass
class TokenizerCfg:
    """`bpe`: train a small byte-level BPE on the task suite at run time (cached in the run dir);
    `file`: a tokenizer.json; `hf`: the tokenizer of the HF folder (defaults to model.path)."""
    kind: str = "bpe"  # bpe | file | hf
    path: str | None = None
    vocab_size: int = 512  # for kind=bpe


@dataclass
class SamplingCfg:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    max_new_tokens: int = 256
    # sampler shape buckets (each (batch, prompt) bucket pair compiles prefill + decode once):
    # "coarse" = batch sizes max_batch/4, /2, /1 and prompt lengths 512, 1024, ... (few compilations,
    # padding rows are inactive); "fine" = every power of two (the former behaviour, less padding)
    buckets: str = "coarse"
    batch_buckets: list[int] = field(default_factory=list)  # explicit batch buckets (overrides `buckets`)
    prompt_buckets: list[int] = field(default_factory=list)  # explicit prompt buckets (overrides `buckets`)
    # decode loop options of the Sampler (leap_jax.sampling.sampler.decode): consecutive while_loops
    # with growing static KV windows, and decode steps per loop test; tokens are the same either way
    decode_segments: int = 1
    steps_per_iter: int = 4  # H200, 26M policy, batch 64: 0.49 ms/step vs 0.58 with 1 (decode_profile.py)


@dataclass
class ScriptedMixCfg:
    """Smoke-only: replace a fraction of sampled responses by known-good / known-bad suite
    submissions so a random tiny model still exercises real evaluation, DCP and later turns.
    Scripted rows are counted in metrics (`rollout/scripted_frac`); never enable in real runs."""
    enabled: bool = False
    fraction: float = 0.5  # probability a response is replaced by a scripted one
    p_good: float = 0.5  # probability a scripted response is the task's known-good solution


@dataclass
class RolloutCfg:
    group_size: int = 8  # G
    max_turns: int = 3  # T
    prompts_per_step: int = 4
    feedback_budget_chars: int = 800
    max_context_tokens: int = 4096  # rows whose next prompt would exceed this stop early
    overlap: bool = True  # evaluate one chunk while the next generates
    overlap_chunks: int = 2
    scripted_mix: ScriptedMixCfg = field(default_factory=ScriptedMixCfg)


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


@dataclass
class DCPCfg:
    """Debug a group iff t_min <= n_fail <= t_max (leap_jax.rl.dcp): an int is a count of failed
    rows, a float in [0, 1] a fraction of the group's valid rows; t_max=None means G-1 (only
    all-failed groups are hopeless). Defaults are the paper's t_min=4, t_max=7 for G=8."""
    t_min: int | float = 0.5
    t_max: int | float | None = None
    history: bool = False  # per-task recovery-rate history (extension; off keeps paper behaviour)


@dataclass
class LossCfg:
    eps_low: float = 0.2
    eps_high: float = 0.28
    kl_beta: float = 0.0
    aggregation: str = "token-mean"
    ppo_epochs: int = 1
    value_coef: float = 0.5
    value_clip: float = 0.2


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
    # fused GPU kernel, bf16/fp16 models) or dpa (jax.nn.dot_product_attention's XLA form)
    attention: str = "einsum"


@dataclass
class EnvCfg:
    backend: str = "auto"  # auto | cupy | cpu
    pool_mode: str = "process"  # process | inline
    gpu_workers: int | None = None
    compile_workers: int | None = None
    cache: bool = True
    sizes: str = "eval"  # eval | small
    correctness_trials: int = 5
    # "auto": training rollouts are timed only when the algorithm's reward reads speedups
    # (algorithms.reward_reads_speedup); evaluations are always timed (fast_p). true/false: all
    timing: bool | str = "auto"
    warmup_runs: int = 3
    min_timed_runs: int = 10
    timed_runs: int = 500  # the most timed runs; timing stops earlier once the median is tight
    timing_ci_rel_width: float = 0.03
    timing_budget_s: float = 1.0
    arch: str | None = None
    compile_timeout: float = 30.0
    correctness_timeout: float = 30.0
    timing_timeout: float = 60.0
    jax_mem_fraction: float = 0.5  # XLA_PYTHON_CLIENT_MEM_FRACTION, leaves room for CuPy workers
    jax_preallocate: bool = False


@dataclass
class TasksCfg:
    """`source: suite` trains on the hand-written suite (`names`, else every task of `levels`, split by
    `held_out_fraction`); `source: generated` on the procedural family of kernels_env.tasks.generated,
    `generated_train` training tasks and `generated_held_out` held-out ones whose compositions no
    training task has, both drawn with `split_seed`."""
    source: str = "suite"  # suite | generated
    names: list[str] = field(default_factory=list)  # empty: every task of `levels`
    levels: list[int] = field(default_factory=lambda: [1, 2])
    held_out_fraction: float = 0.2
    split_seed: int = 0
    generated_train: int = 2000
    generated_held_out: int = 256
    # more held-out-composition tasks, disjoint from the held-out ones, for choosing a policy (the SFT
    # run's sft.band_split: validation) without looking at the tasks it is measured on
    generated_validation: int = 0


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


@dataclass
class CheckpointCfg:
    interval: int = 10  # steps between checkpoints (the last step always saves)
    keep_last: int = 3
    enabled: bool = True


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


@dataclass
class MeshCfg:
    """Device mesh of the update (leap_jax.parallel): sizes of the ("data", "fsdp", "tensor") axes,
    -1 = all remaining devices (one axis at most). 1/1/1 is the single-device path, unchanged."""
    data: int = 1
    fsdp: int = 1
    tensor: int = 1
    # take the sharded path even on a mesh of one device (benchmarks/step_time.py compares it with
    # the plain path on one GPU; it must not be slower)
    force: bool = False


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


# ---- building from dicts with type checks ------------------------------------------------------
def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Check `value` against annotation `tp`; ints are accepted for floats. Raises ConfigError."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(f"{where}={value!r}: expected {' or '.join(_type_name(a) for a in args)}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}={value!r}: expected a list")
        (item_tp, *_) = typing.get_args(tp) or (Any,)
        return [_coerce(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):  # a dataclass type, not an instance
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}={value!r}: expected a mapping of {tp.__name__} fields")
        return _build(tp, value, where)
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}={value!r}: expected a bool (true/false)")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where}={value!r}: expected an int")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads "3e-5" (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{where}={value!r}: expected a number")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where}={value!r}: expected a string")
    raise ConfigError(f"{where}: unsupported annotation {tp!r}")


def _suggest(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _build(cls: type, data: dict[str, Any], where: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for k in data:
        if k not in names:
            full = f"{where}.{k}" if where else k
            raise ConfigError(f"unknown config key {full!r}{_suggest(str(k), names)}; "
                              f"valid keys here: {', '.join(names)}")
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}" if where else k) for k, v in data.items()}
    return cls(**kwargs)


def from_dict(data: dict[str, Any]) -> Config:
    """Build and validate a Config from a nested dict (missing keys keep their defaults)."""
    if not isinstance(data, dict):
        raise ConfigError(f"config must be a mapping at the top level, got {type(data).__name__}")
    cfg = _build(Config, data, "")
    validate(cfg)
    return cfg


def to_dict(cfg: Config) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def parse_override(text: str) -> tuple[list[str], Any]:
    """`a.b.c=value` -> (["a","b","c"], value parsed as a YAML scalar/list)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected KEY=VALUE with a dotted key, e.g. train.steps=10")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not p for p in key.split(".")):
        raise ConfigError(f"override {text!r}: empty key segment in {key!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() != "" else ""
    except yaml.YAMLError as e:
        raise ConfigError(f"override {text!r}: value {raw!r} is not valid YAML ({e})") from None
    return key.split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply dotted overrides onto a nested dict, checking each key path against the schema."""
    data = _deepcopy(data)
    for ov in overrides:
        path, value = parse_override(ov)
        cls: Any = Config
        node = data
        for i, part in enumerate(path):
            names = [f.name for f in dataclasses.fields(cls)]
            if part not in names:
                prefix = ".".join(path[:i])
                raise ConfigError(f"override {ov!r}: unknown key {part!r}"
                                  f"{' under ' + repr(prefix) if prefix else ''}{_suggest(part, names)}; "
                                  f"valid keys: {', '.join(names)}")
            tp = typing.get_type_hints(cls)[part]
            if i == len(path) - 1:
                node[part] = value
            else:
                if not dataclasses.is_dataclass(tp):
                    raise ConfigError(f"override {ov!r}: {'.'.join(path[:i + 1])} is a value, not a section")
                node = node.setdefault(part, {})
                if not isinstance(node, dict):
                    raise ConfigError(f"override {ov!r}: {'.'.join(path[:i + 1])} is not a mapping")
                cls = tp
    return data


def _deepcopy(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _deepcopy(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_deepcopy(v) for v in d]
    return d


def _read_yaml(p: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A YAML mapping; a top-level `base: other.yaml` (relative to this file; or a list of files, merged
    in order) is loaded first and this file's keys are deep-merged over it, so baseline configs state
    only what differs."""
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    if p.resolve() in seen:
        raise ConfigError(f"config file {str(p)!r}: `base` chain loops back to itself")
    try:
        loaded = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {str(p)!r} is not valid YAML: {e}") from None
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"config file {str(p)!r}: expected a mapping at the top level")
    base = loaded.pop("base", None)
    if base is None:
        return loaded
    bases = base if isinstance(base, list) else [base]
    if not bases or not all(isinstance(b, str) for b in bases):
        raise ConfigError(f"config file {str(p)!r}: base={base!r}; expected a file name or a list of them "
                          "(merged in order, later ones win)")
    merged: dict[str, Any] = {}
    for b in bases:
        merged = _merge(merged, _read_yaml(p.parent / b, seen + (p.resolve(),)))
    return _merge(merged, loaded)


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = _deepcopy(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else _deepcopy(v)
    return out


def load_config(path: str | Path | None, overrides: Sequence[str] = ()) -> Config:
    """Read YAML (or start from defaults when path is None), apply overrides, validate."""
    data: dict[str, Any] = {} if path is None else _read_yaml(Path(path))
    return from_dict(apply_overrides(data, list(overrides)))


def save_config(cfg: Config, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))


# ---- cross-field validation --------------------------------------------------------------------
def _choice(value: Any, choices: tuple, where: str) -> None:
    if value not in choices:
        raise ConfigError(f"{where}={value!r}: expected one of {', '.join(map(str, choices))}"
                          f"{_suggest(str(value), [str(c) for c in choices])}")


def _positive(value: float, where: str, allow_zero: bool = False) -> None:
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{where}={value!r}: expected {'>= 0' if allow_zero else '> 0'}")


def check_threshold(value: int | float | None, group_size: int, where: str) -> None:
    """A DCP threshold: an int count in [0, G], or a float fraction in [0, 1] (None allowed for t_max)."""
    if value is None:
        return
    if isinstance(value, int):
        if not 0 <= value <= group_size:
            raise ConfigError(f"{where}={value!r}: an int is a count of failed rows; expected 0..{group_size} (G)")
    elif not 0.0 <= value <= 1.0:
        raise ConfigError(f"{where}={value!r}: a float is a fraction of the group; expected it in [0, 1]")


def validate(cfg: Config) -> None:
    """Check value ranges and impossible combinations; raise ConfigError naming the problem."""
    _choice(cfg.mode, MODES, "mode")
    _choice(cfg.model.source, ("random", "hf", "sft"), "model.source")
    if cfg.model.source == "hf" and not cfg.model.path:
        raise ConfigError("model.source=hf needs model.path: the local HF model folder "
                          "(config.json + *.safetensors)")
    if cfg.model.source == "sft" and not cfg.model.sft_config:
        raise ConfigError("model.source=sft needs model.sft_config: an SFT config file "
                          "(e.g. configs/bootstrap_sft_tiny.yaml)")
    if cfg.model.source == "sft" and cfg.mode == "sft":
        raise ConfigError("mode=sft with model.source=sft: an SFT run starts from model.source=random or hf")
    _choice(cfg.model.dtype, ("float32", "bfloat16", "float16"), "model.dtype")
    _choice(cfg.model.param_dtype, ("float32", "bfloat16", "float16"), "model.param_dtype")
    if cfg.model.param_dtype != "float32" and not cfg.eval.only:
        warnings.warn(LowPrecisionParamsWarning(
            f"model.param_dtype={cfg.model.param_dtype}: the optimizer will update {cfg.model.param_dtype} "
            "master weights, and a step below a weight's rounding spacing (about |w| / 256 in bfloat16) "
            "is lost; with lr 5e-5 every weight above ~0.02 in magnitude stops moving. Use "
            "model.param_dtype=float32 (compute stays in model.dtype)"), stacklevel=2)
    _choice(cfg.tokenizer.kind, ("bpe", "file", "hf"), "tokenizer.kind")
    if cfg.tokenizer.kind == "file" and not cfg.tokenizer.path:
        raise ConfigError("tokenizer.kind=file needs tokenizer.path (a tokenizer.json)")
    if cfg.tokenizer.kind == "hf" and not (cfg.tokenizer.path or cfg.model.path):
        raise ConfigError("tokenizer.kind=hf needs tokenizer.path or model.path (an HF folder)")
    if cfg.tokenizer.kind == "bpe" and cfg.tokenizer.vocab_size < 300:
        raise ConfigError(f"tokenizer.vocab_size={cfg.tokenizer.vocab_size}: a byte-level BPE needs >= 300 "
                          "(256 bytes + special tokens + merges)")
    s = cfg.sampling
    _positive(s.temperature, "sampling.temperature", allow_zero=True)
    if not 0 < s.top_p <= 1:
        raise ConfigError(f"sampling.top_p={s.top_p}: expected in (0, 1]")
    _positive(s.top_k, "sampling.top_k", allow_zero=True)
    _positive(s.max_new_tokens, "sampling.max_new_tokens")
    r = cfg.rollout
    _positive(r.group_size, "rollout.group_size")
    _positive(r.max_turns, "rollout.max_turns")
    _positive(r.prompts_per_step, "rollout.prompts_per_step")
    _positive(r.feedback_budget_chars, "rollout.feedback_budget_chars")
    _positive(r.overlap_chunks, "rollout.overlap_chunks")
    for name in ("fraction", "p_good"):
        v = getattr(r.scripted_mix, name)
        if not 0 <= v <= 1:
            raise ConfigError(f"rollout.scripted_mix.{name}={v}: expected a probability in [0, 1]")
    a = cfg.algorithm
    _choice(a.name, tuple(ALGORITHMS), "algorithm.name")
    spec = ALGORITHMS[a.name]
    _choice(a.credit, ("trajectory", "per_turn"), "algorithm.credit")
    if spec.needs_group and r.group_size < 2:
        raise ConfigError(f"algorithm.name={a.name} normalises within a group: rollout.group_size="
                          f"{r.group_size} must be >= 2")
    if spec.single_turn and r.max_turns != 1:
        raise ConfigError(f"algorithm.name={a.name} is single-turn: rollout.max_turns={r.max_turns} must be 1")
    if cfg.dcp.t_min is None:
        raise ConfigError("dcp.t_min=None: expected an int count or a float fraction of G")
    check_threshold(cfg.dcp.t_min, r.group_size, "dcp.t_min")
    check_threshold(cfg.dcp.t_max, r.group_size, "dcp.t_max")
    lo = cfg.dcp.t_min if isinstance(cfg.dcp.t_min, int) else -(-cfg.dcp.t_min * r.group_size // 1)
    hi = (r.group_size - 1 if cfg.dcp.t_max is None else
          cfg.dcp.t_max if isinstance(cfg.dcp.t_max, int) else cfg.dcp.t_max * r.group_size // 1)
    if spec.uses_dcp and lo > hi:
        raise ConfigError(f"dcp.t_min={cfg.dcp.t_min} (= {lo:g} failed of G={r.group_size}) > dcp.t_max="
                          f"{cfg.dcp.t_max} (= {hi:g}): no group could ever be debugged")
    if not 0 < a.kevin_gamma <= 1 or not 0 < a.gamma <= 1 or not 0 <= a.gae_lambda <= 1:
        raise ConfigError(f"algorithm gammas must be in (0, 1] and gae_lambda in [0, 1]; got kevin_gamma="
                          f"{a.kevin_gamma}, gamma={a.gamma}, gae_lambda={a.gae_lambda}")
    lo_ = cfg.loss
    _choice(lo_.aggregation, AGGREGATIONS, "loss.aggregation")
    _positive(lo_.eps_low, "loss.eps_low")
    _positive(lo_.eps_high, "loss.eps_high")
    _positive(lo_.kl_beta, "loss.kl_beta", allow_zero=True)
    if lo_.kl_beta > 0:
        raise ConfigError(f"loss.kl_beta={lo_.kl_beta}: a frozen reference model is not loaded by this "
                          "trainer yet; use 0")
    _positive(lo_.ppo_epochs, "loss.ppo_epochs")
    o = cfg.optimizer
    _positive(o.lr, "optimizer.lr")
    _positive(o.weight_decay, "optimizer.weight_decay", allow_zero=True)
    _positive(o.grad_clip, "optimizer.grad_clip", allow_zero=True)
    _choice(o.schedule, SCHEDULES, "optimizer.schedule")
    _positive(o.warmup_steps, "optimizer.warmup_steps", allow_zero=True)
    _positive(o.micro_batch_size, "optimizer.micro_batch_size")
    _choice(o.accumulate, ("loop", "scan"), "optimizer.accumulate")
    _choice(o.attention, ("einsum", "cudnn", "dpa"), "optimizer.attention")
    if o.pack_len is not None:
        _positive(o.pack_len, "optimizer.pack_len")
        if o.pack_len < cfg.rollout.max_context_tokens:
            raise ConfigError(f"optimizer.pack_len={o.pack_len} must be >= rollout.max_context_tokens="
                              f"{cfg.rollout.max_context_tokens} (a conversation must fit one row)")
    _choice(cfg.sampling.buckets, ("coarse", "fine"), "sampling.buckets")
    _positive(o.pad_to_multiple, "optimizer.pad_to_multiple")
    e = cfg.env
    _choice(e.backend, ("auto", "cupy", "cpu"), "env.backend")
    _choice(e.timing, (True, False, "auto"), "env.timing")
    _choice(e.pool_mode, ("process", "inline"), "env.pool_mode")
    _choice(e.sizes, ("eval", "small"), "env.sizes")
    _positive(e.correctness_trials, "env.correctness_trials")
    if not 0 < e.jax_mem_fraction <= 1:
        raise ConfigError(f"env.jax_mem_fraction={e.jax_mem_fraction}: expected in (0, 1]")
    _choice(cfg.tasks.source, ("suite", "generated"), "tasks.source")
    if cfg.tasks.source == "generated":
        _positive(cfg.tasks.generated_train, "tasks.generated_train")
        _positive(cfg.tasks.generated_held_out, "tasks.generated_held_out", allow_zero=True)
        _positive(cfg.tasks.generated_validation, "tasks.generated_validation", allow_zero=True)
        if cfg.tasks.names:
            raise ConfigError("tasks.source=generated draws its own tasks; tasks.names lists suite tasks "
                              f"({cfg.tasks.names[:3]}...): set one or the other")
    if not 0 <= cfg.tasks.held_out_fraction < 1:
        raise ConfigError(f"tasks.held_out_fraction={cfg.tasks.held_out_fraction}: expected in [0, 1)")
    for lv in cfg.tasks.levels:
        _choice(lv, (1, 2, 3), "tasks.levels[]")
    _positive(cfg.train.steps, "train.steps", allow_zero=True)
    if cfg.train.max_wall_s is not None:
        _positive(cfg.train.max_wall_s, "train.max_wall_s")
    if cfg.train.time_budget_s is not None:
        _positive(cfg.train.time_budget_s, "train.time_budget_s")
    if cfg.eval.start_metrics is not None and not cfg.eval.at_start:
        raise ConfigError(f"eval.start_metrics={cfg.eval.start_metrics!r} needs eval.at_start=true "
                          "(it replaces the evaluation before the first update)")
    if cfg.eval.max_tasks is not None:
        _positive(cfg.eval.max_tasks, "eval.max_tasks")
    if cfg.eval.interval is not None:
        _positive(cfg.eval.interval, "eval.interval")
    elif cfg.eval.train_tasks or cfg.eval.at_start:
        raise ConfigError(f"eval.train_tasks={cfg.eval.train_tasks}, eval.at_start={cfg.eval.at_start} need "
                          "eval.interval (the periodic evaluation they extend); set eval.interval=N")
    for ax in ("data", "fsdp", "tensor"):
        v = getattr(cfg.mesh, ax)
        if v == 0 or v < -1:
            raise ConfigError(f"mesh.{ax}={v}: expected a positive device count or -1 (the rest)")
    if [cfg.mesh.data, cfg.mesh.fsdp, cfg.mesh.tensor].count(-1) > 1:
        raise ConfigError("mesh: at most one of data / fsdp / tensor may be -1")
    _positive(cfg.checkpoint.interval, "checkpoint.interval")
    _positive(cfg.checkpoint.keep_last, "checkpoint.keep_last")
    _positive(cfg.eval.turns, "eval.turns")
    _positive(cfg.eval.samples, "eval.samples")
    validate_sft(cfg)


def validate_sft(cfg: Config) -> None:
    """Ranges of the `sft:` section (checked in every mode, so a bad value never waits for mode=sft)."""
    f = cfg.sft
    _positive(f.steps, "sft.steps")
    _positive(f.batch_size, "sft.batch_size")
    _positive(f.log_interval, "sft.log_interval")
    _positive(f.eval_samples, "sft.eval_samples")
    _positive(f.eval_batch, "sft.eval_batch")
    if f.seq_len is not None and f.seq_len < 8:
        raise ConfigError(f"sft.seq_len={f.seq_len}: expected >= 8 tokens or null (longest example)")
    if f.max_train_seconds is not None:
        _positive(f.max_train_seconds, "sft.max_train_seconds")
    if cfg.mode == "sft" and f.batch_size % cfg.optimizer.micro_batch_size:
        raise ConfigError(f"sft.batch_size={f.batch_size} must be a multiple of optimizer.micro_batch_size="
                          f"{cfg.optimizer.micro_batch_size} (rows are accumulated in micro-batches)")
    if f.eval_interval is not None:
        _positive(f.eval_interval, "sft.eval_interval")
    if f.target_band and (len(f.target_band) != 2 or not 0 <= f.target_band[0] <= f.target_band[1] <= 1):
        raise ConfigError(f"sft.target_band={f.target_band}: expected [lo, hi] with 0 <= lo <= hi <= 1 "
                          "(or [] to keep the final policy)")
    _choice(f.band_split, ("train", "validation"), "sft.band_split")
    if f.band_split == "validation" and not (cfg.tasks.source == "generated" and cfg.tasks.generated_validation):
        raise ConfigError("sft.band_split=validation needs tasks.source=generated and tasks.generated_validation > 0")
    for i, t in enumerate(f.eval_temperatures):
        _positive(t, f"sft.eval_temperatures[{i}]", allow_zero=True)
    c = f.corpus
    _choice(c.backend, ("auto", "cupy", "cpu"), "sft.corpus.backend")
    _choice(c.pool_mode, ("process", "inline"), "sft.corpus.pool_mode")
    for n in ("prompt_sizes", "sizes"):
        _choice(getattr(c, n), ("eval", "small"), f"sft.corpus.{n}")
    for n in ("variants_per_task", "multiturn_per_task"):
        _positive(getattr(c, n), f"sft.corpus.{n}", allow_zero=True)
    _positive(c.max_chain, "sft.corpus.max_chain")
    _positive(c.correctness_trials, "sft.corpus.correctness_trials")
    _positive(c.workers, "sft.corpus.workers")
