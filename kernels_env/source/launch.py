"""The launch language (DESIGN 3.2): tokenizer, recursive-descent parser, evaluator and static checks.

The launch block is the host side of a submission, interpreted here (never executed as code):

    scratch float partial[cdiv(N, 256)];
    sum_kernel<<<cdiv(N, 256), 256, 256 * 4>>>(x, partial, N);

`parse_launch(text) -> LaunchPlan` builds the AST of `kernels_env.core.program`; `eval_expr` evaluates an
expression with C semantics; `check_plan` is the one resolver of a plan: it checks it against the
kernels' C signatures and the task's sizes and returns the `ResolvedPlan` (every number evaluated)
that the harness launches; the parse-time static checks and the harness both call it. Every failure
raises `FormatError` (status `format_error`) with a message naming the line and what was expected.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from collections.abc import Iterable, Mapping

from kernels_env.core.program import (BinOp, Call, Dim3, Expr, KernelParam, KernelSignature, Launch,
                                      LaunchPlan, Name, Neg, Num, ScratchDecl)

MAX_LAUNCHES = 64
MAX_NUMBER_CHARS = 64  # int() of thousands of digits is slow and refused by Python
MAX_SCRATCH_BYTES = 2 ** 31
MAX_SCRATCH = 32
MAX_EXPR_DEPTH = 64  # nesting of an expression's tree (evaluation recurses over it)
MAX_SHARED_BYTES = 227 * 1024
MAX_BLOCK_THREADS = 1024
MAX_BLOCK_DIMS = (1024, 1024, 64)
MAX_GRID_DIMS = (2 ** 31 - 1, 65535, 65535)
INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
FUNCS = {"cdiv": 2, "min": None, "max": None}  # None: two or more arguments

DTYPE_BYTES = {"float32": 4, "float16": 2, "int32": 4, "int64": 8}
# C spellings accepted in `scratch <ctype> name[count];`, normalised to task dtypes.
SCRATCH_CTYPES = {
    "float": "float32", "__half": "float16", "half": "float16", "int": "int32", "int32_t": "int32",
    "long long": "int64", "int64_t": "int64", "long": "int64",
}


class FormatError(ValueError):
    """A malformed submission (status `format_error`); the message says what was expected and where."""


# ---- tokenizer ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Token:
    kind: str  # "ident" | "int" | "float" | "op" | "eof"
    text: str
    line: int
    value: int | float | None = None


_FLOAT_RE = re.compile(r"(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[fF]?")
_INT_RE = re.compile(r"0[xX][0-9a-fA-F]+|\d+")
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIGITS = frozenset("0123456789")
_IDENT_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_IDENT_CHARS = _IDENT_START | _DIGITS
_OPS = ("<<<", ">>>", "(", ")", "[", "]", ",", ";", "+", "-", "*", "/", "%")


def tokenize(text: str) -> list[Token]:
    """Split launch text into tokens, dropping `//` and `/* */` comments; tracks line numbers."""
    toks: list[Token] = []
    i, line, n = 0, 1, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c in " \t\r\f\v":
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise FormatError(f"line {line}: a /* comment is never closed with */")
            line += text.count("\n", i, j)
            i = j + 2
        elif c in _DIGITS or (c == "." and i + 1 < n and text[i + 1] in _DIGITS):
            m_int = _INT_RE.match(text, i)
            m_flt = _FLOAT_RE.match(text, i)
            assert m_flt is not None  # a digit, or '.' and a digit, always starts a float
            span = max(m_int.end() if m_int else i, m_flt.end()) - i
            if span > MAX_NUMBER_CHARS:
                raise FormatError(f"line {line}: a number of {span} characters; numbers in the launch "
                                  f"block have at most {MAX_NUMBER_CHARS} characters")
            value: int | float
            if m_int is not None and m_int.group()[:2].lower() == "0x":
                s = m_int.group()
                value = int(s, 16)
                i = m_int.end()
            elif m_int is None or m_flt.end() > m_int.end():
                s = m_flt.group()
                value = float(s.rstrip("fF"))
                i = m_flt.end()
            else:
                s = m_int.group()
                value = int(s)
                i = m_int.end()
            toks.append(Token("int" if isinstance(value, int) else "float", s, line, value))
            if i < n and text[i] in _IDENT_CHARS:
                j = i
                while j < n and text[j] in _IDENT_CHARS:
                    j += 1
                raise FormatError(f"line {line}: malformed number {text[i - len(s):j]!r}; expected an "
                                  "integer like 256 or a float like 0.5, 1e-5 or 0.5f")
            if isinstance(value, int) and value > INT64_MAX:
                raise FormatError(f"line {line}: integer literal {s} does not fit in 64 bits")
        elif c in _IDENT_START:
            m = _IDENT_RE.match(text, i)
            assert m is not None  # c starts an identifier
            toks.append(Token("ident", m.group(), line))
            i = m.end()
        else:
            for op in _OPS:
                if text.startswith(op, i):
                    toks.append(Token("op", op, line))
                    i += len(op)
                    break
            else:
                hint = " (the launch block is not Python or C++ host code)" if c in "=.{}<>&\"'#" else ""
                raise FormatError(f"line {line}: unexpected character {c!r}{hint}; expected a scratch "
                                  "declaration or a launch `kernel<<<grid, block>>>(args);`")
    toks.append(Token("eof", "", line))
    return toks


# ---- parser ---------------------------------------------------------------------------------
class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = tokenize(text)
        self.pos = 0
        self.nesting = 0

    @property
    def tok(self) -> Token:
        return self.toks[self.pos]

    def _desc(self, t: Token) -> str:
        return "end of the launch block" if t.kind == "eof" else repr(t.text)

    def error(self, expected: str, t: Token | None = None) -> FormatError:
        t = t or self.tok
        return FormatError(f"line {t.line}: expected {expected}, found {self._desc(t)}")

    def accept(self, text: str) -> bool:
        if self.tok.kind == "op" and self.tok.text == text:
            self.pos += 1
            return True
        return False

    def expect(self, text: str, what: str | None = None) -> Token:
        t = self.tok
        if not self.accept(text):
            raise self.error(what or f"'{text}'")
        return t

    def ident(self, what: str) -> Token:
        t = self.tok
        if t.kind != "ident":
            raise self.error(what)
        self.pos += 1
        return t

    def plan(self) -> LaunchPlan:
        scratch: list[ScratchDecl] = []
        launches: list[Launch] = []
        while self.tok.kind != "eof":
            if self.tok.kind == "ident" and self.tok.text == "scratch":
                scratch.append(self.scratch())
            elif self.tok.kind == "ident":
                launches.append(self.launch())
                if len(launches) > MAX_LAUNCHES:
                    raise FormatError(f"line {launches[-1].line}: too many launches "
                                      f"({len(launches)}); at most {MAX_LAUNCHES} are allowed")
            else:
                raise self.error("a scratch declaration or a kernel launch `name<<<grid, block>>>(args);`")
        if len(scratch) > MAX_SCRATCH:
            raise FormatError(f"line {scratch[-1].line}: too many scratch buffers ({len(scratch)}); "
                              f"at most {MAX_SCRATCH}")
        return LaunchPlan(tuple(scratch), tuple(launches))

    def scratch(self) -> ScratchDecl:
        start = self.ident("scratch")
        words: list[str] = []
        while self.tok.kind == "ident" and not (self.toks[self.pos + 1].kind == "op"
                                                and self.toks[self.pos + 1].text == "["):
            words.append(self.tok.text)
            self.pos += 1
        ctype = " ".join(words)
        if ctype not in SCRATCH_CTYPES:
            raise FormatError(
                f"line {start.line}: scratch type {ctype or '(missing)'!r} is not supported; expected "
                f"`scratch <type> name[count];` with type one of {', '.join(SCRATCH_CTYPES)}")
        name = self.ident("a scratch buffer name")
        self.expect("[", "'[' and the element count")
        count = self.expr()
        self.expect("]")
        self.expect(";", "';' after the scratch declaration")
        return ScratchDecl(name.text, SCRATCH_CTYPES[ctype], count, start.line)

    def launch(self) -> Launch:
        name = self.ident("a kernel name")
        if self.tok.kind == "op" and self.tok.text == "(":
            raise FormatError(f"line {name.line}: {name.text}(...) is not a launch; expected "
                              f"`{name.text}<<<grid, block>>>(args);`")
        self.expect("<<<", f"'<<<' after kernel name '{name.text}' (a launch is `name<<<grid, block>>>(args);`)")
        grid = self.dim3()
        self.expect(",", "',' and the block size inside <<< >>>")
        block = self.dim3()
        shared = None
        if self.accept(","):
            shared = self.expr()
            if self.tok.kind == "op" and self.tok.text == ",":
                raise FormatError(f"line {self.tok.line}: a stream argument is not supported; expected "
                                  "`<<<grid, block[, shared_bytes]>>>` (launches run in order on one stream)")
        self.expect(">>>", "'>>>' closing the launch configuration")
        self.expect("(", "'(' and the kernel arguments")
        args: list[Expr] = []
        if not self.accept(")"):
            while True:
                args.append(self.expr())
                if self.accept(")"):
                    break
                self.expect(",", "',' or ')' in the argument list")
        self.expect(";", "';' after the launch")
        return Launch(name.text, grid, block, shared, tuple(args), name.line)

    def dim3(self) -> Dim3:
        if self.tok.kind == "ident" and self.tok.text == "dim3":
            line = self.tok.line
            self.pos += 1
            self.expect("(", "'(' after dim3")
            parts = [self.expr()]
            while self.accept(","):
                parts.append(self.expr())
            self.expect(")", "')' closing dim3(x[, y[, z]])")
            if len(parts) > 3:
                raise FormatError(f"line {line}: dim3 takes 1 to 3 values, got {len(parts)}")
            return Dim3(*parts)
        return Dim3(self.expr())

    # Expressions are parsed as (node, depth) so that evaluation (recursive) stays bounded.
    def expr(self) -> Expr:
        return self._expr()[0]

    def _deeper(self, depth: int, line: int) -> int:
        if depth > MAX_EXPR_DEPTH:
            raise FormatError(f"line {line}: expression nested too deeply (more than {MAX_EXPR_DEPTH} levels)")
        return depth

    def _expr(self) -> tuple[Expr, int]:
        left, d = self._term()
        while self.tok.kind == "op" and self.tok.text in "+-":
            op, line = self.tok.text, self.tok.line
            self.pos += 1
            right, rd = self._term()
            left, d = BinOp(op, left, right), self._deeper(1 + max(d, rd), line)
        return left, d

    def _term(self) -> tuple[Expr, int]:
        left, d = self._unary()
        while self.tok.kind == "op" and self.tok.text in ("*", "/", "%"):
            op, line = self.tok.text, self.tok.line
            self.pos += 1
            right, rd = self._unary()
            left, d = BinOp(op, left, right), self._deeper(1 + max(d, rd), line)
        return left, d

    def _nest(self) -> None:
        self.nesting += 1
        if self.nesting > MAX_EXPR_DEPTH:
            raise FormatError(f"line {self.tok.line}: expression nested too deeply (more than "
                              f"{MAX_EXPR_DEPTH} levels)")

    def _unary(self) -> tuple[Expr, int]:
        if self.tok.kind == "op" and self.tok.text in "+-":
            neg = self.tok.text == "-"
            line = self.tok.line
            self.pos += 1
            self._nest()
            try:
                inner, d = self._unary()
            finally:
                self.nesting -= 1
            return (Neg(inner), self._deeper(d + 1, line)) if neg else (inner, d)
        return self._primary()

    def _primary(self) -> tuple[Expr, int]:
        t = self.tok
        if t.value is not None:  # an "int" or "float" token
            self.pos += 1
            return Num(t.value), 1
        if t.kind == "ident":
            self.pos += 1
            if self.accept("("):
                if t.text not in FUNCS:
                    raise FormatError(f"line {t.line}: unknown function {t.text!r}; expressions may call "
                                      "only cdiv, min and max")
                self._nest()
                try:
                    first = self._expr()
                    args, depth = [first[0]], first[1]
                    while self.accept(","):
                        e, d = self._expr()
                        args.append(e)
                        depth = max(depth, d)
                finally:
                    self.nesting -= 1
                self.expect(")", f"',' or ')' in the call to {t.text}")
                want = FUNCS[t.text]
                if (want is not None and len(args) != want) or (want is None and len(args) < 2):
                    exp = f"{want}" if want is not None else "at least 2"
                    raise FormatError(f"line {t.line}: {t.text} takes {exp} arguments, got {len(args)}")
                return Call(t.text, tuple(args)), self._deeper(depth + 1, t.line)
            return Name(t.text), 1
        if self.accept("("):
            self._nest()
            try:
                e, d = self._expr()
            finally:
                self.nesting -= 1
            self.expect(")", "')'")
            return e, d
        raise self.error("a number, a name or '(' in an expression")


def parse_launch(text: str) -> LaunchPlan:
    """Parse a launch block into a LaunchPlan; raises FormatError with the line of the problem."""
    return _Parser(text).plan()


# ---- evaluation -----------------------------------------------------------------------------
class ExprError(FormatError):
    """An expression cannot be evaluated (unknown name, division by zero, overflow)."""


def _check_int(v: int, what: str) -> int:
    if not INT64_MIN <= v <= INT64_MAX:
        raise ExprError(f"{what} overflows a 64-bit integer")
    return v


def _cdiv_trunc(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def eval_expr(expr: Expr, env: Mapping[str, int | float]) -> int | float:
    """Evaluate with C semantics: ints stay ints (`/` truncates toward zero, `%` takes the sign of
    the dividend), any float makes the result a float; division by zero and int64 overflow raise."""
    if isinstance(expr, Num):
        return expr.value
    if isinstance(expr, Name):
        if expr.name not in env:
            raise ExprError(f"unknown name {expr.name!r}; known here: {', '.join(sorted(env)) or '(none)'}")
        return env[expr.name]
    if isinstance(expr, Neg):
        v = eval_expr(expr.operand, env)
        return _check_int(-v, "negation") if isinstance(v, int) else -v
    if isinstance(expr, BinOp):
        a, b = eval_expr(expr.left, env), eval_expr(expr.right, env)
        op = expr.op
        if op not in ("+", "-", "*", "/", "%"):  # pragma: no cover - the parser builds only these
            raise ExprError(f"unknown operator {op!r}")
        if op in "/%" and b == 0:
            raise ExprError(f"{'division' if op == '/' else 'modulo'} by zero in {render_expr(expr)}")
        if isinstance(a, int) and isinstance(b, int):
            r = (a + b if op == "+" else a - b if op == "-" else a * b if op == "*" else
                 _cdiv_trunc(a, b) if op == "/" else a - _cdiv_trunc(a, b) * b)
            return _check_int(r, render_expr(expr))
        if op == "%":
            raise ExprError(f"'%' needs integers, got {a!r} % {b!r}")
        return float(a + b if op == "+" else a - b if op == "-" else a * b if op == "*" else a / b)
    if isinstance(expr, Call):
        vals = [eval_expr(a, env) for a in expr.args]
        if expr.func == "cdiv":
            a, b = vals
            if not (isinstance(a, int) and isinstance(b, int)):
                raise ExprError(f"cdiv needs integers, got cdiv({a!r}, {b!r})")
            if b == 0:
                raise ExprError(f"division by zero in {render_expr(expr)}")
            return _check_int(-((-a) // b), render_expr(expr))
        best = min(vals) if expr.func == "min" else max(vals)
        return best if all(isinstance(v, int) for v in vals) else float(best)
    raise ExprError(f"not an expression: {expr!r}")


def render_expr(expr: Expr) -> str:
    """Expression back to launch-language text (fully parenthesised binary ops)."""
    if isinstance(expr, Num):
        return repr(expr.value)
    if isinstance(expr, Name):
        return expr.name
    if isinstance(expr, Neg):
        return f"-{render_expr(expr.operand)}"
    if isinstance(expr, BinOp):
        return f"({render_expr(expr.left)} {expr.op} {render_expr(expr.right)})"
    if isinstance(expr, Call):
        return f"{expr.func}({', '.join(render_expr(a) for a in expr.args)})"
    return repr(expr)


def expr_names(expr: Expr) -> set[str]:
    """All names an expression mentions."""
    if isinstance(expr, Name):
        return {expr.name}
    if isinstance(expr, Neg):
        return expr_names(expr.operand)
    if isinstance(expr, BinOp):
        return expr_names(expr.left) | expr_names(expr.right)
    if isinstance(expr, Call):
        return set().union(*(expr_names(a) for a in expr.args))
    return set()


# ---- the plan resolver ----------------------------------------------------------------------
# `check_plan` is the one resolver of a launch plan: the static checks at parse time
# (`score.prepare`) and the harness's binding at evaluation time (`launching.bind_plan`) both call
# it, and the harness launches the ResolvedPlan it returns. Every rule lives here: the launch
# configuration limits, the scalar types of kernel parameters, scratch sizes, argument arity and
# kinds, null pointers. Every failure is a FormatError (status `format_error`), a launch
# configuration CUDA would reject included: it is decided from the launch block and the task's
# sizes alone, before anything is compiled or launched. (A limit only the device knows, such as a
# GPU's opt-in shared memory, is still the device's `runtime_error` at launch.)
NULL_NAMES = ("nullptr", "NULL")


def is_null_pointer(expr: Expr) -> bool:
    """`nullptr`, `NULL` or the literal `0`: a null pointer when passed to a pointer parameter
    (e.g. an optional bias, as llm.c's kernels take)."""
    return (isinstance(expr, Name) and expr.name in NULL_NAMES) or (
        isinstance(expr, Num) and isinstance(expr.value, int) and expr.value == 0)


@dataclass(frozen=True)
class Arg:
    """One resolved launch argument: a buffer/scratch by name, a null pointer, or a number for a
    scalar param (passed to the kernel as numpy dtype `dtype`, see SCALAR_TYPES)."""
    kind: str  # "buffer" | "scratch" | "null" | "value"
    name: str = ""
    value: int | float | None = None
    param: KernelParam | None = None
    dtype: str = ""  # for "value": the numpy dtype name the value is passed as


@dataclass(frozen=True)
class ResolvedLaunch:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    args: tuple[Arg, ...]
    line: int
    index: int = 0  # position in the plan, from 0

    @property
    def where(self) -> str:
        """How a runtime error names this launch."""
        return f"launch {self.index + 1} ({self.kernel}, line {self.line})"


@dataclass(frozen=True)
class ResolvedPlan:
    """A checked plan with every number evaluated: what a harness allocates and launches."""
    scratch: tuple[tuple[str, str, int], ...]  # (name, dtype, element count)
    launches: tuple[ResolvedLaunch, ...]


# pointee C type -> task dtypes it accepts; None = any dtype
_POINTEE_OK: dict[str, tuple[str, ...] | None] = {
    "float": ("float32",), "float2": ("float32",), "float4": ("float32",),
    "__half": ("float16",), "half": ("float16",), "__half2": ("float16",), "half2": ("float16",),
    "int": ("int32",), "unsigned int": ("int32",), "int32_t": ("int32",), "uint32_t": ("int32",),
    "int2": ("int32",), "int4": ("int32",),
    "long long": ("int64",), "unsigned long long": ("int64",), "int64_t": ("int64",),
    "uint64_t": ("int64",), "long": ("int64",), "unsigned long": ("int64",),
    "void": None, "char": None, "unsigned char": None, "signed char": None, "uint8_t": None,
    "int8_t": None,
}
_C_FOR_DTYPE = {"float32": "float", "float16": "__half", "int32": "int", "int64": "long long"}


@dataclass(frozen=True)
class ScalarType:
    """How a scalar (non-pointer) kernel parameter of a C type is passed: as numpy dtype `dtype`;
    an integer type takes integers in lo..hi, a floating type any number."""
    dtype: str
    integer: bool = True
    lo: int = 0
    hi: int = 0


def _int_type(dtype: str, lo: int | None = None, hi: int | None = None) -> ScalarType:
    bits = 1 if dtype == "bool" else int(dtype.removeprefix("u").removeprefix("int"))
    signed = not dtype.startswith(("u", "bool"))
    lo_, hi_ = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2 ** bits - 1)
    return ScalarType(dtype, True, lo_ if lo is None else lo, hi_ if hi is None else hi)


_I8, _U8, _I16, _U16 = _int_type("int8"), _int_type("uint8"), _int_type("int16"), _int_type("uint16")
_I32, _U32, _I64, _U64 = _int_type("int32"), _int_type("uint32"), _int_type("int64"), _int_type("uint64")
# C base type (qualifiers dropped) -> how a scalar parameter of that type is passed. size_t is
# unsigned in C but passed as int64 (the same bits for 0..2^63-1, the values it accepts).
SCALAR_TYPES: dict[str, ScalarType] = {
    "int": _I32, "signed": _I32, "signed int": _I32, "int32_t": _I32,
    "unsigned": _U32, "unsigned int": _U32, "uint32_t": _U32,
    "long long": _I64, "long long int": _I64, "signed long long": _I64, "long": _I64, "long int": _I64,
    "int64_t": _I64, "ptrdiff_t": _I64, "ssize_t": _I64, "size_t": _int_type("int64", 0),
    "unsigned long long": _U64, "unsigned long": _U64, "uint64_t": _U64,
    "short": _I16, "int16_t": _I16, "unsigned short": _U16, "uint16_t": _U16,
    "char": _I8, "signed char": _I8, "int8_t": _I8, "unsigned char": _U8, "uint8_t": _U8,
    "bool": _int_type("bool"),
    "float": ScalarType("float32", False), "double": ScalarType("float64", False),
    "__half": ScalarType("float16", False), "half": ScalarType("float16", False),
}
_QUALIFIERS = ("const", "volatile", "__restrict__", "__restrict", "restrict")


def scalar_type(param: KernelParam) -> ScalarType | None:
    """How a scalar argument for `param` is passed (its base type without qualifiers); None for a
    type the launch block cannot pass."""
    words = [w for w in param.base_type.replace("*", " ").split() if w not in _QUALIFIERS]
    return SCALAR_TYPES.get(" ".join(words))


def format_signature(sig: KernelSignature) -> str:
    return ", ".join(f"{p.ctype} {p.name}".strip() for p in sig.params) or "no parameters"


def _nargs(n: int) -> str:
    return f"{n} argument{'s' if n != 1 else ''}"


def check_plan(plan: LaunchPlan, signatures: Mapping[str, KernelSignature], task: Any,
               sizes: Mapping[str, int], hidden_kernels: Iterable[str] = ()) -> ResolvedPlan:
    """Resolve a plan against the kernels' signatures and the task with these sizes: check every
    rule and return it fully evaluated (what the harness launches). Raises FormatError naming the
    line, the bad value and what was expected.

    `task` has `.inputs`, `.outputs` (buffers with `.name`, `.dtype`) and `.scalars` (`.name`,
    `.value`); `sizes` are the task's sizes for this run; `hidden_kernels` are `__global__` kernels
    that are not extern "C" (C++-mangled, so invisible to the launcher) for a better message.
    """
    hidden = set(hidden_kernels)
    buffers = {b.name: b.dtype for b in tuple(task.inputs) + tuple(task.outputs)}
    scalars = {s.name: s.value for s in getattr(task, "scalars", ())}
    sizes = {k: int(v) for k, v in sizes.items()}
    numeric_env: dict[str, int | float] = {**sizes, **scalars}
    scratch_dt: dict[str, str] = {}

    def ev(e: Expr, line: int, what: str) -> int | float:
        for nm in expr_names(e):
            if nm in buffers or nm in scratch_dt:
                raise FormatError(f"line {line}: {what} uses buffer {nm!r}; only sizes "
                                  f"({', '.join(sizes) or 'none'}) and numbers may appear here")
        try:
            return eval_expr(e, numeric_env)
        except ExprError as err:
            raise FormatError(f"line {line}: {what}: {err}") from None

    def ev_int(e: Expr, line: int, what: str) -> int:
        v = ev(e, line, what)
        if not isinstance(v, int):
            raise FormatError(f"line {line}: {what} must be an integer, got {v!r}")
        return v

    def dim3(d: Dim3, line: int, what: str) -> tuple[int, int, int]:
        return (ev_int(d.x, line, f"{what}.x"), ev_int(d.y, line, f"{what}.y"), ev_int(d.z, line, f"{what}.z"))

    scratch_out: list[tuple[str, str, int]] = []
    for s in plan.scratch:
        taken = ("task buffer" if s.name in buffers else "size" if s.name in sizes else
                 "task scalar" if s.name in scalars else "scratch buffer" if s.name in scratch_dt else None)
        if taken:
            raise FormatError(f"line {s.line}: scratch name {s.name!r} is already a {taken}; choose another name")
        if s.dtype not in DTYPE_BYTES:  # the parser normalises C spellings; a hand-built plan may not
            raise FormatError(f"line {s.line}: scratch {s.name!r} has dtype {s.dtype!r}; expected one of "
                              f"{', '.join(DTYPE_BYTES)}")
        count = ev_int(s.count, s.line, f"the element count of scratch {s.name!r}")
        nbytes = count * DTYPE_BYTES[s.dtype]
        if count <= 0 or nbytes > MAX_SCRATCH_BYTES:
            raise FormatError(f"line {s.line}: scratch {s.name!r} has {count} elements ({nbytes} bytes); "
                              f"expected between 1 element and {MAX_SCRATCH_BYTES} bytes")
        scratch_dt[s.name] = s.dtype
        scratch_out.append((s.name, s.dtype, count))

    if not plan.launches:
        raise FormatError("the launch block launches no kernel; expected at least one "
                          "`kernel<<<grid, block>>>(args);`")
    out: list[ResolvedLaunch] = []
    for index, ln in enumerate(plan.launches):
        line = ln.line
        sig = signatures.get(ln.kernel)
        if sig is None:
            if ln.kernel in hidden:
                raise FormatError(f"line {line}: kernel {ln.kernel!r} is not declared extern \"C\", so its "
                                  "name is C++-mangled and cannot be launched; declare it "
                                  f"`extern \"C\" __global__ void {ln.kernel}(...)`")
            known = ", ".join(sorted(signatures)) or "none"
            raise FormatError(f"line {line}: no extern \"C\" __global__ kernel named {ln.kernel!r} in the "
                              f"cuda block (kernels found: {known})")
        grid, block = dim3(ln.grid, line, "grid"), dim3(ln.block, line, "block")
        _check_config(grid, block, line)
        shared = 0 if ln.shared_bytes is None else ev_int(ln.shared_bytes, line, "shared memory bytes")
        if not 0 <= shared <= MAX_SHARED_BYTES:
            raise FormatError(f"line {line}: dynamic shared memory = {shared} bytes; expected 0..{MAX_SHARED_BYTES}")
        if len(ln.args) != len(sig.params):
            raise FormatError(f"line {line}: kernel {ln.kernel!r} takes {_nargs(len(sig.params))} "
                              f"({format_signature(sig)}), the launch passes {_nargs(len(ln.args))}")
        args: list[Arg] = []
        for i, (a, p) in enumerate(zip(ln.args, sig.params, strict=True), 1):
            pdesc = f"argument {i} of {ln.kernel!r} ({p.ctype} {p.name})".replace(" )", ")")
            if p.pointer:
                args.append(_pointer_arg(a, p, f"line {line}: {pdesc}", buffers, scratch_dt, sizes, scalars))
                continue
            if isinstance(a, Name) and a.name in NULL_NAMES:
                raise FormatError(f"line {line}: {pdesc} is not a pointer; {a.name} can only be passed "
                                  "to a pointer parameter")
            for nm in expr_names(a):
                if nm in buffers or nm in scratch_dt:
                    raise FormatError(f"line {line}: {pdesc} is a scalar; expected a number or size, got "
                                      f"buffer {nm!r} (a buffer goes to a pointer parameter, declared with *; "
                                      "this one is a non-pointer)")
            st = scalar_type(p)
            if st is None:
                raise FormatError(f"line {line}: {pdesc}: parameter type {p.base_type!r} cannot be passed "
                                  "from the launch block; use int, long long, float, double or a pointer")
            v = ev(a, line, pdesc)
            if st.integer:
                if not isinstance(v, int):
                    raise FormatError(f"line {line}: {pdesc} is an integer; got the non-integer value {v!r}")
                if not st.lo <= v <= st.hi:
                    raise FormatError(f"line {line}: {pdesc}: value {v} does not fit {p.base_type} "
                                      f"({st.lo}..{st.hi})")
            else:
                v = float(v)
            args.append(Arg("value", "", v, p, st.dtype))
        out.append(ResolvedLaunch(ln.kernel, grid, block, shared, tuple(args), line, index))
    return ResolvedPlan(tuple(scratch_out), tuple(out))


def _check_config(grid: tuple[int, int, int], block: tuple[int, int, int], line: int) -> None:
    """CUDA's launch-configuration limits (compute capability >= 3.0), the same on every backend."""
    for ax, g, lim in zip("xyz", grid, MAX_GRID_DIMS, strict=True):
        if not 1 <= g <= lim:
            raise FormatError(f"line {line}: grid.{ax} = {g}; expected 1..{lim}")
    for ax, b, lim in zip("xyz", block, MAX_BLOCK_DIMS, strict=True):
        if not 1 <= b <= lim:
            raise FormatError(f"line {line}: block.{ax} = {b}; expected 1..{lim}")
    threads = block[0] * block[1] * block[2]
    if threads > MAX_BLOCK_THREADS:
        raise FormatError(f"line {line}: block has {threads} threads ({block[0]}x{block[1]}x{block[2]}); "
                          f"at most {MAX_BLOCK_THREADS} per block")


def _pointer_arg(a: Expr, p: KernelParam, where: str, buffers: Mapping[str, str], scratch_dt: Mapping[str, str],
                 sizes: Mapping[str, int], scalars: Mapping[str, int | float]) -> Arg:
    """The argument `a` for pointer parameter `p`: a null pointer or a buffer whose dtype matches."""
    if is_null_pointer(a):
        if p.ctype.count("*") > 1:
            raise FormatError(f"{where}: pointer-to-pointer parameters are not supported")
        return Arg("null", "", None, p)
    names = ", ".join(list(buffers) + list(scratch_dt))
    if not isinstance(a, Name):
        raise FormatError(f"{where} is a pointer; expected a buffer name ({names}) or nullptr, got "
                          f"{render_expr(a)} (a pointer parameter needs a buffer)")
    if a.name in buffers:
        kind, dt = "buffer", buffers[a.name]
    elif a.name in scratch_dt:
        kind, dt = "scratch", scratch_dt[a.name]
    else:
        what = "a size" if a.name in sizes else "a scalar" if a.name in scalars else "unknown"
        raise FormatError(f"{where} is a pointer; {a.name!r} is {what}, expected one of the buffers {names}")
    if p.ctype.count("*") > 1:
        raise FormatError(f"{where}: pointer-to-pointer parameters are not supported")
    ok = _POINTEE_OK.get(p.base_type, ())
    if ok == ():
        raise FormatError(f"{where} points to {p.base_type!r}, which matches no buffer dtype; {kind} "
                          f"{a.name!r} is {dt}: declare it as {_C_FOR_DTYPE[dt]}* (or void*)")
    if ok is not None and dt not in ok:
        raise FormatError(f"{where} points to {p.base_type} ({'/'.join(ok)} data), but {kind} {a.name!r} is {dt}")
    return Arg(kind, a.name, None, p)
