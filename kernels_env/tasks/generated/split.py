"""The train / held-out split of generated tasks, BY COMPOSITION, and the seeded name orderings.

Held-out combinations are ordered pairs of ADJACENT ops (a, b) in a task's op sequence (prefix ops,
row op, post op; broadcast mode, dtype and shape ignored), e.g. ("tanh", "add") in
gen_ew_tanh_add_row_f32_s1 or ("relu", "softmax"). A pair is held out iff
sha256("leap-gen-pairs-v1:a>b") / 2^256 < HELD_OUT_PAIR_FRACTION (0.2): a fixed set, independent of
the ordering seed (`held_out_pairs()` lists it). A task is held out iff it contains at least one
held-out pair; so no training task contains a held-out combination, every held-out task contains
one, and tasks of a single op (no pairs) are all training tasks, so every individual op appears in
training. The held-out side tests generalisation to unseen compositions of known ops.

Ordering: every name of the grammar is sorted by sha256(seed, name) within its stratum (family,
number of ops); the strata are interleaved round-robin (short chains are not drowned by the many
3-op chains), and `generated_task_names(count, seed, split)` keeps the first `count` names of the
split. The order is a fixed function of the seed and the family version (grammar.FAMILY_VERSIONS),
so lists are prefix-stable. Validation tasks (`validation_task_names`) continue the held-out list past
the reported held-out tasks: held-out compositions, disjoint from both the held-out and training tasks.
"""
from __future__ import annotations

import hashlib
from functools import lru_cache, cache

from kernels_env.tasks.generated.grammar import (CURRENT_FAMILY_VERSION, FAMILY_VERSIONS, Spec, all_specs,
                                                 check_version, parse_name)

HELD_OUT_PAIR_FRACTION = 0.2
SPLITS = ("train", "held_out", "all")


def _unit(text: str) -> float:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") / 2.0 ** 64


@cache
def is_held_out_pair(a: str, b: str) -> bool:
    return _unit(f"leap-gen-pairs-v1:{a}>{b}") < HELD_OUT_PAIR_FRACTION


def op_pairs(spec: Spec) -> list[tuple[str, str]]:
    ops = spec.ops
    return list(zip(ops, ops[1:], strict=False))


@lru_cache(maxsize=len(FAMILY_VERSIONS))
def held_out_pairs(version: str = CURRENT_FAMILY_VERSION) -> tuple[tuple[str, str], ...]:
    """Every held-out (a, b) adjacent pair that occurs in some task of `version` of the grammar, sorted."""
    occurring = {p for s in all_specs(check_version(version)) for p in op_pairs(s)}
    return tuple(sorted(p for p in occurring if is_held_out_pair(*p)))


def split_of_spec(spec: Spec) -> str:
    return "held_out" if any(is_held_out_pair(a, b) for a, b in op_pairs(spec)) else "train"


def split_of(name: str) -> str:
    """"train" or "held_out" for a generated task name of any family version (ValueError for names
    outside the grammar); the split rule itself does not depend on the version."""
    return split_of_spec(parse_name(name, version=None))


@lru_cache(maxsize=4)
def _ordered(seed: int, version: str) -> tuple[tuple[str, str], ...]:
    """(name, split) of every task of `version` in the seeded, stratum-interleaved order."""
    strata: dict[tuple[str, int], list[Spec]] = {}
    for s in all_specs(version):
        strata.setdefault((s.family, len(s.ops)), []).append(s)
    queues = []
    for key in sorted(strata):
        keyed = sorted(strata[key], key=lambda s: hashlib.sha256(f"{seed}:{s.name}".encode()).digest())
        queues.append(keyed)
    out: list[tuple[str, str]] = []
    pos = [0] * len(queues)
    remaining = sum(len(q) for q in queues)
    while remaining:
        for qi, q in enumerate(queues):
            if pos[qi] < len(q):
                s = q[pos[qi]]
                pos[qi] += 1
                remaining -= 1
                out.append((s.name, split_of_spec(s)))
    return tuple(out)


def generated_task_names(count: int, seed: int = 0, split: str = "train",
                         version: str = CURRENT_FAMILY_VERSION) -> list[str]:
    """The first `count` generated task names of `split` ("train", "held_out" or "all") of family
    `version` in the seeded order: deterministic, distinct, and prefix-stable in `count`."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r}; expected one of {SPLITS}")
    if not isinstance(count, int) or count < 0:
        raise ValueError(f"count={count!r}; expected an int >= 0")
    names = [n for n, sp in _ordered(int(seed), check_version(version)) if split == "all" or sp == split]
    if count > len(names):
        raise ValueError(f"count={count} exceeds the {len(names)} generated tasks of split {split!r} "
                         f"(family version {version})")
    return names[:count]


def validation_task_names(count: int, held_out: int, seed: int = 0,
                          version: str = CURRENT_FAMILY_VERSION) -> list[str]:
    """`count` tasks of held-out compositions that are not among the first `held_out` held-out tasks
    (the held-out sequence continued past them): disjoint from the reported held-out tasks and from
    every training task, for the decisions made during and after training."""
    return generated_task_names(held_out + count, seed, "held_out", version)[held_out:]
