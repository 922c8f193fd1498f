"""The one comment/literal scanner (kernels_env.source.source_text) in both of its modes, and its users."""
from __future__ import annotations

import pytest

from kernels_env.backends.cpu.translate import blank_comments_and_strings
from kernels_env.execute.result_cache import normalize_source
from kernels_env.source.signatures import strip_comments_and_strings
from kernels_env.source.source_text import strip_comments

SRC = ('extern "C" __global__ void k(float* y) { // write "one"\n'
       '  /* a block\n     comment */ const char* s = "a // not a comment";\n'
       "  char c = '\\''; y[0] = 1.f; /* unterminated")


def test_keep_literals_mode_drops_comments_keeps_lines_and_literals():
    out = strip_comments(SRC)
    assert out == ('extern "C" __global__ void k(float* y) {  \n'
                   '   \n const char* s = "a // not a comment";\n'
                   "  char c = '\\''; y[0] = 1.f;  ")
    assert out.count("\n") == SRC.count("\n")


def test_blank_mode_keeps_every_offset_and_hides_literal_text():
    out = strip_comments(SRC, blank_literals=True)
    assert len(out) == len(SRC)
    assert [i for i, ch in enumerate(out) if ch == "\n"] == [i for i, ch in enumerate(SRC) if ch == "\n"]
    assert out.startswith('extern "C" __global__ void k(float* y) {')  # "C" survives
    assert "not a comment" not in out and "write" not in out and "block" not in out
    assert '"                  "' in out  # the string's quotes stay, its text is blanked
    assert "y[0] = 1.f;" in out


@pytest.mark.parametrize("src", ['"abc', "'x", '"a\\"b', "// only a comment", "/* open"])
def test_unterminated_and_escaped_literals_end_sanely(src):
    out = strip_comments(src, blank_literals=True)
    assert len(out) == len(src)
    assert out.strip(" \"'") == ""


def test_line_splice_inside_a_literal_is_kept():
    src = 'const char* s = "ab\\\ncd"; int x;'
    out = strip_comments(src, blank_literals=True)
    assert len(out) == len(src) and out.count("\n") == 1 and "int x;" in out


def test_callers_share_the_scanner():
    assert strip_comments_and_strings(SRC) == strip_comments(SRC, blank_literals=True)
    assert blank_comments_and_strings(SRC) == strip_comments(SRC, blank_literals=True)
    # the cache key ignores comments and whitespace but not literal text
    a = 'extern "C" __global__ void k(int* y) { y[0] = 1; } // v1'
    b = 'extern "C" __global__ void k(int* y) {  y[0] = 1; /* v2 */ }'
    assert normalize_source(a) == normalize_source(b)
    assert normalize_source('const char* s = "x";') != normalize_source('const char* s = "y";')
