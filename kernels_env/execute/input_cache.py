"""A correctness trial's inputs kept on the device between evaluations, trusted only by checksum.

A trial's inputs are a pure function of (task, sizes, seed, trial, draws version) and RL scores the
same tasks many times. An edges or structured trial (execute/domain_draws.py) costs a dozen or more
small kernels per buffer to draw, which on small buffers is host time, not GPU time: on the
generated family the draws were about a third of a trial. The harness keeps each trial's inputs
(trials of at most MAX_TRIAL_BYTES) and hands the kernels a device copy.

Submitted kernels share the device's memory, so a stored input may be rewritten. Each entry keeps the
keyed checksums of its inputs (judge/trial_readout.InputDigest: key and values in host memory) taken
when they were drawn; the copy handed to a trial is checksummed under the same key before the launch
(what the harness does for every trial's inputs anyway), and an entry whose copy does not match is
dropped and the trial drawn afresh. A kernel that cannot compute the keyed sums cannot change a stored
input unnoticed, so the worst it can cause is a redraw.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from kernels_env.core.byte_lru import ByteLRU, kept_on
from kernels_env.judge.trial_readout import InputDigest

MAX_TRIAL_BYTES = 16 << 20  # larger trials draw at memory speed: a copy would save little
CACHE_BYTES = 512 << 20  # per device (each evaluation process keeps its own)


@dataclass(eq=False)
class CachedInputs:
    """One trial's inputs on the device and their checksums (host memory)."""
    arrays: dict[str, Any]
    digest: InputDigest

    @property
    def nbytes(self) -> int:
        return _nbytes(self.arrays)


def _nbytes(arrays: dict[str, Any]) -> int:
    return sum(int(a.nbytes) for a in arrays.values())


class InputCache(ByteLRU[CachedInputs]):
    """Trial inputs by key, for `given_inputs`."""


def cache_for(device: Any) -> InputCache | None:
    """The device's input cache (byte_lru.kept_on); None for a device without a __dict__."""
    return kept_on(device, "_harness_inputs", lambda: InputCache(CACHE_BYTES))


def given_inputs(xp: Any, cache: InputCache | None, key: Hashable,
                 draw: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], InputDigest]:
    """(a trial's inputs for its kernels, their checksums taken now): copies of the cached entry of
    `key` when it is intact, else `draw()`n afresh (and stored, when small enough). One device read
    back either way (two when an entry was rewritten)."""
    entry = cache.lookup(key) if cache is not None else None
    if entry is not None:
        inputs = {name: a.copy() for name, a in entry.arrays.items()}
        digest = InputDigest.of(xp, inputs, entry.digest.key)
        if digest == entry.digest:
            return inputs, digest
        cache.discard(key, tampered=True)  # type: ignore[union-attr]
    inputs = draw()
    digest = InputDigest.of(xp, inputs)
    if cache is not None and _nbytes(inputs) <= MAX_TRIAL_BYTES:
        cache.store(key, CachedInputs({name: a.copy() for name, a in inputs.items()}, digest))
    return inputs, digest
