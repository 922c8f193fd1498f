"""What a first user of the CLI sees: help for every score option, and NVRTC missing said with its fix."""
from __future__ import annotations

import io

import pytest

from kernels_env.compiler.compile import NVRTC_MISSING
from kernels_env.cli import main
from kernels_env.tasks import list_tasks


def _help(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--help"], out=io.StringIO())
    assert exc.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines: compare on single spaces


@pytest.mark.parametrize("sub, option, words", [
    ("score", "--task", "the task to score against"),
    ("score", "--json", "print the whole result as JSON"),
    ("list", "--json", "print the tasks as JSON"),
    ("check-suite", "--json", "print every task's result as JSON"),
])
def test_options_explain_themselves(sub, option, words, capsys):
    text = _help([sub], capsys)
    assert f"{option}" in text and words in text


def _nvrtc_missing(monkeypatch, cause: str = "libnvrtc.so.13: cannot open shared object file") -> None:
    """Make compilation fail as compile_cuda does on a machine without the NVRTC wheel."""
    from kernels_env.execute import score as scoring

    def fail(*a, **k):
        raise RuntimeError(f"{NVRTC_MISSING} (cause: {cause})")
    monkeypatch.setattr(scoring, "compile_cuda", fail)


def test_score_without_nvrtc_names_the_packages_and_the_backend(tmp_path, monkeypatch):
    _nvrtc_missing(monkeypatch)
    task = list_tasks()[0]
    f = tmp_path / "sol.md"
    f.write_text(task.solution)
    out = io.StringIO()
    code = main(["score", "--task", task.name, str(f), "--backend", "cpu", "--inline", "--sizes", "small",
                 "--no-timing"], out=out)
    text = out.getvalue()
    assert code == 1
    assert text.startswith("env_error:")
    assert "pip install cupy-cuda13x nvidia-cuda-nvrtc" in text
    assert "backend=cpu " in text


def test_the_install_hint_survives_a_long_cause(monkeypatch):
    """The result's message is cut at 500 characters: the hint comes before the import error's text."""
    from kernels_env.execute import score as scoring

    _nvrtc_missing(monkeypatch, cause="x" * 2000)
    task = list_tasks()[0]
    r = scoring.prepare(task, task.solution)
    assert r.status.value == "env_error" and len(r.message) <= 500
    assert NVRTC_MISSING in r.message


def test_compile_without_nvrtc_raises_the_hint_first(monkeypatch):
    import sys

    from kernels_env.compiler.compile import compile_cuda
    monkeypatch.setitem(sys.modules, "cupy_backends.cuda.libs", None)  # the import fails as without the wheel
    with pytest.raises(RuntimeError) as exc:
        compile_cuda('extern "C" __global__ void k(float* y) { y[0] = 1.f; }')
    assert str(exc.value).startswith(NVRTC_MISSING + " (cause: ")
