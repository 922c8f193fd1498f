"""The two exceptions the evaluation's stages stop a run with (caught in `execute/harness.py`).

`EnvFault` is the environment's failure (the reference, input generation, the backend): the run is
an `env_error`, never blamed on the policy. `Failed` is a policy-attributable failure that already
carries the Result to report. They live in judge/ because the comparison raises `EnvFault` too.
"""
from __future__ import annotations

from kernels_env.core.result import Result


class EnvFault(Exception):
    """The environment (reference, input generation, backend) failed: env_error."""


class Failed(Exception):
    """A policy-attributable failure carrying its Result."""

    def __init__(self, result: Result) -> None:
        super().__init__(result.message)
        self.result = result
