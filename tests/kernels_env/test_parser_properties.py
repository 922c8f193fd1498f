"""Property tests of the submission parser, the launch language and the source scanners.

Whatever the text, parsing ends in a Submission / LaunchPlan or a FormatError (never another
exception) and quickly. Examples are bounded so the file runs in seconds on 2 cores.
"""
from __future__ import annotations

import time

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kernels_env.source.launch import FormatError, parse_launch  # noqa: E402
from kernels_env.core.program import LaunchPlan, Submission  # noqa: E402
from kernels_env.source.signatures import find_hidden_kernels, find_kernels  # noqa: E402
from kernels_env.source.source_text import directives, strip_comments  # noqa: E402
from kernels_env.source.submission import parse_submission  # noqa: E402

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
EXAMPLE_SECONDS = 1.0

LAUNCH_TOKENS = ["scratch", "float", "int", "long", "__half", "k", "x", "y", "N", "cdiv", "min", "max",
                 "nullptr", "<<<", ">>>", "(", ")", "[", "]", ",", ";", "+", "-", "*", "/", "%", "0", "1",
                 "256", "0x10", "1e5", "0.5f", "9" * 30, " ", "\n", "//c\n", "/* c */", "\t", "\x00", "=",
                 "{", "\"", "'", "é", "\udcff"]
CUDA_TOKENS = ['extern "C"', "__global__", "void", "k", "(", ")", "{", "}", "[", "]", ";", ",", "float*",
               "const", "int", "n", "typedef", "using", "=", "#", "%:", "include", "define", '"a.h"', "<b.h>",
               "\\\n", "\n", "\f", "\v", " ", "/*", "*/", "//", 'R"(', ')"', "'", '"', "1'0", "template",
               "<", ">", "__launch_bounds__", "extern", "__shared__", "\x00", "é"]


def _timed(fn, *args):
    t0 = time.perf_counter()
    try:
        return fn(*args)
    finally:
        assert time.perf_counter() - t0 < EXAMPLE_SECONDS


def _joined(tokens):
    return st.lists(st.sampled_from(tokens), max_size=60).map("".join)


def _answer(cuda: str, launch: str, fence: str = "```") -> str:
    return f"text\n{fence}cuda\n{cuda}\n{fence}\n{fence}launch\n{launch}\n{fence}\n"


@SETTINGS
@given(st.text(max_size=400))
def test_any_text_is_a_submission_or_a_format_error(text):
    try:
        out = _timed(parse_submission, text)
    except FormatError:
        return
    assert isinstance(out, Submission)


@SETTINGS
@given(_joined(CUDA_TOKENS), _joined(LAUNCH_TOKENS), st.sampled_from(["```", "````", " ```", "~~~"]))
def test_structured_answers_parse_or_format_error(cuda, launch, fence):
    try:
        out = _timed(parse_submission, _answer(cuda, launch, fence))
    except FormatError:
        return
    assert isinstance(out, Submission)


@SETTINGS
@given(_joined(LAUNCH_TOKENS))
def test_launch_language_never_crashes(launch):
    try:
        out = _timed(parse_launch, launch)
    except FormatError:
        return
    assert isinstance(out, LaunchPlan)


@SETTINGS
@given(_joined(CUDA_TOKENS))
def test_source_scanners_never_crash(src):
    _timed(find_kernels, src)
    _timed(find_hidden_kernels, src)
    _timed(directives, src)
    assert len(strip_comments(src, blank_literals=True)) == len(src)


@SETTINGS
@given(_joined(CUDA_TOKENS), st.sampled_from(["#include", "# include", "\f#\finclude", "#/**/include",
                                              "%:include", "#inc\\\nlude", "#include_next"]))
def test_directive_scanner_sees_includes_at_line_start(prefix, directive):
    """An include directive on its own line after arbitrary code is found, unless that code leaves an
    open block comment or raw string (where the compiler does not see it either)."""
    src = prefix + "\n" + directive + ' "/etc/passwd"\n'
    found = [d for d in directives(src) if d[1].startswith("include")]
    opened = ("/*" in prefix) or ('R"(' in prefix)
    if not opened and "\\\n" not in prefix[-2:]:
        assert found, src


@pytest.mark.parametrize("size", [50_000, 190_000])
def test_crafted_inputs_parse_in_linear_time(size):
    """Inputs that were quadratic for a backtracking scanner finish well inside the 2 s parse limit."""
    crafted = [
        "```" + "a" * size + "`\n",
        _answer("typedef " * (size // 8), "k<<<1,1>>>();"),
        _answer('extern "C" __global__ void k(' * (size // 32), "k<<<1,1>>>();"),
        _answer('extern "C" {' * (size // 12), "k<<<1,1>>>();"),
        _answer("extern " * (size // 7), "k<<<1,1>>>();"),
        _answer('extern "C" __global__ void k(' * (size // 40) + ")" * (size // 40), "k<<<1,1>>>();"),
        _answer("__global__ void k(" * (size // 40) + "(" * (size // 4), "k<<<1,1>>>();"),
        _answer("using a = " * (size // 10), "k<<<1,1>>>();"),
        _answer('extern "C" __global__ void k(int a' + "[" * (size // 2) + ") {}", "k<<<1,1>>>();"),
        _answer("x", "k<<<" + "(" * 60 + "1" + ")" * 60 + ", 1>>>();" * (size // 140)),
    ]
    for text in crafted:
        t0 = time.perf_counter()
        try:
            sub = parse_submission(text)
            find_hidden_kernels(sub.cuda_source)
            directives(sub.cuda_source)
        except FormatError:
            pass
        assert time.perf_counter() - t0 < 2.0, text[:80]
