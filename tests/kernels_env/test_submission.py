"""Extracting the last ```cuda / ```launch blocks from a Markdown answer, and its format errors."""
from __future__ import annotations

import pytest

from kernels_env.submission import MAX_TEXT_CHARS, FormatError, extract_blocks, parse_submission

CUDA1 = 'extern "C" __global__ void k(float* y, int n) { }'
CUDA2 = 'extern "C" __global__ void k2(float* y, int n) { y[0] = n; }'


def answer(*parts: str) -> str:
    return "\n".join(parts)


def test_last_blocks_win_and_prose_is_ignored():
    text = answer("Let me think.", "```cuda", CUDA1, "```", "```launch", "k<<<1, 1>>>(y, N);", "```",
                  "Actually, better:", "```CUDA  ", CUDA2, "```   ", "```python", "print('x')", "```",
                  "``` Launch", "k2<<<2, 32>>>(y, N);", "```", "done")
    cuda, launch = extract_blocks(text)
    assert cuda == CUDA2
    assert launch == "k2<<<2, 32>>>(y, N);"
    sub = parse_submission(text)
    assert list(sub.kernels) == ["k2"] and sub.plan.launches[0].kernel == "k2"


def test_crlf_and_longer_fences():
    text = "````cuda\r\n" + CUDA1 + "\r\n```\r\nstill cuda\r\n````\r\n```launch\r\nk<<<1,1>>>(y, N);\r\n```\r\n"
    cuda, launch = extract_blocks(text)
    assert cuda == CUDA1 + "\n```\nstill cuda" and launch == "k<<<1,1>>>(y, N);"


@pytest.mark.parametrize("text, fragment", [
    ("no code at all", "no ```cuda and ```launch block in the answer"),
    (answer("```cuda", CUDA1, "```"), "no ```launch block in the answer"),
    (answer("```cu", CUDA1, "```", "```launch", "k<<<1,1>>>(y, N);", "```"),
     "no ```cuda block in the answer (found blocks tagged: cu)"),
    (answer("```c++", CUDA1, "```", "```launch", "k<<<1,1>>>(y, N);", "```"), "found blocks tagged: c++"),
    (answer("```cuda", CUDA1, "```", "```launch", "k<<<1,1>>>(y, N);"),
     "the ```launch block opened at line 4 of the answer is never closed"),
    (answer("```launch", "k<<<1,1>>>(y, N);", "```", "```cuda", CUDA1),
     "the ```cuda block opened at line 4 of the answer is never closed"),
    (answer("```cuda", "   ", "```", "```launch", "k<<<1,1>>>(y, N);", "```"), "the ```cuda block is empty"),
    (answer("```cuda", CUDA1, "```", "```launch", "```"), "the ```launch block is empty"),
    (answer("```cuda", CUDA1, "```", "```launch", "", "k<<<1,1>>(y, N);", "```"),
     "launch block line 2: unexpected character '>'"),
])
def test_format_errors(text, fragment):
    with pytest.raises(FormatError) as ei:
        parse_submission(text)
    assert fragment in str(ei.value)


def test_size_limit():
    big = answer("```cuda", CUDA1, "// " + "x" * MAX_TEXT_CHARS, "```", "```launch", "k<<<1,1>>>(y, N);", "```")
    with pytest.raises(FormatError, match=f"at most {MAX_TEXT_CHARS} are accepted"):
        extract_blocks(big)


def test_non_text_is_a_format_error():
    with pytest.raises(FormatError, match="must be text, got bytes"):
        extract_blocks(b"```cuda")  # type: ignore[arg-type]
