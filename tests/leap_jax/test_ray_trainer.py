"""The smoke config trained with `env.pool_mode=ray` by a trainer that cannot import CuPy: it drives
evaluation through a local Ray cluster whose host runs the cpu backend (random tiny model, so no SFT
warm-up: about a minute)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from leap_jax import main as main_mod
from leap_jax.train.metrics import read_metrics
from tests.leap_jax._trainer_helpers import cpu_backend_works

pytest.importorskip("ray")
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_smoke_config_with_ray_pool(tmp_path, monkeypatch, capsys):
    if not cpu_backend_works():
        pytest.skip("the cpu backend cannot score the relu solution on this machine")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.setitem(sys.modules, "cupy", None)  # `import cupy` fails here; the host has it
    run = tmp_path / "smoke_ray"
    args = ["--config", str(ROOT / "configs" / "smoke.yaml"), f"train.run_dir={run}", "train.steps=2",
            "model.source=random", "tokenizer.kind=bpe", "env.pool_mode=ray", "logging.progress_bar=false",
            "logging.report=false", "logging.tensorboard=false"]
    assert main_mod.main(args) == 0
    assert "[leap_jax] steps run: 2" in capsys.readouterr().out
    rows = read_metrics(run)
    assert [r["step"] for r in rows] == [0, 1]
    for r in rows:
        assert r["env/evaluations"] >= 8 and r["env/env_errors"] == 0
        assert r["env/host_deaths"] == r["env/host_hangs"] == r["env/resends"] == 0  # logged, nothing lost
        assert r["update/trainable_tokens"] > 0
    assert any(r["acc@1"] > 0 for r in rows)  # scripted good solutions scored correct on the host
