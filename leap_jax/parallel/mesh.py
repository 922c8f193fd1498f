"""A `jax.sharding.Mesh` with axes ("data", "fsdp", "tensor") from a `data / fsdp / tensor` spec.

Sizes are positive ints, or -1 for "all remaining devices" (at most one axis). The product must
equal the number of devices used. All axes are `AxisType.Auto` (GSPMD propagation): the Explicit
mode makes `jnp.take` on a sharded embedding an error.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")  # the batch dimension is split over both


def _spec_sizes(spec: Any) -> tuple[int, int, int]:
    if isinstance(spec, (tuple, list)):
        if len(spec) != 3:
            raise ValueError(f"mesh spec {spec!r}: expected (data, fsdp, tensor)")
        return int(spec[0]), int(spec[1]), int(spec[2])
    if isinstance(spec, dict):
        return int(spec.get("data", 1)), int(spec.get("fsdp", 1)), int(spec.get("tensor", 1))
    return int(spec.data), int(spec.fsdp), int(spec.tensor)


def resolve_shape(spec: Any, n_devices: int) -> tuple[int, int, int]:
    """(data, fsdp, tensor) with a -1 filled in; raises ValueError naming the bad sizes."""
    sizes = _spec_sizes(spec)
    named = dict(zip(AXES, sizes, strict=True))
    bad = {k: v for k, v in named.items() if v == 0 or v < -1}
    if bad:
        raise ValueError(f"mesh sizes {bad}: expected positive ints or -1 (the rest of the devices)")
    free = [k for k, v in named.items() if v == -1]
    if len(free) > 1:
        raise ValueError(f"mesh axes {free} are all -1: at most one axis may take the rest of the devices")
    fixed = int(np.prod([v for v in sizes if v != -1]))
    if free:
        if n_devices % fixed:
            raise ValueError(f"mesh {named}: {n_devices} devices are not divisible by the fixed axes' "
                             f"product {fixed}, so {free[0]}=-1 has no integer size")
        named[free[0]] = n_devices // fixed
    total = int(np.prod(list(named.values())))
    if total != n_devices:
        raise ValueError(f"mesh data={named['data']} x fsdp={named['fsdp']} x tensor={named['tensor']} "
                         f"= {total} devices, but {n_devices} are available (use -1 for one axis to "
                         "take the rest)")
    return named["data"], named["fsdp"], named["tensor"]


def make_mesh(spec: Any = (1, -1, 1), devices: Sequence[Any] | None = None) -> jax.sharding.Mesh:
    """The mesh for `spec` (a MeshCfg-like object, a dict or a (data, fsdp, tensor) tuple) over
    `devices` (default: every device of the process group)."""
    devs = list(jax.devices() if devices is None else devices)
    shape = resolve_shape(spec, len(devs))
    auto = (jax.sharding.AxisType.Auto,) * len(AXES)
    if devices is None:
        return jax.make_mesh(shape, AXES, axis_types=auto)
    return jax.sharding.Mesh(np.asarray(devs, dtype=object).reshape(shape), AXES, axis_types=auto)


def single_device(spec: Any) -> bool:
    """True when the spec uses exactly one device (today's unsharded path)."""
    return all(s == 1 for s in _spec_sizes(spec))
