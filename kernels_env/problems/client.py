"""The environment's side of a problem's own process (worker.py): start it, read the problem's
description within a time budget, and ask it for reference outputs and torch timings. One process
per (problem file, torch device); it ends with the environment's process."""
from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
from typing import Any

import numpy as np

from kernels_env.problems import protocol

BUILD_BUDGET_S = 300.0  # importing the file, building the model and the first forward, per size set
FORWARD_BUDGET_S = 300.0  # one reference forward on given inputs


class ProblemError(ValueError):
    """A problem file that cannot become a task; the message names the file and what is wrong."""


class ProblemProcess:
    """A running `worker.py` for one problem file on one torch device ("cpu" or "cuda")."""

    def __init__(self, path: str, device: str, seed: int, build_budget_s: float = BUILD_BUDGET_S) -> None:
        self.path, self.device, self.seed = path, device, seed
        self._lock = threading.Lock()
        self._proc = subprocess.Popen([sys.executable, "-m", "kernels_env.problems.worker", path, device, str(seed)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_worker_env())
        atexit.register(self.close)
        try:
            self.description: dict[str, Any] = self._reply(build_budget_s, "building its reference")
        except ProblemError:
            self.close()  # the worker ends after reporting a problem it cannot build
            raise

    def _reply(self, timeout_s: float, doing: str) -> Any:
        assert self._proc.stdout is not None
        try:
            message = protocol.receive(self._proc.stdout.fileno(), timeout_s)
        except protocol.ProtocolTimeout:
            self.close()
            raise ProblemError(f"problem {self.path}: {doing} took longer than the {timeout_s:g} s budget") from None
        except protocol.ProtocolClosed:
            code = self.close()
            raise ProblemError(f"problem {self.path}: its process ended while {doing} (exit code {code}); "
                               "is torch installed?") from None
        if "error" in message:
            raise ProblemError(f"problem {self.path}: {message['error']}")
        return message["ok"]

    def _ask(self, request: dict[str, Any], timeout_s: float, doing: str) -> Any:
        with self._lock:
            if self._proc.poll() is not None or self._proc.stdin is None:
                raise ProblemError(f"problem {self.path}: its process is not running")
            protocol.send(self._proc.stdin, request)
            return self._reply(timeout_s, doing)

    def forward(self, which: str, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The model's outputs for these inputs and parameters (size set `which`'s model)."""
        return self._ask({"op": "forward", "set": which, "arrays": arrays}, FORWARD_BUDGET_S, "computing a reference")

    def time(self, which: str, arrays: dict[str, np.ndarray], budget_s: float, flush_bytes: int) -> dict[str, Any]:
        """{"eager_ms", "compile_ms"}: run times in ms (compile_ms None with "compile_error" where it fails)."""
        # torch.compile's first call compiles: give it the budget plus the build budget before giving up
        return self._ask({"op": "time", "set": which, "arrays": arrays, "budget_s": budget_s,
                          "flush_bytes": flush_bytes}, budget_s + BUILD_BUDGET_S, "timing torch")

    def close(self) -> int | None:
        """End the process (idempotent); its exit code."""
        proc = self._proc
        if proc.poll() is None:
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None and not proc.stdout.closed:
            proc.stdout.close()
        return proc.returncode


def _worker_env() -> dict[str, str]:
    """This environment, with this copy of kernels_env first on the worker's import path."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env
