"""Supervised warm-up: turn a small random decoder into a policy RL can start from.

Pipeline (`run_sft(cfg)`, `mode: sft` in the config):
1. the verified corpus (`corpus.load_or_build`) over the training split of `tasks:`;
2. a byte-level BPE tokenizer trained on it (`tokenizer_train`), or the `tokenizer:` section's file;
3. chat examples rendered to ChatML ids with a per-token loss mask: only the content (and closing
   `<|im_end|>`) of assistant messages whose `train` flag is true carry loss, so a wrong first
   attempt in a multi-turn example is context, not a target;
4. examples packed into fixed [B, seq_len] rows (segment ids keep packed examples from attending to
   each other, positions restart per example), a jitted AdamW step (the `optimizer:` section through
   `make_optimizer`: grad clip, schedule) accumulated exactly over micro-batches;
5. metrics every `sft.log_interval` steps to RUN_DIR/metrics.jsonl (loss, tokens/s, lr, grad norm);
6. the policy saved as an HF checkpoint in RUN_DIR/model (+ tokenizer.json, tokenizer_config.json),
   loadable by an RL config with `model.source: hf, model.path: RUN_DIR/model, tokenizer.kind: hf`;
7. the first-turn pass rate on the training (and held-out) tasks, sampled with the real `Sampler`
   and scored through `EvalPool`, printed and written to RUN_DIR/sft_eval.json.

`resolve_sft_init(cfg)` serves `model.source: sft` in an RL config: it builds the SFT policy of
`model.sft_config` (or reuses it when RUN_DIR/model was made by exactly that config) and returns the
RL config rewritten to load it.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from kernels_env import EvalPool, get_task, subsample
from leap_jax.bootstrap.corpus import load_or_build
from leap_jax.bootstrap.tokenizer_train import corpus_texts
from leap_jax.models.bpe import train_tokenizer
from leap_jax.models.chat import END_OF_TEXT, IM_END, render_turn
from leap_jax.models.decoder import forward
from leap_jax.models.hf import save_hf_checkpoint
from leap_jax.models.logprobs import hidden_logprobs
from leap_jax.rollout.multiturn import ChatStreams, MultiTurnRollout
from leap_jax.rollout.policy import SamplerPolicy
from leap_jax.sampling.buckets import prompt_buckets
from leap_jax.sampling.sampler import Sampler
from leap_jax.train.config import Config, ConfigError, load_config, save_config, to_dict
from leap_jax.train.metrics import MetricsWriter, truncate_metrics
from leap_jax.train.trainer import build_model, build_tokenizer, env_config, select_tasks, validation_tasks
from leap_jax.train.update import make_optimizer
from leap_jax.train.update import pack_rows as first_fit

MODEL_DIR = "model"
EVAL_FILE = "sft_eval.json"
DONE_FILE = "sft_done.json"
BATCH_KEYS = ("tokens", "positions", "segment_ids", "targets", "mask")


# ---- examples -> token rows ---------------------------------------------------------------------
def render_example(tokenizer: Any, messages: Sequence[dict[str, Any]]) -> tuple[list[int], list[bool]]:
    """ChatML ids of one corpus example and its loss mask: True exactly on the tokens of assistant
    messages with `train: true` that `render_chat` marks trainable (content + closing `<|im_end|>`)."""
    ids: list[int] = []
    mask: list[bool] = []
    for i, m in enumerate(messages):
        if "role" not in m or "content" not in m:
            raise ValueError(f"example message #{i} {m!r}: expected 'role', 'content' (and 'train') keys")
        t_ids, t_mask = render_turn(tokenizer, {"role": m["role"], "content": m["content"]})
        train = bool(m.get("train", False)) and m["role"] == "assistant"
        ids += t_ids
        mask += [bool(k) and train for k in t_mask]
    return ids, mask


def encode_examples(tokenizer: Any, examples: Sequence[dict[str, Any]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(ids int32 [n], loss mask bool [n]) per example; examples without a trained token are dropped."""
    out = []
    for ex in examples:
        ids, mask = render_example(tokenizer, ex["messages"])
        if any(mask):
            out.append((np.asarray(ids, np.int32), np.asarray(mask, bool)))
    return out


def pack_rows(seqs: Sequence[tuple[np.ndarray, np.ndarray]], seq_len: int, pad_id: int = 0
              ) -> dict[str, np.ndarray]:
    """Pack next-token pairs of each sequence into rows of `seq_len` (first fit, in the given order).

    A sequence of n ids contributes n - 1 (input, target) pairs: inputs ids[:-1], targets ids[1:], the
    loss mask the sequence's mask shifted the same way (a target is trained iff its token is).
    Each sequence gets its own segment id (1, 2, ... per row; 0 is padding) and positions 0..n-2.
    Raises ValueError for a sequence longer than a row.
    """
    rows = first_fit([len(ids) - 1 for ids, _ in seqs], seq_len, decreasing=False)  # next-token pairs
    b = len(rows)
    out = {"tokens": np.full((b, seq_len), pad_id, np.int32), "positions": np.zeros((b, seq_len), np.int32),
           "segment_ids": np.zeros((b, seq_len), np.int32), "targets": np.full((b, seq_len), pad_id, np.int32),
           "mask": np.zeros((b, seq_len), bool)}
    for r, members in enumerate(rows):
        at = 0
        for s, k in enumerate(members, 1):
            ids, mask = seqs[k]
            n = len(ids) - 1
            out["tokens"][r, at:at + n] = ids[:-1]
            out["targets"][r, at:at + n] = ids[1:]
            out["mask"][r, at:at + n] = mask[1:]
            out["positions"][r, at:at + n] = np.arange(n)
            out["segment_ids"][r, at:at + n] = s
            at += n
    return out


def batch_stream(seqs: Sequence[tuple[np.ndarray, np.ndarray]], seq_len: int, batch_size: int, seed: int,
                 pad_id: int = 0) -> Iterator[dict[str, np.ndarray]]:
    """Endless [batch_size, seq_len] batches: each epoch shuffles the sequences (seeded), packs them
    and walks the packed rows in a shuffled order; a short last batch is filled with empty rows
    (mask 0), so every batch has one static shape."""
    epoch = 0
    while True:
        rng = np.random.default_rng([seed, epoch])
        order = rng.permutation(len(seqs))
        packed = pack_rows([seqs[i] for i in order], seq_len, pad_id)
        rows = rng.permutation(packed["tokens"].shape[0])
        for start in range(0, len(rows), batch_size):
            idx = rows[start:start + batch_size]
            batch = {k: v[idx] for k, v in packed.items()}
            short = batch_size - len(idx)
            if short:
                for k, v in batch.items():
                    fill = pad_id if k in ("tokens", "targets") else 0
                    batch[k] = np.concatenate([v, np.full((short,) + v.shape[1:], fill, v.dtype)])
            yield batch
        epoch += 1


# ---- loss and step ------------------------------------------------------------------------------
def masked_nll(params: Any, model_config: Any, batch: dict[str, Any]) -> tuple[Any, Any]:
    """(sum of -log p(target) over masked targets, number of masked targets), both fp32 scalars."""
    hidden, _ = forward(params, model_config, batch["tokens"], batch["positions"],
                        segment_ids=batch["segment_ids"], return_hidden=True)
    logp, _ = hidden_logprobs(params, model_config, hidden, batch["targets"])
    m = batch["mask"].astype(jnp.float32)
    return -jnp.sum(logp * m), jnp.sum(m)


def make_sft_step(model_config: Any, tx: Any, micro_batch_size: int) -> Callable:
    """Jitted `(params, opt_state, batch) -> (params, opt_state, metrics)`: the gradient of the
    token-mean masked NLL over the whole batch, accumulated over micro-batches in a `lax.scan`
    (each contributes grad(sum_k) / total count, so it equals the full-batch gradient)."""
    mb = int(micro_batch_size)

    def loss_fn(params, m, denom):
        s, n = masked_nll(params, model_config, m)
        return s / denom, (s, n)

    grad_fn = jax.grad(loss_fn, has_aux=True)

    @jax.jit
    def step(params, opt_state, batch):
        b = batch["tokens"].shape[0]
        if b % mb:
            raise ValueError(f"batch of {b} rows is not a multiple of micro_batch_size={mb}")
        denom = jnp.maximum(jnp.sum(batch["mask"]).astype(jnp.float32), 1.0)
        stacked = {k: batch[k].reshape((b // mb, mb) + batch[k].shape[1:]) for k in BATCH_KEYS}

        def body(carry, m):
            g_acc, s_acc = carry
            g, (s, _) = grad_fn(params, m, denom)
            return (jax.tree_util.tree_map(jnp.add, g_acc, g), s_acc + s), None

        zero = jax.tree_util.tree_map(jnp.zeros_like, params)
        (grads, loss_sum), _ = jax.lax.scan(body, (zero, jnp.zeros((), jnp.float32)), stacked)
        grad_norm = optax.tree.norm(grads)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, opt_state, {"loss": loss_sum / denom, "grad_norm": grad_norm,
                                   "tokens/trained": jnp.sum(batch["mask"]),
                                   "tokens/packed": jnp.sum(batch["segment_ids"] > 0)}

    return step


# ---- pieces of the run --------------------------------------------------------------------------
def sft_tasks(cfg: Config) -> tuple[list[str], list[str]]:
    """(train, held_out) task names: the `tasks:` split (the corpus covers the training side)."""
    return select_tasks(cfg)


def corpus_config(cfg: Config, train_tasks: Sequence[str]) -> Any:
    c = cfg.sft.corpus
    return c if c.tasks else dataclasses.replace(c, tasks=list(train_tasks))


def build_sft_tokenizer(cfg: Config, examples: Sequence[dict[str, Any]], tasks: Sequence[Any],
                        out_path: Path) -> Any:
    """kind=bpe: a BPE of tokenizer.vocab_size trained on the corpus and the training tasks' prompts
    (saved to out_path); kind=file|hf: the configured tokenizer, copied to out_path. `tasks`: Tasks
    or task names."""
    t = cfg.tokenizer
    if t.kind == "bpe":
        return train_tokenizer(corpus_texts(examples, tasks), t.vocab_size, out_path)
    tok = build_tokenizer(cfg, out_path.parent, [])
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tok.hf.save(str(out_path))
    return tok


def save_policy(model_dir: Path, model_config: Any, params: Any, tokenizer: Any) -> None:
    """HF checkpoint + tokenizer.json + tokenizer_config.json (ChatML EOS and pad) in model_dir."""
    model_dir.mkdir(parents=True, exist_ok=True)
    save_hf_checkpoint(str(model_dir), model_config, jax.device_get(params))
    tokenizer.hf.save(str(model_dir / "tokenizer.json"))
    (model_dir / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": IM_END, "pad_token": END_OF_TEXT, "model_max_length": model_config.max_position_embeddings,
         "tokenizer_class": "PreTrainedTokenizerFast"}, indent=2))


def _pass_rates(results_by_task: dict[str, list[str]]) -> dict[str, Any]:
    total = sum(len(v) for v in results_by_task.values())
    passed = sum(s == "correct" for v in results_by_task.values() for s in v)
    return {"pass_rate": passed / total if total else None, "passed": passed, "total": total,
            "tasks_solved": sum(any(s == "correct" for s in v) for v in results_by_task.values()),
            "per_task": results_by_task}


def make_eval_sampler(cfg: Config, model_config: Any, tokenizer: Any) -> Any:
    """The Sampler the pass-rate evaluations share (built once: one compilation per shape)."""
    return Sampler(model_config, max_batch=cfg.sft.eval_batch,
                   prompt_buckets=prompt_buckets(cfg.rollout.max_context_tokens),
                   max_new_tokens=cfg.sampling.max_new_tokens, pad_id=tokenizer.pad_id)


def evaluate_first_turn(cfg: Config, model_config: Any, params: Any, tokenizer: Any, tasks: Sequence[str],
                        evaluator: Any, env_config: Any, temperature: float, samples: int, seed: int,
                        sampler: Any = None) -> dict[str, Any]:
    """First-turn pass rate of the policy on `tasks`: `samples` rollouts per task (1 when greedy) with
    the real Sampler, every answer scored by `evaluator` (an EvalPool). Per-task statuses are kept."""
    if not tasks:
        return _pass_rates({})
    s = cfg.sampling
    n = 1 if temperature == 0 else samples
    streams = ChatStreams(tokenizer)
    sampler = sampler or make_eval_sampler(cfg, model_config, tokenizer)
    sp = s.params(streams.end_ids, temperature)
    policy = SamplerPolicy(sampler, tokenizer, sp, params=params,
                           end_ids=streams.end_ids)
    rollout = MultiTurnRollout(streams, evaluator, env_config, group_size=n, max_turns=1, dcp_mode="all",
                               max_new_tokens=s.max_new_tokens, max_context_tokens=cfg.rollout.max_context_tokens,
                               overlap_chunks=max(1, -(-len(tasks) * n // cfg.sft.eval_batch)),
                               sizes=cfg.env.sizes)
    out = rollout.run(list(tasks), policy, seed=seed)
    by_task: dict[str, list[str]] = {t: [] for t in tasks}
    for r in out.rows:
        by_task[r.task].append(r.turns[0].result.status.value)
    res = _pass_rates(by_task)
    res.update({"temperature": float(temperature), "samples": n,
                "env_errors": int(out.stats["env/env_errors"]),
                "mean_response_tokens": float(np.mean([r.turns[0].length for r in out.rows])),
                "finished_frac": float(np.mean([r.turns[0].finished for r in out.rows]))})
    return res


# ---- the run ------------------------------------------------------------------------------------
def run_sft(cfg: Config, *, evaluator: Any = None, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The whole SFT pipeline of the module docstring; returns the sft_eval.json content."""

    if cfg.mode != "sft":
        raise ConfigError(f"run_sft needs mode=sft, got mode={cfg.mode!r}")
    f = cfg.sft
    run_dir = Path(cfg.train.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(cfg, run_dir / "config.yaml")
    (run_dir / DONE_FILE).unlink(missing_ok=True)
    train_tasks, held_out = sft_tasks(cfg)
    t_start = time.perf_counter()

    own_pool = evaluator is None
    ecfg = env_config(cfg)
    if own_pool:
        evaluator = EvalPool(**cfg.env.pool_kwargs(), config=ecfg)
    try:
        # 1. corpus (scored through the same pool when the backends agree)
        ccfg = corpus_config(cfg, train_tasks)
        corpus_dir = Path(f.corpus_dir) if f.corpus_dir else run_dir / "corpus"
        share = ccfg.backend == cfg.env.backend
        records, examples = load_or_build(ccfg, corpus_dir, evaluator if share else None)
        if not f.multiturn:
            examples = [e for e in examples if e["kind"] != "multiturn"]
        kinds = {k: sum(e["kind"] == k for e in examples) for k in ("single", "multiturn")}
        log(f"[sft] corpus: {len(records)} scored variants, {len(examples)} examples {kinds} over "
            f"{len(set(e['task'] for e in examples))}/{len(train_tasks)} training tasks "
            f"({time.perf_counter() - t_start:.1f}s)")
        if not examples:
            raise ConfigError(f"the corpus in {corpus_dir} has no trainable example (no variant of "
                              f"{ccfg.tasks} scored correct?)")
        t_corpus = time.perf_counter() - t_start

        # 2. tokenizer, 3. rows
        model_dir = run_dir / MODEL_DIR
        tokenizer = build_sft_tokenizer(cfg, examples, [get_task(t) for t in train_tasks],
                                        run_dir / "tokenizer.json")
        seqs = encode_examples(tokenizer, examples)
        if not seqs:
            raise ConfigError(f"no example of the corpus in {corpus_dir} has a trained (train: true) assistant turn")
        longest = max(len(ids) - 1 for ids, _ in seqs)
        pm = cfg.optimizer.pad_to_multiple
        seq_len = f.seq_len or max(pm, -(-longest // pm) * pm)
        too_long = {k for k, (ids, _) in enumerate(seqs) if len(ids) - 1 > seq_len}
        seqs = [s for k, s in enumerate(seqs) if k not in too_long]
        if not seqs:
            raise ConfigError(f"sft.seq_len={seq_len}: every example is longer (longest {longest} tokens)")
        n_train_tokens = int(sum(m[1:].sum() for _, m in seqs))
        log(f"[sft] tokenizer: {tokenizer.vocab_size} ids | {len(seqs)} sequences, {n_train_tokens} trained "
            f"tokens, longest {longest}, seq_len {seq_len}" + (f", {len(too_long)} longer ones dropped"
                                                               if too_long else ""))

        # 4. model, optimizer, step
        key = jax.random.key(cfg.train.seed)
        init_key, _ = jax.random.split(key)
        model_config, params = build_model(cfg, tokenizer, init_key)
        tx, schedule = make_optimizer(cfg.optimizer, max(f.steps, 1))
        opt_state = tx.init(params)
        step_fn = make_sft_step(model_config, tx, cfg.optimizer.micro_batch_size)
        log(f"[sft] model {model_config.num_params() / 1e6:.2f}M params ({model_config.num_layers} layers, "
            f"hidden {model_config.hidden_size}) | {f.steps} steps x {f.batch_size} rows x {seq_len} tokens | "
            f"backend {jax.default_backend()}")

        sampler = make_eval_sampler(cfg, model_config, tokenizer)
        eval_seed = cfg.train.seed + 1_000_003
        curve: list[dict[str, Any]] = []
        chosen: dict[str, Any] | None = None  # the latest snapshot whose greedy train pass rate is in band

        eval_split = {"train": subsample(train_tasks, cfg.eval.max_tasks, cfg.tasks.split_seed),
                      "held_out": subsample(held_out, cfg.eval.max_tasks, cfg.tasks.split_seed),
                      "validation": subsample(validation_tasks(cfg), cfg.eval.max_tasks, cfg.tasks.split_seed)}
        band_tasks = eval_split[f.band_split]
        if not band_tasks:
            raise ConfigError(f"sft.band_split={f.band_split!r} has no tasks to evaluate")

        def greedy_train_rate(p: Any) -> float | None:
            """The greedy first-turn pass rate on sft.band_split (the training tasks by default)."""
            return evaluate_first_turn(cfg, model_config, p, tokenizer, band_tasks, evaluator, ecfg, 0.0, 1,
                                       eval_seed, sampler)["pass_rate"]

        def in_band(rate: float | None) -> bool:
            return bool(f.target_band) and rate is not None and f.target_band[0] <= rate <= f.target_band[1]

        stream = batch_stream(seqs, seq_len, f.batch_size, cfg.train.seed, tokenizer.pad_id or 0)
        truncate_metrics(run_dir, -1)
        # progress is printed as log lines (records are written every log_interval steps, not per step)
        writer = MetricsWriter(run_dir, jsonl=cfg.logging.jsonl, tensorboard=cfg.logging.tensorboard,
                               progress_bar=False)
        history: list[dict[str, Any]] = []
        t_train0 = time.perf_counter()
        t_win = time.perf_counter()
        stopped_early = False
        steps_done = 0
        t_eval_in_train = 0.0  # intermediate evaluations: not training time

        def train_seconds() -> float:
            return time.perf_counter() - t_train0 - t_eval_in_train

        try:
            for step in range(f.steps):
                batch = {k: jnp.asarray(v) for k, v in next(stream).items()}
                params, opt_state, m = step_fn(params, opt_state, batch)
                steps_done = step + 1
                last = steps_done == f.steps
                over = f.max_train_seconds is not None and train_seconds() > f.max_train_seconds
                do_eval = (f.eval_interval is not None and f.eval_interval != 0
                           and steps_done % f.eval_interval == 0 and not last and not over)
                if not (steps_done % f.log_interval == 0 or last or over or step == 0 or do_eval):
                    continue
                m = {k: float(v) for k, v in jax.device_get(m).items()}
                now = time.perf_counter()
                steps_in = steps_done - (history[-1]["step"] + 1 if history else 0)
                rec = {"loss": m["loss"], "grad_norm": m["grad_norm"], "optim/lr": float(schedule(step)),
                       "tokens/trained": m["tokens/trained"], "tokens/packed": m["tokens/packed"],
                       "tokens/s": m["tokens/packed"] * steps_in / max(now - t_win, 1e-9),
                       "time/train": train_seconds()}
                if do_eval:
                    rate = greedy_train_rate(params)
                    rec[f"eval/{f.band_split}_pass_rate_greedy"] = rate
                    curve.append({"step": steps_done, "loss": rec["loss"], f"{f.band_split}_pass_rate_greedy": rate})
                    if in_band(rate):
                        chosen = {"steps": steps_done, "params": jax.device_get(params), "rate": rate}
                    t_eval_in_train += time.perf_counter() - now
                    log(f"[sft] step {steps_done}: loss {rec['loss']:.4f}, greedy first-turn pass rate on "
                        f"{f.band_split} tasks {rate:.3f} (eval {time.perf_counter() - now:.1f}s)")
                    now = time.perf_counter()
                t_win = now
                writer.write(step, rec)
                history.append({"step": step, **rec})
                if over and not last:
                    stopped_early = True
                    log(f"[sft] sft.max_train_seconds={f.max_train_seconds} reached: stopping after "
                        f"{steps_done}/{f.steps} steps")
                    break
        finally:
            writer.close()
        t_train = train_seconds()
        log(f"[sft] trained {steps_done} steps in {t_train:.1f}s: loss {history[0]['loss']:.4f} -> "
            f"{history[-1]['loss']:.4f}, {history[-1]['tokens/s']:.0f} tokens/s")

        # 6. choose (target band) and save
        selected_step = steps_done
        if f.eval_interval or f.target_band:
            rate = greedy_train_rate(params)
            curve.append({"step": steps_done, "loss": history[-1]["loss"], f"{f.band_split}_pass_rate_greedy": rate})
            log(f"[sft] step {steps_done} (final): greedy first-turn pass rate on {f.band_split} tasks {rate:.3f}")
            if f.target_band and not in_band(rate) and chosen is not None:
                params, selected_step = jax.device_put(chosen["params"]), chosen["steps"]
                log(f"[sft] sft.target_band={f.target_band}: keeping the step-{selected_step} policy "
                    f"(greedy {f.band_split} pass rate {chosen['rate']:.3f}) instead of the final one")
            elif f.target_band and not in_band(rate):
                log(f"[sft] sft.target_band={f.target_band}: no evaluated policy was in the band; keeping the final one")
        chosen = None
        save_policy(model_dir, model_config, params, tokenizer)
        log(f"[sft] policy (step {selected_step}) saved to {model_dir} (HF safetensors + tokenizer.json)")

        # 7. first-turn pass rates
        evals = []
        splits = [("train", eval_split["train"])] + (
            [("held_out", eval_split["held_out"])] if f.eval_held_out and held_out else []) + (
            [("validation", eval_split["validation"])] if eval_split["validation"] else [])
        for name, tasks in splits:
            for temp in f.eval_temperatures:
                t0 = time.perf_counter()
                r = evaluate_first_turn(cfg, model_config, params, tokenizer, tasks, evaluator, ecfg, temp,
                                        f.eval_samples, eval_seed, sampler)
                r.update({"split": name, "time/eval": time.perf_counter() - t0})
                evals.append(r)
                log(f"[sft] first-turn pass rate on {name} tasks at T={temp:g}: {r['pass_rate']:.3f} "
                    f"({r['passed']}/{r['total']}, {r['tasks_solved']}/{len(tasks)} tasks solved at least once)")
    finally:
        if own_pool and evaluator is not None and hasattr(evaluator, "close"):
            evaluator.close()
    result = {"model_dir": str(model_dir), "tokenizer": str(model_dir / "tokenizer.json"),
              "train_tasks": train_tasks, "held_out": held_out, "steps": steps_done,
              "selected_step": selected_step, "curve": curve,
              "stopped_early": stopped_early, "final_loss": history[-1]["loss"], "first_loss": history[0]["loss"],
              "num_params": model_config.num_params(), "seq_len": seq_len, "examples": len(seqs),
              "time/corpus": t_corpus, "time/train": t_train, "time/total": time.perf_counter() - t_start,
              "evals": evals,
              "pass_rate": evals[0]["pass_rate"] if evals else None}
    (run_dir / EVAL_FILE).write_text(json.dumps(result, indent=2))
    (run_dir / DONE_FILE).write_text(json.dumps({"config": to_dict(cfg)}, sort_keys=True))
    return result


# ---- model.source: sft --------------------------------------------------------------------------
def _find_config(path: str) -> Path:
    """`path` as given (relative to the working directory), else relative to the project root."""
    p = Path(path)
    if p.is_file() or p.is_absolute():
        return p
    alt = Path(__file__).resolve().parents[2] / p
    return alt if alt.is_file() else p


def reusable(scfg: Config) -> bool:
    """True iff scfg's run dir holds a finished SFT policy made by exactly this (resolved) config."""
    run_dir = Path(scfg.train.run_dir)
    done, model_dir = run_dir / DONE_FILE, run_dir / MODEL_DIR
    if not (done.is_file() and (model_dir / "config.json").is_file() and (model_dir / "tokenizer.json").is_file()):
        return False
    try:
        return json.loads(done.read_text()).get("config") == json.loads(json.dumps(to_dict(scfg)))
    except json.JSONDecodeError:
        return False


def resolve_sft_init(cfg: Config, log: Callable[[str], None] = print) -> Config:
    """For `model.source: sft`: make sure the SFT policy of `model.sft_config` exists (train it unless
    its run dir holds one made by exactly that config), copy its tokenizer to the RL run dir, and
    return `cfg` with `model.source: hf, model.path` at the policy and `tokenizer.kind: file` at
    RUN_DIR/tokenizer.json (the RL run dir stays self-describing)."""
    if cfg.model.source != "sft":
        return cfg
    if not cfg.model.sft_config:
        raise ConfigError("model.source=sft needs model.sft_config: an SFT config file "
                          "(e.g. configs/bootstrap_sft_tiny.yaml)")
    path = _find_config(cfg.model.sft_config)
    scfg = load_config(path)
    if scfg.mode != "sft":
        raise ConfigError(f"model.sft_config={cfg.model.sft_config!r} has mode={scfg.mode!r}; expected an SFT "
                          "config (mode: sft)")
    run_dir = Path(scfg.train.run_dir)
    model_dir = run_dir / MODEL_DIR
    reuse = reusable(scfg)
    if reuse:
        log(f"[sft] reusing the SFT policy in {model_dir} (made by {path})")
    else:
        log(f"[sft] building the SFT policy of {path} into {run_dir}")
        run_sft(scfg, log=log)
    rl_dir = Path(cfg.train.run_dir)
    rl_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(model_dir / "tokenizer.json", rl_dir / "tokenizer.json")
    model = dataclasses.replace(cfg.model, source="hf", path=str(model_dir))
    tok = dataclasses.replace(cfg.tokenizer, kind="file", path=str(rl_dir / "tokenizer.json"))
    return dataclasses.replace(cfg, model=model, tokenizer=tok)


def summary_line(result: dict[str, Any]) -> str:
    """One line for the CLI: pass rates per split and temperature."""
    parts = [f"{e['split']}@T={e['temperature']:g}: {e['pass_rate']:.3f} ({e['passed']}/{e['total']})"
             for e in result["evals"] if e["pass_rate"] is not None]
    return "first-turn pass rate " + (", ".join(parts) if parts else "n/a")
