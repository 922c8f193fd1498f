"""Execution backends: `cupy` (GPU) and `cpu` (CUDA C emulated on the host), chosen by `get_device`.

Backend modules are imported lazily: importing this package never touches CUDA.
"""
from __future__ import annotations

import inspect
from typing import Any

from kernels_env.core.config import BACKENDS, EnvConfig


def gpu_count() -> int:
    """Number of visible CUDA GPUs; 0 when CuPy, the driver or a device is missing (never raises)."""
    try:
        import cupy
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


def resolve_backend(name: str) -> str:
    """'auto' -> 'cupy' if a GPU is visible, else 'cpu'; other names are checked and returned."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)}")
    if name == "auto":
        return "cupy" if gpu_count() > 0 else "cpu"
    return name


def _construct(cls: Any, config: EnvConfig | None) -> Any:
    """Pass `config` to backends whose constructor takes one."""
    try:
        takes_config = "config" in inspect.signature(cls).parameters
    except (TypeError, ValueError):
        takes_config = False
    return cls(config=config) if takes_config and config is not None else cls()


def get_device(name: str = "auto", config: EnvConfig | None = None) -> Any:
    """A Device for backend `name` ("auto" | "cupy" | "cpu")."""
    resolved = resolve_backend(name)
    if resolved == "cupy":
        from kernels_env.backends.cupy_backend import CupyDevice
        return _construct(CupyDevice, config)
    from kernels_env.backends.cpu import CpuDevice
    return _construct(CpuDevice, config)
