"""Fresh, seeded input arrays for one correctness trial (DESIGN 3.3 step 3).

Inputs are generated directly on the device's array module (`xp`: cupy on a GPU, numpy on the cpu
backend): eval sizes are tens of millions of elements and host generation plus a copy would dominate
the evaluation. The numbers come from `counter_rng` (one elementwise kernel per buffer on the GPU, no
generator state), so they are a pure function of (seed, task name, trial, buffer name) and the same
under NumPy and CuPy. Each buffer's distribution rotates with the trial over `Buffer.distributions`.

Distributions (fp16 buffers are drawn in fp32, then cast):
    uniform       uniform in [low, high)
    normal        normal(0, 1)
    heavy_tailed  Student-t with 3 degrees of freedom, clipped to +-HEAVY_TAIL_CLIP[dtype]
    positive      uniform in [0.1, 2)
    randint       integers in [low, high)
    indices       integers in [0, high), `high` usually a size name (e.g. "N")
Integer buffers given a real-valued distribution get the samples rounded to the nearest integer.

With `domains` on (EnvConfig.input_domains, the default) trials also cover each buffer's declared
domain, edges and a structured trial (execute/domain_draws.py); off, the draws are the legacy ones
above, bit for bit.
"""
from __future__ import annotations

import hashlib
import secrets
from typing import Any

from kernels_env.execute import counter_rng, domain_draws
from kernels_env.tasks.domains import DEFAULT_MAX_ABS
from kernels_env.tasks.spec import Buffer, Task

STUDENT_T_DOF = 3
HEAVY_TAIL_CLIP = DEFAULT_MAX_ABS  # one table: a real domain's default reach is this clip
POSITIVE_RANGE = (0.1, 2.0)
INT_DTYPES = ("int32", "int64")
INTEGER_DISTS = ("randint", "indices")  # drawn as int64; every other distribution as float32


def trial_distribution(buffer: Buffer, trial: int) -> str:
    """The distribution `buffer` is drawn from in `trial` (rotation over `buffer.distributions`)."""
    if not buffer.distributions:
        raise ValueError(f"buffer {buffer.name!r}: empty distributions; expected at least one of "
                         "uniform, normal, heavy_tailed, positive, randint, indices")
    if trial < 0:
        raise ValueError(f"trial={trial}; expected a trial index >= 0")
    return buffer.distributions[trial % len(buffer.distributions)]


def trial_distributions(task: Task, trial: int) -> dict[str, str]:
    """Distribution per input buffer name for `trial`."""
    return {b.name: trial_distribution(b, trial) for b in task.inputs}


def describe_distributions(task: Task, trial: int, domains: bool = False) -> str:
    """A short label of a trial's distributions: "normal" when all agree, else "x:normal,idx:indices";
    with `domains`, a non-typical trial adds its mode, e.g. "normal+edges"."""
    dists = trial_distributions(task, trial)
    unique = sorted(set(dists.values()))
    label = unique[0] if len(unique) == 1 else ",".join(f"{k}:{v}" for k, v in dists.items())
    mode = domain_draws.trial_mode(trial) if domains else "typical"
    return label if mode == "typical" else f"{label}+{mode}"


def evaluation_seed(seed: int | None) -> int:
    """The seed of one evaluation's draws: `seed` (EnvConfig.seed) when given, else 63 bits of fresh
    entropy, drawn anew for every evaluation, so no submission can predict or learn its inputs."""
    return int(seed) if seed is not None else secrets.randbits(63)


def buffer_seed(seed: int, task_name: str, trial: int, buffer_name: str) -> int:
    """A stable 63-bit seed for one buffer of one trial (independent of Python's hash randomisation)."""
    text = f"{int(seed)}\x00{task_name}\x00{int(trial)}\x00{buffer_name}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") >> 1


def _bound(value: float | str, sizes: dict[str, int], buffer: Buffer, which: str) -> float:
    if isinstance(value, str):
        if value not in sizes:
            raise KeyError(f"buffer {buffer.name!r}: {which}={value!r} names no size; sizes are "
                           f"{sorted(sizes)}")
        return float(sizes[value])
    return float(value)


def _draw(xp: Any, key: int, dist: str, shape: tuple[int, ...], buffer: Buffer,
          sizes: dict[str, int], out: Any = None) -> Any:
    """Samples of `dist` as float32 (real distributions) or int64 (randint/indices), in a new array
    or in `out` (of that dtype: see `_draws_into`)."""
    if dist == "uniform":
        low, high = _bound(buffer.low, sizes, buffer, "low"), _bound(buffer.high, sizes, buffer, "high")
        if not high > low:
            raise ValueError(f"buffer {buffer.name!r}: uniform needs low < high, got [{low}, {high})")
        return counter_rng.uniform(xp, key, shape, low, high, out=out)
    if dist == "normal":
        return counter_rng.normal(xp, key, shape, out=out)
    if dist == "heavy_tailed":
        clip = float(HEAVY_TAIL_CLIP[buffer.dtype])
        t = counter_rng.student_t(xp, key, shape, STUDENT_T_DOF, out=out)
        return xp.clip(t, -clip, clip, out=t)
    if dist == "positive":
        return counter_rng.uniform(xp, key, shape, *POSITIVE_RANGE, out=out)
    if dist in INTEGER_DISTS:
        low = 0.0 if dist == "indices" else _bound(buffer.low, sizes, buffer, "low")
        high = _bound(buffer.high, sizes, buffer, "high")
        lo_i, hi_i = int(low), int(high)
        if hi_i <= lo_i:
            raise ValueError(f"buffer {buffer.name!r}: {dist} needs low < high, got [{lo_i}, {hi_i})")
        return counter_rng.integers(xp, key, shape, lo_i, hi_i, out=out)
    raise ValueError(f"buffer {buffer.name!r}: unknown distribution {dist!r}")


def _draws_into(buffer: Buffer, dist: str, trial: int, out: Any, domains: bool) -> bool:
    """Whether `trial`'s draw of `dist` can be written straight into `out`, the buffer's own array:
    a typical draw (no edges or structure to mix in) into a C-contiguous array of the draw's dtype
    (float32 for real distributions, int64 for randint/indices, so no rounding or cast follows),
    and, under a domain's clip, a float32 one (clipped in place)."""
    draw_dtype = "int64" if dist in INTEGER_DISTS else "float32"
    if buffer.dtype != draw_dtype or str(out.dtype) != draw_dtype or not out.flags.c_contiguous:
        return False
    if not domains:
        return True
    return domain_draws.trial_mode(trial) == "typical" and (
        draw_dtype == "float32" or domain_draws.typical_bound(buffer) is None)


def make_input(buffer: Buffer, sizes: dict[str, int], trial: int, seed: int, task_name: str,
               xp: Any, domains: bool = True, out: Any = None) -> Any:
    """One input buffer for one trial, on `xp`, with the buffer's dtype and resolved shape: a new
    array, or written into `out` (an `xp` array of that dtype and shape) and returned. A typical
    draw (always a timing run's) goes straight into `out` where its dtype is the draw's: one pass
    over the buffer, the timing stage's refill of a timed run's inputs."""
    shape = buffer.resolve_shape(sizes)
    dist = trial_distribution(buffer, trial)
    key = buffer_seed(seed, task_name, trial, buffer.name)
    if out is not None:
        if tuple(out.shape) != tuple(shape) or str(out.dtype) != buffer.dtype:
            raise ValueError(f"out for buffer {buffer.name!r}: a {out.dtype} array of shape {tuple(out.shape)}; "
                             f"expected {buffer.dtype} of shape {tuple(shape)}")
        if _draws_into(buffer, dist, trial, out, domains):
            values = _draw(xp, key, dist, shape, buffer, sizes, out)
            return domain_draws.clip_in_place(xp, buffer, values) if domains else values
        out[...] = make_input(buffer, sizes, trial, seed, task_name, xp, domains)
        return out
    if domains:
        shared = buffer_seed(seed, task_name, trial, domain_draws.shared_name(buffer, shape))
        values = domain_draws.domain_draw(xp, buffer, sizes, trial, key, shared,
                                          lambda k: _draw(xp, k, dist, shape, buffer, sizes))
    else:
        values = _draw(xp, key, dist, shape, buffer, sizes)
    if buffer.dtype in INT_DTYPES and values.dtype.kind == "f":
        values = xp.rint(values)
    # every draw above is a new array of its own, so no copy when the dtype already matches: one
    # pass over the buffer less per trial and per timed run (the timing stage regenerates inputs
    # for every run while it holds the GPU)
    return xp.ascontiguousarray(values.astype(buffer.dtype, copy=False))


def make_inputs(task: Task, sizes: dict[str, int], trial: int, seed: int, xp: Any,
                domains: bool = True, out: dict[str, Any] | None = None) -> dict[str, Any]:
    """Fresh input arrays (new allocations) for `trial`, by buffer name, generated on `xp`; with
    `out` (arrays by buffer name), the same values written into those arrays.

    Deterministic for (seed, task.name, trial, domains) and a given array module; consecutive trials
    use the next distribution of each buffer's rotation (and, with `domains`, the next trial mode).
    """
    return {b.name: make_input(b, sizes, trial, seed, task.name, xp, domains, None if out is None else out[b.name])
            for b in task.inputs}
