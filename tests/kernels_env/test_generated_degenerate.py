"""The generated grammar leaves out chains whose output hardly depends on their inputs (degenerate.py).

Checked against independent evidence: the value ranges against NumPy evaluated over dense grids, the
named chains against what a constant or input-ignoring kernel scores under validate_task, and a
sample of the whole grammar through the audit (no cheat passes any kept task).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from kernels_env.execute.validate import validate_task
from kernels_env.tasks.generated import get_generated_task, parse_name
from kernels_env.execute.audit_generated import audit, main as audit_main
from kernels_env.tasks.generated.degenerate import UNARY_RANGE, degenerate_reason, output_range
from kernels_env.tasks.generated.grammar import Spec, all_specs
from kernels_env.tasks.generated.ops import UNARY

RANGES = [(-3.0, 2.0), (0.0, 5.0), (-7.0, -0.5), (0.25, 0.25), (-1.5, 1.5), (-40.0, 40.0)]


@pytest.mark.parametrize("op", sorted(UNARY))
@pytest.mark.parametrize("lo,hi", RANGES)
def test_unary_range_bounds_numpy_over_a_grid(op, lo, hi):
    """Every value of the op's NumPy reference on [lo, hi] lies in the computed range, and the range's
    ends are reached (within the grid's resolution)."""
    t = np.linspace(lo, hi, 200001)
    with np.errstate(all="ignore"):
        y = UNARY[op].ref(np, t)
    rlo, rhi = UNARY_RANGE[op]((lo, hi))
    slack = 1e-6 * (1 + max(abs(rlo), abs(rhi)))
    assert rlo - slack <= y.min() and y.max() <= rhi + slack
    assert y.min() <= rlo + 1e-3 * (1 + abs(rlo)) and y.max() >= rhi - 1e-3 * (1 + abs(rhi))


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_range_over_the_whole_line_matches_the_limits(op):
    """Unbounded inputs: a finite end of the range is the op's limit (NumPy on a grid and far out);
    an infinite one is an end the op keeps moving towards (farther inputs give farther values)."""
    def f(t):
        with np.errstate(all="ignore"):
            return UNARY[op].ref(np, np.asarray(t, np.float64))
    near, far = f([-1e15, 1e15]), f([-1e30, 1e30])
    every = np.concatenate([f(np.linspace(-20, 20, 400001)), near, far])
    rlo, rhi = UNARY_RANGE[op]((-math.inf, math.inf))
    if math.isinf(rhi):
        assert far.max() > near.max() + 1
    else:
        assert abs(rhi - every.max()) < 1e-3
    if math.isinf(rlo):
        assert far.min() < near.min() - 1
    else:
        assert abs(rlo - every.min()) < 1e-3


def _spec(family, pre=(), bcast=None, row=None, post=(), dtype="f32"):
    return Spec(family, tuple(pre), bcast, row, tuple(post), dtype, 0)


@pytest.mark.parametrize("spec,words", [
    (_spec("ew", ("abs", "neg", "relu")), "x is lost at relu: its result is the constant 0"),
    (_spec("ew", ("relu", "softplus", "min"), "sc"), "x is lost at min: its result is the constant 0.5"),
    (_spec("norm", (), None, "lsm", ("relu",)), "constant 0 whatever"),
    (_spec("fu", ("add",), "col", "softmax"), "softmax is shift-invariant"),
    (_spec("fu", ("sub", "neg"), "col", "ln"), "ln is shift-invariant"),
    (_spec("fu", ("clamp",), None, "rmax"), "row maximum sits at the upper bound"),
    (_spec("fu", ("max",), "row", "rmax"), "is v's maximum in every row"),
    (_spec("fu", ("tanh", "max"), "full", "rmax"), "is v's maximum in every row"),
    (_spec("fu", (), None, "rmax", ("clamp",)), "clamp saturates on a rmax"),
    (_spec("fu", ("min",), "row", "rsum", ("relu",)), "negative in every row"),
    (_spec("fu", ("sub",), "sc", "rmean", ("softplus",)), "negative in every row"),
    (_spec("ew", ("max", "softplus", "clamp"), "sc"), "stays within [0.974, 1]"),
    (_spec("fu", (), None, "rsumsq", ("tanh",)), "tanh saturates on a rsumsq"),
    (_spec("fu", ("sigmoid",), None, "softmax", ("sq",)), "sq is nearly constant over probabilities"),
    (_spec("fu", (), None, "lsm", ("clamp",)), "clamp sits at its floor or saturation"),
])
def test_each_rule_names_why(spec, words):
    assert words in str(degenerate_reason(spec))


@pytest.mark.parametrize("spec", [
    _spec("fu", ("add", "relu"), "col", "softmax"),  # relu after the shift: it no longer cancels
    _spec("fu", ("mul",), "col", "ln"),  # a row scale keeps its sign through layer norm
    _spec("fu", ("add",), "col", "rms"),  # rms norm is not shift-invariant
    _spec("fu", ("max",), "col", "rmax"),  # max(rmax(x), v[m]): both matter
    _spec("fu", ("max",), "full", "rmax"),  # x unbounded beside v: both matter
    _spec("fu", ("min",), "col", "rsum", ("relu",)),  # min(x, v[m]): the sign follows v[m]
    _spec("fu", ("relu",), None, "rmax"),  # unbounded above
    _spec("fu", (), None, "softmax", ("tanh",)),
    _spec("fu", (), None, "lsm", ("neg",)),
    _spec("fu", (), None, "rmean", ("tanh",)),
    _spec("ew", ("relu", "neg")),
])
def test_chains_that_read_their_inputs_are_kept(spec):
    assert degenerate_reason(spec) is None
    assert output_range(spec)[0] < output_range(spec)[1]


@pytest.mark.parametrize("name", ["gen_fu_add_col_softmax_f32_s1", "gen_fu_relu_lsm_relu_f32_s0",
                                  "gen_fu_sigmoid_rsum_tanh_f32_s2", "gen_ew_relu_softplus_min_sc_f32_s1",
                                  "gen_fu_sub_row_rmax_clamp_f32_s0"])
def test_left_out_names_say_why(name):
    """Names of chains the grammar had (and validate_task flagged) are refused with the reason."""
    with pytest.raises(ValueError, match=f"{name!r} is left out of the generated task grammar: "):
        parse_name(name)


def test_the_rules_catch_what_validate_flags():
    """A chain a rule leaves out really is cheatable: the task built from it (bypassing the grammar)
    accepts a constant or input-ignoring output under validate_task."""
    from kernels_env.tasks.generated.emit import build_task
    for spec in (_spec("fu", ("add",), "col", "softmax"), _spec("norm", (), None, "lsm", ("relu",)),
                 _spec("fu", ("sigmoid",), None, "rsum", ("tanh",)),
                 _spec("ew", ("relu", "softplus", "min"), "sc")):
        assert validate_task(build_task(spec)), spec.name


def test_a_sample_of_the_grammar_passes_the_audit():
    """Every 400th task of the grammar (300 tasks) and every task of the small `norm` family: no cheat
    passes (`python -m kernels_env.execute.audit_generated` checks all of them the same way)."""
    names = [s.name for s in all_specs()[::400]] + [s.name for s in all_specs() if s.family == "norm"]
    assert len({parse_name(n).family for n in names}) == 4
    assert audit(names) == []


def test_softmax_tolerance_sits_below_one_over_n():
    """Probabilities of ~1/N: an fp16 atol of 1e-2 let 1/N pass for every softmax of a bounded op."""
    for name in ("gen_fu_sigmoid_softmax_f16_s1", "gen_norm_softmax_f32_s0"):
        task = get_generated_task(name)
        n = max(s["N"] for s in task.sizes.values())
        atol, _ = task.tol(task.outputs[0].dtype)
        assert atol <= 0.05 / n
        assert validate_task(task) == []


def test_audit_cli_reports_and_fails_on_problems(capsys, monkeypatch):
    assert audit_main(["--every", "5000"]) == 0
    assert "generated tasks: no cheat passes" in capsys.readouterr().out
    import kernels_env.execute.audit_generated as mod
    monkeypatch.setattr(mod, "audit", lambda names, sizes: ["gen_x: output 'y' passes every trial as zeros"])
    assert audit_main(["--every", "5000"]) == 1
    with pytest.raises(SystemExit):
        audit_main(["--every", "0"])
