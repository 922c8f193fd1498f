"""Report: PNG plots and the Markdown summary from runs' metrics.jsonl, arms side by side."""
from __future__ import annotations

import json

import pytest
import yaml

from leap_jax.experiment import runs_report as report
from leap_jax.train.metrics import MetricsWriter, read_metrics, truncate_metrics


def _fake_run(path, algo, accs, step_time):
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(yaml.safe_dump({"algorithm": {"name": algo}}))
    w = MetricsWriter(path, tensorboard=False, progress_bar=False)
    for s, (a1, a2) in enumerate(accs):
        w.write(s, {"acc@1": a1, "acc@2": a2, "time/step": step_time, "time/generate": step_time / 2,
                    "time/evaluate": 0.1, "time/update": 0.2, "rollout/gen_rows_turn1": 8,
                    "rollout/gen_rows_turn2": 3, "dcp/skipped_turn2_frac": 0.25, "tokens/generated": 100,
                    "env/evaluations": 11, "turns_per_pass": 1.5, "fast_1": None})
    w.close()


def test_report_writes_pngs_and_table(tmp_path):
    _fake_run(tmp_path / "leap", "leap", [(0.1, 0.2), (0.3, 0.5)], 2.0)
    _fake_run(tmp_path / "mt", "multiturn", [(0.1, 0.3), (0.2, 0.4), (0.25, 0.45)], 4.0)
    paths = report.write_report([tmp_path / "leap", tmp_path / "mt"], tmp_path / "out")
    names = sorted(p.name for p in paths)
    assert names == ["accuracy_vs_step.png", "accuracy_vs_time.png", "summary.md", "turn_budget.png"]
    for p in paths:
        if p.suffix == ".png":
            assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000
    md = (tmp_path / "out" / "summary.md").read_text()
    rows = [ln for ln in md.splitlines() if ln.startswith("| leap") or ln.startswith("| mt")]
    assert len(rows) == 2
    leap = [c.strip() for c in rows[0].strip("|").split("|")]
    mt = [c.strip() for c in rows[1].strip("|").split("|")]
    assert leap[0] == "leap (leap)" and mt[0] == "mt (multiturn)"
    assert leap[1] == "2" and leap[2] == "4"  # steps, total wall-clock = 2 x 2.0 s
    assert float(leap[3]) == pytest.approx(0.2) and float(leap[4]) == pytest.approx(0.35)  # means of last 5
    assert float(mt[2]) == pytest.approx(12.0)
    assert "n/a" in rows[0]  # fast_1 unknown (cpu timings)


def test_cli_and_errors(tmp_path, capsys):
    _fake_run(tmp_path / "r", "leap", [(0.5, 0.75)], 1.0)
    assert report.main([str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "report" / "accuracy_vs_time.png").is_file()
    assert "Acc@2" in capsys.readouterr().out
    assert report.main([str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_metrics_jsonl_truncate_for_resume(tmp_path):
    w = MetricsWriter(tmp_path, tensorboard=True, progress_bar=False)
    for s in range(4):
        w.write(s, {"acc@1": s / 4, "x": float("nan")})
    w.close()
    assert [r["step"] for r in read_metrics(tmp_path)] == [0, 1, 2, 3]
    assert read_metrics(tmp_path)[0]["x"] is None  # non-finite values become null, JSON stays valid
    truncate_metrics(tmp_path, 1)
    assert [r["step"] for r in read_metrics(tmp_path)] == [0, 1]
    assert any((tmp_path / "tb").iterdir())  # TensorBoard event file written
    json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
