"""A verified kernel corpus generated from the task suite.

For each task: the known-good solution plus programmatic variants of it (`mutations`), every one
scored by the environment through `EvalPool`, so each record's `status` is measured, never assumed.
From the scored variants come chat examples for supervised warm-up:
- `single`: [system, user prompt, assistant = a variant measured correct];
- `multiturn`: [system, user prompt, assistant = a variant measured NOT correct, user = the
  environment's real feedback on it (`render_feedback`), assistant = a correct fix (the variant's
  pre-bug parent when that scored correct, else another correct variant)].
Messages carry `train`: only correct assistant turns are trained on (a wrong attempt is context).
Training targets (single-turn answers, multi-turn fixes) are *clean*: measured correct AND made only
of rewrites meant to keep the kernel right. A variant carrying a deliberate bug that still scored
correct (an off-by-one write into allocation padding, a dropped barrier the CPU backend's fibers
never race on) keeps its measured label in variants.jsonl but is never taught as an answer, nor
shown as a wrong attempt (its feedback says "correct").
Deterministic from the seed (per-task `random.Random(f"{seed}:{task}")`); written as JSONL:
`variants.jsonl`, `examples.jsonl`, `manifest.json` in the output directory.

CLI: `python -m leap_jax.bootstrap.corpus --out data/bootstrap [--tasks relu,softmax] [--seed 0]`.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kernels_env import EnvConfig, EvalPool, Job, get_task, list_tasks, render_feedback
from leap_jax.bootstrap.mutations import MUTATIONS, join_blocks, mutate, split_blocks
from leap_jax.rollout.prompts import feedback_message, initial_messages
from leap_jax.train.config import CorpusCfg

VARIANTS_FILE, EXAMPLES_FILE, MANIFEST_FILE = "variants.jsonl", "examples.jsonl", "manifest.json"


def _check(cfg: CorpusCfg) -> None:
    cfg.check("corpus")  # the section's ranges (a ConfigError, which is a ValueError)
    for t in cfg.tasks:
        get_task(t)  # a clear KeyError for an unknown task


def task_names(cfg: CorpusCfg) -> list[str]:
    return list(cfg.tasks) if cfg.tasks else [t.name for t in list_tasks()]


def _vid(task: str, text: str) -> str:
    return hashlib.sha256(f"{task}\0{text}".encode()).hexdigest()[:16]


def generate_variants(task_name: str, n: int, seed: int, max_chain: int = 2) -> list[dict[str, Any]]:
    """Unscored variants of one task: the canonical solution first, then up to `n` distinct mutants
    (from `n` attempts), each with `parent` (the id of the text it was mutated from). Deterministic
    in (task, seed)."""
    task = get_task(task_name)
    cuda, launch = split_blocks(task.solution)
    base = join_blocks(cuda, launch)
    rng = random.Random(f"{seed}:{task_name}")
    out: list[dict[str, Any]] = [{"id": _vid(task_name, base), "task": task_name, "mutations": [], "intent": "correct",
            "parent": None, "text": base}]
    seen = {base}
    intents = {m.name: m.intent for m in MUTATIONS}
    for _ in range(n):
        # mutate the solution or an earlier bug-free rewrite of it, so a variant carries one bug at most
        start = rng.choice([v for v in out if v["intent"] == "correct"])
        res = mutate(start["text"], rng, max_chain=max_chain)
        if res is None:
            continue
        text, applied = res
        if text in seen:
            continue
        seen.add(text)
        names = start["mutations"] + applied
        intent = "wrong" if any(intents[a] == "wrong" for a in names) else "correct"
        out.append({"id": _vid(task_name, text), "task": task_name, "mutations": names, "intent": intent,
                    "parent": start["id"], "text": text})
    return out


def env_config(cfg: CorpusCfg) -> Any:
    return EnvConfig(backend=cfg.backend, sizes=cfg.sizes, timing=False,
                     correctness_trials=cfg.correctness_trials, seed=cfg.seed)


def score_variants(variants: list[dict[str, Any]], cfg: CorpusCfg, pool: Any = None) -> list[dict[str, Any]]:
    """Score every variant through an EvalPool (made from cfg unless given); adds `status`,
    `message` and `feedback` (the environment's `render_feedback` text) to copies of the records."""
    ecfg = env_config(cfg)
    own = pool is None
    if own:
        pool = EvalPool(mode=cfg.pool_mode, config=ecfg, cache=True,
                        compile_workers=cfg.workers, cpu_workers=cfg.workers)
    try:
        results = pool.map([Job(v["task"], v["text"], ecfg) for v in variants])
    finally:
        if own:
            pool.close()
    out = []
    for v, r in zip(variants, results, strict=False):
        out.append({**v, "status": r.status.value, "message": r.message,
                    "feedback": render_feedback(r, cfg.feedback_budget_chars)})
    return out


def _msg(role: str, content: str, train: bool = False) -> dict[str, Any]:
    return {"role": role, "content": content, "train": train}


def is_clean_correct(record: dict[str, Any]) -> bool:
    """A training target: measured correct and built only from correct-intent rewrites."""
    return record["status"] == "correct" and record["intent"] == "correct"


def build_examples(records: list[dict[str, Any]], cfg: CorpusCfg) -> list[dict[str, Any]]:
    """Chat examples (single-turn and multi-turn) from scored variant records; see the module doc.
    Variants whose status is env_error are never used (the environment, not the code, failed)."""
    by_task: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_task.setdefault(r["task"], []).append(r)
    examples = []
    for task_name in sorted(by_task):
        recs = by_task[task_name]
        rng = random.Random(f"{cfg.seed}:{task_name}:examples")
        first = initial_messages(get_task(task_name), cfg.prompt_sizes)

        def prompt(first: list[Any] = first) -> list[dict[str, Any]]:  # fresh dicts: no aliasing between examples
            return [_msg(m.role, m.content) for m in first]

        good = [r for r in recs if is_clean_correct(r)]
        bad = [r for r in recs if r["status"] not in ("correct", "env_error")]
        by_id = {r["id"]: r for r in recs}
        for g in good:
            examples.append({"task": task_name, "kind": "single", "variants": [g["id"]],
                             "messages": prompt() + [_msg("assistant", g["text"], True)]})
        if not good:
            continue
        rng.shuffle(bad)
        for b in bad[:cfg.multiturn_per_task]:
            parent = by_id.get(b["parent"]) if b["parent"] else None
            fix = parent if parent is not None and is_clean_correct(parent) else rng.choice(good)
            fb = feedback_message(b["feedback"])
            examples.append({"task": task_name, "kind": "multiturn", "variants": [b["id"], fix["id"]],
                             "wrong_status": b["status"],
                             "messages": prompt() + [_msg("assistant", b["text"], False),
                                                   _msg("user", fb.content), _msg("assistant", fix["text"], True)]})
    return examples


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    tmp = Path(path).with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    tmp.replace(path)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{i}: not a JSON line ({e})") from None
    return rows


def build_corpus(cfg: CorpusCfg, out_dir: str | Path | None = None, pool: Any = None
                 ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Generate, score and turn into examples; write the JSONL files when `out_dir` is given.
    Returns (scored variant records, examples)."""
    _check(cfg)
    variants: list[dict[str, Any]] = []
    names = task_names(cfg)
    mutated = set(names)
    if 0 < cfg.mutant_tasks < len(names):
        mutated = set(random.Random(f"{cfg.seed}:mutant_tasks").sample(names, cfg.mutant_tasks))
    for t in names:
        n = cfg.variants_per_task if t in mutated else 0
        variants += generate_variants(t, n, cfg.seed, cfg.max_chain)
    records = score_variants(variants, cfg, pool)
    examples = build_examples(records, cfg)
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_jsonl(out / VARIANTS_FILE, records)
        write_jsonl(out / EXAMPLES_FILE, examples)
        tmp = out / (MANIFEST_FILE + ".tmp")
        tmp.write_text(json.dumps({"config": asdict(cfg), **summary(records, examples)}, indent=2,
                                  sort_keys=True))
        tmp.replace(out / MANIFEST_FILE)
    return records, examples


def load_or_build(cfg: CorpusCfg, out_dir: str | Path, pool: Any = None
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Read the corpus in `out_dir` if its manifest was made with exactly this config, else build it."""
    out = Path(out_dir)
    man = out / MANIFEST_FILE
    if man.is_file() and (out / VARIANTS_FILE).is_file() and (out / EXAMPLES_FILE).is_file():
        try:
            same = json.loads(man.read_text()).get("config") == json.loads(json.dumps(asdict(cfg)))
        except json.JSONDecodeError:
            same = False
        if same:
            return read_jsonl(out / VARIANTS_FILE), read_jsonl(out / EXAMPLES_FILE)
    return build_corpus(cfg, out, pool)


def summary(records: Sequence[dict[str, Any]], examples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Counts: variants by measured status, by intent vs status, examples by kind."""
    by_status: dict[str, int] = {}
    agree = {"correct_intent_correct": 0, "correct_intent_failed": 0, "wrong_intent_failed": 0,
             "wrong_intent_correct": 0}
    for r in records:
        by_status[r["status"]] = by_status.get(r["status"], 0) + 1
        ok = r["status"] == "correct"
        agree[f"{r['intent']}_intent_{'correct' if ok else 'failed'}"] += 1
    kinds: dict[str, int] = {}
    for e in examples:
        kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
    return {"variants": len(records), "tasks": len({r["task"] for r in records}), "by_status": by_status,
            "intent_vs_status": agree, "examples": kinds}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m leap_jax.bootstrap.corpus",
                                description="Generate and verify the bootstrap kernel corpus (JSONL).")
    p.add_argument("--out", required=True, help="output directory (variants.jsonl, examples.jsonl, manifest.json)")
    p.add_argument("--tasks", default="", help="comma-separated task names (default: the whole suite)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--variants-per-task", type=int, default=CorpusCfg.variants_per_task)
    p.add_argument("--backend", default="cpu")
    p.add_argument("--sizes", default="small")
    p.add_argument("--workers", type=int, default=1)
    a = p.parse_args(argv)
    cfg = CorpusCfg(tasks=[t for t in a.tasks.split(",") if t], seed=a.seed,
                    variants_per_task=a.variants_per_task, backend=a.backend, sizes=a.sizes, workers=a.workers)
    records, examples = build_corpus(cfg, a.out)
    print(json.dumps(summary(records, examples), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
