"""A KernelBench-style PyTorch problem file as a Task (docs/problems.md).

The file defines `class Model(nn.Module)`, `get_inputs()`, optionally `get_init_inputs()` and
module-level constants; it runs in its own process (worker.py). What the task is made of:
  inputs   `forward`'s arguments (named after them; shape and dtype from `get_inputs()`), then the
           model's parameters (dotted names with `_`, e.g. `conv_weight`), all drawn by the
           environment's trials like any task's inputs;
  outputs  `forward`'s tensors, named by the file's OUTPUT_NAMES (else `out`, `out0`, ...); a 0-d
           result is a 1-element buffer;
  sizes    the file's int constants ("eval"; "small" with the file's SMALL_SIZES overrides); a
           buffer dimension is named after the first constant equal to it in both size sets;
  scalars  the file's float constants (float32);
  reference  `forward` in torch on the problem's process, with the trial's inputs and parameters;
           it also times torch eager and torch.compile (`ProblemReference.torch_times`).
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from kernels_env.problems.client import ProblemError, ProblemProcess
from kernels_env.tasks.spec import Buffer, Scalar, Task

KERNELBENCH_TOLERANCE = (1e-2, 1e-2)  # KernelBench's atol, rtol
TAG = "problem"
_PROCESSES: dict[tuple[str, str, int], ProblemProcess] = {}


def torch_device(backend: str) -> str:
    """The torch device a problem's reference runs on for `backend` (the GPU for cupy)."""
    return "cuda" if backend == "cupy" else "cpu"


class ProblemReference:
    """A problem task's reference: `forward` in the problem's process, per trial."""

    def __init__(self, process: ProblemProcess, input_shapes: dict[str, dict[str, tuple[int, ...]]]) -> None:
        self.process, self.input_shapes = process, input_shapes

    def _size_set(self, arrays: dict[str, Any]) -> str:
        for which, shapes in self.input_shapes.items():
            if all(tuple(arrays[n].shape) == s for n, s in shapes.items()):
                return which
        got = {n: tuple(arrays[n].shape) for n in next(iter(self.input_shapes.values()))}
        raise ProblemError(f"problem {self.process.path}: inputs of shapes {got} match no size set")

    def _host(self, arrays: dict[str, Any]) -> tuple[str, dict[str, np.ndarray]]:
        which = self._size_set(arrays)
        return which, {n: _to_numpy(arrays[n]) for n in self.input_shapes[which]}

    def __call__(self, xp: Any, **arrays: Any) -> Any:
        outs = [xp.asarray(o) for o in self.process.forward(*self._host(arrays))]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def torch_times(self, inputs: dict[str, Any], budget_s: float, flush_bytes: int) -> dict[str, Any]:
        """Run times (ms) of torch eager and torch.compile on `inputs` (measured once per size set)."""
        which, host = self._host(inputs)
        return self.process.time(which, host, budget_s, flush_bytes)


def _to_numpy(a: Any) -> np.ndarray:
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def _dim_names(shape_eval: tuple[int, ...], shape_small: tuple[int, ...], sizes: dict[str, dict[str, int]],
               where: str) -> tuple[str | int, ...]:
    """Each dimension as the first constant equal to it in both size sets, else the int itself."""
    out: list[str | int] = []
    for i, (e, s) in enumerate(zip(shape_eval, shape_small, strict=True)):
        name = next((k for k, v in sizes["eval"].items() if v == e and sizes["small"].get(k) == s), None)
        if name is None and e != s:
            raise ProblemError(f"{where} dimension {i} is {e} at the file's sizes and {s} with SMALL_SIZES, "
                               "and no int constant has both values; add one")
        out.append(e if name is None else name)
    return tuple(out)


def _input_buffer(spec: dict[str, Any], small: dict[str, Any], sizes: dict[str, dict[str, int]], where: str) -> Buffer:
    shape = _dim_names(tuple(spec["shape"]), tuple(small["shape"]), sizes, f"{where}: input {spec['name']!r}")
    if spec["dtype"].startswith("int"):
        return Buffer(spec["name"], spec["dtype"], shape, distributions=("randint",), low=int(spec["min"]),
                      high=int(spec["max"]) + 1)
    if spec["min"] > 0:
        return Buffer(spec["name"], spec["dtype"], shape, distributions=("positive",))
    return Buffer(spec["name"], spec["dtype"], shape)


def _tolerance(value: Any, where: str) -> dict[str, tuple[float, float]]:
    atol, rtol = KERNELBENCH_TOLERANCE if value is None else value
    if not (isinstance(atol, (int, float)) and isinstance(rtol, (int, float)) and atol >= 0 and rtol >= 0):
        raise ProblemError(f"{where}: TOLERANCE={value!r}; expected (atol, rtol), two numbers >= 0")
    return {"float32": (float(atol), float(rtol)), "float16": (float(atol), float(rtol))}


def _level(path: str) -> int:
    """2 for a file under a folder named level2 (KernelBench's layout), likewise 3; else 1."""
    parent = os.path.basename(os.path.dirname(os.path.abspath(path))).lower()
    return {"level2": 2, "level3": 3}.get(parent, 1)


def task_from_description(path: str, desc: dict[str, dict[str, Any]], reference: Any, source: str = "") -> Task:
    """The Task of problem file `path` from its process's description (worker.Problem.describe)."""
    ev, sm = desc["eval"], desc["small"]
    where = f"problem {path}"
    sizes = {w: {k: v for k, v in d["constants"].items() if isinstance(v, int)} for w, d in desc.items()}
    scalars = tuple(Scalar(k, "float32", v) for k, v in ev["constants"].items() if isinstance(v, float))
    inputs = [_input_buffer(a, b, sizes, where) for a, b in zip(ev["inputs"], sm["inputs"], strict=True)]
    inputs += [Buffer(p["name"], p["dtype"], _dim_names(tuple(p["shape"]), tuple(q["shape"]), sizes,
                                                       f"{where}: parameter {p['name']!r}"))
               for p, q in zip(ev["params"], sm["params"], strict=True)]
    names = ev["output_names"] or (["out"] if len(ev["outputs"]) == 1 else [f"out{i}" for i in range(len(ev["outputs"]))])
    if len(names) != len(ev["outputs"]):
        raise ProblemError(f"{where}: OUTPUT_NAMES has {len(names)} names; forward returns {len(ev['outputs'])} tensors")
    outputs = [Buffer(n, o["dtype"], _dim_names(tuple(o["shape"]) or (1,), tuple(q["shape"]) or (1,), sizes,
                                                f"{where}: output {n!r}"))
               for n, o, q in zip(names, ev["outputs"], sm["outputs"], strict=True)]
    description = (ev["doc"] or "Write CUDA kernels computing this PyTorch model's forward.") + (
        f"\n\nThe PyTorch problem:\n```python\n{source.strip()}\n```" if source else "")
    try:
        return Task(name=os.path.splitext(os.path.basename(path))[0], level=_level(path), description=description,
                    sizes=sizes, inputs=tuple(inputs), outputs=tuple(outputs), reference=reference, solution="",
                    scalars=scalars, tolerance=_tolerance(ev["tolerance"], where), tags=(TAG,))
    except ValueError as e:
        raise ProblemError(f"{where}: {e}") from None


def load_problem(path: str, backend: str = "cpu", seed: int = 0) -> Task:
    """The Task of the problem file at `path`, its reference on `backend`'s torch device. The file's
    process is started once per (file, device, seed) and kept for this process's life."""
    if not os.path.isfile(path) or not path.endswith(".py"):
        raise ProblemError(f"problem {path}: not a Python file (expected a .py file with a Model class)")
    path = os.path.abspath(path)
    key = (path, torch_device(backend), seed)
    if key not in _PROCESSES:
        _PROCESSES[key] = ProblemProcess(path, key[1], seed)
    process = _PROCESSES[key]
    desc = process.description
    shapes = {w: {a["name"]: tuple(a["shape"]) for a in d["inputs"]} | {p["name"]: tuple(p["shape"]) for p in d["params"]}
              for w, d in desc.items()}
    with open(path, encoding="utf-8", errors="replace") as f:
        source = f.read()
    return task_from_description(path, desc, ProblemReference(process, shapes), source)


def release(task: Task) -> None:
    """End the process behind a problem task (load_problem starts a new one if asked again)."""
    reference = task.reference
    if isinstance(reference, ProblemReference):
        reference.process.close()
        for key in [k for k, p in _PROCESSES.items() if p is reference.process]:
            del _PROCESSES[key]


def problem_files(directory: str) -> list[str]:
    """The problem files (*.py, not starting with `_`) under `directory`, sorted; an error if none."""
    if not os.path.isdir(directory):
        raise ProblemError(f"problems folder {directory}: not a directory")
    found = sorted(os.path.join(root, f) for root, _, files in os.walk(directory) for f in files
                   if f.endswith(".py") and not f.startswith("_"))
    if not found:
        raise ProblemError(f"problems folder {directory}: no .py problem files in it")
    return found
