"""The grammar of generated tasks: which op compositions exist, and their names.

A task is a chain applied to x[m, n]: a prefix of element-wise ops (unary ops, and at most one binary
op whose second operand `v` is broadcast as a row b[N], a column [M], a full [M, N] tensor or the
scalar `c`), then optionally one row op (a last-axis reduction or a row normalisation), then
optionally one unary op on its result. Families:

    ew    1-3 element-wise ops, no row op                     gen_ew_tanh_add_row_f32_s1
    red   [one unary] + reduction                             gen_red_sq_rsum_f32_s0
    norm  normalisation + [one unary]                         gen_norm_rms_silu_f16_s2
    fu    any other chain of 2-4 ops ending in / around a row op (KernelBench level 2 style)
                                                              gen_fu_add_col_relu_softmax_f32_s0

Chains whose output hardly depends on their inputs (a constant, a cancelling operand, a saturated
op) are left out: degenerate.py lists the rules.

The family is versioned (`FAMILY_VERSIONS`, oldest first): "v1" has every well-formed chain (the
headline of docs/results/headline/2026-12-04_h200 drew from it), "v2" (2026-12-05) leaves the degenerate
ones out. A version fixes which chains exist, hence every seeded ordering and split; a run records
the version it drew from (tasks.generated_version), so an older page can be re-run at a newer tree.

A name is `gen_<family>_<op tokens>_<dtype>_s<shape id>`, a binary op token followed by its
broadcast token; names use only [a-z0-9_] and fully determine the task.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from functools import lru_cache

from kernels_env.tasks.generated.degenerate import degenerate_reason
from kernels_env.tasks.generated.ops import BCAST, BINARY, DTYPES, F16_REDUCE, NORM, REDUCE, ROWOPS, SHAPES, UNARY

FAMILIES = ("ew", "red", "norm", "fu")
FAMILY_VERSIONS = ("v1", "v2")  # oldest first; the last is the default (not dates: YAML reads those as dates)
CURRENT_FAMILY_VERSION = FAMILY_VERSIONS[-1]
_DEGENERATE_LEFT_OUT_SINCE = "v2"


def check_version(version: str) -> str:
    """`version` itself when it names a family version; a ValueError listing them otherwise."""
    if version not in FAMILY_VERSIONS:
        raise ValueError(f"generated family version {version!r}: expected one of {FAMILY_VERSIONS}")
    return version


def leaves_out_degenerate(version: str) -> bool:
    """Whether `version` of the family leaves degenerate chains out (degenerate.py)."""
    return FAMILY_VERSIONS.index(check_version(version)) >= FAMILY_VERSIONS.index(_DEGENERATE_LEFT_OUT_SINCE)


@dataclass(frozen=True)
class Spec:
    family: str
    pre: tuple[str, ...]  # element-wise op tokens, in application order
    bcast: str | None  # broadcast mode of the (single) binary op in `pre`
    row: str | None  # reduction / normalisation token
    post: tuple[str, ...]  # unary op tokens applied to the row op's result
    dtype: str  # "f32" | "f16"
    shape: int

    @property
    def ops(self) -> tuple[str, ...]:
        """The op sequence (broadcast left out): what the composition split looks at."""
        return self.pre + ((self.row,) if self.row else ()) + self.post

    @property
    def binary(self) -> str | None:
        return next((o for o in self.pre if o in BINARY), None)

    @property
    def name(self) -> str:
        cached = self.__dict__.get("_name")
        if cached is not None:
            return cached
        toks = ["gen", self.family]
        for o in self.pre:
            toks.append(o)
            if o in BINARY:
                toks.append(str(self.bcast))
        toks += ([self.row] if self.row else []) + list(self.post) + [self.dtype, f"s{self.shape}"]
        name = "_".join(toks)
        object.__setattr__(self, "_name", name)
        return name


def family_of(pre: tuple[str, ...], row: str | None, post: tuple[str, ...]) -> str | None:
    """The family of a chain, or None when the chain is not in the grammar."""
    if row is None:
        return "ew" if 1 <= len(pre) <= 3 and not post else None
    if row in REDUCE and not post and len(pre) <= 1 and all(o in UNARY for o in pre):
        return "red"
    if row in NORM and not pre and len(post) <= 1:
        return "norm"
    n = len(pre) + 1 + len(post)
    if len(post) > 1 or not 2 <= n <= 4:
        return None
    if not pre:
        return "fu" if row in REDUCE else None  # g(reduce(x)); norm + post is family norm
    if len(pre) > 2 or (len(pre) == 2 and post):
        return None
    return "fu"


def valid(spec: Spec, version: str = CURRENT_FAMILY_VERSION) -> bool:
    """Whether `spec` is in `version` of the grammar (names of invalid specs are rejected, never built)."""
    return _well_formed(spec) and not (leaves_out_degenerate(version) and degenerate_reason(spec) is not None)


def _well_formed(spec: Spec) -> bool:
    """`valid` without the degeneracy rules: tokens, family, op order and dtype limits."""
    if spec.dtype not in DTYPES or spec.shape not in SHAPES:
        return False
    if any(o not in UNARY and o not in BINARY for o in spec.pre):
        return False
    if any(o not in UNARY for o in spec.post) or (spec.row is not None and spec.row not in ROWOPS):
        return False
    nbin = sum(o in BINARY for o in spec.pre)
    if nbin > 1 or (nbin == 1) != (spec.bcast is not None) or (spec.bcast is not None and spec.bcast not in BCAST):
        return False
    if family_of(spec.pre, spec.row, spec.post) != spec.family:
        return False
    if any(a == b for a, b in zip(spec.pre, spec.pre[1:], strict=False)):
        return False  # relu(relu(.)), neg(neg(.)): no adjacent repeats
    if spec.dtype == "f16":
        if spec.ops.count("sq") > 1:
            return False  # keeps every finite result inside the half range
        if spec.row in REDUCE and spec.row not in F16_REDUCE:
            return False
    return True


def _prefixes(max_len: int) -> list[tuple[tuple[str, ...], str | None]]:
    ops = list(UNARY) + list(BINARY)
    out: list[tuple[tuple[str, ...], str | None]] = [((), None)]
    for k in range(1, max_len + 1):
        for combo in itertools.product(ops, repeat=k):
            nbin = sum(o in BINARY for o in combo)
            if nbin == 0:
                out.append((combo, None))
            elif nbin == 1:
                out.extend((combo, b) for b in BCAST)
    return out


@lru_cache(maxsize=len(FAMILY_VERSIONS))
def all_specs(version: str = CURRENT_FAMILY_VERSION) -> tuple[Spec, ...]:
    """Every spec of `version` of the grammar, in a fixed (sorted-by-name) order."""
    specs = []
    posts = [()] + [(u,) for u in UNARY]
    for pre, bcast in _prefixes(3):
        if any(a == b for a, b in zip(pre, pre[1:], strict=False)):
            continue
        for row in (None,) + ROWOPS:
            if row is not None and len(pre) > 2:
                continue
            for post in posts:
                fam = family_of(pre, row, post)
                if fam is None:
                    continue
                for dtype in DTYPES:
                    if not valid(Spec(fam, pre, bcast, row, post, dtype, 0), version):
                        continue  # validity does not depend on the shape id
                    for shape in SHAPES:
                        s = Spec(fam, pre, bcast, row, post, dtype, shape)
                        specs.append((s.name, s))
    specs.sort(key=lambda p: p[0])
    return tuple(s for _, s in specs)


_NAME_RE = re.compile(r"^gen_[a-z0-9_]+_s[0-9]+$")


def parse_name(name: str, version: str | None = CURRENT_FAMILY_VERSION) -> Spec:
    """The spec a generated name denotes in `version` of the family (None: in any version, so a task
    of an earlier version can still be built by name); ValueError (saying why) when it is not one."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(f"{name!r} is not a generated task name (gen_<family>_<ops>_<f32|f16>_s<k>)")
    toks = name.split("_")
    family, body, dtype, shape_tok = toks[1], toks[2:-2], toks[-2], toks[-1]
    if family not in FAMILIES:
        raise ValueError(f"{name!r}: unknown family {family!r}; expected one of {FAMILIES}")
    pre: list[str] = []
    bcast = row = None
    post: list[str] = []
    i = 0
    while i < len(body):
        t = body[i]
        if t in ROWOPS:
            if row is not None:
                raise ValueError(f"{name!r}: more than one row op")
            row = t
        elif t in BINARY:
            if row is not None or i + 1 >= len(body) or body[i + 1] not in BCAST:
                raise ValueError(f"{name!r}: binary op {t!r} must precede the row op and be followed by "
                                 f"a broadcast mode in {tuple(BCAST)}")
            pre.append(t)
            bcast = body[i + 1]
            i += 1
        elif t in UNARY:
            (post if row is not None else pre).append(t)
        else:
            raise ValueError(f"{name!r}: unknown op token {t!r}")
        i += 1
    spec = Spec(family, tuple(pre), bcast, row, tuple(post), dtype, int(shape_tok[1:]))
    if not _well_formed(spec) or spec.name != name:
        raise ValueError(f"{name!r} is not in the generated task grammar (family, op order, dtype "
                         f"{tuple(DTYPES)} or shape id {tuple(SHAPES)})")
    why = degenerate_reason(spec)
    versions = FAMILY_VERSIONS if version is None else (version,)
    if why is not None and all(leaves_out_degenerate(v) for v in versions):
        raise ValueError(f"{name!r} is left out of the generated task grammar: {why} (family version "
                         f"{version}; version {FAMILY_VERSIONS[0]} has it)")
    return spec
