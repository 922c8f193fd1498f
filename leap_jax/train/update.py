"""The policy update (DESIGN 4.7): batch assembly from conversation streams and the jitted step.

`build_batch` turns rollout rows into padded [B, L] arrays: inputs are the stream, targets the
stream shifted left, the loss mask marks targets that are sampled response tokens (every assistant
turn), old log-probs come from the sampler (NaN where unknown, e.g. scripted responses; those are
filled by `fill_old_logprobs` with the current params before the update), and per-token
advantages come from the algorithm's [P, G, T] credit.

`make_update(...)` returns a jitted `(params, opt_state, batch) -> (params, opt_state, metrics)`:
micro-batches run in a `lax.scan`, each contributing grad(loss_sum_k / denom_total); the
denominators depend only on the mask, so they are computed for the whole batch first and the
accumulated gradient equals the full-batch gradient exactly. AdamW with grad-norm clipping and a
schedule via optax. For `ppo`, params carry a value head and the loss adds the clipped value loss.
Train params are `{"model": decoder params[, "value": {"w": [D], "b": []}]}`.
"""
from __future__ import annotations

from typing import Any
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from leap_jax.models.config import ModelConfig
from leap_jax.models.decoder import forward
from leap_jax.models.logprobs import hidden_logprobs
from leap_jax.rl import losses as loss_lib
from leap_jax.rl.advantages import gae

BATCH_KEYS = ("tokens", "positions", "segment_ids", "targets", "mask", "old_logp", "advantages")
PPO_KEYS = ("rewards", "old_values", "returns")


def rows_per_micro_batch(micro_batch_size: int, row_len: int, max_tokens: int | None) -> int:
    """Rows per micro-batch for rows of `row_len` slots: `micro_batch_size`, or with a token cap
    (optimizer.micro_batch_tokens) the largest divisor of it whose rows hold at most `max_tokens`
    slots (at least 1 row). The update's activation memory grows with a micro-batch's slots, so the
    cap keeps long packed rows (e.g. 16 x 4096 slots: a 16 GiB temporary for a 20M model) from
    needing more memory than short ones; the gradient is the same sum in a different order."""
    mb = int(micro_batch_size)
    if max_tokens is None:
        return mb
    if max_tokens < 1 or row_len < 1:
        raise ValueError(f"rows_per_micro_batch: max_tokens={max_tokens}, row_len={row_len}; expected >= 1")
    fits = max(int(max_tokens) // int(row_len), 1)
    return max(d for d in range(1, mb + 1) if mb % d == 0 and d <= fits)


def _round_up(n: int, m: int) -> int:
    return max(m, -(-n // m) * m)


def _length_bucket(n: int, minimum: int) -> int:
    """Sequence length bucket: `minimum` times a power of two (few distinct shapes -> few compiles)."""
    b = max(int(minimum), 1)
    while b < n:
        b *= 2
    return b


def _pg_denominator(masks: Sequence[np.ndarray], aggregation: str) -> float:
    """The policy loss denominator of `aggregate` over these conversations' trainable masks:
    trainable tokens (token-mean) or conversations with at least one (the sequence-mean modes)."""
    if aggregation == "token-mean":
        return float(sum(int(m.sum()) for m in masks))
    if aggregation not in loss_lib.AGGREGATION_MODES:
        raise ValueError(f"unknown aggregation mode {aggregation!r}")
    return float(sum(1 for m in masks if m.any()))


def pack_rows(lengths: Sequence[int], capacity: int, *, decreasing: bool = True) -> list[list[int]]:
    """First-fit: indices of `lengths` grouped into bins of at most `capacity` slots, longest first
    (first-fit decreasing) or in the given order (`decreasing=False`, the SFT stream's packing).

    Deterministic (ties keep input order); every length must be <= capacity."""
    order = (sorted(range(len(lengths)), key=lambda i: (-int(lengths[i]), i)) if decreasing
             else range(len(lengths)))
    bins: list[list[int]] = []
    free: list[int] = []
    for i in order:
        n = int(lengths[i])
        if n > capacity:
            raise ValueError(f"pack_rows: sequence #{i} of {n} slots exceeds the row capacity {capacity}")
        for b, f in enumerate(free):
            if f >= n:
                bins[b].append(i)
                free[b] -= n
                break
        else:
            bins.append([i])
            free.append(capacity - n)
    return bins


def build_batch(rows: Sequence[Any], advantages: np.ndarray, row_mask: np.ndarray, group_size: int, *,
                micro_batch_size: int, pad_to_multiple: int, pad_id: int = 0,
                row_reward: np.ndarray | None = None, pack: bool = False, pack_len: int | None = None,
                drop_zero_advantage: bool = False, aggregation: str = "token-mean",
                stats: dict[str, float] | None = None) -> dict[str, np.ndarray] | None:
    """Padded training arrays from rollout rows (see module docstring); None if nothing is trainable.

    `advantages` [P, G, T] per (group, row, turn); rows with row_mask False (env_error) are left out.
    With `row_reward` [P, G] (ppo) a `rewards` array carries it on each row's last trainable target.

    pack: several conversations share one row (first-fit decreasing), each its own segment id
    (1, 2, ... within the row) with positions from 0, so attention never crosses conversations;
    the row length is `pack_len`, or the length bucket of the longest conversation. Not with
    `row_reward` (GAE runs along a row).
    drop_zero_advantage: conversations whose advantage is exactly 0 on every trainable token
    contribute exactly zero policy gradient, so they are left out of the batch; the batch then
    carries `pg_denom`, the loss denominator of ALL conversations (`aggregation`), and the update
    divides by it, so the loss and gradient equal those of the full batch. Not with `row_reward`
    (the value loss needs every row). At least one conversation is always kept (an update with a
    zero gradient still steps AdamW's moments).
    `pg_denom` is always in the returned batch. `stats`, if given, receives padded/real slot counts.
    """
    keep = [r for k, r in enumerate(rows)
            if row_mask[k // group_size, k % group_size] and any(r.trainable[1:])]
    if not keep:
        return None
    T = advantages.shape[-1]
    ppo = row_reward is not None

    def token_arrays(r):
        m = np.asarray(r.trainable[1:], bool)
        turn = np.asarray(r.turn_of[1:], np.int64)  # 1..T on trainable tokens, 0 elsewhere
        adv_row = advantages[r.group, r.index]  # [T]
        adv = np.where(m & (turn >= 1), adv_row[np.clip(turn - 1, 0, T - 1)], 0.0).astype(np.float32)
        return m, adv

    arrs = [token_arrays(r) for r in keep]
    pg_denom = _pg_denominator([m for m, _ in arrs], aggregation)
    total_trainable = sum(int(m.sum()) for m, _ in arrs)
    n_conv = len(keep)
    if drop_zero_advantage and not ppo:
        live = [i for i, (m, a) in enumerate(arrs) if np.any(a[m] != 0.0)]
        if not live:  # keep the shortest one: the optimizer still takes its (zero-gradient) step
            live = [min(range(len(keep)), key=lambda i: len(keep[i].tokens))]
        keep, arrs = [keep[i] for i in live], [arrs[i] for i in live]
    lengths = [len(r.tokens) - 1 for r in keep]
    if pack and not ppo:
        L = int(pack_len) if pack_len else _length_bucket(max(lengths), pad_to_multiple)
        bins = pack_rows(lengths, L)
    else:
        L = _length_bucket(max(lengths), pad_to_multiple)
        bins = [[i] for i in range(len(keep))]
    B = _round_up(len(bins), micro_batch_size)
    out = {
        "tokens": np.full((B, L), pad_id, np.int32),
        "positions": np.zeros((B, L), np.int32),
        "segment_ids": np.zeros((B, L), np.int32),
        "targets": np.full((B, L), pad_id, np.int32),
        "mask": np.zeros((B, L), bool),
        "old_logp": np.zeros((B, L), np.float32),
        "advantages": np.zeros((B, L), np.float32),
        "rewards": np.zeros((B, L), np.float32),
    }
    for b, members in enumerate(bins):
        off = 0
        for s, i in enumerate(members, start=1):
            r, (m, adv) = keep[i], arrs[i]
            n = lengths[i]
            sl = slice(off, off + n)
            toks = np.asarray(r.tokens, np.int32)
            out["tokens"][b, sl] = toks[:-1]
            out["targets"][b, sl] = toks[1:]
            out["positions"][b, sl] = np.arange(n)
            out["segment_ids"][b, sl] = s
            out["mask"][b, sl] = m
            out["old_logp"][b, sl] = np.where(m, np.asarray(r.logprobs[1:], np.float32), 0.0)
            out["advantages"][b, sl] = adv
            if row_reward is not None and m.any():  # ppo
                out["rewards"][b, off + int(np.flatnonzero(m)[-1])] = row_reward[r.group, r.index]
            off += n
    if not ppo:
        del out["rewards"]
    out["pg_denom"] = np.asarray(max(pg_denom, 1.0), np.float32)
    if stats is not None:
        stats.update({"conversations": float(n_conv), "dropped_conversations": float(n_conv - len(keep)),
                      "rows": float(B), "seq_len": float(L), "slots": float(B * L),
                      "real_tokens": float(sum(lengths)), "trainable_tokens": float(out["mask"].sum()),
                      "all_trainable_tokens": float(total_trainable)})
        stats["padding_ratio"] = stats["slots"] / max(stats["real_tokens"], 1.0)
    return out


def make_logprob_fn(model_config: ModelConfig, attn_impl: str = "einsum") -> Callable:
    """Jitted (params, batch) -> fp32 [B, L] log-probs of the targets under `params`."""
    @jax.jit
    def fn(params, tokens, positions, segment_ids, targets):
        hidden, _ = forward(params["model"], model_config, tokens, positions,
                            segment_ids=segment_ids, return_hidden=True, attn_impl=attn_impl)
        return hidden_logprobs(params["model"], model_config, hidden, targets)[0]
    return fn


def map_row_chunks(fn: Callable, arrays: Sequence[np.ndarray], rows: int | None) -> np.ndarray:
    """`fn(*arrays)` evaluated `rows` rows at a time and concatenated along axis 0.

    A full rollout batch in one forward pass can need far more memory than the update, which
    already runs in micro-batches (attention scores grow with B * L^2). The last chunk is padded
    with copies of row 0, so every call has the same shape and `fn` compiles once.
    """
    b = int(arrays[0].shape[0])
    if rows is None or rows >= b:
        return np.asarray(fn(*arrays))
    if rows < 1:
        raise ValueError(f"map_row_chunks: rows={rows}; expected a positive int or None")
    out = []
    for start in range(0, b, rows):
        part = [a[start:start + rows] for a in arrays]
        n = part[0].shape[0]
        if n < rows:
            part = [np.concatenate([p, np.repeat(p[:1], rows - n, axis=0)]) for p in part]
        out.append(np.asarray(fn(*part))[:n])
    return np.concatenate(out)


def fill_old_logprobs(logprob_fn: Callable, params: Any, batch: dict[str, np.ndarray],
                      micro_batch_size: int | None = None) -> int:
    """Replace NaN old log-probs on trainable tokens by the current policy's; returns how many.

    Rows are evaluated `micro_batch_size` at a time (None: all at once)."""
    bad = batch["mask"] & ~np.isfinite(batch["old_logp"])
    if not bad.any():
        return 0
    lp = map_row_chunks(lambda *xs: logprob_fn(params, *xs),
                        [batch[k] for k in ("tokens", "positions", "segment_ids", "targets")],
                        micro_batch_size)
    batch["old_logp"] = np.where(bad, lp, batch["old_logp"]).astype(np.float32)
    return int(bad.sum())


# ---- value head (ppo) ---------------------------------------------------------------------------
def init_value_head(model_config: ModelConfig) -> dict[str, jax.Array]:
    return {"w": jnp.zeros((model_config.hidden_size,), jnp.float32), "b": jnp.zeros((), jnp.float32)}


def _values(params: Any, hidden: jax.Array) -> jax.Array:
    return hidden.astype(jnp.float32) @ params["value"]["w"] + params["value"]["b"]


def make_value_fn(model_config: ModelConfig) -> Callable:
    @jax.jit
    def fn(params, tokens, positions, segment_ids):
        hidden, _ = forward(params["model"], model_config, tokens, positions,
                            segment_ids=segment_ids, return_hidden=True)
        return _values(params, hidden)
    return fn


def prepare_ppo(value_fn: Callable, params: Any, batch: dict[str, np.ndarray], gamma: float,
                lam: float, micro_batch_size: int | None = None) -> None:
    """Old values, then GAE advantages and value targets over the trainable tokens (in place)."""
    v = map_row_chunks(lambda *xs: value_fn(params, *xs),
                       [batch[k] for k in ("tokens", "positions", "segment_ids")], micro_batch_size)
    adv, ret = gae(batch["rewards"], v, batch["mask"], gamma=gamma, lam=lam)
    batch["old_values"] = np.where(batch["mask"], np.asarray(v), 0.0).astype(np.float32)
    batch["advantages"] = np.asarray(adv, np.float32)
    batch["returns"] = np.asarray(ret, np.float32)


# ---- optimizer ----------------------------------------------------------------------------------
def make_optimizer(opt_cfg: Any, total_updates: int) -> tuple[optax.GradientTransformation, Callable]:
    """AdamW with global-norm clipping and a (warmup +) constant / linear / cosine schedule."""
    total = max(int(total_updates), 1)
    warm = min(int(opt_cfg.warmup_steps), total)
    if opt_cfg.schedule == "constant":
        main = optax.constant_schedule(opt_cfg.lr)
    elif opt_cfg.schedule == "linear":
        main = optax.linear_schedule(opt_cfg.lr, 0.0, max(total - warm, 1))
    elif opt_cfg.schedule == "cosine":
        main = optax.cosine_decay_schedule(opt_cfg.lr, max(total - warm, 1))
    else:
        raise ValueError(f"optimizer.schedule={opt_cfg.schedule!r}; expected constant, linear or cosine")
    schedule = (optax.join_schedules([optax.linear_schedule(0.0, opt_cfg.lr, warm), main], [warm])
                if warm > 0 else main)
    parts = []
    if opt_cfg.grad_clip > 0:
        parts.append(optax.clip_by_global_norm(opt_cfg.grad_clip))
    parts.append(optax.adamw(schedule, b1=opt_cfg.b1, b2=opt_cfg.b2, eps=opt_cfg.eps,
                             weight_decay=opt_cfg.weight_decay))
    return optax.chain(*parts), schedule


# ---- the jitted update --------------------------------------------------------------------------
def make_update(model_config: ModelConfig, tx: optax.GradientTransformation, schedule: Callable, *,
                micro_batch_size: int, eps_low: float = 0.2, eps_high: float = 0.28,
                aggregation: str = "token-mean", max_len: float | None = None, ppo: bool = False,
                value_coef: float = 0.5, value_clip: float | None = 0.2,
                donate: bool = False, accumulate: str = "scan", attn_impl: str = "einsum",
                batch_put: Callable | None = None, micro_batch_tokens: int | None = None) -> Callable:
    """The update step; see the module docstring. `max_len` is the constant of
    seq-mean-token-sum-norm (e.g. max_new_tokens * T).

    accumulate "scan": one jitted program over the whole [B, L] batch (micro-batches in a
    `lax.scan`): it compiles once per (B, L). "loop": a jitted micro-batch gradient step
    ([micro_batch_size, L], accumulating into a donated buffer) called once per micro-batch from
    Python, then a jitted optimizer step: the row count never recompiles, only a new L does. Both
    give the same result (same summation order). A batch's `pg_denom` (build_batch) replaces the
    policy denominator computed from its mask (needed when rows were dropped or packed).
    attn_impl: the forward's attention (`layers.attention`): "einsum" (fp32 scores, query chunks)
    or "cudnn" (the fused GPU kernel) / "dpa" (its XLA form).
    batch_put: places a batch ("scan") or each micro-batch ("loop") on devices before the jitted
    call, e.g. `leap_jax.parallel.rules.shard_batch` on a mesh (None: as given).
    micro_batch_tokens: at most this many slots (rows x row length) per micro-batch: rows of length L
    go `rows_per_micro_batch(micro_batch_size, L, micro_batch_tokens)` at a time (None: always
    `micro_batch_size`). On a mesh, keep the result a multiple of the data-parallel shards."""
    mb = int(micro_batch_size)
    if micro_batch_tokens is not None and int(micro_batch_tokens) < 1:
        raise ValueError(f"micro_batch_tokens={micro_batch_tokens}; expected an int >= 1 or None")
    if accumulate not in ("scan", "loop"):
        raise ValueError(f"accumulate={accumulate!r}; expected 'scan' or 'loop'")
    seq_mode = aggregation != "token-mean"

    def loss_fn(params, m, denom_pg, denom_v):
        hidden, _ = forward(params["model"], model_config, m["tokens"], m["positions"],
                            segment_ids=m["segment_ids"], return_hidden=True, attn_impl=attn_impl)
        logp, ent = hidden_logprobs(params["model"], model_config, hidden, m["targets"])
        # sequence-mean modes count sequences per segment (packed rows); token-mean needs no ids
        s, _, pm = loss_lib.policy_loss(logp, m["old_logp"], m["advantages"], m["mask"],
                                        eps_low=eps_low, eps_high=eps_high, mode=aggregation,
                                        max_len=max_len, entropy=ent,
                                        segment_ids=m["segment_ids"] if seq_mode else None)
        loss = s / denom_pg
        aux = {"pg": pm, "pg_loss_sum": jax.lax.stop_gradient(s)}
        if ppo:
            values = _values(params, hidden)
            vs, _, vm = loss_lib.value_loss(values, m["old_values"], m["returns"], m["mask"],
                                            clip_eps=value_clip, mode="token-mean")
            loss = loss + value_coef * vs / denom_v
            aux["vf"] = vm
            aux["vf_loss_sum"] = jax.lax.stop_gradient(vs)
        return loss, aux

    grad_fn = jax.grad(loss_fn, has_aux=True)
    keys = BATCH_KEYS + (PPO_KEYS if ppo else ())

    def denominators(batch):
        mask = batch["mask"]
        if "pg_denom" in batch:
            denom_pg = jnp.asarray(batch["pg_denom"], jnp.float32)
        else:
            _, denom_pg = loss_lib.aggregate(jnp.zeros(mask.shape, jnp.float32), mask, aggregation, max_len)
        denom_pg = jnp.maximum(denom_pg, 1.0)
        denom_v = jnp.maximum(jnp.sum(mask).astype(jnp.float32), 1.0)
        return denom_pg, denom_v

    def apply(params, opt_state, grads, aux, denom_pg, denom_v):
        grad_norm = optax.tree.norm(grads)
        updates, new_opt_state = tx.update(grads, opt_state, params)
        new_params = optax.apply_updates(params, updates)
        pm = loss_lib.finalize_metrics(aux["pg"])
        metrics = {f"policy/{k}": v for k, v in pm.items()}
        metrics["loss/policy"] = aux["pg_loss_sum"] / denom_pg
        metrics["optim/grad_norm"] = grad_norm
        if ppo:
            metrics["loss/value"] = aux["vf_loss_sum"] / denom_v
            metrics["value/clipped_frac"] = aux["vf"]["vf_clipped"] / denom_v
        return new_params, new_opt_state, metrics

    def update(params, opt_state, batch):
        B = batch["tokens"].shape[0]
        if B % mb:
            raise ValueError(f"batch of {B} rows is not a multiple of micro_batch_size={mb}")
        denom_pg, denom_v = denominators(batch)
        rows = rows_per_micro_batch(mb, batch["tokens"].shape[1], micro_batch_tokens)
        stacked = {k: batch[k].reshape((B // rows, rows) + batch[k].shape[1:]) for k in keys}
        zero_g = jax.tree_util.tree_map(jnp.zeros_like, params)

        def body(carry, m):
            g_acc, aux_acc = carry
            g, aux = grad_fn(params, m, denom_pg, denom_v)
            g_acc = jax.tree_util.tree_map(jnp.add, g_acc, g)
            aux_acc = aux if aux_acc is None else _combine(aux_acc, aux)
            return (g_acc, aux_acc), None

        first = {k: v[0] for k, v in stacked.items()}
        g0, aux0 = grad_fn(params, first, denom_pg, denom_v)
        rest = {k: v[1:] for k, v in stacked.items()}
        (grads, aux), _ = jax.lax.scan(body, (jax.tree_util.tree_map(jnp.add, zero_g, g0), aux0), rest)
        new_params, new_opt_state, metrics = apply(params, opt_state, grads, aux, denom_pg, denom_v)
        return new_params, new_opt_state, {**metrics, "update/micro_batch_rows": rows}

    if accumulate == "scan":
        jitted = jax.jit(update, donate_argnums=(0, 1) if donate else ())
        if batch_put is None:
            return jitted
        put = batch_put
        return lambda params, opt_state, batch: jitted(params, opt_state, put(batch))

    # ---- accumulate == "loop": programs of one micro-batch shape, called per micro-batch ----
    def acc_step(params, g_acc, aux_acc, m, denom_pg, denom_v):
        g, aux = grad_fn(params, m, denom_pg, denom_v)
        return jax.tree_util.tree_map(jnp.add, g_acc, g), _combine(aux_acc, aux)

    # only the gradient accumulator is donated: the first call's metric accumulators are the cached
    # identities below (donating them would delete the cache on the GPU, where donation is real)
    acc_jit = jax.jit(acc_step, donate_argnums=(1,) if donate else ())
    denom_jit = jax.jit(denominators)
    apply_jit = jax.jit(apply, donate_argnums=(0, 1) if donate else ())
    zeros_jit = jax.jit(lambda p: jax.tree_util.tree_map(jnp.zeros_like, p))
    aux_identity: dict[Any, Any] = {}

    def loop_update(params, opt_state, batch):
        B = batch["tokens"].shape[0]
        if B % mb:
            raise ValueError(f"batch of {B} rows is not a multiple of micro_batch_size={mb}")
        if "pg_denom" in batch:  # build_batch's batches: host arithmetic, nothing to compile
            denom_pg = np.float32(max(float(np.asarray(batch["pg_denom"])), 1.0))
            denom_v = np.float32(max(float(np.asarray(batch["mask"]).sum()), 1.0))
        else:  # the denominators from the whole batch's mask: a small program per (B, L)
            denom_pg, denom_v = denom_jit({"mask": batch["mask"]})
        rows = rows_per_micro_batch(mb, batch["tokens"].shape[1], micro_batch_tokens)
        micro = [{k: batch[k][i:i + rows] for k in keys} for i in range(0, B, rows)]
        if batch_put is not None:
            micro = [batch_put(m) for m in micro]
        sig = tuple((k, micro[0][k].shape, str(micro[0][k].dtype)) for k in keys)
        if sig not in aux_identity:  # metric accumulators' identities (0, -inf for _max, +inf for _min)
            shapes = jax.eval_shape(grad_fn, params, micro[0], denom_pg, denom_v)[1]
            aux_identity[sig] = _aux_identity(shapes)
        g_acc = zeros_jit(params)
        aux_acc = aux_identity[sig]
        for m in micro:
            g_acc, aux_acc = acc_jit(params, g_acc, aux_acc, m, denom_pg, denom_v)
        new_params, new_opt_state, metrics = apply_jit(params, opt_state, g_acc, aux_acc, denom_pg, denom_v)
        return new_params, new_opt_state, {**metrics, "update/micro_batch_rows": rows}

    # exposed for compile counting in tests (setattr: mypy does not model function attributes)
    setattr(loop_update, "acc_jit", acc_jit)  # noqa: B010
    setattr(loop_update, "grad_fn", grad_fn)  # noqa: B010  (benchmarks/update_memory.py lowers acc_jit)
    return loop_update


def _aux_identity(shapes: Any) -> Any:
    def leaf(path, s):
        name = str(getattr(path[-1], "key", ""))
        fill = -jnp.inf if name.endswith("_max") else jnp.inf if name.endswith("_min") else 0.0
        return jnp.full(s.shape, fill, s.dtype)
    return jax.tree_util.tree_map_with_path(leaf, shapes)


def _combine(a: dict, b: dict) -> dict:
    out = {}
    for k in a:
        if isinstance(a[k], dict):
            out[k] = loss_lib.combine_metrics(a[k], b[k])
        else:
            out[k] = a[k] + b[k]
    return out
