"""Compile once: after warm-up steps, training steps whose active row counts change (DCP, solved
rows, a scripted mix) trigger no new JAX compilation, in the sampler (coarse batch / prompt
buckets) or in the update (packed rows of a fixed length, the per-micro-batch loop); greedy
sampling gives the same tokens with the coarse buckets as with the fine ones; the trainer turns
on the persistent compilation cache."""
from __future__ import annotations

import jax
import numpy as np
from jax import monitoring

from leap_jax.train.config import load_config
from leap_jax.train.trainer import Trainer, sampler_buckets
from tests.leap_jax._trainer_helpers import OracleEvaluator
from tests.leap_jax.test_trainer import TINY, _compilation_cache  # noqa: F401  (module fixture)

EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/backend_compile_duration")
_count = {"n": 0, "on": False}


def _listener(event, duration_secs, **_):
    if _count["on"] and event in EVENTS:
        _count["n"] += 1


monitoring.register_event_duration_secs_listener(_listener)


def test_steps_with_shrinking_rows_compile_nothing_after_warmup(tmp_path):
    # the real sampler (a tiny random model) for half the responses, scripted ones for the rest:
    # solved rows stop, so each turn's sampler batch and the update's row count vary
    cfg = load_config(None, TINY + [
        f"train.run_dir={tmp_path}", "train.steps=6", "algorithm.name=multiturn",
        "rollout.scripted_mix.enabled=true", "rollout.scripted_mix.fraction=0.5",
        "sampling.max_new_tokens=8", "rollout.max_context_tokens=2048", "optimizer.pack_len=2048",
        "sampling.batch_buckets=[4]", "checkpoint.enabled=false"])
    tr = Trainer(cfg, evaluator=OracleEvaluator(), resume=False)
    warm = tr.train(max_steps=3)
    _count["n"], _count["on"] = 0, True
    try:
        recs = tr.train(max_steps=3)
    finally:
        _count["on"] = False
        tr.close()
    assert _count["n"] == 0, f"{_count['n']} compilations after warm-up"
    assert all(r["time/compile"] < 1e-9 for r in recs)
    assert any(r["time/compile_generate"] > 0 for r in warm) and any(r["time/compile_update"] > 0 for r in warm)
    # the active rows did change between steps (else the test shows nothing)
    assert len({(r["update/rows"], r.get("rollout/gen_rows_turn2")) for r in warm + recs}) > 1
    assert tr._sampler.trace_counts["decode"] <= 2  # one prompt bucket per turn, one batch bucket


def test_coarse_buckets_keep_greedy_tokens():
    from leap_jax.models import decoder
    from leap_jax.models.config import ModelConfig
    from leap_jax.sampling.params import SamplingParams
    from leap_jax.sampling.sampler import Sampler

    mc = ModelConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                     num_kv_heads=2, dtype="float32", param_dtype="float32")
    params = decoder.init(mc, jax.random.key(5))
    rng = np.random.default_rng(0)
    prompts = [rng.integers(1, 97, int(n)).tolist() for n in (5, 17, 40, 9, 70)]
    sp = SamplingParams(temperature=0.0, max_new_tokens=12)
    fine = Sampler(mc, max_batch=8, prompt_buckets=(16, 32, 64, 128), max_new_tokens=12)
    coarse = Sampler(mc, max_batch=8, batch_buckets=(8,), prompt_buckets=(128,), max_new_tokens=12)
    a = fine.generate(params, prompts, sp, rng=0)
    b = coarse.generate(params, prompts, sp, rng=0)
    assert a.tokens == b.tokens
    for x, y in zip(a.logprobs, b.logprobs, strict=False):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)
    assert coarse.trace_counts["decode"] == 1


def test_sampler_buckets_from_config():
    cfg = load_config(None, TINY + ["rollout.max_context_tokens=4096", "sampling.max_new_tokens=1536"])
    bb, pb = sampler_buckets(cfg, 64)
    assert bb == (16, 32, 64) and pb == (512, 1024, 2048, 2560, 4096)
    cfg = load_config(None, TINY + ["sampling.buckets=fine", "rollout.max_context_tokens=4096"])
    bb, pb = sampler_buckets(cfg, 64)
    assert bb == (1, 2, 4, 8, 16, 32, 64) and pb == (128, 256, 512, 1024, 2048, 4096)


def test_compile_cache_is_on_by_default(tmp_path):
    from leap_jax.train.trainer import enable_compile_cache
    cfg = load_config(None, TINY + [f"train.run_dir={tmp_path / 'runs' / 'a'}"])
    old = jax.config.jax_compilation_cache_dir
    try:
        jax.config.update("jax_compilation_cache_dir", None)
        got = enable_compile_cache(cfg, tmp_path / "runs" / "a")
        assert got == str((tmp_path / "runs" / ".jax_cache").resolve())
        assert jax.config.jax_compilation_cache_dir == got
        assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0
    finally:
        jax.config.update("jax_compilation_cache_dir", old)
    off = load_config(None, TINY + ["train.compile_cache=false"])
    assert enable_compile_cache(off, tmp_path) is None
