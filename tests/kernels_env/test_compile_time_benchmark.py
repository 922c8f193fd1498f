"""benchmarks/compile_time.py: both prelude arms compile the same solutions (NVRTC on the CPU)."""
from __future__ import annotations

import pytest

from benchmarks import compile_time


def test_both_arms_compile_every_solution(monkeypatch):
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from kernels_env.build import std_prelude
    plain = next(s for s in compile_time.sources("gen", 8) if "#include" not in s)
    srcs = [plain, "#include <cuda_fp16.h>\n" + plain, "// #include <cuda_fp16.h>\n" + plain]
    seen = []
    real = std_prelude.prelude
    monkeypatch.setattr(std_prelude, "prelude", lambda s, cccl=False: seen.append(cccl) or real(s, cccl))
    for always in (True, False):
        times = compile_time.time_arm(srcs, always)
        assert len(times) == 3 and all(t > 0 for t in times)
    cccl = std_prelude._have_cccl()
    assert seen == [cccl] * 3 + [False, cccl, False]  # as needed: only the source with a CUDA include
