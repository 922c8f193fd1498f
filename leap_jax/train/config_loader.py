"""A generic typed config loader: nested dataclasses from YAML, dotted overrides, type checks.

It knows nothing about LEAP's sections: `build(schema, data)` type-checks every leaf of a nested
dict against the dataclass annotations (unknown keys get a did-you-mean suggestion),
`apply_overrides(schema, data, ["a.b=value", ...])` applies dotted overrides (values parsed as YAML
scalars) checking each key path, `read_yaml` reads a mapping with `base:` inheritance, `to_dict`
writes a config back out. `choice` / `positive` are the range checks the sections' `check()` use.
"""
from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A bad config value, key or combination; the message names it and what was expected."""


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def coerce(value: Any, tp: Any, where: str) -> Any:
    """Check `value` against annotation `tp`; ints are accepted for floats. Raises ConfigError."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return coerce(value, a, where)
            except ConfigError:
                pass
        raise ConfigError(f"{where}={value!r}: expected {' or '.join(_type_name(a) for a in args)}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}={value!r}: expected a list")
        (item_tp, *_) = typing.get_args(tp) or (Any,)
        return [coerce(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):  # a dataclass type, not an instance
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}={value!r}: expected a mapping of {tp.__name__} fields")
        return build(tp, value, where)
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}={value!r}: expected a bool (true/false)")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where}={value!r}: expected an int")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads "3e-5" (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{where}={value!r}: expected a number")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where}={value!r}: expected a string")
    raise ConfigError(f"{where}: unsupported annotation {tp!r}")


def suggest(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def build(cls: type, data: dict[str, Any], where: str = "") -> Any:
    """An instance of dataclass `cls` from a nested dict (missing keys keep their defaults)."""
    if not where and not isinstance(data, dict):
        raise ConfigError(f"config must be a mapping at the top level, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for k in data:
        if k not in names:
            full = f"{where}.{k}" if where else k
            raise ConfigError(f"unknown config key {full!r}{suggest(str(k), names)}; "
                              f"valid keys here: {', '.join(names)}")
    kwargs = {k: coerce(v, hints[k], f"{where}.{k}" if where else k) for k, v in data.items()}
    return cls(**kwargs)


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def parse_override(text: str) -> tuple[list[str], Any]:
    """`a.b.c=value` -> (["a","b","c"], value parsed as a YAML scalar/list)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected KEY=VALUE with a dotted key, e.g. train.steps=10")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not p for p in key.split(".")):
        raise ConfigError(f"override {text!r}: empty key segment in {key!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() != "" else ""
    except yaml.YAMLError as e:
        raise ConfigError(f"override {text!r}: value {raw!r} is not valid YAML ({e})") from None
    return key.split("."), value


def apply_overrides(schema: type, data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply dotted overrides onto a nested dict, checking each key path against dataclass `schema`."""
    data = _deepcopy(data)
    for ov in overrides:
        path, value = parse_override(ov)
        cls: Any = schema
        node = data
        for i, part in enumerate(path):
            names = [f.name for f in dataclasses.fields(cls)]
            if part not in names:
                prefix = ".".join(path[:i])
                raise ConfigError(f"override {ov!r}: unknown key {part!r}"
                                  f"{' under ' + repr(prefix) if prefix else ''}{suggest(part, names)}; "
                                  f"valid keys: {', '.join(names)}")
            tp = typing.get_type_hints(cls)[part]
            if i == len(path) - 1:
                node[part] = value
            else:
                if not dataclasses.is_dataclass(tp):
                    raise ConfigError(f"override {ov!r}: {'.'.join(path[:i + 1])} is a value, not a section")
                node = node.setdefault(part, {})
                if not isinstance(node, dict):
                    raise ConfigError(f"override {ov!r}: {'.'.join(path[:i + 1])} is not a mapping")
                cls = tp
    return data


def _deepcopy(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _deepcopy(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_deepcopy(v) for v in d]
    return d


def read_yaml(p: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A YAML mapping; a top-level `base: other.yaml` (relative to this file; or a list of files, merged
    in order) is loaded first and this file's keys are deep-merged over it, so baseline configs state
    only what differs."""
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    if p.resolve() in seen:
        raise ConfigError(f"config file {str(p)!r}: `base` chain loops back to itself")
    try:
        loaded = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {str(p)!r} is not valid YAML: {e}") from None
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"config file {str(p)!r}: expected a mapping at the top level")
    base = loaded.pop("base", None)
    if base is None:
        return loaded
    bases = base if isinstance(base, list) else [base]
    if not bases or not all(isinstance(b, str) for b in bases):
        raise ConfigError(f"config file {str(p)!r}: base={base!r}; expected a file name or a list of them "
                          "(merged in order, later ones win)")
    merged: dict[str, Any] = {}
    for b in bases:
        merged = merge(merged, read_yaml(p.parent / b, seen + (p.resolve(),)))
    return merge(merged, loaded)


def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """`b` deep-merged over `a` (a new dict; mappings merge key by key, anything else replaces)."""
    out = _deepcopy(a)
    for k, v in b.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else _deepcopy(v)
    return out


def save_yaml(cfg: Any, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))


# ---- range checks for the sections' check() methods --------------------------------------------
def choice(value: Any, choices: tuple, where: str) -> None:
    if value not in choices:
        raise ConfigError(f"{where}={value!r}: expected one of {', '.join(map(str, choices))}"
                          f"{suggest(str(value), [str(c) for c in choices])}")


def positive(value: float, where: str, allow_zero: bool = False) -> None:
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{where}={value!r}: expected {'>= 0' if allow_zero else '> 0'}")

