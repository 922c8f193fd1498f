"""`python -m leap_jax.experiment` end to end on tiny CPU arms (cpu backend, scripted mix), resumed
across calls; the bf16 policy export; argument errors."""
from __future__ import annotations

import json
from pathlib import Path

import jax
import ml_dtypes
import numpy as np
import pytest

from leap_jax.experiment import driver as experiment
from leap_jax.models import decoder
from leap_jax.models.config import ModelConfig
from leap_jax.models.hf import find_tensors, load_hf_checkpoint, save_hf_checkpoint
from leap_jax.train.metrics import read_metrics
from tests.leap_jax._trainer_helpers import cpu_backend_works

TINY_ARM = """
model: {source: random, hidden_size: 32, intermediate_size: 64, num_layers: 1, num_heads: 2, num_kv_heads: 1}
tokenizer: {kind: bpe, vocab_size: 600}
sampling: {max_new_tokens: 24}
rollout:
  group_size: 2
  max_turns: 2
  prompts_per_step: 1
  max_context_tokens: 1024
  scripted_mix: {enabled: true, fraction: 1.0, p_good: 0.5}
algorithm: {name: ALGO}
dcp: {t_min: 1, t_max: 1}
tasks: {names: [relu, tanh, sigmoid], held_out_fraction: 0.34}
env: {backend: cpu, pool_mode: inline, sizes: small, correctness_trials: 1, timing: false}
optimizer: {lr: 1.0e-2, micro_batch_size: 2, pad_to_multiple: 128}
train: {steps: 2}
checkpoint: {interval: 100}
eval: {interval: 1, train_tasks: true, at_start: true, turns: 2, samples: 1, final_turns: 2, final_suite: true}
logging: {progress_bar: false, tensorboard: false}
"""


@pytest.mark.slow
def test_driver_runs_resumes_and_reports(tmp_path, capsys):
    if not cpu_backend_works():
        pytest.skip("the cpu backend cannot score the relu solution on this machine")
    cfg_dir = tmp_path / "cfg"
    cfg_dir.mkdir()
    for algo in ("leap", "multiturn"):
        (cfg_dir / f"{algo}.yaml").write_text(TINY_ARM.replace("ALGO", algo))
    out = tmp_path / "exp"
    base = ["--out", str(out), "--arms", "leap,multiturn", "--seeds", "3", "--config-dir", str(cfg_dir),
            "--policy", "none", "--metric", "heldout/acc@1"]
    # call 1: one run only, and that one stopped by its wall budget after its first step
    assert experiment.main(base + ["--max-runs", "1", "train.max_wall_s=0.001"]) == 0
    state = json.loads((out / "state.json").read_text())
    assert state["leap-s3"] == "resumable" and state["multiturn-s3"].startswith("new (not run")
    assert [r["step"] for r in read_metrics(out / "leap-s3")] == [-1, 0]
    assert "run the same command again" in capsys.readouterr().out
    # the shared policy was evaluated once, in start_eval, and the run reused that record
    shared = json.loads((out / "start_eval" / "start_eval.json").read_text())["metrics"]
    start = read_metrics(out / "leap-s3")[0]
    assert start["eval/start_shared"] == 1.0 and start["train_eval/acc@2"] == shared["train_eval/acc@2"]
    assert not (out / "leap-s3" / "start_eval.json").exists()
    # call 2: resumes leap, runs multiturn; both finish; the report covers both
    assert experiment.main(base) == 0
    state = json.loads((out / "state.json").read_text())
    assert state == {"leap-s3": "finished", "multiturn-s3": "finished"}
    for name in ("leap-s3", "multiturn-s3"):
        rows = read_metrics(out / name)
        assert [r["step"] for r in rows] == [-1, 0, 1]
        assert all("train_eval/acc@2" in r and "heldout/acc@2" in r for r in rows)
        assert json.loads((out / name / "finished.json").read_text())["reason"] == "steps"
    cfg = (out / "leap-s3" / "config.yaml").read_text()
    assert "seed: 3" in cfg and "name: leap" in cfg
    page = (out / "report" / "experiment.md").read_text()
    assert "| leap | 3 |" in page and "| multiturn | 3 |" in page and "Target per seed" in page
    assert "leap-s3, multiturn-s3: one shared greedy evaluation of the starting policy" in page
    # the final evaluations (2 turns of feedback; held-out, training and suite) of the start and each run
    for d in ("start_eval", "leap-s3", "multiturn-s3"):
        fin = json.loads((out / d / "final_eval.json").read_text())
        assert fin["turns"] == 2 and fin["splits"]["suite"]["tasks"] == 86 and fin["splits"]["heldout"]["tasks"] == 1
    assert "| start policy | - |" in page and "## How DCP spent the turns" in page
    assert "steps to target, `multiturn` / `leap`" in page
    for name in ("accuracy_vs_time.png", "eval_accuracy_vs_time.png", "summary.md", "seeds_heldout_acc@1.png"):
        assert (out / "report" / name).is_file()
    # call 3: nothing left to run
    assert experiment.main(base) == 0
    assert "not finished" not in capsys.readouterr().out


def test_export_policy_is_bf16_sharded_and_loads_back(tmp_path):
    mcfg = ModelConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                       num_kv_heads=2, architecture="LlamaForCausalLM", eos_token_ids=(2,), pad_token_id=0)
    params = decoder.init(mcfg, jax.random.key(0))
    src = tmp_path / "sft_model"
    save_hf_checkpoint(str(src), mcfg, params)
    (src / "tokenizer.json").write_text("{}")
    dst = experiment.export_policy(src, tmp_path / "policy", max_shard_bytes=40_000)
    assert (dst / "tokenizer.json").read_text() == "{}" and (dst / "model.safetensors.index.json").is_file()
    assert len({v for v in find_tensors(str(dst)).values()}) > 1  # several shard files
    assert all(p.stat().st_size <= 40_000 + 4096 for p in dst.glob("*.safetensors"))
    got_cfg, got = load_hf_checkpoint(str(dst), as_numpy=True)
    _, ref = load_hf_checkpoint(str(src), as_numpy=True)
    assert got_cfg.num_layers == 2 and got_cfg.vocab_size == 300
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(ref), strict=False):
        assert a.dtype == ml_dtypes.bfloat16
        np.testing.assert_array_equal(a, b.astype(ml_dtypes.bfloat16))
    assert not (tmp_path / "policy.tmp").exists()


def test_bad_arguments_are_clear(tmp_path, capsys):
    assert experiment.main(["--out", str(tmp_path), "--arms", "nope", "--config-dir", str(tmp_path)]) == 2
    assert "no config" in capsys.readouterr().err
    assert experiment.main(["--out", str(tmp_path), "--seeds", "a,b"]) == 2
    assert "expected integers" in capsys.readouterr().err
    assert experiment.main(["--out", str(tmp_path), "--policy", str(tmp_path / "missing")]) == 2
    assert "no config.json" in capsys.readouterr().err
    assert Path(experiment.ROOT / "configs" / "experiment" / "leap.yaml").is_file()


@pytest.mark.slow
def test_driver_builds_the_shared_policy_from_the_sft_config_once(tmp_path, capsys):
    if not cpu_backend_works():
        pytest.skip("the cpu backend cannot score the relu solution on this machine")
    out = tmp_path / "exp"
    args = ["--out", str(out), "--arms", "leap", "--seeds", "0", "--max-runs", "0",
            "--sft-config", str(experiment.ROOT / "configs" / "bootstrap_sft_tiny.yaml"),
            "--sft-override", "sft.steps=3", "--sft-override", "sft.eval_held_out=false"]
    assert experiment.main(args) == 0
    policy = out / "policy"
    assert (out / "sft" / "sft_done.json").is_file() and (policy / "sft_eval.json").is_file()
    assert "steps: 3" in (out / "sft" / "config.yaml").read_text()
    mcfg, params = load_hf_checkpoint(str(policy), as_numpy=True)
    assert all(a.dtype == ml_dtypes.bfloat16 for a in jax.tree_util.tree_leaves(params))
    assert (policy / "tokenizer.json").is_file() and mcfg.num_layers == 2
    assert json.loads((out / "state.json").read_text()) == {"leap-s0": "new (not run: --max-runs reached)"}
    capsys.readouterr()
    # a second call reuses the policy (no SFT run)
    (out / "sft" / "sft_done.json").unlink()
    assert experiment.main(args) == 0
    assert "(existing)" in capsys.readouterr().out and not (out / "sft" / "sft_done.json").exists()


def test_arm_runs_share_one_compilation_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    env = experiment.compilation_cache_env(tmp_path / "exp")
    assert env == {"JAX_COMPILATION_CACHE_DIR": str((tmp_path / "exp" / "jax_cache").resolve())}
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/elsewhere")
    assert experiment.compilation_cache_env(tmp_path / "exp") == {}  # the caller's choice wins


def test_parallel_runs_overlap_up_to_the_limit_and_the_report_says_so(tmp_path, monkeypatch):
    """--parallel 2 over three runs: never more than two alive, all collected in order, and
    launch.json plus the report's note record the shared machine."""
    out = tmp_path / "exp"
    out.mkdir()
    script = ("import json,os,sys,time; from pathlib import Path; d=Path(sys.argv[1]); d.mkdir(parents=True,"
              " exist_ok=True); t0=time.time(); time.sleep(0.6); (d/'finished.json').write_text("
              "json.dumps({'t0': t0, 't1': time.time()}))")

    def fake_start(cmd, log_path, env_extra=None):
        run_dir = next(c.split("=", 1)[1] for c in cmd if c.startswith("train.run_dir="))
        return experiment.subprocess.Popen([experiment.sys.executable, "-c", script, run_dir])

    monkeypatch.setattr(experiment, "_start", fake_start)
    args = experiment._parse_args(["--out", str(out), "--arms", "leap,multiturn,grpo", "--seeds", "0",
                                   "--policy", "none", "--parallel", "2", "--no-shared-start", "env.compile_workers=2"])
    states = experiment.run_arms(args, out, None, experiment.time.perf_counter(), log=lambda *_: None)
    assert states == {"leap-s0": "finished", "multiturn-s0": "finished", "grpo-s0": "finished"}
    spans = [json.loads((out / n / "finished.json").read_text()) for n in states]
    for t in np.linspace(min(s["t0"] for s in spans), max(s["t1"] for s in spans), 200):
        assert sum(s["t0"] <= t < s["t1"] for s in spans) <= 2
    assert spans[0]["t0"] < spans[1]["t1"] and spans[1]["t0"] < spans[0]["t1"]  # the first two overlapped
    launch = json.loads((out / experiment.LAUNCH_FILE).read_text())
    (entry,) = launch["grpo-s0"]
    assert entry["parallel"] == 2 and entry["overrides"] == ["env.compile_workers=2"]
    assert {launch[n][0]["call"] for n in states} == {entry["call"]}  # one call launched all three
    note = experiment.launch_notes(out, ["leap-s0", "multiturn-s0", "grpo-s0"])
    assert len(note) == 1 and f"up to 2 at once: grpo-s0, leap-s0, multiturn-s0 (call of {entry['call']})" in note[0]
    assert entry["ended"] - entry["started"] >= 0.6  # stamped by the driver around the 0.6 s sleep
    # leap and multiturn ran together, grpo partly alone after the first of them ended
    assert "Wall seconds each run spent with another run" in note[0] and "grpo-s0 " in note[0]
    assert experiment.launch_notes(out, ["trloo-s0"]) == []


def test_fail_fast_stops_the_runs_launched_with_a_failed_one(tmp_path, monkeypatch):
    """--fail-fast: leap fails at once; multiturn, launched with it, is stopped long before its 60 s
    sleep ends, and grpo (waiting for a slot) never starts. Without the flag both would run."""
    out = tmp_path / "exp"
    out.mkdir()
    started: list[str] = []

    def fake_start(cmd, log_path, env_extra=None):
        run_dir = next(c.split("=", 1)[1] for c in cmd if c.startswith("train.run_dir="))
        started.append(Path(run_dir).name)
        code = "import sys; sys.exit(3)" if run_dir.endswith("leap-s0") else "import time; time.sleep(60)"
        return experiment.subprocess.Popen([experiment.sys.executable, "-c", code])

    monkeypatch.setattr(experiment, "_start", fake_start)
    args = experiment._parse_args(["--out", str(out), "--arms", "leap,multiturn,grpo", "--seeds", "0",
                                   "--policy", "none", "--parallel", "2", "--no-shared-start", "--fail-fast"])
    t0 = experiment.time.perf_counter()
    states = experiment.run_arms(args, out, None, t0, log=lambda *_: None)
    assert experiment.time.perf_counter() - t0 < 45  # multiturn's 60 s sleep was cut short
    assert started == ["leap-s0", "multiturn-s0"]
    assert states["leap-s0"].startswith("new (exit 3")
    assert states["multiturn-s0"].startswith("new (stopped: leap-s0 failed, --fail-fast")
    assert states["grpo-s0"] == "new (not run: leap-s0 failed, --fail-fast)"
    assert not experiment._parse_args(["--out", str(out), "--arms", "leap"]).fail_fast


def test_fail_fast_with_two_runs_failing_in_one_poll(tmp_path, monkeypatch):
    """Two runs end with errors before the driver looks: both are reported as failed, the third is
    stopped, and nothing is collected twice (stopping the others once removed a run still being reaped)."""
    out = tmp_path / "exp"
    out.mkdir()

    def fake_start(cmd, log_path, env_extra=None):
        run_dir = next(c.split("=", 1)[1] for c in cmd if c.startswith("train.run_dir="))
        code = "import time; time.sleep(60)" if run_dir.endswith("grpo-s0") else "import sys; sys.exit(3)"
        return experiment.subprocess.Popen([experiment.sys.executable, "-c", code])

    monkeypatch.setattr(experiment, "_start", fake_start)
    monkeypatch.setattr(experiment.time, "sleep", lambda s: experiment.subprocess.run(  # let both exit first
        [experiment.sys.executable, "-c", "import time; time.sleep(1.5)"]))
    args = experiment._parse_args(["--out", str(out), "--arms", "leap,multiturn,grpo", "--seeds", "0",
                                   "--policy", "none", "--parallel", "3", "--no-shared-start", "--fail-fast"])
    states = experiment.run_arms(args, out, None, experiment.time.perf_counter(), log=lambda *_: None)
    assert states["leap-s0"].startswith("new (exit 3") and states["multiturn-s0"].startswith("new (exit 3")
    assert states["grpo-s0"].startswith("new (stopped: leap-s0 failed, --fail-fast")


def test_a_fresh_restart_drops_the_failed_attempts_launches(tmp_path):
    """A run that failed without a checkpoint starts over: only the launch that produced its results
    is kept, while a resumed run keeps every launch it ran under."""
    out = tmp_path / "exp"
    out.mkdir()
    experiment.record_launch(out, "leap-s0", 8, ["a=1"], fresh=True)  # out of memory, no checkpoint
    experiment.record_launch(out, "grpo-s0", 8, ["a=1"], fresh=True)
    experiment.record_launch(out, "leap-s0", 5, ["a=2"], fresh=True)  # started again from scratch
    experiment.record_launch(out, "grpo-s0", 5, ["a=2"], fresh=False)  # resumed from its checkpoint
    launch = json.loads((out / experiment.LAUNCH_FILE).read_text())
    assert [(c["parallel"], c["overrides"]) for c in launch["leap-s0"]] == [(5, ["a=2"])]
    assert [c["parallel"] for c in launch["grpo-s0"]] == [8, 5]
    note = experiment.launch_notes(out, ["leap-s0", "grpo-s0"])[0]
    assert "up to 5 at once: leap-s0" in note and "up to 8 at once: grpo-s0" in note


def test_shared_seconds_is_the_overlap_with_the_union_of_other_runs():
    """A run's seconds with any other run going: overlapping others count once, gaps not at all, and
    a launch without an end stamp (older records, or still going) gives no figure."""
    data = {"a": [{"started": 0.0, "ended": 100.0}, {"started": 200.0, "ended": 260.0}],
            "b": [{"started": 10.0, "ended": 50.0}, {"started": 190.0, "ended": 230.0}],
            "c": [{"started": 40.0, "ended": 70.0}],        # overlaps b: [10, 70] counted once
            "d": [{"started": 120.0, "ended": 150.0}],      # between a's launches: no overlap
            "old": [{"parallel": 2}]}
    assert experiment.shared_seconds(data, "a") == (160.0, 60.0 + 30.0)
    assert experiment.shared_seconds(data, "d") == (30.0, 0.0)
    assert experiment.shared_seconds(data, "old") is None
    assert experiment.shared_seconds({"a": [{"started": 0.0, "ended": 5.0}, {"started": 9.0}]}, "a") is None


def test_the_note_says_how_long_each_run_ran_alone(tmp_path):
    """grpo ended first; grpo_lag's last 115 s ran alone, and the note says so."""
    data = {"grpo-s0": [{"parallel": 2, "overrides": [], "call": "w1", "started": 0.0, "ended": 1000.0}],
            "grpo_lag-s0": [{"parallel": 2, "overrides": [], "call": "w1", "started": 0.0, "ended": 1115.0}]}
    (tmp_path / experiment.LAUNCH_FILE).write_text(json.dumps(data))
    note = experiment.launch_notes(tmp_path, ["grpo-s0", "grpo_lag-s0"])[0]
    assert "grpo-s0 1000 of 1000 s, grpo_lag-s0 1000 of 1115 s (115 s alone)." in note


def test_runs_of_different_calls_are_named_apart(tmp_path):
    """Seeds run in different calls share the machine only with their own call's runs."""
    out = tmp_path
    for name, call in (("leap-s0", "w1"), ("grpo-s0", "w1"), ("leap-s1", "w2"), ("grpo-s1", "w2")):
        experiment.record_launch(out, name, 3, [], fresh=True, call=call)
    note = experiment.launch_notes(out, ["leap-s0", "grpo-s0", "leap-s1", "grpo-s1"])[0]
    assert "up to 3 at once: grpo-s0, leap-s0 (call of w1); up to 3 at once: grpo-s1, leap-s1 (call of w2)" in note


def test_parallel_must_be_positive(capsys):
    assert experiment.main(["--parallel", "0", "--report-only"]) == 2
    assert "--parallel=0: expected >= 1" in capsys.readouterr().err


def test_report_only_keeps_the_launchs_state_record(tmp_path):
    out = tmp_path / "exp"
    out.mkdir()
    record = {"leap-s2": "finished", "multiturn-s2": "finished"}
    (out / "state.json").write_text(json.dumps(record))
    assert experiment.main(["--out", str(out), "--arms", "leap,multiturn", "--seeds", "2",
                            "--metric", "heldout/acc@1", "--report-only"]) == 0
    assert json.loads((out / "state.json").read_text()) == record


@pytest.mark.parametrize("bad", ["grpo", "grpo/grpo", "/grpo", "a/b/c"])
def test_compare_must_name_two_arms(bad, capsys):
    assert experiment.main(["--compare", bad, "--report-only"]) == 2
    assert f"--compare={bad!r}: expected ARM/BASELINE" in capsys.readouterr().err


def test_report_only_with_compare_heads_the_page_with_that_pair(tmp_path):
    from leap_jax.train.metrics import METRICS_FILE
    out = tmp_path / "exp"
    for arm, accs in (("grpo", [0.2, 0.3, 0.5]), ("grpo_lag", [0.2, 0.5, 0.5])):
        (out / f"{arm}-s0").mkdir(parents=True)
        (out / f"{arm}-s0" / METRICS_FILE).write_text("".join(
            json.dumps({"step": step, "time/train_total": 10.0 * (step + 1), "heldout/acc@1": acc}) + "\n"
            for step, acc in enumerate(accs, start=-1)))
    assert experiment.main(["--out", str(out), "--arms", "grpo,grpo_lag", "--seeds", "0", "--metric",
                            "heldout/acc@1", "--compare", "grpo_lag/grpo", "--report-only", "--accept-protocol-breaks",
                            "--config-dir", str(experiment.ROOT / "configs" / "generated")]) == 0
    page = (out / "report" / "experiment.md").read_text()
    assert "`grpo` time to target / `grpo_lag` time to target = 2" in page


def test_lower_targets_are_margins_in_the_unit_interval(capsys):
    args = experiment._parse_args(["--lower-targets", "1/256, 0.01,,"])
    assert args.lower_target_list == [1 / 256, 0.01]
    for bad in ("0", "1", "x", "1/0", "-0.1"):
        assert experiment.main(["--lower-targets", bad, "--report-only"]) == 2
        assert f"--lower-targets: {bad!r} is not a margin in (0, 1)" in capsys.readouterr().err


def test_parallel_runs_that_may_overcommit_one_gpus_memory_are_warned_about(tmp_path, monkeypatch):
    """The generated configs give each run's JAX 0.3 of a GPU (env.jax_mem_fraction): four at once are
    warned about with the numbers, three are not, and the environment variable wins over the configs."""
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)

    def parsed(*extra: str) -> object:
        return experiment._parse_args(["--out", str(tmp_path), "--config-dir", "configs/generated",
                                       "--arms", "grpo,grpo_lag", "--seeds", "1,2", *extra])

    warning = experiment.memory_overcommit(parsed("--parallel", "4"))
    assert warning is not None
    assert "--parallel 4 runs 4 at once" in warning and "up to 0.30" in warning and "1.20 of one GPU" in warning
    assert "run at most 3 at once" in warning
    assert experiment.memory_overcommit(parsed("--parallel", "3")) is None
    assert experiment.memory_overcommit(parsed("--parallel", "4", "env.jax_mem_fraction=0.2")) is None
    narrow = experiment._parse_args(["--out", str(tmp_path), "--config-dir", "configs/generated",
                                     "--arms", "grpo", "--seeds", "0", "--parallel", "4"])
    assert experiment.memory_overcommit(narrow) is None  # one run: nothing runs beside it
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.4")
    assert "up to 0.40 of its GPU's memory ($XLA_PYTHON_CLIENT_MEM_FRACTION)" in experiment.memory_overcommit(
        parsed("--parallel", "3"))
