"""Independent NumPy reference for leap_jax.rl, written from DESIGN 4.4-4.7 with plain loops.

It never calls the JAX code: every quantity is computed row by row / group by group in float64 so
the vectorised JAX versions can be checked against the formulas themselves.
"""
from __future__ import annotations

import math

import numpy as np

EASY, DEBUG, HOPELESS, PAD = 0, 1, 2, -1


def _valid(n: int, g: int, row_mask=None, group_mask=None) -> np.ndarray:
    v = np.ones((n, g), bool)
    if row_mask is not None:
        v &= np.asarray(row_mask, bool)
    if group_mask is not None:
        v &= np.asarray(group_mask, bool)[:, None]
    return v


# ---------------------------------------------------------------------------------------------- DCP

def dcp_decision(correct_t1, t_min, t_max, row_mask=None, group_mask=None) -> np.ndarray:
    """Debug iff t_min <= n_fail <= t_max; ints are counts, floats fractions of the valid rows."""
    correct_t1 = np.asarray(correct_t1, bool)
    n, g = correct_t1.shape
    valid = _valid(n, g, row_mask, group_mask)
    out = np.empty(n, np.int64)
    for k in range(n):
        n_valid = int(valid[k].sum())
        n_fail = sum(1 for i in range(g) if valid[k, i] and not correct_t1[k, i])
        if n_valid == 0:
            out[k] = PAD
            continue
        lo_ok = n_fail >= t_min * n_valid - 1e-9 if isinstance(t_min, float) else n_fail >= t_min
        if t_max is None:
            hi_ok = n_fail <= n_valid - 1
        elif isinstance(t_max, float):
            hi_ok = n_fail <= t_max * n_valid + 1e-9
        else:
            hi_ok = n_fail <= t_max
        out[k] = EASY if not lo_ok else (DEBUG if hi_ok else HOPELESS)
    return out


def simulate_rollout(decision, correct, row_mask=None) -> np.ndarray:
    """The attempted mask a DCP rollout produces, by stepping through turns."""
    correct = np.asarray(correct, bool)
    n, g, t_total = correct.shape
    valid = _valid(n, g, row_mask)
    att = np.zeros((n, g, t_total), bool)
    for k in range(n):
        if decision[k] == PAD:
            continue
        for i in range(g):
            if not valid[k, i]:
                continue
            for t in range(t_total):
                att[k, i, t] = True
                if correct[k, i, t] or decision[k] != DEBUG:
                    break
    return att


# ------------------------------------------------------------------------------------------ rewards

def outcome_keys(correct, attempted) -> np.ndarray:
    n, g, t_total = correct.shape
    keys = np.full((n, g), t_total + 1, np.int64)
    for k in range(n):
        for i in range(g):
            for t in range(t_total):
                if attempted[k, i, t] and correct[k, i, t]:
                    keys[k, i] = t + 1
                    break
    return keys


def _beats(ki, kj, fi, fj, num_turns, use_fine) -> bool:
    """Lexicographic: lower key wins; on equal keys the larger finer key wins (when enabled)."""
    if ki != kj:
        return ki < kj
    return bool(use_fine and fi > fj)


def rank_reward(keys, row_mask=None, group_mask=None, num_turns=None, speedup=None,
                status_rank=None) -> np.ndarray:
    keys = np.asarray(keys)
    n, g = keys.shape
    valid = _valid(n, g, row_mask, group_mask)
    use_fine = speedup is not None or status_rank is not None
    fine = np.zeros((n, g))
    if use_fine:
        for k in range(n):
            for i in range(g):
                if keys[k, i] <= num_turns:
                    s = 0.0 if speedup is None else float(speedup[k, i])
                    fine[k, i] = s if math.isfinite(s) else 0.0
                else:
                    fine[k, i] = 0.0 if status_rank is None else float(status_rank[k, i])
    r = np.zeros((n, g))
    for k in range(n):
        idx = [i for i in range(g) if valid[k, i]]
        if len(idx) < 2:
            continue
        for i in idx:
            wins = losses = 0
            for j in idx:
                if j == i:
                    continue
                if _beats(keys[k, i], keys[k, j], fine[k, i], fine[k, j], num_turns, use_fine):
                    wins += 1
                elif _beats(keys[k, j], keys[k, i], fine[k, j], fine[k, i], num_turns, use_fine):
                    losses += 1
            r[k, i] = (wins - losses) / (len(idx) - 1)
    return r


def final_success_reward(correct, attempted, row_mask=None) -> np.ndarray:
    n, g, _ = correct.shape
    valid = _valid(n, g, row_mask)
    return np.array([[float(valid[k, i] and np.any(correct[k, i] & attempted[k, i]))
                      for i in range(g)] for k in range(n)])


def kevin_scores(correct, speedup, attempted, bonus=0.3) -> np.ndarray:
    out = np.zeros(correct.shape)
    for idx in np.ndindex(correct.shape):
        if attempted[idx] and correct[idx]:
            s = float(speedup[idx])
            out[idx] = bonus + (s if math.isfinite(s) else 0.0)
    return out


def discounted_returns(scores, attempted, gamma) -> np.ndarray:
    """R_t = sum_{k >= t, attempted} gamma^(k - t) S_k for attempted t, else 0."""
    out = np.zeros(scores.shape)
    t_total = scores.shape[-1]
    for idx in np.ndindex(scores.shape[:-1]):
        for t in range(t_total):
            if attempted[idx + (t,)]:
                out[idx + (t,)] = sum(gamma ** (k - t) * scores[idx + (k,)]
                                      for k in range(t, t_total) if attempted[idx + (k,)])
    return out


# --------------------------------------------------------------------------------------- advantages

def _groups(values, mask):
    """Yield (group index, list of entry indices) over axis 1 and trailing axes kept separate."""
    n, g = values.shape[:2]
    for k in range(n):
        for rest in np.ndindex(values.shape[2:]):
            yield [(k, i) + rest for i in range(g) if mask[(k, i) + rest]]


def group_zscore(values, mask, eps=1e-6, ddof=0) -> np.ndarray:
    out = np.zeros(values.shape)
    for entries in _groups(values, mask):
        x = np.array([values[e] for e in entries], float)
        if len(x) <= ddof or len(x) == 0 or np.all(x == x[0]):
            continue
        mean = sum(x) / len(x)
        std = math.sqrt(sum((xi - mean) ** 2 for xi in x) / (len(x) - ddof))
        for e, xi in zip(entries, x, strict=False):
            out[e] = (xi - mean) / (std + eps)
    return out


def group_zscore_pooled(values, mask, eps=1e-6) -> np.ndarray:
    """z-score over all valid entries of each group along axes 1.. (Kevin: all turn-samples)."""
    out = np.zeros(values.shape)
    for k in range(values.shape[0]):
        entries = [idx for idx in np.ndindex(values.shape[1:]) if mask[(k,) + idx]]
        x = np.array([values[(k,) + e] for e in entries], float)
        if len(x) == 0 or np.all(x == x[0]):
            continue
        mean = x.mean()
        std = math.sqrt(((x - mean) ** 2).mean())
        for e, xi in zip(entries, x, strict=False):
            out[(k,) + e] = (xi - mean) / (std + eps)
    return out


def group_mean_baseline(values, mask) -> np.ndarray:
    out = np.zeros(values.shape)
    for entries in _groups(values, mask):
        if not entries:
            continue
        mean = sum(values[e] for e in entries) / len(entries)
        for e in entries:
            out[e] = values[e] - mean
    return out


def leave_one_out(values, mask) -> np.ndarray:
    out = np.zeros(values.shape)
    for entries in _groups(values, mask):
        if len(entries) == 1:
            out[entries[0]] = values[entries[0]]
            continue
        for e in entries:
            others = [values[o] for o in entries if o != e]
            out[e] = values[e] - sum(others) / len(others)
    return out


def per_turn_credit(keys, attempted, row_mask=None) -> np.ndarray:
    n, g, t_total = attempted.shape
    valid = _valid(n, g, row_mask)
    out = np.zeros((n, g, t_total))
    for t in range(t_total):
        out[:, :, t] = rank_reward(keys, valid & attempted[:, :, t])
    return out


def gae(rewards, values, mask, gamma, lam, bootstrap=None):
    """Plain loop over the valid steps of each sequence, backwards."""
    b, length = rewards.shape
    adv = np.zeros((b, length))
    ret = np.zeros((b, length))
    for row in range(b):
        steps = [t for t in range(length) if mask[row, t]]
        next_v = 0.0 if bootstrap is None else float(bootstrap[row])
        next_a = 0.0
        for t in reversed(steps):
            delta = rewards[row, t] + gamma * next_v - values[row, t]
            a = delta + gamma * lam * next_a
            adv[row, t] = a
            ret[row, t] = a + values[row, t]
            next_v, next_a = values[row, t], a
    return adv, ret


# ------------------------------------------------------------------------------------------- losses

def ppo_token_loss(logp, old, adv, eps_low, eps_high, dual_clip=None, ref=None, beta=0.0):
    """Per-token loss from the formula in DESIGN 4.7, one scalar at a time."""
    out = np.zeros(logp.shape)
    for idx in np.ndindex(logp.shape):
        ratio = math.exp(logp[idx] - old[idx])
        a = adv[idx]
        clipped = min(max(ratio, 1 - eps_low), 1 + eps_high)
        pg = max(-a * ratio, -a * clipped)
        if dual_clip is not None and a < 0:
            pg = min(pg, -dual_clip * a)
        if ref is not None:
            d = ref[idx] - logp[idx]
            pg += beta * (math.exp(d) - d - 1)
        out[idx] = pg
    return out


def trl_aggregate(per_token, mask, loss_type, max_completion_length=None) -> float:
    """TRL GRPOTrainer-style aggregation (every row a real completion): 'bnpo', 'grpo', 'dr_grpo'."""
    m = mask.astype(float)
    if loss_type == "bnpo":
        return float((per_token * m).sum() / max(m.sum(), 1.0))
    if loss_type == "grpo":
        return float(((per_token * m).sum(-1) / np.maximum(m.sum(-1), 1.0)).mean())
    if loss_type == "dr_grpo":
        return float((per_token * m).sum() / (per_token.shape[0] * max_completion_length))
    raise ValueError(loss_type)


def aggregate(per_token, mask, mode, max_len=None) -> float:
    """The batch loss (sum / denom) of DESIGN 4.7's modes, rows without tokens skipped."""
    rows = [r for r in range(per_token.shape[0]) if mask[r].any()]
    if mode == "token-mean":
        toks = [per_token[r, t] for r in rows for t in range(per_token.shape[1]) if mask[r, t]]
        return sum(toks) / len(toks) if toks else 0.0
    per_seq = []
    for r in rows:
        toks = [per_token[r, t] for t in range(per_token.shape[1]) if mask[r, t]]
        per_seq.append(sum(toks) / len(toks) if mode == "seq-mean-token-mean" else sum(toks) / max_len)
    return sum(per_seq) / len(per_seq) if per_seq else 0.0


def value_token_loss(values, old_values, returns, clip_eps):
    out = np.zeros(values.shape)
    for idx in np.ndindex(values.shape):
        e1 = (values[idx] - returns[idx]) ** 2
        if clip_eps is None:
            out[idx] = 0.5 * e1
            continue
        vc = old_values[idx] + min(max(values[idx] - old_values[idx], -clip_eps), clip_eps)
        out[idx] = 0.5 * max(e1, (vc - returns[idx]) ** 2)
    return out
