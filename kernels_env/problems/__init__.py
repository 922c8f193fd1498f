"""KernelBench-style PyTorch problem files as tasks (docs/problems.md): `load_problem(path)` runs the
file in its own process and returns a Task whose reference is the file's `forward` in torch."""
from kernels_env.problems.build import (NAME_PREFIX, load_problem, problem_files, problem_task, register_problems,
                                        release)
from kernels_env.problems.client import ProblemError

__all__ = ["NAME_PREFIX", "ProblemError", "load_problem", "problem_files", "problem_task", "register_problems",
           "release"]
