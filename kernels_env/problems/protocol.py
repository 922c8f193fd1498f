"""The pipe protocol between the environment and a problem's own process: pickled messages, each
preceded by its length (8 bytes, big-endian). Both ends are the environment's own code (the problem
file runs behind `worker.py`), so pickle carries NumPy arrays without copies of their metadata."""
from __future__ import annotations

import os
import pickle
import select
import time
from typing import IO, Any

HEADER = 8


class ProtocolTimeout(TimeoutError):
    """No complete message arrived before the deadline."""


class ProtocolClosed(EOFError):
    """The other end closed the pipe (its process ended)."""


def send(stream: IO[bytes], message: Any) -> None:
    """Write one message and flush."""
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(len(body).to_bytes(HEADER, "big") + body)
    stream.flush()


def _read_exactly(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, left = [], n
    while left:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise ProtocolTimeout(f"no reply within the time limit ({n - left} of {n} bytes read)")
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise ProtocolClosed("the problem's process closed its pipe")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(fd: int, timeout_s: float | None = None) -> Any:
    """Read one message from file descriptor `fd`, waiting at most `timeout_s` (None: forever)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    size = int.from_bytes(_read_exactly(fd, HEADER, deadline), "big")
    return pickle.loads(_read_exactly(fd, size, deadline))
