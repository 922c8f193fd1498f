"""The trainer's mesh hook: where params, optimizer state and update batches live.

`MeshPlacement.from_cfg(cfg.mesh)` is None for a one-device mesh, and the trainer then runs
exactly as without a mesh. Otherwise params and optimizer state are placed by `rules` (AdamW's
moments get the same specs as their params), and each update batch (or micro-batch) is split by
rows over ("data", "fsdp"); the jitted update then compiles SPMD from its inputs' shardings.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import jax

from leap_jax.parallel.mesh import make_mesh, single_device
from leap_jax.parallel.rules import param_shardings, shard_batch


@dataclass
class MeshPlacement:
    mesh: jax.sharding.Mesh
    fallbacks: list[str] = field(default_factory=list)  # dims the rules had to replicate

    @classmethod
    def from_cfg(cls, spec: Any) -> MeshPlacement | None:
        """None (the plain path) for a one-device mesh, unless `spec.force` asks for the sharded path
        anyway (to measure that it costs nothing on one device)."""
        force = bool(getattr(spec, "force", False))
        if single_device(spec) and not force:
            return None
        mesh = make_mesh(spec)
        if mesh.size == 1 and not force:
            return None
        return cls(mesh)

    def place(self, tree: Any) -> Any:
        """`tree` (params or optimizer state) on the mesh by the partition rules."""
        fb: list[str] = []
        out = jax.device_put(tree, param_shardings(tree, self.mesh, fb))
        self.fallbacks.extend(f for f in fb if f not in self.fallbacks)
        return out

    def put_batch(self, batch: dict[str, Any]) -> dict[str, Any]:
        return shard_batch(batch, self.mesh)

    def wrap_update(self, update: Any) -> Any:
        """`update(params, opt_state, batch)` whose returned params and optimizer state are put back
        on the rules' layout: GSPMD may pick another one for outputs (e.g. a norm's new value
        sharded like the gradient that produced it). Leaves already in place are not copied."""
        @functools.wraps(update)
        def wrapped(params: Any, opt_state: Any, batch: Any) -> Any:
            new_params, new_opt_state, metrics = update(params, opt_state, batch)
            return self.place(new_params), self.place(new_opt_state), metrics
        return wrapped
