"""The hostile corpus: submissions written to break the scorer rather than to solve the task.

Each case names the threat class it probes (docs/THREAT_MODEL.md), the corpus task it runs against
(tests/kernels_env/broken_corpus.py: corpus_affine, corpus_sum) and the SET of statuses that are
acceptable. `env_error` is never acceptable: everything a submission controls must end in a
submission status. Cases that need a particular backend say so in `backends`.

Classes:
  A  env_error the policy can cause        B  inputs that crash or stall the caller
  C  host files reaching the model         D  memory errors that pass
  F  hangs in any stage                      H  host code run by the cpu backend
(E, weak tasks, is tests/kernels_env/test_validate.py.)
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from tests.kernels_env.broken_corpus import AFFINE_SOLUTION, SUM_SOLUTION

SUBMISSION = {"format_error", "compile_error", "runtime_error", "timeout", "wrong_output"}
NOT_CORRECT = SUBMISSION
FAILS_TO_BUILD = {"format_error", "compile_error"}

# a file every Linux host has, whose first line a compiler would quote in an error
HOST_FILE = "/etc/passwd"
PWNED = "/tmp/leap_hostile_pwned"  # host code that ran would create this file
HOST_CONTENT_MARKERS = ("root:x:0:0", ":/bin/bash", ":/usr/sbin/nologin", "daemon:x:")


def _host_dirs() -> tuple[str, ...]:
    """Directories of this machine a message must never show (the submission's own text may)."""
    import sys
    import tempfile
    from pathlib import Path
    dirs = {str(Path(__file__).resolve().parents[2]), sys.prefix, os.path.realpath(sys.prefix),
            tempfile.gettempdir() + "/leap", os.path.expanduser("~")}
    try:
        from kernels_env.compiler.cuda_headers import cuda_include_dirs
        dirs |= set(cuda_include_dirs())
    except Exception:
        pass
    return tuple(sorted(d for d in dirs if d and d != "/" and len(d) > 4))


@dataclass(frozen=True)
class HCase:
    id: str
    cls: str
    task: str
    text: str
    expected: frozenset
    backends: tuple[str, ...] = ("cpu", "cupy")
    note: str = ""
    must_not_leak: bool = False  # message and details must not show host paths or file contents
    timing: bool = False  # run the timing stage too (a few runs)
    # NVRTC explodes: only a CUDA-free process caps NVRTC's memory (pool workers, hostile_table's cpu
    # children); in-process `score` in the test process does not (docs/THREAT_MODEL.md, B)
    cuda_free_only: bool = False

    def config(self, backend: str):
        from tests.kernels_env.broken_corpus import corpus_config
        cfg = corpus_config(backend)
        return cfg.replace(timing=True, warmup_runs=1, timed_runs=3) if self.timing else cfg


# The compile memory cap the corpus runs under (LEAP_COMPILE_MEMORY_BYTES): the default 2 GiB takes
# four times as long to fill; the limit and its message are the same code at any size.
COMPILE_MEMORY_BYTES = 512 << 20
# 2^24 distinct instantiations (a binary tree of T<N, M>): gigabytes on any compiler, in seconds
TEMPLATE_BOMB = ("template <int N, unsigned long long M> struct Bomb {\n"
                 "    static constexpr unsigned long long v = Bomb<N - 1, 2 * M>::v + Bomb<N - 1, 2 * M + 1>::v;\n};\n"
                 "template <unsigned long long M> struct Bomb<0, M> { static constexpr unsigned long long v = M; };\n"
                 "QUALIFIER unsigned long long bomb() { return Bomb<24, 1>::v; }\n")


# 32 scratch buffers of 2 GiB each (the most the launch block allows): 64 GiB the kernel never uses
SCRATCH_64_GIB = "".join(f"scratch float s{k}[536870912];\n" for k in range(32)) + \
    "affine<<<cdiv(N, 256), 256>>>(x, y, N);"


def _sub(cuda: str, launch: str = "affine<<<cdiv(N, 256), 256>>>(x, y, N);") -> str:
    return f"```cuda\n{cuda}\n```\n```launch\n{launch}\n```\n"


AFFINE_CUDA = AFFINE_SOLUTION.split("```cuda\n", 1)[1].split("```", 1)[0]
SUM_CUDA = SUM_SOLUTION.split("```cuda\n", 1)[1].split("```", 1)[0]
SUM_LAUNCH = SUM_SOLUTION.split("```launch\n", 1)[1].split("```", 1)[0]


def _affine_body(body: str, prefix: str = "", sig: str = "const float* x, float* y, int n") -> str:
    return _sub(f'{prefix}\nextern "C" __global__ void affine({sig}) {{\n'
                f"    int i = blockIdx.x * blockDim.x + threadIdx.x;\n{body}\n}}")


def _leak_include(directive: str, where: str = "top") -> str:
    """An affine kernel with `directive` (a disguised include of a host file) in it."""
    return _sub(f"{directive}\n{AFFINE_CUDA}")


S = frozenset
CASES: tuple[HCase, ...] = (
    # ---- controls --------------------------------------------------------------------------
    HCase("control_affine", "-", "corpus_affine", AFFINE_SOLUTION, S({"correct"})),
    HCase("control_sum", "-", "corpus_sum", SUM_SOLUTION, S({"correct"})),
    # ---- A: env_error the policy can cause ----------------------------------------------------
    HCase("huge_int_literal", "A", "corpus_affine",
          _sub(AFFINE_CUDA, "affine<<<" + "9" * 5000 + ", 256>>>(x, y, N);"), S({"format_error"})),
    HCase("huge_float_literal", "A", "corpus_affine",
          _sub(AFFINE_CUDA, "affine<<<cdiv(N, 256), 256>>>(x, y, N + 0." + "1" * 5000 + ");"),
          S({"format_error"})),
    HCase("huge_hex_literal", "A", "corpus_affine",
          _sub(AFFINE_CUDA, "affine<<<0x" + "f" * 3000 + ", 256>>>(x, y, N);"), S({"format_error"})),
    HCase("macro_renames_runtime_launch", "A", "corpus_affine",
          _sub("#define __cpu_launch my_launch\n" + AFFINE_CUDA), FAILS_TO_BUILD, backends=("cpu",),
          note="names of the cpu runtime mean nothing to NVRTC (correct on cupy)"),
    HCase("macro_collides_runtime_words", "A", "corpus_affine",
          _sub("#define invoke oops\n#define Fiber int\n#define run 0\n#define order 1\n#define msg 2\n"
               "#define timeout_s 3\n#define grid 4\n#define sigsetjmp(a, b) 0\n" + AFFINE_CUDA),
          S({"correct"}) | FAILS_TO_BUILD, note="macros end with the user's code (#undef)"),
    HCase("macro_renames_kernel", "A", "corpus_affine",
          _sub("#define affine affine2\n" + AFFINE_CUDA), FAILS_TO_BUILD | S({"correct", "runtime_error"})),
    HCase("runtime_namespace_injection", "A", "corpus_affine",
          _sub("namespace __cpu { __device__ int hacked = 1; }\n" + AFFINE_CUDA), FAILS_TO_BUILD,
          backends=("cpu",)),
    HCase("deep_launch_expression", "A", "corpus_affine",
          _sub(AFFINE_CUDA, "affine<<<" + "(" * 3000 + "1" + ")" * 3000 + ", 256>>>(x, y, N);"),
          S({"format_error"})),
    HCase("deep_unary_minus", "A", "corpus_affine",
          _sub(AFFINE_CUDA, "affine<<<" + "-" * 5000 + "1, 256>>>(x, y, N);"), S({"format_error"})),
    HCase("scratch_too_big", "A", "corpus_affine",
          _sub(AFFINE_CUDA, "scratch float s[9223372036854775807];\naffine<<<cdiv(N, 256), 256>>>(x, y, N);"),
          S({"format_error", "runtime_error"})),
    HCase("grid_overflow_product", "A", "corpus_affine",
          _sub(AFFINE_CUDA, "affine<<<9223372036854775807 * 9223372036854775807, 256>>>(x, y, N);"),
          S({"format_error", "runtime_error"})),
    HCase("division_by_zero_launch", "A", "corpus_affine",
          _sub(AFFINE_CUDA, "affine<<<N / 0, 256>>>(x, y, N);"), S({"format_error"})),
    HCase("unicode_identifier", "A", "corpus_affine",
          _sub(AFFINE_CUDA.replace("affine", "affine\u00e9"), "affine\u00e9<<<cdiv(N, 256), 256>>>(x, y, N);"),
          SUBMISSION),
    HCase("surrogate_chars", "A", "corpus_affine", _sub(AFFINE_CUDA + "\n// \udcff\ud800"), SUBMISSION | S({"correct"})),
    # ---- B: inputs that crash or stall the caller ----------------------------------------------
    HCase("nul_in_cuda", "B", "corpus_affine",
          _sub(AFFINE_CUDA.replace("if (i < n)", "if (i < n) {}\x00 if (i < 0)")), S({"format_error"})),
    HCase("nul_in_launch", "B", "corpus_affine", _sub(AFFINE_CUDA, "affine<<<1, 256>>>(x, y, N);\x00"),
          S({"format_error"})),
    HCase("oversized_submission", "B", "corpus_affine", _sub(AFFINE_CUDA + "//" + "x" * 300_000),
          S({"format_error"})),
    HCase("quadratic_fence_line", "B", "corpus_affine", "```" + "a" * 190_000 + "`\n" + AFFINE_SOLUTION,
          S({"correct"})),
    HCase("many_unclosed_typedefs", "B", "corpus_affine", _sub("typedef " * 20_000 + "\n" + AFFINE_CUDA),
          FAILS_TO_BUILD),
    HCase("many_unclosed_kernels", "B", "corpus_affine",
          _sub('extern "C" __global__ void k(' * 5000 + "\n" + AFFINE_CUDA), FAILS_TO_BUILD),
    HCase("many_extern_c_blocks", "B", "corpus_affine", _sub('extern "C" {' * 15_000 + "\n" + AFFINE_CUDA),
          FAILS_TO_BUILD),
    HCase("many_array_brackets", "B", "corpus_affine",
          _sub('extern "C" __global__ void k(int a' + "[" * 4000 + "]) {}\n" + AFFINE_CUDA), FAILS_TO_BUILD),
    HCase("many_externs", "B", "corpus_affine", _sub("extern " * 25_000 + "\n" + AFFINE_CUDA), FAILS_TO_BUILD),
    HCase("exponential_aliases", "B", "corpus_affine",
          _sub("".join(f"typedef T{k} T{k} T{k+1};\n" for k in range(20)) +
               'extern "C" __global__ void k(T0 a) {}\n' + AFFINE_CUDA), SUBMISSION),
    HCase("many_allowed_includes", "B", "corpus_affine", _sub("#include <math.h>\n" * 15_000 + AFFINE_CUDA),
          S({"correct"}) | FAILS_TO_BUILD),
    HCase("device_malloc_bomb", "B", "corpus_affine", _affine_body(
        "    if (i == 0) { for (int k = 0; k < 100000; ++k) { char* p = (char*)malloc(1 << 30);"
        " if (p) p[0] = 1; } }\n    if (i < n) y[i] = 2.0f * x[i] + 1.0f;"),
          S({"correct", "runtime_error", "timeout"}), note="device heap bounded; memory stays bounded"),
    HCase("device_malloc_beyond_heap_is_null", "B", "corpus_affine", _affine_body(
        "    __shared__ int ok;\n    if (threadIdx.x == 0) { void* p = malloc((size_t)1 << 33); ok = p == 0;"
        " if (p) free(p); }\n    __syncthreads();\n    if (i < n) y[i] = ok ? 2.0f * x[i] + 1.0f : 0.0f;"),
          S({"correct"}), note="an 8 GiB device malloc returns NULL on both backends (bounded heap)"),
    HCase("scratch_64_gib", "B", "corpus_affine", _sub(AFFINE_CUDA, SCRATCH_64_GIB), S({"runtime_error"}),
          note="refused from the declared sizes on both backends (a GPU shared with a trainer would "
               "otherwise fail the allocation: env_error, a row taken out of the reward)"),
    HCase("template_bomb_nvrtc", "B", "corpus_affine", _sub(TEMPLATE_BOMB.replace("QUALIFIER", "__device__")
                                                            + AFFINE_CUDA), S({"compile_error"}),
          backends=("cpu",), cuda_free_only=True,
          note="NVRTC runs out of the compile memory cap (cupy: tests/kernels_env/test_hostile_pool.py)"),
    HCase("template_bomb_host_compiler", "B", "corpus_affine",
          _sub("#ifdef __x86_64__\n" + TEMPLATE_BOMB.replace("QUALIFIER", "static") + "#endif\n"
               + AFFINE_CUDA), S({"compile_error"}),
          backends=("cpu",), note="only the host compiler sees it; cupy: NVRTC never compiles it"),
    # ---- D: memory errors that pass -------------------------------------------------------------
    HCase("scratch_write_past_end", "D", "corpus_affine", _sub(
        'extern "C" __global__ void affine(const float* x, float* y, float* s, int n) {\n'
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < 64) s[16 + i] = 1.0f;\n"
        "    if (i < n) y[i] = 2.0f * x[i] + 1.0f;\n}",
        "scratch float s[16];\naffine<<<cdiv(N, 256), 256>>>(x, y, s, N);"), S({"runtime_error"})),
    HCase("scratch_write_before_start", "D", "corpus_affine", _sub(
        'extern "C" __global__ void affine(const float* x, float* y, float* s, int n) {\n'
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i == 0) s[-3] = 1.0f;\n"
        "    if (i < n) y[i] = 2.0f * x[i] + 1.0f;\n}",
        "scratch float s[16];\naffine<<<cdiv(N, 256), 256>>>(x, y, s, N);"), S({"runtime_error"})),
    HCase("output_write_before_start", "D", "corpus_affine", _affine_body(
        "    if (i == 0) y[-1] = 0.0f;\n    if (i < n) y[i] = 2.0f * x[i] + 1.0f;"), S({"runtime_error"})),
    HCase("output_write_far_past_end", "D", "corpus_affine", _affine_body(
        "    if (i == 0) y[n + 5000] = 0.0f;\n    if (i < n) y[i] = 2.0f * x[i] + 1.0f;"), S({"runtime_error"})),
    # past the guards: the cpu backend maps each buffer alone in a 256 GiB slot (backends/cpu/runner.py),
    # so a far access faults instead of landing in another buffer (it scored correct before)
    HCase("output_write_4_mib_past_end", "D", "corpus_affine", _affine_body(
        "    if (i == 0) y[n + (1 << 20)] = 0.0f;\n    if (i < n) y[i] = 2.0f * x[i] + 1.0f;"), S({"runtime_error"}),
          backends=("cpu",), note="a GPU write 4 MiB past may land in another pooled allocation, silently"),
    HCase("output_write_400_kib_before_start", "D", "corpus_affine", _affine_body(
        "    if (i == 0) y[-100000] = 0.0f;\n    if (i < n) y[i] = 2.0f * x[i] + 1.0f;"), S({"runtime_error"}),
          backends=("cpu",), note="as above, before the buffer"),
    HCase("output_write_32_gib_past_end", "D", "corpus_affine", _affine_body(
        "    if (i == 0) y[n + (1LL << 33)] = 0.0f;\n    if (i < n) y[i] = 2.0f * x[i] + 1.0f;"),
          S({"runtime_error"}), note="unmapped on both backends"),
    HCase("input_read_past_end", "D", "corpus_affine", _affine_body(
        "    float extra = (i == 0) ? x[n + 2048] : 0.0f;\n"
        "    if (i < n) y[i] = 2.0f * x[i] + 1.0f + (extra == 12345.0f ? 1.0f : 0.0f);"),
          S({"runtime_error"}), backends=("cpu",),
          note="a GPU read past an input rarely faults (pooled memory); the cpu backend's guard page does"),
    # every lane of the float4 is used, so the compiler must emit the 16-byte vector load (with only
    # v.x used NVRTC narrows it to a legal 4-byte load, and the GPU rightly scores it correct)
    HCase("misaligned_float4_load", "D", "corpus_affine", _affine_body(
        "    if (i < n / 4 - 1) { float4 v = *reinterpret_cast<const float4*>(x + 1 + 4 * i);\n"
        "      y[4 * i + 1] = 2.0f * v.x + 1.0f; y[4 * i + 2] = 2.0f * v.y + 1.0f;\n"
        "      y[4 * i + 3] = 2.0f * v.z + 1.0f; y[4 * i + 4] = 2.0f * v.w + 1.0f; }\n"
        "    if (i < n && (i % 4 == 0 || i >= n - 4)) y[i] = 2.0f * x[i] + 1.0f;"),
          S({"runtime_error"})),
    # GPU kernels share device memory with the judge: scan +-64 MiB around x (512-byte steps) for a
    # copy of x, zero it and x, and write the reference of zeros (2 * 0 + 1). The judge regenerates a
    # trial's inputs after the run, so the copies it once kept prove nothing (wrong_output); a scan
    # that leaves mapped memory faults (runtime_error; always on the cpu backend's guard pages)
    HCase("rewrites_judges_input_copy", "D", "corpus_affine", _sub(
        'extern "C" __global__ void find_copies(const float* x, int n, int window) {\n'
        "    long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    long long off = (k - window) * 128;\n"
        "    if (off == 0 || k >= 2LL * window) return;\n"
        "    const float* p = x + off;\n"
        "    for (int j = 0; j < 32; ++j) if (p[j] != x[j]) return;\n"
        "    float* w = (float*)p;\n"
        "    for (int j = 0; j < n; ++j) w[j] = 0.0f;\n}\n"
        'extern "C" __global__ void affine(const float* x, float* y, int n) {\n'
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < n) { ((float*)x)[i] = 0.0f; y[i] = 1.0f; }\n}",
        "find_copies<<<cdiv(262144, 256), 256>>>(x, N, 131072);\naffine<<<cdiv(N, 256), 256>>>(x, y, N);"),
          NOT_CORRECT, note="memory scan for the judge's input copies (correct before 2026-12-06 where found)"),
    # ---- F: hangs in any stage -------------------------------------------------------------------
    HCase("spin_only_in_timing_stage", "F", "corpus_affine", _sub(
        "__device__ int launches;\n"
        'extern "C" __global__ void affine(const float* x, float* y, int n) {\n'
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    __shared__ int seen;\n    if (threadIdx.x == 0) seen = atomicAdd(&launches, blockIdx.x == 0);\n"
        "    __syncthreads();\n"
        "    if (seen >= 5) { volatile int* f = (volatile int*)&launches; while (f[0] != -7) {} }\n"
        "    if (i < n) y[i] = 2.0f * x[i] + 1.0f;\n}"), S({"timeout"}), timing=True,
        note="correct in the 5 trials, spins from the 6th launch on (warm-up/timing)"),
    HCase("divergent_syncthreads_deadlock", "F", "corpus_affine", _affine_body(
        "    __shared__ volatile int flag;\n    if (threadIdx.x == 0) flag = 0;\n    __syncthreads();\n"
        "    if (threadIdx.x == 0) { __syncthreads(); flag = 1; } else { while (flag == 0) {} }\n"
        "    if (i < n) y[i] = 2.0f * x[i] + 1.0f;"), S({"timeout", "runtime_error"})),
    HCase("spin_in_timing_on_every_launch_after_warmup", "F", "corpus_sum", _sub(
        SUM_CUDA.replace("extern \"C\" __global__ void finish(",
                         "__device__ int fin_calls;\nextern \"C\" __global__ void finish(").replace(
            "    if (threadIdx.x == 0 && blockIdx.x == 0) {",
            "    if (atomicAdd(&fin_calls, 1) >= 6) { volatile int* f = &fin_calls; while (*f > 0) {} }\n"
            "    if (threadIdx.x == 0 && blockIdx.x == 0) {"), SUM_LAUNCH), S({"timeout"}), timing=True),
    # ---- H: host code in the cpu backend (NVRTC never sees `#ifdef __x86_64__` code) ------------
    HCase("host_code_calls_system", "H", "corpus_affine", _sub(
        '#ifdef __x86_64__\nextern "C" int system(const char*);\n'
        f'static int pwn = system("touch {PWNED}");\n#endif\n' + AFFINE_CUDA), FAILS_TO_BUILD,
        backends=("cpu",), note="cupy: NVRTC never compiles the host branch; nothing runs on the host"),
    HCase("host_code_reads_file", "H", "corpus_affine", _sub(
        '#ifdef __x86_64__\nstatic float secret() { FILE* f = fopen("/etc/passwd", "r");'
        " return f ? (float)fgetc(f) : 0.0f; }\n#else\nstatic __device__ float secret() { return 0.0f; }\n"
        "#endif\n" + AFFINE_CUDA.replace("+ 1.0f;", "+ 1.0f + 0.0f * secret();")), FAILS_TO_BUILD,
        backends=("cpu",)),
    HCase("host_static_initialiser_spins", "H", "corpus_affine", _sub(
        "#ifdef __x86_64__\nstatic int spin = [] { volatile int k = 0; while (k == 0) {} return 0; }();\n"
        "#endif\n" + AFFINE_CUDA), FAILS_TO_BUILD, backends=("cpu",)),
    HCase("host_constructor_attribute", "H", "corpus_affine", _sub(
        "#ifdef __x86_64__\n__attribute__((constructor)) static void at_load() { volatile int k = 0; "
        "while (k == 0) {} }\n#endif\n" + AFFINE_CUDA), FAILS_TO_BUILD, backends=("cpu",)),
    HCase("device_malloc_bypasses_macro", "B", "corpus_affine", _affine_body(
        "    if (i == 0) { char* p = (char*)(malloc)((size_t)1 << 33); if (p) p[0] = 1; }\n"
        "    if (i < n) y[i] = 2.0f * x[i] + 1.0f;"), S({"correct"}) | FAILS_TO_BUILD,
        note="cpu: `(malloc)` escapes the bounded-heap macro, so it is refused as a host symbol"),
    # ---- C: host files reaching the model --------------------------------------------------------
    HCase("include_abs_path", "C", "corpus_affine", _leak_include(f'#include "{HOST_FILE}"'),
          FAILS_TO_BUILD, must_not_leak=True),
    HCase("include_form_feed", "C", "corpus_affine", _leak_include(f'\f#\finclude "{HOST_FILE}"'),
          FAILS_TO_BUILD, must_not_leak=True),
    HCase("include_vertical_tab", "C", "corpus_affine", _leak_include(f'\v#\vinclude "{HOST_FILE}"'),
          FAILS_TO_BUILD, must_not_leak=True),
    HCase("include_line_splice", "C", "corpus_affine", _leak_include(f'#inc\\\nlude "{HOST_FILE}"'),
          FAILS_TO_BUILD, must_not_leak=True),
    HCase("include_comment_between", "C", "corpus_affine", _leak_include(f'#/* x */include "{HOST_FILE}"'),
          FAILS_TO_BUILD, must_not_leak=True),
    HCase("include_comment_before_hash", "C", "corpus_affine", _leak_include(f'/* x */ # include "{HOST_FILE}"'),
          FAILS_TO_BUILD, must_not_leak=True),
    HCase("include_digraph", "C", "corpus_affine", _leak_include(f'%:include "{HOST_FILE}"'),
          FAILS_TO_BUILD, must_not_leak=True),
    HCase("include_after_raw_string", "C", "corpus_affine",
          _leak_include(f'const char* s = R"(\n/*)";\n#include "{HOST_FILE}"\n// */'),
          FAILS_TO_BUILD, must_not_leak=True),
    HCase("include_macro_computed", "C", "corpus_affine",
          _leak_include(f'#define F "{HOST_FILE}"\n#include F'), FAILS_TO_BUILD, must_not_leak=True),
    HCase("include_macro_angle", "C", "corpus_affine",
          _leak_include("#define G <../../../../../../etc/passwd>\n#include G"), FAILS_TO_BUILD, must_not_leak=True),
    HCase("include_dotdot_cuda", "C", "corpus_affine",
          _leak_include("#include <../../../../../../../../etc/passwd>"), FAILS_TO_BUILD, must_not_leak=True),
    HCase("include_next", "C", "corpus_affine", _leak_include(f'#include_next "{HOST_FILE}"'),
          FAILS_TO_BUILD, must_not_leak=True),
    HCase("include_pragma_operator", "C", "corpus_affine",
          _leak_include('_Pragma("GCC dependency \\"/etc/passwd\\"")'), SUBMISSION | S({"correct"}),
          must_not_leak=True),
    HCase("has_include_probe", "C", "corpus_affine",
          _leak_include(f'#if __has_include("{HOST_FILE}")\n#error present\n#endif'),
          SUBMISSION | S({"correct"}), must_not_leak=True,
          note="existence of a file is one bit; the message must not quote a host path"),
    HCase("line_directive_path", "C", "corpus_affine",
          _leak_include('#line 1 "/home/secret/user/thing.cu"\nint bad = ;'), FAILS_TO_BUILD, must_not_leak=True),
    HCase("error_quotes_file_macro", "C", "corpus_affine",
          _leak_include("static_assert(sizeof(__FILE__) == 0, __FILE__);"), FAILS_TO_BUILD, must_not_leak=True),
    # device code dereferencing a host address: with HMM (open kernel modules, Linux 6.1+) a kernel
    # reaches its process's host memory wherever it can name an address, and an interpreter built
    # without PIE loads its ELF header at 0x400000 in every process (scripts/host_memory_probe.py)
    HCase("reads_host_memory_at_a_fixed_address", "C", "corpus_affine", _affine_body(
        "    unsigned int magic = *(volatile const unsigned int*)0x400000ULL;  /* \\x7fELF if readable */\n"
        "    if (i < n) y[i] = magic == 0x464c457fu ? 2.0f * x[i] + 1.0f : 0.0f;"), NOT_CORRECT,
        backends=("cupy",), note="correct only if the kernel read the exec worker's host memory"),
)

CASES_BY_ID = {c.id: c for c in CASES}


def leaked(text: str) -> list[str]:
    """Host-file contents or host directories shown in a message (empty: nothing leaked)."""
    return [m for m in HOST_CONTENT_MARKERS + _host_dirs() if m in text]
