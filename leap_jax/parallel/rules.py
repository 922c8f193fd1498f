"""Partition rules by parameter path, and placing params / optimizer state / batches on a mesh.

A leaf's path is its pytree keys joined by "/" (e.g. `model/layers/wq`, or inside AdamW's state
`1/0/mu/model/layers/wq`). The first rule whose regex matches the end of that path gives the spec
of the leaf's TRAILING dims; any leading dims (the stacked layer axis L, per-layer tuples) get None,
so the layer axis is never sharded (`lax.scan` slices it) and stacked, unstacked and fused
(`wqkv`, `w_gate_up`) layouts share one table:

| param | trailing dims | spec |
|---|---|---|
| embed | [V, D] | ('tensor', 'fsdp') |
| lm_head | [D, V] | ('fsdp', 'tensor') |
| wq wk wv w_gate w_up wqkv w_gate_up | [D, out] | ('fsdp', 'tensor') |
| wo w_down | [in, D] | ('tensor', 'fsdp') |
| bq bk bv bqkv | [out] | ('tensor',) |
| norms, value head, scalars, anything else | | replicated |

A dim whose size is not divisible by its axes' product falls back to replication on that dim
(`fallbacks` lists each one), so any model shape places on any mesh.
"""
from __future__ import annotations

import re
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from leap_jax.parallel.mesh import BATCH_AXES

Axis = str | tuple[str, ...] | None

# (regex on the path's end, spec of the trailing dims); first match wins
RULES: tuple[tuple[str, tuple[Axis, ...]], ...] = (
    (r"(^|/)embed$", ("tensor", "fsdp")),
    (r"(^|/)lm_head$", ("fsdp", "tensor")),
    (r"(^|/)(wq|wk|wv|w_gate|w_up|wqkv|w_gate_up)$", ("fsdp", "tensor")),
    (r"(^|/)(wo|w_down)$", ("tensor", "fsdp")),
    (r"(^|/)(bq|bk|bv|bqkv)$", ("tensor",)),
    (r"(^|/)(attn_norm|mlp_norm|final_norm)$", ()),
    (r"(^|/)value/(w|b)$", ()),
)
_COMPILED = tuple((re.compile(rx), spec) for rx, spec in RULES)


def path_str(path: tuple[Any, ...]) -> str:
    parts = []
    for k in path:
        for attr in ("key", "name", "idx"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return "/".join(parts)


def _axis_size(mesh: jax.sharding.Mesh, axis: Axis) -> int:
    if axis is None:
        return 1
    names = (axis,) if isinstance(axis, str) else axis
    return int(np.prod([mesh.shape[a] for a in names]))


def spec_for(path: str, shape: tuple[int, ...], mesh: jax.sharding.Mesh | None = None,
             fallbacks: list[str] | None = None) -> P:
    """The PartitionSpec of a leaf at `path` with `shape` (see the module docstring)."""
    trailing: tuple[Axis, ...] = ()
    for rx, spec in _COMPILED:
        if rx.search(path):
            trailing = spec
            break
    if len(trailing) > len(shape):  # e.g. a scalar where a matrix was expected: replicate
        trailing = ()
    full: list[Axis] = [None] * (len(shape) - len(trailing)) + list(trailing)
    if mesh is not None:
        for d, axis in enumerate(full):
            size = _axis_size(mesh, axis)
            if axis is not None and shape[d] % size:
                if fallbacks is not None:
                    fallbacks.append(f"{path} dim {d} (size {shape[d]}) not divisible by {axis}={size}: "
                                     "replicated")
                full[d] = None
    while full and full[-1] is None:
        full.pop()
    return P(*full)


def partition_specs(tree: Any, mesh: jax.sharding.Mesh | None = None,
                    fallbacks: list[str] | None = None) -> Any:
    """A pytree of PartitionSpecs matching `tree` (arrays or ShapeDtypeStructs)."""
    def leaf(path, x):
        shape = tuple(getattr(x, "shape", ()))
        return spec_for(path_str(path), shape, mesh, fallbacks)
    return jax.tree_util.tree_map_with_path(leaf, tree)


def param_shardings(tree: Any, mesh: jax.sharding.Mesh, fallbacks: list[str] | None = None) -> Any:
    """A pytree of NamedShardings for params, gradients or optimizer state on `mesh`."""
    specs = partition_specs(tree, mesh, fallbacks)
    return jax.tree_util.tree_map(lambda s: NamedSharding(mesh, s), specs,
                                  is_leaf=lambda s: isinstance(s, P))


def shard_params(tree: Any, mesh: jax.sharding.Mesh) -> Any:
    """`tree` (params, or an optax state over them) placed on `mesh` by the rules."""
    return jax.device_put(tree, param_shardings(tree, mesh))


def replicated(mesh: jax.sharding.Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def batch_sharding(mesh: jax.sharding.Mesh, shape: tuple[int, ...]) -> NamedSharding:
    """Rows split over ("data", "fsdp"), other dims whole; replicated for scalars and for a row
    count the data-parallel degree does not divide."""
    dp = _axis_size(mesh, BATCH_AXES)
    if not shape or shape[0] % dp:
        return replicated(mesh)
    return NamedSharding(mesh, P(BATCH_AXES))


def shard_batch(batch: dict[str, Any], mesh: jax.sharding.Mesh) -> dict[str, Any]:
    """An update batch (dict of [B, ...] arrays and scalars) placed with `batch_sharding`."""
    return {k: jax.device_put(v, batch_sharding(mesh, tuple(np.shape(v)))) for k, v in batch.items()}
