"""Poisoned buffers on a `Device`: outputs and scratch between guard regions, refilled with poison.

Every output (and scratch buffer) is allocated with `OUTPUT_GUARD_BYTES` of guard elements before
and after it in the same allocation, all filled with the dtype's poison (judge/poison.py): an output
element still poisoned after a run was never written, a changed guard element is a write out of
bounds, whatever the allocator put next door. judge/poison.py reads the poison back.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kernels_env.backends.base import Device
from kernels_env.core.units import describe_bytes
from kernels_env.judge.faults import EnvFault
from kernels_env.judge.poison import poison_bits

OUTPUT_GUARD_BYTES = 64 * 1024  # poisoned elements after each output; a write there is out of bounds


def scratch_refusal(device: Device, scratch: Sequence[tuple[str, str, int]]) -> str | None:
    """Why the plan's `scratch` ((name, dtype, count), as launch.ResolvedPlan has it) may not be
    allocated on `device`, else None: decided from the declared sizes against the device's optional
    `max_scratch_bytes` (the cpu backend's; a GPU refuses at its allocator), before anything is
    allocated."""
    limit = getattr(device, "max_scratch_bytes", None)
    sizes = {name: count * np.dtype(dtype).itemsize for name, dtype, count in scratch}
    total = sum(sizes.values())
    if limit is None or total <= limit:
        return None
    largest = max(sizes, key=sizes.__getitem__)
    return (f"the launch block declares {describe_bytes(total)} of scratch in {len(sizes)} buffer"
            f"{'s' if len(sizes) != 1 else ''} ({largest!r} alone {describe_bytes(sizes[largest])}); the "
            f"{device.name} backend allows at most {describe_bytes(limit)} of scratch per evaluation, so "
            "nothing was allocated; declare less scratch")


def poison(device: Device, shape: tuple[int, ...], dtype: str, zero: bool = False) -> tuple[Any, Any]:
    """(buffer, (lead guard, trail guard)): a poisoned buffer of `shape` (zeroed with `zero`, for
    scratch) between poisoned guard elements in the same allocation. Whether a write outside a
    buffer faults depends on what the allocator put there (a GPU memory pool often has live blocks
    next door); a changed guard catches it always, before the start as past the end."""
    _, buf, guards = alloc_poisoned(device, shape, dtype, zero)
    return buf, guards


def alloc_poisoned(device: Device, shape: tuple[int, ...], dtype: str,
                   zero: bool = False) -> tuple[Any, Any, tuple[Any, Any]]:
    """(whole allocation, buffer, guards) of `poison`; the allocation is kept by the timing stage
    to re-poison it before every run."""
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    g = OUTPUT_GUARD_BYTES // np.dtype(dtype).itemsize
    full = device.empty((g + count + g,), dtype)
    fill_poison(full, dtype)
    buf = full[g:g + count]
    if zero:
        buf.fill(0)
    return full, buf.reshape(shape), (full[:g], full[g + count:])


def fill_poison(full: Any, dtype: str) -> None:
    """Write the dtype's poison (poison.poison_bits) into every element (asynchronously)."""
    try:
        utype, bits = poison_bits(dtype)
    except ValueError:
        raise EnvFault(f"output dtype {dtype!r} has no poison value") from None
    full.view(utype).fill(utype(bits))
