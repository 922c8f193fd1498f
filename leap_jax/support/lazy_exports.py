"""A package's public names, imported from their submodules on first use (PEP 562).

Packages whose submodules differ in weight (plain-Python option checks beside JAX code) export
through this, so that config validation can import the light submodules without pulling in JAX.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, tuple[str, ...]]
                 ) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """(`__all__`, `__getattr__`, `__dir__`) for `package`, whose `exports` map a submodule to the
    names it defines."""
    home = {name: module for module, names in exports.items() for name in names}
    names = sorted(home)

    def getattr_(name: str) -> Any:
        if name not in home:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{home[name]}"), name)

    def dir_() -> list[str]:
        return list(names)

    return list(names), getattr_, dir_
