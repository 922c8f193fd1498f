"""Task -> chat messages for the first turn (DESIGN 4.3), and feedback turns.

The prompt states the task, the signature of its buffers and sizes, and the submission format of
DESIGN 3.2 with one worked example. The example is a generic vector-scale kernel, deliberately not
any task's own solution, so the prompt never leaks an answer.
"""
from __future__ import annotations

from kernels_env.tasks.spec import Task
from leap_jax.models.chat import Message

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


def corpus_texts(tasks: list[Task], sizes: str = "eval") -> list[str]:
    """Texts a run-time tokenizer is trained on: prompts, solutions, the format example, feedback words."""
    out = [SYSTEM_PROMPT, FORMAT_RULES, FORMAT_EXAMPLE, FEEDBACK_SUFFIX]
    for t in tasks:
        out.append(task_prompt(t, sizes))
        out.append(t.solution)
    return out
