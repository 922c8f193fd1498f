"""Orbax checkpoints of a training run (DESIGN 4.8).

A checkpoint holds the array state (params, optimizer state, RNG key data) restored bitwise, and a
JSON part (step, data cursor, DCP history, resolved config, anything else the trainer needs to
continue exactly). Keep-last-N comes from config; saving waits for completion so an interrupted run
(SIGINT/SIGTERM) leaves a complete checkpoint behind.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp


def checkpoint_dir(run_dir: str | Path) -> Path:
    return Path(run_dir).absolute() / "checkpoints"


class Checkpointer:
    """Save / restore (arrays, meta) pairs under RUN_DIR/checkpoints/<step>."""

    def __init__(self, run_dir: str | Path, keep_last: int = 3):
        self.directory = checkpoint_dir(run_dir)
        self.directory.mkdir(parents=True, exist_ok=True)
        options = ocp.CheckpointManagerOptions(max_to_keep=keep_last, create=True,
                                               enable_async_checkpointing=False)
        self._mngr = ocp.CheckpointManager(self.directory, options=options)

    def latest_step(self) -> int | None:
        return self._mngr.latest_step()

    def all_steps(self) -> list[int]:
        return list(self._mngr.all_steps())

    def save(self, step: int, arrays: Any, meta: dict[str, Any]) -> None:
        """Write a checkpoint for `step` and block until it is on disk."""
        self._mngr.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(arrays),
                                                      meta=ocp.args.JsonSave(meta)), force=True)
        self._mngr.wait_until_finished()

    def restore(self, like: Any, step: int | None = None) -> tuple[Any, dict[str, Any], int]:
        """Restore into the structure/dtypes/shardings of `like`; returns (arrays, meta, step)."""
        if step is None:
            step = self.latest_step()
        if step is None:
            raise FileNotFoundError(f"no checkpoint found under {str(self.directory)!r}")
        abstract = jax.tree_util.tree_map(_abstract, like)
        out = self._mngr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract),
                                                               meta=ocp.args.JsonRestore()))
        # orbax may hand back NamedTuples (optax states) as plain tuples: re-impose `like`'s treedef
        leaves = jax.tree_util.tree_leaves(out["state"])
        state = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(like), leaves)
        return state, dict(out["meta"]), step

    def close(self) -> None:
        self._mngr.close()


def _abstract(x: Any) -> Any:
    if isinstance(x, jax.Array):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
    if isinstance(x, np.ndarray):
        return jax.ShapeDtypeStruct(x.shape, x.dtype)
    return x
