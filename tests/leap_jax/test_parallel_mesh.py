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


def test_forced_one_device_mesh_trains_like_the_plain_path(tmp_path):
    """mesh.force takes the sharded path on one device (for the side-by-side benchmark); a step on
    it must give the plain path's params."""
    import jax
    import numpy as np

    from leap_jax.rollout.policy import ScriptedPolicy
    from leap_jax.train.config import load_config
    from leap_jax.train.trainer import Trainer
    from tests.leap_jax._trainer_helpers import OracleEvaluator
    from tests.leap_jax.test_trainer import TINY

    assert MeshPlacement.from_cfg(from_dict({"mesh": {"force": True}}).mesh).mesh.size == 1
    params = []
    for name, extra in (("plain", []), ("forced", ["mesh.force=true"])):
        cfg = load_config(None, TINY + [f"train.run_dir={tmp_path / name}", "train.steps=1", *extra])
        tr = Trainer(cfg, evaluator=OracleEvaluator(), resume=False)
        tr._policy_override = ScriptedPolicy(tr.tokenizer, p_good=0.5, end_ids=[tr.streams.im_end])
        assert (tr.placement is not None) == bool(extra)
        tr.train()
        params.append(jax.tree_util.tree_leaves(tr.params))
        tr.close()
    for a, b in zip(*params, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
