"""The kernel world's names and split: deterministic prefix-stable lists, tasks fully determined by
their names (same sizes, solution, input arrays), a split by composition with disjoint sides, no suite
task and no 8-line window of a suite solution among the world's, names resolving through get_task,
and known-good solutions correct on the cpu backend (one task per family and mode)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from kernels_env.core.config import EnvConfig
from kernels_env.core.status import Status
from kernels_env.execute.inputs import make_inputs
from kernels_env.tasks import get_task, list_tasks
from kernels_env.tasks.world import FAMILIES, get_world_task, parse_name, split_of, world_task_names
from kernels_env.tasks.world.grammar import all_specs, combos
from kernels_env.tasks.world.split import pair_side, token_pairs


def test_names_deterministic_prefix_stable_distinct():
    for split in ("train", "validation", "held_out", "all"):
        long = world_task_names(300, seed=0, split=split)
        assert long == world_task_names(300, seed=0, split=split)
        assert long[:77] == world_task_names(77, seed=0, split=split)
        assert len(set(long)) == len(long)
        assert all(re.fullmatch(r"gen_w_[a-z0-9_]+_s[0-9]+", n) for n in long)
    assert world_task_names(40, seed=1) != world_task_names(40, seed=0)
    with pytest.raises(ValueError, match="exceeds"):
        world_task_names(10 ** 6)
    with pytest.raises(ValueError, match="split"):
        world_task_names(3, split="test")


def test_same_name_same_task_and_arrays():
    for name in world_task_names(len(FAMILIES) * 2, seed=3, split="all"):
        a = get_world_task(name)
        get_world_task.cache_clear()
        b = get_world_task(name)
        assert a is not b and (a.sizes, a.solution, a.description, a.tolerance) == (b.sizes, b.solution,
                                                                                   b.description, b.tolerance)
        sizes = a.size_set("small")
        xa, xb = make_inputs(a, sizes, 1, 0, np), make_inputs(b, sizes, 1, 0, np)
        assert all(np.array_equal(xa[k], xb[k]) for k in xa)
    # the seed draws the sizes: the eight seeds of a composition do not all share one size set
    assert len({str(get_world_task(f"gen_w_mm_rect_f32_s{s}").sizes) for s in range(8)}) > 4


def test_every_family_has_ragged_sizes():
    """Some eval size of every family is not a multiple of 16 (tiles need edge handling)."""
    for fam in FAMILIES:
        names = [s.name for s in all_specs() if s.family == fam][:64]
        assert any(v % 16 for n in names for v in get_world_task(n).sizes["eval"].values() if v > 16), fam


def test_split_by_composition_disjoint_and_covering():
    every = list(all_specs())
    by_side: dict[str, set[str]] = {"train": set(), "validation": set(), "held_out": set()}
    for s in every:
        by_side[split_of(s.name)].add(s.name)
    assert sum(len(v) for v in by_side.values()) == len(every)
    assert not (by_side["train"] & by_side["validation"]) and not (by_side["train"] & by_side["held_out"])
    for side in ("validation", "held_out"):
        assert 0.05 * len(every) < len(by_side[side]) < 0.5 * len(every), side
    train_tokens, train_pairs = set(), set()
    for n in by_side["train"]:
        spec = parse_name(n)
        train_tokens |= set(spec.tokens) | {spec.family}
        train_pairs |= set(token_pairs(spec))
    assert all(pair_side(*p) == "train" for p in train_pairs)
    for n in by_side["held_out"]:
        assert any(pair_side(*p) == "held_out" for p in token_pairs(parse_name(n))), n
    all_tokens = {t for s in every for t in s.tokens} | set(FAMILIES)
    assert train_tokens == all_tokens  # every op and variant is trained on, some combinations never
    assert {"cv", "pl", "fu"} <= {parse_name(n).family for n in by_side["held_out"]}
    assert all(split_of(n) == "train" for n in world_task_names(200, split="train"))


def test_suite_stays_a_test_set():
    suite = list_tasks()
    names = {t.name for t in suite}
    world = set(world_task_names(len(all_specs()), split="all"))
    assert not names & world

    def norm_lines(text):
        return [" ".join(line.split()) for line in text.splitlines() if line.strip()]

    windows = set()
    for t in suite:
        lines = norm_lines(t.solution)
        windows |= {"\n".join(lines[i:i + 8]) for i in range(len(lines) - 7)}
    # a solution depends on its tokens only, so seed 0 of every composition covers every solution text
    for fam in FAMILIES:
        for toks, dt in combos(fam):
            lines = norm_lines(get_world_task(f"gen_w_{fam}_{'_'.join(toks)}_{dt}_s0").solution)
            hit = {"\n".join(lines[i:i + 8]) for i in range(len(lines) - 7)} & windows
            assert not hit, (fam, toks, sorted(hit)[:1])


def test_names_resolve_through_get_task_and_reject_bad_ones():
    for n in world_task_names(20, seed=2, split="held_out"):
        t = get_task(n)
        assert t.name == n and "world" in t.tags and "held_out" in t.tags
    for bad in ("gen_w_mm_cube_f32_s0", "gen_w_cv_3d_tr_f32_s0", "gen_w_mm_sq_f32_s99", "gen_w_zz_sq_f32_s0",
                "gen_w_fu_mm_relu_relu_f32_s0", "gen_w_fu_mm_rsum_relu_f32_s0", "gen_w_cv_2d_std_f16_s0"):
        with pytest.raises(KeyError, match="unknown task"):
            get_task(bad)


def _one_per_mode() -> list[str]:
    picked: dict[tuple[str, str], str] = {}
    for n in world_task_names(len(all_specs()), seed=0, split="all"):
        s = parse_name(n)
        picked.setdefault((s.family, s.tokens[1] if s.family in ("cv", "pl") else s.tokens[0]), n)
    return sorted(picked.values())


@pytest.mark.slow
@pytest.mark.parametrize("name", _one_per_mode())
def test_solution_correct_on_cpu_backend(name, cpu_device):
    from kernels_env.execute.score import score

    task = get_task(name)
    cfg = EnvConfig(backend="cpu", sizes="small", timing=False, correctness_trials=3)
    r = score(task, task.solution, cfg, device=cpu_device)
    assert r.status == Status.CORRECT, f"{name}: {r.status.value}: {r.message}\n{r.details[:1500]}"


@pytest.fixture(scope="module")
def gpu_device():
    from kernels_env.backends import get_device
    dev = get_device("cupy", EnvConfig(backend="cupy"))
    yield dev
    dev.close()


@pytest.mark.gpu
@pytest.mark.parametrize("name", _one_per_mode() + world_task_names(16, seed=7, split="held_out"))
def test_solution_correct_on_gpu_eval_sizes(name, gpu_device):
    from kernels_env.execute.score import score

    task = get_task(name)
    cfg = EnvConfig(backend="cupy", sizes="eval", timing=False, correctness_trials=3)
    r = score(task, task.solution, cfg, device=gpu_device)
    assert r.status == Status.CORRECT, f"{name}: {r.status.value}: {r.message}\n{r.details[:1500]}"


@pytest.mark.parametrize("name", _one_per_mode())
def test_judge_cheats_fail(name):
    """validate_task's cheats (constants, zeros, an input ignored, a trial replayed) fail every family's
    tolerance at small sizes: the rule is tight enough, and no family is degenerate there."""
    from kernels_env.execute.validate import validate_task

    assert validate_task(get_task(name), sizes="small") == []


def test_cli_show_and_score_a_world_task(tmp_path):
    import io

    from kernels_env.cli import main

    def run(argv):
        out = io.StringIO()
        return main(argv, out=out), out.getvalue()

    name = "gen_w_sc_sum_rev_f32_s1"
    code, text = run(["show", name])
    assert code == 0 and text.startswith(f"# {name} ") and get_task(name).solution.strip() in text
    f = tmp_path / "sol.md"
    f.write_text(get_task(name).solution)
    # process mode: the worker resolves the world name by itself
    code, text = run(["score", "--task", name, str(f), "--backend", "cpu", "--sizes", "small", "--no-timing",
                      "--trials", "2"])
    assert code == 0 and text.startswith("correct:"), text
    f.write_text(get_task(name).solution.replace("int j = N - 1 - s;", "int j = s;"))  # a forward scan: wrong
    code, text = run(["score", "--task", name, str(f), "--backend", "cpu", "--sizes", "small", "--no-timing",
                      "--trials", "2", "--inline"])
    assert code == 1 and not text.startswith("correct"), text
    code, _ = run(["show", "gen_w_mm_cube_f32_s0"])
    assert code == 2


def test_every_task_has_nonempty_buffers():
    """Drawn geometry never leaves an output extent (or any buffer) empty, at either size set (every
    task but the fusions, whose convolutions draw H, W >= 7 > K by construction)."""
    for spec in all_specs():
        if spec.family == "fu" and spec.seed:
            continue
        t = get_world_task(spec.name)
        for which in ("eval", "small"):
            sizes = t.size_set(which)
            for b in t.buffers:
                assert min(b.resolve_shape(sizes)) >= 1, (spec.name, which, b.name, sizes)
