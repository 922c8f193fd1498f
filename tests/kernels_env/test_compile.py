"""Real NVRTC compiles (no GPU needed): cubin + ptxas resources on success, cleaned logs on failure."""
from __future__ import annotations

import pytest

from kernels_env.compiler.compile import CompileError, clean_log, compile_cuda, parse_ptxas_resources, resolve_arch
from kernels_env.compiler.cuda_headers import cuda_include_dirs
from kernels_env.core.config import EnvConfig

GOOD = r'''
#include <cuda_fp16.h>
extern "C" __global__ void scale(const __half* x, float* y, float a, int n) {
    __shared__ float tile[64];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { tile[threadIdx.x % 64] = __half2float(x[i]) * a; y[i] = tile[threadIdx.x % 64]; }
}
extern "C" __global__ void stacky(float* y, int n) {
    float local[64];
    for (int i = 0; i < 64; ++i) local[i] = y[(i * n) % 64];
    y[0] = local[n % 64];
}
'''


def test_compile_success_gives_cubin_and_resources():
    m = compile_cuda(GOOD, "sm_90", EnvConfig())
    assert m.arch == "sm_90" and m.cubin[:4] == b"\x7fELF"  # a real cubin is an ELF image
    assert sorted(m.kernels) == ["scale", "stacky"]
    r = m.resources["scale"]
    assert r.registers is not None and r.registers > 0
    assert r.shared_bytes == 64 * 4 and r.spill_stores_bytes == 0 and r.stack_frame_bytes == 0
    assert m.resources["stacky"].stack_frame_bytes >= 64 * 4  # a dynamically indexed local array
    assert m.seconds > 0


def test_arch_from_config_and_validation():
    assert compile_cuda(GOOD, None, EnvConfig(arch="sm_80")).arch == "sm_80"
    assert resolve_arch(None, EnvConfig()) == "sm_90"
    with pytest.raises(ValueError, match="arch 'compute_90'"):
        resolve_arch("compute_90")


def test_undefined_identifier():
    src = 'extern "C" __global__ void k(float* y) {\n  y[0] = undefined_thing;\n}\n'
    with pytest.raises(CompileError) as ei:
        compile_cuda(src, "sm_90", EnvConfig())
    log = ei.value.log
    assert 'kernel.cu(2): error: identifier "undefined_thing" is undefined' in log
    assert "ptxas" not in log and "\x00" not in log


def test_syntax_error_and_missing_header():
    src = '#include "missing_header.h"\nextern "C" __global__ void k(float* y) { y[0] = ; }\n'
    with pytest.raises(CompileError) as ei:
        compile_cuda(src, "sm_90", EnvConfig())
    assert 'kernel.cu(1): error: #include "missing_header.h" is not allowed' in ei.value.log
    with pytest.raises(CompileError, match=r"kernel.cu\(1\): error: expected an expression"):
        compile_cuda('extern "C" __global__ void k(float* y) { y[0] = ; }', "sm_90", EnvConfig())


@pytest.mark.parametrize("directive", [
    '#include "/etc/passwd"', "#include <../../../../etc/hostname>", '/* x\n */ # /**/ include "secret.h"',
    '#define H "/etc/passwd"\n#include H', "%:include </etc/hosts>", "#include_next <x.h>",
])
def test_only_cuda_headers_may_be_included(directive):
    """Untrusted code must not read the machine's files through the preprocessor."""
    with pytest.raises(CompileError) as ei:
        compile_cuda(directive + '\nextern "C" __global__ void k(float* y) {}', "sm_90", EnvConfig())
    line = directive.count("\n") + 1
    assert ei.value.log.startswith(f"kernel.cu({line}): error: #include ") and "is not allowed" in ei.value.log
    assert "root:" not in ei.value.log


@pytest.mark.skipif(not cuda_include_dirs(), reason="no CUDA headers found on this machine")
def test_cuda_headers_are_allowed():
    src = ("#include <cuda_fp16.h>\n#include \"cuda_bf16.h\"\n#include <mma.h>\n#include <cooperative_groups.h>\n"
           'extern "C" __global__ void k(__nv_bfloat16* y) { y[0] = __float2bfloat16(1.0f); }')
    assert compile_cuda(src, "sm_90", EnvConfig()).cubin


def test_log_is_bounded_keeping_first_errors():
    body = "\n".join(f"  y[{i}] = undefined_{i};" for i in range(200))
    src = 'extern "C" __global__ void k(float* y) {\n' + body + "\n}\n"
    with pytest.raises(CompileError) as ei:
        compile_cuda(src, "sm_90", EnvConfig(max_log_chars=600))
    log = ei.value.log
    assert log.startswith('kernel.cu(2): error: identifier "undefined_0" is undefined')
    assert len(log) <= 600 + 80 and "more characters of compiler log cut" in log


def test_clean_log_strips_paths():
    inc = cuda_include_dirs()[0] if cuda_include_dirs() else "/nonexistent"
    raw = (f"/tmp/tmpab12cd/kernel.cu(3): error: bad\n{inc}/cuda_fp16.hpp(10): note: here\n"
           "/tmp/xyz/other_dir/thing: oops")
    out = clean_log(raw, 10_000)
    assert "/tmp" not in out and out.startswith("kernel.cu(3): error: bad")
    if cuda_include_dirs():
        assert "<cuda>/cuda_fp16.hpp(10)" in out


def test_parse_ptxas_resources():
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'a' for 'sm_90'
ptxas info    : Function properties for a
ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, 368 bytes cmem[0]
ptxas info    : Compiling entry function 'b' for 'sm_90'
ptxas info    : Function properties for b
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 356 bytes cmem[0]"""
    r = parse_ptxas_resources(log)
    assert (r["a"].registers, r["a"].shared_bytes, r["a"].stack_frame_bytes, r["a"].spill_stores_bytes,
            r["a"].spill_loads_bytes) == (40, 2048, 16, 8, 4)
    assert (r["b"].registers, r["b"].shared_bytes) == (8, 0)
