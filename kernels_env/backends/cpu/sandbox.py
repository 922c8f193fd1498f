"""The judge's side of the cpu backend's kernel runner (runner.py): the submission's native code runs
in a separate process that holds nothing the verdict depends on.

The judge (this process: harness, pristine inputs, expected outputs, the comparison) never loads the
submission's shared object. A Runner process loads it, maps the device buffers (memfds shared with the
judge, memory.shared_empty) between guard pages and runs each launch. Only the bytes of the buffers
passed to a launch come back. The runner is started with a minimal environment, `/` as working
directory, no inherited descriptors but its socket, RLIMIT_AS / RLIMIT_FSIZE=0 / no core files, and
dies with the judge (PR_SET_PDEATHSIG); after loading the object it installs a seccomp filter
(runner.py). Each launch has a wall deadline: a runner that does not answer in time is killed
(timeout); one that dies is replaced on the next launch (runtime_error).
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kernels_env.backends.cpu.memory import shared_is_live

RUNNER = str(Path(__file__).resolve().parent / "runner.py")
RUNNER_AS_BYTES = int(os.environ.get("LEAP_CPU_RUNNER_AS_BYTES", 16 << 30))
MAX_REPLY = 1 << 16


class RunnerError(Exception):
    """The runner died or answered garbage (the submission's code did it: a runtime_error)."""


class RunnerTimeout(Exception):
    """The runner did not answer within the wall deadline; it was killed."""


class RunnerLoadError(Exception):
    """The shared object does not load in the runner, or lacks the runtime's / a kernel's symbols."""


def _child_limits() -> None:
    import ctypes
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (RUNNER_AS_BYTES, RUNNER_AS_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _printable(s: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in s[:400])


def _env() -> dict[str, str]:
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
    if os.environ.get("LD_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
    return env


class Runner:
    """One runner process for one built shared object; restarted after it dies or hangs."""

    def __init__(self, path: Path | str, kernels: list[str], load_timeout_s: float = 60.0) -> None:
        self.path, self.kernels, self.load_timeout_s = str(path), list(kernels), load_timeout_s
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.sent: set[int] = set()
        self.confined = False
        self.restarts = 0

    # ---- process ---------------------------------------------------------------------------------
    def start(self) -> None:
        self.kill()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-B", RUNNER, str(child.fileno())], pass_fds=(child.fileno(),),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/",
                env=_env(), preexec_fn=_child_limits, start_new_session=True)
        finally:
            child.close()
        self.sock, self.sent = parent, set()
        reply = self._call({"op": "load", "path": self.path, "kernels": self.kernels,
                                "seccomp": os.environ.get("LEAP_CPU_RUNNER_SECCOMP", "1") != "0"}, (), self.load_timeout_s)
        if not reply.get("ok"):
            self.kill()
            raise RunnerLoadError(f"the built code does not load: {str(reply.get('error'))[:80]}")
        missing = [str(k)[:80] for k in reply.get("missing") or []]
        if missing:
            self.kill()
            raise RunnerLoadError(f"kernels {missing} are missing from the built code (renamed by a macro?)")
        self.confined = bool(reply.get("seccomp"))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.kill()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self.proc = None
        self.sent = set()

    def __del__(self) -> None:
        try:
            self.kill()
        except Exception:
            pass

    # ---- messages --------------------------------------------------------------------------------
    def _call(self, msg: dict, fds: tuple[int, ...] | list[int], timeout_s: float) -> dict:
        assert self.sock is not None
        try:
            socket.send_fds(self.sock, [json.dumps(msg).encode()], list(fds))
        except OSError as e:
            status = self._reap()
            raise RunnerError(f"the process running the kernel is gone ({status or type(e).__name__})") from None
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise RunnerTimeout(f"no answer within {timeout_s:.3g} s of wall time")
            r, _, _ = select.select([self.sock], [], [], left)
            if r:
                break
        try:
            data = self.sock.recv(MAX_REPLY)
        except OSError:
            data = b""
        if not data:
            status = self._reap()
            raise RunnerError(f"the kernel ended the process running it ({status})")
        try:
            reply = json.loads(data)
            if not isinstance(reply, dict):
                raise ValueError
        except ValueError:
            self.kill()
            raise RunnerError("the process running the kernel answered garbage (its memory was "
                              "overwritten?)") from None
        return reply

    def _reap(self) -> str:
        proc = self.proc
        self.kill()
        if proc is None or proc.returncode is None:
            return "no exit status"
        rc = proc.returncode
        if rc < 0:
            try:
                return f"killed by {signal.Signals(-rc).name}"
            except ValueError:
                return f"killed by signal {-rc}"
        return f"exit status {rc}"

    def launch(self, kernel: str, dims: list[int], shared: int, sync: int, order: int, timeout_s: float,
               args: list[tuple], wall_s: float) -> tuple[int, str, str, int]:
        """Run one launch; (code, message, nearest buffer to a fault, CPU ns). `args` items:
        ("b", key, byte offset, fd, data_pages, offset, nbytes) | ("n",) | ("s", bytes)."""
        if not self.alive():
            self.restarts += 1
            self.start()
        free = [k for k in self.sent if not shared_is_live(k)]
        self.sent.difference_update(free)
        bufs: list[list[Any]] = []
        fds, wire = [], []
        for a in args:
            if a[0] == "b":
                _, key, off, fd, data_pages, offset, nbytes = a
                if key not in self.sent and key not in {b[0] for b in bufs}:
                    bufs.append([key, data_pages, offset, nbytes])
                    fds.append(fd)
                wire.append(["b", key, off])
            elif a[0] == "n":
                wire.append(["n"])
            else:
                wire.append(["s", a[1].hex()])
        msg = {"op": "launch", "kernel": kernel, "dims": list(dims), "shared": int(shared), "sync": int(sync),
               "order": int(order), "timeout": float(timeout_s), "args": wire, "bufs": bufs, "free": free}
        reply = self._call(msg, fds, wall_s)
        self.sent.update(b[0] for b in bufs)
        code, text, near, cpu_ns = reply.get("code"), reply.get("msg"), reply.get("near"), reply.get("cpu_ns")
        if not (isinstance(code, int) and isinstance(text, str) and isinstance(near, str)
                and isinstance(cpu_ns, int)):
            self.kill()
            raise RunnerError("the process running the kernel answered garbage (its memory was overwritten?)")
        return code, _printable(text), _printable(near), max(0, cpu_ns)
