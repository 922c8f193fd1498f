"""The trainer stops on a step whose evaluations mostly failed in the environment (env_error), with a
message naming the share, the knob and the first error; the Ray pool's host counters become per-step
metrics; the env section's Ray settings validate."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from kernels_env.core.result import Result
from kernels_env.core.status import Status
from leap_jax.rollout.policy import ScriptedPolicy
from leap_jax.train.config import ConfigError, load_config
from leap_jax.train.env_health import EnvironmentFailure, check_env_errors, pool_counter_deltas
from leap_jax.train.trainer import Trainer
from tests.leap_jax._trainer_helpers import OracleEvaluator


def _out(statuses):
    turns = [SimpleNamespace(result=Result(s, f"{s.value} here", task="t")) for s in statuses]
    bad = sum(s is Status.ENV_ERROR for s in statuses)
    return SimpleNamespace(stats={"env/evaluations": float(len(statuses)), "env/env_errors": float(bad)},
                           rows=[SimpleNamespace(turns=turns)])


def test_share_above_the_limit_stops_with_a_clear_message():
    check_env_errors(_out([Status.CORRECT] * 3 + [Status.ENV_ERROR]), 0.25, step=4)  # 25%: not above
    check_env_errors(_out([]), 0.0, step=0)  # nothing evaluated
    with pytest.raises(EnvironmentFailure) as e:
        check_env_errors(_out([Status.CORRECT, Status.ENV_ERROR, Status.ENV_ERROR]), 0.25, step=7,
                         pool_stats=lambda: {"hosts_up": 0, "host_deaths": 3, "resends": 6})
    msg = str(e.value)
    assert "step 7: 2 of 3 evaluations (67%) were env_error" in msg
    assert "env.max_env_error_fraction=0.25" in msg and "'env_error here'" in msg
    assert "hosts_up=0, host_deaths=3, resends=6" in msg
    with pytest.raises(EnvironmentFailure):
        check_env_errors(_out([Status.ENV_ERROR]), 0.0, step=0, pool_stats=lambda: 1 / 0)  # stats failing


def test_pool_counters_are_logged_as_per_step_deltas():
    counts = {"evaluations": 9, "host_deaths": 1, "host_hangs": 0, "resends": 3}
    ray_pool = SimpleNamespace(stats=lambda: dict(counts))
    seen: dict[str, int] = {}
    assert pool_counter_deltas(ray_pool, seen) == {"env/host_deaths": 1, "env/host_hangs": 0, "env/resends": 3}
    counts.update(host_hangs=1, host_deaths=2, resends=7)
    assert pool_counter_deltas(ray_pool, seen) == {"env/host_deaths": 1, "env/host_hangs": 1, "env/resends": 4}
    assert pool_counter_deltas(ray_pool, seen) == {"env/host_deaths": 0, "env/host_hangs": 0, "env/resends": 0}
    process_pool = SimpleNamespace(stats=lambda: {"evaluations": 9, "restarts": 1})
    assert pool_counter_deltas(process_pool, {}) == {} and pool_counter_deltas(object(), {}) == {}


def test_trainer_stops_before_updating_on_a_masked_batch(tmp_path):
    tiny = ["model.hidden_size=32", "model.intermediate_size=64", "model.num_layers=1", "model.num_heads=2",
            "model.num_kv_heads=1", "tokenizer.vocab_size=600", "rollout.group_size=2", "rollout.max_turns=1",
            "rollout.prompts_per_step=1", "tasks.names=[relu, tanh]", "tasks.held_out_fraction=0",
            "logging.progress_bar=false", "logging.tensorboard=false", "logging.report=false",
            "env.sizes=small", "train.steps=2", f"train.run_dir={tmp_path}"]
    tr = Trainer(load_config(None, tiny), evaluator=OracleEvaluator(env_error_tasks=("relu", "tanh")))
    tr._policy_override = ScriptedPolicy(tr.tokenizer, p_good=0.5, end_ids=[tr.streams.im_end])
    try:
        with pytest.raises(EnvironmentFailure, match="2 of 2 evaluations"):
            tr.train()
        assert tr.step == 0 and tr.updates_done == 0
    finally:
        tr.close()


def test_ray_settings_validate():
    cfg = load_config(None, ["env.pool_mode=ray", "env.ray_address=head:6379", "env.ray_host_retries=0",
                             "env.ray_heartbeat_timeout_s=12"])
    kw = cfg.env.pool_kwargs()
    assert kw["mode"] == "ray" and kw["address"] == "head:6379" and kw["host_retries"] == 0
    assert kw["heartbeat_timeout_s"] == 12
    assert "address" not in load_config(None).env.pool_kwargs()
    for override, needle in ((["env.ray_address=head:6379"], "set env.pool_mode=ray"),
                             (["env.max_env_error_fraction=2"], "env.max_env_error_fraction=2"),
                             (["env.ray_batch_jobs=0"], "env.ray_batch_jobs=0"),
                             (["env.ray_heartbeat_timeout_s=0.5"], r"env.ray_heartbeat_timeout_s=0.5: expected seconds >= 1"),
                             (["env.pool_mode=rays"], "expected one of process, inline, ray")):
        with pytest.raises(ConfigError, match=needle):
            load_config(None, override)


def test_env_errors_within_the_limit_are_logged_with_their_details():
    lines: list[str] = []
    err = Result(Status.ENV_ERROR, "exec worker unavailable: startup timed out", task="t",
                 details="Traceback ...\nTimeoutError: worker did not start")
    out = _out([Status.CORRECT] * 3)
    out.rows[0].turns.append(SimpleNamespace(result=err))
    out.stats = {"env/evaluations": 4.0, "env/env_errors": 1.0}
    check_env_errors(out, 0.25, step=58, log=lines.append)
    assert len(lines) == 1 and lines[0].startswith("step 58: 1 of 4 evaluations were env_error")
    assert "startup timed out" in lines[0] and "worker did not start" in lines[0]
    check_env_errors(_out([Status.CORRECT]), 0.25, step=59, log=lines.append)  # none: nothing logged
    assert len(lines) == 1
