"""Programmatic source transformations of a known-good submission.

Each mutation takes the submission text (Markdown with one ```cuda and one ```launch block) and a
`random.Random`, and returns a transformed text or None when it does not apply (no site to change).
A mutation has an *intent* ("correct" for rewrites meant to keep the kernel right, "wrong" for
realistic bugs), but the intent is only a hint: the corpus scores every variant and records the
measured status, never the intent. All choices come from the given rng, so a seed fixes the corpus.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from collections.abc import Callable

_COMMENT_RE = re.compile(r"//[^\n]*")
_BLOCK_RE = {kind: re.compile(r"```" + kind + r"[ \t]*\n(.*?)```", re.S) for kind in ("cuda", "launch")}


class SubmissionShapeError(ValueError):
    """The text lacks the ```cuda / ```launch block a mutation needs."""


def split_blocks(text: str) -> tuple[str, str]:
    """(cuda source, launch source) of the LAST block of each kind (as the environment reads them)."""
    out = []
    for kind, rx in _BLOCK_RE.items():
        found = list(rx.finditer(text))
        if not found:
            raise SubmissionShapeError(f"submission has no ```{kind} block; expected Markdown with a "
                                       "```cuda and a ```launch block")
        out.append(found[-1].group(1))
    return out[0], out[1]


def join_blocks(cuda: str, launch: str) -> str:
    """The canonical Markdown submission of a cuda and a launch source."""
    return f"```cuda\n{cuda.rstrip()}\n```\n\n```launch\n{launch.rstrip()}\n```\n"


def _sites(rx: re.Pattern, src: str) -> list[re.Match]:
    """Matches of `rx` in `src` that do not start inside a `//` comment (edits there change nothing)."""
    spans = [c.span() for c in _COMMENT_RE.finditer(src)]
    return [m for m in rx.finditer(src) if not any(a <= m.start() < b for a, b in spans)]


def _replace_at(src: str, m: re.Match, new: str, group: int = 0) -> str:
    return src[:m.start(group)] + new + src[m.end(group):]


def _replace_cuda(text: str, m: re.Match, new: str) -> str:
    """`text` with match `m` of its cuda block replaced by `new`."""
    cuda, launch = split_blocks(text)
    return join_blocks(_replace_at(cuda, m, new), launch)


def _pick(rng: random.Random, items: list):
    return items[rng.randrange(len(items))] if items else None


Replacement = str | list[str] | Callable[[re.Match, random.Random], str]


def _edit_one(text: str, rng: random.Random, rx: re.Pattern, new: Replacement, group: int = 0,
              block: str = "cuda") -> str | None:
    """The shared shape of most mutations: pick one site of `rx` (outside comments) in the cuda or
    launch block and replace its `group` by `new` (a string, a random choice of strings, or a
    function of the match). None when there is no site."""
    cuda, launch = split_blocks(text)
    src = cuda if block == "cuda" else launch
    m = _pick(rng, _sites(rx, src))
    if m is None:
        return None
    rep = new(m, rng) if callable(new) else new if isinstance(new, str) else _pick(rng, new)
    src = _replace_at(src, m, rep, group)
    return join_blocks(src, launch) if block == "cuda" else join_blocks(cuda, src)


# ---- rewrites meant to keep the kernel correct ------------------------------------------------
_LAUNCH_RE = re.compile(r"<<<(.*?)>>>")


def _number_re(n: int | str) -> re.Pattern:
    """A whole numeric literal `n` (not part of a name or of a longer number)."""
    return re.compile(rf"(?<![\w.]){n}(?![\w.])")


def _split_top(s: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return out


def _block_args(launch: str) -> list[tuple[re.Match, list[str]]]:
    """Each launch's `<<<...>>>` match with its top-level config arguments (grid, block[, shared])."""
    return [(m, _split_top(m.group(1))) for m in _sites(_LAUNCH_RE, launch)]


def block_size(text: str, rng: random.Random) -> str | None:
    """Change the 1-D thread-block size everywhere it appears in the launch block (grid cdiv and
    block argument alike), when the cuda code never mentions that number (no hard-coded size)."""
    cuda, launch = split_blocks(text)
    sizes = {int(a[1]) for _, a in _block_args(launch) if len(a) >= 2 and a[1].strip().isdigit()}
    old = _pick(rng, sorted(s for s in sizes if not _number_re(s).search(cuda)))
    if old is None:
        return None
    new = _pick(rng, [b for b in (64, 128, 256, 512, 1024) if b != old])
    return join_blocks(cuda, _number_re(old).sub(str(new), launch))


_GRID_CAP_RE = re.compile(r"min\(\s*(cdiv\([^()]*\))\s*,\s*(\d+)\s*\)")


def grid_cap(text: str, rng: random.Random) -> str | None:
    """Change the cap of a capped grid (`min(cdiv(N, B), CAP)`) of a grid-stride kernel."""
    return _edit_one(text, rng, _GRID_CAP_RE, group=2, block="launch",
                     new=lambda m, r: str(_pick(r, [c for c in (64, 256, 1024, 4096, 65535)
                                                    if c != int(m.group(2))])))


_GRID_STRIDE_RE = re.compile(
    r"int (\w+) = blockDim\.x \* gridDim\.x;[ \t]*\n([ \t]*)for \(int (\w+) = (blockIdx\.x \* blockDim\.x \+ "
    r"threadIdx\.x); \3 < (\w+); \3 \+= \1\) \{")


def one_per_thread(text: str, rng: random.Random) -> str | None:
    """Grid-stride loop -> one element per thread (`if (i < n) {...}`), grid uncapped to cdiv.
    Not applied when the stride variable is used anywhere else (its declaration goes away)."""
    cuda, launch = split_blocks(text)
    m = _GRID_STRIDE_RE.search(cuda)
    if m is None:
        return None
    stride, ind, i, start, n = m.groups()
    cuda = _replace_at(cuda, m, f"int {i} = {start};\n{ind}if ({i} < {n}) {{")
    if _sites(re.compile(rf"\b{stride}\b"), cuda):
        return None
    return join_blocks(cuda, _GRID_CAP_RE.sub(lambda g: g.group(1), launch))


_ONE_PER_THREAD_RE = re.compile(
    r"int (\w+) = blockIdx\.x \* blockDim\.x \+ threadIdx\.x;[ \t]*\n([ \t]*)if \(\1 < ([\w* ]+)\) \{")


def grid_stride(text: str, rng: random.Random) -> str | None:
    """One-element-per-thread `if (i < n) {` -> a grid-stride loop over a capped grid (the inverse
    of `one_per_thread`; the suite writes grid-stride loops, so it applies to rewritten variants)."""
    cuda, launch = split_blocks(text)
    m = _ONE_PER_THREAD_RE.search(cuda)
    if m is None or "<<<cdiv(" not in launch:
        return None
    i, ind, n = m.groups()
    cuda = _replace_at(cuda, m, f"for (int {i} = blockIdx.x * blockDim.x + threadIdx.x; {i} < {n}; "
                                f"{i} += blockDim.x * gridDim.x) {{")
    cap = _pick(rng, [128, 1024, 8192])
    launch = re.sub(r"<<<(cdiv\([^()]*\))", lambda g: f"<<<min({g.group(1)}, {cap})", launch, count=1)
    return join_blocks(cuda, launch)


_FOR_RE = re.compile(r"(?m)^([ \t]*)for \(")


def unroll(text: str, rng: random.Random) -> str | None:
    """Put `#pragma unroll N` in front of one loop that has none."""
    cuda, launch = split_blocks(text)
    sites = [m for m in _sites(_FOR_RE, cuda) if "#pragma" not in cuda[max(0, m.start() - 40):m.start()]]
    m = _pick(rng, sites)
    if m is None:
        return None
    n = _pick(rng, [2, 4, 8])
    return join_blocks(_replace_at(cuda, m, f"{m.group(1)}#pragma unroll {n}\n{m.group(1)}for ("), launch)


_ELEMENTWISE_RE = re.compile(
    r"extern \"C\" __global__ void (\w+)\(const float\* __restrict__ (\w+), float\* __restrict__ (\w+), "
    r"int (\w+)\) \{\s*\n\s*int (\w+) = blockDim\.x \* gridDim\.x;\s*\n\s*for \(int (\w+) = blockIdx\.x "
    r"\* blockDim\.x \+ threadIdx\.x; \6 < \4; \6 \+= \5\) \{\s*\n(.*?)\n\s*\}\s*\n\}", re.S)
_VEC_NAMES = ("n4", "q", "in4", "o")  # locals the float4 rewrite introduces


def vectorize4(text: str, rng: random.Random) -> str | None:
    """An element-wise grid-stride kernel `y[i] = f(x[i])` -> float4 loads/stores plus a scalar tail.
    Only for the plain one-input float signature (alignment of cudaMalloc'd buffers makes it safe)
    and a body whose middle lines use neither the index nor the names the rewrite introduces."""
    cuda, launch = split_blocks(text)
    m = _ELEMENTWISE_RE.search(cuda)
    if m is None:
        return None
    name, x, y, n, stride, i, body = m.groups()
    lines = [ln.strip() for ln in body.strip().splitlines()]
    if len(lines) < 2 or not lines[0].startswith("float ") or f"{x}[{i}]" not in lines[0] \
            or not lines[-1].startswith(f"{y}[{i}] ="):
        return None
    var = lines[0].split()[1]
    res = lines[-1].split("=", 1)[1].strip().rstrip(";")
    middle_and_res = "\n".join(lines[1:-1] + [res])
    if any(re.search(rf"\b{w}\b", middle_and_res) for w in (i, x, y, *_VEC_NAMES)) \
            or any(re.search(rf"\b{w}\b", body) for w in _VEC_NAMES):
        return None
    middle = "".join(f"            {ln}\n" for ln in lines[1:-1])
    lanes = "".join(f"        {{\n            float {var} = in4.{c};\n{middle}            o.{c} = {res};\n        }}\n"
                    for c in "xyzw")
    new = (f"extern \"C\" __global__ void {name}(const float* __restrict__ {x}, float* __restrict__ {y}, "
           f"int {n}) {{\n    int {stride} = blockDim.x * gridDim.x;\n    int n4 = {n} / 4;\n"
           f"    const float4* {x}v = reinterpret_cast<const float4*>({x});\n"
           f"    float4* {y}v = reinterpret_cast<float4*>({y});\n"
           f"    for (int q = blockIdx.x * blockDim.x + threadIdx.x; q < n4; q += {stride}) {{\n"
           f"        float4 in4 = {x}v[q];\n        float4 o;\n{lanes}        {y}v[q] = o;\n    }}\n"
           f"    for (int {i} = 4 * n4 + blockIdx.x * blockDim.x + threadIdx.x; {i} < {n}; {i} += {stride}) {{\n"
           f"{body}\n    }}\n}}")
    return join_blocks(_replace_at(cuda, m, new), launch)


def strip_comments(text: str, rng: random.Random) -> str | None:
    """Remove `//` comments from the cuda block (a harmless rewrite that changes the surface form):
    comment-only lines go entirely, trailing comments with the blanks before them."""
    cuda, launch = split_blocks(text)
    if "//" not in cuda:
        return None
    cuda = re.sub(r"(?m)^[ \t]*//[^\n]*\n?", "", cuda)
    return join_blocks(re.sub(r"[ \t]*//[^\n]*", "", cuda), launch)


def rename_kernel(text: str, rng: random.Random) -> str | None:
    """Rename one `extern "C" __global__` kernel in both blocks (to a name not used yet)."""
    cuda, launch = split_blocks(text)
    old = _pick(rng, re.findall(r"__global__\s+void\s+(\w+)\s*\(", cuda))
    if old is None:
        return None
    new = old + _pick(rng, ["_v2", "_fast", "_impl", "_k"])
    rx = re.compile(rf"\b{old}\b")
    if re.search(rf"\b{new}\b", cuda + launch):
        return None
    return join_blocks(rx.sub(new, cuda), rx.sub(new, launch))


# ---- realistic bugs ---------------------------------------------------------------------------
_BOUND_RE = re.compile(r"\b(\w+) (<) ([A-Za-z_]\w*(?: \* [A-Za-z_]\w*)?)(?=[;)\s])")


def off_by_one_bound(text: str, rng: random.Random) -> str | None:
    """`i < n` -> `i <= n` in one bounds check or loop condition."""
    return _edit_one(text, rng, _BOUND_RE, "<=", group=2)


def early_return_bound(text: str, rng: random.Random) -> str | None:
    """`if (i >= n) return;` -> `if (i > n) return;`."""
    return _edit_one(text, rng, re.compile(r"if \((\w+) (>=) "), ">", group=2)


def drop_sync(text: str, rng: random.Random) -> str | None:
    """Delete one `__syncthreads();` (a missing barrier: a race on shared memory)."""
    return _edit_one(text, rng, re.compile(r"[ \t]*__syncthreads\(\);[^\n]*\n"), "")


def wrong_index(text: str, rng: random.Random) -> str | None:
    """Break the global thread index (drop the block offset, or multiply by the wrong extent)."""
    return _edit_one(text, rng, re.compile(r"blockIdx\.x \* blockDim\.x \+ threadIdx\.x"),
                     ["threadIdx.x", "blockIdx.x * gridDim.x + threadIdx.x", "blockIdx.x + threadIdx.x"])


_OPS = [(r"(?<=\w|\)) \+ (?=\w|\()", [" - ", " * "]), (r"(?<=\w|\)) - (?=\w|\()", [" + "]),
        (r"(?<=\w|\)) \* (?=\w|\()", [" + ", " / "]), (r"\bfmaxf\b", ["fminf"]), (r"\bfminf\b", ["fmaxf"]),
        (r"\bexpf\b", ["logf", "exp2f"]), (r"\btanhf\b", ["sinhf"]), (r"\b1\.0f\b", ["2.0f", "0.0f"]),
        (r"\b0\.5f\b", ["0.25f"]), (r"\brsqrtf\b", ["sqrtf"])]
_OPS_RE = re.compile("|".join(f"(?P<op{k}>{pat})" for k, (pat, _) in enumerate(_OPS)))
_PREPROC_RE = re.compile(r"(?m)^[ \t]*#[^\n]*")


def wrong_operator(text: str, rng: random.Random) -> str | None:
    """Change one operator or math function in the cuda code (a wrong formula). Comments and
    preprocessor lines are left alone."""
    cuda, _ = split_blocks(text)
    pre = [m.span() for m in _PREPROC_RE.finditer(cuda)]
    sites = [m for m in _sites(_OPS_RE, cuda) if not any(a <= m.start() < b for a, b in pre)]
    m = _pick(rng, sites)
    if m is None:
        return None
    return _replace_cuda(text, m, _pick(rng, _OPS[int(m.lastgroup[2:])][1]))


def drop_semicolon(text: str, rng: random.Random) -> str | None:
    """Delete one statement-ending `;` in the cuda code (a typo that does not compile)."""
    return _edit_one(text, rng, re.compile(r";(?=[ \t]*(?://[^\n]*)?\n)"), "")


_DECL_RE = re.compile(r"\b(?:int|float|size_t|const float\*|float\*)\s+(\w+)\s*=")


def typo_identifier(text: str, rng: random.Random) -> str | None:
    """Misspell one use (not the declaration) of a local variable: an undeclared identifier."""
    cuda, _ = split_blocks(text)
    name = _pick(rng, sorted(set(_DECL_RE.findall(cuda))))
    if name is None:
        return None
    typo = name + "_" if len(name) == 1 else name[:-1] + name[-1].upper() if name[-1].islower() else name + "1"
    if re.search(rf"\b{typo}\b", cuda):
        return None
    uses = [m for m in _sites(re.compile(rf"\b{name}\b"), cuda)
            if not re.search(r"(?:int|float|size_t|\*)\s*$", cuda[max(0, m.start() - 12):m.start()])]
    m = _pick(rng, uses)
    return None if m is None else _replace_cuda(text, m, typo)


def launch_block_mismatch(text: str, rng: random.Random) -> str | None:
    """Halve the block size in the launch's block argument only (the grid still assumes the old one):
    a classic host-side bug that leaves part of the output unwritten (unless the kernel strides)."""
    cuda, launch = split_blocks(text)
    sites = [(m, a) for m, a in _block_args(launch) if len(a) >= 2 and a[1].strip().isdigit()
             and int(a[1]) >= 64]
    site = _pick(rng, sites)
    if site is None:
        return None
    m, parts = site
    parts[1] = " " + str(int(parts[1]) // 2)
    return join_blocks(cuda, _replace_at(launch, m, ",".join(parts), 1))


def floor_grid(text: str, rng: random.Random) -> str | None:
    """`cdiv(N, B)` -> `N / B` in the launch (the tail block is lost when N % B != 0)."""
    return _edit_one(text, rng, re.compile(r"cdiv\(([^(),]+), ([^(),]+)\)"), block="launch",
                     new=lambda m, r: f"({m.group(1)}) / ({m.group(2)})")


def misnamed_launch(text: str, rng: random.Random) -> str | None:
    """The launch names a kernel that the cuda block does not define (a format error)."""
    return _edit_one(text, rng, re.compile(r"^[ \t]*(\w+)<<<", re.M), block="launch", group=1,
                     new=lambda m, r: m.group(1) + "_kernel2")


@dataclass(frozen=True)
class Mutation:
    name: str
    intent: str  # "correct" | "wrong": a hint; the measured status is the label
    fn: Callable[[str, random.Random], str | None]


MUTATIONS: tuple[Mutation, ...] = (
    Mutation("block_size", "correct", block_size),
    Mutation("grid_cap", "correct", grid_cap),
    Mutation("one_per_thread", "correct", one_per_thread),
    Mutation("grid_stride", "correct", grid_stride),
    Mutation("unroll", "correct", unroll),
    Mutation("vectorize4", "correct", vectorize4),
    Mutation("strip_comments", "correct", strip_comments),
    Mutation("rename_kernel", "correct", rename_kernel),
    Mutation("off_by_one_bound", "wrong", off_by_one_bound),
    Mutation("early_return_bound", "wrong", early_return_bound),
    Mutation("drop_sync", "wrong", drop_sync),
    Mutation("wrong_index", "wrong", wrong_index),
    Mutation("wrong_operator", "wrong", wrong_operator),
    Mutation("drop_semicolon", "wrong", drop_semicolon),
    Mutation("typo_identifier", "wrong", typo_identifier),
    Mutation("launch_block_mismatch", "wrong", launch_block_mismatch),
    Mutation("floor_grid", "wrong", floor_grid),
    Mutation("misnamed_launch", "wrong", misnamed_launch),
)
MUTATIONS_BY_NAME = {m.name: m for m in MUTATIONS}


def mutate(text: str, rng: random.Random, names: list[str] | None = None,
           max_chain: int = 2) -> tuple[str, list[str]] | None:
    """Apply 1..max_chain randomly chosen mutations in a row (correct rewrites may stack; at most
    one bug is added, last). Returns (new text, applied names) or None if nothing applied/changed."""
    for n in names or []:
        if n not in MUTATIONS_BY_NAME:
            raise KeyError(f"unknown mutation {n!r}; expected one of {sorted(MUTATIONS_BY_NAME)}")
    pool = [MUTATIONS_BY_NAME[n] for n in names] if names else list(MUTATIONS)
    k = rng.randint(1, max(1, max_chain))
    applied: list[str] = []
    cur = text
    good = [m for m in pool if m.intent == "correct"]
    bad = [m for m in pool if m.intent == "wrong"]
    want_bug = bool(bad) and (not good or rng.random() < 0.5)
    steps = ([rng.choice(good) for _ in range(k - 1)] if good else []) + ([rng.choice(bad)] if want_bug else
                                                                          ([rng.choice(good)] if good else []))
    for m in steps:
        out = m.fn(cur, rng)
        if out is not None and out != cur:
            cur = out
            applied.append(m.name)
    return (cur, applied) if applied else None
