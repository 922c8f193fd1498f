"""Class I (isolation_corpus.py): native code attacking the judge, on the cpu backend, in order on one
device (a case that kills its runner is followed by a control that must still be scored)."""
from __future__ import annotations

import os
import time

import pytest

from kernels_env.execute.score import score
from kernels_env.core.status import Status
from tests.kernels_env.broken_corpus import TASKS, corpus_config
from tests.kernels_env.hostile_corpus import PWNED, leaked
from tests.kernels_env.isolation_corpus import ISOLATION_CASES


@pytest.fixture(scope="module")
def device():
    from kernels_env.backends import get_device
    dev = get_device("cpu", corpus_config("cpu"))
    yield dev
    dev.close()


@pytest.mark.parametrize("case", ISOLATION_CASES, ids=[c.id for c in ISOLATION_CASES])
def test_isolation_case(device, case):
    if os.path.exists(PWNED):
        os.unlink(PWNED)
    t0 = time.monotonic()
    r = score(TASKS[case.task], case.text, case.config("cpu"), device=device)
    seconds = time.monotonic() - t0
    assert not os.path.exists(PWNED), f"{case.id}: the kernel wrote the host file system"
    assert r.status is not Status.ENV_ERROR, f"{case.id}: env_error: {r.message}\n{r.details[-2000:]}"
    assert r.status.value in case.expected, (
        f"{case.id}: got {r.status.value} ({r.message}), expected one of {sorted(case.expected)}")
    shown = leaked(r.message + "\n" + r.details)
    assert not shown, f"{case.id}: the result shows {shown}: {r.message}"
    assert seconds < 60.0, f"{case.id} took {seconds:.1f} s"  # under 15 s idle: holds at 4x load


def test_runner_is_confined(device):
    """The runner installed its seccomp filter (x86_64 Linux) and is a different process."""
    import platform
    from kernels_env.core.program import CompiledModule  # noqa: F401  (the module exists)
    from kernels_env.execute.score import prepare
    cfg = corpus_config("cpu")
    prep = prepare(TASKS["corpus_affine"], ISOLATION_CASES[-3].text, cfg)
    program = device.load(prep.compiled, cfg)
    assert program.runner.proc.pid != os.getpid()
    if platform.machine() == "x86_64":
        assert program.runner.confined


def test_shared_buffers_views_and_empty():
    """Pointer arguments resolve to (buffer, offset) for views and for an empty array; an array that is
    not a device buffer is refused (runtime_error), never passed as a raw address."""
    import numpy as np
    from kernels_env.backends.cpu.memory import shared_empty, shared_lookup
    a = shared_empty((100,), "float32")
    key, off, *_ = shared_lookup(a[10:].ctypes.data)
    assert off == 40
    e = shared_empty((0,), "float32")
    assert shared_lookup(e.ctypes.data) is not None
    assert shared_lookup(np.zeros(4, np.float32).ctypes.data) is None
