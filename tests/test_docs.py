"""The documents a newcomer reads first: README's commands are the ones CI runs, and links resolve."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _readme_commands() -> list[str]:
    block = README.read_text().split("```bash\n", 1)[1].split("```", 1)[0]
    return [ln for ln in block.splitlines() if ln and not ln.startswith("#")]


def test_readme_is_an_entry_point():
    lines = README.read_text().splitlines()
    assert len(lines) <= 120, f"README.md has {len(lines)} lines; details belong in docs/"


def test_ci_runs_the_readmes_test_commands():
    """Each pytest call of README's second command appears verbatim in .ci/run."""
    install_and_test = _readme_commands()[1]
    pytest_calls = [c.strip() for c in install_and_test.split("&&") if "pytest" in c]
    assert len(pytest_calls) == 2
    ci = (ROOT / ".ci" / "run").read_text()
    for call in pytest_calls:
        assert call in ci, f".ci/run does not run README's {call!r}"


def _markdown_files() -> list[Path]:
    docs = [p for p in (ROOT / "docs").glob("*.md")]
    return [README, ROOT / "CHANGELOG.md", ROOT / "docs" / "results" / "README.md", *docs]


def test_relative_links_resolve():
    broken = []
    for md in _markdown_files():
        for target in LINK.findall(md.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (md.parent / target).exists():
                broken.append(f"{md.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_results_paths_named_in_the_tree_exist():
    """A `docs/results/...` path quoted anywhere in the docs, code or configs names a real folder or file."""
    pattern = re.compile(r"docs/results/[\w.@/-]*[\w/]")
    missing = []
    for path in [*ROOT.glob("*.md"), *ROOT.glob("docs/*.md"), *ROOT.glob("leap_jax/**/*.py"),
                 *ROOT.glob("kernels_env/**/*.py"), *ROOT.glob("benchmarks/*.py"), *ROOT.glob("configs/**/*.yaml"),
                 *ROOT.glob("scripts/**/*")]:
        if not path.is_file():
            continue
        for ref in pattern.findall(path.read_text(errors="replace")):
            if not (ROOT / ref.rstrip("/.")).exists():
                missing.append(f"{path.relative_to(ROOT)}: {ref}")
    assert not missing, missing
