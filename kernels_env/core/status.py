"""The ordered status of a scored submission (DESIGN 3.3), shared by rewards and metrics."""
from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    """Outcome of scoring, best to worst; `env_error` is the environment's own failure.

    `rank` orders the policy-attributable statuses: correct (5) > wrong_output (4) >
    runtime_error (3) > timeout (2) > compile_error (1) > format_error (0).
    `env_error` has rank -1 and must never be rewarded or blamed on the policy.
    """

    CORRECT = "correct"
    WRONG_OUTPUT = "wrong_output"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    COMPILE_ERROR = "compile_error"
    FORMAT_ERROR = "format_error"
    ENV_ERROR = "env_error"

    @property
    def rank(self) -> int:
        return _RANK[self]

    @property
    def is_policy_outcome(self) -> bool:
        """False only for env_error: the result says nothing about the policy."""
        return self is not Status.ENV_ERROR

    @classmethod
    def parse(cls, value: str | Status) -> Status:
        if isinstance(value, Status):
            return value
        try:
            return cls(value)
        except ValueError:
            names = ", ".join(s.value for s in cls)
            raise ValueError(f"unknown status {value!r}; expected one of: {names}") from None

    def __str__(self) -> str:  # print as the wire value
        return self.value


_RANK = {
    Status.CORRECT: 5,
    Status.WRONG_OUTPUT: 4,
    Status.RUNTIME_ERROR: 3,
    Status.TIMEOUT: 2,
    Status.COMPILE_ERROR: 1,
    Status.FORMAT_ERROR: 0,
    Status.ENV_ERROR: -1,
}
NUM_POLICY_STATUSES = 6
