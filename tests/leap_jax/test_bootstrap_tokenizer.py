"""The bootstrap BPE tokenizer: lossless, atomic ChatML specials, bounded vocabulary,
deterministic, loadable, compatible with the chat template's assistant mask, and compact on code."""
from __future__ import annotations

import json
import random

import pytest

from kernels_env.tasks import get_task, list_tasks
from leap_jax.bootstrap import tokenizer_train as TT
from leap_jax.models import bpe
from leap_jax.bootstrap.corpus import EXAMPLES_FILE, generate_variants, write_jsonl
from leap_jax.models.chat import END_OF_TEXT, IM_END, IM_START, Message, render_chat, render_text, stop_token_ids
from leap_jax.models.tokenizer import Tokenizer
from leap_jax.rollout.prompts import FEEDBACK_SUFFIX, initial_messages, task_prompt

HELD_OUT = ("softmax", "relu", "matmul_square")  # never in the training text below
UNICODE = "naïve café — 漢字かな 🙂🚀 e\u0301 \u200b tab\tcr\r\nnul\x00 bell\x07 ÿ"


def _example(task: str, answer: str, feedback: str | None = None) -> dict:
    msgs = [{"role": m.role, "content": m.content, "train": False} for m in initial_messages(get_task(task))]
    msgs.append({"role": "assistant", "content": answer, "train": True})
    if feedback is not None:
        msgs += [{"role": "user", "content": feedback, "train": False},
                 {"role": "assistant", "content": answer, "train": True}]
    return {"task": task, "kind": "multiturn" if feedback else "single", "messages": msgs}


@pytest.fixture(scope="module")
def train_tasks():
    return [t for t in list_tasks() if t.name not in HELD_OUT]


@pytest.fixture(scope="module")
def examples():
    out = []
    for name in ("gelu_tanh", "sum_dim", "layer_norm"):
        for v in generate_variants(name, 4, seed=0):
            out.append(_example(name, "Plan: one thread per element.\n\n" + v["text"],
                                feedback="compile_error: kernel.cu(3): error: expected a \";\""))
    return out


@pytest.fixture(scope="module")
def tok(examples, train_tasks, tmp_path_factory):
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    t = bpe.train_tokenizer(TT.corpus_texts(examples, train_tasks), 1024, path)
    t.path = path  # for the tests below
    return t


def test_round_trip_is_lossless(tok, examples, train_tasks):
    texts = [render_text(e["messages"]) for e in examples[:4]]
    texts += [task_prompt(get_task(n)) for n in HELD_OUT] + [get_task(n).solution for n in HELD_OUT]
    texts += [UNICODE, "", " ", "\n\n\n", "  leading and trailing  ", "<<<cdiv(N, 256), 256>>>(x, y, N);",
              "x<|im_end|>y<|im_start|>z<|endoftext|>", "<|im_", "|>"]
    rng = random.Random(0)
    texts += ["".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0x80, 0x3000),
                                      rng.randrange(0x1F300, 0x1F600)])) for _ in range(200))
              for _ in range(5)]
    for t in texts:
        for allow in (True, False):
            ids = tok.encode(t, allow_special=allow)
            assert tok.decode(ids) == t, (t[:40], allow)
    assert tok.encode_batch(texts) == [tok.encode(t) for t in texts]


def test_special_tokens_are_atomic(tok, examples, train_tasks):
    special = {s: tok.token_id(s) for s in bpe.SPECIAL_TOKENS}
    assert len(set(special.values())) == 3
    for s, i in special.items():
        assert tok.encode(s) == [i] and tok.decode([i]) == s and tok.id_to_token(i) == s
    # inside text, with neighbours on both sides, each special is its own single id
    ids = tok.encode(f"a{IM_START}user\nhi{IM_END}\n{END_OF_TEXT}b")
    assert [i for i in ids if i in special.values()] == [special[IM_START], special[IM_END], special[END_OF_TEXT]]
    pieces = [tok.decode([i]) for i in ids]
    assert "".join(pieces) == f"a{IM_START}user\nhi{IM_END}\n{END_OF_TEXT}b"
    # plain text never produces a special id, even when it spells one out
    for t in [render_text(e["messages"]) for e in examples] + [f"x{IM_END}y", IM_START * 3]:
        assert not set(tok.encode(t, allow_special=False)) & set(special.values())
    # no learned merge contains a piece of a special token (training text is cut at them)
    vocab = tok.hf.get_vocab(with_added_tokens=False)
    for piece in set(vocab) - set(bpe.SPECIAL_TOKENS):
        for frag in ("im_start", "im_end", "endoftext", "<|", "|>"):
            assert frag not in piece, piece
    assert tok.eos_ids == (special[IM_END],) and tok.pad_id == special[END_OF_TEXT]
    assert stop_token_ids(tok)[:2] == (special[IM_END], special[END_OF_TEXT])


@pytest.mark.parametrize("vocab", [bpe.MIN_VOCAB, 300, 700])
def test_vocab_size_is_respected(vocab, train_tasks):
    t = bpe.train_tokenizer(TT.corpus_texts([], train_tasks), vocab)
    assert t.vocab_size == vocab  # the suite has more than enough text to fill these
    assert len(t.hf.get_vocab(with_added_tokens=True)) == vocab
    if vocab == bpe.MIN_VOCAB:  # bytes + specials only: every byte is still encodable
        assert t.decode(t.encode(UNICODE)) == UNICODE
        assert len(t.encode("abc")) == 3


def test_small_corpus_gives_at_most_the_asked_vocab():
    t = bpe.train_tokenizer(["tiny text", "tiny"], 4096)
    assert bpe.MIN_VOCAB <= t.vocab_size < 4096
    assert t.decode(t.encode(UNICODE)) == UNICODE  # the byte alphabet is always complete


@pytest.mark.parametrize("bad,err,match", [
    (258, ValueError, "vocab_size=258.*at least 259"), (0, ValueError, "vocab_size=0"),
    (-5, ValueError, "vocab_size=-5"), ("512", TypeError, "vocab_size='512'"),
    (512.0, TypeError, "vocab_size=512.0"), (True, TypeError, "vocab_size=True")])
def test_bad_vocab_sizes_are_named(bad, err, match):
    with pytest.raises(err, match=match):
        bpe.train_tokenizer(["some text"], bad)


def test_bad_training_input_is_named():
    with pytest.raises(TypeError, match="training text #1 is a bytes"):
        bpe.train_tokenizer(["ok", b"bytes"], 300)
    with pytest.raises(ValueError, match="corpus example #0 has no 'messages'"):
        list(TT.corpus_texts([{"task": "relu"}], []))
    with pytest.raises(ValueError, match="prompt size set 'huge'"):
        list(TT.corpus_texts([], ["relu"], prompt_sizes="huge"))


def test_training_is_deterministic(examples, train_tasks, tmp_path):
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    bpe.train_tokenizer(TT.corpus_texts(examples, train_tasks), 800, a)
    bpe.train_tokenizer(TT.corpus_texts(examples, train_tasks), 800, b)
    assert a.read_bytes() == b.read_bytes()
    bpe.train_tokenizer(TT.corpus_texts(examples[:2], train_tasks[:5]), 800, c)
    assert c.read_bytes() != a.read_bytes()
    assert not list(tmp_path.glob("*.tmp*"))


def test_saved_file_loads_with_tokenizer_from_file(tok):
    assert json.loads(tok.path.read_text())["model"]["type"] == "BPE"
    plain = Tokenizer.from_file(str(tok.path))
    again = bpe.load_trained(tok.path)
    for t in (UNICODE, get_task("softmax").solution, f"{IM_START}user\nx{IM_END}"):
        assert plain.encode(t) == tok.encode(t) == again.encode(t)
    assert plain.vocab_size == tok.vocab_size == again.vocab_size
    assert again.eos_ids == tok.eos_ids and again.pad_id == tok.pad_id


def test_chat_template_mask_works_with_it(tok):
    answer = "Reasoning: ré-use shared memory 🙂\n\n" + get_task("softmax").solution
    msgs = [*initial_messages(get_task("softmax")), Message("assistant", "```cuda\nbad\n```"),
            Message("user", "compile_error: kernel.cu(1): error\n\n" + FEEDBACK_SUFFIX),
            Message("assistant", answer)]
    ids, mask = render_chat(tok, msgs, add_generation_prompt=False)
    assert len(ids) == len(mask)
    assert tok.decode(ids) == render_text(msgs)
    trained = tok.decode([i for i, m in zip(ids, mask, strict=False) if m])
    assert trained == f"```cuda\nbad\n```{IM_END}{answer}{IM_END}"
    assert ids.count(tok.token_id(IM_START)) == len(msgs) and ids.count(tok.token_id(IM_END)) == len(msgs)
    gen_ids, gen_mask = render_chat(tok, msgs[:2], add_generation_prompt=True)
    assert tok.decode(gen_ids).endswith(f"{IM_START}assistant\n") and not any(gen_mask)


def test_compact_on_code_and_prompts(tok):
    for name in HELD_OUT:  # tasks whose text was not trained on
        sol, prompt = get_task(name).solution, task_prompt(get_task(name))
        assert len(tok.encode(sol)) < 0.5 * len(sol.encode()), name
        assert len(tok.encode(prompt)) < 0.45 * len(prompt.encode()), name
    # and clearly better than the untrained byte-level baseline (bytes + specials only)
    base = bpe.train_tokenizer([], bpe.MIN_VOCAB)
    sol = get_task("softmax").solution
    assert len(base.encode(sol)) == len(sol.encode())


def test_corpus_texts_cover_examples_and_every_task_prompt(examples, train_tasks):
    texts = list(TT.corpus_texts(examples, [t.name for t in train_tasks[:3]], prompt_sizes=("eval", "small")))
    assert texts[:len(examples)] == [render_text(e["messages"]) for e in examples]
    assert FEEDBACK_SUFFIX in texts
    for t in train_tasks[:3]:
        for s in ("eval", "small"):
            assert render_text(initial_messages(t, s), add_generation_prompt=True) in texts
        assert t.solution in texts


def test_cli_trains_on_a_corpus_dir(examples, tmp_path, capsys):
    write_jsonl(tmp_path / EXAMPLES_FILE, examples)
    out = tmp_path / "tk" / "tokenizer.json"
    assert TT.main(["--corpus", str(tmp_path), "--vocab", "600", "--out", str(out)]) == 0
    assert "600 ids" in capsys.readouterr().out
    t = bpe.load_trained(out)
    assert t.vocab_size == 600 and t.decode(t.encode(UNICODE)) == UNICODE
    with pytest.raises(SystemExit):
        TT.main(["--corpus", str(tmp_path), "--vocab", "100"])
    assert "--vocab: vocab_size=100" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        TT.main(["--corpus", str(tmp_path / "nothing")])
    assert f"no {EXAMPLES_FILE}" in capsys.readouterr().err
