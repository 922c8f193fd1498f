"""Input domains (kernels_env/tasks/domains.py) and the trials drawn over them (execute/domain_draws.py).

A kernel correct only on part of what a task promises, or one that writes the constant the reference
almost always returns, must not score `correct`: every task's reference must move across trials by far
more than its tolerance, and the mean expected output as a constant must fail. EnvConfig.input_domains
off must reproduce the legacy draws bit for bit (a running experiment depends on it).
"""
from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest

from kernels_env.core.config import TIMING_TRIAL_BASE, EnvConfig
from kernels_env.core.status import Status
from kernels_env.execute import domain_draws
from kernels_env.execute.harness import _reference_outputs
from kernels_env.execute.inputs import describe_distributions, make_inputs
from kernels_env.judge.compare import compare_output
from kernels_env.execute.result_cache import cache_key
from kernels_env.tasks.domains import Domain, default_domain
from kernels_env.tasks.generated import generated_task_names
from kernels_env.tasks.registry import get_task, task_names
from kernels_env.tasks.spec import Buffer, Task
from tests.kernels_env.broken_corpus import CASES_BY_ID

TRIALS = 5
SPREAD_OVER_TOLERANCE = 5  # the reference must move across trials by this many tolerances at least
GENERATED_SAMPLE = generated_task_names(4000, split="all")[::20]  # 200, every family and dtype
ALL_CHECKED = task_names() + GENERATED_SAMPLE
# sha256 (first 32 hex digits) of make_inputs over trials 0-4, seed 7, small sizes, computed on main
# before input domains existed: input_domains=False must keep producing exactly these arrays.
LEGACY_HASHES = {
    "softplus": "7db3ee75ce30e2373d0b2f224a67efad",
    "cross_entropy": "4412094302f2b6c9eafa7dbf041aa6e1",
    "hinge_loss": "549a1d380702ea8954b39430bd87bb14",
    "kl_div_batchmean": "3ed5598bcfac73e4323fd42efb31ec9d",
    "gen_ew_neg_f32_s1": "3d2d3bf2c606e6765c73cf9ec8f58476",
    "gen_ew_expn_gelu_abs_f16_s0": "f47b22185b6e29bfdd5ee323f30ac37e",
    "gen_ew_add_row_f32_s0": "5ac7ca2b8544d64a8e961525d40266dd",
}


def _draws_hash(task: Task, domains: bool) -> str:
    h = hashlib.sha256()
    for trial in range(5):
        arrays = make_inputs(task, task.size_set("small"), trial, 7, np, domains)
        for k in sorted(arrays):
            h.update(k.encode())
            h.update(np.ascontiguousarray(arrays[k]).tobytes())
    return h.hexdigest()[:32]


# ---- the switch --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(LEGACY_HASHES))
def test_input_domains_off_reproduces_the_legacy_draws(name):
    task = get_task(name)
    assert _draws_hash(task, domains=False) == LEGACY_HASHES[name]
    assert _draws_hash(task, domains=True) != LEGACY_HASHES[name]


def test_switch_is_validated_and_keys_the_caches():
    with pytest.raises(ValueError, match="input_domains='yes'"):
        EnvConfig(input_domains="yes")  # type: ignore[arg-type]
    on, off = EnvConfig(backend="cpu"), EnvConfig(backend="cpu", input_domains=False)
    text = get_task("relu").solution
    assert cache_key("relu", text, on) != cache_key("relu", text, off)
    # legacy draws keep the result-cache key they had on main before the switch existed
    assert cache_key("relu", "x", EnvConfig(backend="cpu", seed=3, input_domains=False)) == \
        "37d8aaa963f8616446ee0902ca090b959f102ec82b3018de4223ec6b3ae25a25"


def test_expected_output_cache_keys_on_the_draws():
    from kernels_env.execute.harness import _Run
    keys = []
    for domains in (True, False):
        run = object.__new__(_Run)  # only the fields _expected_key reads
        run.task, run.sizes = get_task("relu"), get_task("relu").size_set("small")
        run.config = EnvConfig(backend="cpu", input_domains=domains)
        keys.append(run._expected_key(0, 0))
    assert keys[0] != keys[1] and keys[0][-1] == domain_draws.DOMAIN_VERSION


def test_run_config_wires_the_switch():
    from leap_jax.train.config_env import EnvCfg
    from leap_jax.train.config_loader import ConfigError
    assert EnvCfg(input_domains=False).env_config(timing=False, seed=0).input_domains is False
    assert EnvCfg().env_config(timing=False, seed=0).input_domains is True
    with pytest.raises(ConfigError, match="env.input_domains=1"):
        EnvCfg(input_domains=1).check()  # type: ignore[arg-type]


def test_cli_flag_selects_the_legacy_draws():
    from kernels_env.cli import _config, build_parser
    args = ["score", "--task", "relu", "sol.md"]
    assert _config(build_parser().parse_args(args)).input_domains is True
    assert _config(build_parser().parse_args([*args, "--legacy-inputs"])).input_domains is False


@pytest.mark.parametrize("path", ["configs/generated/common.yaml", "configs/generated/bootstrap_sft.yaml"])
def test_generated_configs_draw_over_the_domains(path):
    """The 3-seed headline ran on the legacy draws; it is complete, and new runs draw over the domains."""
    import yaml
    with open(path, encoding="utf-8") as f:
        assert "input_domains" not in yaml.safe_load(f)["env"]


# ---- declaration and validation ----------------------------------------------------------------
@pytest.mark.parametrize("kwargs,match", [
    ({"kind": "complex"}, "domain kind 'complex'"),
    ({"kind": "interval", "low": 2.0, "high": 1.0}, r"\[2.0, 1.0\); expected low < high"),
    ({"kind": "interval", "low": 0.0, "high": "N"}, "expected numbers"),
    ({"kind": "real", "max_abs": -1.0}, "max_abs=-1.0; expected a number > 0"),
    ({"kind": "positive", "tiny": 0.0}, "tiny=0.0"),
    ({"kind": "integers", "low": 0.5, "high": 3}, "low=0.5; expected an integer"),
])
def test_bad_domains_are_rejected_naming_the_value(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Domain(**kwargs)


def test_integer_buffer_needs_an_integer_domain():
    with pytest.raises(ValueError, match="dtype int32 with a real domain"):
        Buffer("i", "int32", ("N",), domain=Domain("real"))


def test_legacy_distributions_must_fit_the_declared_domain():
    with pytest.raises(ValueError, match="draw a real domain .* outside the declared positive domain"):
        Buffer("x", "float32", ("N",), domain=Domain("positive"))
    with pytest.raises(ValueError, match="outside the declared labels domain"):
        Buffer("t", "int32", ("N",), distributions=("randint",), low=0, high=3, domain=Domain("labels", 0, 2))
    assert Buffer("x", "float32", ("N",), distributions=("positive",), domain=Domain("real")).input_domain \
        == Domain("real")


def test_undeclared_buffers_get_the_domain_of_their_legacy_draws():
    assert default_domain("float32", ("uniform", "normal", "heavy_tailed"), -1.0, 1.0) == Domain("real")
    assert default_domain("float32", ("positive",), -1.0, 1.0) == Domain("positive")
    assert default_domain("int64", ("indices",), 0, "C") == Domain("indices", high="C")
    assert default_domain("int32", ("uniform",), -5, 5) == Domain("integers", low=-5, high=6)
    assert get_task("hinge_loss").inputs[1].input_domain.kind == "labels"
    assert get_task("log").inputs[0].input_domain.kind == "positive"


def test_check_values_names_the_bad_value_and_the_domain():
    d = Domain("positive")
    d.check_values("x", np.array([1.0, 2.0], np.float32), "float32", {})
    d.check_values("x", np.array([1e-3, 16.0], np.float16), "float16", {})  # bounds as fp16 rounds them
    with pytest.raises(ValueError, match=r"value -0.5 at flat index 1 is outside its positive domain; "
                                         r"expected finite values in \[0.001, 100\]"):
        d.check_values("x", np.array([1.0, -0.5], np.float32), "float32", {})
    with pytest.raises(ValueError, match=r"expected integers in \[0, 6\]"):
        Domain("indices", high="C").check_values("t", np.array([0, 7]), "int64", {"C": 7})


# ---- the draws ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ALL_CHECKED)
def test_every_draw_stays_inside_its_domain_and_is_pure(name):
    task = get_task(name)
    sizes = task.size_set("small")
    for trial in range(TRIALS):
        arrays = make_inputs(task, sizes, trial, 3, np)
        again = make_inputs(task, sizes, trial, 3, np)
        for b in task.inputs:
            b.input_domain.check_values(b.name, arrays[b.name], b.dtype, sizes)
            np.testing.assert_array_equal(arrays[b.name], again[b.name])
            # each buffer its own contiguous array of its dtype (make_input skips astype's copy)
            got = arrays[b.name]
            assert got.dtype == np.dtype(b.dtype) and got.flags.c_contiguous
            assert not any(np.shares_memory(got, v) for k, v in arrays.items() if k != b.name)
            assert not np.shares_memory(got, again[b.name])


@pytest.mark.parametrize("domains", [True, False])
def test_draws_into_the_callers_buffers_are_the_same_numbers(domains):
    """The timing stage draws each timed run's inputs into the run's fixed buffers (make_inputs
    `out`): the arrays it is given, holding exactly what a new draw holds, for every mode and dtype
    (a typical float32/int64 draw goes straight in, the rest is drawn anew and copied)."""
    for name in ALL_CHECKED[::3]:
        task = get_task(name)
        sizes = task.size_set("small")
        bufs = {b.name: np.full(b.resolve_shape(sizes), 7, dtype=b.dtype) for b in task.inputs}
        for trial in (0, 1, 2, TIMING_TRIAL_BASE, TIMING_TRIAL_BASE + 1, TIMING_TRIAL_BASE + 2):
            got = make_inputs(task, sizes, trial, 3, np, domains, out=bufs)
            want = make_inputs(task, sizes, trial, 3, np, domains)
            for k, v in want.items():
                assert got[k] is bufs[k], (name, trial, k)
                np.testing.assert_array_equal(got[k], v, err_msg=f"{name} trial {trial} {k}")


def test_a_buffer_of_another_shape_or_dtype_is_refused_naming_it():
    task = get_task("softplus")
    sizes = task.size_set("small")
    (b,) = task.inputs
    for bad in (np.empty((3,), b.dtype), np.empty(b.resolve_shape(sizes), "float64")):
        with pytest.raises(ValueError, match=f"out for buffer {b.name!r}.*expected {b.dtype}"):
            make_inputs(task, sizes, TIMING_TRIAL_BASE, 0, np, out={b.name: bad})


LEGACY_OF: dict[str, dict[str, Any]] = {"real": {}, "positive": {"distributions": ("positive",)},
             "labels": {"distributions": ("randint",), "low": 0, "high": 2},
             "indices": {"distributions": ("indices",), "high": "C"}}


def _one(domain: Domain, dtype: str = "float32", shape: tuple = (64, 97)) -> Task:
    bufs = tuple(Buffer(n, dtype, shape, domain=domain, **LEGACY_OF[domain.kind]) for n in "ab")
    return Task(name="domain_probe", level=1, description="", sizes={"eval": {"C": 5}, "small": {"C": 5}},
                inputs=bufs, outputs=(), reference=lambda xp, a, b: (), solution="")


def test_edges_trial_reaches_the_extremes_and_near_zero():
    x = make_inputs(_one(Domain("real")), {}, 1, 0, np)["a"]
    assert domain_draws.trial_mode(1) == "edges"
    assert np.abs(x).max() > 50 and (x > 50).any() and (x < -50).any()
    assert (x == 0).any() and ((np.abs(x) > 0) & (np.abs(x) <= 1e-3)).any()
    p = make_inputs(_one(Domain("positive")), {}, 1, 0, np)["a"]
    assert p.min() <= 1e-3 and p.max() > 50  # legacy positive draws stay in [0.1, 2)
    legacy = make_inputs(_one(Domain("positive")), {}, 1, 0, np, domains=False)["a"]
    assert legacy.min() >= 0.1 and legacy.max() < 2.0


def test_edges_trial_skews_the_label_ratio():
    labels = Domain("labels", low=0, high=2)
    typical = make_inputs(_one(labels, "int32"), {}, 0, 0, np)["a"]
    skewed = [make_inputs(_one(labels, "int32"), {}, t, 0, np)["a"].mean() for t in (1, 4)]
    assert abs(typical.mean() - 0.5) < 0.05
    assert skewed[0] < 0.15 and skewed[1] > 0.85  # the majority class alternates between edges trials


def test_structured_trial_is_structured():
    assert domain_draws.trial_mode(2) == "structured"
    arrays = make_inputs(_one(Domain("real")), {}, 2, 0, np)
    a, b = arrays["a"], arrays["b"]
    assert np.all(a[0] == a[0, 0])  # a constant row: ties
    np.testing.assert_array_equal(a[2], a[3])  # duplicated rows
    assert np.all(np.diff(a[-1]) >= 0)  # a sorted row
    assert not np.array_equal(a, b) and np.corrcoef(a.ravel(), b.ravel())[0, 1] > 0.99  # correlated
    mantissa = np.frexp(a[0, 0])[0] * 2 ** domain_draws.EXACT_BITS
    assert mantissa == np.round(mantissa)  # the constant has few significant bits: exact sums
    shifted = a[4:6]  # a block of large mean and small spread
    assert np.all(np.abs(shifted - 90.0) <= 0.018 + 1e-5) and shifted.std() > 1e-3
    v = make_inputs(_one(Domain("real"), shape=(400,)), {}, 2, 0, np)["a"]
    spikes = np.abs(v) >= 50.0
    assert spikes.sum() == domain_draws.SPIKES and np.all(spikes.reshape(domain_draws.SPIKES, -1).sum(axis=1) == 1)
    rest = v[~spikes]
    assert np.all(np.diff(rest) >= 0) and np.all(rest[:90] == rest[0])  # sorted, a tied quarter


def test_timing_runs_draw_the_typical_mode():
    """Timing runs (trials from TIMING_TRIAL_BASE on) measure the typical work: the legacy draw inside the
    domain, never an edges or structured trial, whatever the trial's place in the mode cycle."""
    trials = [TIMING_TRIAL_BASE + r for r in range(6)]
    assert [domain_draws.trial_mode(t) for t in trials] == ["typical"] * 6
    assert {domain_draws.trial_mode(t) for t in range(6)} == set(domain_draws.TRIAL_MODES)
    real = _one(Domain("real"))
    for t in trials:  # at the default reach the typical draw is the legacy draw, bit for bit
        for name, x in make_inputs(real, {}, t, 0, np).items():
            np.testing.assert_array_equal(x, make_inputs(real, {}, t, 0, np, domains=False)[name])
        assert "+" not in describe_distributions(real, t, True)
    narrow = _one(Domain("real", max_abs=8.0))
    for t in trials:  # a narrower real domain: the legacy draw clipped to it, nothing else
        x = make_inputs(narrow, {}, t, 0, np)["a"]
        np.testing.assert_array_equal(x, np.clip(make_inputs(narrow, {}, t, 0, np, domains=False)["a"], -8, 8))


def test_correctness_trials_stay_below_the_timing_runs():
    assert EnvConfig(correctness_trials=TIMING_TRIAL_BASE).correctness_trials == TIMING_TRIAL_BASE
    for bad in (0, TIMING_TRIAL_BASE + 1):
        with pytest.raises(ValueError, match=f"correctness_trials={bad}; expected 1 .. {TIMING_TRIAL_BASE}"):
            EnvConfig(correctness_trials=bad)


def test_structured_trial_on_integer_domains_stays_valid():
    idx = make_inputs(_one(Domain("indices", high="C"), "int64", shape=(50, 9)), {"C": 5}, 2, 0, np)["a"]
    assert idx.min() >= 0 and idx.max() <= 4 and np.all(idx[0] == idx[0, 0])


@pytest.mark.gpu
def test_cupy_draws_match_numpy(gpu_device):
    import cupy
    for name in ("softplus", "hinge_loss", "cross_entropy", "cosine_similarity_loss", GENERATED_SAMPLE[0]):
        task = get_task(name)
        for trial in range(TRIALS):
            got = make_inputs(task, task.size_set("small"), trial, 0, cupy)
            want = make_inputs(task, task.size_set("small"), trial, 0, np)
            for k, v in want.items():  # normals may differ in the last float32 bit (counter_rng)
                np.testing.assert_allclose(cupy.asnumpy(got[k]), v, rtol=1e-6, atol=1e-6)
        # the timing stage's draws into its fixed buffers: the same numbers as new cupy arrays
        sizes = task.size_set("small")
        bufs = {b.name: cupy.empty(b.resolve_shape(sizes), b.dtype) for b in task.inputs}
        for trial in (TIMING_TRIAL_BASE, TIMING_TRIAL_BASE + 1, TIMING_TRIAL_BASE + 2, 1):
            into = make_inputs(task, sizes, trial, 0, cupy, out=bufs)
            new = make_inputs(task, sizes, trial, 0, cupy)
            for k, v in new.items():
                assert into[k] is bufs[k]
                np.testing.assert_array_equal(cupy.asnumpy(into[k]), cupy.asnumpy(v))


# ---- no task is degenerate under its draws -----------------------------------------------------
def _expected(task: Task) -> list[list[np.ndarray]]:
    sizes = task.size_set("small")
    return [[np.asarray(e) for e in _reference_outputs(task, np, make_inputs(task, sizes, t, 0, np))]
            for t in range(TRIALS)]


@pytest.mark.parametrize("name", ALL_CHECKED)
def test_reference_moves_across_trials_and_a_constant_fails(name):
    task = get_task(name)
    expected = _expected(task)
    for k, out in enumerate(task.outputs):
        atol, rtol = task.tol(out.dtype)
        per_trial = np.stack([e[k].astype(np.float64) for e in expected])
        assert np.isfinite(per_trial).all(), f"{name}: a reference output is not finite"
        center = per_trial.mean(axis=0)
        spread = np.abs(per_trial - center).max()
        assert spread > SPREAD_OVER_TOLERANCE * (atol + rtol * np.abs(center).max()), f"{name}.{out.name} hardly moves"
        const = np.full(per_trial.shape[1:], center.mean()).astype(out.dtype)
        fails = [compare_output(np, out.name, const, e[k], out.dtype, atol, rtol, t, "")
                 for t, e in enumerate(expected)]
        assert any(f is not None for f in fails), f"{name}.{out.name}: a constant passes every trial"


# ---- adversarial submissions (broken_corpus.py) ------------------------------------------------
@pytest.mark.parametrize("case_id", ["naive_softplus_overflows", "log_series_near_one"])
def test_domain_cases_scored_correct_under_the_legacy_draws(case_id, cpu_device):
    """The loophole these corpus cases close: the legacy draws never reach where they break."""
    from kernels_env.execute.score import score
    case = CASES_BY_ID[case_id]
    cfg = EnvConfig(backend="cpu", sizes="small", timing=False, correctness_trials=5)
    assert score(case.task, case.text, cfg.replace(input_domains=False), device=cpu_device).status \
        is Status.CORRECT
    assert score(case.task, case.text, cfg, device=cpu_device).status is Status.WRONG_OUTPUT
