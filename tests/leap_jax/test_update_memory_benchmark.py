"""benchmarks/update_memory.py analyses the update program the trainer runs: in loop mode the
per-micro-batch gradient program, whose memory falls with the micro-batch token cap."""
from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import update_memory  # noqa: E402
from leap_jax.models.config import ModelConfig  # noqa: E402

CFG = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                  num_kv_heads=2, max_position_embeddings=512)


@pytest.mark.parametrize("accumulate", ["loop", "scan"])
def test_a_token_cap_lowers_the_compiled_temp_memory(accumulate: str) -> None:
    full = update_memory.update_bytes(CFG, rows=8, length=256, micro_batch=8, accumulate=accumulate)
    capped = update_memory.update_bytes(CFG, rows=8, length=256, micro_batch=8, micro_batch_tokens=256,
                                        accumulate=accumulate)
    assert full["temp"] > 0 and capped["temp"] < full["temp"] / 2, (full, capped)


def test_loop_analyses_one_micro_batch_not_the_batch() -> None:
    one = update_memory.update_bytes(CFG, rows=8, length=256, micro_batch=8, accumulate="loop")
    more = update_memory.update_bytes(CFG, rows=32, length=256, micro_batch=8, accumulate="loop")
    assert more["temp"] == pytest.approx(one["temp"])  # the rows beyond a micro-batch never meet
