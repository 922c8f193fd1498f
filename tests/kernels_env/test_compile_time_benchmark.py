"""benchmarks/compile_time.py: every prelude arm compiles the same solutions (NVRTC on the CPU)."""
from __future__ import annotations

import pytest

from benchmarks import compile_time


def test_every_prelude_arm_compiles_every_solution(monkeypatch):
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from kernels_env.build import std_prelude
    plain = next(s for s in compile_time.sources("gen", 8) if "#include" not in s)
    srcs = [plain, "#include <cuda_fp16.h>\n" + plain, "#include <cuda_fp16.h>\n#include <cooperative_groups.h>\n"
            + plain, "// #include <cooperative_groups.h>\n" + plain]
    seen = []
    real = std_prelude.prelude
    monkeypatch.setattr(std_prelude, "prelude", lambda s, cccl=False: seen.append(cccl) or real(s, cccl))
    for arm in ("always", "any-cuda", "as-needed"):
        times = compile_time.time_arm(srcs, arm)
        assert len(times) == 4 and all(t > 0 for t in times)
    c = std_prelude._have_cccl()
    assert seen == [c] * 4 + [False, c, c, False] + [False, False, c, False]  # as needed: only cooperative_groups


def test_the_pch_arm_compiles_the_same_cubins_and_logs_no_paths():
    """The `pch` arm (NVRTC's automatic precompiled headers) gives the cubins of the plain path, through
    compile_cuda and its memory cap, and its log names no PCH file."""
    nvrtc = pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    if nvrtc.getVersion() < (12, 8):
        pytest.skip(f"NVRTC {nvrtc.getVersion()} has no automatic PCH (12.8+)")
    srcs = compile_time.sources("gen", 3)
    plain: list[bytes] = []
    pch: list[bytes] = []
    compile_time.time_arm(srcs, "as-needed", plain)
    compile_time.time_arm(srcs * 2, "pch", pch)  # the second time round, the headers are reused
    assert pch == plain * 2
    from kernels_env.build.compile import compile_cuda
    with compile_time.pch_compiles():
        log = compile_cuda(srcs[0]).log
    assert "pch" not in log.lower() and "/tmp" not in log
