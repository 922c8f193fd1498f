"""Config: YAML + dotted overrides, typed validation with clear errors, round trip of the resolved config."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from leap_jax.train.config import Config, ConfigError, from_dict, load_config, save_config, to_dict

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
CONFIGS = sorted(CONFIG_DIR.glob("**/*.yaml"))
EXPERIMENT_ARMS = ("leap", "multiturn", "grpo", "trloo", "rank_no_dcp", "dcp_binary")


def test_defaults_are_the_paper_settings():
    cfg = load_config(None)
    assert cfg.algorithm.name == "leap"
    assert (cfg.rollout.group_size, cfg.rollout.max_turns) == (8, 3)
    assert cfg.dcp.t_min == 0.5 and cfg.dcp.t_max is None  # = t_min 4, t_max 7 for G = 8
    assert (cfg.loss.eps_low, cfg.loss.eps_high, cfg.loss.kl_beta) == (0.2, 0.28, 0.0)


def test_yaml_and_overrides(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({"rollout": {"group_size": 6}, "train": {"steps": 5}}))
    cfg = load_config(p, ["train.steps=7", "dcp.t_min=3", "tasks.names=[relu, tanh]", "env.gpu_workers=null",
                          "optimizer.lr=3e-5"])
    assert cfg.rollout.group_size == 6
    assert cfg.train.steps == 7
    assert cfg.dcp.t_min == 3 and isinstance(cfg.dcp.t_min, int)  # an int stays a count
    assert cfg.tasks.names == ["relu", "tanh"]
    assert cfg.env.gpu_workers is None
    assert cfg.optimizer.lr == pytest.approx(3e-5)
    assert isinstance(load_config(None, ["optimizer.lr=1"]).optimizer.lr, float)  # int accepted for float


def test_round_trip(tmp_path):
    cfg = load_config(None, ["algorithm.name=kevin", "rollout.scripted_mix.enabled=true"])
    save_config(cfg, tmp_path / "config.yaml")
    again = load_config(tmp_path / "config.yaml")
    assert again == cfg
    assert to_dict(from_dict(to_dict(cfg))) == to_dict(cfg)


@pytest.mark.parametrize("override, needle", [
    (["train.stpes=3"], "did you mean 'steps'"),
    (["trian.steps=3"], "did you mean 'train'"),
    (["train.steps=ten"], "train.steps='ten': expected an int"),
    (["logging.jsonl=1"], "expected a bool"),
    (["rollout.group_size=1"], "group_size=1 must be >= 2"),
    (["algorithm.name=grpo"], "grpo is single-turn"),
    (["algorithm.name=lep"], "did you mean 'leap'"),
    (["dcp.t_min=9"], "expected 0..8"),
    (["dcp.t_min=1.5"], "expected it in [0, 1]"),
    (["dcp.t_min=6", "dcp.t_max=3"], "no group could ever be debugged"),
    (["model.source=hf"], "needs model.path"),
    (["loss.aggregation=mean"], "expected one of token-mean"),
    (["sampling.top_p=0"], "top_p=0.0"),
    (["rollout.scripted_mix.fraction=2"], "expected a probability"),
    (["train.steps"], "expected KEY=VALUE"),
    (["train=3"], "train=3: expected a mapping"),
    (["train.steps.x=3"], "is a value, not a section"),
    (["env.exec_workers_per_gpu=0"], "env.exec_workers_per_gpu=0: expected > 0"),
])
def test_errors_name_the_problem(override, needle):
    with pytest.raises(ConfigError) as e:
        load_config(None, override)
    assert needle in str(e.value)


def test_grpo_single_turn_is_valid():
    cfg = load_config(None, ["algorithm.name=grpo", "rollout.max_turns=1"])
    assert cfg.rollout.max_turns == 1


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


@pytest.mark.parametrize("path", CONFIGS, ids=[str(p.relative_to(CONFIG_DIR)) for p in CONFIGS])
def test_shipped_configs_validate(path):
    if "qwen" in path.name:  # the template's one required edit is the model path
        cfg = load_config(path, ["model.path=/some/local/folder"])
    else:
        cfg = load_config(path)
    assert isinstance(cfg, Config)


def test_base_inheritance(tmp_path):
    (tmp_path / "a.yaml").write_text(yaml.safe_dump({"rollout": {"group_size": 6, "max_turns": 2},
                                                     "train": {"steps": 9}}))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({"base": "a.yaml", "rollout": {"max_turns": 3}}))
    cfg = load_config(tmp_path / "b.yaml")
    assert (cfg.rollout.group_size, cfg.rollout.max_turns, cfg.train.steps) == (6, 3, 9)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"base": "c.yaml"}))
    with pytest.raises(ConfigError, match="loops back"):
        load_config(tmp_path / "c.yaml")


def _flat(d: dict, prefix: str = "") -> dict[str, object]:
    """{"a.b": value} of a nested mapping's leaves."""
    out: dict[str, object] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


@pytest.mark.parametrize("setting", ["experiment", "generated", "presets/headline_2026-12"])
def test_a_settings_arm_changes_only_what_its_arm_file_names(setting):
    """Setting x arm: each <setting>/<arm>.yaml is the setting's common.yaml with arms/<arm>.yaml over
    it, so the arm file (plus the few keys the setting's arm file sets itself) shows all an arm changes."""
    folder = CONFIG_DIR / setting
    common = _flat(to_dict(load_config(folder / "common.yaml")))
    for arm in EXPERIMENT_ARMS:
        raw = yaml.safe_load((folder / f"{arm}.yaml").read_text())
        arm_file = (CONFIG_DIR / "arms" / f"{arm}.yaml")
        assert [(folder / b).resolve() for b in raw.pop("base")] == [folder / "common.yaml", arm_file]
        named = set(_flat(yaml.safe_load(arm_file.read_text()))) | set(_flat(raw))
        resolved = _flat(to_dict(load_config(folder / f"{arm}.yaml")))
        changed = {k for k, v in resolved.items() if common.get(k) != v}
        assert resolved["algorithm.name"] == arm
        assert changed <= named, f"{setting}/{arm}.yaml changes {sorted(changed - named)} that no arm file names"


def test_defaults_take_the_measured_fast_path():
    """The code's defaults are the fast path wherever it samples the same tokens or distribution
    (docs/options.md); the headline preset keeps the settings that page ran with."""
    cfg = load_config(None)
    s, r = cfg.sampling, cfg.rollout
    assert (s.kv_reuse, s.attention, s.prefill_attention, s.compact_factor, s.speculate, s.speculate_scope) == \
        (True, "auto", "auto", 4, 8, "continued")
    assert (r.pipeline_turns, r.preempt, r.overlap_chunks, cfg.optimizer.attention) == (True, 0.25, 1, "auto")
    preset = load_config(CONFIG_DIR / "presets" / "headline_2026-12" / "leap.yaml")
    assert (preset.sampling.kv_reuse, preset.sampling.speculate, preset.rollout.pipeline_turns) == (False, 0, False)


def test_experiment_arms_differ_only_in_the_algorithm():
    """Every arm of configs/experiment starts from the same policy, samples, splits, evaluates and
    trains for the same time; only the algorithm (and its DCP / reward settings) differs."""
    arms = {a: to_dict(load_config(CONFIG_DIR / "experiment" / f"{a}.yaml")) for a in EXPERIMENT_ARMS}
    shared = ("model", "tokenizer", "sampling", "tasks", "env", "optimizer", "eval", "checkpoint")
    ref = arms["leap"]
    for name, d in arms.items():
        for section in shared:
            assert d[section] == ref[section], f"{name}: section {section!r} differs from leap's"
        for key in ("group_size", "prompts_per_step", "max_context_tokens"):
            assert d["rollout"][key] == ref["rollout"][key], f"{name}: rollout.{key}"
        assert d["train"]["time_budget_s"] == ref["train"]["time_budget_s"]
    assert ref["model"]["remat"] is True  # the update of 8 x 4096-token rows needs it (32 GiB without)
    assert {d["algorithm"]["name"] for d in arms.values()} >= {"leap", "multiturn", "grpo", "trloo"}


def test_the_env_section_sets_every_field_of_the_environments_config():
    """`env:` builds kernels_env's EnvConfig in one place: each of its fields is settable (no seed unless
    asked: fresh inputs every evaluation; timing resolved by the trainer, the stage limits from
    *_timeout), defaults are EnvConfig's own, and EnvConfig's rules reject a bad value under its key."""
    import dataclasses

    from kernels_env.core.config import EnvConfig, StageLimits
    assert load_config(None, []).env.env_config(True) == EnvConfig()
    values = {"flush_l2": False, "suspicious_speedup": 5.0, "max_log_chars": 100, "cpu_opt_level": "-O2",
              "cache_expected": False, "expected_cache_bytes": 1024, "timing_budget_s": 2.0, "arch": "sm_80"}
    cfg = load_config(None, [f"env.{k}={v}" for k, v in values.items()]
                      + ["env.parse_timeout=3", "env.timing_timeout=9"])
    env = cfg.env.env_config(False, 7)
    assert {k: getattr(env, k) for k in values} == values and (env.seed, env.timing) == (7, False)
    assert env.limits == StageLimits(parse=3.0, timing=9.0)
    mapped = {"seed", "timing", "limits", "backend"}
    settable = {f.name for f in dataclasses.fields(type(cfg.env))}
    assert {f.name for f in dataclasses.fields(EnvConfig)} - mapped <= settable
    with pytest.raises(ConfigError, match=r"env.expected_cache_bytes=-1; expected an integer >= 0"):
        load_config(None, ["env.expected_cache_bytes=-1"])
