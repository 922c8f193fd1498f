"""Extract and parse a policy's Markdown answer (DESIGN 3.2): the last ```cuda and last ```launch blocks.

Everything outside those two blocks (reasoning, other code blocks) is ignored. Info strings must be
exactly `cuda` / `launch` (case-insensitive); an unterminated cuda/launch fence is a format error.
"""
from __future__ import annotations

import re

from kernels_env.source.launch import FormatError, parse_launch
from kernels_env.core.program import Submission
from kernels_env.source.signatures import find_kernels

MAX_TEXT_CHARS = 200_000
Answer = str | bytes  # the policy's answer: text, or the bytes of a file (decoded as UTF-8 here)

__all__ = ["FormatError", "Answer", "decode_answer", "extract_blocks", "parse_submission", "in_launch_block",
           "MAX_TEXT_CHARS"]


def decode_answer(answer: Answer) -> str:
    """The answer as text: bytes are UTF-8 (a byte sequence that is not is a FormatError naming its
    offset); text is returned as is. Anything else is a FormatError naming its type."""
    if isinstance(answer, str):
        return answer
    if not isinstance(answer, (bytes, bytearray)):
        raise FormatError(f"the submission must be text, got {type(answer).__name__}")
    try:
        return bytes(answer).decode("utf-8")
    except UnicodeDecodeError as e:
        bad = " ".join(f"0x{b:02x}" for b in e.object[e.start:e.end][:4])
        raise FormatError(f"the answer is not valid UTF-8 text: byte offset {e.start} ({bad}): {e.reason}; "
                          "expected UTF-8 Markdown") from None

# The info string is read in code, not by a regex: `[^`\s]*[^`]*$` backtracks quadratically on a
# long line ending in a backtick.
_OPEN_RE = re.compile(r"^ {0,3}(`{3,})(.*)$")
_CLOSE_RE = re.compile(r"^ {0,3}(`{3,})[ \t]*$")


def _blocks(text: str) -> tuple[list[tuple[str, str, int]], tuple[str, int] | None]:
    """All fenced blocks as (info, body, opening line), plus the unterminated one if any."""
    blocks: list[tuple[str, str, int]] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = _OPEN_RE.match(lines[i].rstrip("\r"))
        if not m or "`" in m.group(2):
            i += 1
            continue
        words = m.group(2).split()
        fence, info, start = m.group(1), (words[0] if words else "").lower(), i + 1
        j = i + 1
        while j < len(lines):
            c = _CLOSE_RE.match(lines[j].rstrip("\r"))
            if c and len(c.group(1)) >= len(fence):
                break
            j += 1
        if j >= len(lines):
            return blocks, (info, start)
        blocks.append((info, "\n".join(ln.rstrip("\r") for ln in lines[i + 1:j]), start))
        i = j + 1
    return blocks, None


def extract_blocks(answer: Answer) -> tuple[str, str]:
    """Return (cuda source, launch source) from the last ```cuda and ```launch blocks; FormatError if
    either is missing, unterminated, empty, the text is too large or not UTF-8 (decode_answer)."""
    text = decode_answer(answer)
    if len(text) > MAX_TEXT_CHARS:
        raise FormatError(f"the answer is {len(text)} characters; at most {MAX_TEXT_CHARS} are accepted")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:  # lone surrogates: no compiler or file can take them
        raise FormatError(f"the answer has a character that is not valid Unicode text at offset {e.start} "
                          "(a lone surrogate)") from None
    blocks, open_block = _blocks(text)
    if open_block is not None and open_block[0] in ("cuda", "launch"):
        raise FormatError(f"the ```{open_block[0]} block opened at line {open_block[1]} of the answer is "
                          "never closed; end it with a line containing only ```")
    found = {}
    for info, body, _ in blocks:
        if info in ("cuda", "launch"):
            found[info] = body
    missing = [k for k in ("cuda", "launch") if k not in found]
    if missing:
        others = sorted({info or "(no language)" for info, _, _ in blocks if info not in ("cuda", "launch")})
        hint = f" (found blocks tagged: {', '.join(others)})" if others else ""
        if open_block is not None:
            hint += f"; a ``` block opened at line {open_block[1]} is never closed"
        want = " and ".join(f"```{k}" for k in missing)
        raise FormatError(f"no {want} block in the answer{hint}; expected one ```cuda block with the "
                          "device code and one ```launch block with the launches")
    for k in ("cuda", "launch"):
        if not found[k].strip():
            raise FormatError(f"the ```{k} block is empty")
        if "\x00" in found[k]:
            line = found[k].count("\n", 0, found[k].index("\x00")) + 1
            raise FormatError(f"the ```{k} block has a NUL character (line {line} of the block); "
                              "submissions must be plain text")
    return found["cuda"], found["launch"]


def in_launch_block(message: str) -> str:
    """Say that a launch-language message's line numbers count from the launch block's first line."""
    return f"launch block {message}" if message.startswith("line ") else message


def parse_submission(text: Answer) -> Submission:
    """Extract the blocks, find the extern "C" kernels and parse the launch plan (no task checks yet:
    see `kernels_env.source.launch.check_plan`). Raises FormatError."""
    cuda, launch = extract_blocks(text)
    try:
        plan = parse_launch(launch)
    except FormatError as e:
        raise FormatError(in_launch_block(str(e))) from None
    kernels = find_kernels(cuda)
    return Submission(cuda_source=cuda, launch_source=launch, plan=plan, kernels=kernels)
