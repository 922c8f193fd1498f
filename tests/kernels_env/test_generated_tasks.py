"""Generated tasks (kernels_env.tasks.generated): deterministic prefix-stable name lists, names that
resolve lazily in any process, a train / held-out split by composition, known-good solutions correct
on the cpu backend (and on a GPU at eval sizes), inputs covering the described domain, and
comparisons that reject constant or input-ignoring outputs."""
from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kernels_env.core.config import EnvConfig
from kernels_env.judge.compare import compare_output
from kernels_env.execute.inputs import make_inputs
from kernels_env.core.status import Status
from kernels_env.tasks import get_task, list_tasks
from kernels_env.tasks.generated import generated_task_names, held_out_pairs, parse_name, split_of
from kernels_env.tasks.generated.grammar import FAMILIES
from kernels_env.tasks.generated.ops import BINARY, ROWOPS, UNARY
from kernels_env.tasks.generated.split import op_pairs

ROOT = Path(__file__).resolve().parents[2]
NAME_RE = re.compile(r"^gen_[a-z0-9_]+$")


def _sample() -> list[str]:
    """The first train and the first held-out name of every (family, dtype) in the seed-0 order."""
    picked: dict[tuple[str, str, str], str] = {}
    for n in generated_task_names(4000, seed=0, split="all"):
        s = parse_name(n)
        picked.setdefault((s.family, s.dtype, split_of(n)), n)
    return [picked[k] for k in sorted(picked)]


SAMPLE = _sample()


def test_sample_covers_every_family_dtype_and_split():
    keys = {(parse_name(n).family, parse_name(n).dtype, split_of(n)) for n in SAMPLE}
    assert keys == {(f, d, sp) for f in FAMILIES for d in ("f32", "f16") for sp in ("train", "held_out")}


def test_names_deterministic_prefix_stable_distinct():
    for split in ("train", "held_out", "all"):
        long = generated_task_names(700, seed=0, split=split)
        assert long == generated_task_names(700, seed=0, split=split)
        assert long[:123] == generated_task_names(123, seed=0, split=split)
        assert len(set(long)) == len(long)
        assert all(NAME_RE.match(n) for n in long)
    assert generated_task_names(50, seed=1) != generated_task_names(50, seed=0)
    assert generated_task_names(0) == []
    with pytest.raises(ValueError, match="exceeds"):
        generated_task_names(10 ** 7)
    with pytest.raises(ValueError, match="split"):
        generated_task_names(3, split="test")


def test_counts_available():
    assert len(generated_task_names(3000, split="train")) == 3000
    assert len(generated_task_names(600, split="held_out")) == 600


def test_names_round_trip_and_resolve():
    for n in generated_task_names(300, seed=2, split="all"):
        spec = parse_name(n)
        assert spec.name == n
        t = get_task(n)
        assert t.name == n and "generated" in t.tags and split_of(n) in t.tags
        assert spec.family in t.tags
    assert all(not t.name.startswith("gen_") for t in list_tasks())  # the suite stays hand-written
    for bad in ("gen_ew_bogus_f32_s0", "gen_ew_relu_relu_f32_s0", "gen_ew_add_f32_s0", "gen_ew_relu_f64_s0",
                "gen_red_relu_f32_s0", "gen_ew_relu_f32_s9"):
        with pytest.raises(KeyError):
            get_task(bad)


def test_resolves_in_a_fresh_process():
    name = generated_task_names(1, seed=5, split="held_out")[0]
    code = f"from kernels_env.tasks import get_task; print(get_task({name!r}).name)"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == name


def test_split_by_composition():
    train = generated_task_names(3000, seed=0, split="train")
    held = generated_task_names(600, seed=0, split="held_out")
    assert not set(train) & set(held)
    hp = set(held_out_pairs())
    assert 0.1 * 400 < len(hp) < 0.3 * 700
    train_ops: set[str] = set()
    for n in train:
        s = parse_name(n)
        assert not set(op_pairs(s)) & hp, n
        train_ops |= set(s.ops)
    for n in held:
        assert set(op_pairs(parse_name(n))) & hp, n
    assert train_ops == set(UNARY) | set(BINARY) | set(ROWOPS)  # every op of the vocabulary
    fams = {parse_name(n).family for n in held}
    assert fams == set(FAMILIES)


@pytest.mark.parametrize("name", SAMPLE)
def test_inputs_cover_the_described_domain(name):
    t = get_task(name)
    sizes = t.size_set("small")
    assert "any finite values" in t.description
    draws = [make_inputs(t, sizes, trial, 0, np) for trial in range(3)]
    for b in t.inputs:
        assert "positive" not in b.distributions  # no op of the grammar needs positive inputs
        vals = np.concatenate([d[b.name].astype(np.float64).ravel() for d in draws])
        assert (vals < 0).any() and (vals > 0).any(), b.name
        # the heavy-tailed trial goes far past the uniform [-1, 1) and normal ranges
        assert np.abs(vals).max() > (5.0 if b.name == "x" else 1.5), b.name


@pytest.mark.parametrize("name", SAMPLE)
def test_constant_or_input_ignoring_outputs_fail(name):
    t = get_task(name)
    sizes = t.size_set("small")
    out = t.outputs[0]
    atol, rtol = t.tol(out.dtype)
    scalars = {s.name: s.value for s in t.scalars}
    for trial in range(3):
        inputs = make_inputs(t, sizes, trial, 0, np)
        other = make_inputs(t, sizes, trial, 1, np)
        expected = np.asarray(t.reference(np, **inputs, **scalars))
        assert expected.shape == out.resolve_shape(sizes) and expected.dtype == np.dtype(out.dtype)
        assert compare_output(np, "y", expected, expected, out.dtype, atol, rtol, trial, "x") is None
        const = np.full_like(expected, float(np.nanmean(expected.astype(np.float64))))
        ignoring = np.asarray(t.reference(np, **other, **scalars))
        for wrong in (np.zeros_like(expected), const, ignoring):
            assert compare_output(np, "y", wrong, expected, out.dtype, atol, rtol, trial, "x") is not None


def test_solutions_are_canonical_and_short():
    lengths = []
    for n in generated_task_names(400, seed=0, split="all"):
        sol = get_task(n).solution
        lengths.append(len(sol))
        kernel = "ew_kernel" if parse_name(n).row is None else "row_kernel"
        assert f'extern "C" __global__ void {kernel}(' in sol and f"{kernel}<<<" in sol
    assert max(lengths) < 1700 and np.median(lengths) < 1300


@pytest.mark.slow
@pytest.mark.parametrize("name", SAMPLE)
def test_solution_correct_on_cpu_backend(name, cpu_device):
    from kernels_env.execute.score import score

    task = get_task(name)
    cfg = EnvConfig(backend="cpu", sizes="small", timing=False, correctness_trials=3)
    r = score(task, task.solution, cfg, device=cpu_device)
    assert r.status == Status.CORRECT, f"{name}: {r.status.value}: {r.message}\n{r.details[:1500]}"


def test_cli_list_show_score(tmp_path):
    from kernels_env.cli import main

    def run(argv):
        out = io.StringIO()
        return main(argv, out=out), out.getvalue()

    code, text = run(["list", "--generated", "7", "--split", "held_out", "--seed", "3"])
    assert code == 0 and text.strip().endswith("7 tasks")
    assert all(n in text for n in generated_task_names(7, seed=3, split="held_out"))
    name = SAMPLE[0]
    code, text = run(["show", name])
    assert code == 0 and text.startswith(f"# {name} ") and get_task(name).solution.strip() in text
    f = tmp_path / "sol.md"
    f.write_text(get_task(name).solution)
    # process mode: the worker resolves the generated name by itself
    code, text = run(["score", "--task", name, str(f), "--backend", "cpu", "--sizes", "small", "--no-timing",
                      "--trials", "2"])
    assert code == 0 and text.startswith("correct:"), text
    f.write_text(get_task(name).solution.replace("y[", "y[0 * "))  # wrong indices -> wrong output
    code, text = run(["score", "--task", name, str(f), "--backend", "cpu", "--sizes", "small", "--no-timing",
                      "--trials", "2", "--inline"])
    assert code == 1, text
    code, _ = run(["show", "gen_ew_nosuchop_f32_s0"])
    assert code == 2


@pytest.fixture(scope="module")
def gpu_device():
    from kernels_env.backends import get_device
    dev = get_device("cupy", EnvConfig(backend="cupy"))
    yield dev
    dev.close()


GPU_NAMES = generated_task_names(12, seed=7, split="train") + generated_task_names(12, seed=7, split="held_out")


@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU_NAMES)
def test_solution_correct_on_gpu_eval_sizes(name, gpu_device):
    from kernels_env.execute.score import score

    task = get_task(name)
    cfg = EnvConfig(backend="cupy", sizes="eval", timing=True, correctness_trials=3, warmup_runs=2,
                    timed_runs=10)
    r = score(task, task.solution, cfg, device=gpu_device)
    assert r.status == Status.CORRECT, f"{name}: {r.status.value}: {r.message}\n{r.details[:1500]}"
    if r.timing is not None:
        print(f"{name}: ref {r.timing.ref_median_ms} ms, kernel {r.timing.kernel_median_ms} ms")
