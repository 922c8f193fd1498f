"""Fixtures shared by the environment's tests: one cpu-backend (and one cupy) device per test module."""
from __future__ import annotations

import pytest

from kernels_env.core.config import EnvConfig


@pytest.fixture(scope="module")
def cpu_device():
    """A cpu-backend Device for the module's tests; skips where the backend cannot be built here."""
    try:
        from kernels_env.backends import get_device
        dev = get_device("cpu", EnvConfig(backend="cpu"))
    except Exception as e:  # backend not importable on this checkout/machine
        pytest.skip(f"cpu backend unavailable: {type(e).__name__}: {e}")
    yield dev
    dev.close()


@pytest.fixture(scope="module")
def gpu_device():
    """A cupy-backend Device for the module's `gpu`-marked tests (they skip without a GPU)."""
    from kernels_env.backends import get_device
    dev = get_device("cupy", EnvConfig(backend="cupy"))
    yield dev
    dev.close()
