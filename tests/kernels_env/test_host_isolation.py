"""A GPU whose kernels can dereference the process's host memory (HMM, ATS) is refused unless allowed.

CPU tests drive `check_host_isolation`, `get_device` and the attribute query with fakes; the GPU test
checks the device's answer against what a trusted kernel's read of a host heap address actually does
(`scripts/host_memory_probe.py`, in its own process)."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernels_env import backends
from kernels_env.backends import HostMemoryReachable, check_host_isolation, get_device
from kernels_env.backends import cupy_backend
from kernels_env.cli import _config, build_parser
from kernels_env.core.config import EnvConfig
from kernels_env.execute.result_cache import cache_key
from leap_jax.train.config_env import EnvCfg
from leap_jax.train.config_loader import ConfigError

ROOT = Path(__file__).resolve().parents[2]


class FakeDevice:
    def __init__(self, reachable: bool | None) -> None:
        self.host_memory_reachable = reachable
        self.device_id = 3
        self.closed = False

    def close(self) -> None:
        self.closed = True


class FakeRuntime:
    def __init__(self, answer: object) -> None:
        self.answer = answer
        self.asked: list[tuple[int, int]] = []

    def deviceGetAttribute(self, attr: int, device_id: int) -> int:  # noqa: N802 (CUDA's name)
        self.asked.append((attr, device_id))
        if isinstance(self.answer, Exception):
            raise self.answer
        return int(self.answer)  # type: ignore[call-overload]


@pytest.mark.parametrize("answer, expected", [(1, True), (0, False), (RuntimeError("unknown attribute"), None)])
def test_the_query_reads_cudas_pageable_memory_access_attribute(answer: object, expected: bool | None) -> None:
    rt = FakeRuntime(answer)
    assert cupy_backend.pageable_memory_access(rt, 2) is expected
    assert rt.asked == [(88, 2)]  # cudaDevAttrPageableMemoryAccess, on the device asked about


def test_a_device_whose_kernels_reach_host_memory_is_closed_and_refused() -> None:
    dev = FakeDevice(True)
    with pytest.raises(HostMemoryReachable) as err:
        check_host_isolation(dev, EnvConfig(backend="cupy"))
    msg = str(err.value)
    assert "GPU 3" in msg and "cudaDevAttrPageableMemoryAccess = 1" in msg
    assert "uvm_disable_hmm=1" in msg and "allow_host_memory_access=True" in msg
    assert dev.closed
    with pytest.raises(HostMemoryReachable):  # no config: the default refuses too
        check_host_isolation(FakeDevice(True), None)


@pytest.mark.parametrize("reachable, allowed", [(True, True), (False, False), (None, False), (False, True)])
def test_other_devices_pass_untouched(reachable: bool | None, allowed: bool) -> None:
    dev = FakeDevice(reachable)
    assert check_host_isolation(dev, EnvConfig(allow_host_memory_access=allowed)) is dev
    assert not dev.closed
    assert check_host_isolation(object(), None) is not None  # a device that does not say (cpu backend)


def test_get_device_refuses_a_reaching_gpu_unless_the_config_allows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[FakeDevice] = []

    def fake_cupy_device() -> FakeDevice:
        made.append(FakeDevice(True))
        return made[-1]

    monkeypatch.setattr(cupy_backend, "CupyDevice", fake_cupy_device)
    with pytest.raises(HostMemoryReachable):
        get_device("cupy", EnvConfig(backend="cupy"))
    assert made[-1].closed
    dev = get_device("cupy", EnvConfig(backend="cupy", allow_host_memory_access=True))
    assert dev is made[-1] and not dev.closed
    assert backends.get_device("cpu").name == "cpu"  # the cpu backend is never asked


def test_the_setting_is_checked_and_passed_on() -> None:
    with pytest.raises(ValueError, match="allow_host_memory_access='yes'"):
        EnvConfig(allow_host_memory_access="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="env.allow_host_memory_access"):
        EnvCfg(allow_host_memory_access=1).check()  # type: ignore[arg-type]
    assert EnvCfg(allow_host_memory_access=True).env_config(timing=False, seed=0).allow_host_memory_access
    assert not EnvCfg().env_config(timing=False, seed=0).allow_host_memory_access
    parse = build_parser().parse_args
    assert _config(parse(["check-suite", "--backend", "cpu", "--allow-host-memory-access"])).allow_host_memory_access
    assert not _config(parse(["check-suite", "--backend", "cpu"])).allow_host_memory_access


def test_results_scored_with_host_memory_allowed_are_kept_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cached result scored where kernels could reach host memory is never served to a config that
    forbids it, and the default config keeps the result keys it had before the setting existed."""
    text = "```cuda\n__global__ void k() {}\n```\n```launch\nk<<<1, 1>>>();\n```"
    default = cache_key("relu", text, EnvConfig())
    assert default != cache_key("relu", text, EnvConfig(allow_host_memory_access=True))
    monkeypatch.setattr(EnvConfig, "to_dict", lambda self: {k: v for k, v in dataclasses.asdict(self).items()
                                                            if k != "allow_host_memory_access"})
    assert cache_key("relu", text, EnvConfig()) == default  # as a config without the field


@pytest.mark.gpu
def test_the_devices_answer_matches_what_a_kernels_host_read_does() -> None:
    """`host_memory_reachable` against a trusted kernel's read of a host heap address in another
    process: reachable iff the read returns the host's value; get_device refuses iff reachable."""
    pytest.importorskip("cupy")
    if backends.gpu_count() == 0:
        pytest.skip("no CUDA GPU")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "host_memory_probe.py")], capture_output=True,
                         text=True, timeout=240, env=env, cwd=ROOT)
    probes = {d["probe"]: d for d in (json.loads(ln) for ln in out.stdout.splitlines() if ln.startswith("{"))}
    assert "heap" in probes, out.stdout + out.stderr
    read_landed = bool(probes["heap"].get("read_matches"))
    reachable = cupy_backend.pageable_memory_access(__import__("cupy").cuda.runtime, 0)
    assert reachable is read_landed, probes
    if reachable:
        with pytest.raises(HostMemoryReachable):
            get_device("cupy", EnvConfig(backend="cupy"))
    else:
        dev = get_device("cupy", EnvConfig(backend="cupy"))
        assert dev.host_memory_reachable is False
        dev.close()
