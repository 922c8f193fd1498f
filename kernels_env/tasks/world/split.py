"""The train / validation / held-out split of the world, BY COMPOSITION, and the seeded name orders.

A task's composition is its token sequence (family and seed left out), followed by its dtype in
families that offer two; its combinations are the ordered ADJACENT token pairs, e.g. ("mm", "bias"),
("bias", "relu") for gen_w_fu_mm_bias_relu_f32_s0, ("2d", "dw"), ("dw", "str") for a depthwise
strided 2-D convolution, ("ta", "f16") for gen_w_mm_ta_f16_s2 (a precision regime of a variant).
A pair's side is fixed by u = sha256("leap-world-pairs-v1:a>b") / 2^64: held out when u < 0.15,
validation when u < 0.25. A task is held out when it contains a held-out pair, else validation when
it contains a validation pair, else train: no training task holds an unseen pair, and validation is
kept from training the same way, so a run can pick its checkpoint there without looking at the
held-out side. Tasks of a single token (a loss, a norm, an attention mask) have no pair: they are
all training tasks, so every op is trained on; only combinations are held out.

Ordering: every name sorted by sha256(seed, name) within its family; families interleaved round-robin
(the small families are not drowned), so `world_task_names(count, seed, split)` is prefix-stable.
"""
from __future__ import annotations

import hashlib
from functools import lru_cache

from kernels_env.tasks.world.base import WorldSpec
from kernels_env.tasks.world.grammar import FAMILIES, all_specs, combos, parse_name

HELD_OUT_FRACTION = 0.15
VALIDATION_FRACTION = 0.10
SPLITS = ("train", "validation", "held_out", "all")


def _unit(text: str) -> float:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") / 2.0 ** 64


def pair_side(a: str, b: str) -> str:
    """"held_out", "validation" or "train": the side of the adjacent token pair (a, b)."""
    u = _unit(f"leap-world-pairs-v1:{a}>{b}")
    return "held_out" if u < HELD_OUT_FRACTION else ("validation" if u < HELD_OUT_FRACTION + VALIDATION_FRACTION
                                                     else "train")


def token_pairs(spec: WorldSpec) -> list[tuple[str, str]]:
    several_dtypes = len({d for _, d in combos(spec.family)}) > 1
    seq = spec.tokens + ((spec.dtype,) if several_dtypes else ())
    return list(zip(seq, seq[1:], strict=False))


def split_of_spec(spec: WorldSpec) -> str:
    sides = {pair_side(a, b) for a, b in token_pairs(spec)}
    return "held_out" if "held_out" in sides else ("validation" if "validation" in sides else "train")


def split_of(name: str) -> str:
    """The split of a world task name (ValueError for names outside the world)."""
    return split_of_spec(parse_name(name))


@lru_cache(maxsize=4)
def _ordered(seed: int) -> tuple[tuple[str, str], ...]:
    queues = [sorted((s for s in all_specs() if s.family == f),
                     key=lambda s: hashlib.sha256(f"{seed}:{s.name}".encode()).digest()) for f in FAMILIES]
    out: list[tuple[str, str]] = []
    for k in range(max(len(q) for q in queues)):
        out += [(q[k].name, split_of_spec(q[k])) for q in queues if k < len(q)]
    return tuple(out)


def world_task_names(count: int, seed: int = 0, split: str = "train") -> list[str]:
    """The first `count` world task names of `split` in the seeded order: deterministic, distinct and
    prefix-stable in `count`."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r}; expected one of {SPLITS}")
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ValueError(f"count={count!r}; expected an int >= 0")
    names = [n for n, sp in _ordered(int(seed)) if split == "all" or sp == split]
    if count > len(names):
        raise ValueError(f"count={count} exceeds the {len(names)} world tasks of split {split!r}")
    return names[:count]
