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
from collections import OrderedDict
from dataclasses import replace
from typing import Any

import numpy as np

from kernels_env.problems.client import ProblemError, ProblemProcess
from kernels_env.tasks.domains import DEFAULT_MAX_ABS, Domain
from kernels_env.tasks.spec import Buffer, Scalar, Task

KERNELBENCH_TOLERANCE = (1e-2, 1e-2)  # KernelBench's atol, rtol
TAG = "problem"
NAME_PREFIX = "problem:"  # a task name that names its file: problem:/abs/path.py (problem_task)
MAX_PROCESSES = 8  # problem processes kept per environment process; the least recently used ends first
_PROCESSES: OrderedDict[tuple[str, str, int], ProblemProcess] = OrderedDict()


def torch_device(backend: str) -> str:
    """The torch device a problem's reference runs on for `backend` (the GPU for cupy)."""
    return "cuda" if backend == "cupy" else "cpu"


def _process(path: str, device: str, seed: int) -> ProblemProcess:
    """The running process of (file, torch device, seed), started if needed (MAX_PROCESSES kept)."""
    key = (path, device, seed)
    if key in _PROCESSES:
        _PROCESSES.move_to_end(key)
    else:
        while len(_PROCESSES) >= MAX_PROCESSES:
            _PROCESSES.popitem(last=False)[1].close()
        _PROCESSES[key] = ProblemProcess(path, device, seed)
    return _PROCESSES[key]


class ProblemReference:
    """A problem task's reference: `forward` in the problem's process, per trial, on the torch device
    that matches the arrays (CUDA for CuPy arrays, else the CPU)."""

    def __init__(self, path: str, seed: int, input_shapes: dict[str, dict[str, tuple[int, ...]]]) -> None:
        self.path, self.seed, self.input_shapes = path, seed, input_shapes

    def __repr__(self) -> str:  # what the harness's expected-output cache keys on: one per file and seed
        return f"ProblemReference({self.path!r}, seed={self.seed})"

    def _size_set(self, arrays: dict[str, Any]) -> str:
        for which, shapes in self.input_shapes.items():
            if all(tuple(arrays[n].shape) == s for n, s in shapes.items()):
                return which
        got = {n: tuple(arrays[n].shape) for n in next(iter(self.input_shapes.values()))}
        raise ProblemError(f"problem {self.path}: inputs of shapes {got} match no size set")

    def _host(self, arrays: dict[str, Any]) -> tuple[ProblemProcess, str, dict[str, np.ndarray]]:
        which = self._size_set(arrays)
        on_gpu = any(not isinstance(arrays[n], np.ndarray) for n in self.input_shapes[which])
        process = _process(self.path, "cuda" if on_gpu else "cpu", self.seed)
        return process, which, {n: _to_numpy(arrays[n]) for n in self.input_shapes[which]}

    def __call__(self, xp: Any, **arrays: Any) -> Any:
        process, which, host = self._host(arrays)
        outs = [xp.asarray(o) for o in process.forward(which, host)]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def torch_times(self, inputs: dict[str, Any], budget_s: float, flush_bytes: int) -> dict[str, Any]:
        """Run times (ms) of torch eager and torch.compile on `inputs` (measured once per size set)."""
        process, which, host = self._host(inputs)
        return process.time(which, host, budget_s, flush_bytes)


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
    return Buffer(spec["name"], spec["dtype"], shape, domain=_real(spec["dtype"]))


def _real(dtype: str) -> Domain:
    """A problem's real inputs: the default reach, declared. A problem file carries its author's fixed
    tolerance and no input-derived term (the suite's norms and scans have one: Task.slack), so its
    trials leave out the structured draw's shifted blocks and spikes, as the generated family's do
    (execute/domain_draws.py): a correct float32 norm rounds a block of mean 90 and spread 0.018
    beyond a fixed 1e-3."""
    return Domain("real", max_abs=DEFAULT_MAX_ABS[dtype])


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
                                                       f"{where}: parameter {p['name']!r}"),
                      domain=None if p["dtype"].startswith("int") else _real(p["dtype"]))
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


def load_problem(path: str, backend: str = "cpu", seed: int | None = 0, name: str | None = None) -> Task:
    """The Task of the problem file at `path` (named `name`, else the file's stem), described by its
    process on `backend`'s torch device; its reference runs where its arrays are. `seed` is the torch
    seed the file's Model is built under (None: 0); the trials' inputs are drawn by the environment."""
    seed = 0 if seed is None else seed
    if not os.path.isfile(path):
        raise ProblemError(f"problem {path}: no such file")
    if not path.endswith(".py"):
        raise ProblemError(f"problem {path}: not a Python file (expected a .py file with a Model class)")
    path = os.path.abspath(path)
    desc = _process(path, torch_device(backend), seed).description
    shapes = {w: {a["name"]: tuple(a["shape"]) for a in d["inputs"]} | {p["name"]: tuple(p["shape"]) for p in d["params"]}
              for w, d in desc.items()}
    with open(path, encoding="utf-8", errors="replace") as f:
        source = f.read()
    task = task_from_description(path, desc, ProblemReference(path, seed, shapes), source)
    return task if name is None else replace(task, name=name)


def problem_task(name: str) -> Task:
    """The Task a `problem:/abs/path.py` name stands for (how processes that get only task names, the
    pool's workers, find a problem task), described on this machine's default backend."""
    if not name.startswith(NAME_PREFIX):
        raise ProblemError(f"task name {name!r} does not name a problem file (expected {NAME_PREFIX}/path.py)")
    from kernels_env.backends import resolve_backend
    return load_problem(name[len(NAME_PREFIX):], resolve_backend("auto"), name=name)


def release(task: Task) -> None:
    """End the processes behind a problem task (a later reference call starts them again)."""
    reference = task.reference
    if isinstance(reference, ProblemReference):
        for key in [k for k in _PROCESSES if k[0] == reference.path]:
            _PROCESSES.pop(key).close()


def problem_files(directory: str) -> list[str]:
    """The problem files (*.py, not starting with `_`) under `directory`, sorted; an error if none."""
    if not os.path.isdir(directory):
        raise ProblemError(f"problems folder {directory}: not a directory")
    found = sorted(os.path.join(root, f) for root, _, files in os.walk(directory) for f in files
                   if f.endswith(".py") and not f.startswith("_"))
    if not found:
        raise ProblemError(f"problems folder {directory}: no .py problem files in it")
    return found


def register_problems(directory: str) -> list[str]:
    """Register every problem file under `directory` as a task named problem:/abs/path.py and return
    the names (sorted), so a training run's task list can hold them; described with CPU torch (the
    GPU stays the trainer's), each file's process ended once described. Already registered: kept."""
    from kernels_env.tasks import get_task, register
    names = []
    for path in problem_files(directory):
        name = NAME_PREFIX + os.path.abspath(path)
        try:
            get_task(name)
        except KeyError:
            task = load_problem(path, "cpu", name=name)
            release(task)
            register(task, listed=False)  # list_tasks stays the hand-written suite
        names.append(name)
    return names
