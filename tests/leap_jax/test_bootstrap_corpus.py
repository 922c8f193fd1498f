"""The bootstrap corpus and its source mutations, on the cpu backend at small sizes.

Labels are checked against an independent re-score (`kernels_env.score` in this process, fresh
inputs); the statuses of deliberate bugs are measured on tasks where they apply; the JSONL files are
checked for determinism, example structure, train flags and manifest counts.
"""
from __future__ import annotations

import collections
import json
import random
import re
from dataclasses import asdict
from pathlib import Path

import pytest

from kernels_env.core.config import EnvConfig
from kernels_env.judge.feedback import render_feedback
from kernels_env.execute.score import score
from kernels_env.schedule.pool import EvalPool, Job
from kernels_env.source.launch import FormatError, check_plan
from kernels_env.source.signatures import find_hidden_kernels
from kernels_env.source.submission import parse_submission
from kernels_env.tasks import get_task, list_tasks
from leap_jax.bootstrap import corpus as C
from leap_jax.bootstrap.mutations import (MUTATIONS, MUTATIONS_BY_NAME, SubmissionShapeError, join_blocks,
                                          mutate, split_blocks)
from leap_jax.rollout.prompts import SYSTEM_PROMPT, feedback_message, task_prompt

TASKS = ["relu", "sum_dim", "maxpool1d_nopad"]  # grid-stride elementwise, early-return reduction, pooling window


def _cfg(seed: int = 0, **kw) -> C.CorpusCfg:
    return C.CorpusCfg(tasks=list(TASKS), seed=seed, variants_per_task=8, multiturn_per_task=3,
                       correctness_trials=2, workers=1, **kw)


def _canonical(task: str) -> str:
    return join_blocks(*split_blocks(get_task(task).solution))


@pytest.fixture(scope="module")
def pool():
    cfg = _cfg()
    with EvalPool(mode="process", backend="cpu", config=C.env_config(cfg), cache=True,
                  compile_workers=1, cpu_workers=1) as p:
        yield p


@pytest.fixture(scope="module")
def built(pool, tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus")
    cfg = _cfg()
    records, examples = C.build_corpus(cfg, out, pool)
    return cfg, records, examples, out


# ---- mutations (pure text; no scoring) ---------------------------------------------------------
def _strip_comments_ref(src: str) -> list[str]:
    """Independent comment removal: cut each line at `//`, drop lines left blank that were comments."""
    out = []
    for ln in src.splitlines():
        code = ln.split("//", 1)[0].rstrip()
        if code or "//" not in ln:
            out.append(code)
    return out


def _format_check(task, text: str) -> None:
    """The environment's parse stage: blocks, launch plan, plan against the kernels (FormatError)."""
    sub = parse_submission(text)
    check_plan(sub.plan, sub.kernels, task, task.size_set("small"), find_hidden_kernels(sub.cuda_source))


def test_every_mutation_returns_none_or_two_blocks_on_every_task():
    applied = collections.Counter()
    for task in list_tasks():
        base = _canonical(task.name)
        for m in MUTATIONS:
            for seed in range(2):
                out = m.fn(base, random.Random(seed))
                if out is None:
                    continue
                applied[m.name] += 1
                assert out != base, (m.name, task.name)
                cuda, launch = split_blocks(out)  # still a cuda + a launch block
                assert cuda.strip() and launch.strip()
                if m.name == "misnamed_launch":  # the deliberately malformed one
                    with pytest.raises(FormatError, match="_kernel2"):
                        _format_check(task, out)
                elif m.name == "floor_grid":  # N / B is a zero-block grid when N < B: the env rejects it
                    try:
                        _format_check(task, out)
                    except FormatError as e:
                        assert "grid.x = 0" in str(e), str(e)
                else:
                    _format_check(task, out)  # launch plan parses and matches the kernels
    # every mutation applies somewhere in the suite (grid_stride only after one_per_thread)
    assert set(applied) == set(MUTATIONS_BY_NAME) - {"grid_stride"}, sorted(applied)
    opt = MUTATIONS_BY_NAME["one_per_thread"].fn(_canonical("relu"), random.Random(0))
    back = MUTATIONS_BY_NAME["grid_stride"].fn(opt, random.Random(0))
    assert back is not None and "gridDim.x) {" in back and "<<<min(cdiv(N, 256)," in back


def test_mutations_make_the_edit_their_name_says():
    relu, sum_dim, softmax = (_canonical(t) for t in ("relu", "sum_dim", "softmax"))
    rng = lambda: random.Random(3)  # noqa: E731
    # off-by-one: exactly one `<` became `<=`, nothing else changed
    out = MUTATIONS_BY_NAME["off_by_one_bound"].fn(sum_dim, rng())
    assert out.count("<=") == sum_dim.count("<=") + 1 and out.replace("<=", "<") == sum_dim.replace("<=", "<")
    assert "d <= D" in out  # the only `<` bound outside comments in sum_dim
    out = MUTATIONS_BY_NAME["early_return_bound"].fn(sum_dim, rng())
    assert "if (idx > B * I) return;" in out
    out = MUTATIONS_BY_NAME["drop_semicolon"].fn(relu, rng())
    assert len(out) == len(relu) - 1 and out.count(";") == relu.count(";") - 1
    out = MUTATIONS_BY_NAME["drop_sync"].fn(softmax, rng())
    assert out.count("__syncthreads();") == softmax.count("__syncthreads();") - 1
    out = MUTATIONS_BY_NAME["strip_comments"].fn(softmax, rng())
    assert "//" not in out
    assert split_blocks(out)[0].splitlines() == _strip_comments_ref(split_blocks(softmax)[0])
    out = MUTATIONS_BY_NAME["rename_kernel"].fn(relu, rng())
    new = re.search(r"__global__ void (\w+)\(", out).group(1)
    assert new != "relu_kernel" and new.startswith("relu_kernel") and f"{new}<<<" in split_blocks(out)[1]
    out = MUTATIONS_BY_NAME["floor_grid"].fn(_canonical("sum_dim"), rng())
    assert "<<<(B * I) / (256), 256>>>" in out
    out = MUTATIONS_BY_NAME["launch_block_mismatch"].fn(sum_dim, rng())
    assert "<<<cdiv(B * I, 256), 128>>>" in out
    out = MUTATIONS_BY_NAME["block_size"].fn(sum_dim, rng())
    b = int(re.search(r"<<<cdiv\(B \* I, (\d+)\), (\d+)>>>", out).group(1))
    assert b != 256 and f"cdiv(B * I, {b}), {b}>>>" in out
    out = MUTATIONS_BY_NAME["unroll"].fn(softmax, rng())
    assert re.search(r"\n([ \t]*)#pragma unroll [248]\n\1for \(", out)
    # edits never land inside comments: a comment-only `<` is no site
    commented = join_blocks("// keep i < n here;\n" + split_blocks(relu)[0], split_blocks(relu)[1])
    for seed in range(8):
        out = MUTATIONS_BY_NAME["off_by_one_bound"].fn(commented, random.Random(seed))
        assert "// keep i < n here;" in out


def test_vectorize4_rewrites_elementwise_kernels_only():
    out = MUTATIONS_BY_NAME["vectorize4"].fn(_canonical("relu"), random.Random(0))
    assert "float4" in out and "n4" in out
    assert MUTATIONS_BY_NAME["vectorize4"].fn(_canonical("softmax"), random.Random(0)) is None
    # a body whose middle line uses the index cannot be split into lanes
    src = _canonical("relu").replace("float r = fmaxf(v, 0.0f);", "float r = fmaxf(v, (float)i);")
    assert MUTATIONS_BY_NAME["vectorize4"].fn(src, random.Random(0)) is None


def test_mutations_are_deterministic_and_validate_input():
    base = _canonical("softmax")
    for m in MUTATIONS:
        assert m.fn(base, random.Random(11)) == m.fn(base, random.Random(11)), m.name
    a = [mutate(base, random.Random(s), max_chain=3) for s in range(6)]
    assert a == [mutate(base, random.Random(s), max_chain=3) for s in range(6)]
    assert len({x[0] for x in a if x}) > 1
    with pytest.raises(KeyError, match="unknown mutation 'nope'"):
        mutate(base, random.Random(0), names=["nope"])
    with pytest.raises(SubmissionShapeError, match="no ```launch block"):
        split_blocks("```cuda\nint x;\n```")
    # restricted to bug mutations, the chain ends with exactly one bug
    for s in range(5):
        res = mutate(base, random.Random(s), names=["drop_semicolon", "typo_identifier"])
        assert res is None or len(res[1]) == 1


def test_generate_variants_is_deterministic_and_chains_from_clean_parents():
    a = C.generate_variants("relu", 10, seed=5)
    assert a == C.generate_variants("relu", 10, seed=5)
    assert [v["text"] for v in a] != [v["text"] for v in C.generate_variants("relu", 10, seed=6)]
    assert a[0]["mutations"] == [] and a[0]["text"] == _canonical("relu") and a[0]["parent"] is None
    by_id = {v["id"]: v for v in a}
    assert len(by_id) == len(a) == len({v["text"] for v in a})
    intents = {m.name: m.intent for m in MUTATIONS}
    for v in a[1:]:
        parent = by_id[v["parent"]]
        assert parent["intent"] == "correct"
        assert v["mutations"][:len(parent["mutations"])] == parent["mutations"]
        assert sum(intents[n] == "wrong" for n in v["mutations"]) <= 1
        assert v["intent"] == ("wrong" if any(intents[n] == "wrong" for n in v["mutations"]) else "correct")


# ---- measured statuses of deliberate bugs -------------------------------------------------------
RESCORE = EnvConfig(backend="cpu", sizes="small", timing=False, correctness_trials=3, seed=4242)


@pytest.mark.parametrize("task,mutation,expected", [
    ("relu", "drop_semicolon", {"compile_error"}),
    ("maxpool1d_nopad", "typo_identifier", {"compile_error"}),
    ("sum_dim", "off_by_one_bound", {"wrong_output", "runtime_error"}),  # `d <= D` reads a row too many
    ("relu", "wrong_index", {"wrong_output"}),  # part of y is never written
    ("maxpool1d_nopad", "floor_grid", {"wrong_output"}),  # 294 outputs, 256 per block: the tail block is lost
    ("relu", "misnamed_launch", {"format_error"}),
    ("relu", "rename_kernel", {"correct"}),
    ("relu", "vectorize4", {"correct"}),
    ("softmax", "block_size", {"correct"}),
])
def test_mutation_status_is_measured(task, mutation, expected):
    text = MUTATIONS_BY_NAME[mutation].fn(_canonical(task), random.Random(1))
    assert text is not None
    r = score(task, text, RESCORE)
    assert r.status.value in expected, (mutation, r.status.value, r.message)


# ---- the built corpus --------------------------------------------------------------------------
def _reproducible(r: dict) -> bool:
    """Labels that must repeat exactly: rewrites of known-good code, and the static stages. A
    deliberate bound bug that READS out of bounds reads uninitialised memory, so its measured status
    may differ between runs (seen: softmax `j <= N` scoring correct in one run, wrong_output in the
    next on the cpu backend); those variants are never training targets."""
    return r["intent"] == "correct" or r["status"] in ("compile_error", "format_error")


def test_labels_equal_an_independent_rescore(built):
    cfg, records, _, _ = built
    assert {r["task"] for r in records} == set(TASKS)
    statuses = {r["status"] for r in records}
    assert "correct" in statuses and statuses - {"correct"}, statuses
    assert sum(C.is_clean_correct(r) for r in records) >= len(TASKS)
    for r in records:
        again = score(r["task"], r["text"], RESCORE).status.value  # other inputs, more trials, this process
        if _reproducible(r):
            assert again == r["status"], (r["task"], r["mutations"], r["status"], again)
        else:  # it compiled and ran both times
            assert again not in ("compile_error", "format_error", "env_error"), (r["mutations"], again)
        assert r["id"] == C._vid(r["task"], r["text"])
    for t in TASKS:  # the canonical solution is always variant 0 of its task, and correct
        first = next(r for r in records if r["task"] == t)
        assert first["mutations"] == [] and first["status"] == "correct"


def test_examples_structure_and_train_flags(built):
    cfg, records, examples, _ = built
    by_id = {r["id"]: r for r in records}
    kinds = collections.Counter(e["kind"] for e in examples)
    assert kinds["single"] > 0 and kinds["multiturn"] > 0
    for e in examples:
        msgs = e["messages"]
        assert [m["role"] for m in msgs[:2]] == ["system", "user"]
        assert msgs[0]["content"] == SYSTEM_PROMPT
        assert msgs[1]["content"] == task_prompt(get_task(e["task"]), cfg.prompt_sizes)
        for m in msgs:  # only correct assistant turns are trained on
            want = m["role"] == "assistant" and any(
                by_id[v]["text"] == m["content"] and by_id[v]["status"] == "correct" for v in e["variants"])
            assert m["train"] is want, (e["kind"], m["role"], m["train"])
        last = by_id[e["variants"][-1]]
        assert msgs[-1] == {"role": "assistant", "content": last["text"], "train": True}
        assert last["status"] == "correct" and last["intent"] == "correct" and last["task"] == e["task"]
        if e["kind"] == "single":
            assert len(msgs) == 3 and len(e["variants"]) == 1
    # no two examples share a message dict (consumers may edit one in place)
    ids = [id(m) for e in examples for m in e["messages"]]
    assert len(ids) == len(set(ids))
    # every clean correct variant is a single-turn example; a bug that scored correct never is taught
    singles = {e["variants"][0] for e in examples if e["kind"] == "single"}
    assert singles == {r["id"] for r in records if r["status"] == "correct" and r["intent"] == "correct"}


def test_multiturn_examples_carry_the_real_feedback(built, pool):
    cfg, records, examples, _ = built
    by_id = {r["id"]: r for r in records}
    multi = [e for e in examples if e["kind"] == "multiturn"]
    ecfg = C.env_config(cfg)
    checked_fresh = 0
    for e in multi:
        wrong_id, fix_id = e["variants"]
        wrong, fix = by_id[wrong_id], by_id[fix_id]
        msgs = e["messages"]
        assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant"]
        assert msgs[2] == {"role": "assistant", "content": wrong["text"], "train": False}
        assert wrong["status"] not in ("correct", "env_error") and e["wrong_status"] == wrong["status"]
        assert fix["status"] == "correct" and fix["task"] == wrong["task"] == e["task"]
        if by_id[wrong["parent"]]["status"] == "correct":
            assert fix_id == wrong["parent"]  # the fix of a bug is the code before the bug
        # the feedback is render_feedback of the environment's result for exactly that text
        result = pool.map([Job(wrong["task"], wrong["text"], ecfg)])[0]
        fb = render_feedback(result, cfg.feedback_budget_chars)
        assert msgs[3]["content"] == feedback_message(fb).content
        assert msgs[3]["content"].startswith(f"{wrong['status']}: ")
        if wrong["status"] in ("compile_error", "format_error"):  # deterministic: re-score from scratch
            fresh = render_feedback(score(wrong["task"], wrong["text"], ecfg), cfg.feedback_budget_chars)
            assert msgs[3]["content"] == feedback_message(fresh).content
            checked_fresh += 1
    assert checked_fresh > 0
    per_task = collections.Counter(e["task"] for e in multi)
    assert max(per_task.values()) <= cfg.multiturn_per_task


def test_files_and_manifest_counts_match_the_records(built):
    cfg, records, examples, out = built
    assert C.read_jsonl(out / C.VARIANTS_FILE) == records
    assert C.read_jsonl(out / C.EXAMPLES_FILE) == examples
    man = json.loads((out / C.MANIFEST_FILE).read_text())
    assert man["config"] == json.loads(json.dumps(asdict(cfg)))
    assert man["variants"] == len(records)
    assert man["tasks"] == len(TASKS)
    assert man["by_status"] == dict(collections.Counter(r["status"] for r in records))
    assert man["examples"] == dict(collections.Counter(e["kind"] for e in examples))
    iv = man["intent_vs_status"]
    assert sum(iv.values()) == len(records)
    assert iv["wrong_intent_correct"] == sum(r["intent"] == "wrong" and r["status"] == "correct" for r in records)
    assert iv["correct_intent_correct"] == sum(C.is_clean_correct(r) for r in records)
    assert man == {"config": man["config"], **C.summary(records, examples)}
    assert not list(Path(out).glob("*.tmp"))


def test_same_seed_same_bytes_other_seed_other_corpus(built, pool, tmp_path):
    cfg, records, _, out = built
    again = tmp_path / "again"
    C.build_corpus(_cfg(), again, pool)
    for f in (C.VARIANTS_FILE, C.EXAMPLES_FILE, C.MANIFEST_FILE):
        assert (again / f).read_bytes() == (out / f).read_bytes(), f
    other = tmp_path / "other"
    C.build_corpus(_cfg(seed=1), other, pool)
    assert (other / C.VARIANTS_FILE).read_bytes() != (out / C.VARIANTS_FILE).read_bytes()
    assert (other / C.EXAMPLES_FILE).read_bytes() != (out / C.EXAMPLES_FILE).read_bytes()
    # scoring in a fresh pool (no shared cache) gives the same labels
    fresh = C.score_variants([{k: r[k] for k in ("id", "task", "mutations", "intent", "parent", "text")}
                              for r in records], _cfg())
    for f, r in zip(fresh, records, strict=True):
        if _reproducible(r):
            assert f["status"] == r["status"], (r["task"], r["mutations"])


def test_load_or_build_reuses_a_matching_corpus(built, tmp_path):
    cfg, records, examples, out = built

    class NoPool:
        def map(self, jobs):
            raise AssertionError("load_or_build scored although the corpus on disk matches")

    assert C.load_or_build(cfg, out, NoPool()) == (records, examples)
    with pytest.raises(AssertionError, match="scored although"):
        C.load_or_build(_cfg(seed=9), tmp_path / "x", NoPool())


def test_build_examples_from_handmade_records():
    """The example rules on records with chosen statuses: a bug that scored correct is never used;
    a failing correct-intent rewrite is a wrong attempt fixed by another clean variant."""
    def rec(i, mutations, intent, status, parent=None):
        return {"id": f"v{i}", "task": "relu", "mutations": mutations, "intent": intent, "parent": parent,
                "text": f"text {i}", "status": status, "message": "", "feedback": f"{status}: fb {i}"}

    records = [rec(0, [], "correct", "correct"),
               rec(1, ["off_by_one_bound"], "wrong", "correct", "v0"),  # latent bug: measured correct
               rec(2, ["block_size"], "correct", "wrong_output", "v0"),
               rec(3, ["block_size", "drop_semicolon"], "wrong", "compile_error", "v2"),  # parent failed
               rec(4, ["typo_identifier"], "wrong", "env_error", "v0")]
    ex = C.build_examples(records, C.CorpusCfg(tasks=["relu"], multiturn_per_task=5))
    used = {v for e in ex for v in e["variants"]}
    assert "v1" not in used and "v4" not in used
    assert [e["variants"] for e in ex if e["kind"] == "single"] == [["v0"]]
    multi = {e["variants"][0]: e for e in ex if e["kind"] == "multiturn"}
    assert set(multi) == {"v2", "v3"}
    assert multi["v3"]["variants"][1] == "v0"  # its parent v2 failed: another clean correct variant
    assert multi["v2"]["messages"][3]["content"] == feedback_message("wrong_output: fb 2").content
    # no clean correct variant at all: no examples for the task
    assert C.build_examples([records[1], records[2]], C.CorpusCfg(tasks=["relu"])) == []


def test_config_errors_name_the_bad_value():
    with pytest.raises(ValueError, match="corpus.sizes='tiny'"):
        C.build_corpus(C.CorpusCfg(tasks=["relu"], sizes="tiny"))
    with pytest.raises(ValueError, match="max_chain=0"):
        C.build_corpus(C.CorpusCfg(tasks=["relu"], max_chain=0))
    with pytest.raises(KeyError, match="no_such_task"):
        C.build_corpus(C.CorpusCfg(tasks=["no_such_task"]))


def test_cli_writes_the_corpus(tmp_path, capsys):
    assert C.main(["--out", str(tmp_path), "--tasks", "relu", "--variants-per-task", "2"]) == 0
    printed = json.loads(capsys.readouterr().out)
    records = C.read_jsonl(tmp_path / C.VARIANTS_FILE)
    assert printed["variants"] == len(records) >= 1 and printed["tasks"] == 1
    assert json.loads((tmp_path / C.MANIFEST_FILE).read_text())["config"]["tasks"] == ["relu"]


@pytest.mark.gpu
def test_cpu_labels_hold_on_the_gpu():
    """The training targets chosen on the cpu backend are correct on a real GPU (cupy), and the
    deterministic failure statuses (compile/format errors) agree between the two backends."""
    variants = [v for t in TASKS + ["softmax", "layer_norm"] for v in C.generate_variants(t, 16, seed=0)]
    cpu = C.score_variants(variants, _cfg())
    gpu = C.score_variants(variants, _cfg(backend="cupy"))
    diffs = [(c["task"], c["mutations"], c["status"], g["status"], g["message"][:120])
             for c, g in zip(cpu, gpu, strict=False) if c["status"] != g["status"]]
    for c, g in zip(cpu, gpu, strict=False):
        if C.is_clean_correct(c) or c["status"] in ("compile_error", "format_error"):
            assert g["status"] == c["status"], (c["task"], c["mutations"], g["message"], diffs)
    print(f"cpu/cupy label disagreements: {len(diffs)} of {len(cpu)}", *diffs, sep="\n")
