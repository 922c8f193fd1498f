"""KernelBench-style problem files as tasks (kernels_env/problems, docs/problems.md): the twins of the
suite's `kernelbench` tasks compute what the native references compute on the same inputs, and the
suite's solutions score the same status through a twin as through the native task (CPU backend,
CPU torch); a broken problem file gets an error naming the file and what is wrong. Skips without torch."""
from __future__ import annotations

import json
import os
import shutil
import textwrap

import numpy as np
import pytest

import kernels_env.tasks as T
from kernels_env import EnvConfig, score
from kernels_env.execute.inputs import make_inputs
from kernels_env.problems import ProblemError, load_problem, problem_files, problem_task
from kernels_env.problems.client import ProblemProcess

pytest.importorskip("torch")

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "examples", "problems")
TWINS = {os.path.splitext(os.path.basename(p))[0]: p for p in problem_files(ROOT)}
KERNELBENCH = T.task_names(tags="kernelbench")


def test_every_kernelbench_task_has_a_twin():
    missing = sorted(set(KERNELBENCH) - set(TWINS))
    assert not missing, f"kernelbench tasks without a problem file under {ROOT}: {missing}"


@pytest.mark.parametrize("name", KERNELBENCH)
def test_twin_matches_native_task_and_reference(name):
    native, twin = T.get_task(name), load_problem(TWINS[name], "cpu")
    assert twin.level == native.level
    assert {b.name: b.dtype for b in twin.buffers} == {b.name: b.dtype for b in native.buffers}
    assert {s.name for s in native.scalars} <= {s.name for s in twin.scalars} | set(twin.size_set("eval"))
    for which in ("small", "eval"):
        sizes_n, sizes_t = native.size_set(which), twin.size_set(which)
        for b in native.buffers:
            t = next(x for x in twin.buffers if x.name == b.name)
            assert t.resolve_shape(sizes_t) == b.resolve_shape(sizes_n), (name, which, b.name)
    sizes = native.size_set("small")
    scalars = {s.name: s.value for s in native.scalars}
    for trial in range(3):  # the three draw families
        inputs = make_inputs(native, sizes, trial, 0, np)
        want = native.reference(np, **{k: v.copy() for k, v in inputs.items()}, **scalars)
        got = twin.reference(np, **inputs)
        want, got = (list(x) if isinstance(x, tuple) else [x] for x in (want, got))
        for b, w, g in zip(native.outputs, want, got, strict=True):
            w = np.asarray(w).reshape(b.resolve_shape(sizes))
            if b.dtype.startswith("int"):
                np.testing.assert_array_equal(g, w)
            else:
                atol, rtol = native.tol(b.dtype)
                np.testing.assert_allclose(g, w, atol=atol, rtol=rtol, err_msg=f"{name} trial {trial}")


@pytest.mark.parametrize("name", KERNELBENCH)
def test_suite_solution_scores_the_same_through_the_twin(name):
    native = T.get_task(name)
    cfg = EnvConfig(backend="cpu", sizes="small", timing=False)
    twin_result = score(load_problem(TWINS[name], "cpu"), native.solution, cfg)
    native_result = score(native, native.solution, cfg)
    assert twin_result.status == native_result.status, (twin_result.message, native_result.message)
    assert twin_result.correct, twin_result.message


def test_a_wrong_kernel_is_caught_through_a_problem():
    native = T.get_task("matrix_scalar_mul")
    wrong = native.solution.replace(", s);", ", s * 1.1f);")
    assert wrong != native.solution
    r = score(load_problem(TWINS["matrix_scalar_mul"], "cpu"), wrong, EnvConfig(backend="cpu", sizes="small",
                                                                                 timing=False))
    assert r.status.value == "wrong_output", r.message


def _write(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(body)
    return str(path)


GOOD_HEAD = "import torch\nimport torch.nn as nn\nN = 8\n"


@pytest.mark.parametrize("body, expected", [
    ("import torch\nraise RuntimeError('boom')\n", "fails to import: RuntimeError: boom"),
    (GOOD_HEAD + "def get_inputs():\n    return [torch.randn(N)]\n", "has no `Model`"),
    (GOOD_HEAD + "class Model(nn.Module):\n    def forward(self, x):\n        return x\n", "has no `get_inputs`"),
    (GOOD_HEAD + "class Model(nn.Module):\n    def forward(self, x):\n        return float(x.sum())\n"
     "def get_inputs():\n    return [torch.randn(N)]\n", "forward()'s output item 0 is a float; expected torch tensors"),
    (GOOD_HEAD + "class Model(nn.Module):\n    def forward(self, x):\n        return x\n"
     "def get_inputs():\n    return [N]\n", "get_inputs() item 0 is a int; expected torch tensors"),
    (GOOD_HEAD + "SMALL_SIZES = {'M': 2}\nclass Model(nn.Module):\n    def forward(self, x):\n        return x\n"
     "def get_inputs():\n    return [torch.randn(N)]\n", "SMALL_SIZES names ['M'], not int or float constants"),
])
def test_bad_problem_files_name_the_file_and_the_fault(tmp_path, body, expected):
    path = _write(tmp_path, "bad.py", body)
    with pytest.raises(ProblemError) as e:
        load_problem(path, "cpu")
    assert path in str(e.value) and expected in str(e.value)


def test_a_missing_or_non_python_problem_file_is_named(tmp_path):
    with pytest.raises(ProblemError, match=r"nope\.py: no such file"):
        load_problem(str(tmp_path / "nope.py"))
    text = _write(tmp_path, "model.txt", GOOD_HEAD)
    with pytest.raises(ProblemError, match=r"model\.txt: not a Python file"):
        load_problem(text)
    with pytest.raises(ProblemError, match="does not name a problem file"):
        problem_task("relu")


def test_a_slow_reference_build_is_stopped_at_the_budget(tmp_path):
    path = _write(tmp_path, "slow.py", "import time\ntime.sleep(60)\n")
    with pytest.raises(ProblemError, match=r"slow\.py: building its reference took longer than the 3 s budget"):
        ProblemProcess(path, "cpu", 0, build_budget_s=3.0)


def test_parameters_and_constants_become_buffers_and_sizes(tmp_path):
    path = _write(tmp_path, "gemm_relu.py", GOOD_HEAD + textwrap.dedent("""
        in_features, out_features = 6, 5
        SMALL_SIZES = {"N": 3}
        class Model(nn.Module):
            def __init__(self, k, n):
                super().__init__()
                self.fc = nn.Linear(k, n)
            def forward(self, inputs):
                return torch.relu(self.fc(inputs))
        def get_inputs():
            return [torch.rand(N, in_features)]
        def get_init_inputs():
            return [in_features, out_features]
    """))
    task = load_problem(path, "cpu")
    assert [(b.name, b.shape) for b in task.inputs] == [
        ("inputs", ("N", "in_features")), ("fc_weight", ("out_features", "in_features")), ("fc_bias", ("out_features",))]
    assert task.inputs[0].distributions == ("positive",)  # torch.rand's samples are all >= 0
    assert [(b.name, b.shape) for b in task.outputs] == [("out", ("N", "out_features"))]
    assert task.size_set("eval") == {"N": 8, "in_features": 6, "out_features": 5}
    assert task.size_set("small")["N"] == 3
    rng = np.random.default_rng(0)
    arrays = {"inputs": rng.standard_normal((3, 6), dtype=np.float32),
              "fc_weight": rng.standard_normal((5, 6), dtype=np.float32),
              "fc_bias": rng.standard_normal(5, dtype=np.float32)}
    want = np.maximum(arrays["inputs"] @ arrays["fc_weight"].T + arrays["fc_bias"], 0)
    np.testing.assert_allclose(task.reference(np, **arrays), want, rtol=1e-5, atol=1e-6)


SUBMISSIONS = os.path.join(ROOT, "submissions")
SMALL_CPU = ["--backend", "cpu", "--sizes", "small"]


@pytest.mark.parametrize("name", KERNELBENCH)
def test_example_submission_is_the_suite_solution(name):
    with open(os.path.join(SUBMISSIONS, f"{name}.md")) as f:
        assert f.read().strip() == T.get_task(name).solution.strip()


ORIGINALS = sorted(set(TWINS) - set(KERNELBENCH))  # problem files with a submission of their own


def test_there_are_problems_of_both_levels_beyond_the_twins():
    assert len(ORIGINALS) >= 2
    assert {load_problem(TWINS[n], "cpu").level for n in ORIGINALS} == {1, 2}


@pytest.mark.parametrize("name", ORIGINALS)
def test_example_submission_of_an_original_problem_is_correct(name):
    with open(os.path.join(SUBMISSIONS, f"{name}.md"), "rb") as f:
        r = score(load_problem(TWINS[name], "cpu"), f.read(), EnvConfig(backend="cpu", sizes="small", timing=False))
    assert r.correct, r.message


def test_cli_scores_a_problem_file(capsys):
    from kernels_env.cli import main
    code = main(["score", "--problem", TWINS["matmul_diag"], os.path.join(SUBMISSIONS, "matmul_diag.md"),
                 "--json", *SMALL_CPU])
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["status"] == "correct" and result["task"] == "matmul_diag"


def test_cli_names_a_broken_problem_file(tmp_path, capsys):
    from kernels_env.cli import main
    path = _write(tmp_path, "broken.py", "import torch\nimport not_a_module_anywhere\n")
    assert main(["score", "--problem", path, os.path.join(SUBMISSIONS, "matmul_diag.md"), *SMALL_CPU]) == 2
    err = capsys.readouterr().err
    assert path in err and "fails to import: ModuleNotFoundError" in err


def test_cli_bench_scores_a_folder(tmp_path, capsys):
    from kernels_env.cli import main
    problems, subs = tmp_path / "problems", tmp_path / "subs"
    problems.mkdir()
    subs.mkdir()
    for name in ("matmul_diag", "matrix_scalar_mul"):
        shutil.copy(TWINS[name], problems / f"{name}.py")
    shutil.copy(os.path.join(SUBMISSIONS, "matmul_diag.md"), subs / "matmul_diag.md")
    assert main(["bench", "--problems", str(problems), "--submissions", str(subs), "--json", *SMALL_CPU]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["correct"] == 1 and report["problems"] == 2 and report["fast_p"]["eager"] is None
    status = {os.path.basename(r["problem"]): r["status"] for r in report["rows"]}
    assert status == {"matmul_diag.py": "correct", "matrix_scalar_mul.py": "not_scored"}


# ---- the GPU path: the reference in CUDA torch, the kernel on cupy, timed against eager and compile --
@pytest.fixture(scope="module")
def cuda():
    torch = pytest.importorskip("torch")
    pytest.importorskip("cupy")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible to torch")


@pytest.mark.gpu
@pytest.mark.parametrize("name", KERNELBENCH)
def test_gpu_suite_solution_scores_the_same_through_the_twin(name, cuda):
    native = T.get_task(name)
    cfg = EnvConfig(backend="cupy", timing=False)
    twin_result = score(load_problem(TWINS[name], "cupy"), native.solution, cfg)
    native_result = score(native, native.solution, cfg)
    assert twin_result.status == native_result.status, (twin_result.message, native_result.message)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ORIGINALS)
def test_gpu_example_submission_of_an_original_problem_is_correct(name, cuda):
    with open(os.path.join(SUBMISSIONS, f"{name}.md"), "rb") as f:
        r = score(load_problem(TWINS[name], "cupy"), f.read(), EnvConfig(backend="cupy", timing=False))
    assert r.correct, r.message


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["layer_norm", "matmul_scale_residual", "conv2d_relu_bias_add", "gemm_bias_relu"])
def test_gpu_problem_is_timed_against_torch_eager_and_compile(name, cuda):
    with open(os.path.join(SUBMISSIONS, f"{name}.md"), "rb") as f:
        r = score(load_problem(TWINS[name], "cupy"), f.read(), EnvConfig(backend="cupy"))
    assert r.correct, r.message
    t = r.timing
    assert t.eager_median_ms > 0 and t.compile_median_ms > 0, r.details
    assert t.speedup == t.speedup_vs_eager == pytest.approx(t.eager_median_ms / t.kernel_median_ms)
    assert t.speedup_vs_compile == pytest.approx(t.compile_median_ms / t.kernel_median_ms)


# ---- training on a folder of problems: tasks named problem:/path.py, found by name in any process --
def test_training_selects_a_folder_of_problems_by_name(tmp_path):
    from kernels_env.problems import NAME_PREFIX
    from kernels_env.execute.score import resolve_task
    from leap_jax.train.config import ConfigError, load_config
    from leap_jax.train.trainer import select_tasks
    for name in ("matmul_diag", "matrix_scalar_mul", "relu_like"):
        shutil.copy(TWINS["matmul_diag" if name == "relu_like" else name], tmp_path / f"{name}.py")
    cfg = load_config(None, ["tasks.source=problems", f"tasks.problems_dir={tmp_path}",
                             "tasks.held_out_fraction=0.34"])
    train, held = select_tasks(cfg)
    names = sorted(train + held)
    assert names == sorted(NAME_PREFIX + str(tmp_path / f"{n}.py") for n in ("matmul_diag", "matrix_scalar_mul",
                                                                             "relu_like"))
    assert train and held and not set(train) & set(held)
    assert T.get_task(names[0]).name == names[0]  # registered for the trainer's own look-ups
    task = resolve_task(NAME_PREFIX + str(tmp_path / "matrix_scalar_mul.py"))  # how a pool worker finds it
    assert [b.name for b in task.buffers] == ["A", "C"]
    r = score(task.name, T.get_task("matrix_scalar_mul").solution, EnvConfig(backend="cpu", sizes="small",
                                                                             timing=False))
    assert r.correct and r.task == task.name, r.message
    with pytest.raises(ConfigError, match="tasks.source=problems needs tasks.problems_dir"):
        load_config(None, ["tasks.source=problems"])
    with pytest.raises(ConfigError, match="not a directory"):
        select_tasks(load_config(None, ["tasks.source=problems", f"tasks.problems_dir={tmp_path / 'nope'}"]))


def test_registered_problems_are_found_by_name_but_never_listed_with_the_suite(tmp_path):
    """A training run registers its problem files; list_tasks (the hand-written suite) stays as it was."""
    from kernels_env.problems import register_problems
    before = [t.name for t in T.list_tasks()]
    shutil.copy(os.path.join(ROOT, "level1", "mse_loss.py"), tmp_path / "mse_loss.py")
    names = register_problems(str(tmp_path))
    assert len(names) == 1 and T.get_task(names[0]).name == names[0]
    assert [t.name for t in T.list_tasks()] == before
