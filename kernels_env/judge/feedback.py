"""Turn a Result into the text of the next user turn (DESIGN 3.4): lean, deterministic, bounded.

The status line comes first; then only what helps the next attempt: the parser message, the first
compiler errors with their line numbers, the runtime error, the mismatch summary, or the timing.
"""
from __future__ import annotations

import re

from kernels_env.core.result import Mismatch, Result
from kernels_env.core.status import Status

TRUNCATION_MARKER = "\n[... feedback truncated]"
MAX_COMPILER_ERRORS = 3

_HEADLINE = {
    Status.CORRECT: "correct: the output matches the reference on every trial.",
    Status.WRONG_OUTPUT: "wrong_output: the kernel ran but its output is wrong.",
    Status.RUNTIME_ERROR: "runtime_error: the kernel failed while running.",
    Status.TIMEOUT: "timeout: the kernel did not finish within the time limit.",
    Status.COMPILE_ERROR: "compile_error: the CUDA code does not compile.",
    Status.FORMAT_ERROR: "format_error: the answer could not be parsed.",
    Status.ENV_ERROR: "env_error: the evaluation environment failed; this says nothing about your code.",
}

_DIAG_RE = re.compile(r"^\S*\(\d+\): (?:catastrophic )?error")


def compiler_errors(log: str, limit: int = MAX_COMPILER_ERRORS) -> list[str]:
    """The first `limit` error diagnostics of an NVRTC log, each with its source/caret lines."""
    lines = log.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines) and len(out) < limit:
        if _DIAG_RE.match(lines[i]) or lines[i].startswith("error"):
            block = [lines[i].rstrip()]
            j = i + 1
            while j < len(lines) and j <= i + 2 and lines[j].strip() and not re.match(r"^\S*\(\d+\):", lines[j]):
                block.append(lines[j].rstrip())
                j += 1
            out.append("\n".join(block))
            i = j
        else:
            i += 1
    return out


def _g(x: float | None) -> str:
    return "?" if x is None else f"{x:.4g}"


_WHY = {"unwritten": "never written: still the NaN/sentinel poison",
        "nan_or_inf": "NaN or Inf where the reference is finite",
        "mismatch": "differs from the reference",
        "shape": "the output has the wrong shape"}


def mismatch_summary(m: Mismatch) -> list[str]:
    """The one description of a wrong output, the same fields in the same order whatever the failure
    (unwritten, NaN/Inf or a wrong value): which output, the fraction mismatched, the first bad
    index (one index per dimension) with expected and got and why it is bad, the max abs / rel
    error over the elements finite in both, the tolerance, the trial and its inputs. The harness's
    one-line message is these lines joined."""
    at = "[" + ", ".join(str(i) for i in m.first_bad_index) + "]" if m.first_bad_index else "[]"
    trial = f"trial {m.trial}, {m.distribution} inputs"
    if m.reason == "input_modified":
        return [f"input {m.buffer} was modified by the kernel (inputs must stay unchanged): "
                f"{100 * (m.frac_mismatched or 0.0):.3g}% of elements changed; first change at index {at}: "
                f"was {_g(m.expected)}, now {_g(m.got)} ({trial})."]
    tol = f"atol {m.atol:g}, rtol {m.rtol:g}" if m.atol is not None and m.rtol is not None else "tolerance ?"
    return [f"output '{m.buffer}' is wrong: {100 * (m.frac_mismatched or 0.0):.3g}% of elements mismatched "
            f"({trial}).",
            f"first bad index {at}: expected {_g(m.expected)}, got {_g(m.got)} ({_WHY.get(m.reason, m.reason)}).",
            f"max abs err {_g(m.max_abs_err)}, max rel err {_g(m.max_rel_err)} over elements finite in both "
            f"({tol})."]


def _timing_lines(result: Result) -> list[str]:
    t = result.timing
    if t is None:
        return [f"passed {result.trials} correctness trials (not timed)."] if result.trials else []
    if not t.comparable or t.speedup is None:
        return [f"kernel {t.kernel_median_ms:.4g} ms median (timing on CPU, not comparable: "
                "no speedup)." if t.device == "cpu" else
                f"kernel {t.kernel_median_ms:.4g} ms median ({t.device} timing, not comparable: no speedup)."]
    flag = " (suspicious, re-verified on new inputs)" if t.suspicious else ""
    return [f"speedup {t.speedup:.3g}x over the reference{flag}: kernel {t.kernel_median_ms:.4g} ms vs "
            f"reference {t.ref_median_ms:.4g} ms (median of {t.runs} runs)."]


def _resource_lines(result: Result) -> list[str]:
    spills = [(k, r) for k, r in sorted(result.resources.items())
              if (r.spill_stores_bytes or 0) + (r.spill_loads_bytes or 0) > 0]
    return [f"note: kernel {k} spills registers ({r.spill_stores_bytes} B stores, {r.spill_loads_bytes} B "
            f"loads; {r.registers} registers)." for k, r in spills[:2]]


def _body(result: Result) -> list[str]:
    s = result.status
    msg = result.message.strip()
    if s is Status.FORMAT_ERROR:
        return [msg or "the answer needs one ```cuda block and one ```launch block."]
    if s is Status.COMPILE_ERROR:
        errs = compiler_errors(result.details)
        if errs:
            more = len(compiler_errors(result.details, limit=1000)) - len(errs)
            return errs + ([f"({more} more errors not shown)"] if more > 0 else [])
        return [result.details.strip() or msg]
    if s in (Status.RUNTIME_ERROR, Status.TIMEOUT):
        lines = [msg] if msg else []
        det = result.details.strip()
        if det and det not in msg:
            lines.append(det)
        return lines
    if s is Status.WRONG_OUTPUT:
        return mismatch_summary(result.mismatch) if result.mismatch is not None else [msg]
    if s is Status.CORRECT:
        return _timing_lines(result) + _resource_lines(result)
    return [msg] if msg else []


def truncate(text: str, budget: int) -> str:
    """`text` cut to at most `budget` characters, ending with a marker when cut."""
    if len(text) <= budget:
        return text
    if budget <= len(TRUNCATION_MARKER):
        return text[:max(budget, 0)]
    return text[:budget - len(TRUNCATION_MARKER)].rstrip() + TRUNCATION_MARKER


def render_feedback(result: Result, budget_chars: int = 800) -> str:
    """Feedback text for the next turn: the status line, then the few lines that matter, at most
    `budget_chars` characters (truncated with a marker)."""
    if budget_chars < 1:
        raise ValueError(f"budget_chars={budget_chars}; expected >= 1")
    lines = [_HEADLINE[result.status]] + [ln for ln in _body(result) if ln]
    return truncate("\n".join(lines), budget_chars)
