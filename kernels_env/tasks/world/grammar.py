"""The world's grammar: which families exist, which (tokens, dtype) compositions each offers, and the
parser from a name back to its spec."""
from __future__ import annotations

import re
from functools import lru_cache, cache
from types import ModuleType

from kernels_env.tasks.world import attention, conv, fusion, losses, matmul, norms, pool, scan
from kernels_env.tasks.world.base import DTYPES, PREFIX, SEEDS, WorldSpec

MODULES: dict[str, ModuleType] = {m.FAMILY: m for m in (matmul, conv, pool, scan, losses, norms, attention,
                                                         fusion)}
FAMILIES = tuple(MODULES)
_NAME_RE = re.compile(r"^gen_w_([a-z0-9]+)_([a-z0-9_]+)_(f32|f16)_s([0-9]+)$")


@cache
def combos(family: str) -> frozenset[tuple[tuple[str, ...], str]]:
    return frozenset(MODULES[family].combos())


@lru_cache(maxsize=1)
def all_specs() -> tuple[WorldSpec, ...]:
    """Every spec of the world, sorted by name."""
    specs = [WorldSpec(f, toks, d, s) for f in FAMILIES for toks, d in combos(f) for s in range(SEEDS)]
    return tuple(sorted(specs, key=lambda s: s.name))


def parse_name(name: str) -> WorldSpec:
    """The spec `name` denotes; ValueError saying what is wrong when it is not a world task name."""
    m = _NAME_RE.match(name) if isinstance(name, str) else None
    if m is None:
        raise ValueError(f"{name!r} is not a world task name ({PREFIX}<family>_<tokens>_<f32|f16>_s<seed>)")
    family, body, dtype, seed = m.group(1), tuple(m.group(2).split("_")), m.group(3), int(m.group(4))
    if family not in MODULES:
        raise ValueError(f"{name!r}: unknown world family {family!r}; expected one of {FAMILIES}")
    if (body, dtype) not in combos(family):
        raise ValueError(f"{name!r}: tokens {'_'.join(body)!r} with dtype {dtype!r} are not a composition of "
                         f"family {family!r} (e.g. {min(combos(family))[0]!r}; dtypes {tuple(DTYPES)})")
    if seed >= SEEDS:
        raise ValueError(f"{name!r}: seed {seed} out of range; expected 0..{SEEDS - 1}")
    return WorldSpec(family, body, dtype, seed)
