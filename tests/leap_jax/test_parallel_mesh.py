"""Mesh specs, partition rules and the `mesh:` config section on one device (the 8-device equality
tests are in tests/leap_jax/multidevice, a pytest run of their own)."""
from __future__ import annotations

import pytest
from jax.sharding import PartitionSpec as P

from leap_jax.parallel.mesh import resolve_shape
from leap_jax.parallel.placement import MeshPlacement
from leap_jax.parallel.rules import spec_for
from leap_jax.train.config import ConfigError, MeshCfg, from_dict


def test_resolve_shape_fills_minus_one_and_names_bad_sizes():
    assert resolve_shape(MeshCfg(1, -1, 1), 8) == (1, 8, 1)
    assert resolve_shape({"data": 2, "fsdp": -1, "tensor": 2}, 8) == (2, 2, 2)
    with pytest.raises(ValueError, match="tensor"):
        resolve_shape((1, 1, 0), 8)
    with pytest.raises(ValueError, match="at most one axis"):
        resolve_shape((-1, -1, 1), 8)
    with pytest.raises(ValueError, match="= 4 devices, but 8"):
        resolve_shape((2, 2, 1), 8)


class _FakeMesh:
    def __init__(self) -> None:
        self.shape = {"data": 2, "fsdp": 2, "tensor": 2}


def test_rules_by_path_and_fallback():
    m = _FakeMesh()
    assert spec_for("model/layers/wq", (2, 64, 32), m) == P(None, "fsdp", "tensor")
    assert spec_for("1/0/mu/model/layers/w_down", (2, 128, 64), m) == P(None, "tensor", "fsdp")
    assert spec_for("model/layers/wqkv", (64, 96), m) == P("fsdp", "tensor")  # one unstacked layer
    assert spec_for("model/layers/bq", (2, 32), m) == P(None, "tensor")
    assert spec_for("model/layers/attn_norm", (2, 64), m) == P()
    assert spec_for("1/0/count", (), m) == P()
    fb: list[str] = []
    assert spec_for("model/embed", (97, 64), m, fb) == P(None, "fsdp")
    assert fb and "model/embed dim 0" in fb[0]


def test_default_mesh_is_the_single_device_path():
    assert MeshPlacement.from_cfg(from_dict({}).mesh) is None
    assert from_dict({"mesh": {"fsdp": -1}}).mesh.fsdp == -1
    with pytest.raises(ConfigError, match="mesh.fsdp=0"):
        from_dict({"mesh": {"fsdp": 0}})
    with pytest.raises(ConfigError, match="at most one"):
        from_dict({"mesh": {"fsdp": -1, "data": -1}})
