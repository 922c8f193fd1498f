"""8 fake CPU devices for the mesh tests; must run before jax is imported in this process.

Run as its own pytest invocation (the device count is fixed once a backend starts):

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m pytest -q tests/leap_jax/multidevice

The flag is also added here when this folder is the only thing collected and jax is not imported
yet. In the main run (jax already imported, or other folders collected) nothing changes, and every
test here skips unless `jax.device_count() == 8`.
"""
from __future__ import annotations

import os
import sys

_FLAG = "--xla_force_host_platform_device_count=8"


def _only_this_folder() -> bool:
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [a for a in sys.argv[1:] if not a.startswith("-") and os.path.exists(a.split("::")[0])]
    return bool(paths) and all(os.path.abspath(p.split("::")[0]).startswith(here) for p in paths)


if "jax" not in sys.modules and _only_this_folder() and _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _FLAG).strip()
