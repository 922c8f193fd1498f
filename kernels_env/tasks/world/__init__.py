"""The kernel world: generated task families shaped like KernelBench levels 1-2 (matmuls,
convolutions, pooling, scans, losses, NCHW norms, attention, and a main op with element-wise or
reduction epilogues), each task fully determined by its name, with a float64 reference, declared
input domains, a tolerance from one rule (base.tolerance) and a canonical CUDA solution.

    world_task_names(count, seed=0, split="train")   -> prefix-stable names ("validation", "held_out", "all")
    split_of(name)                                     -> "train" | "validation" | "held_out"
    get_world_task(name)                               -> Task

Names start with `gen_w_`; `kernels_env.tasks.get_task` resolves them (through the generated
package), so `python -m kernels_env show/score` take them. docs/world.md describes the families.
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from kernels_env.tasks.spec import Task
from kernels_env.tasks.world.base import PREFIX, WorldSpec
from kernels_env.tasks.world.grammar import FAMILIES, MODULES, parse_name
from kernels_env.tasks.world.split import split_of, split_of_spec, world_task_names


@lru_cache(maxsize=4096)
def get_world_task(name: str) -> Task:
    """The world task called `name`; ValueError when `name` is not in the world."""
    spec = parse_name(name)
    task = MODULES[spec.family].build(spec)
    return replace(task, tags=task.tags + ("generated", split_of_spec(spec)))


__all__ = ["FAMILIES", "PREFIX", "WorldSpec", "get_world_task", "parse_name", "split_of", "world_task_names"]
