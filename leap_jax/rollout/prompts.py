"""Task -> chat messages for the first turn (DESIGN 4.3), and feedback turns.

The prompt states the task, the signature of its buffers and sizes, and the submission format of
DESIGN 3.2 with one worked example. The example is a generic vector-scale kernel, deliberately not
any task's own solution, so the prompt never leaks an answer.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from kernels_env import Task, get_task
from leap_jax.models.chat import Message, render_text

SYSTEM_PROMPT = (
    "You are an expert CUDA engineer. You write correct, fast CUDA kernels. "
    "Answer with a ```cuda block (device code only) and a ```launch block (the host-side launch plan)."
)

FORMAT_EXAMPLE = """Example of the answer format (for a different problem: y[i] = alpha * x[i], N elements):

```cuda
extern "C" __global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y,
                                        float alpha, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = alpha * x[i];
}
```

```launch
scale_kernel<<<cdiv(N, 256), 256>>>(x, y, 2.0, N);
```"""

FORMAT_RULES = """Submission format:
- The last ```cuda block holds device code only, compiled by NVRTC: one or more extern "C" __global__
  kernels plus any __device__ helpers. NVRTC headers such as cuda_fp16.h are allowed; no host code.
- The last ```launch block is the launch plan, run in order on one stream:
  `scratch float tmp[cdiv(N, 256)];` declares a zero-initialised device buffer (optional);
  `kernel<<<grid, block[, shared_bytes]>>>(args...);` launches a kernel. grid/block are an int or
  dim3(x[, y[, z]]). Arguments are task buffers, scratch buffers, size names or numeric literals.
  Expressions may use integers, sizes, + - * / % ( ), cdiv, min, max.
- Everything outside those two blocks (your reasoning) is ignored."""

FEEDBACK_SUFFIX = "Fix the problem and answer again in the same format (a ```cuda and a ```launch block)."


def task_prompt(task: Task, sizes: str = "eval") -> str:
    """The user message of turn 1 for `task`."""
    return (f"Task: {task.name} (level {task.level})\n\n{task.description.strip()}\n\n"
            f"Buffers and sizes (the names you can use in the launch block):\n"
            f"{task.signature_text(sizes)}\n\n{FORMAT_RULES}\n\n{FORMAT_EXAMPLE}\n\n"
            "Write your kernel for the task above.")


def initial_messages(task: Task, sizes: str = "eval") -> list[Message]:
    """[system, user] for the first turn."""
    return [Message("system", SYSTEM_PROMPT), Message("user", task_prompt(task, sizes))]


def feedback_message(feedback_text: str) -> Message:
    """The user turn that follows a failed attempt: the environment's feedback plus the request."""
    return Message("user", f"{feedback_text.strip()}\n\n{FEEDBACK_SUFFIX}")


def prompt_texts(tasks: Iterable[Task | str], sizes: str | Sequence[str] = ("eval", "small")) -> Iterator[str]:
    """The text a run-time tokenizer is trained on (`leap_jax.models.bpe`): the feedback request, then
    for every task (a Task or a task name) its first-turn prompt (system + user + generation prompt,
    ChatML-rendered) for each size set, and its known-good solution. A bad size set raises now."""
    size_sets = (sizes,) if isinstance(sizes, str) else tuple(sizes)
    for s in size_sets:
        if s not in ("eval", "small"):
            raise ValueError(f"prompt size set {s!r}; expected 'eval' or 'small'")
    return _prompt_texts(tasks, size_sets)


def _prompt_texts(tasks: Iterable[Task | str], size_sets: tuple[str, ...]) -> Iterator[str]:
    yield FEEDBACK_SUFFIX
    for t in tasks:
        task = get_task(t) if isinstance(t, str) else t
        for s in size_sets:
            yield render_text(initial_messages(task, s), add_generation_prompt=True)
        yield task.solution
