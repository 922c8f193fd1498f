"""The process a problem file runs in: `python -m kernels_env.problems.worker PATH DEVICE SEED`.

It imports the problem file once per size set (the file's constants, then the file's `SMALL_SIZES`
overrides), builds `Model(*get_init_inputs())` and `get_inputs()` under a fixed torch seed, runs
`forward` once, and answers on stdout (protocol.py) with the problem's description; then it serves
requests: `forward` (the reference outputs for given inputs and parameters) and `time` (torch eager
and torch.compile run times). The problem's own prints go to stderr. Only this module imports
torch; the environment's side (client.py) never does.
"""
from __future__ import annotations

import copy
import importlib.util
import inspect
import os
import sys
import time
import traceback
from types import ModuleType
from typing import Any

import numpy as np

from kernels_env.problems import protocol
from kernels_env.tasks.spec import DTYPES

SMALL_SET_NAME = "SMALL_SIZES"
WARMUP_RUNS = 3
MIN_TIMED_RUNS = 5
MAX_TIMED_RUNS = 100


class ProblemFault(Exception):
    """The problem file is not usable; the message names what is wrong."""


def _constants(module: ModuleType) -> dict[str, int | float]:
    """The module's public int and float constants, in definition order (bools excluded)."""
    return {k: v for k, v in vars(module).items()
            if not k.startswith("_") and isinstance(v, (int, float)) and not isinstance(v, bool)}


def _dtype_name(t: Any, what: str) -> str:
    name = str(t.dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise ProblemFault(f"{what} has dtype {name}; expected one of {DTYPES}")
    return name


def _tensors(torch: Any, values: Any, what: str) -> list[Any]:
    items = list(values) if isinstance(values, (list, tuple)) else [values]
    for i, v in enumerate(items):
        if not isinstance(v, torch.Tensor):
            raise ProblemFault(f"{what} item {i} is a {type(v).__name__}; expected torch tensors")
    return items


class Problem:
    """One size set of the problem: its module, model and sample inputs on `device`."""

    def __init__(self, torch: Any, path: str, device: str, seed: int, which: str, overrides: dict[str, Any]) -> None:
        self.torch, self.device = torch, device
        spec = importlib.util.spec_from_file_location(f"_kernels_env_problem_{which}", path)
        if spec is None or spec.loader is None:
            raise ProblemFault("cannot be imported as a Python module")
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            raise ProblemFault(f"fails to import: {type(e).__name__}: {e}") from None
        for name in ("Model", "get_inputs"):
            if not callable(getattr(module, name, None)):
                raise ProblemFault(f"has no `{name}`; a problem file defines class Model(nn.Module), "
                                   "get_inputs() and get_init_inputs()")
        vars(module).update(overrides)
        self.module = module
        torch.manual_seed(seed)
        init: list[Any] = list(getattr(module, "get_init_inputs", lambda: [])())
        self.model = module.Model(*init).to(device)
        if not isinstance(self.model, torch.nn.Module):
            raise ProblemFault(f"Model(*get_init_inputs()) is a {type(self.model).__name__}; expected a torch.nn.Module")
        self.inputs = _tensors(torch, module.get_inputs(), "get_inputs()")
        self.args = self._argument_names(len(self.inputs))
        self.params = {n.replace(".", "_"): p for n, p in self.model.named_parameters()}
        self.timed: dict[str, Any] | None = None
        self.float64 = True  # the reference runs in float64 until the model refuses it
        self.out_dtypes: list[Any] | None = None  # the dtypes of forward's outputs in the model's precision

    def _argument_names(self, count: int) -> list[str]:
        params = list(inspect.signature(self.model.forward).parameters.values())
        named = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        return named[:count] if len(named) >= count else [f"input{i}" for i in range(count)]

    def call(self, inputs: list[Any]) -> list[Any]:
        with self.torch.no_grad():
            out = self.model(*inputs)
        return _tensors(self.torch, out, "forward()'s output")

    def describe(self) -> dict[str, Any]:
        outputs = self.call([t.to(self.device) for t in self.inputs])
        return {
            "doc": (self.module.__doc__ or "").strip(),
            "constants": _constants(self.module),
            "output_names": list(getattr(self.module, "OUTPUT_NAMES", ())),
            "tolerance": getattr(self.module, "TOLERANCE", None),
            "inputs": [{"name": n, "dtype": _dtype_name(t, f"get_inputs() item {i}"), "shape": tuple(t.shape),
                        "min": float(t.min()) if t.numel() else 0.0, "max": float(t.max()) if t.numel() else 0.0}
                       for i, (n, t) in enumerate(zip(self.args, self.inputs, strict=True))],
            "params": [{"name": n, "dtype": _dtype_name(p, f"parameter {n}"), "shape": tuple(p.shape)}
                       for n, p in self.params.items()],
            "outputs": [{"dtype": _dtype_name(t, f"forward() output {i}"), "shape": tuple(t.shape)}
                        for i, t in enumerate(outputs)],
        }

    def load(self, arrays: dict[str, np.ndarray]) -> list[Any]:
        """Copy the parameters from `arrays` into the model; the forward inputs on the device."""
        torch = self.torch
        with torch.no_grad():
            for name, p in self.params.items():
                p.copy_(torch.from_numpy(np.ascontiguousarray(arrays[name])).reshape(p.shape))
        return [torch.from_numpy(np.ascontiguousarray(arrays[n])).to(self.device).reshape(t.shape)
                for n, t in zip(self.args, self.inputs, strict=True)]

    def forward(self, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The reference outputs for `arrays`: computed in float64 and cast once to the outputs' own
        dtypes, the judge's rule for every task's expected values (a float32 reference is itself off by
        the rounding a kernel is judged against); in the model's own precision where it cannot run in
        float64."""
        inputs = self.load(arrays)
        outs = self._call_float64(inputs) if self.float64 else None
        if outs is None:
            outs = self.call(inputs)
        return [t.detach().cpu().numpy().reshape(t.shape or (1,)) for t in outs]

    def _call_float64(self, inputs: list[Any]) -> list[Any] | None:
        """`call` on a float64 copy of the model and of the floating inputs, each output cast back to the
        dtype the model gives it; None (and float64 off from then on) when the model fails in float64."""
        torch = self.torch
        try:
            if self.out_dtypes is None:
                self.out_dtypes = [t.dtype for t in self.call(inputs)]
            model64 = copy.deepcopy(self.model).double()
            wide = [t.double() if t.is_floating_point() else t for t in inputs]
            with torch.no_grad():
                out = _tensors(torch, model64(*wide), "forward()'s output")
            return [t.to(d) for t, d in zip(out, self.out_dtypes, strict=True)]
        except Exception:
            self.float64 = False
            return None

    def time(self, arrays: dict[str, np.ndarray], budget_s: float, flush_bytes: int) -> dict[str, Any]:
        """Run times (ms) of torch eager and of torch.compile on these inputs, measured once per size
        set (later calls get the same numbers); compile_ms None with compile_error where it fails."""
        if self.timed is None:
            inputs = self.load(arrays)
            self.timed = {"eager_ms": self._times(self.model, inputs, budget_s, flush_bytes)}
            try:
                compiled = self.torch.compile(self.model)
                self.timed["compile_ms"] = self._times(compiled, inputs, budget_s, flush_bytes)
            except Exception as e:
                self.timed["compile_ms"], self.timed["compile_error"] = None, f"{type(e).__name__}: {e}"[:500]
        return self.timed

    def _times(self, fn: Any, inputs: list[Any], budget_s: float, flush_bytes: int) -> list[float]:
        torch, cuda = self.torch, self.device.startswith("cuda")
        scrub = torch.empty(flush_bytes // 4, dtype=torch.float32, device=self.device) if cuda and flush_bytes else None
        with torch.no_grad():
            for _ in range(WARMUP_RUNS):
                fn(*inputs)
            times: list[float] = []
            stop = time.monotonic() + budget_s
            while len(times) < MAX_TIMED_RUNS and (len(times) < MIN_TIMED_RUNS or time.monotonic() < stop):
                if scrub is not None:
                    scrub.zero_()  # the L2 flush the kernel's runs get too
                if cuda:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    fn(*inputs)
                    end.record()
                    end.synchronize()
                    times.append(float(start.elapsed_time(end)))
                else:
                    t0 = time.perf_counter()
                    fn(*inputs)
                    times.append((time.perf_counter() - t0) * 1e3)
        return times


def _serve(path: str, device: str, seed: int, reply: Any) -> None:
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference is float32 math, as the tasks' are
    torch.backends.cudnn.allow_tf32 = False
    sets = {"eval": Problem(torch, path, device, seed, "eval", {})}
    small = getattr(sets["eval"].module, SMALL_SET_NAME, None)
    if small is not None and not isinstance(small, dict):
        raise ProblemFault(f"{SMALL_SET_NAME} is a {type(small).__name__}; expected a dict of constant overrides")
    unknown = sorted(set(small or ()) - set(_constants(sets["eval"].module)))
    if unknown:
        raise ProblemFault(f"{SMALL_SET_NAME} names {unknown}, not int or float constants of the file")
    sets["small"] = Problem(torch, path, device, seed, "small", dict(small)) if small else sets["eval"]
    protocol.send(reply, {"ok": {k: p.describe() for k, p in sets.items()}})
    while True:
        try:
            request = protocol.receive(0)
        except protocol.ProtocolClosed:
            return
        try:
            problem = sets[request["set"]]
            if request["op"] == "forward":
                result: Any = problem.forward(request["arrays"])
            else:
                result = problem.time(request["arrays"], request["budget_s"], request["flush_bytes"])
            protocol.send(reply, {"ok": result})
        except Exception as e:
            protocol.send(reply, {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc(limit=8)})


def main(argv: list[str]) -> int:
    path, device, seed = argv[0], argv[1], int(argv[2])
    reply = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # the problem's prints must not reach the protocol's pipe
    sys.stdout = sys.stderr
    try:
        _serve(path, device, seed, reply)
    except ProblemFault as e:
        protocol.send(reply, {"error": str(e)})
    except Exception as e:
        protocol.send(reply, {"error": f"failed: {type(e).__name__}: {e}", "trace": traceback.format_exc(limit=8)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
