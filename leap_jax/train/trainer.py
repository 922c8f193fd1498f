"""The LEAP trainer loop (DESIGN 4.8): prompts -> rollouts -> credit -> update -> metrics -> checkpoint.

`Trainer(cfg)` builds the tokenizer, model, optimizer, sampler policy, evaluation pool and rollout
from a resolved `Config`; `train()` runs `train.steps` steps, `evaluate()` runs held-out tasks
without training. State that makes a resumed run continue exactly as an uninterrupted one: params,
optimizer state, the RNG key, the task cursor (epoch, position), the DCP history and the step, all
in the orbax checkpoint. SIGINT/SIGTERM finish the current step, save, and stop.
"""
from __future__ import annotations

import json
import signal
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from kernels_env import (EnvConfig, EvalPool, ProblemError, generated_task_names, get_task, list_tasks,
                         register_problems, split_tasks, subsample, task_names, validation_task_names)
from leap_jax.models import decoder
from leap_jax.models.bpe import load_trained, train_tokenizer
from leap_jax.models.chat import stop_token_ids
from leap_jax.models.config import ModelConfig
from leap_jax.models.hf import load_hf_checkpoint
from leap_jax.models.tokenizer import Tokenizer
from leap_jax.parallel.placement import MeshPlacement
from leap_jax.rl.dcp import DCPHistory, init_history, update_history
from leap_jax.rollout.multiturn import (ChatStreams, MultiTurnRollout, RolloutOutput, StartedRollout,
                                        outcome_metrics, select_groups, solved_turns_by_task)
from leap_jax.rollout.policy import MixedPolicy, Policy, SamplerPolicy, ScriptedPolicy
from leap_jax.rollout.prompts import prompt_texts
from leap_jax.sampling.buckets import batch_buckets, prompt_buckets
from leap_jax.sampling.sampler import Sampler
from leap_jax.train import algorithms, stopping
from leap_jax.train.checkpoint import Checkpointer
from leap_jax.train.compile_clock import compile_seconds
from leap_jax.train.config import Config, ConfigError, save_config, to_dict
from leap_jax.train.env_health import check_env_errors, pool_counter_deltas
from leap_jax.train.metrics import EVAL_FILE, FINAL_EVAL_FILE, START_EVAL_FILE, MetricsWriter, read_metrics, truncate_metrics
from leap_jax.train.update import (build_batch, fill_old_logprobs, init_value_head, make_logprob_fn,
                                   make_optimizer, make_update, make_value_fn, prepare_ppo)

try:  # private JAX API: only to re-read a compilation cache whose dir was set after first use
    from jax._src import compilation_cache as _jax_compilation_cache
except ImportError:  # pragma: no cover - the private module moved
    _jax_compilation_cache = None  # type: ignore[assignment]

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
FINISHED_FILE = "finished.json"  # written when a run reaches train.steps, train.time_budget_s or its plateau


# ---- construction helpers ---------------------------------------------------------------------
def build_tokenizer(cfg: Config, run_dir: Path, tasks: Sequence[Any]):
    """The run's tokenizer. kind=bpe trains a byte-level BPE on the suite's chat-templated prompts and
    solutions (`leap_jax.models.bpe`, ChatML special tokens included) once and caches
    it as RUN_DIR/tokenizer.json."""
    t = cfg.tokenizer
    if t.kind == "hf":
        hf_dir = t.path or cfg.model.path
        if not hf_dir:
            raise ConfigError("tokenizer.kind=hf needs tokenizer.path or model.path (an HF folder)")
        return Tokenizer.from_dir(hf_dir)
    if t.kind == "file":
        if not t.path:
            raise ConfigError("tokenizer.kind=file needs tokenizer.path (a tokenizer.json)")
        return Tokenizer.from_file(t.path, eos_token="<|im_end|>")
    path = run_dir / "tokenizer.json"
    if not path.is_file():
        return train_tokenizer(prompt_texts(list(tasks), cfg.env.sizes), t.vocab_size, path)
    return load_trained(path)


def build_model(cfg: Config, tokenizer: Any, rng: jax.Array) -> tuple[ModelConfig, Any]:
    """(ModelConfig, decoder params): a fresh random decoder, or a local HF checkpoint."""
    m = cfg.model
    if m.source == "hf":
        if not m.path:
            raise ConfigError("model.source=hf needs model.path (the local HF model folder)")
        # Master weights in model.param_dtype (float32 by default) whatever the file's dtype: a bf16
        # export trained as bf16 loses every AdamW step smaller than the weight's bf16 spacing.
        mcfg, params = load_hf_checkpoint(m.path, dtype=m.param_dtype, compute_dtype=m.dtype)
        mcfg = mcfg.replace(remat=m.remat)
        if tokenizer.vocab_size > mcfg.vocab_size:
            raise ConfigError(f"tokenizer has {tokenizer.vocab_size} ids but the model's vocab_size is "
                              f"{mcfg.vocab_size}; tokenizer and model do not match")
        return mcfg, params
    mcfg = ModelConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=m.hidden_size, intermediate_size=m.intermediate_size,
        num_layers=m.num_layers, num_heads=m.num_heads, num_kv_heads=m.num_kv_heads, head_dim=m.head_dim,
        rope_theta=m.rope_theta, max_position_embeddings=m.max_position_embeddings,
        tie_word_embeddings=m.tie_word_embeddings, qkv_bias=m.qkv_bias, dtype=m.dtype,
        param_dtype=m.param_dtype, remat=m.remat, architecture="LlamaForCausalLM",
        eos_token_ids=stop_token_ids(tokenizer), pad_token_id=tokenizer.pad_id)
    return mcfg, decoder.init(mcfg, rng)


def env_timing(cfg: Config, purpose: str) -> bool:
    """Whether the environment times kernels for `purpose` ("train" rollouts or "eval"): env.timing
    true/false decides for both; "auto" times evaluations always (fast_p) and training rollouts only
    when the algorithm's reward reads speedups."""
    if purpose not in ("train", "eval"):
        raise ValueError(f"purpose={purpose!r}; expected 'train' or 'eval'")
    t = cfg.env.timing
    if isinstance(t, bool):
        return t
    if purpose == "eval":
        return True
    return algorithms.reward_reads_speedup(cfg.algorithm.name, cfg.algorithm.rank_speedup_tiebreak)


def env_config(cfg: Config, purpose: str = "eval") -> EnvConfig:
    """The EnvConfig of `purpose`'s evaluations (see env_timing). No seed: every evaluation draws fresh
    inputs, so a policy cannot learn a table of the answers to inputs that repeat (EnvConfig.seed)."""
    return cfg.env.env_config(env_timing(cfg, purpose))


def select_tasks(cfg: Config) -> tuple[list[str], list[str]]:
    """(train, held_out) task names from config: generated tasks split by composition, or suite tasks
    (explicit names, else every task of `levels`) or a folder's problem files split by name hash."""
    if cfg.tasks.source == "generated":
        t = cfg.tasks
        return (generated_task_names(t.generated_train, seed=t.split_seed, split="train", version=t.generated_version),
                generated_task_names(t.generated_held_out, seed=t.split_seed, split="held_out",
                                     version=t.generated_version) if t.generated_held_out else [])
    if cfg.tasks.source == "problems":
        try:
            names = register_problems(cfg.tasks.problems_dir)
        except ProblemError as e:
            raise ConfigError(f"tasks.problems_dir: {e}") from None
    elif cfg.tasks.names:
        for n in cfg.tasks.names:
            get_task(n)  # raises a clear KeyError for an unknown name
        names = sorted(set(cfg.tasks.names))
    else:
        names = sorted(n for lv in cfg.tasks.levels for n in task_names(level=lv))
    if not names:
        raise ConfigError(f"no tasks selected (tasks.names={cfg.tasks.names}, tasks.levels={cfg.tasks.levels})")
    if cfg.tasks.held_out_fraction == 0 or len(names) < 2:
        return names, []
    return split_tasks(names, cfg.tasks.held_out_fraction, cfg.tasks.split_seed)


def validation_tasks(cfg: Config) -> list[str]:
    """tasks.generated_validation held-out-composition tasks that are not among the held-out ones (the
    generator's held-out sequence continued past them), for choosing a policy; [] for the suite."""
    t = cfg.tasks
    if t.source != "generated" or not t.generated_validation:
        return []
    return validation_task_names(t.generated_validation, t.generated_held_out, seed=t.split_seed,
                                 version=t.generated_version)


def _coarse_prompt_buckets(max_context: int) -> tuple[int, ...]:
    """512, 1024, ... up to max_context (a prompt bucket pair compiles prefill + decode once)."""
    return tuple(b for b in prompt_buckets(max_context) if b >= min(512, max_context))


def sampler_buckets(cfg: Config, max_batch: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(batch buckets, prompt buckets) of the rollout sampler from sampling.buckets /
    sampling.batch_buckets / sampling.prompt_buckets (see SamplingCfg)."""
    s, ctx = cfg.sampling, cfg.rollout.max_context_tokens
    if s.buckets == "fine":
        bb, pb = batch_buckets(max_batch), prompt_buckets(ctx)
    else:
        bb = tuple(sorted({max(max_batch // 4, 1), max(max_batch // 2, 1), max_batch}))
        # a later turn's prompt is at most max_context - max_new_tokens long (the rollout's rule):
        # that bucket keeps the KV cache at max_context slots instead of the next power of two + new
        pb = tuple(sorted(set(_coarse_prompt_buckets(ctx))
                          | ({ctx - s.max_new_tokens} if ctx - s.max_new_tokens >= 512 else set())))
    if s.batch_buckets:
        bb = tuple(sorted(set(int(b) for b in s.batch_buckets) | {max_batch}))
    if s.prompt_buckets:
        pb = tuple(sorted(set(int(b) for b in s.prompt_buckets)))
    return bb, pb


def enable_compile_cache(cfg: Config, run_dir: Path) -> str | None:
    """Turn on JAX's persistent compilation cache (train.compile_cache): a resumed or repeated run
    loads what an earlier one compiled instead of compiling it again. An already configured
    jax_compilation_cache_dir (JAX_COMPILATION_CACHE_DIR, a test fixture) is kept. Returns the dir."""
    if not cfg.train.compile_cache:
        return None
    # jax.config options are dynamic attributes that its stubs do not declare
    current = jax.config.jax_compilation_cache_dir  # type: ignore[attr-defined]
    if current:
        return current
    path = Path(cfg.train.compile_cache_dir or (run_dir.resolve().parent / ".jax_cache"))
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    if _jax_compilation_cache is not None:  # a cache first used (and found disabled) before the dir was set
        _jax_compilation_cache.reset_cache()  # must be re-read
    return str(path)


def _seed_from_key(key: jax.Array) -> int:
    return int(jax.random.randint(key, (), 0, 2 ** 31 - 1))


# ---- the trainer ------------------------------------------------------------------------------
def next_step_estimate(walls: Sequence[float], eval_interval: int | None) -> float:
    """The wall time to expect from the next step: the longest of the last eval.interval steps (so
    a periodic evaluation is counted when one is due), or of the last step without evaluations.
    train.max_wall_s stops before a step this long would pass it: a device call's budget is a hard
    kill, and a step plus an evaluation can take minutes."""
    if not walls:
        return 0.0
    return max(walls[-(eval_interval or 1):])


class Trainer:
    """Owns every component of a run; `train()` / `evaluate()` are the two entry points.

    `evaluator` and `policy` may be injected (tests: a scripted policy, a fake or inline evaluator);
    by default the evaluator is an `EvalPool` from config and the policy is the JAX sampler (mixed
    with scripted responses when `rollout.scripted_mix.enabled`).
    """

    def __init__(self, cfg: Config, *, evaluator: Any = None, policy: Policy | None = None, resume: bool = False):
        self.cfg = cfg
        self.run_dir = Path(cfg.train.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.compile_cache_dir = enable_compile_cache(cfg, self.run_dir)
        save_config(cfg, self.run_dir / "config.yaml")
        self.train_tasks, self.held_out = select_tasks(cfg)
        self.validation = validation_tasks(cfg)  # what the plateau rule may read; never reported
        all_tasks = [get_task(n) for n in sorted(set(self.train_tasks) | set(self.held_out))]
        self.tokenizer = build_tokenizer(cfg, self.run_dir, all_tasks)
        key = jax.random.key(cfg.train.seed)
        init_key, self.rng = jax.random.split(key)
        self.model_config, model_params = build_model(cfg, self.tokenizer, init_key)
        self.algorithm = cfg.algorithm.name
        self.spec = algorithms.spec(self.algorithm)
        self.ppo = self.spec.value_head  # outcome reward + GAE with a value head
        self.params: dict[str, Any] = {"model": model_params}
        if self.ppo:
            self.params["value"] = init_value_head(self.model_config)
        self.total_updates = cfg.train.steps * cfg.loss.ppo_epochs
        self.tx, self.schedule = make_optimizer(cfg.optimizer, self.total_updates)
        # a mesh of more than one device: params / AdamW state sharded by leap_jax.parallel.rules
        self.placement = MeshPlacement.from_cfg(cfg.mesh)
        if self.placement is not None:
            self.params = self.placement.place(self.params)
        self.opt_state = self.tx.init(self.params)
        if self.placement is not None:
            self.opt_state = self.placement.place(self.opt_state)
        self.step = 0
        self.updates_done = 0
        self.train_time = 0.0  # net training seconds so far (time/step minus compilation), all calls
        self.stopped_by_budget = False
        self.plateau_values: list[float] = []  # train.plateau.metric at each periodic evaluation
        self.plateaued = False
        self.cursor = {"epoch": 0, "pos": 0}
        self.dcp_history: dict[str, Any] | None = None
        if cfg.dcp.history:
            h = init_history(max(len(self.train_tasks), 1))
            self.dcp_history = {"debugged": h.debugged, "recovered": h.recovered}
        self.env_config = env_config(cfg, "train")  # training rollouts
        self.eval_env_config = env_config(cfg, "eval")  # evaluations (fast_p needs timing)
        self._owned_pool = evaluator is None
        self.evaluator = evaluator
        self._policy_override = policy
        self._sampler: Sampler | None = None
        self._sampler_counters_seen: dict[str, int] = {}  # Sampler.counters at this step's start
        self._pool_counters_seen: dict[str, int] = {}  # the pool's host counters at the last record
        # rollout.update_lag: rollouts generated and not yet updated on, oldest first
        self._lagged: deque[tuple[MultiTurnRollout, StartedRollout]] = deque()
        self.streams = ChatStreams(self.tokenizer)
        self.logprob_fn = make_logprob_fn(self.model_config, cfg.optimizer.attention)
        self.value_fn = make_value_fn(self.model_config) if self.ppo else None
        r, s = cfg.rollout, cfg.sampling
        self.update_fn = make_update(
            self.model_config, self.tx, self.schedule, micro_batch_size=cfg.optimizer.micro_batch_size,
            eps_low=cfg.loss.eps_low, eps_high=cfg.loss.eps_high, aggregation=cfg.loss.aggregation,
            max_len=float(s.max_new_tokens * r.max_turns), ppo=self.ppo, value_coef=cfg.loss.value_coef,
            value_clip=cfg.loss.value_clip, donate=jax.default_backend() != "cpu",
            accumulate=cfg.optimizer.accumulate, attn_impl=cfg.optimizer.attention,
            micro_batch_tokens=cfg.optimizer.micro_batch_tokens, batch_put=None if self.placement is None else self.placement.put_batch)
        if self.placement is not None:
            self.update_fn = self.placement.wrap_update(self.update_fn)
        self.checkpointer = Checkpointer(self.run_dir, keep_last=cfg.checkpoint.keep_last)
        self._stop_signal: int | None = None
        if resume:
            self.restore()

    # -- components built lazily (eval and train need different ones) --
    def _pool(self) -> Any:
        if self.evaluator is None:
            self.evaluator = EvalPool(**self.cfg.env.pool_kwargs(), config=self.env_config)
        return self.evaluator

    def _sampler_policy(self, sampling: Any) -> SamplerPolicy:
        r = self.cfg.rollout
        if self._sampler is None:
            max_batch = max(r.prompts_per_step * r.group_size, 1)
            bb, pb = sampler_buckets(self.cfg, max_batch)
            self._sampler = Sampler(self.model_config, max_batch=max_batch, batch_buckets=bb,
                                    prompt_buckets=pb,
                                    max_new_tokens=self.cfg.sampling.max_new_tokens,
                                    pad_id=self.tokenizer.pad_id,
                                    impl=self.cfg.sampling.decode_impl())
        return SamplerPolicy(self._sampler, self.tokenizer, sampling, end_ids=self.streams.end_ids)

    def _policy(self, sampling: Any, allow_scripted_mix: bool = True) -> Policy:
        pol: Policy
        if self._policy_override is not None:
            pol = self._policy_override
        else:
            pol = self._sampler_policy(sampling)
            mix = self.cfg.rollout.scripted_mix
            if mix.enabled and allow_scripted_mix:
                scripted = ScriptedPolicy(self.tokenizer, p_good=mix.p_good, end_ids=[self.streams.im_end])
                pol = MixedPolicy(pol, scripted, mix.fraction)
        pol.set_params(self.params["model"])
        return pol

    def _sampling(self, temperature: float | None = None) -> Any:
        return self.cfg.sampling.params(self.streams.end_ids, temperature)

    def _rollout(self, group_size: int, max_turns: int, dcp_mode: str, evaluation: bool = False) -> MultiTurnRollout:
        r = self.cfg.rollout
        env_cfg = self.eval_env_config if evaluation else self.env_config
        return MultiTurnRollout(
            self.streams, self._pool(), env_cfg, group_size=group_size, max_turns=max_turns,
            dcp_mode=dcp_mode, t_min=self.cfg.dcp.t_min, t_max=self.cfg.dcp.t_max,
            feedback_budget_chars=r.feedback_budget_chars, max_new_tokens=self.cfg.sampling.max_new_tokens,
            max_context_tokens=r.max_context_tokens, overlap_chunks=r.overlap_chunks if r.overlap else 1,
            sizes=self.cfg.env.sizes, pipeline_turns=r.pipeline_turns and not evaluation,
            preempt=0.0 if evaluation else r.preempt)

    # -- data cursor --
    def next_tasks(self) -> list[str]:
        """The next prompts_per_step training tasks: a seeded permutation per epoch, walked in order."""
        if not self.train_tasks:
            raise ConfigError("no training tasks (all selected tasks are held out)")
        out: list[str] = []
        n = self.cfg.rollout.prompts_per_step
        while len(out) < n:
            perm = np.random.default_rng([self.cfg.train.seed, self.cursor["epoch"]]).permutation(
                len(self.train_tasks))
            take = min(n - len(out), len(perm) - self.cursor["pos"])
            out += [self.train_tasks[i] for i in perm[self.cursor["pos"]:self.cursor["pos"] + take]]
            self.cursor["pos"] += take
            if self.cursor["pos"] >= len(perm):
                self.cursor = {"epoch": self.cursor["epoch"] + 1, "pos": 0}
        return out

    # -- one training step --
    def rollout_step(self) -> tuple[list[str], RolloutOutput]:
        """This step's training rollouts: the next tasks, rolled out by the algorithm's rollout with
        the current params (env_error share checked). `train_step` updates on them; a benchmark of
        generation alone (benchmarks/step_time.py --rollout-only) calls this instead."""
        return self._finish_rollout(*self._start_rollout())

    def _start_rollout(self) -> tuple[MultiTurnRollout, StartedRollout]:
        """The next tasks' training rollouts with the current params, until nothing is left to
        generate (`MultiTurnRollout.start`: the last evaluations may still run)."""
        cfg = self.cfg
        self._sampler_counters_seen = dict(self._sampler.counters) if self._sampler is not None else {}
        self.rng, k_roll = jax.random.split(self.rng)
        tasks = self.next_tasks()
        rollout = self._rollout(cfg.rollout.group_size, cfg.rollout.max_turns,
                                self.spec.dcp_mode)
        return rollout, rollout.start(tasks, self._policy(self._sampling()), seed=_seed_from_key(k_roll),
                                      step=self.step)

    def _finish_rollout(self, rollout: MultiTurnRollout, started: StartedRollout) -> tuple[list[str], RolloutOutput]:
        out = rollout.finish(started)
        check_env_errors(out, self.cfg.env.max_env_error_fraction, started.state.step,  # the step that generated it
                         getattr(self.evaluator, "stats", None),
                         log=lambda line: print(f"[leap_jax] {line}", flush=True))
        return started.tasks, out

    def drop_lagged(self) -> None:
        """Wait for the rollouts that rollout.update_lag left without an update, and drop them."""
        while self._lagged:
            rollout, started = self._lagged.popleft()
            rollout.finish(started)

    def train_step(self) -> dict[str, Any]:
        """Generate the next tasks' rollouts and update on them; with rollout.update_lag = 1, update
        on the previous step's rollouts instead (none at a run's first step), whose last evaluations
        ran while this step generated. The rollout stats are those of the rollouts updated on; the
        `time/*` phases are this step's."""
        cfg = self.cfg
        c0 = compile_seconds()
        t0 = time.perf_counter()
        rollout, started = self._start_rollout()
        self._lagged.append((rollout, started))
        collected: tuple[StartedRollout, RolloutOutput] | None = None  # the rollout updated on, finished
        if len(self._lagged) > cfg.rollout.update_lag:
            tasks, out = self._finish_rollout(*self._lagged[0])
            collected = (self._lagged.popleft()[1], out)
        t_roll = time.perf_counter()
        c_roll = compile_seconds()
        metrics: dict[str, Any] = {}
        if collected is None:  # rollout.update_lag: nothing generated earlier to update on yet
            metrics["update/skipped"] = 1.0
            t_upd0 = t_end = time.perf_counter()
        else:
            t_upd0, t_end = self._update_on(tasks, collected[1], metrics)
        t_done = time.perf_counter()  # the DCP history and the step's metrics count too: every arm's clock
        metrics.update(self._phase_clocks(started, collected))
        metrics["time/rollout"] = t_roll - t0
        metrics["time/batch"] = t_upd0 - t_roll  # credit and build_batch (host)
        metrics["time/update"] = t_end - t_upd0
        metrics["time/step"] = t_done - t0
        # compilation is paid once per new shape: logged apart and left out of the training clock
        c_end = compile_seconds()
        metrics["time/compile"] = min(c_end - c0, t_done - t0)
        metrics["time/compile_generate"] = c_roll - c0  # rollout: prefill / decode programs
        metrics["time/compile_update"] = c_end - c_roll  # old log-probs, (values,) update programs
        self.train_time += metrics["time/step"] - metrics["time/compile"]
        metrics["time/train_total"] = self.train_time
        metrics.update(self.sampler_counter_deltas())
        metrics.update(pool_counter_deltas(self.evaluator, self._pool_counters_seen))
        self.step += 1
        return metrics

    @staticmethod
    def _phase_clocks(started: StartedRollout,
                      collected: tuple[StartedRollout, RolloutOutput] | None) -> dict[str, float]:
        """This step's rollout phase seconds: `started`'s generation up to `start`'s return, plus the
        collection of `collected` = (a started rollout, its finished output): the same rollout
        without rollout.update_lag, the previous step's with it, None at a lagged run's first step."""
        phases = ("generate", "evaluate_submit", "evaluate_wait", "feedback", "rollout_total")
        t = {k: started.start_times[k] for k in phases}
        if collected is not None:
            finished, out = collected
            for k in phases:
                t[k] += out.stats[f"time/{k}"] - finished.start_times[k]
        clocks = {f"time/{k}": v for k, v in t.items()}
        clocks["time/evaluate"] = t["evaluate_wait"] + t["evaluate_submit"]
        return clocks

    def _update_on(self, tasks: list[str], out: RolloutOutput, metrics: dict[str, Any]) -> tuple[float, float]:
        """Credit, batch and update on `out` (metrics filled in); the update's start and end clocks."""
        cfg = self.cfg
        a = cfg.algorithm
        credit = algorithms.compute_credit(
            self.algorithm, out.correct, out.attempted, out.speedup, out.status_rank, out.row_mask,
            credit=a.credit, eps=a.eps, kevin_gamma=a.kevin_gamma, kevin_correct_bonus=a.kevin_correct_bonus,
            rank_speedup_tiebreak=a.rank_speedup_tiebreak, rank_status_tiebreak=a.rank_status_tiebreak)
        batch_stats: dict[str, float] = {}
        batch = build_batch(out.rows, credit.advantages, out.row_mask, out.group_size,
                            micro_batch_size=cfg.optimizer.micro_batch_size,
                            pad_to_multiple=cfg.optimizer.pad_to_multiple, pad_id=self.tokenizer.pad_id or 0,
                            row_reward=credit.row_reward if self.ppo else None, pack=cfg.optimizer.pack,
                            pack_len=cfg.optimizer.pack_len,
                            drop_zero_advantage=cfg.optimizer.drop_zero_advantage,
                            aggregation=cfg.loss.aggregation, stats=batch_stats)
        t_upd0 = time.perf_counter()
        if batch is not None:
            metrics["update/recomputed_old_logprobs"] = fill_old_logprobs(
                self.logprob_fn, self.params, batch, cfg.optimizer.micro_batch_size)
            if self.ppo:
                if self.value_fn is None:
                    raise RuntimeError("ppo update without a value function (make_value_fn)")
                prepare_ppo(self.value_fn, self.params, batch, a.gamma, a.gae_lambda,
                            cfg.optimizer.micro_batch_size)
            # the loop update slices micro-batches itself (each goes to the device on its own)
            jb = batch if cfg.optimizer.accumulate == "loop" else {k: jnp.asarray(v) for k, v in batch.items()}
            for _ in range(cfg.loss.ppo_epochs):
                lr = float(self.schedule(self.updates_done))
                self.params, self.opt_state, um = self.update_fn(self.params, self.opt_state, jb)
                self.updates_done += 1
            metrics.update({k: float(v) for k, v in jax.device_get(um).items()})
            metrics["optim/lr"] = lr
            metrics["update/rows"] = float(batch["tokens"].shape[0])
            metrics["update/seq_len"] = float(batch["tokens"].shape[1])
            metrics["update/trainable_tokens"] = float(batch["mask"].sum())
            metrics["update/slots"] = batch_stats["slots"]
            metrics["update/real_tokens"] = batch_stats["real_tokens"]
            metrics["update/padding_ratio"] = batch_stats["padding_ratio"]
            metrics["update/dropped_conversations"] = batch_stats["dropped_conversations"]
            metrics["update/all_trainable_tokens"] = batch_stats["all_trainable_tokens"]
        else:
            metrics["update/skipped"] = 1.0
        t_end = time.perf_counter()
        if self.dcp_history is not None:
            self._update_history(out, tasks)
        metrics.update(self.step_metrics(out, credit))
        return t_upd0, t_end

    def sampler_counter_deltas(self) -> dict[str, float]:
        """sampler/<counter> since the last rollout_step began: its decode calls, loop iterations,
        rows, tokens, rows cut at max_new_tokens (iterations x rows against tokens shows the steps
        spent on finished rows) and rows preempted (rollout.preempt)."""
        if self._sampler is None:
            return {}
        now = dict(self._sampler.counters)
        last = self._sampler_counters_seen
        return {f"sampler/{k}": float(v - last.get(k, 0)) for k, v in now.items()}

    def step_metrics(self, out: RolloutOutput, credit: algorithms.Credit) -> dict[str, Any]:
        m: dict[str, Any] = dict(outcome_metrics(out))
        m.update(out.stats)
        valid = out.row_mask
        m["reward/mean"] = float(credit.row_reward[valid].mean()) if valid.any() else None
        m["reward/std"] = float(credit.row_reward[valid].std()) if valid.any() else None
        att = out.attempted & valid[..., None]
        m["advantage/mean"] = float(credit.advantages[att].mean()) if att.any() else None
        m["advantage/abs_mean"] = float(np.abs(credit.advantages[att]).mean()) if att.any() else None
        return m

    def _update_history(self, out: RolloutOutput, tasks: list[str]) -> None:
        if self.dcp_history is None:
            raise RuntimeError("_update_history: no DCP history (the algorithm does not use DCP)")
        ids = np.asarray([self.train_tasks.index(t) for t in tasks], np.int32)
        h = update_history(DCPHistory(**self.dcp_history), ids, out.decisions, out.correct, out.attempted,
                           out.row_mask)
        self.dcp_history = {"debugged": h.debugged, "recovered": h.recovered}

    # -- checkpoints --
    def _arrays(self) -> dict[str, Any]:
        arrays = {"params": self.params, "opt_state": self.opt_state, "rng": jax.random.key_data(self.rng)}
        if self.dcp_history is not None:
            arrays["dcp_history"] = self.dcp_history
        return arrays

    def save(self) -> None:
        meta = {"step": self.step, "updates_done": self.updates_done, "cursor": dict(self.cursor),
                "config": to_dict(self.cfg), "algorithm": self.algorithm, "train_time_s": self.train_time}
        self.checkpointer.save(self.step, self._arrays(), meta)

    def restore(self, step: int | None = None, checkpointer: Checkpointer | None = None) -> int:
        ck = checkpointer or self.checkpointer
        arrays, meta, got = ck.restore(self._arrays(), step)
        self.params, self.opt_state = arrays["params"], arrays["opt_state"]
        self.rng = jax.random.wrap_key_data(arrays["rng"])
        if "dcp_history" in arrays:
            self.dcp_history = arrays["dcp_history"]
        self.step, self.updates_done = int(meta["step"]), int(meta["updates_done"])
        self.train_time = float(meta.get("train_time_s", 0.0))
        self.cursor = {k: int(v) for k, v in meta["cursor"].items()}
        return got

    # -- loops --
    def _install_signals(self) -> dict[int, Any]:
        def handler(signum, frame):
            if self._stop_signal is not None:  # second signal: stop now
                raise KeyboardInterrupt
            self._stop_signal = signum
            print(f"\n[leap_jax] signal {signum}: finishing step {self.step}, saving a checkpoint, stopping",
                  flush=True)
        old: dict[int, Any] = {}
        for s in (signal.SIGINT, signal.SIGTERM):
            try:
                old[s] = signal.signal(s, handler)
            except ValueError:  # not the main thread
                pass
        return old

    def out_of_time(self) -> bool:
        """True once the run's net training time has reached train.time_budget_s."""
        budget = self.cfg.train.time_budget_s
        return budget is not None and self.train_time >= budget

    @property
    def finished(self) -> bool:
        """The run is complete: train.steps done, train.time_budget_s spent or train.plateau reached."""
        return self.step >= self.cfg.train.steps or self.out_of_time() or self.plateaued

    def _watch_plateau(self, records: Sequence[dict[str, Any]]) -> None:
        """Add the periodic evaluations' train.plateau.metric of `records` to the history; set
        `plateaued` once the rule (leap_jax.train.stopping) holds after train.plateau.min_steps steps."""
        p = self.cfg.train.plateau
        if p.metric is None:
            return
        self.plateau_values += stopping.metric_history(records, p.metric)
        self.plateaued = self.step >= p.min_steps and stopping.plateaued(self.plateau_values, p.window, p.tol)

    def train(self, max_steps: int | None = None) -> list[dict[str, Any]]:
        """Run until train.steps or train.time_budget_s (or `max_steps` more steps, or this call's
        train.max_wall_s); returns this call's step records. A run that reached train.steps or its
        time budget writes RUN_DIR/finished.json."""
        cfg = self.cfg
        target = cfg.train.steps if max_steps is None else min(cfg.train.steps, self.step + max_steps)
        iv = cfg.eval.interval
        start_eval = iv is not None and cfg.eval.at_start and self.step == 0
        truncate_metrics(self.run_dir, self.step - 1 if not start_eval else -2)
        self.plateau_values = []
        self._watch_plateau(read_metrics(self.run_dir))  # a resumed run's history
        writer = MetricsWriter(self.run_dir, jsonl=cfg.logging.jsonl, tensorboard=cfg.logging.tensorboard,
                               progress_bar=cfg.logging.progress_bar, total_steps=cfg.train.steps,
                               initial_step=self.step)
        old = self._install_signals()
        records = []
        t_start = time.perf_counter()
        self.stopped_by_budget = False
        try:
            if start_eval:  # the starting policy, before any update: a record of step -1
                if cfg.eval.start_metrics:
                    m = {"time/train_total": 0.0, **self.shared_start_metrics(cfg.eval.start_metrics)}
                else:
                    m = {"time/train_total": 0.0, **self.periodic_eval_metrics()}
                    (self.run_dir / START_EVAL_FILE).write_text(json.dumps(
                        {**self.start_eval_identity(), "metrics": m}, indent=2))
                writer.write(-1, m, progress=False)
                records.append({"step": -1, **m})
                self._watch_plateau([m])
            walls: list[float] = []  # this call's step times, periodic evaluation included
            while self.step < target and not self.finished:
                t_it = time.perf_counter()
                m = self.train_step()
                step_done = self.step - 1
                done = self.finished
                if iv is not None and (self.step % iv == 0 or done):
                    m.update(self.periodic_eval_metrics())
                    self._watch_plateau([m])
                    done = self.finished
                writer.write(step_done, m)
                records.append({"step": step_done, **m})
                walls.append(time.perf_counter() - t_it)
                budget = cfg.train.max_wall_s
                self.stopped_by_budget = (budget is not None and self.step < target and not done
                                          and time.perf_counter() - t_start + next_step_estimate(walls, iv) >= budget)
                if cfg.checkpoint.enabled and (self.step % cfg.checkpoint.interval == 0 or self.step == target
                                               or done or self._stop_signal is not None or self.stopped_by_budget):
                    self.save()
                if self._stop_signal is not None or self.stopped_by_budget:
                    if self.stopped_by_budget:
                        print(f"\n[leap_jax] train.max_wall_s={budget:g} s reached after step {step_done}: "
                              "checkpoint saved, stopping (continue with --resume)", flush=True)
                    break
            self.drop_lagged()  # rollout.update_lag: the last rollouts are not trained on
            if self.finished:
                self.final_evaluation()
                self._mark_finished()
        finally:
            writer.close()
            for s, h in old.items():
                signal.signal(s, h)
        return records

    def start_eval_identity(self) -> dict[str, Any]:
        """What makes two runs' evaluations before the first update the same measurement: the
        policy, the task split and the evaluation settings (not the training seed or algorithm)."""
        c = self.cfg
        policy = str(Path(c.model.path).resolve()) if c.model.source == "hf" and c.model.path else None
        return {"model_source": c.model.source, "policy": policy, "train_tasks": list(self.train_tasks),
                "held_out": list(self.held_out), **({"validation": list(self.validation)} if self.validation else {}),
                "eval": {"turns": self.periodic_turns(0), "samples": c.eval.samples,
                         "temperature": c.eval.temperature, "train_tasks": c.eval.train_tasks},
                "env": {"backend": c.env.backend, "sizes": c.env.sizes,
                        "correctness_trials": c.env.correctness_trials},
                "max_new_tokens": c.sampling.max_new_tokens}

    def shared_start_metrics(self, path: str) -> dict[str, Any]:
        """The step -1 record from another run's start_eval.json (eval.start_metrics), after
        checking it measured this run's policy, tasks and evaluation settings."""
        p = Path(path)
        if p.is_dir():
            p = p / START_EVAL_FILE
        try:
            saved = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"eval.start_metrics={path!r}: cannot read a start evaluation there ({e}); "
                             f"expected the {START_EVAL_FILE} a run with eval.at_start writes") from None
        mine = self.start_eval_identity()
        diff = sorted(k for k in mine if saved.get(k) != mine[k])
        if diff or "metrics" not in saved:
            what = ", ".join(f"{k}: {saved.get(k)!r} there, {mine[k]!r} here" for k in diff) or "no metrics"
            raise ValueError(f"eval.start_metrics={path!r} measured something else ({what}); "
                             "drop eval.start_metrics to evaluate this run's start itself")
        return {**saved["metrics"], "eval/start_shared": 1.0}

    def _mark_finished(self) -> None:
        reason = "plateau" if self.plateaued else "time_budget" if self.out_of_time() else "steps"
        record: dict[str, Any] = {"reason": reason, "step": self.step, "train_time_s": self.train_time}
        if self.cfg.tasks.source == "generated":
            record["family_version"] = self.cfg.tasks.generated_version
        (self.run_dir / FINISHED_FILE).write_text(json.dumps(record, indent=2))

    def _eval_on(self, tasks: Sequence[str], turns: int | None = None) -> tuple[dict[str, Any], Any]:
        """Acc@1..turns (default eval.turns) of the current params on `tasks` (eval settings, every
        failing row debugged, no scripted mix, a fixed seed: consumes no training RNG, so resumed runs
        stay exact)."""
        cfg = self.cfg
        rollout = self._rollout(cfg.eval.samples, turns or cfg.eval.turns, "all", evaluation=True)
        out = rollout.run(list(tasks), self._policy(self._sampling(cfg.eval.temperature), allow_scripted_mix=False),
                          seed=cfg.train.seed + 1_000_003, step=-1)
        return outcome_metrics(out), out

    def eval_tasks(self, names: Sequence[str]) -> list[str]:
        """The tasks an evaluation of a split measures: all, or eval.max_tasks of them (fixed sample)."""
        return subsample(names, self.cfg.eval.max_tasks, self.cfg.tasks.split_seed)

    def final_evaluation(self) -> dict[str, Any] | None:
        """eval.final_turns: the finished policy on the held-out and training tasks (and the
        hand-written suite with eval.final_suite), every failing row given final_turns turns of real
        feedback, in one rollout; written to RUN_DIR/final_eval.json (None: off). A run whose final
        evaluation for this step exists already keeps it (a resume after it)."""
        cfg = self.cfg
        turns = cfg.eval.final_turns
        if turns is None:
            return None
        path = self.run_dir / FINAL_EVAL_FILE
        if path.is_file():
            try:
                saved: dict[str, Any] = json.loads(path.read_text())
                if saved.get("step") == self.step and saved.get("turns") == turns:
                    return saved
            except (OSError, json.JSONDecodeError):
                pass
        t0 = time.perf_counter()
        result = {"step": self.step, "turns": turns, "temperature": cfg.eval.temperature,
                  "samples": cfg.eval.samples,
                  "splits": self._split_metrics(self._final_splits(), turns, with_tasks=True)}
        result["time_s"] = time.perf_counter() - t0
        path.write_text(json.dumps(result, indent=2))
        return result

    def _final_splits(self) -> list[tuple[str, list[str]]]:
        splits = [("heldout", self.eval_tasks(self.held_out)), ("train_eval", self.eval_tasks(self.train_tasks))]
        if self.cfg.eval.final_suite:
            splits.append(("suite", [t.name for t in list_tasks()]))
        return [(name, tasks) for name, tasks in splits if tasks]

    def _split_metrics(self, splits: Sequence[tuple[str, Sequence[str]]], turns: int,
                       with_tasks: bool = False) -> dict[str, dict[str, Any]]:
        """{split: {acc@1..turns, turns_per_pass[, tasks, per_task]}} of one rollout over every
        split's tasks (one batch per turn, not one sequence of decodes per split)."""
        union = [t for _, tasks in splits for t in tasks]
        if not union:
            return {}
        _, out = self._eval_on(union, turns)
        res: dict[str, dict[str, Any]] = {}
        start = 0
        for name, tasks in splits:
            part = select_groups(out, range(start, start + len(tasks)))
            start += len(tasks)
            m = outcome_metrics(part)
            res[name] = {**{f"acc@{t}": m.get(f"acc@{t}") for t in range(1, turns + 1)},
                         "turns_per_pass": m.get("turns_per_pass")}
            if with_tasks:
                res[name]["tasks"] = len(tasks)
                res[name]["per_task"] = solved_turns_by_task(part, tasks)
        return res

    def periodic_turns(self, step: int) -> int:
        """Turns of the periodic evaluation after `step` steps: eval.feedback_turns every
        eval.feedback_interval steps (and at the start), else eval.turns."""
        e = self.cfg.eval
        return e.feedback_turns if e.feedback_interval and step % e.feedback_interval == 0 else e.turns

    def periodic_eval_metrics(self) -> dict[str, Any]:
        """The in-training evaluation (eval.interval): held-out tasks as heldout/..., the validation
        tasks (tasks.generated_validation) as validation/..., and the training tasks as train_eval/...
        when eval.train_tasks; its time is time/periodic_eval, not time/step.

        The splits go through one rollout (one batch per turn), so the held-out tasks add rows to the
        training tasks' decode instead of a second sequence of decodes of their own."""
        cfg = self.cfg
        t0 = time.perf_counter()
        splits = [("heldout", self.eval_tasks(self.held_out)), ("validation", self.eval_tasks(self.validation))] + (
            [("train_eval", self.eval_tasks(self.train_tasks))] if cfg.eval.train_tasks else [])
        by_split = self._split_metrics([(p, tasks) for p, tasks in splits if tasks], self.periodic_turns(self.step))
        res: dict[str, Any] = {f"{p}/{k}": v for p, m in by_split.items() for k, v in m.items()}
        res["time/periodic_eval"] = time.perf_counter() - t0
        return res

    def evaluate(self, checkpoint: str | None = None) -> dict[str, Any]:
        """Held-out tasks, eval.turns turns, every failing row debugged; no training."""
        cfg = self.cfg
        src = checkpoint or cfg.eval.checkpoint
        restored = None
        if src is not None or self.checkpointer.latest_step() is not None:
            ck = Checkpointer(src or self.run_dir, keep_last=cfg.checkpoint.keep_last) if src else self.checkpointer
            if ck.latest_step() is None:
                raise FileNotFoundError(f"eval.checkpoint={src!r}: no checkpoint found under it")
            restored = self.restore(checkpointer=ck)
        tasks = self.eval_tasks(self.held_out or self.train_tasks)
        t0 = time.perf_counter()
        m, out = self._eval_on(tasks)  # never the smoke scripted mix: eval measures the policy alone
        result = {"checkpoint_step": restored, "tasks": list(tasks), "held_out": bool(self.held_out),
                  "samples": cfg.eval.samples, "turns": cfg.eval.turns, **m,
                  "env/evaluations": out.stats["env/evaluations"], "env/env_errors": out.stats["env/env_errors"],
                  "rollout/scripted_frac": out.stats["rollout/scripted_frac"],
                  "time/eval": time.perf_counter() - t0,
                  "per_task": solved_turns_by_task(out, tasks)}
        (self.run_dir / EVAL_FILE).write_text(json.dumps(result, indent=2))
        return result

    def close(self) -> None:
        try:
            self.drop_lagged()
        finally:
            if self._owned_pool and self.evaluator is not None and hasattr(self.evaluator, "close"):
                self.evaluator.close()
            self.checkpointer.close()
