"""The task data model (DESIGN 3.1): data plus a reference written against the array API.

A task's reference is `reference(xp, **arrays) -> array | tuple[array, ...]` where `xp` is numpy or
cupy, `arrays` holds every input buffer by name plus every scalar by name (as a Python number), and
the return value gives the outputs in the order of `Task.outputs`. References of reductions, scans,
norms and losses compute in float64 and cast to the output dtype (tasks/common.float64_reference).

A task's optional `slack(xp, **arrays)` takes the same arguments and returns, per output, an extra
absolute tolerance (a float64 array broadcastable to the output's shape, or None): the rounding a
correct float32 kernel cannot avoid where the inputs amplify it (a long prefix sum, a normalised row
of large mean and small spread). `Task.atol_for` adds it to the dtype's atol.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any
from collections.abc import Callable

from kernels_env.tasks.domains import Domain, check_compatible, contraction_domain, default_domain

DTYPES = ("float32", "float16", "int32", "int64")
DISTRIBUTIONS = ("uniform", "normal", "heavy_tailed", "positive", "randint", "indices")
DEFAULT_TOLERANCE = {"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "int32": (0.0, 0.0),
                     "int64": (0.0, 0.0)}


@dataclass(frozen=True)
class Buffer:
    """A device buffer: `shape` is a tuple of size names or ints, e.g. ("N", "M")."""
    name: str
    dtype: str
    shape: tuple[str | int, ...]
    # Distributions the correctness trials rotate through (inputs only). "randint"/"indices" use
    # `low`/`high` (high exclusive; "indices" takes high from a size name).
    distributions: tuple[str, ...] = ("uniform", "normal", "heavy_tailed")
    low: float | str = -1.0
    high: float | str = 1.0
    # The values the task promises this input may hold (tasks/domains.py); None: derived from the
    # legacy draws above. Trials with EnvConfig.input_domains draw over all of it, edges included.
    domain: Domain | None = None

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"buffer {self.name!r}: dtype {self.dtype!r} not in {DTYPES}")
        bad = [d for d in self.distributions if d not in DISTRIBUTIONS]
        if bad:
            raise ValueError(f"buffer {self.name!r}: unknown distributions {bad}; expected {DISTRIBUTIONS}")
        legacy = default_domain(self.dtype, self.distributions, self.low, self.high)
        if self.domain is None:
            object.__setattr__(self, "domain", legacy)
        elif not isinstance(self.domain, Domain):
            raise ValueError(f"buffer {self.name!r}: domain={self.domain!r}; expected a tasks.domains.Domain")
        check_compatible(self.name, self.dtype, self.input_domain, legacy)

    @property
    def input_domain(self) -> Domain:
        """The buffer's domain (always set after construction)."""
        assert self.domain is not None
        return self.domain

    def resolve_shape(self, sizes: dict[str, int]) -> tuple[int, ...]:
        out = []
        for d in self.shape:
            if isinstance(d, int):
                out.append(d)
            elif d in sizes:
                out.append(int(sizes[d]))
            else:
                raise KeyError(f"buffer {self.name!r}: shape names size {d!r}, not among {sorted(sizes)}")
        return tuple(out)


def _in_task_domain(buffer: Buffer, tags: tuple[str, ...]) -> Buffer:
    """`buffer` with the domain its task's kind gives it (tasks.domains.contraction_domain)."""
    domain = contraction_domain(buffer.input_domain, tags)
    return buffer if domain == buffer.input_domain else replace(buffer, domain=domain)


@dataclass(frozen=True)
class Scalar:
    """A scalar kernel argument with a fixed value (e.g. eps, alpha); passed to the reference too."""
    name: str
    dtype: str  # "float32" | "int32" | "int64"
    value: float | int


@dataclass(frozen=True)
class Task:
    name: str
    level: int  # 1 single op, 2 fusion, 3 block
    description: str  # prose for the prompt
    sizes: dict[str, dict[str, int]]  # {"eval": {...}, "small": {...}}
    inputs: tuple[Buffer, ...]
    outputs: tuple[Buffer, ...]
    reference: Callable[..., Any]
    solution: str  # known-good submission: markdown with a ```cuda and a ```launch block
    scalars: tuple[Scalar, ...] = ()
    tolerance: dict[str, tuple[float, float]] = field(default_factory=dict)  # dtype -> (atol, rtol)
    tags: tuple[str, ...] = ()
    slack: Callable[..., tuple[Any, ...]] | None = None  # input-derived atol terms (module docstring)

    def __post_init__(self) -> None:
        if self.level not in (1, 2, 3):
            raise ValueError(f"task {self.name!r}: level {self.level} not in (1, 2, 3)")
        for key in ("eval", "small"):
            if key not in self.sizes:
                raise ValueError(f"task {self.name!r}: sizes needs an {key!r} set, has {sorted(self.sizes)}")
        names = [b.name for b in self.inputs + self.outputs] + [s.name for s in self.scalars]
        if len(set(names)) != len(names):
            raise ValueError(f"task {self.name!r}: duplicate buffer/scalar names in {names}")
        object.__setattr__(self, "inputs", tuple(_in_task_domain(b, self.tags) for b in self.inputs))

    def size_set(self, which: str) -> dict[str, int]:
        try:
            return dict(self.sizes[which])
        except KeyError:
            raise KeyError(f"task {self.name!r}: no size set {which!r}; has {sorted(self.sizes)}") from None

    def tol(self, dtype: str) -> tuple[float, float]:
        return self.tolerance.get(dtype, DEFAULT_TOLERANCE[dtype])

    def atol_for(self, xp: Any, inputs: dict[str, Any], sizes: dict[str, int]) -> list[Any]:
        """Each output's absolute tolerance on a trial's `inputs` (by buffer name) at `sizes`: the
        dtype's atol, plus the task's `slack` term where it has one (a float64 array of the output's
        shape)."""
        atols: list[Any] = [self.tol(b.dtype)[0] for b in self.outputs]
        if self.slack is None:
            return atols
        scalars = {s.name: s.value for s in self.scalars}
        terms = self.slack(xp, **{b.name: inputs[b.name] for b in self.inputs}, **scalars)
        if len(terms) != len(self.outputs):
            raise ValueError(f"task {self.name!r}: slack returned {len(terms)} terms; expected one per "
                             f"output ({len(self.outputs)})")
        for i, (b, term) in enumerate(zip(self.outputs, terms, strict=True)):
            if term is not None:
                term = xp.asarray(term, dtype=xp.float64)
                atols[i] = xp.broadcast_to(atols[i] + term, b.resolve_shape(sizes))
        return atols

    @property
    def buffers(self) -> tuple[Buffer, ...]:
        return self.inputs + self.outputs

    def signature_text(self, which: str = "eval") -> str:
        """Human-readable buffer/size signature for prompts."""
        sizes = self.size_set(which)
        lines = ["sizes: " + ", ".join(f"{k}={v}" for k, v in sizes.items())]
        for kind, bufs in (("input", self.inputs), ("output", self.outputs)):
            for b in bufs:
                lines.append(f"{kind} {b.dtype} {b.name}[{', '.join(str(d) for d in b.shape)}]")
        for s in self.scalars:
            lines.append(f"scalar {s.dtype} {s.name} = {s.value}")
        return "\n".join(lines)
