"""Kernels written by people (in the style of llm.c and tutorials) just work: typedef'd types in
signatures, the C standard-library names (M_PI, INFINITY, FLT_MAX, uint, <math.h>, ...) on both
backends, null pointers for optional arguments, and one wrong-output message for every failure.

The ported kernels below are this project's own code written the way llm.c writes its kernels;
each must score `correct` on the cpu backend at small sizes."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from kernels_env.core.config import EnvConfig
from kernels_env.source.launch import FormatError, check_plan, parse_launch
from kernels_env.source.signatures import find_kernels
from kernels_env.core.status import Status
from kernels_env.compiler.std_prelude import MACROS, STD_HEADERS, prelude
from kernels_env.tasks import get_task
from kernels_env.tasks.common import solution
from kernels_env.tasks.spec import Buffer, Task


# ---- (a) typedefs and using aliases in kernel signatures ------------------------------------------
ALIASED = r"""
typedef float floatX;
typedef const float* cfloatp;
using idx_t = int;
#define real float
typedef unsigned int u32;
extern "C" __global__ void k(floatX* out, const floatX* __restrict__ inp, cfloatp b, idx_t n, real s,
                             u32 u, floatX v, uint w) {}
"""


def test_signature_resolves_typedef_using_define_and_pointer_typedefs():
    p = {q.name: q for q in find_kernels(ALIASED)["k"].params}
    assert (p["out"].base_type, p["out"].pointer, p["out"].const) == ("float", True, False)
    assert (p["inp"].base_type, p["inp"].pointer, p["inp"].const) == ("float", True, True)
    assert (p["b"].base_type, p["b"].pointer, p["b"].const, p["b"].ctype) == ("float", True, True, "const float*")
    assert (p["n"].base_type, p["n"].pointer) == ("int", False)
    assert (p["s"].base_type, p["u"].base_type, p["v"].base_type) == ("float", "unsigned int", "float")
    assert p["w"].base_type == "unsigned int"


def test_launch_check_accepts_typedefd_pointers():
    task = get_task("relu")
    sigs = find_kernels("typedef float floatX;\nextern \"C\" __global__ void k(const floatX* x, floatX* y, int n) {}")
    check_plan(parse_launch("k<<<cdiv(N, 256), 256>>>(x, y, N);"), sigs, task, task.size_set("small"))
    bad = find_kernels("typedef int intX;\nextern \"C\" __global__ void k(const intX* x, float* y, int n) {}")
    with pytest.raises(FormatError, match="points to int"):
        check_plan(parse_launch("k<<<1, 256>>>(x, y, N);"), bad, task, task.size_set("small"))


# ---- (c) null pointers ------------------------------------------------------------------------------
_NULL_SIG = find_kernels('extern "C" __global__ void k(const float* x, const float* bias, float* y, int n) {}')


@pytest.mark.parametrize("null", ["nullptr", "NULL", "0"])
def test_null_pointer_argument_is_accepted_for_pointer_params(null):
    task = get_task("relu")
    plan = check_plan(parse_launch(f"k<<<1, 256>>>(x, {null}, y, N);"), _NULL_SIG, task, task.size_set("small"))
    assert plan.launches[0].args[1].kind == "null"


@pytest.mark.parametrize("launch,match", [
    ("k<<<1, 256>>>(x, x, y, nullptr);", "is not a pointer; nullptr"),
    ("k<<<1, 256>>>(x, 1, y, N);", "is a pointer; expected a buffer name"),
])
def test_null_pointer_is_type_checked(launch, match):
    task = get_task("relu")
    with pytest.raises(FormatError, match=match):
        check_plan(parse_launch(launch), _NULL_SIG, task, task.size_set("small"))


# ---- (b) the standard-library prelude ------------------------------------------------------------
def test_prelude_leaves_out_what_the_kernel_defines():
    text = prelude("#define M_PI 3.14159f\n// #define M_E 2\n")
    assert "#define M_PI " not in text and "#define M_E " in text and "#define FLT_MAX " in text
    assert "typedef unsigned int uint;" in text and {"math.h", "float.h", "stdint.h", "cstdint"} <= set(STD_HEADERS)
    assert {"M_PI", "M_PI_2", "M_SQRT1_2", "M_E", "INFINITY", "NAN", "FLT_MAX", "FLT_MIN", "FLT_EPSILON"} <= {
        n for n, _ in MACROS}


STD_NAMES = r"""
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <cstdint>
#define M_PI 3.14159265358979323846f  /* a kernel that also defines M_PI itself */
extern "C" __global__ void std_names(float* y, int n) {
    uint i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (uint)n) return;
    int32_t a = 1; uint64_t b = 2; int8_t c = 3;
    float v = (float)(M_PI + M_PI_2 + M_SQRT1_2 + M_E) + FLT_EPSILON + FLT_MIN * 0.0f;
    v += (isinf(INFINITY) ? 1.0f : 0.0f) + (isnan(NAN) ? 1.0f : 0.0f) + (FLT_MAX > 1e38f ? 1.0f : 0.0f);
    y[i] = v + (float)(a + b + c) + (INT32_MAX > 0 ? 0.0f : 100.0f);
}
"""
STD_EXPECTED = np.float32(np.float32(np.pi + np.pi / 2 + np.sqrt(0.5) + np.e) + np.float32(2 ** -23)) + 3 + 6


def _std_task() -> Task:
    return Task(name="std_names_test", level=1, description="constants",
                sizes={"eval": {"N": 1000}, "small": {"N": 1000}}, inputs=(),
                outputs=(Buffer("y", "float32", ("N",)),),
                reference=lambda xp, N=None: xp.full((1000,), STD_EXPECTED, dtype=xp.float32),
                solution=solution(STD_NAMES, "std_names<<<cdiv(N, 256), 256>>>(y, N);"))


CFG = EnvConfig(backend="cpu", sizes="small", timing=False, correctness_trials=2)


def _nvrtc_or_skip():
    try:
        from cupy_backends.cuda.libs import nvrtc  # noqa: F401
        from kernels_env.compiler.cuda_headers import cuda_include_dirs
        if not cuda_include_dirs():
            pytest.skip("CUDA headers not found")
    except Exception as e:
        pytest.skip(f"NVRTC unavailable: {e}")


def test_prelude_names_compile_with_nvrtc_without_warnings():
    _nvrtc_or_skip()
    from kernels_env.compiler.compile import compile_cuda
    mod = compile_cuda(STD_NAMES)
    assert "std_names" in mod.kernels and "warning" not in mod.log


def test_libcudacxx_goes_into_the_prelude_only_with_cuda_includes_that_may_need_it():
    """Only a source that includes a CUDA header other than cuda_fp16.h / cuda_bf16.h gets libcu++'s
    headers pre-included (such headers may bring its integer types, which the prelude's own typedefs
    must then not repeat); the standard names compile either way: next to the plain CUDA headers
    without libcu++, next to a CUDA header that includes libcu++ itself with it."""
    from kernels_env.compiler.std_prelude import PLAIN_CUDA_HEADERS, needs_libcudacxx, nvrtc_headers
    plain_rule = functools.partial(needs_libcudacxx, plain_headers=PLAIN_CUDA_HEADERS)
    assert not needs_libcudacxx(STD_NAMES)  # only the standard headers the prelude stands in for
    assert not needs_libcudacxx('// #include <cooperative_groups.h>\n/* #include "x.h" */\n#include <math.h> // m\n')
    plain_srcs = ("#include <cuda_fp16.h>\n", '  #  include "cuda_bf16.h"\n', "%:include <cuda_fp16.h>\n")
    for src in plain_srcs:
        assert not plain_rule(src), src
        assert needs_libcudacxx(src, plain_headers=()), src
    for src in ("%:include <cooperative_groups.h>\n", "#include HEADER\n", "#include_next <cuda_fp16.h>\n",
                "#include <cuda_fp16.h>\n#include <mma.h>\n", "#include <cuda/std/cstdint>\n"):
        assert plain_rule(src) and needs_libcudacxx(src), src
    _nvrtc_or_skip()
    assert not any(needs_libcudacxx(src) for src in plain_srcs)  # this NVRTC's probe passes both headers
    from kernels_env.compiler.compile import compile_cuda
    from kernels_env.compiler.std_prelude import _have_cccl
    plain_cuda = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n" + STD_NAMES
    plain, fp16, coop = (nvrtc_headers(s)[0][0] for s in (STD_NAMES, plain_cuda, "#include <cooperative_groups.h>\n"))
    assert b"cuda/std" not in plain and b"cuda/std" not in fp16 and (b"cuda/std" in coop) == _have_cccl()
    for src in (STD_NAMES, plain_cuda, "#include <cooperative_groups.h>\n" + STD_NAMES):
        mod = compile_cuda(src)
        assert "std_names" in mod.kernels and "warning" not in mod.log


def test_a_plain_header_that_brings_libcudacxx_fails_the_probe_and_keeps_it(monkeypatch):
    """`plain_cuda_headers` compiles each candidate next to the prelude without libcu++: one whose
    own includes bring libcu++'s limits (cooperative_groups.h, standing in for a plain header of
    another CUDA version) fails the probe, and a source including it gets libcu++ again."""
    _nvrtc_or_skip()
    from kernels_env.compiler import std_prelude
    if not std_prelude._have_cccl():
        pytest.skip("no libcu++ headers: no header can bring its types")
    monkeypatch.setattr(std_prelude, "PLAIN_CUDA_HEADERS", ("cuda_fp16.h", "cooperative_groups.h"))
    std_prelude.plain_cuda_headers.cache_clear()
    try:
        assert std_prelude.plain_cuda_headers() == ("cuda_fp16.h",)
        assert std_prelude.needs_libcudacxx("#include <cooperative_groups.h>\n")
        assert not std_prelude.needs_libcudacxx("#include <cuda_fp16.h>\n")
    finally:
        std_prelude.plain_cuda_headers.cache_clear()


@pytest.mark.slow
def test_prelude_names_score_correct_on_cpu_backend(cpu_device):
    from kernels_env.execute.score import score
    task = _std_task()
    r = score(task, task.solution, CFG, device=cpu_device)
    assert r.status is Status.CORRECT, f"{r.status.value}: {r.message}\n{r.details[:1500]}"


# ---- ported kernels (llm.c style) -----------------------------------------------------------------
RESIDUAL = r"""
// residual add with 128-bit loads, the way llm.c's residual_forward packs floatX
#include <stdint.h>
typedef float floatX;
typedef float4 x128;

extern "C" __global__ void residual_forward_kernel(floatX* out, const floatX* inp1, const floatX* inp2, int N) {
    int idx = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (idx >= N) return;
    x128 a = *reinterpret_cast<const x128*>(inp1 + idx);
    x128 b = *reinterpret_cast<const x128*>(inp2 + idx);
    x128 c = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
    *reinterpret_cast<x128*>(out + idx) = c;
}
"""

GELU = r"""
#include <math.h>
typedef float floatX;
#define GELU_SCALING_FACTOR sqrtf(2.0f / M_PI)

extern "C" __global__ void gelu_forward_kernel(floatX* out, const floatX* inp, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        float xi = (float)inp[i];
        float cube = 0.044715f * xi * xi * xi;
        out[i] = (floatX)(0.5f * xi * (1.0f + tanhf(GELU_SCALING_FACTOR * (xi + cube))));
    }
}
"""

LAYERNORM = r"""
// one warp per row; weight required, bias optional (NULL: no bias), mean and rstd saved for backward
#include <float.h>
typedef float floatX;

__device__ float warpReduceSum(float val) {
    for (int offset = 16; offset > 0; offset /= 2) val += __shfl_xor_sync(0xFFFFFFFF, val, offset);
    return val;
}

extern "C" __global__ void layernorm_forward_kernel(floatX* __restrict__ out, float* __restrict__ mean,
        float* __restrict__ rstd, const floatX* __restrict__ inp, const floatX* __restrict__ weight,
        const floatX* __restrict__ bias, int N, int C) {
    int lane = threadIdx.x % 32;
    int idx = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (idx >= N) return;
    const floatX* x = inp + (size_t)idx * C;
    float sum = 0.0f;
    for (int i = lane; i < C; i += 32) sum += (float)x[i];
    float m = warpReduceSum(sum) / C;
    float sum2 = 0.0f;
    for (int i = lane; i < C; i += 32) { float d = (float)x[i] - m; sum2 += d * d; }
    float s = rsqrtf(warpReduceSum(sum2) / C + 1e-5f);
    if (lane == 0) { mean[idx] = m; rstd[idx] = s; }
    floatX* o = out + (size_t)idx * C;
    for (int c = lane; c < C; c += 32) {
        float n = s * ((float)x[c] - m);
        o[c] = (floatX)(n * (float)weight[c] + (bias != NULL ? (float)bias[c] : 0.0f));
    }
}
"""

SOFTMAX = r"""
// row softmax, one warp per row, tutorial style: -INFINITY start, uint indices, <float.h>
#include <float.h>
#include <math.h>

extern "C" __global__ void softmax_forward_kernel(float* out, const float* inp, int M, int N) {
    uint row = blockIdx.x;
    uint lane = threadIdx.x;
    const float* x = inp + (size_t)row * N;
    float maxval = -INFINITY;
    for (uint i = lane; i < (uint)N; i += 32) maxval = fmaxf(maxval, x[i]);
    for (int o = 16; o > 0; o >>= 1) maxval = fmaxf(maxval, __shfl_xor_sync(0xffffffffu, maxval, o));
    float sum = 0.0f;
    for (uint i = lane; i < (uint)N; i += 32) sum += expf(x[i] - maxval);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    float inv = sum > FLT_MIN ? 1.0f / sum : 0.0f;
    for (uint i = lane; i < (uint)N; i += 32) out[(size_t)row * N + i] = expf(x[i] - maxval) * inv;
}
"""


def _residual_task() -> Task:
    return Task(name="residual_add_llmc", level=1, description="out = inp1 + inp2 (N a multiple of 4)",
                sizes={"eval": {"N": 1 << 20}, "small": {"N": 4 * 1031}},
                inputs=(Buffer("inp1", "float32", ("N",)), Buffer("inp2", "float32", ("N",))),
                outputs=(Buffer("out", "float32", ("N",)),),
                reference=lambda xp, inp1, inp2: inp1 + inp2, solution="")


def _ln_ref(xp, inp, weight):
    m = inp.mean(axis=1)
    v = ((inp - m[:, None]) ** 2).mean(axis=1)
    s = 1.0 / xp.sqrt(v + 1e-5)
    return ((inp - m[:, None]) * s[:, None] * weight).astype(xp.float32), m.astype(xp.float32), s.astype(xp.float32)


def _layernorm_task() -> Task:
    return Task(name="layernorm_forward_llmc", level=1, description="layer norm without bias, saving mean/rstd",
                sizes={"eval": {"N": 4096, "C": 768}, "small": {"N": 37, "C": 200}},
                inputs=(Buffer("inp", "float32", ("N", "C")), Buffer("weight", "float32", ("C",))),
                outputs=(Buffer("out", "float32", ("N", "C")), Buffer("mean", "float32", ("N",)),
                         Buffer("rstd", "float32", ("N",))),
                reference=_ln_ref, solution="", tolerance={"float32": (1e-3, 1e-3)})


PORTED = {
    "residual": (_residual_task, RESIDUAL, "residual_forward_kernel<<<cdiv(N, 4 * 128), 128>>>(out, inp1, inp2, N);"),
    "gelu": (lambda: get_task("gelu_tanh"), GELU, "gelu_forward_kernel<<<cdiv(N, 128), 128>>>(y, x, N);"),
    "layernorm_nullptr": (_layernorm_task, LAYERNORM,
                          "layernorm_forward_kernel<<<cdiv(N, 4), 128>>>(out, mean, rstd, inp, weight, nullptr, N, C);"),
    "layernorm_NULL": (_layernorm_task, LAYERNORM,
                       "layernorm_forward_kernel<<<cdiv(N, 4), 128>>>(out, mean, rstd, inp, weight, NULL, N, C);"),
    "softmax": (lambda: get_task("softmax"), SOFTMAX, "softmax_forward_kernel<<<M, 32>>>(y, x, M, N);"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PORTED))
def test_ported_kernel_scores_correct_on_cpu_backend(name, cpu_device):
    from kernels_env.execute.score import score
    make, cuda, launch = PORTED[name]
    r = score(make(), solution(cuda, launch), CFG, device=cpu_device)
    assert r.status is Status.CORRECT, f"{name}: {r.status.value}: {r.message}\n{r.details[:1500]}"


@pytest.mark.parametrize("name", list(PORTED))
def test_ported_kernel_compiles_with_nvrtc(name):
    _nvrtc_or_skip()
    from kernels_env.compiler.compile import compile_cuda
    mod = compile_cuda(PORTED[name][1])
    assert mod.kernels and "warning" not in mod.log


@pytest.mark.slow
def test_wrong_output_message_is_the_same_shape_for_a_wrong_value(cpu_device):
    """A kernel that writes a wrong value gets the unified message (first bad index per dimension,
    expected/got, max abs/rel error, fraction mismatched)."""
    from kernels_env.execute.score import score
    bad = SOFTMAX.replace("expf(x[i] - maxval) * inv;", "expf(x[i] - maxval) * inv * (i == 5 ? 2.0f : 1.0f);")
    r = score(get_task("softmax"), solution(bad, PORTED["softmax"][2]), CFG, device=cpu_device)
    assert r.status is Status.WRONG_OUTPUT
    msg = r.message
    assert "output 'y' is wrong:" in msg and "of elements mismatched" in msg
    assert "first bad index [0, 5]: expected" in msg and "(differs from the reference)" in msg
    assert "max abs err" in msg and "max rel err" in msg


# ---- the torch baseline is optional and informational ----------------------------------------------
def test_timing_baseline_round_trips_and_is_absent_off_the_gpu(cpu_device):
    from kernels_env.execute.score import score
    from kernels_env.core.result import Result, Timing
    t = Timing("cuda", True, 10, 0.5, 0.5, 1.0, 1.0, 2.0, baseline={"torch_median_ms": 0.8, "speedup_vs_torch": 1.6})
    r = Result(Status.CORRECT, timing=t)
    assert Result.from_dict(r.to_dict()).timing.baseline == t.baseline
    task = get_task("hardtanh")
    r = score(task, task.solution, EnvConfig(backend="cpu", sizes="small", correctness_trials=1, warmup_runs=1,
                                             timed_runs=2), device=cpu_device)
    assert r.status is Status.CORRECT and r.timing is not None and r.timing.baseline is None
    t = r.timing  # the spread of the timed runs, on the cpu backend too
    assert t.kernel_min_ms is not None and t.kernel_max_ms is not None
    assert t.kernel_min_ms <= t.kernel_median_ms <= t.kernel_max_ms
    assert Result.from_dict(r.to_dict()).timing == t
