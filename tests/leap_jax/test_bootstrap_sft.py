"""Supervised warm-up (leap_jax.bootstrap.sft) on tiny CPU sizes: the loss mask, packing, the masked
loss against NumPy cross-entropy on unpacked sequences, micro-batch accumulation, overfitting, the
saved policy, the CLI end to end (real corpus, Sampler and cpu-backend EvalPool) and config errors."""
from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from leap_jax.bootstrap import sft
from leap_jax.models.bpe import train_tokenizer
from leap_jax.models import decoder
from leap_jax.models.config import ModelConfig
from leap_jax.models.tokenizer import Tokenizer
from leap_jax.train.config import ConfigError, load_config
from leap_jax.train.update import make_optimizer

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "bootstrap_sft_tiny.yaml"

CODES = ["y[i] = fmaxf(x[i], 0.0f);", "y[i] = 1.0f / (1.0f + expf(-x[i]));", "y[i] = tanhf(x[i]);",
         "y[i] = x[i] / (1.0f + expf(-x[i]));"]


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    texts = [f"task {k}: {c}" for k, c in enumerate(CODES)] + ["wrong try again fix the kernel"] * 3
    return train_tokenizer(texts, 400)


def _example(k: int, multiturn: bool = False) -> dict:
    msgs = [{"role": "system", "content": "write kernels", "train": False},
            {"role": "user", "content": f"task {k}", "train": False}]
    if multiturn:
        msgs += [{"role": "assistant", "content": "y[i] = 0;", "train": False},
                 {"role": "user", "content": "wrong_output: try again", "train": False}]
    msgs.append({"role": "assistant", "content": CODES[k % len(CODES)], "train": True})
    return {"task": f"t{k}", "kind": "multiturn" if multiturn else "single", "messages": msgs}


def _model(tok: Tokenizer, hidden: int = 32) -> ModelConfig:
    return ModelConfig(vocab_size=tok.vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_layers=2,
                       num_heads=4, num_kv_heads=2, dtype="float32", param_dtype="float32",
                       tie_word_embeddings=True, architecture="LlamaForCausalLM", eos_token_ids=(2,))


class _Opt:  # the optimizer fields make_optimizer reads
    def __init__(self, lr: float, grad_clip: float = 1.0):
        self.lr, self.grad_clip, self.weight_decay, self.b1, self.b2, self.eps = lr, grad_clip, 0.0, 0.9, 0.999, 1e-8
        self.schedule, self.warmup_steps = "constant", 0


# ---- the loss mask and packing --------------------------------------------------------------------
def test_loss_mask_covers_only_trained_assistant_turns(tok):
    ex = _example(1, multiturn=True)
    ids, mask = sft.render_example(tok, ex["messages"])
    assert len(ids) == len(mask)
    # independently: the trained tokens are exactly the last assistant content plus <|im_end|>
    trained = [i for i, m in zip(ids, mask, strict=False) if m]
    assert tok.decode(trained) == CODES[1] + "<|im_end|>"
    # the untrained wrong attempt is in the stream but never in the mask
    wrong = tok.encode("y[i] = 0;", allow_special=False)
    starts = [k for k in range(len(ids)) if ids[k:k + len(wrong)] == wrong]
    assert starts and not any(any(mask[s:s + len(wrong)]) for s in starts)
    # flipping the flag off removes every trained token (the example then has none)
    ex["messages"][-1]["train"] = False
    assert not any(sft.render_example(tok, ex["messages"])[1])
    assert sft.encode_examples(tok, [ex]) == []
    with pytest.raises(ValueError, match="'role', 'content'"):
        sft.render_example(tok, [{"role": "user"}])


def test_pack_rows_keeps_every_sequence_intact(tok):
    seqs = sft.encode_examples(tok, [_example(k, multiturn=k % 2 == 1) for k in range(5)])
    longest = max(len(i) for i, _ in seqs)
    seq_len = 2 * longest
    p = sft.pack_rows(seqs, seq_len, pad_id=tok.pad_id)
    assert p["tokens"].shape[1] == seq_len and p["tokens"].shape[0] < len(seqs)  # some rows hold several
    found = []
    for r in range(p["tokens"].shape[0]):
        for s in range(1, p["segment_ids"][r].max() + 1):
            at = np.flatnonzero(p["segment_ids"][r] == s)
            assert np.array_equal(at, np.arange(at[0], at[0] + len(at)))  # contiguous
            assert np.array_equal(p["positions"][r, at], np.arange(len(at)))
            assert np.array_equal(p["tokens"][r, at[1:]], p["targets"][r, at[:-1]])  # shifted by one
            found.append((np.concatenate([p["tokens"][r, at], p["targets"][r, at[-1:]]]), p["mask"][r, at]))
    assert len(found) == len(seqs)
    for ids, mask in seqs:
        assert any(np.array_equal(ids, f[0]) and np.array_equal(mask[1:], f[1]) for f in found)
    pad = p["segment_ids"] == 0
    assert not p["mask"][pad].any()
    assert int(p["mask"].sum()) == sum(int(m[1:].sum()) for _, m in seqs)
    with pytest.raises(ValueError, match="exceeds the row capacity 4"):
        sft.pack_rows(seqs, 4)


def test_batch_stream_static_shapes_and_epochs(tok):
    seqs = sft.encode_examples(tok, [_example(k) for k in range(3)])
    stream = sft.batch_stream(seqs, 64, batch_size=4, seed=0, pad_id=tok.pad_id)
    batches = [next(stream) for _ in range(3)]
    for b in batches:
        assert b["tokens"].shape == (4, 64) and b["mask"].shape == (4, 64)
        assert int(b["mask"].sum()) == sum(int(m[1:].sum()) for _, m in seqs)  # one epoch per batch here


# ---- the loss against NumPy -----------------------------------------------------------------------
def _numpy_masked_ce(params, mcfg, seqs) -> tuple[float, float]:
    """Sum of -log softmax(logits)[target] over masked targets, each sequence run on its own
    (no packing, no segment ids), log-softmax written out in NumPy."""
    total, count = 0.0, 0.0
    for ids, mask in seqs:
        n = len(ids) - 1
        logits, _ = decoder.forward(params, mcfg, jnp.asarray(ids[None, :-1]), jnp.arange(n)[None])
        z = np.asarray(logits[0], np.float64)
        z = z - z.max(-1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
        tgt = logp[np.arange(n), ids[1:]]
        m = mask[1:].astype(np.float64)
        total += float(-(tgt * m).sum())
        count += float(m.sum())
    return total, count


def test_masked_loss_equals_numpy_cross_entropy_on_packed_rows(tok):
    mcfg = _model(tok)
    params = decoder.init(mcfg, jax.random.key(1))
    seqs = sft.encode_examples(tok, [_example(k, multiturn=k == 2) for k in range(4)])
    p = sft.pack_rows(seqs, 2 * max(len(i) for i, _ in seqs), pad_id=tok.pad_id)
    assert p["segment_ids"].max() >= 2  # really packed
    with jax.default_matmul_precision("highest"):
        s, n = sft.masked_nll(params, mcfg, {k: jnp.asarray(v) for k, v in p.items()})
        ref_s, ref_n = _numpy_masked_ce(params, mcfg, seqs)
    assert float(n) == ref_n
    np.testing.assert_allclose(float(s), ref_s, rtol=2e-5)


def test_micro_batched_step_equals_full_batch_step(tok):
    mcfg = _model(tok)
    params = decoder.init(mcfg, jax.random.key(2))
    seqs = sft.encode_examples(tok, [_example(k, multiturn=k % 2 == 0) for k in range(4)])
    batch = {k: jnp.asarray(v) for k, v in sft.pack_rows(seqs, max(len(i) for i, _ in seqs)).items()}
    assert batch["tokens"].shape[0] == 4
    # plain SGD: the step is linear in the gradient, so params compare tightly (AdamW's g/sqrt(v)
    # turns float-noise differences of a near-zero gradient into lr-sized ones)
    tx = optax.sgd(1e-2)
    outs = []
    with jax.default_matmul_precision("highest"):
        for mb in (1, 4):
            new, _, m = sft.make_sft_step(mcfg, tx, mb)(params, tx.init(params), batch)
            outs.append((new, m))
    (p1, m1), (p4, m4) = outs
    np.testing.assert_allclose(float(m1["loss"]), float(m4["loss"]), rtol=1e-5)
    np.testing.assert_allclose(float(m1["grad_norm"]), float(m4["grad_norm"]), rtol=1e-4)
    for a, b in zip(jax.tree_util.tree_leaves(p1), jax.tree_util.tree_leaves(p4), strict=False):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)
    s, n = _numpy_masked_ce(params, mcfg, seqs)
    np.testing.assert_allclose(float(m4["loss"]), s / n, rtol=1e-4)


def test_overfitting_four_examples_drives_the_loss_down(tok):
    mcfg = _model(tok, hidden=64)
    params = decoder.init(mcfg, jax.random.key(3))
    seqs = sft.encode_examples(tok, [_example(k) for k in range(4)])
    stream = sft.batch_stream(seqs, max(len(i) for i, _ in seqs), 4, seed=0, pad_id=tok.pad_id)
    tx, _ = make_optimizer(_Opt(1e-2), 80)
    opt = tx.init(params)
    step = sft.make_sft_step(mcfg, tx, 2)
    losses = []
    for _ in range(80):
        params, opt, m = step(params, opt, {k: jnp.asarray(v) for k, v in next(stream).items()})
        losses.append(float(m["loss"]))
    assert losses[-1] < 0.3 * losses[0], losses[::10]


def test_saved_policy_reloads_identically(tok, tmp_path):
    from leap_jax.models.hf import load_hf_checkpoint
    mcfg = _model(tok)
    params = decoder.init(mcfg, jax.random.key(4))
    sft.save_policy(tmp_path / "model", mcfg, params, tok)
    cfg2, params2 = load_hf_checkpoint(str(tmp_path / "model"))
    assert (cfg2.vocab_size, cfg2.hidden_size, cfg2.num_layers) == (mcfg.vocab_size, 32, 2)
    flat, flat2 = (jax.tree_util.tree_leaves_with_path(p) for p in (params, params2))
    assert [k for k, _ in flat] == [k for k, _ in flat2]
    for (_, a), (_, b) in zip(flat, flat2, strict=False):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    text = "task 3: " + CODES[3]
    t_file = Tokenizer.from_file(str(tmp_path / "model" / "tokenizer.json"), eos_token="<|im_end|>")
    t_dir = Tokenizer.from_dir(str(tmp_path / "model"))
    for t in (t_file, t_dir):
        assert t.encode(text) == tok.encode(text) and t.vocab_size == tok.vocab_size
    assert t_dir.eos_ids[0] == tok.token_id("<|im_end|>") and t_dir.pad_id == tok.token_id("<|endoftext|>")


# ---- the CLI end to end ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sft_run(tmp_path_factory):
    """One tiny SFT run through `python -m leap_jax.main` on the cpu backend (relu; a held-out task)."""
    from leap_jax import main as main_mod
    d = tmp_path_factory.mktemp("sft")
    cfg_path = d / "sft.yaml"
    cfg_path.write_text(f"base: {TINY}\ntasks:\n  names: [relu, tanh]\n  held_out_fraction: 0.5\n"
                        f"train:\n  run_dir: {d / 'run'}\nenv:\n  pool_mode: inline\n"
                        "sft:\n  steps: 60\n  eval_temperatures: [0.0, 1.0]\n  eval_samples: 2\n"
                        "  eval_interval: 30\n  target_band: [0.0, 0.5]\n")
    assert main_mod.main(["--config", str(cfg_path)]) == 0
    return cfg_path, d / "run"


def test_main_sft_end_to_end_writes_policy_and_consistent_eval(sft_run, capsys):
    from leap_jax.models.hf import load_hf_checkpoint
    from leap_jax.train.metrics import read_metrics
    cfg_path, run = sft_run
    res = json.loads((run / sft.EVAL_FILE).read_text())
    assert res["train_tasks"] and res["held_out"] and not set(res["train_tasks"]) & set(res["held_out"])
    assert 0.0 <= res["pass_rate"] <= 1.0 and res["steps"] == 60
    assert res["final_loss"] < res["first_loss"]
    assert {(e["split"], e["temperature"]) for e in res["evals"]} == {
        ("train", 0.0), ("train", 1.0), ("held_out", 0.0), ("held_out", 1.0)}
    for e in res["evals"]:
        tasks = res["train_tasks"] if e["split"] == "train" else res["held_out"]
        assert sorted(e["per_task"]) == sorted(tasks)
        n = 1 if e["temperature"] == 0 else 2
        assert all(len(v) == n for v in e["per_task"].values())
        statuses = [s for v in e["per_task"].values() for s in v]
        assert e["total"] == len(statuses) and e["passed"] == statuses.count("correct")
        assert e["pass_rate"] == e["passed"] / e["total"]
        assert e["env_errors"] == statuses.count("env_error") == 0
    assert res["pass_rate"] == res["evals"][0]["pass_rate"]  # the headline: training tasks, greedy
    # the curve: step 30 and the final step; the kept policy is the latest one in the target band
    assert [c["step"] for c in res["curve"]] == [30, 60]
    in_band = [c["step"] for c in res["curve"] if 0.0 <= c["train_pass_rate_greedy"] <= 0.5]
    assert res["selected_step"] == (in_band[-1] if in_band else 60)
    if res["selected_step"] == 60:
        assert res["evals"][0]["pass_rate"] == res["curve"][-1]["train_pass_rate_greedy"]
    rows = read_metrics(run)
    assert rows[0]["step"] == 0 and rows[-1]["step"] == 59
    assert [r["step"] for r in rows if "eval/train_pass_rate_greedy" in r] == [29]
    assert all(r["tokens/s"] > 0 and r["loss"] > 0 for r in rows)
    mcfg, params = load_hf_checkpoint(str(run / sft.MODEL_DIR))
    assert mcfg.num_params() == res["num_params"]
    assert (run / "corpus" / "examples.jsonl").is_file() and (run / sft.DONE_FILE).is_file()


def test_model_source_sft_reuses_the_policy(sft_run, tmp_path):
    from leap_jax.train.trainer import build_model, build_tokenizer
    cfg_path, run = sft_run
    rl = load_config(ROOT / "configs" / "smoke.yaml",
                     [f"model.sft_config={cfg_path}", f"train.run_dir={tmp_path / 'rl'}"])
    logs: list[str] = []
    out = sft.resolve_sft_init(rl, log=logs.append)
    assert any("reusing" in s for s in logs), logs  # the fixture's run matches its config: no retraining
    assert out.model.source == "hf" and out.model.path == str(run / sft.MODEL_DIR)
    assert out.tokenizer.kind == "file" and Path(out.tokenizer.path) == tmp_path / "rl" / "tokenizer.json"
    tok = build_tokenizer(out, tmp_path / "rl", [])
    mcfg, _ = build_model(out, tok, jax.random.key(0))
    assert mcfg.vocab_size == tok.vocab_size
    # a different SFT config is not the cached one
    changed = load_config(cfg_path, ["sft.steps=61"])
    assert not sft.reusable(changed) and sft.reusable(load_config(cfg_path))


def test_resume_is_refused_for_sft(tmp_path, capsys):
    from leap_jax import main as main_mod
    (tmp_path / "config.yaml").write_text(TINY.read_text())
    assert main_mod.main(["--resume", str(tmp_path)]) == 2
    assert "--resume is for RL runs" in capsys.readouterr().err


# ---- config errors --------------------------------------------------------------------------------
@pytest.mark.parametrize("override, needle", [
    ("sft.batch_size=0", "sft.batch_size=0"),
    ("sft.steps=-3", "sft.steps=-3"),
    ("sft.eval_temperatures=[0.0, -1]", "sft.eval_temperatures[1]=-1"),
    ("sft.seq_len=4", "sft.seq_len=4"),
    ("sft.batch_size=6", "sft.batch_size=6 must be a multiple of optimizer.micro_batch_size=4"),
    ("sft.corpus.backend=gpu", "sft.corpus.backend='gpu'"),
    ("sft.corpus.variants_per_task=-1", "sft.corpus.variants_per_task=-1"),
    ("sft.eval_samples=0", "sft.eval_samples=0"),
    ("sft.target_band=[0.6, 0.2]", "sft.target_band=[0.6, 0.2]"),
    ("sft.eval_interval=0", "sft.eval_interval=0"),
    ("mode=train", "mode='train'"),
    ("sft.stepz=3", "did you mean 'steps'"),
])
def test_bad_sft_values_are_named(override, needle):
    with pytest.raises(ConfigError) as e:
        load_config(TINY, [override])
    assert needle in str(e.value)


def test_model_source_sft_needs_a_config():
    with pytest.raises(ConfigError, match="model.source=sft needs model.sft_config"):
        load_config(None, ["model.source=sft"])
    with pytest.raises(ConfigError, match="has mode='rl'"):
        sft.resolve_sft_init(load_config(None, ["model.source=sft", f"model.sft_config={ROOT / 'configs' / 'smoke.yaml'}"]))


@pytest.mark.gpu
def test_tiny_sft_with_the_cupy_backend_solves_its_training_tasks(tmp_path):
    """GPU machine: the tiny config with corpus and evaluation on the cupy backend; overfitting its
    training tasks makes the greedy first-turn pass rate on them non-zero."""
    from leap_jax import main as main_mod
    run = tmp_path / "run"
    assert main_mod.main(["--config", str(TINY), f"train.run_dir={run}", "env.backend=cupy",
                          "sft.corpus.backend=cupy"]) == 0
    res = json.loads((run / sft.EVAL_FILE).read_text())
    train_greedy = [e for e in res["evals"] if e["split"] == "train" and e["temperature"] == 0.0][0]
    assert train_greedy["env_errors"] == 0 and train_greedy["pass_rate"] > 0, train_greedy
