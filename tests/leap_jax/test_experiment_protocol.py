"""The comparison protocol checked from the runs' files: arms of one seed differ only in the algorithm,
every run stopped at its plateau, one family version, decisions on the validation split; the report
refuses a page that breaks it unless told to list the breaches."""
from __future__ import annotations

import json

import yaml

from leap_jax.experiment import driver as experiment
from leap_jax.experiment import protocol as ep
from leap_jax.train.metrics import METRICS_FILE

BASE = {"algorithm": {"name": "leap", "credit": "trajectory"}, "rollout": {"max_turns": 3},
        "optimizer": {"micro_batch_tokens": 4096},
        "tasks": {"source": "generated", "generated_held_out": 256, "generated_validation": 128,
                  "generated_version": "v2"},
        "train": {"seed": 0, "run_dir": "x", "plateau": {"metric": "validation/acc@1", "window": 3, "tol": 0.01,
                                                        "min_steps": 100}},
        "eval": {"max_tasks": None}}


def _run(out, name, algorithm="leap", reason="plateau", accs=(0.2, 0.4, 0.5), **changes):
    """A finished run directory: config.yaml (BASE with `changes` as dotted keys), finished.json and
    a metrics file with one held-out and validation evaluation per step."""
    cfg = json.loads(json.dumps(BASE))
    cfg["algorithm"]["name"] = algorithm
    cfg["train"]["run_dir"] = str(out / name)
    for key, value in changes.items():
        *path, last = key.split("__")
        node = cfg
        for p in path:
            node = node.setdefault(p, {})
        node[last] = value
    d = out / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    (d / "finished.json").write_text(json.dumps({"reason": reason, "step": len(accs) - 1}))
    (d / METRICS_FILE).write_text("".join(
        json.dumps({"step": s, "time/train_total": 10.0 * (s + 1), "heldout/acc@1": a, "validation/acc@1": a}) + "\n"
        for s, a in enumerate(accs, start=-1)))
    return d


def test_arms_that_differ_only_in_the_algorithm_meet_the_protocol(tmp_path):
    dirs = [_run(tmp_path, "leap-s0"), _run(tmp_path, "multiturn-s0", "multiturn"),
            _run(tmp_path, "grpo-s0", "grpo", rollout__max_turns=1)]  # a single-turn arm has one turn
    check = ep.check_protocol(dirs)
    assert check.breaches == []
    assert any("within 0.01 = 1.28 tasks of 128" in n for n in check.notes)  # the validation split's size
    assert "meets the protocol" in ep.protocol_markdown(check)


def test_each_breach_is_named(tmp_path):
    dirs = [_run(tmp_path, "leap-s0"),
            _run(tmp_path, "multiturn-s0", "multiturn", reason="time_budget", optimizer__micro_batch_tokens=16384,
                 rollout__max_turns=2),
            _run(tmp_path, "grpo-s0", "grpo", rollout__max_turns=1, tasks__generated_version="v1")]
    breaches = ep.check_protocol(dirs).breaches
    assert any("`leap-s0` and `multiturn-s0` differ beyond the algorithm in 2 setting(s)" in b
               and "optimizer.micro_batch_tokens: 4096 vs 16384" in b and "rollout.max_turns: 3 vs 2" in b
               for b in breaches)
    assert any("`leap-s0` and `grpo-s0` differ" in b and "tasks.generated_version" in b for b in breaches)
    assert any(b.startswith("task family versions differ") for b in breaches)
    assert "`multiturn-s0` stopped on `time_budget` at step 2, not at the plateau rule" in breaches


def test_a_plateau_rule_on_the_reported_split_is_a_breach(tmp_path):
    dirs = [_run(tmp_path, f"{a}-s1", a, train__plateau__metric="heldout/acc@1") for a in ("leap", "multiturn")]
    (breach,) = ep.check_protocol(dirs).breaches
    assert "reads `heldout/acc@1`, a split the page reports" in breach


def test_runs_before_the_setting_are_the_first_family_version():
    assert ep.family_version({"tasks.source": "generated"}) == "v1"
    assert ep.family_version({"tasks.source": "suite"}) is None


def test_the_report_refuses_a_page_that_breaks_the_protocol_unless_told(tmp_path, capsys):
    _run(tmp_path, "leap-s0")
    _run(tmp_path, "multiturn-s0", "multiturn", optimizer__micro_batch_tokens=16384)
    argv = ["--out", str(tmp_path), "--arms", "leap,multiturn", "--seeds", "0", "--metric", "heldout/acc@1",
            "--report-only", "--config-dir", str(experiment.ROOT / "configs" / "generated")]
    assert experiment.main(argv) == 2
    assert "optimizer.micro_batch_tokens: 4096 vs 16384" in capsys.readouterr().err
    assert not (tmp_path / "report" / "experiment.md").exists()
    assert experiment.main(argv + ["--accept-protocol-breaks"]) == 0
    page = (tmp_path / "report" / "experiment.md").read_text()
    assert page.startswith("## Protocol\n\n**This comparison does not meet the protocol")
    assert "## Time to target as a curve over target levels" in page


def test_settings_varied_by_design_are_allowed_and_named(tmp_path):
    dirs = [_run(tmp_path, "grpo-s0", "grpo"), _run(tmp_path, "grpo_lag-s0", "grpo", rollout__update_lag=1)]
    assert "rollout.update_lag: '(unset)' vs 1" in ep.check_protocol(dirs).breaches[0]
    check = ep.check_protocol(dirs, arm_settings=["rollout.update_lag"])
    assert check.breaches == [] and "Arms differ by design in: `rollout.update_lag`." in check.notes


def test_the_generated_arm_configs_meet_the_protocol():
    """Every arm of configs/generated differs from leap's only in its algorithm, and each sets the
    comparison's rules: family version, validation split, plateau rule on it, periodic Acc@3."""
    import dataclasses

    from leap_jax.train.config import load_config
    flat = {}
    for arm in ("leap", "multiturn", "grpo", "dcp_binary", "rank_no_dcp", "trloo"):
        cfg = load_config(experiment.ROOT / "configs" / "generated" / f"{arm}.yaml")
        flat[arm] = ep.flatten(dataclasses.asdict(cfg))
        assert cfg.train.plateau.metric == "validation/acc@1" and cfg.tasks.generated_validation > 0
        assert cfg.eval.feedback_interval and cfg.eval.feedback_turns == 3 and cfg.tasks.generated_version == "v2"
    for arm, c in flat.items():
        single = ep._single_turn(c) != ep._single_turn(flat["leap"])
        assert ep.config_differences(flat["leap"], c, single) == [], arm


def test_runs_of_different_family_versions_are_never_reported_together(tmp_path, capsys):
    _run(tmp_path, "leap-s0")
    _run(tmp_path, "multiturn-s0", "multiturn", tasks__generated_version="v1")
    argv = ["--out", str(tmp_path), "--arms", "leap,multiturn", "--seeds", "0", "--metric", "heldout/acc@1",
            "--report-only", "--accept-protocol-breaks", "--config-dir", str(experiment.ROOT / "configs" / "generated")]
    assert experiment.main(argv) == 2
    assert "task family versions differ: leap-s0 v2, multiturn-s0 v1" in capsys.readouterr().err
    assert not (tmp_path / "report" / "experiment.md").exists()
