"""Execution backends: `cupy` (GPU) and `cpu` (CUDA C emulated on the host), chosen by `get_device`.

Backend modules are imported lazily: importing this package never touches CUDA.
"""
from __future__ import annotations

import contextlib
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


class HostMemoryReachable(RuntimeError):
    """The GPU lets device code read and write its process's host memory, and the config forbids it."""


def check_host_isolation(device: Any, config: EnvConfig | None) -> Any:
    """`device`, unless its kernels can dereference the process's host memory (`host_memory_reachable`)
    and `config` does not allow it: then it is closed and HostMemoryReachable raised. Every device that
    runs submitted kernels is created through here (get_device)."""
    allowed = (config or EnvConfig()).allow_host_memory_access
    if getattr(device, "host_memory_reachable", None) is True and not allowed:
        with contextlib.suppress(Exception):
            device.close()
        raise HostMemoryReachable(
            f"GPU {getattr(device, 'device_id', '?')} lets device code read and write this process's host "
            "memory (cudaDevAttrPageableMemoryAccess = 1: HMM or ATS), so a submitted kernel could reach "
            "the judge's keys. Turn HMM off on this host (load nvidia_uvm with uvm_disable_hmm=1), or, for "
            "trusted kernels only, set EnvConfig.allow_host_memory_access=True (docs/THREAT_MODEL.md)")
    return device


def get_device(name: str = "auto", config: EnvConfig | None = None) -> Any:
    """A Device for backend `name` ("auto" | "cupy" | "cpu"); refuses a GPU whose kernels can reach the
    host's memory unless `config` allows it (check_host_isolation)."""
    resolved = resolve_backend(name)
    if resolved == "cupy":
        from kernels_env.backends.cupy_backend import CupyDevice
        return check_host_isolation(_construct(CupyDevice, config), config)
    from kernels_env.backends.cpu import CpuDevice
    return _construct(CpuDevice, config)
