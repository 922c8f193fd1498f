"""Stop a training step whose evaluations mostly failed in the environment (env_error: a lost
evaluation host, a broken worker), rather than update on the few rows left unmasked: such a batch
measures the infrastructure, not the policy. And the pool's host counters as per-step metrics."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kernels_env import Status


class EnvironmentFailure(RuntimeError):
    """Too large a share of a step's evaluations were env_error; the message says what to check."""


def first_env_error(out: Any) -> str:
    """The message and details of the first env_error among rollout output `out`'s turns ('' if none)."""
    first = next((t.result for r in out.rows for t in r.turns
                  if t.result is not None and t.result.status is Status.ENV_ERROR), None)
    if first is None:
        return ""
    details = (getattr(first, "details", "") or "").strip()
    return first.message + (f" | details: {details[-600:]}" if details else "")


def check_env_errors(out: Any, max_fraction: float, step: int,
                     pool_stats: Callable[[], dict[str, int]] | None = None,
                     log: Callable[[str], None] | None = None) -> None:
    """Raise EnvironmentFailure when env/env_errors / env/evaluations of rollout output `out` exceeds
    `max_fraction` (env.max_env_error_fraction); the message carries the first env_error's text and,
    when given, the pool's counters (host deaths, resends, hosts up). Below the limit, `log` (when
    given) gets one line naming the count and the first error, so a run's log says what went wrong
    even when training went on."""
    n, bad = int(out.stats["env/evaluations"]), int(out.stats["env/env_errors"])
    if n == 0 or bad == 0:
        return
    if bad / n <= max_fraction:
        if log is not None:
            log(f"step {step}: {bad} of {n} evaluations were env_error (within "
                f"env.max_env_error_fraction={max_fraction:g}; masked out). First: {first_env_error(out)[:900]!r}")
        return
    first = first_env_error(out)
    msg = (f"step {step}: {bad} of {n} evaluations ({bad / n:.0%}) were env_error (the environment failed, "
           f"not the policy), above env.max_env_error_fraction={max_fraction:g}; not training on that batch. "
           f"First error: {first[:300]!r}.")
    if pool_stats is not None:
        try:
            s = pool_stats()
            keys = ("hosts_up", "hosts_down", "hosts_dead", "host_deaths", "resends", "env_errors", "crashes")
            msg += " Pool: " + ", ".join(f"{k}={s[k]}" for k in keys if k in s) + "."
        except Exception:
            pass
    msg += (" Check the evaluation workers or hosts (docs/DISTRIBUTED_EVAL.md), then continue with --resume "
            "from the last checkpoint.")
    raise EnvironmentFailure(msg)


POOL_COUNTERS = ("host_deaths", "host_hangs", "resends")  # counted by EvalPool(mode="ray") only


def pool_counter_deltas(pool: Any, seen: dict[str, int]) -> dict[str, float]:
    """env/host_deaths, env/host_hangs, env/resends: how much each pool counter grew since the last call
    (`seen` holds the counts then, and is updated), so a step's record shows the host trouble since the
    previous record. {} for a pool without them (process, inline) or an evaluator without stats()."""
    stats = getattr(pool, "stats", None)
    if stats is None:
        return {}
    now = stats()
    out: dict[str, float] = {}
    for name in POOL_COUNTERS:
        if name in now:
            out[f"env/{name}"] = float(now[name] - seen.get(name, 0))
            seen[name] = now[name]
    return out
