"""Shared pytest setup: the `gpu` marker skips cleanly on machines without a CUDA GPU."""
from __future__ import annotations

import functools
import os

import pytest

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave GPU room for CuPy


@functools.lru_cache(maxsize=1)
def gpu_available() -> bool:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (marker `gpu`); none is visible here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
