"""The comparison protocol (docs/protocol.md), checked from what the runs wrote.

A comparison is fair when, within each seed, its arms differ only in the algorithm (their
`config.yaml` files are diffed), every run stopped at the plateau rule rather than a cap
(`finished.json`), every run drew its tasks from one version of the generated family, and the rule
that stopped the runs read the validation split, not the tasks the page reports. `check_protocol`
lists each breach in words; the experiment refuses to write a page with breaches unless asked to
report them loudly (pages of runs made before the protocol).
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kernels_env import FAMILY_VERSIONS
from leap_jax.experiment.report import parse_run_name
from leap_jax.train.algorithms import spec

# the only settings arms of one seed may differ in: the algorithm's own section, the turns a
# single-turn algorithm must have, and where each run writes / how long one launch may go on
ALGORITHM_PREFIXES = ("algorithm.",)
SINGLE_TURN_KEYS = ("rollout.max_turns",)
RUN_IDENTITY_KEYS = ("train.run_dir", "train.max_wall_s")
FAMILY_VERSION_KEY = "tasks.generated_version"
DECISION_SPLIT = "validation/"  # decisions made during or after training read this split


@dataclass
class ProtocolCheck:
    """The breaches of the protocol (empty: the comparison meets it) and notes the page states;
    `refusals`: breaches no page may be written with (runs of different task family versions
    measured different tasks, so no number compares them)."""
    breaches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'a.b': 1} from {'a': {'b': 1}}: a config as dotted keys (lists stay values)."""
    out: dict[str, Any] = {}
    for k, v in tree.items():
        if isinstance(v, Mapping):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def read_config(run_dir: str | Path) -> dict[str, Any]:
    """A run's config.yaml, flattened; a ValueError naming the file when there is none."""
    path = Path(run_dir) / "config.yaml"
    try:
        return flatten(yaml.safe_load(path.read_text()) or {})
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"{path}: no readable run config to check the protocol against "
                         f"({type(e).__name__})") from None


def read_stop(run_dir: str | Path) -> dict[str, Any] | None:
    """A run's finished.json (why and when it stopped), None when it has not finished."""
    try:
        data = json.loads((Path(run_dir) / "finished.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def allowed_difference(key: str, single_turn_pair: bool, arm_settings: Sequence[str] = ()) -> bool:
    """Whether two arms of one seed may differ at `key` (see ALGORITHM_PREFIXES); `arm_settings`:
    settings a comparison varies by design (e.g. rollout.update_lag for grpo_lag against grpo)."""
    return (key.startswith(ALGORITHM_PREFIXES) or key in RUN_IDENTITY_KEYS or key in arm_settings
            or (single_turn_pair and key in SINGLE_TURN_KEYS))


def config_differences(a: Mapping[str, Any], b: Mapping[str, Any], single_turn_pair: bool = False,
                       arm_settings: Sequence[str] = ()) -> list[str]:
    """'key: A vs B' for every setting two arms' flattened configs differ in beyond the algorithm."""
    keys = sorted(set(a) | set(b))
    return [f"{k}: {a.get(k, '(unset)')!r} vs {b.get(k, '(unset)')!r}" for k in keys
            if a.get(k) != b.get(k) and not allowed_difference(k, single_turn_pair, arm_settings)]


def family_version(config: Mapping[str, Any]) -> str | None:
    """The generated family's version a run drew its tasks from (the first version for runs that
    predate the setting); None for runs on the hand-written suite."""
    if config.get("tasks.source") != "generated":
        return None
    return str(config.get(FAMILY_VERSION_KEY) or FAMILY_VERSIONS[0])


def _single_turn(config: Mapping[str, Any]) -> bool:
    return spec(str(config.get("algorithm.name"))).single_turn


def plateau_note(config: Mapping[str, Any], tasks: int | None) -> str:
    """The plateau rule in words, its tolerance in tasks of the split it reads."""
    metric, window, tol = (config.get(f"train.plateau.{k}") for k in ("metric", "window", "tol"))
    if not metric:
        return "No plateau rule (train.plateau.metric unset): runs stop at train.steps or a cap."
    in_tasks = f" = {float(tol) * tasks:.2f} tasks of {tasks}" if tasks and tol is not None else ""
    return (f"Plateau rule: the last {window} evaluations of `{metric}` each within {tol}{in_tasks} of the "
            f"run's best, after at least {config.get('train.plateau.min_steps')} steps (one task is "
            f"{1 / tasks:.4f})." if tasks else f"Plateau rule on `{metric}`, window {window}, tolerance {tol}.")


def split_size(config: Mapping[str, Any], metric: str) -> int | None:
    """How many tasks the split `metric` reads has, from the run's config (generated family)."""
    split = metric.split("/", 1)[0]
    key = {"heldout": "tasks.generated_held_out", "validation": "tasks.generated_validation",
           "train_eval": "tasks.generated_train"}.get(split)
    n = config.get(key) if key else None
    cap = config.get("eval.max_tasks")
    return None if not n else int(min(n, cap) if cap else n)


def _across_seeds(configs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Per arm, the settings its seeds' runs differ in beyond the seed itself."""
    by_arm: dict[str, list[str]] = {}
    for name in configs:
        by_arm.setdefault(parse_run_name(name)[0], []).append(name)
    out = []
    for _arm, names in sorted(by_arm.items()):
        first = configs[names[0]]
        for other in names[1:]:
            diff = [d for d in config_differences(first, configs[other]) if not d.startswith("train.seed:")]
            if diff:
                out.append(f"`{names[0]}` vs `{other}`: " + ", ".join(diff))
    return out


def check_protocol(run_dirs: Sequence[str | Path], arm_settings: Sequence[str] = ()) -> ProtocolCheck:
    """Every breach of the protocol among the runs `run_dirs` (named <arm>-s<seed>); `arm_settings`:
    settings beyond the algorithm the arms differ in by design (named on the page)."""
    check = ProtocolCheck()
    if arm_settings:
        check.notes.append("Arms differ by design in: " + ", ".join(f"`{k}`" for k in arm_settings) + ".")
    configs: dict[str, dict[str, Any]] = {}
    for d in run_dirs:
        try:
            configs[Path(d).name] = read_config(d)
        except ValueError as e:
            check.breaches.append(str(e))
    by_seed: dict[int, list[str]] = {}
    for name in configs:
        by_seed.setdefault(parse_run_name(name)[1], []).append(name)
    for seed, names in sorted(by_seed.items()):
        first = names[0]
        for other in names[1:]:
            pair_single = _single_turn(configs[first]) != _single_turn(configs[other])
            diff = config_differences(configs[first], configs[other], pair_single, arm_settings)
            if diff:
                check.breaches.append(f"seed {seed}: `{first}` and `{other}` differ beyond the algorithm in "
                                      f"{len(diff)} setting(s): " + "; ".join(diff))
    seed_diffs = _across_seeds(configs)
    if seed_diffs:
        check.notes.append("Between seeds (not a breach: each ratio compares arms within one seed): "
                           + "; ".join(seed_diffs) + ".")
    versions = {n: family_version(c) for n, c in configs.items()}
    if len(set(versions.values())) > 1:
        check.refusals.append("task family versions differ: " + ", ".join(f"{n} {v}" for n, v in versions.items()))
        check.breaches.append(check.refusals[-1])
    for name, d in ((Path(d).name, d) for d in run_dirs):
        stop = read_stop(d)
        if stop is None:
            check.breaches.append(f"`{name}` has not finished (no finished.json)")
        elif stop.get("reason") != "plateau":
            check.breaches.append(f"`{name}` stopped on `{stop.get('reason')}` at step {stop.get('step')}, "
                                  "not at the plateau rule")
    metrics = sorted({str(c.get("train.plateau.metric")) for c in configs.values() if c.get("train.plateau.metric")})
    for m in metrics:
        if not m.startswith(DECISION_SPLIT):
            check.breaches.append(f"the plateau rule reads `{m}`, a split the page reports; decisions must read "
                                  f"the validation split (`{DECISION_SPLIT}acc@1`, tasks.generated_validation)")
    if configs:
        any_cfg = next(iter(configs.values()))
        check.notes.append(plateau_note(any_cfg, split_size(any_cfg, str(any_cfg.get("train.plateau.metric", "")))))
        check.notes.append("Task family version: " + ", ".join(sorted({str(v) for v in versions.values()})) + ".")
    return check


def protocol_markdown(check: ProtocolCheck) -> str:
    """The page's protocol section: the breaches, loudly, or that there are none; then the notes."""
    if check.breaches:
        head = ["**This comparison does not meet the protocol (docs/protocol.md).** Breaches, "
                f"{len(check.breaches)}:", ""] + [f"- {b}" for b in check.breaches]
    else:
        head = ["The comparison meets the protocol (docs/protocol.md): arms differ only in the algorithm, every "
                "run stopped at its plateau, one task family version, decisions on the validation split."]
    return "\n".join(head + [""] + [f"- {n}" for n in check.notes]) + "\n"
