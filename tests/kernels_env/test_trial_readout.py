"""A correctness trial's checks read back once (kernels_env/judge/trial_readout.py) and the harness's
input checksums.

cpu half (here): the readout's counts against plain NumPy, the guard kernel's CUDA source built for
the host, and the harness on the cpu backend with the checksum path (expected_cache.used_on turned
on) against the path that compares inputs with copies: the same statuses, messages and mismatches
over the broken corpus, an input-rewriting attack caught, no input drawn twice for a correct
kernel, a checksum that disagrees with the bits reported as the environment's fault. GPU half
(`gpu`-marked): the CuPy kernels against the NumPy numbers, and the same corpus on the cupy backend
with and without the readout.
    python -m pytest -q tests/kernels_env/test_trial_readout.py -m gpu
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from typing import Any

import numpy as np
import pytest

from kernels_env.core.config import EnvConfig
from kernels_env.execute import buffers, harness, inputs
from kernels_env.judge import expected_cache as ec
from kernels_env.judge import trial_readout as tr
from kernels_env.judge.poison import bits, poison_bits
from kernels_env.tasks.spec import Buffer, Task
from tests.kernels_env.test_expected_cache import _outcome

gpu = pytest.mark.gpu
DTYPES = ("float32", "float16", "int32", "int64")


def _poisoned(xp: Any, dtype: str, n: int = 1000) -> tuple[Any, Any, tuple[Any, Any]]:
    class _Dev:
        def empty(self, shape, dt):  # noqa: ANN001, ANN202
            return xp.empty(shape, dtype=dt)
    return buffers.alloc_poisoned(_Dev(), (n,), dtype)  # type: ignore[arg-type]


def _changed(guard: Any, dtype: str) -> int:
    utype, value = poison_bits(dtype)
    return int((guard.view(utype) != utype(value)).sum())


# ---- the readout on NumPy --------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_guard_counts_are_the_changed_elements_before_and_after(dtype):
    _, buf, (lead, trail) = _poisoned(np, dtype)
    rng = np.random.default_rng(0)
    lead[rng.integers(0, lead.size, 5)] = 0
    trail[-1] = 1
    r = tr.TrialReadout(np, 2)
    i, j = r.guards((lead, trail), dtype), r.guards(_poisoned(np, dtype)[2], dtype)
    v = r.read()
    assert (v[i], v[i + 1]) == (_changed(lead, dtype), 1) and v[i] >= 1
    assert (v[j], v[j + 1]) == (0, 0)
    with pytest.raises(ValueError, match="one more"):
        r.guards((lead, trail), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_checksum_is_the_entries_formula_and_moves_with_any_bit(dtype):
    a = (np.arange(777) * 3 - 100).astype(dtype)
    key = (12345, 678910)
    r = tr.TrialReadout(np, 3)
    s0 = r.checksum(a, key)
    b = a.copy()
    bits(np, b)[400] ^= 1  # one low bit of one element
    s1 = r.checksum(b, key)
    s2 = r.checksum(a, (key[0] + 1, key[1]))
    v = r.read()
    assert v[s0] == ec._np_mac(bits(np, a), *key)
    assert v[s1] != v[s0] and v[s2] != v[s0]


def test_the_expected_slots_are_the_fused_check():
    plain = np.linspace(-2, 2, 500).astype(np.float32)
    m = ec.mask_output(np, plain)
    got = plain.copy()
    got[[3, 70]] += 1
    r = tr.TrialReadout(np, 2)
    i, j = r.expected(m, plain, "float32", 1e-5, 1e-5), r.expected(m, got, "float32", 1e-5, 1e-5)
    v = r.read()
    assert (v[i], v[i + 1], v[j], v[j + 1]) == (m.mac, 0, m.mac, 2)
    m.data[0] ^= np.uint32(1)  # an overwritten entry: the checksum slot no longer equals mac
    r = tr.TrialReadout(np, 1)
    k = r.expected(m, plain, "float32", 1e-5, 1e-5)
    assert r.read()[k] != m.mac


def test_an_input_digest_keeps_a_fresh_key_and_one_value_per_input():
    x, y = np.arange(10, dtype=np.float32), np.arange(4, dtype=np.int64)
    d1, d2 = tr.InputDigest.of(np, {"x": x, "y": y}), tr.InputDigest.of(np, {"x": x, "y": y})
    assert d1.key != d2.key and set(d1.values) == {"x", "y"}
    assert d1.values["x"] == ec._np_mac(bits(np, x), *d1.key)
    assert d1.values["y"] == ec._np_mac(bits(np, y), *d1.key)


# ---- the guard kernel's CUDA source on the host ---------------------------------------------------
_HOST_SHIM = r"""
#define __device__
#define __forceinline__ inline
#define __global__
struct leap_dim { unsigned int x; };
static leap_dim blockIdx = {0}, threadIdx = {0}, blockDim = {1}, gridDim = {1};
static inline unsigned long long __shfl_down_sync(unsigned, unsigned long long, int) { return 0ull; }
static inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    unsigned long long o = *p; *p += v; return o; }
"""


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_guard_kernel_source_counts_like_numpy(tmp_path, dtype):
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    utype, value = poison_bits(dtype)
    width = np.dtype(utype).itemsize
    (tmp_path / "k.cpp").write_text(f"#define LEAP_U {tr._C_UINT[width]}\n" + _HOST_SHIM + tr._GUARD_SOURCE)
    subprocess.run([cxx, "-O1", "-shared", "-fPIC", "-o", str(tmp_path / "k.so"), str(tmp_path / "k.cpp")],
                   check=True, capture_output=True)
    fn = ctypes.CDLL(str(tmp_path / "k.so")).leap_guard_count
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ulonglong,
                   {2: ctypes.c_ushort, 4: ctypes.c_uint, 8: ctypes.c_ulonglong}[width], ctypes.c_void_p]
    _, _, (lead, trail) = _poisoned(np, dtype)
    rng = np.random.default_rng(3)
    lead[rng.integers(0, lead.size, 9)] = 2
    trail[rng.integers(0, trail.size, 4)] = 0
    acc = np.zeros(2, np.uint64)
    lb, tb = np.ascontiguousarray(bits(np, lead)), np.ascontiguousarray(bits(np, trail))
    fn(lb.ctypes.data, tb.ctypes.data, lead.size, value, acc.ctypes.data)
    assert (int(acc[0]), int(acc[1])) == (_changed(lead, dtype), _changed(trail, dtype))


# ---- the harness: checksum path against the copies path (cpu backend) ------------------------------
TWICE = Task(
    name="tr_twice", level=1, description="y = 2x",
    sizes={"eval": {"N": 4096}, "small": {"N": 1000}},
    inputs=(Buffer("x", "float32", ("N",)),), outputs=(Buffer("y", "float32", ("N",)),),
    reference=lambda xp, x: 2 * x, solution="""```cuda
extern "C" __global__ void k(float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
```
```launch
k<<<cdiv(N, 128), 128>>>(x, y, N);
```""")
# zeroes its output and its input: the reference on the rewritten input agrees with the output
ZERO_BOTH = TWICE.solution.replace("y[i] = 2.0f * x[i];", "{ x[i] = 0.0f; y[i] = 0.0f; }")
# restores the input after using it as scratch: allowed (the bits it leaves are the ones it got)
RESTORES = TWICE.solution.replace("y[i] = 2.0f * x[i];", "{ float v = x[i]; x[i] = -v; y[i] = -2.0f * x[i]; x[i] = v; }")


def _config(**kw: Any) -> EnvConfig:
    return EnvConfig(backend="cpu", sizes="small", timing=False, correctness_trials=3, seed=0, **kw)  # one draw for both paths


def _score(device: Any, task: Task, text: str, **kw: Any) -> Any:
    from kernels_env.execute.score import score
    return score(task, text, _config(**kw), device=device)


@pytest.fixture()
def readout_on(monkeypatch):
    monkeypatch.setattr(ec, "USE_ON_NUMPY", True)


def test_checksum_path_and_copies_path_agree_over_the_broken_corpus(cpu_device, monkeypatch):
    from tests.kernels_env.broken_corpus import CASES, TASKS, register_corpus_tasks
    register_corpus_tasks()
    cases = [(TASKS[c.task], c.text, c.garbage_values) for c in CASES if c.expected_for("cpu") != "timeout"]
    cases += [(TWICE, text, False) for text in (TWICE.solution, ZERO_BOTH, RESTORES)]
    runs = []
    monkeypatch.setattr(ec, "USE_ON_NUMPY", True)
    for on in (False, True):  # off: inputs compared with the cpu backend's copies
        cpu_device.__dict__.pop("_harness_expected", None)
        runs.append([_outcome(_score(cpu_device, t, text, input_checksums=on), garbage)
                     for t, text, garbage in cases])
    for (t, _, _), a, b in zip(cases, *runs, strict=True):
        assert a == b, f"{t.name}: copies {a}\nchecksums {b}"
    statuses = {o[0] for o in runs[1]}
    assert {"correct", "wrong_output", "runtime_error"} <= statuses


def test_a_kernel_that_rewrites_its_input_to_match_is_caught(cpu_device, readout_on):
    cpu_device.__dict__.pop("_harness_inputs", None)
    for _ in range(2):  # inputs drawn, then copied from the input cache
        r = _score(cpu_device, TWICE, ZERO_BOTH)
        assert r.status.value == "wrong_output" and r.mismatch is not None, r.message
        assert r.mismatch.reason == "input_modified" and r.mismatch.buffer == "x", r.message
    assert cpu_device.__dict__["_harness_inputs"].hits >= 1
    assert _score(cpu_device, TWICE, RESTORES).status.value == "correct"


@pytest.fixture()
def draws(monkeypatch) -> list[int]:
    """The trials whose inputs the harness draws (make_inputs calls); a second draw of a trial fails."""
    seen: list[int] = []
    real = inputs.make_inputs

    def counted(*a: Any, **kw: Any) -> Any:
        seen.append(a[2])
        return real(*a, **kw)
    monkeypatch.setattr(harness, "make_inputs", counted)
    monkeypatch.setattr(harness._Run, "pristine_inputs", lambda *a: pytest.fail("inputs drawn again"))
    return seen


def test_a_correct_kernel_draws_each_trial_once_and_then_never(cpu_device, readout_on, draws):
    """The checksum path judges inputs without a second draw (on a GPU without checksums every trial
    drew its inputs twice), and the next evaluation of the task copies the cached inputs."""
    cpu_device.__dict__.pop("_harness_inputs", None)
    r = _score(cpu_device, TWICE, TWICE.solution, cache_expected=False)
    assert r.status.value == "correct", r.message
    assert draws == [0, 1, 2]
    again = _score(cpu_device, TWICE, TWICE.solution, cache_expected=False)
    assert (again.status, again.message) == (r.status, r.message) and draws == [0, 1, 2]
    cache = cpu_device.__dict__["_harness_inputs"]
    assert (len(cache), cache.hits, cache.misses, cache.tampered) == (3, 3, 3, 0)


def test_a_rewritten_cached_input_is_dropped_and_drawn_again(cpu_device, readout_on, draws):
    cpu_device.__dict__.pop("_harness_inputs", None)
    assert _score(cpu_device, TWICE, TWICE.solution).status.value == "correct"
    cache = cpu_device.__dict__["_harness_inputs"]
    stored = list(cache._entries.values())
    stored[1].arrays["x"][7] += 1.0  # what a far write could do to a kept input between evaluations
    stored[2].arrays["x"][:] = 0.0
    draws.clear()
    r = _score(cpu_device, TWICE, TWICE.solution)
    assert r.status.value == "correct", r.message
    assert draws == [1, 2] and cache.tampered == 2 and len(cache) == 3


def test_large_trials_are_not_kept(cpu_device, readout_on, draws, monkeypatch):
    from kernels_env.execute import input_cache
    monkeypatch.setattr(input_cache, "MAX_TRIAL_BYTES", 1000 * 4 - 1)  # TWICE's small x: 1000 float32
    cpu_device.__dict__.pop("_harness_inputs", None)
    for _ in range(2):
        assert _score(cpu_device, TWICE, TWICE.solution).status.value == "correct"
    assert draws == [0, 1, 2, 0, 1, 2] and len(cpu_device.__dict__["_harness_inputs"]) == 0


def test_a_checksum_that_disagrees_with_equal_bits_is_an_env_error(cpu_device, readout_on, monkeypatch):
    real = tr.InputDigest.of.__func__  # type: ignore[attr-defined]

    def off_by_one(cls: Any, xp: Any, arrays: dict[str, Any]) -> tr.InputDigest:
        d = real(cls, xp, arrays)
        return tr.InputDigest(d.key, {k: v ^ 1 for k, v in d.values.items()})
    monkeypatch.setattr(tr.InputDigest, "of", classmethod(off_by_one))
    r = _score(cpu_device, TWICE, TWICE.solution)
    assert r.status.value == "env_error" and "checksum" in r.message, r.message


def test_a_failed_guard_check_counts_no_cache_lookup(cpu_device, readout_on):
    from tests.kernels_env.broken_corpus import CASES_BY_ID, TASKS, register_corpus_tasks
    register_corpus_tasks()
    case = CASES_BY_ID["off_by_one_write_past_end"]
    cpu_device.__dict__.pop("_harness_expected", None)
    r = _score(cpu_device, TASKS[case.task], case.text)
    assert r.status.value == "runtime_error" and "past the end of output" in r.message, r.message
    cache = cpu_device.__dict__["_harness_expected"]
    assert (cache.hits, cache.misses) == (0, r.trials - 1)  # the failing trial judged no output


# ---- GPU -----------------------------------------------------------------------------------------
@gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_readout_matches_numpy(gpu_device, dtype):
    import cupy
    _, _, (lead, trail) = _poisoned(np, dtype, 5000)
    lead[[0, 17, 4000 % lead.size]] = 3
    trail[[1, trail.size - 1]] = 0
    a = (np.arange(100_003) % 251 - 125).astype(dtype)
    plain = np.linspace(-1, 1, 3000).astype("float32")
    m_host = ec.mask_output(np, plain)
    m_dev = ec.MaskedOutput(cupy.asarray(m_host.data), m_host.dtype, m_host.shape, m_host.k0, m_host.k1, m_host.mac)
    got = plain.copy()
    got[5] = np.nan
    key = (0xDEADBEEF, 0x12345678)
    want, have = tr.TrialReadout(np, 3), tr.TrialReadout(cupy, 3)
    for r, xp in ((want, np), (have, cupy)):
        r.guards((xp.asarray(lead), xp.asarray(trail)), dtype)
        r.checksum(xp.asarray(a), key)
        r.expected(m_host if xp is np else m_dev, xp.asarray(got), "float32", 1e-5, 1e-5)
    assert have.read() == want.read()
    assert want.values[1] == 2 and want.values[5] == 1


@gpu
def test_gpu_checksum_path_and_regenerated_inputs_agree(gpu_device):
    from tests.kernels_env.broken_corpus import CASES, TASKS, register_corpus_tasks
    register_corpus_tasks()
    # in process, on one device: no case that hangs or loses the context (test_broken_corpus runs those
    # through a pool of replaceable workers, with the checksums on by default)
    cases = [(TASKS[c.task], c.text, c.garbage_values) for c in CASES
             if c.expected_for("cupy") != "timeout" and not c.kills_context]
    cases += [(TWICE, text, False) for text in (TWICE.solution, ZERO_BOTH, RESTORES)]
    runs = []
    gpu_device.__dict__.pop("_harness_inputs", None)
    for on in (False, True, True):  # regenerated; checksums with the inputs drawn, then cached
        gpu_device.__dict__.pop("_harness_expected", None)
        cfg = EnvConfig(backend="cupy", sizes="small", timing=False, correctness_trials=3, input_checksums=on,
                        seed=0)  # one draw for both paths
        from kernels_env.execute.score import score
        runs.append([_outcome(score(t, text, cfg, device=gpu_device), garbage) for t, text, garbage in cases])
    for (t, _, _), a, b, c in zip(cases, *runs, strict=True):
        assert a == b == c, f"{t.name}: regenerated {a}\nchecksums {b}\ncached {c}"
    assert gpu_device.__dict__["_harness_inputs"].hits > 0


# ---- verify_outputs (the timing stage's full comparisons) --------------------------------------------
def test_verify_outputs_compares_live_inputs_only(monkeypatch):
    """A kept timed run's comparison passes the regenerated inputs themselves as its inputs: comparing
    them with themselves read every input once per batch for nothing. Live buffers are still checked."""
    from tests.kernels_env.test_expected_cache import _fake_run
    from kernels_env.core.status import Status
    from kernels_env.judge.faults import Failed
    compared: list[str] = []
    real = harness.check_input_unchanged

    def counted(xp: Any, name: str, *a: Any) -> Any:
        compared.append(name)
        return real(xp, name, *a)
    monkeypatch.setattr(harness, "check_input_unchanged", counted)
    run = _fake_run(TWICE, {"N": 64}, False)
    x = np.linspace(1, 2, 64, dtype=np.float32)
    run.verify_outputs({"x": x, "y": 2 * x}, {"x": x}, 0, 0, "t: ")
    assert compared == []
    live = x.copy()
    live[3] = 0.0
    with pytest.raises(Failed) as e:
        run.verify_outputs({"x": live, "y": 2 * x}, {"x": x}, 0, 0, "t: ")
    assert compared == ["x"] and e.value.result.status is Status.WRONG_OUTPUT
    assert e.value.result.mismatch.reason == "input_modified"


def test_the_switch_is_validated_wired_and_left_out_of_the_result_key():
    from kernels_env.execute.result_cache import cache_key
    from leap_jax.train.config_env import EnvCfg
    from leap_jax.train.config_loader import ConfigError
    with pytest.raises(ValueError, match="input_checksums"):
        EnvConfig(input_checksums="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="env.input_checksums=1"):
        EnvCfg(input_checksums=1).check()  # type: ignore[arg-type]
    assert EnvCfg(input_checksums=False).env_config(timing=False, seed=0).input_checksums is False
    assert EnvCfg().env_config(timing=False, seed=0).input_checksums is True
    text = "```cuda\nx\n```\n```launch\nk<<<1, 1>>>(y);\n```"
    assert cache_key("t", text, EnvConfig(input_checksums=False)) == cache_key("t", text, EnvConfig())
