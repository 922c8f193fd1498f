"""End to end through the CLI on the CPU backend: configs/smoke.yaml (shortened), then eval mode.

Real kernel evaluation (cpu backend, process pool), DCP, rewards, updates, a checkpoint, metrics,
the report PNGs and the final summary; then `eval.only=true` on the held-out task. Also the
XLA memory settings main.py puts in the environment before importing jax.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from leap_jax import main as main_mod
from leap_jax.train.metrics import read_metrics
from tests.leap_jax._trainer_helpers import cpu_backend_works

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_smoke_config_end_to_end_then_eval(tmp_path, capsys):
    if not cpu_backend_works():
        pytest.skip("the cpu backend cannot score the relu solution on this machine")
    run = tmp_path / "smoke"
    args = ["--config", str(ROOT / "configs" / "smoke.yaml"), f"train.run_dir={run}", "train.steps=2",
            "logging.progress_bar=false"]
    assert main_mod.main(args) == 0
    out = capsys.readouterr().out
    assert "[leap_jax] steps run: 2" in out and "generation skipped" in out and "time per step" in out
    rows = read_metrics(run)
    assert [r["step"] for r in rows] == [0, 1]
    for r in rows:
        assert r["env/evaluations"] >= 8 and r["env/env_errors"] == 0
        assert r["rollout/gen_rows_turn1"] == 8
        assert 0 <= r["acc@1"] <= r["acc@2"] <= r["acc@3"] <= 1
        assert r["update/trainable_tokens"] > 0 and r["optim/grad_norm"] > 0
        assert 0 < r["rollout/scripted_frac"] < 1
    assert any(r["acc@1"] > 0 for r in rows)  # scripted good solutions really scored correct
    assert (run / "config.yaml").is_file() and (run / "tokenizer.json").is_file()
    assert (run / "checkpoints" / "2").is_dir()
    for name in ("accuracy_vs_time.png", "accuracy_vs_step.png", "turn_budget.png", "summary.md"):
        assert (run / "report" / name).is_file()

    assert main_mod.main(["--config", str(run / "config.yaml"), "eval.only=true", "eval.samples=1",
                          "eval.turns=2"]) == 0
    res = json.loads((run / "eval.json").read_text())
    assert res["checkpoint_step"] == 2 and res["held_out"] and res["tasks"] == ["softplus"]
    assert res["rollout/scripted_frac"] == 0.0  # eval never uses the smoke scripted mix
    assert set(res) >= {"acc@1", "acc@2", "fast_1", "fast_1.2", "speedup/mean_correct"}
    assert "eval of checkpoint step 2" in capsys.readouterr().out


def test_memory_env_is_set_before_jax(monkeypatch):
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    main_mod.set_memory_env(0.45, False)
    assert os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.450"
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    src = (ROOT / "leap_jax" / "main.py").read_text()
    head = src.split("def main(", 1)[0]
    assert "import jax" not in head  # jax is imported only after set_memory_env runs


def test_cli_config_errors_exit_2(capsys, tmp_path):
    assert main_mod.main(["--config", str(ROOT / "configs" / "smoke.yaml"), "train.stepz=1"]) == 2
    assert "did you mean 'steps'" in capsys.readouterr().err
    assert main_mod.main(["--resume", str(tmp_path)]) == 2
    assert "no config.yaml" in capsys.readouterr().err
