"""CPU tests of the backend-agnostic harness and input generation, with a numpy FakeDevice.

The fake kernels emulate CUDA's grid semantics in numpy (thread i of the grid handles element i),
so poisoning, rotation, comparison, input-modification checks, timing orchestration and the
status mapping of device exceptions are all exercised without a GPU.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

from kernels_env.backends.base import FatalDeviceError, KernelRuntimeError, KernelTimeout
from kernels_env.core.config import EnvConfig, StageLimits
from kernels_env.execute.harness import REVERIFY_SEED_OFFSET, SETTLE_TIMEOUT_S, evaluate
from kernels_env.execute.launching import scalar_type
from kernels_env.execute.inputs import (HEAVY_TAIL_CLIP, buffer_seed, describe_distributions, make_inputs,
                                        trial_distribution)
from kernels_env.core.program import (BinOp, Call, Dim3, KernelParam, KernelSignature, Launch, LaunchPlan,
                                      Name, Neg, Num, ScratchDecl, Submission)
from kernels_env.core.status import Status
from kernels_env.judge.compare import compare_output
from kernels_env.source.launch import eval_expr
from kernels_env.tasks.spec import Buffer, Scalar, Task
from kernels_env.testing.fake_device import FakeDevice

N = 1000
FAST = EnvConfig(warmup_runs=2, timed_runs=100, seed=0)  # a fixed seed: tests rebuild the trials' inputs


# ---- helpers ----------------------------------------------------------------------------------
def ptr(name: str, base: str = "float", const: bool = False) -> KernelParam:
    return KernelParam(name=name, ctype=("const " if const else "") + base + "*", base_type=base,
                       pointer=True, const=const)


def val(name: str, base: str = "int") -> KernelParam:
    return KernelParam(name=name, ctype=base, base_type=base, pointer=False, const=False)


def launch(kernel: str, args: tuple, grid=None, block=256, shared=None, line: int = 1) -> Launch:
    grid = grid if grid is not None else Call("cdiv", (Name("N"), Num(block)))
    return Launch(kernel=kernel, grid=Dim3(grid), block=Dim3(Num(block)),
                  shared_bytes=None if shared is None else Num(shared), args=args, line=line)


def submission(launches: list[Launch], sigs: list[KernelSignature], scratch=()) -> Submission:
    return Submission(cuda_source="", launch_source="", plan=LaunchPlan(tuple(scratch), tuple(launches)),
                      kernels={s.name: s for s in sigs})


def add_task(dtype: str = "float32", tolerance=None, reference=None) -> Task:
    return Task(name=f"test_add_{dtype}", level=1, description="y = a + b",
                sizes={"eval": {"N": 4096}, "small": {"N": N}},
                inputs=(Buffer("a", dtype, ("N",)), Buffer("b", dtype, ("N",))),
                outputs=(Buffer("y", dtype, ("N",)),),
                reference=reference or (lambda xp, a, b: a + b), solution="",
                tolerance=tolerance or {})


ADD_SIG = KernelSignature("add", (ptr("a", const=True), ptr("b", const=True), ptr("y"), val("n")))
ADD_SUB = submission([launch("add", (Name("a"), Name("b"), Name("y"), Name("N")))], [ADD_SIG])


def threads(grid, block) -> int:
    return grid[0] * grid[1] * grid[2] * block[0] * block[1] * block[2]


def add_kernel(grid, block, shared, a, b, y, n):
    m = min(threads(grid, block), int(n))
    y[:m] = a[:m] + b[:m]


def device_with(**kernels) -> FakeDevice:
    dev = FakeDevice(reference_ms=1.0)
    for name, spec in kernels.items():
        fn, ms = spec if isinstance(spec, tuple) else (spec, 0.5)
        dev.register(name, fn, ms)
    return dev


def run(dev, task, sub, config=FAST, sizes=None):
    return evaluate(dev, None, task, sub, sizes or task.size_set("small"), config)  # type: ignore[arg-type]


# ---- inputs -------------------------------------------------------------------------------------
def test_inputs_rotate_distributions_deterministically():
    task = add_task()
    sizes = task.size_set("small")
    assert [trial_distribution(task.inputs[0], t) for t in range(4)] == \
        ["uniform", "normal", "heavy_tailed", "uniform"]
    a0 = make_inputs(task, sizes, 0, seed=7, xp=np)
    again = make_inputs(task, sizes, 0, seed=7, xp=np)
    other_seed = make_inputs(task, sizes, 0, seed=8, xp=np)
    # the legacy rotation itself (with input domains, trials 1 and 2 add edges and structure to it)
    for k in a0:
        assert a0[k].dtype == np.float32 and a0[k].shape == (N,)
        np.testing.assert_array_equal(a0[k], again[k])
        assert not np.array_equal(a0[k], other_seed[k])
    assert not np.array_equal(a0["a"], a0["b"])  # buffers get independent streams
    assert a0["a"].min() >= -1.0 and a0["a"].max() < 1.0
    normal = make_inputs(task, sizes, 1, 7, np, domains=False)["a"]
    assert abs(normal.mean()) < 0.2 and 0.8 < normal.std() < 1.2 and normal.min() < -1.5
    heavy = make_inputs(task, {"N": 20000}, 2, 7, np, domains=False)["a"]
    assert np.abs(heavy).max() <= HEAVY_TAIL_CLIP["float32"]
    # Student-t(3) has much heavier tails than a normal: P(|t| > 4) ~ 2.8% vs 6e-5.
    assert (np.abs(heavy) > 4).mean() > 0.01
    assert buffer_seed(7, task.name, 0, "a") != buffer_seed(7, task.name, 1, "a")


def test_inputs_other_distributions_and_dtypes():
    task = Task(name="dists", level=1, description="", sizes={"eval": {"N": 5000}, "small": {"N": 5000}},
                inputs=(Buffer("p", "float16", ("N",), distributions=("positive",)),
                        Buffer("r", "int32", ("N",), distributions=("randint",), low=-3, high=4),
                        Buffer("i", "int64", ("N",), distributions=("indices",), high="N"),
                        Buffer("h", "float16", ("N",), distributions=("heavy_tailed",)),
                        Buffer("u", "int32", ("N",), distributions=("uniform",), low=-5, high=5),
                        Buffer("m", "float32", (2, "N"), distributions=("uniform",), low=2, high=3)),
                outputs=(), reference=lambda xp, **k: (), solution="")
    x = make_inputs(task, task.size_set("small"), 0, 0, np)
    assert x["p"].dtype == np.float16 and x["p"].min() >= np.float16(0.1) and x["p"].max() <= 2
    assert x["r"].dtype == np.int32 and set(np.unique(x["r"])) == set(range(-3, 4))
    assert x["i"].dtype == np.int64 and x["i"].min() >= 0 and x["i"].max() < 5000 and x["i"].max() > 4900
    assert np.all(np.isfinite(x["h"])) and np.abs(x["h"]).max() <= HEAVY_TAIL_CLIP["float16"]
    assert x["u"].dtype == np.int32 and x["u"].min() >= -5 and x["u"].max() <= 5
    assert x["m"].shape == (2, 5000) and x["m"].min() >= 2 and x["m"].max() < 3
    assert describe_distributions(task, 0).startswith("p:positive,r:randint")


def test_inputs_bad_bounds_are_clear_errors():
    bad = Task(name="bad", level=1, description="", sizes={"eval": {"N": 4}, "small": {"N": 4}},
               inputs=(Buffer("i", "int32", ("N",), distributions=("indices",), high="M"),), outputs=(),
               reference=lambda xp, i: (), solution="")
    with pytest.raises(KeyError, match="'M' names no size"):
        make_inputs(bad, {"N": 4}, 0, 0, np)


# ---- expressions and argument types ----------------------------------------------------------
def test_eval_expr_has_c_semantics():
    env = {"N": 10}
    assert eval_expr(BinOp("/", Neg(Num(7)), Num(2)), env) == -3  # truncation toward zero
    assert eval_expr(BinOp("%", Neg(Num(7)), Num(2)), env) == -1
    assert eval_expr(Call("cdiv", (Name("N"), Num(3))), env) == 4
    assert eval_expr(Call("min", (Name("N"), Num(3), Num(5))), env) == 3
    assert eval_expr(Call("max", (Name("N"), Num(30))), env) == 30
    assert eval_expr(BinOp("*", BinOp("+", Name("N"), Num(2)), Num(3)), env) == 36


@pytest.mark.parametrize("ctype,expected", [
    ("int", np.int32), ("unsigned int", np.uint32), ("unsigned", np.uint32), ("long long", np.int64),
    ("int64_t", np.int64), ("size_t", np.int64), ("float", np.float32), ("double", np.float64),
    ("const int", np.int32), ("__half", np.float16)])
def test_scalar_type_from_c_type(ctype, expected):
    assert scalar_type(val("x", ctype)) is expected


def test_scalar_args_are_cast_and_task_scalars_reach_kernel_and_reference():
    task = Task(name="saxpy", level=1, description="", sizes={"eval": {"N": N}, "small": {"N": N}},
                inputs=(Buffer("x", "float32", ("N",)), Buffer("z", "float32", ("N",))),
                outputs=(Buffer("y", "float32", ("N",)),), scalars=(Scalar("alpha", "float32", 2.5),),
                reference=lambda xp, x, z, alpha: alpha * x + z, solution="")
    seen = []

    def saxpy(grid, block, shared, x, z, y, alpha, n, n64, nu, dbl):
        seen.append((type(alpha), type(n), type(n64), type(nu), type(dbl)))
        y[:] = alpha * x + z

    sig = KernelSignature("saxpy", (ptr("x", const=True), ptr("z", const=True), ptr("y"), val("alpha", "float"),
                                    val("n"), val("n64", "long long"), val("nu", "unsigned int"),
                                    val("d", "double")))
    sub = submission([launch("saxpy", (Name("x"), Name("z"), Name("y"), Name("alpha"), Name("N"),
                                       BinOp("*", Name("N"), Num(3)), Num(7), Num(0.5)))], [sig])
    res = run(device_with(saxpy=saxpy), task, sub)
    assert res.status is Status.CORRECT, res.message
    assert seen[0] == (np.float32, np.int32, np.int64, np.uint32, np.float64)


# ---- correct path and timing -------------------------------------------------------------------
def test_correct_kernel_is_correct_with_timing_and_speedup():
    dev = device_with(add=(add_kernel, 0.25))
    res = run(dev, add_task(), ADD_SUB)
    assert res.status is Status.CORRECT, res.message
    assert res.trials == 5 and res.backend == "fake" and res.mismatch is None
    t = res.timing
    # constant fake times: the median's CI is exact at the minimum number of runs
    assert t.runs == FAST.min_timed_runs and t.warmup_runs == 2 and t.comparable and t.device == "cuda"
    assert t.kernel_median_ms == pytest.approx(0.25) and t.ref_median_ms == pytest.approx(1.0)
    assert t.speedup == pytest.approx(4.0) and not t.suspicious and t.kernel_ci_ms == [0.25, 0.25]
    assert t.kernel_min_ms == t.kernel_max_ms == pytest.approx(0.25)  # every timed run took 0.25 ms
    assert t.checked_runs == 1 + 1 + 10 and t.verified_runs >= 2 and t.ref_runs == 10
    ref = [(c["warmup"], c["runs"]) for c in dev.time_calls if c["launches"] == 0]
    kernel = [c for c in dev.time_calls if c["launches"]]
    # the reference's two measurements (timing_stage.REFERENCE_OPINIONS), each a probe and a batch
    assert ref == [(0, 1), (1, 10)] * 2
    # the kernel's probe, then its batch of 1 warm-up + 10 runs in at most two calls (stopped at the
    # run compared in full), every run after an L2 flush
    assert (kernel[0]["warmup"], kernel[0]["runs"]) == (0, 1) and 2 <= len(kernel) <= 3
    assert sum(c["warmup"] for c in kernel[1:]) == 1 and sum(c["runs"] for c in kernel[1:]) == 10
    assert all(c["flush_l2"] for c in dev.time_calls)
    assert "12 runs), " in res.details and "adaptive" in res.details
    assert set(res.stage_seconds) == {"correctness", "timing"}
    assert dev.jobs_ended == 1
    # every trial launched with the evaluated grid
    assert dev.launches[0] == ("add", (4, 1, 1), (256, 1, 1), 0)


def test_reference_is_timed_at_first_sight_per_device_task_and_settings():
    dev = device_with(add=(add_kernel, 0.25))
    first = run(dev, add_task(), ADD_SUB)
    def reference_calls():  # time_runs calls that launched no kernel: the reference's
        return sum(1 for c in dev.time_calls if c["launches"] == 0)

    calls_after_first = reference_calls()
    assert calls_after_first == 2 * 2  # two measurements (probe + runs each) at first sight
    second = run(dev, add_task(), ADD_SUB)
    assert reference_calls() == calls_after_first  # the kernel's runs only
    assert second.timing.ref_median_ms == first.timing.ref_median_ms
    run(dev, add_task(), ADD_SUB, config=FAST.replace(timed_runs=50))  # other settings: measured anew
    assert reference_calls() == 2 * calls_after_first


def test_timing_off_and_non_comparable_device():
    dev = device_with(add=add_kernel)
    res = run(dev, add_task(), ADD_SUB, config=FAST.replace(timing=False))
    assert res.status is Status.CORRECT and res.timing is None and dev.time_calls == []
    dev = device_with(add=add_kernel)
    dev.timing_comparable, dev.timing_device = False, "cpu"
    res = run(dev, add_task(), ADD_SUB)
    assert res.status is Status.CORRECT
    assert res.timing.speedup is None and res.timing.ref_median_ms is None and res.timing.device == "cpu"


def test_fp16_and_custom_tolerance():
    def add16(grid, block, shared, a, b, y, n):
        y[:] = (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16)

    sig16 = KernelSignature("add", (ptr("a", "__half", const=True), ptr("b", "__half", const=True),
                                    ptr("y", "__half"), val("n")))  # a float* would not take fp16 buffers
    sub16 = submission([launch("add", (Name("a"), Name("b"), Name("y"), Name("N")))], [sig16])
    assert run(device_with(add=add16), add_task("float16"), sub16).status is Status.CORRECT

    def off_by_5e3(grid, block, shared, a, b, y, n):
        y[:] = a + b + np.float32(5e-3)

    assert run(device_with(add=off_by_5e3), add_task(), ADD_SUB).status is Status.WRONG_OUTPUT
    loose = add_task(tolerance={"float32": (1e-2, 1e-2)})
    assert run(device_with(add=off_by_5e3), loose, ADD_SUB).status is Status.CORRECT


# ---- wrong outputs ----------------------------------------------------------------------------
def test_unwritten_last_element_is_detected_through_the_poison():
    def short(grid, block, shared, a, b, y, n):
        y[: int(n) - 1] = a[: int(n) - 1] + b[: int(n) - 1]

    res = run(device_with(add=short), add_task(), ADD_SUB)
    m = res.mismatch
    assert res.status is Status.WRONG_OUTPUT
    assert m.reason == "unwritten" and m.buffer == "y" and m.first_bad_index == [N - 1]
    assert m.trial == 0 and m.distribution == "uniform" and np.isnan(m.got)
    x = make_inputs(add_task(), {"N": N}, 0, FAST.seed, np)
    assert m.expected == pytest.approx(float(x["a"][-1] + x["b"][-1]))
    assert m.frac_mismatched == pytest.approx(1 / N)
    assert "never written" in res.message and f"[{N - 1}]" in res.message
    assert res.stage_seconds["correctness"] > 0 and res.trials == 1


def test_grid_too_small_leaves_elements_unwritten():
    sub = submission([launch("add", (Name("a"), Name("b"), Name("y"), Name("N")),
                             grid=BinOp("/", Name("N"), Num(256)))], [ADD_SIG])
    res = run(device_with(add=add_kernel), add_task(), sub)
    assert res.status is Status.WRONG_OUTPUT and res.mismatch.reason == "unwritten"
    assert res.mismatch.first_bad_index == [(N // 256) * 256]


def test_computed_inf_is_nan_or_inf_not_unwritten():
    def with_inf(grid, block, shared, a, b, y, n):
        y[:] = a + b
        y[3] = np.inf
        y[7] = np.nan

    res = run(device_with(add=with_inf), add_task(), ADD_SUB)
    assert res.status is Status.WRONG_OUTPUT
    assert res.mismatch.reason == "nan_or_inf" and res.mismatch.first_bad_index == [3]
    assert res.mismatch.frac_mismatched == pytest.approx(2 / N)


def test_mismatch_summary_fields():
    def off(grid, block, shared, a, b, y, n):
        y[:] = a + b
        y[5] += np.float32(1e-3)
        y[9] -= np.float32(3e-3)

    res = run(device_with(add=off), add_task(), ADD_SUB)
    m = res.mismatch
    assert res.status is Status.WRONG_OUTPUT and m.reason == "mismatch"
    assert m.first_bad_index == [5] and m.frac_mismatched == pytest.approx(2 / N)
    assert m.max_abs_err == pytest.approx(3e-3, rel=1e-3)
    assert m.got - m.expected == pytest.approx(1e-3, rel=1e-3)
    assert (m.atol, m.rtol) == (1e-4, 1e-4)
    def within(g, bl, s, a, b, y, n):
        return np.copyto(y, a + b + np.float32(1e-6))
    assert run(device_with(add=within), add_task(), ADD_SUB).status is Status.CORRECT


def test_failure_on_a_later_trial_names_its_distribution():
    def clipped(grid, block, shared, a, b, y, n):  # right only while |a + b| < 2 (uniform inputs)
        y[:] = np.clip(a + b, -2, 2)

    res = run(device_with(add=clipped), add_task(), ADD_SUB)
    assert res.status is Status.WRONG_OUTPUT
    assert res.mismatch.trial == 1 and res.mismatch.distribution == "normal+edges" and res.trials == 2


def test_compare_output_matches_numpy_formula():
    rng = np.random.default_rng(3)
    e = rng.standard_normal((20, 30)).astype(np.float32)
    g = e.copy()
    g[2, 5] += 0.5
    g[7, 1] += 2e-4 + 1e-4 * abs(e[7, 1])  # just outside atol + rtol * |e|
    g[8, 8] += 1e-5  # inside
    m = compare_output(np, "y", g, e, "float32", 1e-4, 1e-4, 0, "normal")
    d = np.abs(g.astype(np.float64) - e.astype(np.float64))
    bad = d > 1e-4 + 1e-4 * np.abs(e.astype(np.float64))
    assert m is not None
    assert m.frac_mismatched == pytest.approx(bad.mean()) and bad.sum() == 2
    assert m.first_bad_index == [2, 5] and m.max_abs_err == pytest.approx(d.max())
    assert m.max_rel_err == pytest.approx((d / np.abs(e.astype(np.float64))).max())
    assert compare_output(np, "y", e.copy(), e, "float32", 1e-4, 1e-4, 0, "normal") is None
    # reference NaN matched by a candidate NaN is fine
    e2, g2 = e.copy(), e.copy()
    e2[0, 0] = g2[0, 0] = np.nan
    assert compare_output(np, "y", g2, e2, "float32", 1e-4, 1e-4, 0, "normal") is None


def test_kernel_writing_its_input_is_input_modified():
    def writes_input(grid, block, shared, a, b, y, n):
        y[:] = a + b
        a[10] = 123.0

    res = run(device_with(add=writes_input), add_task(), ADD_SUB)
    m = res.mismatch
    assert res.status is Status.WRONG_OUTPUT and m.reason == "input_modified"
    assert m.buffer == "a" and m.first_bad_index == [10] and m.got == 123.0
    assert m.frac_mismatched == pytest.approx(1 / N) and "input a was modified" in res.message

    def rewrites_same(grid, block, shared, a, b, y, n):  # bitwise identical rewrite is allowed
        a[:] = a.copy()
        y[:] = a + b

    assert run(device_with(add=rewrites_same), add_task(), ADD_SUB).status is Status.CORRECT


def gather_task() -> Task:
    return Task(name="gather", level=1, description="out[i] = x[idx[i]]",
                sizes={"eval": {"N": N, "M": 64}, "small": {"N": N, "M": 64}},
                inputs=(Buffer("x", "int32", ("M",), distributions=("randint",), low=-100, high=100),
                        Buffer("idx", "int64", ("N",), distributions=("indices",), high="M")),
                outputs=(Buffer("out", "int32", ("N",)),),
                reference=lambda xp, x, idx: x[idx], solution="")


GATHER_SIG = KernelSignature("gather", (ptr("x", "int", True), ptr("idx", "long long", True), ptr("out", "int"),
                                        val("n")))
GATHER_SUB = submission([launch("gather", (Name("x"), Name("idx"), Name("out"), Name("N")))], [GATHER_SIG])


def test_int_outputs_sentinel_and_exact_compare():
    def good(g, bl, s, x, idx, out, n):
        return np.copyto(out, x[idx])
    assert run(device_with(gather=good), gather_task(), GATHER_SUB).status is Status.CORRECT

    def skips_first(g, bl, s, x, idx, out, n):
        out[1:] = x[idx[1:]]

    res = run(device_with(gather=skips_first), gather_task(), GATHER_SUB)
    assert res.mismatch.reason == "unwritten" and res.mismatch.first_bad_index == [0]
    assert res.mismatch.got == float(np.iinfo(np.int32).min)

    def off_by_one(g, bl, s, x, idx, out, n):
        out[:] = x[idx]
        out[500] += 1

    res = run(device_with(gather=off_by_one), gather_task(), GATHER_SUB)
    assert res.mismatch.reason == "mismatch" and res.mismatch.first_bad_index == [500]
    assert res.mismatch.max_abs_err == 1.0


def test_scratch_is_zeroed_every_trial_and_launches_run_in_order():
    task = Task(name="sum", level=1, description="y = sum(a)", sizes={"eval": {"N": N}, "small": {"N": N}},
                inputs=(Buffer("a", "float32", ("N",)),), outputs=(Buffer("y", "float32", (1,)),),
                reference=lambda xp, a: a.astype(xp.float64).sum().reshape(1), solution="",
                tolerance={"float32": (1e-3, 1e-4)})

    def partial_sums(grid, block, shared, a, partial, n):  # accumulates: relies on zeroed scratch
        for i in range(grid[0]):
            partial[i] += a[i * block[0]:(i + 1) * block[0]].astype(np.float64).sum()

    def finish(grid, block, shared, partial, y, count):
        y[0] = partial[: int(count)].astype(np.float64).sum()

    sigs = [KernelSignature("partial_sums", (ptr("a", const=True), ptr("partial"), val("n"))),
            KernelSignature("finish", (ptr("partial", const=True), ptr("y"), val("count")))]
    blocks = Call("cdiv", (Name("N"), Num(256)))
    sub = submission([launch("partial_sums", (Name("a"), Name("partial"), Name("N"))),
                      launch("finish", (Name("partial"), Name("y"), blocks), grid=Num(1), line=2)], sigs,
                     scratch=[ScratchDecl("partial", "float32", blocks, line=0)])
    dev = device_with(partial_sums=partial_sums, finish=finish)
    res = run(dev, task, sub, config=FAST.replace(timing=False))
    assert res.status is Status.CORRECT, res.message
    assert [launch[0] for launch in dev.launches] == ["partial_sums", "finish"] * 5


# ---- statuses from device exceptions --------------------------------------------------------------
def raising(exc):
    def kernel(*args):
        raise exc
    return kernel


def test_runtime_error_and_timeout_statuses():
    res = run(device_with(add=raising(KernelRuntimeError("an illegal memory access was encountered"))),
              add_task(), ADD_SUB)
    assert res.status is Status.RUNTIME_ERROR
    assert "an illegal memory access was encountered" in res.message and "launch 1 (add, line 1)" in res.message
    res = run(device_with(add=raising(KernelTimeout("no progress after 5 s"))), add_task(), ADD_SUB)
    assert res.status is Status.TIMEOUT and "no progress" in res.message


def test_fatal_device_error_propagates_with_a_runtime_error_result():
    dev = device_with(add=raising(FatalDeviceError("CUDA_ERROR_MISALIGNED_ADDRESS: misaligned address")))
    with pytest.raises(FatalDeviceError) as info:
        run(dev, add_task(), ADD_SUB)
    assert info.value.result.status is Status.RUNTIME_ERROR
    assert "misaligned address" in info.value.result.message


class LateFaultDevice(FakeDevice):
    """A kernel that corrupts the context without failing its own synchronisation: the sticky error
    shows only `clean_syncs` synchronisations later (as a far out-of-bounds write makes a later kernel
    of the environment fault)."""

    def __init__(self, clean_syncs: int = 1) -> None:
        super().__init__(reference_ms=1.0)
        self.clean_syncs, self.armed = clean_syncs, None
        self.register("add", self.corrupting_add, 0.5)

    def corrupting_add(self, grid, block, shared, a, b, y, n):
        add_kernel(grid, block, shared, a, b, y, n)
        if self.armed is None:
            self.armed = self.clean_syncs

    def synchronize(self) -> None:
        super().synchronize()
        if self.armed is not None:
            if self.armed <= 0:
                raise FatalDeviceError("kernel execution failed: cudaErrorIllegalInstruction: an illegal "
                                       "instruction was encountered")
            self.armed -= 1


def test_a_sticky_error_surfacing_in_the_environments_work_is_the_submissions():
    """H100, 2026-12-06: a policy kernel's trial synchronised cleanly, then the environment's input
    check raised cudaErrorIllegalInstruction; reported as env_error, the rollout was masked out of
    training instead of failing. Now the lost context is found behind the failure and the submission
    gets runtime_error (and the worker is replaced: FatalDeviceError)."""
    import kernels_env.execute.harness as harness
    dev = LateFaultDevice(clean_syncs=1)
    real_check = harness.check_input_unchanged

    def check(xp, name, *args):
        if dev.armed is not None and dev.armed <= 0:
            raise RuntimeError("cudaErrorIllegalInstruction: an illegal instruction was encountered")
        return real_check(xp, name, *args)

    harness.check_input_unchanged = check
    try:
        with pytest.raises(FatalDeviceError) as info:
            run(dev, add_task(), ADD_SUB)
    finally:
        harness.check_input_unchanged = real_check
    res = info.value.result
    assert res.status is Status.RUNTIME_ERROR and res.message.startswith("correctness")
    assert "illegal instruction" in res.message and "surfaced in the environment's own work" in res.message
    assert "RuntimeError: cudaErrorIllegalInstruction" in res.details


def test_a_sticky_error_left_at_the_end_of_a_job_is_that_jobs():
    """Every evaluation ends with a synchronisation: a fault its kernels left that nothing in the
    stages noticed is reported there (runtime_error, the worker replaced), never in the next job."""
    config = FAST.replace(timing=False)
    clean = device_with(add=add_kernel)
    assert run(clean, add_task(), ADD_SUB, config=config).status is Status.CORRECT
    dev = LateFaultDevice(clean_syncs=clean.syncs - 1)  # every synchronisation passes but the closing one
    with pytest.raises(FatalDeviceError) as info:
        run(dev, add_task(), ADD_SUB, config=config)
    assert dev.syncs == clean.syncs and info.value.result.status is Status.RUNTIME_ERROR
    assert "illegal instruction" in info.value.result.message


def test_an_environment_failure_on_a_healthy_device_stays_env_error():
    """The probe blames the submission only for a lost context: a broken reference is env_error."""
    def broken(xp, a, b):
        raise ValueError("the reference is broken")
    dev = LateFaultDevice(clean_syncs=10**6)
    res = run(dev, add_task(reference=broken), ADD_SUB)
    assert res.status is Status.ENV_ERROR and "the reference is broken" in res.message


def test_a_kernel_that_rewrites_the_judges_input_copies_is_not_correct():
    """On a GPU the kernels share device memory with the judge: a far write can reach the pristine
    input copies the reference used to run on. Zeroing them with the inputs and writing the
    reference of zeros passed the input check and the comparison. The fake device's kernels share
    the judge's memory too (this one finds every array holding an input's values in its callers'
    frames, as a memory scan would); the judge now regenerates the inputs after the run."""
    import sys

    def rewrite_everything(grid, block, shared, a, b, y, n):
        originals = [a.copy(), b.copy()]
        frame = sys._getframe(1)
        while frame is not None:
            for value in list(frame.f_locals.values()):
                for v in (value.values() if isinstance(value, dict) else (value,)):
                    if (isinstance(v, np.ndarray) and v.shape == a.shape and v is not y
                            and any(np.array_equal(v, o) for o in originals)):
                        v[...] = 0
            frame = frame.f_back
        a[...], b[...] = 0, 0  # the kernel's own inputs too, so they equal the rewritten copies
        y[...] = 0  # the reference of zeroed inputs

    # correctness only, as RL scores: the timing stage's full comparisons regenerate their inputs
    res = run(device_with(add=rewrite_everything), add_task(), ADD_SUB, config=FAST.replace(timing=False))
    assert res.status is Status.WRONG_OUTPUT and res.message.startswith("correctness"), res.message


def test_runtime_error_during_timing_is_reported():
    calls = []

    def fails_on_rerun(grid, block, shared, a, b, y, n):
        calls.append(1)
        if len(calls) > 5:
            raise KernelRuntimeError("unspecified launch failure")
        add_kernel(grid, block, shared, a, b, y, n)

    res = run(device_with(add=fails_on_rerun), add_task(), ADD_SUB)
    assert res.status is Status.RUNTIME_ERROR and res.message.startswith("timing")


def test_slow_but_correct_kernel_is_correct_with_the_runs_that_fit():
    """1 s per fake run and a 5 s stage: not the 2 warm-up + 10 timed runs, but not a timeout either."""
    cfg = FAST.replace(limits=StageLimits(timing=5.0))
    dev = device_with(add=(add_kernel, 1000.0))
    res = run(dev, add_task(), ADD_SUB, config=cfg)
    assert res.status is Status.CORRECT, res.message
    assert 1 <= res.timing.runs < FAST.min_timed_runs and res.timing.kernel_median_ms == pytest.approx(1000.0)
    dev = device_with(add=(add_kernel, 10_000.0))  # one run alone takes the whole stage: the probe's time
    res = run(dev, add_task(), ADD_SUB, config=cfg)
    assert res.status is Status.CORRECT and res.timing.runs == 1 and res.timing.warmup_runs == 0


def test_env_faults_are_env_error():
    broken = add_task(reference=lambda xp, a, b: 1 / 0)
    res = run(device_with(add=add_kernel), broken, ADD_SUB)
    assert res.status is Status.ENV_ERROR and "ZeroDivisionError" in res.message
    res = run(device_with(add=raising(ValueError("backend bug"))), add_task(), ADD_SUB)
    assert res.status is Status.ENV_ERROR and "backend bug" in res.message
    wrong_shape = add_task(reference=lambda xp, a, b: (a + b)[:10])
    assert run(device_with(add=add_kernel), wrong_shape, ADD_SUB).status is Status.ENV_ERROR


# ---- plan errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize("sub,needle", [
    (submission([launch("nope", (Name("a"),))], [ADD_SIG]), "no extern"),
    (submission([launch("add", (Name("a"), Name("b"), Name("y")))], [ADD_SIG]), "3 arguments"),
    (submission([launch("add", (Name("a"), Name("b"), Name("y"), Name("a")))], [ADD_SIG]), "non-pointer"),
    (submission([launch("add", (Name("a"), Num(3), Name("y"), Name("N")))], [ADD_SIG]), "needs a buffer"),
    (submission([launch("add", (Name("a"), Name("b"), Name("y"), BinOp("/", Name("N"), Num(0))))], [ADD_SIG]),
     "division by zero"),
    (submission([launch("add", (Name("a"), Name("b"), Name("y"), Name("K")))], [ADD_SIG]), "unknown name 'K'"),
    (submission([launch("add", (Name("a"), Name("b"), Name("y"), Num(2**40)))], [ADD_SIG]), "does not fit"),
])
def test_plan_errors_are_format_errors(sub, needle):
    res = run(device_with(add=add_kernel), add_task(), sub)
    assert res.status is Status.FORMAT_ERROR and needle in res.message, res.message


def test_invalid_launch_configuration_is_format_error():
    """A configuration CUDA would reject is decided from the plan and the sizes before anything runs:
    format_error, as the parse-time checks say (launch.check_plan, the one resolver)."""
    sub = submission([launch("add", (Name("a"), Name("b"), Name("y"), Name("N")), block=2048)], [ADD_SIG])
    dev = device_with(add=add_kernel)
    res = run(dev, add_task(), sub)
    assert res.status is Status.FORMAT_ERROR and "block.x = 2048; expected 1..1024" in res.message
    assert dev.launches == []


# ---- suspicious speedups and limits ---------------------------------------------------------------
def test_suspicious_speedup_is_reverified_and_kept_when_still_correct():
    dev = device_with(add=(add_kernel, 0.01))
    res = run(dev, add_task(), ADD_SUB)
    assert res.status is Status.CORRECT
    assert res.timing.speedup == pytest.approx(100.0)
    assert res.timing.suspicious and res.timing.reverified and res.trials == 10
    assert "re-verification" in res.stage_seconds


def test_the_timed_runs_comparisons_and_the_reverification_share_one_hold(monkeypatch):
    """Correctness under the shared lock, timing alone, then the full comparisons and a suspicious
    speedup's re-verification in one shared hold: a timing queued meanwhile cannot slip in between."""
    import contextlib
    from kernels_env.execute import harness
    holds: list[tuple[str, list[str]]] = []

    @contextlib.contextmanager
    def access(device, exclusive):
        holds.append(("exclusive" if exclusive else "shared", []))
        yield

    original = harness._Run.correctness

    def correctness(self, seed, stage):
        holds[-1][1].append(stage)
        return original(self, seed, stage)

    monkeypatch.setattr(harness, "gpu_access", access)
    monkeypatch.setattr(harness._Run, "correctness", correctness)
    res = run(device_with(add=(add_kernel, 0.01)), add_task(), ADD_SUB)
    assert res.status is Status.CORRECT and res.timing.reverified
    # (the last hold is the job's end: _end_job's sync and cache release)
    assert holds == [("shared", ["correctness"]), ("exclusive", []), ("shared", ["re-verification"]),
                     ("shared", [])]


def test_suspicious_speedup_that_fails_reverification_reports_the_failure():
    honest = device_with(add=(add_kernel, 0.01))
    run(honest, add_task(), ADD_SUB)
    before_reverification = len(honest.launches) - 5  # correctness trials and timing runs
    calls = []

    def cheat(grid, block, shared, a, b, y, n):  # right until re-verified, then writes garbage
        calls.append(1)
        if len(calls) <= before_reverification:
            add_kernel(grid, block, shared, a, b, y, n)
        else:
            y[:] = 0

    res = run(device_with(add=(cheat, 0.01)), add_task(), ADD_SUB)
    assert res.status is Status.WRONG_OUTPUT and "suspicious" in res.message
    assert res.timing is None and res.mismatch.reason == "mismatch"
    # the re-verification drew new inputs: its trial-0 expectation differs from the first seed's
    assert REVERIFY_SEED_OFFSET != 0
    x_new = make_inputs(add_task(), {"N": N}, 0, FAST.seed + REVERIFY_SEED_OFFSET, np)
    x_old = make_inputs(add_task(), {"N": N}, 0, FAST.seed, np)
    i = res.mismatch.first_bad_index[0]
    assert res.mismatch.expected == pytest.approx(float(x_new["a"][i] + x_new["b"][i]))
    assert res.mismatch.expected != pytest.approx(float(x_old["a"][i] + x_old["b"][i]))


def test_correctness_stage_soft_limit_is_timeout():
    def slow(grid, block, shared, a, b, y, n):
        time.sleep(0.03)
        add_kernel(grid, block, shared, a, b, y, n)

    cfg = FAST.replace(limits=StageLimits(correctness=0.05))
    res = run(device_with(add=slow), add_task(), ADD_SUB, config=cfg)
    assert res.status is Status.TIMEOUT and "limit" in res.message and res.trials < 5


def test_correctness_limit_charges_the_candidate_not_the_reference():
    """A slow reference (e.g. CuPy building its elementwise kernels on a cold worker) must not
    turn a fast, correct kernel into a timeout; a slow candidate still is one."""
    def slow_reference(xp, a, b):
        time.sleep(0.15)
        return a + b

    # the fast kernel's 5 launches take well under a millisecond: 0.25 s holds at any load we see,
    # while the 5 references (0.75 s) would be over it if they were charged
    cfg = FAST.replace(timing=False, limits=StageLimits(correctness=0.25))
    res = run(device_with(add=add_kernel), add_task(reference=slow_reference), ADD_SUB, config=cfg)
    assert res.status is Status.CORRECT and res.trials == 5, res.message

    def slow(grid, block, shared, a, b, y, n):
        time.sleep(0.1)
        add_kernel(grid, block, shared, a, b, y, n)

    res = run(device_with(add=slow), add_task(reference=slow_reference), ADD_SUB, config=cfg)
    # at least 0.1 s per trial: over 0.25 s by the third at the latest (sooner on a loaded machine)
    assert res.status is Status.TIMEOUT and 1 <= res.trials <= 3


def test_soft_timeout_is_passed_to_devices_that_accept_it():
    class TimedSyncDevice(FakeDevice):
        def synchronize(self, timeout_s=None):
            self.timeouts = getattr(self, "timeouts", []) + [timeout_s]

    dev = TimedSyncDevice()
    dev.register("add", add_kernel)
    res = run(dev, add_task(), ADD_SUB, config=FAST.replace(timing=False, limits=StageLimits(correctness=7.0)))
    assert res.status is Status.CORRECT
    # one per trial's launch, then the evaluation's closing one with its own limit
    assert len(dev.timeouts) == 6 and all(0 < t <= 7.0 for t in dev.timeouts[:5])
    assert dev.timeouts[5] == SETTLE_TIMEOUT_S


def test_a_write_past_the_output_end_is_an_out_of_bounds_runtime_error():
    def one_past(grid, block, shared, a, b, y, n):
        add_kernel(grid, block, shared, a, b, y, n)
        y.base[y.size] = 0.0  # the element right after y: what `if (i <= n)` writes on a GPU

    res = run(device_with(add=one_past), add_task(), ADD_SUB)
    assert res.status is Status.RUNTIME_ERROR
    assert "out-of-bounds write" in res.message and "'y'" in res.message and "1 of the" in res.message
    assert run(device_with(add=add_kernel), add_task(), ADD_SUB).status is Status.CORRECT


def test_timing_runs_get_the_stage_budget_and_a_hang_there_is_a_fatal_timeout():
    """A kernel that hangs only now and then (passes the 5 trials, then a timed run spins): the
    device gets the stage's remaining time as `timeout_s` and its hang becomes `timeout`."""
    class Hang(FatalDeviceError, KernelTimeout):
        pass

    class BoundedTimingDevice(FakeDevice):
        def time_runs(self, prepare, fn, check, warmup, runs, flush_l2, timeout_s=None):
            self.budgets = getattr(self, "budgets", []) + [timeout_s]
            if runs > 1:  # the probe passes; the real runs hang past the budget
                raise Hang(f"the kernel is still running after {timeout_s:.3g} s")
            return super().time_runs(prepare, fn, check, warmup, runs, flush_l2)

    dev = BoundedTimingDevice()
    dev.register("add", add_kernel)
    with pytest.raises(FatalDeviceError) as info:
        run(dev, add_task(), ADD_SUB, config=FAST.replace(limits=StageLimits(timing=9.0)))
    assert info.value.result.status is Status.TIMEOUT
    assert info.value.result.message.startswith("timing") and "still running" in info.value.result.message
    assert len(dev.budgets) == 2 and all(b is not None and 0 < b <= 9.0 for b in dev.budgets)


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n_bad=st.integers(0, 5), scale=st.floats(1e-6, 10.0),
       atol=st.sampled_from([1e-4, 1e-2]), rtol=st.sampled_from([1e-4, 1e-2]))
def test_compare_output_agrees_with_an_independent_numpy_check(seed, n_bad, scale, atol, rtol):
    rng = np.random.default_rng(seed)
    e = rng.standard_normal(257).astype(np.float32)
    g = e.copy()
    idx = rng.choice(257, size=n_bad, replace=False)
    g[idx] += np.float32(scale) * rng.choice([-1.0, 1.0], size=n_bad).astype(np.float32)
    m = compare_output(np, "y", g, e, "float32", atol, rtol, 0, "normal")
    d = np.abs(g.astype(np.float64) - e.astype(np.float64))
    bad = d > atol + rtol * np.abs(e.astype(np.float64))
    if not bad.any():
        assert m is None
    else:
        assert m is not None
        assert m.reason == "mismatch" and m.frac_mismatched == pytest.approx(bad.mean())
        assert m.first_bad_index == [int(np.argmax(bad))]
        assert m.max_abs_err == pytest.approx(d.max())
        assert m.expected == pytest.approx(float(e[m.first_bad_index[0]]))
        assert m.got == pytest.approx(float(g[m.first_bad_index[0]]))


def test_unwritten_int64_output_fails_where_the_reference_is_zero():
    """|INT64_MIN - 0| wraps to a negative int64: the comparison once passed an int64 output the
    kernel never wrote (still the sentinel) wherever the reference was 0."""
    import numpy as np

    from kernels_env.judge.compare import compare_output, mismatch_mask
    from kernels_env.judge.poison import INT_SENTINEL
    for dtype in ("int64", "int32"):
        expected = np.array([0, 0, 5, -3], dtype)
        got = expected.copy()
        got[:2] = INT_SENTINEL[dtype]
        m = compare_output(np, "y", got, expected, dtype, 0.0, 0.0, 0, "uniform")
        assert m is not None and m.reason == "unwritten" and m.first_bad_index == [0], dtype
        assert mismatch_mask(np, got, expected, dtype, 0.0, 0.0).tolist() == [True, True, False, False]
        assert compare_output(np, "y", expected.copy(), expected, dtype, 0.0, 0.0, 0, "uniform") is None
