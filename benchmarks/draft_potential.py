"""How many decode steps would speculative decoding with prompt-lookup drafts save on real rollouts?

The decode loop of a multi-turn rollout is kernel-bound (~96 small kernels a token,
docs/performance.md), so the lever left for generation speed is more than one
token per step: verify a drafted continuation in one forward pass. Prompt lookup drafts without a
second model: find the latest earlier occurrence of the last `n` tokens in the conversation so far
and propose the `k` tokens that followed it. Debugging turns rewrite mostly the same kernel, so their
drafts should often be right.

This script measures that before anything is built. With a draft d fixed by the context,
speculative sampling accepts d_1 with probability p(d_1), then d_2 with p(d_2 | d_1), ...; the
number of leading positions where an actually sampled continuation equals the draft has exactly
that distribution. So replaying sampled rollouts is an unbiased simulation: at each step draft from
the context, accept the leading matches, take one more token from the target (the correction or the
bonus token), and count steps. No model forward is needed.

Reported per turn: response tokens, steps with drafts, tokens per step per row, and the lockstep
estimate (a decode call runs until its longest row ends: sum over calls of the longest row's steps).

Rollouts come from the real trainer (`Trainer.rollout_step`, the config's policy and environment),
or from a JSON file written earlier with --dump:
    python benchmarks/draft_potential.py --config configs/generated/multiturn.yaml --rollouts 2 \\
        --dump rollouts.json env.backend=cpu                          # needs runs/gen/policy
    python benchmarks/draft_potential.py --load rollouts.json --ngram 3,2 --draft 4,8
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def lookup_draft(context: Sequence[int], ngrams: Sequence[int], k: int) -> list[int]:
    """Prompt lookup: for n in `ngrams` (longest first), the up to k tokens that followed the latest
    earlier occurrence of the context's last n tokens; [] when none matches."""
    ctx = list(context)
    for n in sorted(ngrams, reverse=True):
        if n < 1 or len(ctx) <= n:
            continue
        tail = ctx[-n:]
        for start in range(len(ctx) - n - 1, -1, -1):  # latest first; the tail itself excluded
            if ctx[start:start + n] == tail:
                return ctx[start + n:start + n + k]
    return []


@dataclass
class Replay:
    """One response replayed under speculative decoding."""
    tokens: int  # response tokens
    steps: int  # verify steps (a step without a draft is a plain decode step)
    drafted: int  # steps that had a draft
    accepted: int  # draft tokens accepted in all


class LookupIndex:
    """`lookup_draft` in O(n) per call: for each n, the latest start of every n-gram seen, filled in as
    the sequence grows (an n-gram enters once it no longer ends at the last token)."""

    def __init__(self, seq: Sequence[int], ngrams: Sequence[int]) -> None:
        self.seq = list(seq)
        self.ngrams = sorted({n for n in ngrams if n >= 1}, reverse=True)
        self.latest: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in self.ngrams}
        self.filled = {n: 0 for n in self.ngrams}  # n-grams starting before this are in `latest`

    def extend(self, tokens: Sequence[int]) -> None:
        self.seq.extend(tokens)

    def draft(self, k: int) -> list[int]:
        seq, end = self.seq, len(self.seq)
        for n in self.ngrams:
            if end <= n:
                continue
            table = self.latest[n]
            for start in range(self.filled[n], end - n):  # every n-gram but the one ending last
                table[tuple(seq[start:start + n])] = start
            self.filled[n] = max(self.filled[n], end - n)
            hit = table.get(tuple(seq[end - n:]))
            if hit is not None:
                return seq[hit + n:hit + n + k]
        return []


def replay(context: Sequence[int], response: Sequence[int], ngrams: Sequence[int], k: int) -> Replay:
    """Speculative decoding of `response` after `context`: each step drafts from everything so far,
    accepts the draft's leading matches with the sampled tokens and adds one token from the target."""
    resp = list(response)
    index = LookupIndex(context, ngrams)
    t = steps = drafted = accepted = 0
    while t < len(resp):
        draft = index.draft(k) if k > 0 else []
        a = 0
        while a < len(draft) and t + a < len(resp) and draft[a] == resp[t + a]:
            a += 1
        steps += 1
        drafted += bool(draft)
        accepted += a
        step = min(a + 1, len(resp) - t)
        index.extend(resp[t:t + step])
        t += step
    return Replay(len(resp), steps, drafted, accepted)


def turns_of(tokens: Sequence[int], turn_of: Sequence[int]) -> list[tuple[int, int, int]]:
    """(turn, start, end) of each response: runs of equal nonzero turn_of values."""
    out, i, n = [], 0, len(turn_of)
    while i < n:
        if turn_of[i]:
            j = i
            while j < n and turn_of[j] == turn_of[i]:
                j += 1
            out.append((int(turn_of[i]), i, j))
            i = j
        else:
            i += 1
    return out


def analyse(rollouts: list[list[dict]], ngrams: Sequence[int], k: int) -> dict[int, dict[str, float]]:
    """Per turn (and 0 = all): tokens, plain and speculative steps summed over rows, drafted steps,
    tokens per step, and the lockstep ratio (per rollout and turn, the longest row's plain steps
    over its longest row's speculative steps, summed before dividing)."""
    acc: dict[int, dict[str, float]] = {}
    for rows in rollouts:
        longest: dict[int, list[int]] = {}
        for row in rows:
            toks = row["tokens"]
            for turn, s, e in turns_of(toks, row["turn_of"]):
                r = replay(toks[:s], toks[s:e], ngrams, k)
                for key in (turn, 0):
                    a = acc.setdefault(key, {"responses": 0, "tokens": 0, "steps": 0, "drafted": 0,
                                             "accepted": 0, "lock_plain": 0, "lock_spec": 0})
                    a["responses"] += 1
                    a["tokens"] += r.tokens
                    a["steps"] += r.steps
                    a["drafted"] += r.drafted
                    a["accepted"] += r.accepted
                pl = longest.setdefault(turn, [0, 0])
                pl[0], pl[1] = max(pl[0], r.tokens), max(pl[1], r.steps)
        for turn, (plain, spec) in longest.items():
            for key in (turn, 0):
                acc[key]["lock_plain"] += plain
                acc[key]["lock_spec"] += spec
    for a in acc.values():
        a["tokens_per_step"] = a["tokens"] / max(a["steps"], 1)
        a["drafted_share"] = a["drafted"] / max(a["steps"], 1)
        a["lockstep_ratio"] = a["lock_plain"] / max(a["lock_spec"], 1)
    return acc


def collect(config: str, overrides: list[str], n: int) -> list[list[dict]]:
    """`n` rollouts of the config's trainer (policy, tasks, environment), each a list of rows."""
    from leap_jax.train.config import load_config
    from leap_jax.train.trainer import Trainer
    cfg = load_config(config, overrides + ["checkpoint.enabled=false", "train.time_budget_s=null"])
    tr = Trainer(cfg, resume=False)
    out = []
    try:
        for _ in range(n):
            _, ro = tr.rollout_step()
            tr.step += 1
            out.append([{"task": r.task, "tokens": list(map(int, r.tokens)),
                         "turn_of": list(map(int, r.turn_of))} for r in ro.rows])
    finally:
        tr.close()
    return out


def _opener(path: str):
    """gzip.open for a .gz path, else open."""
    return gzip.open if path.endswith(".gz") else open


def _ints(text: str, what: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"{what}={text!r}; expected comma-separated integers") from None
    if not vals or min(vals) < (1 if what == "--ngram" else 0):
        raise SystemExit(f"{what}={text!r}; expected integers >= {1 if what == '--ngram' else 0}")
    return vals


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/generated/multiturn.yaml")
    ap.add_argument("--rollouts", type=int, default=1, help="rollout steps to collect")
    ap.add_argument("--load", default=None, help="rollouts JSON (from --dump; .gz read as gzip) instead of collecting")
    ap.add_argument("--dump", default=None, help="write the collected rollouts here (.gz: gzip)")
    ap.add_argument("--ngram", default="3", help="n-gram sizes to look up, longest first (e.g. 3,2)")
    ap.add_argument("--draft", default="4,8", help="draft lengths k to compare")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("overrides", nargs="*", help="dotted config overrides")
    args = ap.parse_args(argv)
    ngrams, drafts = _ints(args.ngram, "--ngram"), _ints(args.draft, "--draft")
    if args.load:
        rollouts = json.loads(_opener(args.load)(args.load, "rt").read())
    else:
        rollouts = collect(args.config, args.overrides, args.rollouts)
        if args.dump:
            with _opener(args.dump)(args.dump, "wt") as f:
                f.write(json.dumps(rollouts))
    report = {k: analyse(rollouts, ngrams, k) for k in drafts}
    if args.json:
        print(json.dumps({str(k): {str(t): v for t, v in r.items()} for k, r in report.items()}))
        return 0
    rows_n = sum(len(r) for r in rollouts)
    print(f"draft_potential: {len(rollouts)} rollouts, {rows_n} rows; prompt lookup n-grams {ngrams}")
    print(f"{'k':>3} {'turn':>5} {'responses':>9} {'tokens':>8} {'steps':>7} {'drafted':>8} "
          f"{'tok/step':>8} {'lockstep':>8}")
    for k, per_turn in report.items():
        for turn in sorted(per_turn, key=lambda t: (t == 0, t)):
            a = per_turn[turn]
            print(f"{k:>3} {('all' if turn == 0 else turn):>5} {a['responses']:>9.0f} {a['tokens']:>8.0f} "
                  f"{a['steps']:>7.0f} {a['drafted_share']:>8.0%} {a['tokens_per_step']:>8.2f} "
                  f"{a['lockstep_ratio']:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
