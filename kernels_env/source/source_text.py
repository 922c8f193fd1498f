"""One scanner over CUDA/C++ source text: comments removed, string and char literals kept or blanked.

The cache key (`result_cache.normalize_source`) and the include check (`compile.check_includes`)
need the code without comments but with literals intact, since a changed literal is a changed
program. The
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


# ---- preprocessing directives, as a C preprocessor finds them ------------------------------------
_HSPACE = " \t\f\v\r"
_RAW_PREFIXES = ("R", "u8R", "uR", "UR", "LR")
_IDENT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$")


def _splice_end(src: str, i: int) -> int:
    """Index after the line splices starting at `i` (backslash, optional blanks, newline), else `i`.
    GCC accepts blanks between the backslash and the newline, so they count here too."""
    n = len(src)
    while i < n and src[i] == "\\":
        j = i + 1
        while j < n and src[j] in " \t\f\v\r":
            j += 1
        if j < n and src[j] == "\n":
            i = j + 1
        else:
            break
    return i


def directives(src: str) -> list[tuple[int, str, str]]:
    """Every preprocessing directive of `src` as (line, name, rest of the logical line), found the way
    a C++17 preprocessor finds them: line splices anywhere (outside raw strings), comments as blanks
    (`#/**/include`), any horizontal whitespace (form feed, vertical tab), the `%:` digraph, and raw
    string literals (`R"d( ... )d"`, where splices and comment openers are literal text). The rest
    keeps string literals and has comments as one space and splices removed. Linear time.

    Conservative by construction: text the compiler could read as a directive is reported."""
    out: list[tuple[int, str, str]] = []
    n = len(src)
    i = _splice_end(src, 0)
    line_start = True

    counted = [0, 1]  # (offset, line there): line numbers counted incrementally (linear time)

    def line_of(pos: int) -> int:
        counted[1] += src.count("\n", counted[0], pos)
        counted[0] = pos
        return counted[1]

    def skip_comment(i: int) -> int:
        """`i` at '/' of a comment opener (splice-aware); index after the comment."""
        j = _splice_end(src, i + 1)
        if src[j] == "/":
            while True:  # a line comment ends at a newline that is not spliced
                k = src.find("\n", j)
                if k < 0:
                    return n
                b = k - 1
                while b > j and src[b] in " \t\f\v\r":
                    b -= 1
                if src[b] == "\\":
                    j = k + 1
                    continue
                return k
        j += 1  # block comment: find `*` then (splices) `/`
        while True:
            k = src.find("*", j)
            if k < 0:
                return n
            e = _splice_end(src, k + 1)
            if e < n and src[e] == "/":
                return e + 1
            j = k + 1

    def is_comment(i: int) -> bool:
        if src[i] != "/":
            return False
        j = _splice_end(src, i + 1)
        return j < n and src[j] in "/*"

    def read_quoted(i: int) -> int:
        """`i` at an opening quote; index after the literal (ends at the quote or the newline)."""
        q, j = src[i], i + 1
        while j < n:
            j = _splice_end(src, j)
            if j >= n or src[j] == "\n":
                return j
            if src[j] == "\\":
                j = _splice_end(src, j + 1) + 1
                continue
            if src[j] == q:
                return j + 1
            j += 1
        return n

    def read_raw(i: int) -> int:
        """`i` at the `"` of a raw string; index after it (no splices inside: C++ reverts them)."""
        k = src.find("(", i + 1, i + 18)
        if k < 0 or any(c in src[i + 1:k] for c in " ()\\\t\v\f\n"):
            return read_quoted(i)  # not a valid raw string: the compiler errors; scan as ordinary
        end = src.find(")" + src[i + 1:k] + '"', k + 1)
        return n if end < 0 else end + k - i + 1

    while i < n:
        c = src[i]
        if c == "\n":
            line_start = True
            i += 1
        elif c in _HSPACE:
            i += 1
        elif c == "\\" and _splice_end(src, i) != i:
            i = _splice_end(src, i)
        elif is_comment(i):
            i = skip_comment(i)
        elif line_start and (c == "#" or (c == "%" and src[_splice_end(src, i + 1):_splice_end(src, i + 1) + 1] == ":")):
            start = i
            i = _splice_end(src, i + 1) + (1 if c == "%" else 0)
            # the directive runs to the first newline outside comments (splices removed)
            parts: list[str] = []
            while i < n and src[i] != "\n":
                if src[i] == "\\" and _splice_end(src, i) != i:
                    i = _splice_end(src, i)
                elif is_comment(i):
                    i = skip_comment(i)
                    parts.append(" ")
                elif src[i] in "\"'":
                    j = read_quoted(i)
                    parts.append(src[i:j].replace("\\\n", ""))
                    i = j
                else:
                    parts.append(src[i])
                    i += 1
            rest = "".join(parts).lstrip(_HSPACE)
            k = 0
            while k < len(rest) and rest[k] in _IDENT_CHARS:
                k += 1
            out.append((line_of(start), rest[:k], rest[k:]))
            line_start = False
        elif c in "\"'":
            i = read_quoted(i)
            line_start = False
        elif c.isdigit() or (c == "." and i + 1 < n and src[i + 1].isdigit()):
            j = i + 1  # a pp-number: digit separators (1'000) and exponent signs belong to it
            while j < n:
                if src[j] in _IDENT_CHARS or src[j] == ".":
                    j += 1
                elif src[j] == "'" and j + 1 < n and src[j + 1] in _IDENT_CHARS:
                    j += 2
                elif src[j] in "+-" and src[j - 1] in "eEpP":
                    j += 1
                else:
                    break
            i = j
            line_start = False
        elif c in _IDENT_CHARS:
            j = i
            while j < n and src[j] in _IDENT_CHARS:
                j += 1
            if j < n and src[j] == '"' and src[i:j] in _RAW_PREFIXES and (i == 0 or src[i - 1] not in _IDENT_CHARS):
                j = read_raw(j)
            i = j
            line_start = False
        else:
            i += 1
            line_start = False
    return out
