"""Finding extern "C" __global__ kernels and their C parameters in device code."""
from __future__ import annotations

import pytest

from kernels_env.core.program import KernelParam
from kernels_env.source.signatures import (find_hidden_kernels, find_kernels, parse_param, strip_comments_and_strings)

SRC = r'''
#include <cuda_fp16.h>
#define BLOCK 256
// extern "C" __global__ void in_line_comment(int a) {}
/* extern "C" __global__ void in_block_comment(int a) {} */
__device__ const char* msg = "extern \"C\" __global__ void in_string(int a)";
extern "C" __global__ void __launch_bounds__(256, 2)
k1(const float* __restrict__ x, float *y, int n, unsigned m, long long q,
   const __half* h, float4* v, size_t sz, unsigned long long int big) { }
extern "C" {
__device__ float helper(float x) { return x; }
__global__ void k2(int64_t* a, float alpha, double beta) { }
__global__ __launch_bounds__(128) void k3(const __nv_bfloat16* __restrict__ b, half* c) { }
}
__global__ void mangled(float* x) {}
template <int B> __global__ void templ(float* x) {}
extern "C" __global__ void k4(void) {}
extern "C" __global__ void k5(float x[], int, const int* const idx) {}
'''


def test_finds_only_extern_c_kernels():
    ks = find_kernels(SRC)
    assert sorted(ks) == ["k1", "k2", "k3", "k4", "k5"]
    assert find_hidden_kernels(SRC) == ["mangled", "templ"]


def test_parameters():
    ks = find_kernels(SRC)
    got = [(p.name, p.base_type, p.pointer, p.const) for p in ks["k1"].params]
    assert got == [("x", "float", True, True), ("y", "float", True, False), ("n", "int", False, False),
                   ("m", "unsigned int", False, False), ("q", "long long", False, False),
                   ("h", "__half", True, True), ("v", "float4", True, False), ("sz", "size_t", False, False),
                   ("big", "unsigned long long", False, False)]
    assert ks["k1"].params[0].ctype == "const float* __restrict__"
    assert [(p.name, p.base_type, p.pointer) for p in ks["k2"].params] == [
        ("a", "int64_t", True), ("alpha", "float", False), ("beta", "double", False)]
    assert [(p.name, p.base_type, p.pointer, p.const) for p in ks["k3"].params] == [
        ("b", "__nv_bfloat16", True, True), ("c", "half", True, False)]
    assert ks["k4"].params == ()
    assert [(p.name, p.base_type, p.pointer) for p in ks["k5"].params] == [
        ("x", "float", True), ("arg1", "int", False), ("idx", "int", True)]


def test_comments_and_strings_are_blanked_keeping_lines():
    out = strip_comments_and_strings('a // qq\n/* y\n z */ "str" \'c\' extern "C"')
    assert out.count("\n") == 2 and "qq" not in out and "str" not in out and 'extern "C"' in out


@pytest.mark.parametrize("text, want", [
    ("const float* __restrict__ x", KernelParam("x", "const float* __restrict__", "float", True, True)),
    ("unsigned int", KernelParam("arg3", "unsigned int", "unsigned int", False, False)),
    ("long long int n", KernelParam("n", "long long int", "long long", False, False)),
    ("float2 *p", KernelParam("p", "float2*", "float2", True, False)),
    ("int n = 4", KernelParam("n", "int", "int", False, False)),
])
def test_parse_param(text, want):
    assert parse_param(text, 3) == want


def test_suite_solutions_have_kernels():
    from kernels_env.tasks import list_tasks
    from kernels_env.source.submission import extract_blocks
    for t in list_tasks():
        cuda, _ = extract_blocks(t.solution)
        assert find_kernels(cuda), t.name


from hypothesis import given, settings, strategies as st  # noqa: E402

_CUDA_FRAGMENTS = ['extern "C" ', "extern ", '"C"', "__global__ ", "void ", "k", "(", ")", "{", "}", "<", ">",
                   ",", "*", "const ", "float ", "int ", "unsigned ", "__launch_bounds__", "template ", "//",
                   "/*", "*/", "'", '"', "\\", "\n", "#define X", " ", "x", "=", "[", "]", "é", "__restrict__ "]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_CUDA_FRAGMENTS), max_size=50).map("".join))
def test_scanner_never_raises(src):
    ks = find_kernels(src)
    hidden = find_hidden_kernels(src)
    for name, sig in ks.items():
        assert name.isidentifier() and sig.name == name and name not in hidden
        assert all(isinstance(p, KernelParam) and p.name for p in sig.params)
