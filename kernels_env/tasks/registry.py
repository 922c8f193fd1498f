"""The task registry: register tasks once, look them up by name, list and split them deterministically.

Why hash-based splitting: a task's train/held-out side depends only on (seed, name), so adding new
tasks never moves existing ones across the split.
"""
from __future__ import annotations

import difflib
import hashlib
from collections.abc import Iterable

from kernels_env.tasks.spec import Task

_REGISTRY: dict[str, Task] = {}  # the hand-written suite: what list_tasks lists
_UNLISTED: dict[str, Task] = {}  # tasks get_task finds by name but list_tasks never lists (problem files)


def register(task: Task, listed: bool = True) -> Task:
    """Add `task` to the registry (returns it, so it can wrap a factory call). Duplicates are an error.
    `listed=False`: found by get_task, never listed (the suite stays the suite)."""
    if not isinstance(task, Task):
        raise TypeError(f"register expects a Task, got {type(task).__name__}")
    if task.name in _REGISTRY or task.name in _UNLISTED:
        raise ValueError(f"task {task.name!r} is registered twice; task names must be unique")
    (_REGISTRY if listed else _UNLISTED)[task.name] = task
    return task


def get_task(name: str) -> Task:
    """The task called `name`; unknown names raise KeyError with the closest known names. Generated
    names (`gen_...`, kernels_env.tasks.generated) are built on first use and cached, not registered."""
    try:
        return _REGISTRY[name] if name in _REGISTRY else _UNLISTED[name]
    except KeyError:
        if isinstance(name, str) and name.startswith("gen_"):
            from kernels_env.tasks.generated import get_generated_task
            try:
                return get_generated_task(name)
            except ValueError as e:
                raise KeyError(f"unknown task {name!r}: {e}") from None
        close = difflib.get_close_matches(str(name), list(_REGISTRY), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise KeyError(f"unknown task {name!r} ({len(_REGISTRY)} tasks registered){hint}") from None


def list_tasks(level: int | None = None, tags: Iterable[str] | str | None = None) -> list[Task]:
    """Registered tasks sorted by (level, name); `level` keeps one level, `tags` keeps tasks with ALL tags."""
    if level is not None and level not in (1, 2, 3):
        raise ValueError(f"level={level!r}; expected 1, 2, 3 or None")
    want = {tags} if isinstance(tags, str) else set(tags or ())
    out = [t for t in _REGISTRY.values()
           if (level is None or t.level == level) and want <= set(t.tags)]
    return sorted(out, key=lambda t: (t.level, t.name))


def task_names(level: int | None = None, tags: Iterable[str] | str | None = None) -> list[str]:
    """Names of `list_tasks(level, tags)`, in the same order."""
    return [t.name for t in list_tasks(level, tags)]


def _unit_hash(seed: int, name: str) -> float:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64


def split_tasks(names: Iterable[str] | None = None, held_out_fraction: float = 0.2,
                seed: int = 0) -> tuple[list[str], list[str]]:
    """Split task names into (train, held_out), each sorted, disjoint, deterministic in (names, seed).

    A name is held out iff hash(seed, name) < held_out_fraction, so membership is stable when tasks are
    added. Only if that leaves a side empty (tiny lists) is the name with the lowest / highest hash
    moved, so both sides are non-empty whenever 0 < fraction < 1 and there are >= 2 names.
    `names=None` splits every registered task.
    """
    if not 0.0 <= held_out_fraction <= 1.0:
        raise ValueError(f"held_out_fraction={held_out_fraction!r}; expected a number in [0, 1]")
    pool = sorted(set(task_names() if names is None else names))
    if not pool:
        return [], []
    h = {n: _unit_hash(seed, n) for n in pool}
    held = {n for n in pool if h[n] < held_out_fraction}
    if 0.0 < held_out_fraction < 1.0 and len(pool) >= 2:
        if not held:
            held = {min(pool, key=h.__getitem__)}
        elif len(held) == len(pool):
            held.discard(max(pool, key=h.__getitem__))
    train = [n for n in pool if n not in held]
    return train, sorted(held)


def subsample(names: Iterable[str], max_count: int | None, seed: int = 0) -> list[str]:
    """At most `max_count` of `names` (all of them when None or larger), the same ones for the same
    (names, max_count, seed): the first of a seeded permutation, returned in the input order.
    Evaluations of thousands of generated tasks measure on such a fixed sample."""
    pool = list(names)
    if max_count is None or max_count >= len(pool):
        return pool
    if max_count < 0:
        raise ValueError(f"max_count={max_count!r}; expected >= 0 or None")
    keep = set(sorted(pool, key=lambda n: _unit_hash(seed, n))[:max_count])
    return [n for n in pool if n in keep]
