"""Types shared by parsing, compiling and execution: kernel signatures, the launch plan, the compiled module.

The launch-plan types are produced by `kernels_env.source.launch` (the parser) and consumed by the
backends. Expressions are small ASTs evaluated against the task's sizes; nothing here evaluates
policy text with Python's eval.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from kernels_env.core.result import KernelResources


# ---- expressions over sizes ---------------------------------------------------------------
@dataclass(frozen=True)
class Num:
    value: int | float


@dataclass(frozen=True)
class Name:
    name: str  # a size name (N, M, ...), a buffer / scratch name (only as a launch argument)


@dataclass(frozen=True)
class BinOp:
    op: str  # + - * / %   ("/" is C integer division truncating toward zero on ints)
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Neg:
    operand: Expr


@dataclass(frozen=True)
class Call:
    func: str  # cdiv | min | max
    args: tuple[Expr, ...]


Expr = Num | Name | BinOp | Neg | Call


@dataclass(frozen=True)
class Dim3:
    x: Expr
    y: Expr = Num(1)
    z: Expr = Num(1)


# ---- launch plan --------------------------------------------------------------------------
@dataclass(frozen=True)
class ScratchDecl:
    """`scratch float partial[cdiv(N, 256)];` a zero-initialised device buffer of `count` elements."""
    name: str
    dtype: str  # float32 | float16 | int32 | int64 (C spellings are normalised by the parser)
    count: Expr
    line: int


@dataclass(frozen=True)
class Launch:
    kernel: str
    grid: Dim3
    block: Dim3
    shared_bytes: Expr | None
    args: tuple[Expr, ...]
    line: int


@dataclass(frozen=True)
class LaunchPlan:
    scratch: tuple[ScratchDecl, ...]
    launches: tuple[Launch, ...]


# ---- kernel signatures (parsed from the device code) ---------------------------------------
@dataclass(frozen=True)
class KernelParam:
    name: str
    ctype: str  # as written, normalised spaces, e.g. "const float* __restrict__"
    base_type: str  # float | double | __half | __nv_bfloat16 | int | unsigned int | long long | ...
    pointer: bool
    const: bool


@dataclass(frozen=True)
class KernelSignature:
    name: str
    params: tuple[KernelParam, ...]


@dataclass(frozen=True)
class Submission:
    """What the policy wrote, after extraction of the last ```cuda and ```launch blocks."""
    cuda_source: str
    launch_source: str
    plan: LaunchPlan
    kernels: dict[str, KernelSignature]  # every extern "C" __global__ kernel found in the source


@dataclass
class CompiledModule:
    """NVRTC output. `cubin` is machine code for `arch`; `ptx` is kept for debugging when asked."""
    source: str
    arch: str
    cubin: bytes
    kernels: dict[str, KernelSignature]
    resources: dict[str, KernelResources] = field(default_factory=dict)
    log: str = ""
    seconds: float = 0.0
