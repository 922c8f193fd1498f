"""One scanner over CUDA/C++ source text: comments removed, string and char literals kept or blanked.

The cache key (`cache.normalize_source`) and the include check (`compile.check_includes`) need the
code without comments but with literals intact, since a changed literal is a changed program. The
signature scanner (`signatures.find_kernels`) needs text where nothing inside a comment or a literal
can look like code, at the same offsets as the source. Both walk the text the same way; only what
is written for a comment and a literal differs, chosen by `blank_literals`.
"""
from __future__ import annotations


def _blank_literal(lit: str) -> str:
    """A literal overwritten in place: its quotes, newlines and line-splicing backslashes kept,
    everything else a space. The literal `"C"` (of `extern "C"`) is kept whole."""
    if lit == '"C"':
        return lit
    q, n = lit[0], len(lit)
    closed = n > 1 and lit[-1] == q
    out = [q]
    for k in range(1, n - 1 if closed else n):
        ch = lit[k]
        splice = ch == "\\" and lit.startswith(("\n", "\r\n"), k + 1)
        out.append(ch if ch == "\n" or splice else " ")
    if closed:
        out.append(q)
    return "".join(out)


def strip_comments(src: str, *, blank_literals: bool = False) -> str:
    """`src` with `//` and `/* */` comments removed; every newline of the source is kept.

    blank_literals=False (cache keys, include checks): each comment becomes one space (plus the
    newlines a block comment spans); string and char literals are kept verbatim.
    blank_literals=True (signature scanning): comments and literals are overwritten by spaces in
    place, so the output has the length, offsets and lines of the source; a literal keeps its
    quotes, its newlines and line-splicing backslashes, and `"C"` stays as is.
    A comment opener inside a literal is literal text; a literal ends at its closing quote or,
    unterminated, at the end of the line.
    """
    out: list[str] = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i) if blank_literals else " ")
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            if blank_literals:
                out.append("".join(ch if ch == "\n" else " " for ch in src[i:j]))
            else:
                out.append(" " + "\n" * src.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(_blank_literal(src[i:j]) if blank_literals else src[i:j])
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)
