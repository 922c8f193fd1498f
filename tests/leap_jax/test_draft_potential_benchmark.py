"""benchmarks/draft_potential.py: prompt-lookup drafts replayed over sampled rollouts. The indexed
lookup against a brute-force scan, a replay counted by hand, the per-turn and lockstep sums, and
the command line on a dumped rollout."""
from __future__ import annotations

import gzip
import json
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import draft_potential as dp  # noqa: E402


@pytest.mark.parametrize("ngrams", [[1], [3], [3, 2], [4, 2, 1]])
def test_indexed_lookup_matches_the_brute_force_scan(ngrams) -> None:
    rng = np.random.default_rng(len(ngrams))
    for trial in range(20):
        seq = rng.integers(0, 4, size=int(rng.integers(0, 12))).tolist()
        index = dp.LookupIndex(seq, ngrams)
        for _ in range(30):
            k = int(rng.integers(1, 6))
            assert index.draft(k) == dp.lookup_draft(index.seq, ngrams, k), (trial, index.seq)
            index.extend(rng.integers(0, 4, size=int(rng.integers(1, 4))).tolist())


def test_replay_counted_by_hand() -> None:
    ctx = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    r = dp.replay(ctx, ctx, [3], 4)
    # t=0..2: the tails [7,8,9], [8,9,1], [9,1,2] occur nowhere earlier: three plain steps;
    # t=3: [1,2,3] -> draft [4,5,6,7], all accepted, plus the target's 8: t=8;
    # t=8: [6,7,8] -> draft [9,1,2,3], 9 accepted and the response ends: one step
    assert (r.tokens, r.steps, r.drafted, r.accepted) == (9, 5, 2, 5)
    # no draft at all (k=0) or no repeats: one token a step
    assert dp.replay(ctx, ctx, [3], 0).steps == 9
    fresh = dp.replay([1, 2, 3], [10, 11, 12, 13, 14], [2], 4)
    assert (fresh.steps, fresh.drafted, fresh.accepted) == (5, 0, 0)


def test_a_rejected_draft_still_gives_the_target_token() -> None:
    # [5,6] -> draft [7,8,9]; the response goes 7, 0: one accepted, the 0 from the target, then the
    # tail [7,0] occurs nowhere earlier: one plain step for the last token
    r = dp.replay([5, 6, 7, 8, 9, 5, 6], [7, 0, 4], [2], 3)
    assert (r.steps, r.accepted) == (2, 1)


def test_analyse_sums_per_turn_and_the_lockstep_ratio() -> None:
    # row A: prompt [1..4], turn 1 = [1,2,3,4,1,2] (copies the prompt), feedback [0], turn 2 = [9]
    row_a = {"tokens": [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 0, 9], "turn_of": [0] * 4 + [1] * 6 + [0] + [2]}
    row_b = {"tokens": [7, 8, 5, 6], "turn_of": [0, 0, 1, 1]}
    per_turn = dp.analyse([[row_a, row_b]], [2], 8)
    a1 = dp.replay(row_a["tokens"][:4], row_a["tokens"][4:10], [2], 8)
    b1 = dp.replay(row_b["tokens"][:2], row_b["tokens"][2:], [2], 8)
    assert per_turn[1]["tokens"] == 8 and per_turn[1]["steps"] == a1.steps + b1.steps
    assert per_turn[2]["tokens"] == 1 and per_turn[2]["steps"] == 1
    assert per_turn[0]["responses"] == 3 and per_turn[0]["tokens"] == 9
    assert a1.steps < 6  # the copy was drafted
    # lockstep: per turn the longest row's plain tokens over its longest row's steps
    assert per_turn[1]["lockstep_ratio"] == pytest.approx(6 / max(a1.steps, b1.steps))
    assert per_turn[0]["lockstep_ratio"] == pytest.approx((6 + 1) / (max(a1.steps, b1.steps) + 1))


def test_turns_of_splits_responses() -> None:
    assert dp.turns_of([0] * 7, [0, 1, 1, 0, 2, 2, 2]) == [(1, 1, 3), (2, 4, 7)]
    assert dp.turns_of([], []) == []


def test_command_line_on_dumped_rollouts(tmp_path, capsys) -> None:
    rows = [{"task": "t", "tokens": [1, 2, 3, 1, 2, 3, 1, 2], "turn_of": [0, 0, 0, 1, 1, 1, 1, 1]}]
    path = tmp_path / "r.json"
    path.write_text(json.dumps([rows]))
    assert dp.main(["--load", str(path), "--ngram", "2", "--draft", "2,4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"2", "4"} and out["4"]["1"]["tokens"] == 5
    assert out["4"]["1"]["tokens_per_step"] > 1.0
    assert dp.main(["--load", str(path)]) == 0
    assert "tok/step" in capsys.readouterr().out
    gz = tmp_path / "r.json.gz"
    with gzip.open(gz, "wt") as f:
        f.write(json.dumps([rows]))
    assert dp.main(["--load", str(gz), "--ngram", "2", "--draft", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["4"] == out["4"]
    with pytest.raises(SystemExit, match="--ngram='0'"):
        dp.main(["--load", str(path), "--ngram", "0"])
    with pytest.raises(SystemExit, match="--draft='x'"):
        dp.main(["--load", str(path), "--draft", "x"])
