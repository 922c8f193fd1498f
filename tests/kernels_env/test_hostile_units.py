"""Unit tests of the hardening layers the hostile corpus relies on (each layer on its own, so one
layer's bug is not hidden by another)."""
from __future__ import annotations

import pytest

from kernels_env.compiler.compile import CompileError, log_mentions_foreign_file, redact_paths
from kernels_env.source.source_text import directives

SECRET = "/etc/passwd"


@pytest.mark.parametrize("src", [
    f'#include "{SECRET}"', f'\f#\finclude "{SECRET}"', f'\v # include "{SECRET}"', f'#inc\\\nlude "{SECRET}"',
    f'#  \\  \n include "{SECRET}"', f'#/* c */include "{SECRET}"', f'/* c */ #include "{SECRET}"',
    f'%:include "{SECRET}"', f'%\\\n:include "{SECRET}"', f'const char* s = R"(\n/*)";\n#include "{SECRET}"\n// */',
    f"int a = 1'0 + '/*';\n#include \"{SECRET}\"\n// */", f'x = "/*";\n#include "{SECRET}"',
    f'/*\n*/ #include "{SECRET}"', f'#define F "{SECRET}"\n#include F', f'#include_next "{SECRET}"',
    f'R"x(\n)x"\n#include "{SECRET}"', f'u8R"(\n)"\n#include "{SECRET}"',
])
def test_directive_scanner_finds_disguised_includes(src):
    assert any(name.startswith("include") for _, name, _ in directives(src)), src


@pytest.mark.parametrize("src", [
    f'// c \\\n#include "{SECRET}"', f'R"x(\n#include "{SECRET}"\n)x"', f'int x; /*\n#include "{SECRET}"\n*/',
    f'"#include \\"{SECRET}\\""',
])
def test_directive_scanner_ignores_what_the_compiler_ignores(src):
    assert not [d for d in directives(src) if d[1].startswith("include")], src


def test_redact_paths():
    assert redact_paths("/home/u/x/.venv/lib/site.py:3: boom") == "<path>/site.py:3: boom"
    assert redact_paths("kernel.cu(3): error: N / 2 / 3") == "kernel.cu(3): error: N / 2 / 3"
    assert redact_paths("<cuda>/crt/mma.h(1)") == "<cuda>/crt/mma.h(1)"
    assert "/etc" not in redact_paths('cannot open "/etc/shadow"')


def test_foreign_file_in_log_is_detected():
    assert log_mentions_foreign_file('/etc/passwd(1): error: this declaration has no type\n  root:x:0:0')
    assert not log_mentions_foreign_file('kernel.cu(3): error: expected a ";"')


def test_nvrtc_withholds_a_log_from_a_foreign_file(monkeypatch):
    """With the include check switched off, the compiler-side guard still keeps the file out."""
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from kernels_env.compiler import compile as C
    monkeypatch.setattr(C, "check_includes", lambda source: None)
    with pytest.raises(CompileError) as ei:
        C.compile_cuda(f'#include "{SECRET}"\nextern "C" __global__ void k() {{}}', "sm_90")
    assert "root:" not in ei.value.log and SECRET not in ei.value.log


def test_cpu_build_refuses_files_outside_the_allowed_headers():
    from kernels_env.backends.cpu.build import BuildError, build
    with pytest.raises(BuildError) as ei:
        build(f'#include "{SECRET}"\nint x;')
    # the compiler cannot see the file (private root: "No such file"; Landlock only: "Permission
    # denied"); without either, the -H check withholds the log
    log = ei.value.log
    assert "root:" not in log and any(w in log for w in ("No such file", "Permission denied", "withheld"))


def test_cpu_build_log_has_no_header_listing():
    from kernels_env.backends.cpu.build import BuildError, build
    with pytest.raises(BuildError) as ei:
        build("#include <cmath>\nint x = ;")
    assert "/usr/include" not in ei.value.log and "expected" in ei.value.log


# ---- the compile memory cap (kernels_env/compiler/memory_cap.py) ------------------------------------
def test_compile_memory_setting_names_a_bad_value():
    from kernels_env.compiler import memory_cap
    assert memory_cap.compile_memory_bytes({}) == 2 << 30 == memory_cap.DEFAULT_BYTES
    assert memory_cap.compile_memory_bytes({"LEAP_COMPILE_MEMORY_BYTES": str(256 << 20)}) == 256 << 20
    for bad in ("lots", "-1", "1000"):
        with pytest.raises(ValueError, match=f"LEAP_COMPILE_MEMORY_BYTES='{bad}'; expected a whole number"):
            memory_cap.compile_memory_bytes({"LEAP_COMPILE_MEMORY_BYTES": bad})
    from kernels_env.core.units import describe_bytes
    assert describe_bytes(2 << 30) == "2 GiB" and describe_bytes(384 << 20) == "384 MiB"


def test_host_compiler_template_bomb_is_a_compile_error_naming_the_limit(monkeypatch):
    """The cpu backend's host compiler runs under RLIMIT_AS = the cap in its own process (never the
    caller's): a template bomb ends in about a second at 256 MiB, with the limit named."""
    from kernels_env.backends.cpu.build import BuildLimitError, build
    from tests.kernels_env.hostile_corpus import TEMPLATE_BOMB
    monkeypatch.setenv("LEAP_COMPILE_MEMORY_BYTES", str(256 << 20))
    with pytest.raises(BuildLimitError) as ei:
        build(TEMPLATE_BOMB.replace("QUALIFIER", "static") + "int x;\n")
    assert ei.value.log.startswith("kernel.cu: error: the host C++ compiler ran out of memory: a compile "
                                   "may use 256 MiB (LEAP_COMPILE_MEMORY_BYTES)"), ei.value.log


def test_nvrtc_is_capped_only_in_a_cuda_free_process():
    """In a process marked CUDA-free (as pool compile workers are), NVRTC on a template bomb is a
    CompileError naming the cap, the cap covers the compile only, and the next compile works; the
    test process itself (which may hold a CUDA context) is never capped."""
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    import multiprocessing as mp
    import resource

    from kernels_env.compiler import memory_cap
    before = resource.getrlimit(resource.RLIMIT_AS)
    with memory_cap.capped(64 << 20) as on:
        assert not on and resource.getrlimit(resource.RLIMIT_AS) == before
    with mp.get_context("spawn").Pool(1) as p:
        out = p.apply(_nvrtc_bomb_in_cuda_free_process, (256 << 20,))
    assert out["inside"] == "MemoryError" and out["after"] == "ok" and out["rlimit_restored"], out
    assert out["bomb"].startswith("kernel.cu: error: NVRTC ran out of memory: a compile may use 256 MiB "
                                  "(LEAP_COMPILE_MEMORY_BYTES)"), out
    assert out["plain"] == "ok", out


def _nvrtc_bomb_in_cuda_free_process(limit: int) -> dict:
    import os
    import resource

    from kernels_env.compiler import memory_cap
    from kernels_env.compiler.compile import CompileError, compile_cuda
    from tests.kernels_env.hostile_corpus import TEMPLATE_BOMB
    os.environ["LEAP_COMPILE_MEMORY_BYTES"] = str(limit)
    memory_cap.mark_cuda_free()
    out: dict = {}
    before = resource.getrlimit(resource.RLIMIT_AS)
    with memory_cap.capped(limit):
        try:
            bytearray(2 * limit)
            out["inside"] = "allocated"
        except MemoryError:
            out["inside"] = "MemoryError"
    out["after"] = "ok" if len(bytearray(2 * limit)) else ""
    kernel = 'extern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n'
    try:
        compile_cuda(TEMPLATE_BOMB.replace("QUALIFIER", "__device__") + kernel)
        out["bomb"] = "compiled"
    except CompileError as e:
        out["bomb"] = e.log
    out["rlimit_restored"] = resource.getrlimit(resource.RLIMIT_AS) == before
    compile_cuda(kernel)
    out["plain"] = "ok"
    return out


# ---- scratch on the cpu backend (kernels_env/execute/buffers.py scratch_refusal) -------------------
def test_cpu_scratch_beyond_the_limit_is_refused_before_allocating(monkeypatch):
    """32 scratch buffers of 2 GiB each: runtime_error naming the total and the limit, with no
    device buffer allocated (it once reached 23.6 GB resident and 148 s before failing)."""
    from kernels_env.backends.cpu.device import CpuDevice
    from kernels_env.core.status import Status
    from kernels_env.execute.score import score
    from tests.kernels_env.broken_corpus import TASKS, corpus_config
    from tests.kernels_env.hostile_corpus import AFFINE_CUDA, SCRATCH_64_GIB, _sub
    dev = CpuDevice(corpus_config("cpu"))
    allocated: list = []
    monkeypatch.setattr(dev, "empty", lambda shape, dtype: allocated.append(shape))
    monkeypatch.setattr(dev, "to_device", lambda a: allocated.append(a.shape))
    try:
        r = score(TASKS["corpus_affine"], _sub(AFFINE_CUDA, SCRATCH_64_GIB), corpus_config("cpu"), device=dev)
    finally:
        dev.close()
    assert r.status is Status.RUNTIME_ERROR, r.message
    assert r.message.startswith("the launch block declares 64 GiB of scratch in 32 buffers ('s0' alone "
                                "2 GiB); the cpu backend allows at most 4 GiB of scratch per evaluation"), r.message
    assert allocated == []


def test_scratch_limit_is_a_setting_and_within_it_scratch_is_allocated(monkeypatch):
    from kernels_env.backends.cpu.device import CpuDevice
    from kernels_env.execute.buffers import scratch_refusal
    dev = CpuDevice()
    assert dev.max_scratch_bytes == 4 << 30
    assert scratch_refusal(dev, [("a", "float32", 1 << 29), ("b", "float16", 1 << 29)]) is None  # 3 GiB
    monkeypatch.setenv("LEAP_CPU_SCRATCH_BYTES", str(1 << 20))
    assert "1 MiB of scratch per evaluation" in scratch_refusal(dev, [("a", "int64", 1 << 17 | 1)])
    monkeypatch.setenv("LEAP_CPU_SCRATCH_BYTES", "4G")
    with pytest.raises(ValueError, match="LEAP_CPU_SCRATCH_BYTES='4G'; expected a whole number of bytes"):
        dev.max_scratch_bytes  # noqa: B018
    assert scratch_refusal(object(), [("a", "float32", 1 << 40)]) is None  # no limit: the allocator's


def test_gpu_scratch_limit_is_its_own_setting_with_the_same_default(monkeypatch):
    """The cupy device refuses scratch from the declared sizes too (LEAP_GPU_SCRATCH_BYTES): read
    through the class, no GPU needed."""
    from kernels_env.backends import base
    from kernels_env.backends.cpu.device import CpuDevice
    from kernels_env.backends.cupy_backend import CupyDevice
    from kernels_env.execute.buffers import scratch_refusal

    class NoGpu:  # the property's own code, without CupyDevice.__init__ (which needs a GPU)
        max_scratch_bytes = CupyDevice.max_scratch_bytes
        name = "cupy"
    monkeypatch.delenv("LEAP_GPU_SCRATCH_BYTES", raising=False)
    monkeypatch.delenv("LEAP_CPU_SCRATCH_BYTES", raising=False)
    assert NoGpu().max_scratch_bytes == CpuDevice().max_scratch_bytes == base.DEFAULT_SCRATCH_BYTES == 4 << 30
    assert "the cupy backend allows at most 4 GiB" in scratch_refusal(NoGpu(), [("s", "float32", 1 << 31)])
    monkeypatch.setenv("LEAP_GPU_SCRATCH_BYTES", str(8 << 30))
    assert NoGpu().max_scratch_bytes == 8 << 30 and CpuDevice().max_scratch_bytes == 4 << 30
    assert scratch_refusal(NoGpu(), [("s", "float32", 1 << 31)]) is None
    monkeypatch.setenv("LEAP_GPU_SCRATCH_BYTES", "-1")
    with pytest.raises(ValueError, match="LEAP_GPU_SCRATCH_BYTES='-1'"):
        NoGpu().max_scratch_bytes  # noqa: B018
