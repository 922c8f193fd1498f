"""benchmarks/step_time.py reports its phase clocks net of JAX compilation: a timed step that
compiles a new generate program must not count that compilation as generation."""
from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import step_time  # noqa: E402


def _record(generate: float, compile_generate: float, update: float, compile_update: float,
            tokens: float) -> dict:
    step = generate + update + 0.5
    return {"time/step": step, "time/compile": compile_generate + compile_update,
            "time/compile_generate": compile_generate, "time/compile_update": compile_update,
            "time/generate": generate, "time/update": update, "time/evaluate": 0.25, "time/batch": 0.1,
            "tokens/generated": tokens}


def test_generate_and_update_clocks_leave_compilation_out() -> None:
    warm = _record(generate=40.0, compile_generate=38.0, update=20.0, compile_update=19.0, tokens=1000)
    steady = [_record(generate=6.0, compile_generate=4.0, update=1.5, compile_update=0.5, tokens=1000),
              _record(generate=2.0, compile_generate=0.0, update=1.0, compile_update=0.0, tokens=3000)]
    out = step_time.summarise("after", [warm, *steady], warmup=1, build_s=0.0)
    assert out["generate_s"] == pytest.approx(2.0)  # (6-4 + 2-0) / 2
    assert out["update_s"] == pytest.approx(1.0)  # (1.5-0.5 + 1-0) / 2
    assert out["step_s"] == pytest.approx(((8.0 - 4.5) + 3.5) / 2)
    assert out["gen_tok_per_s"] == pytest.approx(2000 / 2.0)
    assert out["compile_s"] == pytest.approx(57.0 + 4.5)
    assert out["batch_s"] == pytest.approx(0.1) and out["rest_s"] == pytest.approx(out["step_s"] - 2.0 - 0.25 - 1.0)


def test_rollout_only_arms_generate_without_updating(tmp_path, capsys) -> None:
    """--rollout-only (the tiny CPU smoke): each arm generates and evaluates, the update columns read
    0, and the preemption arm's counters reach the table (rows preempted, decode iterations)."""
    import json
    step_time.main(["--tiny", "--rollout-only", "--arms", "after,pkvp", "--steps", "1", "--warmup", "0",
                    "--json", "--workdir", str(tmp_path)])
    recs = {r["arm"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(recs) == {"after", "pkvp"}
    for r in recs.values():
        assert r["update_s"] == 0.0 and r["rows"] == 0.0 and r["compile_update_s"] == 0.0
        assert r["gen_tokens"] > 0 and r["decode_calls"] >= 1 and r["decode_iterations"] >= 1
        assert r["step_s"] >= r["generate_s"] >= 0.0
        # the step's evaluations reach the table, with a column per stage (the oracle evaluator's
        # results carry no stage seconds: test_rollout checks the sums)
        assert r["evaluations"] > 0
        assert all(r[f"env_{stage}_s"] == 0.0 for stage in step_time.EVAL_STAGES)
    assert "preempted_rows" in recs["pkvp"] and recs["after"]["preempted_rows"] == 0.0


def test_an_arm_that_changes_the_pool_gets_its_own(monkeypatch) -> None:
    """Arms with the same pool arguments share one pool; `env.compile_workers=...` in an arm's
    overrides starts another (else the override would not reach the workers); each closes after
    its last arm, and none keeps a result cache."""
    from kernels_env.schedule import pool as pool_mod
    made: list = []

    class FakePool:
        def __init__(self, **kw):
            self.kw, self.closed = kw, False
            made.append(self)

        def close(self):
            self.closed = True

    monkeypatch.setattr(pool_mod, "EvalPool", FakePool)
    monkeypatch.setitem(step_time.ARMS, "cw3", ["env.compile_workers=3"])
    arms = ["after", "cw3", "resume"]
    pools = step_time.ArmPools("configs/generated/grpo.yaml", [], arms)
    first = pools.get("after")
    pools.done("after")
    assert not first.closed  # `resume` uses it again
    cw3 = pools.get("cw3")
    assert cw3 is not first and cw3.kw["compile_workers"] == 3 and first.kw["compile_workers"] == 12
    pools.done("cw3")
    assert cw3.closed and pools.get("resume") is first
    pools.done("resume")
    assert first.closed and len(made) == 2 and all(p.kw["cache"] is False for p in made)
    pools.close()


def test_a_lagged_arm_warms_up_until_its_first_update(tmp_path, capsys) -> None:
    """rollout.update_lag=1 updates nothing at a run's first step: the `lag1` arm runs one warm-up
    step more than --warmup, so its timed steps all update (and its first update compiles in warm-up)."""
    import json
    step_time.main(["--tiny", "--arms", "lag1", "--steps", "1", "--warmup", "1", "--json",
                    "--workdir", str(tmp_path)])
    (rec,) = json.loads(capsys.readouterr().out)
    assert rec["arm"] == "lag1" and rec["steps"] == 3
    assert rec["rows"] > 0 and rec["trainable"] > 0 and rec["update_s"] > 0.0
