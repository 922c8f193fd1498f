"""Procedurally generated tasks: a grammar of op compositions on [M, N] tensors (element-wise chains,
row reductions, row normalisations and fused chains, float32 and float16), each with a description,
a float64 reference and a canonical CUDA solution, split into train / held-out BY COMPOSITION.

    generated_task_names(count, seed=0, split="train", version=CURRENT_FAMILY_VERSION)
                                                           -> prefix-stable list of names
    validation_task_names(count, held_out, seed=0, ...)    -> tasks for decisions, never reported
    split_of(name)                                         -> "train" | "held_out"
    get_generated_task(name)                               -> Task (built lazily, cached)

`kernels_env.tasks.get_task` resolves `gen_` names through `get_generated_task`, so any process can
look a generated task up by name; `list_tasks()` still lists only the hand-written suite.
Modules: ops (catalogue), grammar (compositions, names), degenerate (chains left out: their output
hardly depends on their inputs), emit (description, reference, solution), split (held-out
combinations, orderings). kernels_env/execute/audit_generated.py plays validate_task's cheats
against the whole grammar.
"""
from __future__ import annotations

from functools import lru_cache

from kernels_env.tasks.generated.grammar import CURRENT_FAMILY_VERSION, FAMILY_VERSIONS, Spec, parse_name
from kernels_env.tasks.generated.split import generated_task_names, held_out_pairs, split_of, validation_task_names
from kernels_env.tasks.spec import Task

PREFIX = "gen_"


@lru_cache(maxsize=4096)
def get_generated_task(name: str) -> Task:
    """The generated task called `name` (of any family version: a run of an earlier version looks its
    tasks up by name too); ValueError when `name` is in no version of the grammar. Names of the
    kernel world (`gen_w_...`, kernels_env.tasks.world) resolve there."""
    if name.startswith("gen_w_"):
        from kernels_env.tasks.world import get_world_task
        return get_world_task(name)
    from kernels_env.tasks.generated.emit import build_task
    return build_task(parse_name(name, version=None))


__all__ = ["CURRENT_FAMILY_VERSION", "FAMILY_VERSIONS", "PREFIX", "Spec", "generated_task_names",
           "get_generated_task", "held_out_pairs", "parse_name", "split_of", "validation_task_names"]
