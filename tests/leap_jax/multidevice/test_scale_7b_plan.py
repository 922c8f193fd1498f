"""The 7B config's update on 8 devices, compiled only (nothing allocated): configs/qwen2.5-7b-8gpu.yaml's
FSDP mesh, micro-batch and context at Qwen2.5-7B's shape (benchmarks/memory_plan.py's `plan`). Each
device holds an eighth of the fp32 weights and AdamW moments, and the whole plan fits the share of an
H200 the config gives JAX.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m pytest -q tests/leap_jax/multidevice/test_scale_7b_plan.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import jax
import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

pytestmark = pytest.mark.skipif(jax.device_count() != 8, reason="needs 8 (fake CPU) devices; see conftest.py")
H200_GIB = 139.0


def test_7b_config_plan_shards_the_state_and_fits_an_h200_share():
    from benchmarks.memory_plan import SHAPES, plan
    from leap_jax.train.config import load_config
    cfg = load_config(ROOT / "configs" / "qwen2.5-7b-8gpu.yaml", ["model.path=/unused"])
    assert cfg.mesh.fsdp == 8 and cfg.model.param_dtype == "float32"
    mb, length = cfg.optimizer.micro_batch_size, cfg.rollout.max_context_tokens
    shape = SHAPES["7B"]
    one = plan(shape, 1, mb, length, mb)
    eight = plan(shape, 8, mb, length, mb)
    print(f"7B, batch [{mb}, {length}]: 1 device {one['total']:.1f} GiB, 8 devices {eight['total']:.1f} GiB/dev")
    state_gib = shape.num_params() * 4 * 3 / 2**30  # fp32 params + two AdamW moments
    assert one["args"] >= state_gib and eight["args"] == pytest.approx(one["args"] / 8, rel=0.05)
    assert eight["total"] < cfg.env.jax_mem_fraction * H200_GIB < one["total"]
