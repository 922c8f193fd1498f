"""Launch language: tokenizer/parser errors with line numbers, C expression semantics, static checks."""
from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from kernels_env.source.launch import (MAX_LAUNCHES, FormatError, check_plan, eval_expr, parse_launch,
                                       render_expr)
from kernels_env.core.program import BinOp, Call, Dim3, Name, Neg, Num
from kernels_env.source.signatures import find_kernels
from kernels_env.tasks.spec import Buffer, Scalar, Task


# ---- parsing ------------------------------------------------------------------------------
def test_parse_full_plan():
    plan = parse_launch("""
        // partial sums
        scratch float partial[cdiv(N, 256)];   /* one per block */
        sum_kernel<<<cdiv(N, 256), 256, 256 * 4>>>(x, partial, N);
        finish<<<dim3(1, 2), dim3(32, 8, 1)>>>(partial, y, cdiv(N, 256), 1e-5, 0.5f, -3);
    """)
    assert len(plan.scratch) == 1 and len(plan.launches) == 2
    s = plan.scratch[0]
    assert (s.name, s.dtype, s.line) == ("partial", "float32", 3)
    assert s.count == Call("cdiv", (Name("N"), Num(256)))
    a, b = plan.launches
    assert a.kernel == "sum_kernel" and a.line == 4
    assert a.grid == Dim3(Call("cdiv", (Name("N"), Num(256))))
    assert a.block == Dim3(Num(256)) and a.shared_bytes == BinOp("*", Num(256), Num(4))
    assert a.args == (Name("x"), Name("partial"), Name("N"))
    assert b.grid == Dim3(Num(1), Num(2)) and b.block == Dim3(Num(32), Num(8), Num(1))
    assert b.shared_bytes is None
    assert b.args[3] == Num(1e-5) and isinstance(b.args[3].value, float)
    assert b.args[4] == Num(0.5) and b.args[5] == Neg(Num(3))


def test_precedence_and_associativity():
    e = parse_launch("k<<<1, 1>>>(a - b - c * d / e % f + -g);").launches[0].args[0]
    env = dict(a=100, b=7, c=9, d=5, e=2, f=4, g=3)
    # C: a - b - (((c*d)/e) % f) + (-g)
    assert eval_expr(e, env) == 100 - 7 - (((9 * 5) // 2) % 4) + (-3)


@pytest.mark.parametrize("text, fragment", [
    ("k<<<1, 1>>>(x)", "line 1: expected ';' after the launch, found end of the launch block"),
    ("k<<<1>>>(x);", "line 1: expected ',' and the block size inside <<< >>>, found '>>>'"),
    ("\n\nk<<<1, 1>>(x);", "line 3: unexpected character '>'"),
    ("k(x, y);", "line 1: k(...) is not a launch; expected `k<<<grid, block>>>(args);`"),
    ("k<<<1, 1, 0, 0>>>(x);", "stream argument is not supported"),
    ("k<<<1, 1>>>(x,);", "line 1: expected a number, a name or '(' in an expression, found ')'"),
    ("k<<<foo(2), 1>>>(x);", "line 1: unknown function 'foo'; expressions may call only cdiv, min and max"),
    ("k<<<cdiv(2), 1>>>(x);", "line 1: cdiv takes 2 arguments, got 1"),
    ("k<<<max(2), 1>>>(x);", "line 1: max takes at least 2 arguments, got 1"),
    ("k<<<dim3(1,2,3,4), 1>>>(x);", "line 1: dim3 takes 1 to 3 values, got 4"),
    ("scratch double t[4];\nk<<<1,1>>>(t);", "line 1: scratch type 'double' is not supported"),
    ("scratch float [4];", "line 1: scratch type '(missing)' is not supported"),
    ("scratch float t[4]\nk<<<1,1>>>(t);", "line 2: expected ';' after the scratch declaration, found 'k'"),
    ("k<<<1, 1>>>(x); /* never closed", "line 1: a /* comment is never closed"),
    ("k<<<12abc, 1>>>(x);", "line 1: malformed number '12abc'"),
    ("k<<<1, 1>>>(x = 3);", "line 1: unexpected character '='"),
    ("k<<<1, 1>>>(99999999999999999999);", "does not fit in 64 bits"),
    ("1 + 2;", "line 1: expected a scratch declaration or a kernel launch"),
])
def test_parse_errors(text, fragment):
    with pytest.raises(FormatError) as ei:
        parse_launch(text)
    assert fragment in str(ei.value)


def test_comments_and_line_numbers():
    plan = parse_launch("// a\n/* b\n c */ k<<<1, 1>>>(x); // tail\n\nk2<<<1,1>>>(x);")
    assert [ln.line for ln in plan.launches] == [3, 5]


def test_number_literals():
    args = parse_launch("k<<<1,1>>>(0x10, 1e3, 2.5e-1f, .5, 7, 1.);").launches[0].args
    assert [a.value for a in args] == [16, 1000.0, 0.25, 0.5, 7, 1.0]
    assert [type(a.value) for a in args] == [int, float, float, float, int, float]


def test_too_many_launches():
    text = "\n".join("k<<<1,1>>>();" for _ in range(MAX_LAUNCHES + 1))
    with pytest.raises(FormatError, match=f"line {MAX_LAUNCHES + 1}: too many launches"):
        parse_launch(text)


# ---- expression semantics vs a Python reference of C ---------------------------------------
def c_div(a: int, b: int) -> int:
    """C99 integer division: truncate toward zero (reference written from the standard)."""
    return math.trunc(Fraction(a, b))


def c_mod(a: int, b: int) -> int:
    return a - c_div(a, b) * b


@pytest.mark.parametrize("a, b", list(itertools.product([-7, -6, -1, 0, 1, 6, 7], [-3, -2, 1, 2, 3])))
def test_c_division_and_modulo(a, b):
    env = {"A": a, "B": b}
    assert eval_expr(BinOp("/", Name("A"), Name("B")), env) == c_div(a, b)
    assert eval_expr(BinOp("%", Name("A"), Name("B")), env) == c_mod(a, b)


def test_negative_division_truncates_toward_zero():
    assert eval_expr(parse_launch("k<<<1,1>>>(-7 / 2, -7 % 2, 7 / -2);").launches[0].args[0], {}) == -3
    args = parse_launch("k<<<1,1>>>(-7 / 2, -7 % 2, 7 / -2);").launches[0].args
    assert [eval_expr(a, {}) for a in args] == [-3, -1, -3]


def test_cdiv_min_max_and_floats():
    env = {"N": 1000}
    def ev(s):
        return eval_expr(parse_launch(f"k<<<1,1>>>({s});").launches[0].args[0], env)
    assert ev("cdiv(N, 256)") == 4 and ev("cdiv(1024, 256)") == 4 and ev("cdiv(0, 256)") == 0
    assert ev("min(N, 3, 7)") == 3 and ev("max(1, N)") == 1000
    assert ev("N / 8.0") == 125.0 and isinstance(ev("N / 8.0"), float)
    assert ev("1 / 2") == 0 and ev("1.0 / 2") == 0.5


@pytest.mark.parametrize("text, fragment", [
    ("N / 0", "division by zero"), ("N % (N - N)", "modulo by zero"), ("cdiv(N, 0)", "division by zero"),
    ("M + 1", "unknown name 'M'"), ("N * 4611686018427387904", "overflows a 64-bit integer"),
    ("1.5 % 2", "'%' needs integers"),
])
def test_expression_errors(text, fragment):
    e = parse_launch(f"k<<<1,1>>>({text});").launches[0].args[0]
    with pytest.raises(FormatError, match=fragment):
        eval_expr(e, {"N": 4})


_ints = st.integers(-10**6, 10**6)


@st.composite
def exprs(draw, depth=0):
    if depth > 3 or draw(st.booleans()):
        return draw(st.one_of(_ints.map(Num), st.sampled_from([Name("N"), Name("M")])))
    kind = draw(st.sampled_from(["+", "-", "*", "/", "%", "neg", "cdiv", "min", "max"]))
    a, b = draw(exprs(depth + 1)), draw(exprs(depth + 1))
    if kind == "neg":
        return Neg(a)
    if kind in ("cdiv", "min", "max"):
        return Call(kind, (a, b))
    return BinOp(kind, a, b)


def ref_eval(e, env):
    """Independent reference over Python ints: C truncating / and %, ceil-div for cdiv; None on /0."""
    if isinstance(e, Num):
        return e.value
    if isinstance(e, Name):
        return env[e.name]
    if isinstance(e, Neg):
        v = ref_eval(e.operand, env)
        return None if v is None else -v
    vals = [ref_eval(x, env) for x in ((e.left, e.right) if isinstance(e, BinOp) else e.args)]
    if None in vals:
        return None
    a, b = vals
    op = e.op if isinstance(e, BinOp) else e.func
    if op in ("/", "%", "cdiv") and b == 0:
        return None
    return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: c_div(a, b),
            "%": lambda: c_mod(a, b), "cdiv": lambda: math.ceil(Fraction(a, b)),
            "min": lambda: min(a, b), "max": lambda: max(a, b)}[op]()


@settings(max_examples=300, deadline=None)
@given(exprs(), _ints, _ints)
def test_eval_matches_reference_and_roundtrips(e, n, m):
    env = {"N": n, "M": m}
    want = ref_eval(e, env)
    if want is None or abs(want) >= 2**63:
        with pytest.raises(FormatError):
            eval_expr(e, env)
        return
    try:
        got = eval_expr(e, env)
    except FormatError as err:  # an intermediate overflowed int64 even if the result would not
        assert "overflow" in str(err)
        return
    assert got == want
    # rendering and re-parsing gives the same value
    again = parse_launch(f"k<<<1,1>>>({render_expr(e)});").launches[0].args[0]
    assert eval_expr(again, env) == want


# ---- static checks ------------------------------------------------------------------------
CUDA = r'''
extern "C" __global__ void sum(const float* x, float* y, int n) {}
extern "C" __global__ void scale(float* y, float alpha, long long n) {}
extern "C" __global__ void half_k(const __half* h, float* y) {}
extern "C" __global__ void anyp(void* p, const char* q) {}
extern "C" __global__ void idx(const int* i, long long* j, unsigned int u) {}
extern "C" __global__ void dbl(const double* d) {}
__global__ void mangled(float* y) {}
'''


def _task():
    return Task(name="t", level=1, description="d", sizes={"eval": {"N": 1000}, "small": {"N": 10}},
                inputs=(Buffer("x", "float32", ("N",)), Buffer("h", "float16", ("N",)),
                        Buffer("i", "int32", ("N",))),
                outputs=(Buffer("y", "float32", ("N",)), Buffer("j", "int64", ("N",))),
                reference=lambda xp, **a: None, solution="", scalars=(Scalar("eps", "float32", 1e-5),))


def _check(launch: str, sizes=None):
    from kernels_env.source.signatures import find_hidden_kernels
    return check_plan(parse_launch(launch), find_kernels(CUDA), _task(), sizes or {"N": 1000},
                      find_hidden_kernels(CUDA))


def test_check_plan_resolves_everything():
    rp = _check("scratch float part[cdiv(N, 256)];\n"
                "sum<<<cdiv(N, 256), 256, 256 * 4>>>(x, part, N);\n"
                "scale<<<dim3(4, 2), dim3(16, 16)>>>(y, eps, N * 2);\n"
                "half_k<<<1, 32>>>(h, y); anyp<<<1,1>>>(i, h); idx<<<1,1>>>(i, j, 7);")
    assert rp.scratch == (("part", "float32", 4),)
    a, b = rp.launches[:2]
    assert (a.grid, a.block, a.shared_bytes) == ((4, 1, 1), (256, 1, 1), 1024)
    assert [(x.kind, x.name, x.value) for x in a.args] == [("buffer", "x", None), ("scratch", "part", None),
                                                           ("value", "", 1000)]
    assert b.grid == (4, 2, 1) and b.block == (16, 16, 1)
    assert b.args[1].value == pytest.approx(1e-5) and b.args[2].value == 2000


@pytest.mark.parametrize("launch, fragment", [
    ("sum<<<1, 256>>>(x, y);",
     "line 1: kernel 'sum' takes 3 arguments (const float* x, float* y, int n), the launch passes 2"),
    ("\nnope<<<1, 1>>>(x);", "line 2: no extern \"C\" __global__ kernel named 'nope'"),
    ("mangled<<<1, 1>>>(y);", "kernel 'mangled' is not declared extern \"C\""),
    ("sum<<<1, 256>>>(h, y, N);", "points to float (float32 data), but buffer 'h' is float16"),
    ("half_k<<<1, 256>>>(x, y);", "points to __half (float16 data), but buffer 'x' is float32"),
    ("idx<<<1, 1>>>(i, i, 1);", "points to long long (int64 data), but buffer 'i' is int32"),
    ("sum<<<1, 256>>>(N, y, N);", "is a pointer; 'N' is a size"),
    ("dbl<<<1, 1>>>(x);", "points to 'double', which matches no buffer dtype; buffer 'x' is float32: "
                          "declare it as float* (or void*)"),
    ("sum<<<1, 256>>>(zz, y, N);", "is a pointer; 'zz' is unknown"),
    ("sum<<<1, 256>>>(x + 1, y, N);", "is a pointer; expected a buffer name"),
    ("sum<<<1, 256>>>(x, y, x);", "is a scalar; expected a number or size, got buffer 'x'"),
    ("sum<<<1, 256>>>(x, y, 2.5);", "is an integer; got the non-integer value 2.5"),
    ("sum<<<1, 256>>>(x, y, eps);", "is an integer; got the non-integer value"),
    ("sum<<<1, 256>>>(x, y, 3000000000);", "does not fit int"),
    ("idx<<<1, 1>>>(i, j, -1);", "does not fit unsigned int"),
    ("sum<<<1, 256>>>(x, y, M);", "unknown name 'M'"),
    ("sum<<<0, 256>>>(x, y, N);", "grid.x = 0; expected 1..2147483647"),
    ("sum<<<dim3(1, 70000), 256>>>(x, y, N);", "grid.y = 70000; expected 1..65535"),
    ("sum<<<1, 2048>>>(x, y, N);", "block.x = 2048; expected 1..1024"),
    ("sum<<<1, dim3(1, 1, 65)>>>(x, y, N);", "block.z = 65; expected 1..64"),
    ("sum<<<1, dim3(64, 32)>>>(x, y, N);", "block has 2048 threads (64x32x1); at most 1024"),
    ("sum<<<1, 256, 300000>>>(x, y, N);", "dynamic shared memory = 300000 bytes; expected 0..232448"),
    ("sum<<<N / 3.0, 256>>>(x, y, N);", "grid.x must be an integer"),
    ("sum<<<x, 256>>>(x, y, N);", "grid.x uses buffer 'x'"),
    ("scratch float x[4];\nsum<<<1,1>>>(x, y, N);", "line 1: scratch name 'x' is already a task buffer"),
    ("scratch float t[0];\nsum<<<1,1>>>(x, t, N);", "scratch 't' has 0 elements"),
    ("scratch float t[N * N * N * N];\nsum<<<1,1>>>(x, t, N);", "expected between 1 element and 2147483648 bytes"),
    ("scratch float t[4];", "launches no kernel"),
])
def test_check_plan_errors(launch, fragment):
    with pytest.raises(FormatError) as ei:
        _check(launch)
    assert fragment in str(ei.value)


def test_void_and_char_pointers_accept_any_dtype():
    rp = _check("anyp<<<1, 1>>>(j, x);")
    assert [a.name for a in rp.launches[0].args] == ["j", "x"]
