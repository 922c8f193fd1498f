"""Programmatic source transformations of a known-good submission (issue 7, part 1).

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
from typing import Callable

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
    return list(rx.finditer(src))


def _replace_at(src: str, m: re.Match, new: str, group: int = 0) -> str:
    return src[:m.start(group)] + new + src[m.end(group):]


def _pick(rng: random.Random, items: list):
    return items[rng.randrange(len(items))] if items else None


# ---- rewrites meant to keep the kernel correct ------------------------------------------------
_LAUNCH_RE = re.compile(r"<<<(.*?)>>>")
_INT_RE = re.compile(r"(?<![\w.])(32|64|128|256|512|1024)(?![\w.])")


def block_size(text: str, rng: random.Random) -> str | None:
    """Change the 1-D thread-block size everywhere it appears in the launch block (grid cdiv and
    block argument alike), when the cuda code never mentions that number (no hard-coded size)."""
    cuda, launch = split_blocks(text)
    launches = _sites(_LAUNCH_RE, launch)
    sizes = set()
    for m in launches:
        parts = [p.strip() for p in _split_top(m.group(1))]
        if len(parts) >= 2 and parts[1].isdigit():
            sizes.add(int(parts[1]))
    sizes = sorted(s for s in sizes if not re.search(rf"(?<![\w.]){s}(?![\w.])", cuda))
    old = _pick(rng, sizes)
    if old is None:
        return None
    new = _pick(rng, [b for b in (64, 128, 256, 512, 1024) if b != old])
    return join_blocks(cuda, re.sub(rf"(?<![\w.]){old}(?![\w.])", str(new), launch))


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


_GRID_CAP_RE = re.compile(r"min\(\s*(cdiv\([^()]*\))\s*,\s*(\d+)\s*\)")


def grid_cap(text: str, rng: random.Random) -> str | None:
    """Change the cap of a capped grid (`min(cdiv(N, B), CAP)`) of a grid-stride kernel."""
    cuda, launch = split_blocks(text)
    m = _pick(rng, _sites(_GRID_CAP_RE, launch))
    if m is None:
        return None
    new = _pick(rng, [c for c in (64, 256, 1024, 4096, 65535) if c != int(m.group(2))])
    return join_blocks(cuda, _replace_at(launch, m, str(new), 2))


_GRID_STRIDE_RE = re.compile(
    r"int (\w+) = blockDim\.x \* gridDim\.x;\s*\n(\s*)for \(int (\w+) = (blockIdx\.x \* blockDim\.x \+ "
    r"threadIdx\.x); \3 < (\w+); \3 \+= \1\) \{")


def one_per_thread(text: str, rng: random.Random) -> str | None:
    """Grid-stride loop -> one element per thread (`if (i < n) {...}`), grid uncapped to cdiv."""
    cuda, launch = split_blocks(text)
    m = _GRID_STRIDE_RE.search(cuda)
    if m is None:
        return None
    stride, ind, i, start, n = m.groups()
    cuda = _replace_at(cuda, m, f"int {i} = {start};\n{ind}if ({i} < {n}) {{")
    return join_blocks(cuda, _GRID_CAP_RE.sub(lambda g: g.group(1), launch))


_ONE_PER_THREAD_RE = re.compile(
    r"int (\w+) = blockIdx\.x \* blockDim\.x \+ threadIdx\.x;\s*\n(\s*)if \(\1 < ([\w* ]+)\) \{")


def grid_stride(text: str, rng: random.Random) -> str | None:
    """One-element-per-thread `if (i < n) {` -> a grid-stride loop over a capped grid."""
    cuda, launch = split_blocks(text)
    m = _ONE_PER_THREAD_RE.search(cuda)
    if m is None:
        return None
    i, ind, n = m.groups()
    cuda = _replace_at(cuda, m, f"for (int {i} = blockIdx.x * blockDim.x + threadIdx.x; {i} < {n}; "
                                f"{i} += blockDim.x * gridDim.x) {{")
    cap = _pick(rng, [128, 1024, 8192])
    launch = re.sub(r"<<<(cdiv\([^()]*\))", lambda g: f"<<<min({g.group(1)}, {cap})", launch, count=1)
    return join_blocks(cuda, launch)


_FOR_RE = re.compile(r"(?m)^(\s*)for \(")


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


def vectorize4(text: str, rng: random.Random) -> str | None:
    """An element-wise grid-stride kernel `y[i] = f(x[i])` -> float4 loads/stores plus a scalar tail.
    Only for the plain one-input float signature (alignment of cudaMalloc'd buffers makes it safe)."""
    cuda, launch = split_blocks(text)
    m = _ELEMENTWISE_RE.search(cuda)
    if m is None:
        return None
    name, x, y, n, stride, i, body = m.groups()
    lines = [ln.strip() for ln in body.strip().splitlines()]
    if not lines or not lines[0].startswith(f"float ") or f"{x}[{i}]" not in lines[0] \
            or not lines[-1].startswith(f"{y}[{i}] ="):
        return None
    var = lines[0].split()[1]
    res = lines[-1].split("=", 1)[1].strip().rstrip(";")
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


_COMMENT_RE = re.compile(r"[ \t]*//[^\n]*")


def strip_comments(text: str, rng: random.Random) -> str | None:
    """Remove `//` comments from the cuda block (a harmless rewrite that changes the surface form)."""
    cuda, launch = split_blocks(text)
    if "//" not in cuda:
        return None
    return join_blocks(_COMMENT_RE.sub("", cuda), launch)


def rename_kernel(text: str, rng: random.Random) -> str | None:
    """Rename one `extern "C" __global__` kernel in both blocks."""
    cuda, launch = split_blocks(text)
    names = re.findall(r"__global__\s+void\s+(\w+)\s*\(", cuda)
    old = _pick(rng, names)
    if old is None:
        return None
    new = old + _pick(rng, ["_v2", "_fast", "_impl", "_k"])
    rx = re.compile(rf"\b{old}\b")
    return join_blocks(rx.sub(new, cuda), rx.sub(new, launch))


# ---- realistic bugs ---------------------------------------------------------------------------
_BOUND_RE = re.compile(r"\b(\w+) (<) ([A-Za-z_][\w]*(?: \* [A-Za-z_]\w*)?)(?=[;)\s])")


def off_by_one_bound(text: str, rng: random.Random) -> str | None:
    """`i < n` -> `i <= n` in one bounds check or loop condition."""
    cuda, launch = split_blocks(text)
    m = _pick(rng, _sites(_BOUND_RE, cuda))
    if m is None:
        return None
    return join_blocks(_replace_at(cuda, m, "<=", 2), launch)


_EARLY_RE = re.compile(r"if \((\w+) (>=) ")


def early_return_bound(text: str, rng: random.Random) -> str | None:
    """`if (i >= n) return;` -> `if (i > n) return;`."""
    cuda, launch = split_blocks(text)
    m = _pick(rng, _sites(_EARLY_RE, cuda))
    if m is None:
        return None
    return join_blocks(_replace_at(cuda, m, ">", 2), launch)


_SYNC_RE = re.compile(r"[ \t]*__syncthreads\(\);[^\n]*\n")


def drop_sync(text: str, rng: random.Random) -> str | None:
    """Delete one `__syncthreads();` (a missing barrier: a race on shared memory)."""
    cuda, launch = split_blocks(text)
    m = _pick(rng, _sites(_SYNC_RE, cuda))
    if m is None:
        return None
    return join_blocks(_replace_at(cuda, m, ""), launch)


_INDEX_RE = re.compile(r"blockIdx\.x \* blockDim\.x \+ threadIdx\.x")


def wrong_index(text: str, rng: random.Random) -> str | None:
    """Break the global thread index (drop the block offset, or multiply by the wrong extent)."""
    cuda, launch = split_blocks(text)
    m = _pick(rng, _sites(_INDEX_RE, cuda))
    if m is None:
        return None
    new = _pick(rng, ["threadIdx.x", "blockIdx.x * gridDim.x + threadIdx.x", "blockIdx.x + threadIdx.x"])
    return join_blocks(_replace_at(cuda, m, new), launch)


_OPS = [(r"(?<=\w|\)) \+ (?=\w|\()", [" - ", " * "]), (r"(?<=\w|\)) - (?=\w|\()", [" + "]),
        (r"(?<=\w|\)) \* (?=\w|\()", [" + ", " / "]), (r"\bfmaxf\b", ["fminf"]), (r"\bfminf\b", ["fmaxf"]),
        (r"\bexpf\b", ["logf", "exp2f"]), (r"\btanhf\b", ["sinhf"]), (r"\b1\.0f\b", ["2.0f", "0.0f"]),
        (r"\b0\.5f\b", ["0.25f"]), (r"\brsqrtf\b", ["sqrtf"])]


def wrong_operator(text: str, rng: random.Random) -> str | None:
    """Change one operator or math function in the cuda code's statements (a wrong formula).
    Lines with `#`, `for (` headers and comments are left alone."""
    cuda, launch = split_blocks(text)
    sites = []
    for pat, repl in _OPS:
        for m in re.finditer(pat, cuda):
            line_start = cuda.rfind("\n", 0, m.start()) + 1
            line = cuda[line_start:cuda.find("\n", m.start()) if "\n" in cuda[m.start():] else len(cuda)]
            if line.lstrip().startswith(("#", "//")) or "//" in cuda[line_start:m.start()]:
                continue
            sites.append((m, repl))
    site = _pick(rng, sites)
    if site is None:
        return None
    m, repl = site
    return join_blocks(_replace_at(cuda, m, _pick(rng, repl)), launch)


_SEMI_RE = re.compile(r";(?=[ \t]*(?://[^\n]*)?\n)")


def drop_semicolon(text: str, rng: random.Random) -> str | None:
    """Delete one statement-ending `;` in the cuda code (a typo that does not compile)."""
    cuda, launch = split_blocks(text)
    m = _pick(rng, _sites(_SEMI_RE, cuda))
    if m is None:
        return None
    return join_blocks(_replace_at(cuda, m, ""), launch)


_DECL_RE = re.compile(r"\b(?:int|float|size_t|const float\*|float\*)\s+(\w+)\s*=")


def typo_identifier(text: str, rng: random.Random) -> str | None:
    """Misspell one use of a local variable (an undeclared identifier)."""
    cuda, launch = split_blocks(text)
    names = sorted(set(_DECL_RE.findall(cuda)))
    name = _pick(rng, [n for n in names if len(n) >= 1])
    if name is None:
        return None
    uses = [m for m in re.finditer(rf"\b{name}\b", cuda)
            if not re.search(r"(?:int|float|size_t|\*)\s*$", cuda[max(0, m.start() - 12):m.start()])]
    m = _pick(rng, uses)
    if m is None:
        return None
    typo = name + "_" if len(name) == 1 else name[:-1] + name[-1].upper() if name[-1].islower() else name + "1"
    return join_blocks(_replace_at(cuda, m, typo), launch)


def launch_block_mismatch(text: str, rng: random.Random) -> str | None:
    """Halve the block size in the launch's block argument only (the grid still assumes the old one):
    a classic host-side bug that leaves part of the output unwritten."""
    cuda, launch = split_blocks(text)
    for m in _sites(_LAUNCH_RE, launch):
        parts = _split_top(m.group(1))
        if len(parts) >= 2 and parts[1].strip().isdigit() and int(parts[1]) >= 64:
            parts[1] = " " + str(int(parts[1]) // 2)
            return join_blocks(cuda, _replace_at(launch, m, ",".join(parts), 1))
    return None


def floor_grid(text: str, rng: random.Random) -> str | None:
    """`cdiv(N, B)` -> `N / B` in the launch (the tail block is lost when N % B != 0)."""
    cuda, launch = split_blocks(text)
    m = _pick(rng, _sites(re.compile(r"cdiv\(([^(),]+), ([^(),]+)\)"), launch))
    if m is None:
        return None
    return join_blocks(cuda, _replace_at(launch, m, f"({m.group(1)}) / ({m.group(2)})"))


def misnamed_launch(text: str, rng: random.Random) -> str | None:
    """The launch names a kernel that the cuda block does not define (a format error)."""
    cuda, launch = split_blocks(text)
    m = _pick(rng, _sites(re.compile(r"^\s*(\w+)<<<", re.M), launch))
    if m is None:
        return None
    return join_blocks(cuda, _replace_at(launch, m, m.group(1) + "_kernel2", 1))


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
    pool = [MUTATIONS_BY_NAME[n] for n in names] if names else list(MUTATIONS)
    for n in names or []:
        if n not in MUTATIONS_BY_NAME:
            raise KeyError(f"unknown mutation {n!r}; expected one of {sorted(MUTATIONS_BY_NAME)}")
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
