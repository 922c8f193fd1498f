"""Find the launchable kernels in device code: `extern "C" __global__` functions and their C parameters.

Only extern "C" kernels have unmangled names that the launcher can look up; other `__global__`
functions are reported separately (`find_hidden_kernels`) so errors can say why a name is unknown.
This is a light scanner over comment- and string-free text, not a C++ parser: it understands the
shapes kernels are written in (qualifiers, `__launch_bounds__`, `extern "C" { ... }` blocks).
"""
from __future__ import annotations

import functools
import itertools
import re

from kernels_env.core.program import KernelParam, KernelSignature
from kernels_env.source.source_text import strip_comments

_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "register"}
_C_TYPE_WORDS = {"int", "long", "short", "char", "float", "double", "unsigned", "signed", "bool", "void"}
_MODIFIERS = {"static", "inline", "__forceinline__", "__noinline__", "__inline__"}


def strip_comments_and_strings(src: str) -> str:
    """Blank out comments, string and char literals in place (keeping newlines and the literal `"C"`)."""
    return strip_comments(src, blank_literals=True)


def _strip_preprocessor(src: str) -> str:
    lines = src.split("\n")
    out, cont = [], False
    for ln in lines:
        is_pp = cont or ln.lstrip().startswith("#")
        cont = is_pp and ln.rstrip().endswith("\\")
        out.append("" if is_pp else ln)
    return "\n".join(out)


def _extern_c_regions(src: str) -> list[tuple[int, int]]:
    """Spans of `extern "C" { ... }` blocks (brace-matched, one linear pass; unclosed: to the end)."""
    opens = {m.end() - 1 for m in re.finditer(r'extern\s+"C"\s*\{', src)}
    if not opens:
        return []
    regions, stack = [], []
    for m in re.finditer(r"[{}]", src):
        j = m.start()
        if src[j] == "{":
            stack.append(j)
        elif stack:
            k = stack.pop()
            if k in opens:
                regions.append((k + 1, j + 1))
    regions += [(k + 1, len(src)) for k in stack if k in opens]
    return sorted(regions)


def _coverage(n: int, regions: list[tuple[int, int]]) -> list[int]:
    """cov[i] > 0 iff offset i lies in one of `regions` (difference array: linear time)."""
    diff = [0] * (n + 2)
    for a, b in regions:
        diff[a] += 1
        diff[min(b, n + 1)] -= 1
    return list(itertools.accumulate(diff))


MAX_PARAMS_CHARS = 4096  # a parameter list (or __launch_bounds__) longer than this is not scanned


def _paren_matches(src: str) -> dict[int, int]:
    """Offset of every '(' -> offset just past its matching ')' (one linear pass; unmatched: absent)."""
    out: dict[int, int] = {}
    stack: list[int] = []
    for m in re.finditer(r"[()]", src):
        if src[m.start()] == "(":
            stack.append(m.start())
        elif stack:
            out[stack.pop()] = m.start() + 1
    return out


def _split_top(s: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in s:
        if ch in "(<[":
            depth += 1
        elif ch in ")>]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


_BASE_ALIASES = {
    "unsigned": "unsigned int", "signed": "int", "signed int": "int", "long int": "long",
    "long long int": "long long", "unsigned long long int": "unsigned long long",
    "unsigned long int": "unsigned long", "short int": "short", "unsigned short int": "unsigned short",
    "signed long long": "long long", "uint": "unsigned int",
}


_TOKEN_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_:]*|\*|&")
# bounded repetitions: unbounded lazy bodies made many unterminated `typedef`s quadratic
# (greedy and bounded, the declared name split off in code: a lazy body retried a word match at every
# character, which was slow on many unterminated `typedef`s)
_TYPEDEF_RE = re.compile(r"\btypedef\s+([^;{}()\[\]]{1,256});")
_USING_RE = re.compile(r"\busing\s+([A-Za-z_]\w{0,255})\s*=\s*([^;{}()\[\]]{1,256});")
_LAST_WORD_RE = re.compile(r"\b([A-Za-z_]\w*)\s*$")
_DEFINE_RE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+([^\n]*)$", re.M)
_ALIAS_WORDS = _QUALIFIERS | _C_TYPE_WORDS | {"__half", "half", "__half2", "half2", "__nv_bfloat16",
                                              "int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t",
                                              "uint32_t", "int64_t", "uint64_t", "size_t", "uint"}
MAX_ALIAS_DEPTH = 16
MAX_ALIAS_TOKENS = 256


def find_type_aliases(clean: str, raw: str = "") -> dict[str, tuple[str, ...]]:
    """Type aliases a kernel signature may use: `typedef T name;`, `using name = T;` and object-like
    `#define name T` whose body is only type words, qualifiers and `*` (as llm.c writes `floatX`).
    Maps each name to its definition's tokens (not yet expanded); later definitions win."""
    out: dict[str, tuple[str, ...]] = {}
    found: list[tuple[int, str, str]] = []
    for m in _TYPEDEF_RE.finditer(clean):
        body = m.group(1)
        w = _LAST_WORD_RE.search(body)
        if w is not None and body[:w.start()].strip():
            found.append((m.start(), w.group(1), body[:w.start()].strip()))
    for m in _USING_RE.finditer(clean):
        found.append((m.start(), m.group(1), m.group(2).strip()))
    for m in _DEFINE_RE.finditer(raw):
        body = m.group(2).strip()
        toks = _TOKEN_RE.findall(body)
        if toks and "".join(toks) == re.sub(r"\s+", "", body) and \
                all(t == "*" or t in _ALIAS_WORDS or re.fullmatch(r"[A-Za-z_]\w*", t) for t in toks) \
                and any(t in _ALIAS_WORDS for t in toks):
            found.append((m.start(), m.group(1), body))
    for _, name, body in sorted(found):
        definition = tuple(_TOKEN_RE.findall(body))
        if definition and name not in definition and "&" not in definition:
            out[name] = definition
    return out


def _expand_aliases(toks: list[str], aliases: dict[str, tuple[str, ...]]) -> list[str]:
    """Replace alias names by their definitions (recursively, bounded). A typedef of a pointer
    brings its `*`; `const` (anywhere) stays a qualifier word."""
    for _ in range(MAX_ALIAS_DEPTH):
        if not any(t in aliases for t in toks):
            break
        out: list[str] = []
        for k, t in enumerate(toks):
            # the last identifier after a type is the parameter's name: never expand it
            is_name = k == len(toks) - 1 and k > 0 and toks[k - 1] != "::" and t not in ("*", "&") \
                and any(x not in _QUALIFIERS and x not in ("*", "&") for x in toks[:k])
            out.extend(aliases[t] if t in aliases and not is_name else (t,))
        toks = out
        if len(toks) > MAX_ALIAS_TOKENS:  # nested aliases can grow exponentially
            break
    return toks


def parse_param(text: str, index: int, aliases: dict[str, tuple[str, ...]] | None = None) -> KernelParam:
    """One C parameter, e.g. `const float* __restrict__ x` -> KernelParam(name='x', pointer=True, ...).
    `aliases` (from `find_type_aliases`) resolves typedef / using names to their C types."""
    text = text.split("=")[0].strip()  # default arguments
    array = False
    t = text.rstrip()
    if t.endswith("]"):  # `name[...]`: the first '[' after the previous ']' (no regex backtracking)
        k = t.find("[", t.rfind("]", 0, len(t) - 1) + 1, len(t) - 1)
        if k >= 0:
            array, text = True, text[:k]
    toks = _TOKEN_RE.findall(text)
    if aliases:
        toks = _expand_aliases(toks, aliases)
    stars = toks.count("*") + (1 if array else 0)
    const = "const" in toks
    words = [t for t in toks if t not in ("*", "&")]
    type_words = [w for w in words if w not in _QUALIFIERS]
    name = ""
    if len(type_words) >= 2 and toks[-1] not in ("*", "&") and type_words[-1] not in _C_TYPE_WORDS:
        name = type_words.pop()  # the last word is the parameter name
    base = " ".join(type_words)
    base = _BASE_ALIASES.get(base, base)
    if name:
        idx = len(toks) - 1 - toks[::-1].index(name)
        ctype_toks = toks[:idx] + toks[idx + 1:]
    else:
        ctype_toks = toks
    ctype = " ".join(ctype_toks).replace(" *", "*")
    if array:
        ctype += "*"
    return KernelParam(name=name or f"arg{index}", ctype=ctype, base_type=base, pointer=stars > 0,
                       const=const)


_GLOBAL_RE = re.compile(r"\b__global__\b")
_WORD_RE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)")
_NAME_PAREN_RE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(")


@functools.lru_cache(maxsize=8)
def _scan(src: str) -> tuple[dict[str, KernelSignature], list[str]]:
    blanked = strip_comments_and_strings(src)
    clean = _strip_preprocessor(blanked)
    aliases = find_type_aliases(clean, blanked)
    regions = _extern_c_regions(clean)
    cov = _coverage(len(clean), regions) if regions else None
    parens = _paren_matches(clean)
    found: dict[str, KernelSignature] = {}
    hidden: list[str] = []
    for m in _GLOBAL_RE.finditer(clean):
        before = clean[max(0, m.start() - 200):m.start()]
        direct = re.search(r'extern\s+"C"\s*(?:(?:static|inline|__forceinline__)\s+)*$', before) is not None
        in_block = cov is not None and cov[m.start()] > 0
        templated = re.search(r"template\s*<[^;{}]*>\s*$", before) is not None
        # qualifiers between __global__ and the name: void, __launch_bounds__(...), modifiers
        # (matched in place with `pos`: slicing the rest of the text per kernel was quadratic)
        pos = m.end()
        saw_void = False
        for _ in range(64):
            mm = _WORD_RE.match(clean, pos)
            if not mm:
                break
            word = mm.group(1)
            if word == "__launch_bounds__":
                k = mm.end() + len(clean[mm.end():mm.end() + 256]) - len(clean[mm.end():mm.end() + 256].lstrip())
                end = parens.get(k, -1)
                if end < 0:
                    break
                pos = end
            elif word == "void" and not saw_void:
                saw_void = True
                pos = mm.end()
            elif word in _MODIFIERS:
                pos = mm.end()
            else:
                break
        mm = _NAME_PAREN_RE.match(clean, pos)
        if not saw_void or not mm:
            continue
        name = mm.group(1)
        open_at = mm.end() - 1
        close_at = parens.get(open_at, -1)
        if close_at < 0 or close_at - open_at > MAX_PARAMS_CHARS:  # nested lists would be quadratic
            continue
        params_txt = clean[open_at + 1:close_at - 1].strip()
        if not (direct or in_block) or templated:
            hidden.append(name)
            continue
        params: list[KernelParam] = []
        if params_txt and params_txt != "void":
            params = [parse_param(p, i, aliases) for i, p in enumerate(_split_top(params_txt))]
        found[name] = KernelSignature(name, tuple(params))
    return found, hidden


def find_kernels(src: str) -> dict[str, KernelSignature]:
    """Every `extern "C" __global__ void name(...)` kernel in the source, by name."""
    return dict(_scan(src)[0])


def find_hidden_kernels(src: str) -> list[str]:
    """Names of `__global__` kernels that are not extern "C" (mangled, not launchable)."""
    found, hidden = _scan(src)
    return [h for h in hidden if h not in found]
