"""Extracting the last ```cuda / ```launch blocks from a Markdown answer, and its format errors."""
from __future__ import annotations

import pytest

from kernels_env.source.submission import MAX_TEXT_CHARS, FormatError, extract_blocks, parse_submission

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
    with pytest.raises(FormatError, match="must be text, got int"):
        extract_blocks(7)  # type: ignore[arg-type]
    # a file's bytes are read as UTF-8 and judged like the same text
    with pytest.raises(FormatError, match="never closed"):
        extract_blocks(b"```cuda")


# ---- robustness: arbitrary policy text never raises anything but FormatError ----------------
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

_FRAGMENTS = ["```cuda\n", "```launch\n", "```\n", "``` \n", "````\n", "\n", " ", "k", "<<<", ">>>", "(", ")",
              "[", "]", ",", ";", "1", "-", "/", "%", "*", "0", "1e-5", "0.5f", "N", "y", "x", "scratch ",
              "float ", "dim3", "cdiv", "min(", "//", "/*", "*/", '"', 'extern "C" __global__ void k(',
              "float* y", "int n", "){}", "{", "}", "\\", "\t", "é", "\x00", "#include <cuda_fp16.h>\n"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=60).map("".join))
def test_parse_submission_only_raises_format_error(text):
    try:
        sub = parse_submission(text)
    except FormatError as e:
        assert str(e)
    else:
        assert sub.cuda_source.strip() and sub.launch_source.strip()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_FRAGMENTS[4:]), max_size=40).map("".join))
def test_prepare_never_raises_on_random_launch_blocks(launch):
    from kernels_env.core.config import EnvConfig
    from kernels_env.execute.score import Prepared, prepare
    from kernels_env.core.status import Status
    from kernels_env.tasks.spec import Buffer, Task
    task = Task(name="fuzz", level=1, description="", sizes={"eval": {"N": 64}, "small": {"N": 8}},
                inputs=(Buffer("x", "float32", ("N",)),), outputs=(Buffer("y", "float32", ("N",)),),
                reference=lambda xp, x: x, solution="")
    text = f"```cuda\n{CUDA1}\n```\n```launch\n{launch}\n```"
    out = prepare(task, text, EnvConfig(sizes="small"))
    assert isinstance(out, Prepared) or out.status is Status.FORMAT_ERROR, out.message
