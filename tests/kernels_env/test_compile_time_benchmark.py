"""benchmarks/compile_time.py: every prelude arm compiles the same solutions (NVRTC on the CPU)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from benchmarks import compile_time


def test_every_prelude_arm_compiles_every_solution(monkeypatch):
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from kernels_env.compiler import std_prelude
    plain = next(s for s in compile_time.sources("gen", 8) if "#include" not in s)
    srcs = [plain, "#include <cuda_fp16.h>\n" + plain, "#include <cuda_fp16.h>\n#include <cooperative_groups.h>\n"
            + plain, "// #include <cooperative_groups.h>\n" + plain]
    std_prelude.plain_cuda_headers()  # its probe compiles once per process, before the count below
    seen = []
    real = std_prelude.prelude
    monkeypatch.setattr(std_prelude, "prelude", lambda s, cccl=False: seen.append(cccl) or real(s, cccl))
    for arm in ("always", "any-cuda", "as-needed"):
        times = compile_time.time_arm(srcs, arm)
        assert len(times) == 4 and all(t > 0 for t in times)
    c = std_prelude._have_cccl()
    fp16 = c and "cuda_fp16.h" not in std_prelude.plain_cuda_headers()  # libcu++ for cuda_fp16.h too
    assert seen == [c] * 4 + [False, c, c, False] + [False, fp16, c, False]  # as needed: cooperative_groups


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
    from kernels_env.compiler.compile import compile_cuda
    with compile_time.extra_nvrtc_options(compile_time.PCH_OPTIONS):
        log = compile_cuda(srcs[0]).log
    assert "pch" not in log.lower() and "/tmp" not in log


def test_automatic_pch_reuses_a_stale_pre_included_header(tmp_path):
    """Why the environment leaves NVRTC's automatic PCH off: a precompiled header is reused when the
    pre-included in-memory header (our per-source prelude) has changed, so one submission's prelude
    would compile the next; the submission's own leading directives are compared, and do not leak.
    If a future NVRTC checks in-memory headers, this test fails: time to look at PCH again."""
    nvrtc = pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    if nvrtc.getVersion() < (12, 8):
        pytest.skip(f"NVRTC {nvrtc.getVersion()} has no automatic PCH (12.8+)")
    from kernels_env.compiler.compile import nvrtc_options

    def stored(source: str, header: str = "") -> float:
        prog = nvrtc.createProgram(source, "kernel.cu", [header.encode()] if header else [],
                                   [b"pre.h"] if header else [])
        try:
            nvrtc.compileProgram(prog, nvrtc_options("sm_90") + compile_time.PCH_OPTIONS + [f"--pch-dir={tmp_path}"]
                                 + (["--pre-include=pre.h"] if header else []))
            ptx = nvrtc.getPTX(prog)
        finally:
            nvrtc.destroyProgram(prog)
        bits = int(re.search(r"mov\.u32\s+%r\d+, (\d+);", ptx.decode() if isinstance(ptx, bytes) else ptx)[1])
        return float(np.array(bits, np.uint32).view(np.float32))

    kernel = '#include <cuda_fp16.h>\nextern "C" __global__ void k(float* y) { y[0] = VAL; }\n'
    assert stored(kernel, "#define VAL 1.5f\n") == 1.5
    assert stored(kernel, "#define VAL 2.5f\n") == 1.5  # the first prelude's value: stale
    for v in (3.5, 4.5):  # the source's own directives differ: a new PCH, the right value
        assert stored(f"#define VAL {v}f\n" + kernel) == v


def test_phase_times_come_from_nvrtc_and_show_the_prelude_only_where_it_is_parsed(tmp_path):
    """`--phases`: NVRTC's own trace gives each phase a positive time; the prelude's libcu++ parse
    shows for a cuda_fp16.h source under the previous rule (any-cuda) and not under the current one."""
    nvrtc = pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from kernels_env.compiler import std_prelude
    if not std_prelude._have_cccl() or "cuda_fp16.h" not in std_prelude.plain_cuda_headers():
        pytest.skip(f"NVRTC {nvrtc.getVersion()}: no libcu++ or cuda_fp16.h is not plain here")
    src = next(s for s in compile_time.sources("gen", 16) if "#include <cuda_fp16.h>" in s)
    before = compile_time.phase_ms(src, "any-cuda", str(tmp_path))
    after = compile_time.phase_ms(src, "as-needed", str(tmp_path))
    assert all(before[p] > 0 and after[p] > 0 for p in compile_time.PHASES)
    assert before["cuda_fp16.h"] > 0 and after["cuda_fp16.h"] > 0
    assert before["leap_std_prelude.h"] > 5 * after["leap_std_prelude.h"]  # libcu++ parsed only before
    assert not list(tmp_path.iterdir())  # each trace read and removed
