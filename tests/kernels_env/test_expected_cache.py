"""The masked per-trial cache of reference outputs (kernels_env/judge/expected_cache.py) and its harness wiring.

cpu half (here): SipHash against the reference vector, masked storage holds no plaintext, tampering
is detected and recomputed, the byte-bounded LRU, the fused rule (its CUDA source built for the host
too) against compare_output, scrubbing, and identical statuses and messages with the cache on and
off. GPU half (`gpu`-marked, skipped without one):
    python -m pytest -q tests/kernels_env/test_expected_cache.py -m gpu
"""
from __future__ import annotations

import ctypes
import dataclasses
import re
import shutil
import subprocess
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels_env.judge import compare
from kernels_env.judge import expected_cache as ec
from kernels_env.execute import harness
from kernels_env.judge.poison import INT_SENTINEL, POISON_BITS
from kernels_env.execute.result_cache import cache_key
from kernels_env.core.config import EnvConfig
from kernels_env.tasks.spec import Buffer, Task

gpu = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _cache_on_numpy(monkeypatch):
    """Run the harness's cached path on the cpu backend too (it is CuPy-only by default)."""
    monkeypatch.setattr(ec, "USE_ON_NUMPY", True)
FLOAT_COMBOS = [(s, o) for s in ec.FLOAT_STORE for o in ("float16", "float32", "float64")]
INT_COMBOS = [("int64", "int32"), ("int64", "int64")]


# ---- SipHash, masking, checksum ------------------------------------------------------------------
def test_siphash_matches_the_reference_vector():
    # Aumasson & Bernstein's vectors: key 00..0f, message 00..07 -> 0x93f5f5799a932462
    k0 = int.from_bytes(bytes(range(8)), "little")
    k1 = int.from_bytes(bytes(range(8, 16)), "little")
    m = np.array([int.from_bytes(bytes(range(8)), "little")], dtype=np.uint64)
    assert int(ec.siphash_words(k0, k1, m)[0]) == 0x93F5F5799A932462


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int64"])
def test_masked_storage_holds_no_plaintext(dtype):
    rng = np.random.default_rng(1)
    plain = (rng.standard_normal(4096) * 100).astype(dtype)
    plain[:512] = 0  # long runs of one value must not show through either
    m = ec.mask_output(np, plain)
    exp = plain.reshape(-1)
    same = int((m.data == exp.view(m.data.dtype)).sum())
    assert same <= plain.size // 100, f"{same} of {plain.size} stored elements equal the plaintext"
    blob = m.data.tobytes()
    raw = plain.tobytes()
    for start in range(0, len(raw) - 16, 997):
        assert raw[start:start + 16] not in blob
    assert raw not in blob
    back = m.unmask(np)
    assert back.dtype == plain.dtype and np.array_equal(back.view(m.data.dtype), exp.view(m.data.dtype))


def test_keys_differ_per_entry():
    plain = np.arange(100, dtype=np.float32)
    a, b = ec.mask_output(np, plain), ec.mask_output(np, plain)
    assert (a.k0, a.k1) != (b.k0, b.k1) and not np.array_equal(a.data, b.data)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int64"])
def test_any_changed_word_fails_the_checksum(dtype):
    plain = np.linspace(-3, 3, 777).astype(dtype)
    m = ec.mask_output(np, plain)
    assert m.verify(np)
    for i, bit in ((0, 0), (776, m.data.itemsize * 8 - 1), (300, 7)):
        saved = m.data[i]
        m.data[i] ^= m.data.dtype.type(1 << bit)
        assert not m.verify(np)
        assert m.check(np, plain, "float32" if dtype != "int64" else "int64", 0.0, 0.0,
                       bad_of=compare.mismatch_mask) is None
        m.data[i] = saved
    assert m.verify(np)


# ---- the LRU -------------------------------------------------------------------------------------
def test_lru_eviction_respects_the_byte_bound():
    one = ec.mask_output(np, np.zeros(256, np.float32))  # 1 KiB
    cache = ec.ExpectedCache(max_bytes=3 * 1024)
    for k in "abc":
        assert cache.put(k, [ec.mask_output(np, np.zeros(256, np.float32))])
    assert cache.nbytes == 3 * 1024 and len(cache) == 3
    assert cache.get("a") is not None  # a is now the most recent
    assert cache.put("d", [one])
    assert "b" not in cache and {"a", "c", "d"} == {k for k in "abcd" if k in cache}
    assert cache.nbytes <= cache.max_bytes and cache.evictions == 1
    assert cache.put("e", [one, one, one])  # 3 KiB: evicts everything else
    assert len(cache) == 1 and cache.nbytes == 3 * 1024
    assert not cache.put("f", [one] * 4) and "f" not in cache  # larger than the bound: not stored
    assert cache.put("e", [one]) and cache.nbytes == 1024  # replacing an entry frees the old bytes
    cache.discard("e", tampered=True)
    assert len(cache) == 0 and cache.nbytes == 0 and cache.tampered == 1
    with pytest.raises(ValueError, match="max_bytes"):
        ec.ExpectedCache(-1)


# ---- the fused rule ------------------------------------------------------------------------------
_HOST_SHIM = r"""
#include <cmath>
using std::isfinite; using std::isnan; using std::ldexp; using std::fabs;
#define __device__
#define __forceinline__ inline
#define __global__
struct leap_dim { unsigned int x; };
static leap_dim blockIdx = {0}, threadIdx = {0}, blockDim = {1}, gridDim = {1};
static inline unsigned long long __shfl_down_sync(unsigned, unsigned long long, int) { return 0ull; }
static inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    unsigned long long o = *p; *p += v; return o; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
"""
_host_kernels: dict[tuple[str, str], Any] = {}


def _host_kernel(tmp_path_factory, stored: str, out: str) -> Any:
    """leap_expected_check's CUDA source built for the host (one thread, no FMA contraction)."""
    key = (stored, out)
    if key not in _host_kernels:
        cxx = shutil.which("c++") or shutil.which("g++")
        if cxx is None:
            pytest.skip("no host C++ compiler")
        d = tmp_path_factory.mktemp(f"check_{stored}_{out}")
        (d / "k.cpp").write_text(_HOST_SHIM + ec.cuda_check_source(stored, out))
        subprocess.run([cxx, "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-o", str(d / "k.so"),
                        str(d / "k.cpp")], check=True, capture_output=True)
        fn = ctypes.CDLL(str(d / "k.so")).leap_expected_check
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_ulonglong,
                       ctypes.c_ulonglong, ctypes.c_double, ctypes.c_double, ctypes.c_int, ctypes.c_void_p]
        _host_kernels[key] = fn
    return _host_kernels[key]


def _host_check(tmp_path_factory, m: ec.MaskedOutput, got: np.ndarray, out: str, atol: float,
                rtol: float) -> tuple[int, int]:
    fn = _host_kernel(tmp_path_factory, m.dtype, out)
    acc = np.zeros(2, np.uint64)
    g = np.ascontiguousarray(got).reshape(-1)
    fn(m.data.ctypes.data, g.ctypes.data, m.data.size, m.k0, m.k1, atol, rtol, 1, acc.ctypes.data)
    return int(acc[0]), int(acc[1])


def _cases(rng: np.random.Generator, stored: str, out: str, n: int, atol: float, rtol: float
           ) -> tuple[np.ndarray, np.ndarray]:
    """(expected in `stored`, got in `out`) with NaN/Inf/poison/sentinels and values on the tolerance
    boundary (one ulp either side), for the agreement tests."""
    if out in INT_SENTINEL:
        e = rng.integers(-50, 50, n).astype(np.int64)
        e[rng.random(n) < 0.05] = np.iinfo(np.int64).min
        e[rng.random(n) < 0.05] = np.iinfo(np.int64).max
        g = e + rng.integers(-3, 4, n) * (rng.random(n) < 0.5)
        g[rng.random(n) < 0.1] = INT_SENTINEL[out]
        g[rng.random(n) < 0.05] = 0
        info = np.iinfo(out)
        return e, np.clip(g, info.min, info.max).astype(out)
    e = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(stored)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 65504.0], dtype=stored)
    pick = rng.random(n) < 0.15
    e[pick] = rng.choice(specials, int(pick.sum()))
    e64 = e.astype(np.float64)
    with np.errstate(all="ignore"):
        thr = atol + rtol * np.abs(e64)
        edge = e64 + rng.choice([-1.0, 1.0], n) * thr
        g = np.where(rng.random(n) < 0.5, e64, edge)
        g = np.where(rng.random(n) < 0.3, np.nextafter(g, rng.choice([-np.inf, np.inf], n)), g)
        g = np.where(rng.random(n) < 0.1, rng.choice([np.nan, np.inf, -np.inf], n), g)
        g = g.astype(out)
    utype, bits = POISON_BITS[out]
    g.view(utype)[rng.random(n) < 0.05] = bits
    return e, g


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(combo=st.sampled_from(FLOAT_COMBOS + INT_COMBOS), seed=st.integers(0, 2**32 - 1),
       n=st.integers(1, 300), atol=st.sampled_from([0.0, 1e-8, 1e-5, 1e-3, 0.5]),
       rtol=st.sampled_from([0.0, 1e-5, 1e-3, 1e-2]))
def test_fused_rule_agrees_with_compare_output(tmp_path_factory, combo, seed, n, atol, rtol):
    stored, out = combo
    rng = np.random.default_rng(seed)
    e, g = _cases(rng, stored, out, n, atol, rtol)
    plain = ec.normalise_expected(np, e, out, (n,))
    m = ec.mask_output(np, plain)
    with np.errstate(all="ignore"):
        want = int(compare.mismatch_mask(np, g, plain, out, atol, rtol).sum())
    mism = compare.compare_output(np, "y", g, e, out, atol, rtol, 0, "t")
    assert (mism is not None) == (want > 0)
    if mism is not None:
        assert mism.frac_mismatched == want / n
    assert m.check(np, g, out, atol, rtol, bad_of=compare.mismatch_mask) == want
    mac, bad = _host_check(tmp_path_factory, m, g, out, atol, rtol)
    assert (mac, bad) == (m.mac, want), "the CUDA source's rule or checksum differs from NumPy's"


def test_int_outputs_of_a_float_reference_use_rint():
    e = np.array([0.5, 1.5, 2.4999, -0.5, 7.0], np.float32)
    plain = ec.normalise_expected(np, e, "int64", (5,))
    assert plain.dtype == np.int64 and plain.tolist() == [0, 2, 2, 0, 7]
    assert ec.normalise_expected(np, e, "int64", (4,)) is None  # wrong element count: not cached
    assert ec.normalise_expected(np, e.astype(np.float16), "float32", (5,)).dtype == np.float16
    assert ec.normalise_expected(np, np.arange(5), "float32", (5,)).dtype == np.float64


# ---- scrubbing -----------------------------------------------------------------------------------
def test_scrub_zeroes_temporaries_but_not_inputs():
    x = np.ones(8, np.float32)
    t, view = np.full(8, 3.0, np.float32), x[2:]
    ec.scrub(np, [t, view], keep=[x])
    assert not ec.scrub_wanted(np) and t.tolist() == [3.0] * 8  # NumPy: nothing to hide
    ec.scrub(np, [t, view, 5.0], keep=[x], force=True)
    assert not t.any() and x.all()


def _fake_run(task: Task, sizes: dict[str, int], cache: bool = True) -> harness._Run:
    device = SimpleNamespace(xp=np, name="fake")
    cfg = EnvConfig(backend="cpu", sizes="small", seed=0, cache_expected=cache)
    return harness._Run(device, None, task, None, sizes, cfg)  # type: ignore[arg-type]


def _recording_task(returned: list[Any], alias: bool = False) -> Task:
    def ref(xp: Any, x: Any) -> Any:
        out = x if alias else (x * 2).astype(xp.float32)
        returned.append(out)
        return out
    return Task(name="rec", level=1, description="", sizes={"eval": {"N": 64}, "small": {"N": 64}},
                inputs=(Buffer("x", "float32", ("N",)),), outputs=(Buffer("y", "float32", ("N",)),),
                reference=ref, solution="")


@pytest.mark.parametrize("cache", [True, False])
def test_reference_outputs_are_zeroed_after_the_comparison(monkeypatch, cache):
    monkeypatch.setattr(ec, "scrub_wanted", lambda xp: True)
    returned: list[Any] = []
    run = _fake_run(_recording_task(returned), {"N": 64}, cache)
    x = np.linspace(1, 2, 64, dtype=np.float32)
    assert run.check_outputs(0, 0, {"x": x}, {"y": x * 2}, "t") is None
    assert len(returned) == 1 and not returned[0].any() and x.all()
    if cache:  # the hit path: no reference call, the unmasked fallback temporary is zeroed too
        assert run.check_outputs(0, 0, {"x": x}, {"y": x * 3}, "t") is not None
        assert len(returned) == 1


def test_a_reference_returning_its_input_is_not_zeroed(monkeypatch):
    monkeypatch.setattr(ec, "scrub_wanted", lambda xp: True)
    returned: list[Any] = []
    run = _fake_run(_recording_task(returned, alias=True), {"N": 64})
    x = np.linspace(1, 2, 64, dtype=np.float32)
    assert run.check_outputs(0, 0, {"x": x}, {"y": x.copy()}, "t") is None
    assert x.all()


def test_expected_outputs_is_plaintext_from_the_cache(monkeypatch):
    returned: list[Any] = []
    run = _fake_run(_recording_task(returned), {"N": 64})
    x = np.linspace(1, 2, 64, dtype=np.float32)
    first = run.expected_outputs(3, 7, {"x": x})
    again = run.expected_outputs(3, 7, {"x": x})
    assert len(returned) == 1 and np.array_equal(first[0], again[0]) and np.array_equal(again[0], x * 2)
    run.scrub_expected(again, {"x": x})


# ---- the harness: same results with the cache on and off -----------------------------------------
def _outcome(r: Any, garbage_values: bool = False) -> tuple[Any, ...]:
    """What must not depend on the cache. A fault's address, and so which thread of an overrunning
    kernel faults first and how far past the allocation, varies with where the allocator put the
    buffer (the cache's own arrays change the cpu backend's layout: 0 or 284 bytes of slack before
    the guard page were both seen); the status, the stage and the mismatch must not."""
    mismatch = repr(dataclasses.asdict(r.mismatch)) if r.mismatch else None  # repr: NaN == NaN
    if garbage_values:  # values read from uninitialised memory (broken_corpus.Case.garbage_values)
        # (garbage may be a NaN, so even the mismatch's reason may change: mismatch or nan_or_inf)
        return (r.status.value, None if r.mismatch is None else r.mismatch.buffer, r.trials)
    msg = re.sub(r"0x[0-9a-f]{6,}", "0x?", r.message)
    msg = re.sub(r"\(\d+ bytes (past the end|before the start) of", r"(N bytes \1 of", msg)
    msg = re.sub(r"in block \(\d+,\d+,\d+\) thread \(\d+,\d+,\d+\)", "in block (?) thread (?)", msg)
    return (r.status.value, msg, mismatch, r.trials)


INT_TASK = Task(
    name="ec_round_int64", level=1, description="y[i] = rint(x[i] * 10) as int64",
    sizes={"eval": {"N": 4096}, "small": {"N": 1000}},
    inputs=(Buffer("x", "float32", ("N",)),), outputs=(Buffer("y", "int64", ("N",)),),
    reference=lambda xp, x: x.astype(xp.float64) * 10.0, solution="""```cuda
extern "C" __global__ void k(const float* x, long long* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = (long long)rint((double)x[i] * 10.0);
}
```
```launch
k<<<cdiv(N, 128), 128>>>(x, y, N);
```""")
HALF_TASK = Task(
    name="ec_half_affine", level=1, description="y = 2x + 1 in half precision",
    sizes={"eval": {"N": 4096}, "small": {"N": 1000}},
    inputs=(Buffer("x", "float16", ("N",)),), outputs=(Buffer("y", "float16", ("N",)),),
    reference=lambda xp, x: (x.astype(xp.float32) * 2 + 1).astype(xp.float16), solution="""```cuda
#include <cuda_fp16.h>
extern "C" __global__ void k(const __half* x, __half* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2half(__half2float(x[i]) * 2.0f + 1.0f);
}
```
```launch
k<<<cdiv(N, 128), 128>>>(x, y, N);
```""")


def _variants(task: Task) -> list[tuple[str, str]]:
    """The solution and known-wrong variants of it (unwritten tail, off formula, NaN, sentinel)."""
    s = task.solution
    out = [("good", s), ("unwritten_tail", s.replace("if (i < n)", "if (i < n - 3)"))]
    if task is INT_TASK:
        out += [("off_by_one", s.replace("* 10.0)", "* 10.0) + (i % 97 == 5)")),
                ("huge", s.replace("y[i] = ", "y[i] = (i == 7) ? (long long)(-9223372036854775807LL - 1) : "))]
    else:
        out += [("off", s.replace("+ 1.0f", "+ 1.0f + (i == 11 ? 0.5f : 0.0f)")),
                ("nan", s.replace("y[i] = ", "y[i] = (i == 3) ? __float2half(nanf(\"\")) : "))]
    return out


def _score_all(device: Any, cases: list[tuple[Task, str]], cache: bool) -> list[tuple[Any, ...]]:
    from kernels_env.execute.score import score
    cfg = EnvConfig(backend="cpu", sizes="small", seed=0, timing=False, correctness_trials=3, cache_expected=cache)
    return [_outcome(score(t, text, cfg, device=device)) for t, text in cases]


@pytest.fixture(scope="module")
def harness_cases() -> list[tuple[Task, str]]:
    import kernels_env.tasks as T
    from tests.kernels_env.broken_corpus import CASES, TASKS
    picks = {"argmax_dim", "argmin_dim", "conv2d", "cross_entropy", "softmax", "layernorm", "gelu_erf", "matmul"}
    suite = [(t, t.solution) for t in T.list_tasks() if t.name in picks or t.outputs[0].dtype == "float16"]
    corpus = [(TASKS[c.task], c.text) for c in CASES if c.expected_for("cpu") != "timeout"]
    mine = [(t, text) for t in (INT_TASK, HALF_TASK) for _, text in _variants(t)]
    return suite[:12] + corpus + mine


def test_cache_on_and_off_give_identical_results(cpu_device, harness_cases):
    from tests.kernels_env.broken_corpus import register_corpus_tasks
    register_corpus_tasks()
    cpu_device.__dict__.pop("_harness_expected", None)
    off = _score_all(cpu_device, harness_cases, cache=False)
    assert "_harness_expected" not in cpu_device.__dict__
    cold = _score_all(cpu_device, harness_cases, cache=True)
    cache = cpu_device.__dict__["_harness_expected"]
    misses = cache.misses
    warm = _score_all(cpu_device, harness_cases, cache=True)
    assert cache.hits > 0 and cache.misses == misses, "the second pass must be served from the cache"
    for (t, _), a, b, c in zip(harness_cases, off, cold, warm, strict=True):
        assert a == b == c, f"{t.name}: off {a}\ncold {b}\nwarm {c}"
    statuses = {o[0] for o in off}
    assert {"correct", "wrong_output"} <= statuses
    assert any(o[2] and "'unwritten'" in o[2] for o in off)
    assert any(o[2] and "'nan_or_inf'" in o[2] for o in off)


def test_tampered_entries_are_detected_and_recomputed(cpu_device):
    from kernels_env.execute.score import score
    cfg = EnvConfig(backend="cpu", sizes="small", seed=0, timing=False, correctness_trials=2)
    cpu_device.__dict__.pop("_harness_expected", None)
    assert score(HALF_TASK, HALF_TASK.solution, cfg, device=cpu_device).status.value == "correct"
    cache = cpu_device.__dict__["_harness_expected"]
    assert len(cache) == 2
    keys = list(cache._entries)
    # what a hostile kernel could do without the key: flip bits; and, even knowing the key, store a
    # different expected output (so a good submission would fail) without updating the host checksum
    e0 = cache._entries[keys[0]].outputs[0]
    e0.data[5] ^= np.uint16(0x40)
    e1 = cache._entries[keys[1]].outputs[0]
    forged = ec._np_xor_stream(np.zeros(e1.data.size, np.uint16), e1.k0, e1.k1)
    e1.data[:] = forged
    r = score(HALF_TASK, HALF_TASK.solution, cfg, device=cpu_device)
    assert r.status.value == "correct", r.message
    assert cache.tampered == 2 and len(cache) == 2
    assert all(o.verify(np) for k in cache._entries for o in cache._entries[k].outputs)
    assert all(cache._entries[k].outputs[0] is not old for k, old in zip(keys, (e0, e1), strict=True))


# ---- config --------------------------------------------------------------------------------------
def test_the_cache_is_cupy_only_by_default(monkeypatch, cpu_device):
    from kernels_env.execute.score import score
    monkeypatch.setattr(ec, "USE_ON_NUMPY", False)
    cpu_device.__dict__.pop("_harness_expected", None)
    cfg = EnvConfig(backend="cpu", sizes="small", seed=0, timing=False, correctness_trials=1)
    assert score(HALF_TASK, HALF_TASK.solution, cfg, device=cpu_device).status.value == "correct"
    assert "_harness_expected" not in cpu_device.__dict__
    assert ec.used_on(SimpleNamespace(__name__="cupy")) and not ec.used_on(np)


def test_config_validates_and_the_result_key_ignores_the_switch():
    with pytest.raises(ValueError, match="cache_expected"):
        EnvConfig(cache_expected="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected_cache_bytes"):
        EnvConfig(expected_cache_bytes=-1)
    assert EnvConfig.from_dict(EnvConfig(cache_expected=False).to_dict()).cache_expected is False
    text = "```cuda\nx\n```\n```launch\nk<<<1, 1>>>(y);\n```"
    base = cache_key("t", text, EnvConfig())
    assert cache_key("t", text, EnvConfig(cache_expected=False, expected_cache_bytes=0)) == base
    assert cache_key("t", text, EnvConfig(correctness_trials=4)) != base


# ---- GPU -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cupy_device():
    from kernels_env.backends import get_device
    dev = get_device("cupy", EnvConfig(backend="cupy"))
    yield dev
    dev.close()


@gpu
@pytest.mark.parametrize("combo", FLOAT_COMBOS + INT_COMBOS, ids=lambda c: f"{c[0]}-{c[1]}")
def test_gpu_fused_check_agrees_with_compare_output(cupy_device, combo):
    import cupy
    stored, out = combo
    for seed, (atol, rtol) in enumerate([(0.0, 0.0), (1e-5, 1e-5), (1e-3, 1e-2), (0.5, 0.0)]):
        rng = np.random.default_rng(seed)
        e, g = _cases(rng, stored, out, 5000, atol, rtol)
        ce, cg = cupy.asarray(e), cupy.asarray(g)
        plain = ec.normalise_expected(cupy, ce, out, (5000,))
        m = ec.mask_output(cupy, plain)
        want = int(compare.mismatch_mask(cupy, cg, plain, out, atol, rtol).sum())
        mism = compare.compare_output(cupy, "y", cg, ce, out, atol, rtol, 0, "t")
        assert (mism is not None) == (want > 0)
        assert m.check(cupy, cg, out, atol, rtol) == want, (seed, atol, rtol)
        # the device checksum is the NumPy formula's
        assert m.mac == ec._np_mac(cupy.asnumpy(m.data), m.k0, m.k1)
        assert cupy.array_equal(m.unmask(cupy).view(m.data.dtype), plain.reshape(-1).view(m.data.dtype))


@gpu
def test_gpu_masked_storage_holds_no_plaintext_and_tamper_is_detected(cupy_device):
    import cupy
    plain = cupy.asarray(np.random.default_rng(0).standard_normal(1 << 16).astype(np.float32))
    m = ec.mask_output(cupy, plain)
    host, raw = cupy.asnumpy(m.data), cupy.asnumpy(plain)
    assert int((host == raw.view(np.uint32)).sum()) < 64
    assert raw.tobytes()[:64] not in host.tobytes()
    assert np.array_equal(host, ec._np_xor_stream(raw.view(np.uint32), m.k0, m.k1))
    assert m.verify(cupy) and m.check(cupy, plain, "float32", 0.0, 0.0) == 0
    m.data[123] ^= cupy.uint32(1)
    assert not m.verify(cupy) and m.check(cupy, plain, "float32", 0.0, 0.0) is None


@gpu
def test_gpu_cache_on_and_off_give_identical_results(cupy_device):
    from kernels_env.execute.score import score
    from tests.kernels_env.broken_corpus import CASES, TASKS, register_corpus_tasks
    register_corpus_tasks()
    cases = [(TASKS[c.task], c.text, c.garbage_values) for c in CASES
             if c.expected_for("cupy") in ("correct", "wrong_output")]
    cases += [(t, text, False) for t in (INT_TASK, HALF_TASK) for _, text in _variants(t)]
    runs = []
    for cache in (False, True, True):
        cfg = EnvConfig(backend="cupy", sizes="small", timing=False, correctness_trials=3, cache_expected=cache, seed=0)
        runs.append([_outcome(score(t, text, cfg, device=cupy_device), garbage) for t, text, garbage in cases])
    assert runs[0] == runs[1] == runs[2]
    assert cupy_device.__dict__["_harness_expected"].hits > 0


def test_scrub_zeroes_arrays_whose_flags_have_no_writeable():
    """CuPy arrays' flags have no `writeable` (they always are): scrub once raised AttributeError on
    every CuPy evaluation (env_error everywhere on the H200). A stand-in with CuPy-like flags."""
    class Flags:
        c_contiguous = True

    class DeviceLike:
        def __init__(self, values):
            self.values, self.flags = np.array(values, np.float32), Flags()

        def fill(self, v):
            self.values.fill(v)

    a = DeviceLike([1.0, 2.0])
    ec.scrub(np, [a], force=True)
    assert a.values.tolist() == [0.0, 0.0]
