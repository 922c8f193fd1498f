"""`python -m kernels_env` subcommands, in process (and one real `-m` run)."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path


from kernels_env.cli import main, suite_table
from kernels_env.core.result import Result, Timing
from kernels_env.core.status import Status
from kernels_env.tasks import list_tasks


def run(argv):
    out = io.StringIO()
    code = main(argv, out=out)
    return code, out.getvalue()


def test_list_text_and_json():
    code, text = run(["list"])
    assert code == 0 and text.strip().endswith(f"{len(list_tasks())} tasks")
    code, text = run(["list", "--level", "2", "--json"])
    rows = json.loads(text)
    assert code == 0 and rows and {r["level"] for r in rows} == {2}
    assert [r["name"] for r in rows] == [t.name for t in list_tasks(level=2)]


def test_show():
    t = list_tasks()[0]
    code, text = run(["show", t.name])
    assert code == 0 and text.startswith(f"# {t.name} (level {t.level}")
    assert t.description.strip() in text and t.solution.strip() in text
    assert "small: " in text and "eval: " in text


def test_unknown_task_suggests(capsys):
    name = list_tasks()[0].name
    code, _ = run(["show", name[:-1]])
    err = capsys.readouterr().err
    assert code == 2 and f"unknown task {name[:-1]!r}" in err and name in err


def test_score_format_error_and_json(tmp_path):
    t = list_tasks()[0]
    f = tmp_path / "answer.md"
    f.write_text("I could not write it.")
    code, text = run(["score", "--task", t.name, str(f), "--backend", "cpu", "--inline"])
    assert code == 1 and text.startswith("format_error: the answer could not be parsed.")
    code, text = run(["score", "--task", t.name, str(f), "--backend", "cpu", "--json", "--inline"])
    d = json.loads(text)
    assert code == 1 and d["status"] == "format_error" and d["task"] == t.name


def test_feedback_chars_and_timing_budget(capsys, tmp_path):
    """--feedback-chars cuts the printed feedback; --timing-budget sets EnvConfig.timing_budget_s; the old
    --budget (which meant feedback characters) is refused with both new names."""
    from kernels_env.cli import _config, build_parser
    t = list_tasks()[0]
    f = tmp_path / "answer.md"
    f.write_text("I could not write it. " * 20)
    _, full = run(["score", "--task", t.name, str(f), "--backend", "cpu", "--inline"])
    _, cut = run(["score", "--task", t.name, str(f), "--backend", "cpu", "--inline", "--feedback-chars", "40"])
    printed = [text.split("\n[status=")[0].rstrip("\n") for text in (cut, full)]
    assert len(printed[0]) <= 40 < len(printed[1]) and printed[0].endswith("[... feedback truncated]")
    args = build_parser().parse_args(["score", "--task", t.name, "x.md", "--timing-budget", "2.5"])
    assert _config(args).timing_budget_s == 2.5
    assert _config(build_parser().parse_args(["score", "--task", t.name, "x.md"])).timing_budget_s == 1.0
    code, _ = run(["score", "--task", t.name, str(f), "--budget", "40"])
    err = capsys.readouterr().err
    assert code == 2 and "--feedback-chars" in err and "--timing-budget" in err


def test_score_missing_file(capsys, tmp_path):
    code, _ = run(["score", "--task", list_tasks()[0].name, str(tmp_path / "nope.md")])
    assert code == 2 and "cannot read submission file" in capsys.readouterr().err


def test_score_solution_on_cpu_backend(tmp_path):
    """Default process mode: compiled and run in worker processes."""
    t = list_tasks()[0]
    f = tmp_path / "sol.md"
    f.write_text(t.solution)
    code, text = run(["score", "--task", t.name, str(f), "--backend", "cpu", "--sizes", "small",
                      "--no-timing", "--trials", "2"])
    assert code == 0, text
    assert text.startswith("correct:") and "backend=cpu" in text and "registers" in text


def test_check_suite_inline_and_table():
    names = [t.name for t in list_tasks()[:2]]
    code, text = run(["check-suite", "--inline", "--backend", "cpu", "--sizes", "small", "--no-timing",
                      "--trials", "1", "--tasks", *names])
    assert code == 0, text
    lines = text.strip().splitlines()
    assert lines[0].split()[:4] == ["task", "status", "speedup", "time_s"]
    assert [ln.split()[0] for ln in lines[1:3]] == names and lines[-1] == "2/2 correct"


def test_suite_table_marks_failures():
    rs = [Result(Status.CORRECT, task="a", timing=Timing("cuda", True, 100, 1.0, 1.0, 2.0, 2.0, 2.0),
                 stage_seconds={"parse": 0.5, "compile": 1.0}),
          Result(Status.WRONG_OUTPUT, task="bb", message="output y: 3% wrong")]
    lines = suite_table(rs).splitlines()
    assert lines[1].split() == ["a", "correct", "2.00x", "1.50"]
    assert lines[2].split()[:4] == ["bb", "wrong_output", "-", "0.00"] and "output y: 3% wrong" in lines[2]
    assert lines[-1] == "1/2 correct"


def test_python_dash_m_entry_point():
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-m", "kernels_env", "list", "--level", "1", "--json"], cwd=root,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    # this process may hold tasks other tests registered (tests/kernels_env/broken_corpus.py); the
    # command's fresh process lists the built-in ones
    from tests.kernels_env.broken_corpus import TASKS as CORPUS
    listed, here = {t["name"] for t in json.loads(out.stdout)}, {t.name for t in list_tasks(level=1)}
    assert listed <= here and here - listed <= set(CORPUS), (listed ^ here)
    assert len(listed) >= 50  # the built-in level-1 suite, not an empty registry


def test_score_invalid_utf8_is_a_format_error(tmp_path):
    """Bytes that are not UTF-8 are the submission's format_error naming the byte offset (exit 1,
    JSON with --json), never a traceback."""
    p = tmp_path / "bad.md"
    p.write_bytes(b"```cuda\n\xff\xfe int x;\n```\n```launch\nk<<<1,1>>>();\n```\n")
    code, text = run(["score", "--task", "relu", str(p), "--backend", "cpu", "--inline", "--json"])
    d = json.loads(text)
    assert code == 1 and d["status"] == "format_error" and d["task"] == "relu"
    assert d["message"].startswith("the answer is not valid UTF-8 text: byte offset 8 (0xff)"), d["message"]
    code, text = run(["score", "--task", "relu", str(p), "--backend", "cpu", "--inline"])
    assert code == 1 and text.startswith("format_error:") and "byte offset 8" in text


def test_score_invalid_utf8_subprocess(tmp_path):
    """The real command through its worker pool (the path that once crashed with a traceback)."""
    p = tmp_path / "bad.md"
    p.write_bytes(b"\xc3\x28 hello")
    proc = subprocess.run([sys.executable, "-m", "kernels_env", "score", "--task", "relu", str(p), "--backend",
                           "cpu", "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    d = json.loads(proc.stdout)
    assert d["status"] == "format_error" and "byte offset 0 (0xc3): invalid continuation byte" in d["message"]
