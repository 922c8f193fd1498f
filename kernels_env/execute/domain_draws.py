"""How a buffer's declared input domain (tasks/domains.py) maps to a trial's draws: the one place.

With EnvConfig.input_domains on, correctness trials cycle through three modes (timing runs, trials
from TIMING_TRIAL_BASE on, always draw `typical`: a speedup is measured on the task's typical work,
and the edges and structure are the correctness trials' to cover; the edge and structured draws also
cost a timed run several extra kernels, sorts included, while the timing stage holds the GPU):
    typical     the buffer's legacy distribution of the trial (execute/inputs.py), clipped to a real
                domain's max_abs where a task declares one below the legacy clip
    edges       the typical draw with about one element in EDGE_ONE_IN replaced by an edge of the
                domain: both ends (+-max_abs, the largest values the reference computes finitely,
                jittered down to max_abs / 2 so row maxima still vary),
                values near zero, near the interval bounds, the first and last index or class;
                label buffers instead put 7 in 8 elements on one class (a skewed class ratio)
    structured  not i.i.d.: buffers of one shape and domain kind share a base draw (correlated
                inputs, e.g. a ~= b), plus small per-buffer noise; rows 2k and 2k+1 are duplicates,
                every third such pair is scaled toward zero (real/positive domains: norms below 1,
                where clamps and saturating ops stop saturating), row 0 is constant (ties) at a value
                of EXACT_BITS significant bits (its mean is exact in any summation order, so a norm's
                output there is exactly its bias), the last row is sorted (monotone); float32 buffers
                of a real domain at its default reach also get shifted blocks, values of large mean
                and small spread (SHIFT +- SHIFT * SPREAD: a one-pass variance E[x^2] - E[x]^2
                cancels to noise there): rows 4 and 5 of a matrix, and of a 3-D or higher buffer the
                whole first slice x[0] and x[:, 0] (a sample, a channel, a plane and a group of every
                normalisation layout); 1-D buffers are sorted with their first quarter tied, and a
                real one gets SPIKES large entries, one at a random place in each of SPIKES equal
                stretches, over a background scaled toward zero: a whole-tensor reduction that skips
                elements (every other chunk) misses some of them
Everything is counter_rng on `xp` plus elementwise/sort/take, so draws stay a pure function of
(seed, task, trial, buffer) and agree under NumPy and CuPy. tasks/domains.py DOMAIN_VERSION goes into
every cache key that holds expected outputs or results; bump it when the draws here change.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kernels_env.core.config import TIMING_TRIAL_BASE
from kernels_env.execute import counter_rng
from kernels_env.tasks.domains import DOMAIN_VERSION, Domain
from kernels_env.tasks.spec import Buffer

TRIAL_MODES = ("typical", "edges", "structured")
EDGE_ONE_IN = 32  # sparse enough that fp32 sums of edge products stay inside matmul tolerances
LABEL_SKEW_ONE_IN = 8  # labels in an edges trial: all but 1 in 8 on one class
TINY_ROW_SCALE = 1.0 / 64  # structured trial: rows scaled toward zero (outputs that saturate elsewhere)
NOISE = 0.05  # relative size of the per-buffer noise of a structured trial
NEAR_ZERO = 1e-3
EXACT_BITS = 3  # significant bits of the constant row: 2^20 copies still sum exactly in float32
SHIFT, SPREAD = 0.9, 2e-4  # shifted blocks: SHIFT * bound +- SHIFT * bound * SPREAD (90 +- 0.018)
SPIKES = 16  # 1-D structured draws: large entries, one per stretch of len / SPIKES
SPIKE_STREAM = 18
EDGE_STREAM = 16  # counter_rng streams clear of the legacy draws (student_t uses 0..3)
NOISE_STREAM = 17
__all__ = ["DOMAIN_VERSION", "TRIAL_MODES", "domain_draw", "draws_version", "edge_values", "shared_name",
           "trial_mode"]

Typical = Callable[[int], Any]  # key -> the buffer's typical draw (float32 or int64) under that key


def draws_version(input_domains: bool) -> int:
    """Which draws a config's trials use, for cache keys: DOMAIN_VERSION with input domains, 0 for
    the legacy draws."""
    return DOMAIN_VERSION if input_domains else 0


def trial_mode(trial: int) -> str:
    """The mode of `trial` (see the module docstring): correctness trials cycle through TRIAL_MODES,
    timing runs' trials (>= TIMING_TRIAL_BASE) are typical."""
    if trial < 0:
        raise ValueError(f"trial={trial}; expected a trial index >= 0")
    if trial >= TIMING_TRIAL_BASE:
        return "typical"
    return TRIAL_MODES[trial % len(TRIAL_MODES)]


def edge_values(domain: Domain, dtype: str, sizes: dict[str, int]) -> list[float]:
    """The edge values of a domain at these sizes, all inside it. The largest of a real, positive or
    nonnegative domain is drawn jittered in [max_abs / 2, max_abs] (`_edges`), so maxima over rows
    still depend on the input."""
    lo, hi = domain.limits(dtype, sizes)
    if domain.integral:
        return sorted({lo, hi, float(int((lo + hi) // 2))})
    if domain.kind == "real":
        return [0.0, NEAR_ZERO, -NEAR_ZERO, 1.0, -1.0, hi, -hi]
    if domain.kind in ("positive", "nonnegative"):
        return sorted({lo, max(lo, NEAR_ZERO), 1.0 if lo <= 1.0 <= hi else (lo + hi) / 2, hi})
    top = float(np.nextafter(np.float32(hi), np.float32(lo)))  # interval: high is excluded
    step = (hi - lo) * 1e-3
    return [lo, lo + step, (lo + hi) / 2, hi - step, top]


def _edges(xp: Any, key: int, base: Any, buffer: Buffer, sizes: dict[str, int], trial: int) -> Any:
    domain = buffer.input_domain
    edges = edge_values(domain, buffer.dtype, sizes)
    shape = tuple(base.shape)
    if domain.kind == "labels":  # a skewed class ratio, the majority class alternating with the trial
        lo, hi = domain.limits(buffer.dtype, sizes)
        major = lo if (trial // len(TRIAL_MODES)) % 2 == 0 else hi
        pick = counter_rng.integers(xp, key, shape, 0, LABEL_SKEW_ONE_IN, stream=EDGE_STREAM)
        return xp.where(pick > 0, base.dtype.type(major), base)
    pick = counter_rng.integers(xp, key, shape, 0, EDGE_ONE_IN * len(edges), stream=EDGE_STREAM)
    table = xp.asarray(np.asarray(edges, dtype=base.dtype))
    chosen = table[xp.minimum(pick, len(edges) - 1)]
    if domain.kind in ("real", "positive", "nonnegative"):
        hi = domain.bound(buffer.dtype)
        jitter = counter_rng.uniform(xp, key, shape, 0.5, 1.0, stream=NOISE_STREAM).astype(base.dtype)
        chosen = xp.where(xp.abs(chosen) >= base.dtype.type(hi), chosen * jitter, chosen)
    return xp.where(pick < len(edges), chosen, base)


def _noise(xp: Any, key: int, base: Any, domain: Domain, dtype: str, sizes: dict[str, int]) -> Any:
    """Small per-buffer noise on a shared base, kept inside the domain."""
    if domain.integral:
        return base
    u = counter_rng.uniform(xp, key, tuple(base.shape), -NOISE, NOISE, stream=NOISE_STREAM)
    lo, hi = domain.limits(dtype, sizes)
    if domain.kind == "real":
        out = base + u * xp.maximum(xp.abs(base), np.float32(1.0))
    else:
        out = base * (np.float32(1.0) + u)
    top = np.float32(np.nextafter(np.float32(hi), np.float32(lo))) if domain.kind == "interval" else np.float32(hi)
    return xp.clip(out, np.float32(lo), top).astype(base.dtype)


def _rows(xp: Any, values: Any, domain: Domain, dtype: str, sizes: dict[str, int]) -> Any:
    """Duplicated, constant, sorted and near-zero rows (last axis) or, for 1-D, sorted with a tied
    first quarter."""
    shape = tuple(values.shape)
    if len(shape) == 0 or values.size == 0:
        return values
    length = shape[-1]
    flat = values.reshape(-1, length)
    rows = flat.shape[0]
    if rows == 1:
        out = xp.sort(flat[0])
        out[: length // 4] = out[0]
        return out.reshape(shape)
    src = xp.arange(rows) - xp.arange(rows) % 2
    out = flat[src]
    if domain.kind in ("real", "positive", "nonnegative"):  # every third pair of rows near zero
        lo = np.float32(domain.limits(dtype, sizes)[0] if domain.kind == "positive" else -np.inf)
        tiny = (xp.arange(rows) // 2 % 3 == 1).reshape(-1, 1)
        out = xp.where(tiny, xp.maximum(out * np.float32(TINY_ROW_SCALE), lo), out).astype(values.dtype)
    shifting = _shifts(domain, values.dtype)
    out[0] = _exact_constant(out[0, 0], domain) if shifting else out[0, 0]
    if shifting:  # after the constant row: in 3-D and up, x[0] (holding row 0) is wholly shifted
        out = _shifted(xp, out.reshape(shape), domain, dtype).reshape(rows, length)
    out[rows - 1] = xp.sort(out[rows - 1])
    return xp.ascontiguousarray(out).reshape(shape)


def _shifts(domain: Domain, dtype: Any) -> bool:
    """Whether a structured draw gets shifted blocks, spikes and an exact constant row: float32 real
    domains at their default reach (contraction tasks bound theirs: execute/domains.contraction_domain)."""
    return domain.kind == "real" and domain.max_abs is None and np.dtype(dtype) == np.float32


def _exact_constant(value: Any, domain: Domain) -> Any:
    """`value` rounded to EXACT_BITS significant bits: every partial sum of up to 2^20 copies is exact."""
    mantissa, exponent = np.frexp(np.float32(float(value)))
    return np.float32(np.ldexp(np.round(mantissa * 2 ** EXACT_BITS) / 2 ** EXACT_BITS, exponent))


def _shifted(xp: Any, values: Any, domain: Domain, dtype: str) -> Any:
    """`values` (>= 2-D) with the shifted blocks of the module docstring: SHIFT * bound plus the values
    clipped to +-1 and scaled by SHIFT * bound * SPREAD, inside the domain."""
    shift = np.float32(SHIFT * domain.bound(dtype))
    scale = np.float32(shift * SPREAD)
    out = values.copy()
    one = np.float32(1.0)
    if values.ndim == 2:
        if values.shape[0] >= 8:
            out[4:6] = shift + xp.clip(values[4:6], -one, one) * scale
        return out
    out[0] = shift + xp.clip(values[0], -one, one) * scale
    out[:, 0] = shift + xp.clip(values[:, 0], -one, one) * scale
    return out


def _spiked(xp: Any, key: int, values: Any, domain: Domain, dtype: str) -> Any:
    """A 1-D draw scaled toward zero with SPIKES entries of magnitude in [bound / 2, bound] (random
    sign), one at a random place in each of SPIKES equal stretches (so no two collide)."""
    n = values.shape[0]
    stretch = n // SPIKES
    if stretch < 2:
        return values
    bound = domain.bound(dtype)
    place = xp.arange(SPIKES) * stretch + counter_rng.integers(xp, key, (SPIKES,), 0, stretch, stream=SPIKE_STREAM)
    half = np.float32(bound / 2)
    size = counter_rng.uniform(xp, key, (SPIKES,), -float(half), float(half), stream=SPIKE_STREAM + 1)
    out = values * np.float32(TINY_ROW_SCALE)
    out[place] = xp.where(size < 0, size - half, size + half).astype(values.dtype)
    return out


def typical_bound(buffer: Buffer) -> np.float32 | None:
    """The bound a typical draw is clipped to (+-): a real domain's declared max_abs, else None (the
    clip is a no-op, bit for bit, at the default max_abs)."""
    domain = buffer.input_domain
    if domain.kind != "real" or domain.max_abs is None:
        return None
    return np.float32(domain.bound(buffer.dtype))


def _clipped(xp: Any, buffer: Buffer, sizes: dict[str, int], typical: Typical) -> Typical:
    """`typical` clipped to `typical_bound`."""
    bound = typical_bound(buffer)
    if bound is None:
        return typical
    return lambda key: xp.clip(typical(key), -bound, bound)


def clip_in_place(xp: Any, buffer: Buffer, values: Any) -> Any:
    """A float32 typical draw clipped in place as `_clipped` clips it: the same numbers, no new array
    (the timing stage's draws into a run's own buffers)."""
    bound = typical_bound(buffer)
    if bound is None:
        return values
    if values.dtype != np.float32:
        raise ValueError(f"clip_in_place of buffer {buffer.name!r}: a {values.dtype} draw; expected float32")
    return xp.clip(values, -bound, bound, out=values)


def domain_draw(xp: Any, buffer: Buffer, sizes: dict[str, int], trial: int, key: int, shared_key: int,
                typical: Typical) -> Any:
    """The draw of `buffer` for `trial` under its domain: `key` is the buffer's own, `shared_key` the
    one buffers of the same shape and domain kind share in a structured trial."""
    mode = trial_mode(trial)
    inside = _clipped(xp, buffer, sizes, typical)
    if mode == "typical":
        return inside(key)
    if mode == "edges":
        return _edges(xp, key, inside(key), buffer, sizes, trial)
    base = _noise(xp, key, inside(shared_key), buffer.input_domain, buffer.dtype, sizes)
    rows = _rows(xp, base, buffer.input_domain, buffer.dtype, sizes)
    if rows.ndim == 1 and _shifts(buffer.input_domain, rows.dtype):
        return _spiked(xp, key, rows, buffer.input_domain, buffer.dtype)
    return rows


def shared_name(buffer: Buffer, shape: tuple[int, ...]) -> str:
    """The name a structured trial derives its shared key from (same shape and domain kind: same base)."""
    return f"\x01structured\x00{buffer.input_domain.kind}\x00{shape}"
