"""GPU tests of CupyDevice + the harness on real kernels (marked `gpu`; skipped without a GPU).

The first tests (error classification) run anywhere. Kernels that leave a sticky CUDA error (misaligned or
illegal address, a hang) poison the whole process's context, so those scenarios run in a fresh subprocess: this file is also a script,
`python tests/kernels_env/test_cupy_backend.py SCENARIO`, printing one JSON line.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from kernels_env.execute import harness  # noqa: E402
from kernels_env.execute.timing_stage import REFERENCE_OPINIONS  # noqa: E402
from kernels_env.judge import reference_cache  # noqa: E402
from kernels_env.core.config import EnvConfig, StageLimits  # noqa: E402
from kernels_env.core.status import Status  # noqa: E402
from kernels_env.source.launch import MAX_SHARED_BYTES  # noqa: E402
from kernels_env.tasks.spec import Buffer, Task  # noqa: E402

gpu = pytest.mark.gpu

N = 1 << 22
CONFIG = EnvConfig(warmup_runs=10, timed_runs=100)


def add_task(dtype: str = "float32") -> Task:
    return Task(name=f"gpu_add_{dtype}", level=1, description="y = a + b",
                sizes={"eval": {"N": N}, "small": {"N": 4096}},
                inputs=(Buffer("a", dtype, ("N",)), Buffer("b", dtype, ("N",))),
                outputs=(Buffer("y", dtype, ("N",)),), reference=lambda xp, a, b: a + b, solution="")


def text(cuda: str, launch: str) -> str:
    return f"Some reasoning.\n```cuda\n{cuda}\n```\n```launch\n{launch}\n```\n"


ADD = r'''
extern "C" __global__ void add(const float* a, const float* b, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a[i] + b[i];
}'''
ADD_LAUNCH = "add<<<cdiv(N, 256), 256>>>(a, b, y, N);"

KERNELS = {
    "correct": ADD,
    "unwritten_last": ADD.replace("if (i < n)", "if (i < n - 1)"),
    "writes_input": ADD.replace("y[i] = a[i] + b[i];", "{ y[i] = a[i] + b[i]; ((float*)a)[i] = 0.f; }"),
    "oob_far": ADD.replace("y[i] = a[i] + b[i];", "{ y[i] = a[i] + b[i]; y[i + (1LL << 33)] = 1.f; }"),
    "misaligned": ADD.replace("y[i] = a[i] + b[i];",
                              "{ y[i] = a[i] + b[i]; *(volatile float*)((char*)y + 4 * i + 2) = 1.f; }"),
    # volatile: a store through a constant bad pointer must not be optimised away
    "null_write": ADD.replace("y[i] = a[i] + b[i];",
                              "{ y[i] = a[i] + b[i]; ((volatile float*)4096)[i] = 1.f; }"),
    # Thread 0 busy-waits ~10 s (at 2 GHz): bounded, so a leftover never holds the GPU for long.
    "hang": ADD.replace("y[i] = a[i] + b[i];", "{ long long t0 = clock64(); "
                        "while (i == 0 && clock64() - t0 < 20000000000LL) {} y[i] = a[i] + b[i]; }"),
}


# ---- error classification (no GPU needed) ------------------------------------------------------------
class _FakeCudaError(RuntimeError):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status


def _bare_device():
    from kernels_env.backends.cupy_backend import CupyDevice
    dev = CupyDevice.__new__(CupyDevice)  # no CUDA: only the error mapping is exercised
    dev.healthy = True
    return dev


def test_sticky_cuda_errors_are_fatal_and_others_are_runtime_errors():
    from kernels_env.backends.base import FatalDeviceError, KernelRuntimeError
    dev = _bare_device()
    e = dev._map(_FakeCudaError(1, "CUDA_ERROR_INVALID_VALUE: invalid argument"), "kernel launch failed")
    assert type(e) is KernelRuntimeError and "invalid argument" in str(e) and dev.healthy
    for status, text in ((700, "an illegal memory access was encountered"), (716, "misaligned address"),
                         (719, "unspecified launch failure"), (715, "an illegal instruction was encountered")):
        dev = _bare_device()
        e = dev._map(_FakeCudaError(status, text), "kernel execution failed")
        assert isinstance(e, FatalDeviceError) and text in str(e) and not dev.healthy
        with pytest.raises(FatalDeviceError, match="unusable"):
            dev._check_healthy()


def test_device_hang_maps_to_timeout_and_propagates():
    from kernels_env.backends.base import FatalDeviceError
    from kernels_env.backends.cupy_backend import DeviceHang
    from kernels_env.core.program import Call, Dim3, KernelParam, KernelSignature, Launch, LaunchPlan, Name, Num, Submission
    from kernels_env.testing.fake_device import FakeDevice

    def hangs(*args):
        raise DeviceHang("the kernel is still running after 1 s")

    def p(n, ptr=True):
        return KernelParam(n, "float*" if ptr else "int", "float" if ptr else "int", ptr, False)
    sig = KernelSignature("add", (p("a"), p("b"), p("y"), p("n", False)))
    sub = Submission("", "", LaunchPlan((), (Launch("add", Dim3(Call("cdiv", (Name("N"), Num(256)))), Dim3(Num(256)),
                                                    None, (Name("a"), Name("b"), Name("y"), Name("N")), 1),)),
                     {"add": sig})
    dev = FakeDevice()
    dev.register("add", hangs)
    with pytest.raises(FatalDeviceError) as info:
        harness.evaluate(dev, None, add_task(), sub, {"N": 1024}, CONFIG)
    assert info.value.result.status is Status.TIMEOUT and "still running" in info.value.result.message


class _FakeCupy:
    """Just enough of the cupy namespace for CupyDevice's control flow (launch / sync / timing)."""

    def __init__(self, fail_status=None, never_done=False):
        import types
        fc = self

        class DriverError(RuntimeError):
            def __init__(self, status):
                super().__init__(f"CUDA_ERROR_{status}: fake driver error")
                self.status = status

        class RuntimeErr(DriverError):
            pass

        class Stream:
            ptr = 0
            def synchronize(self):
                fc.syncs += 1
                if fc.pending_error is not None:
                    status, fc.pending_error = fc.pending_error, None
                    raise RuntimeErr(status)

        class Event:
            ptr = 7

            def __init__(self, disable_timing=False):
                self.t = None
            def record(self, stream):
                fc.clock += 1.0
                self.t = fc.clock
            @property
            def done(self):
                return not fc.never_done
            def synchronize(self):
                pass

        self.syncs, self.clock, self.memsets, self.attrs, self.launches = 0, 0.0, 0, [], []
        self.pending_error, self.fail_status, self.never_done = None, fail_status, never_done
        driver = types.SimpleNamespace(CUDADriverError=DriverError, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES=8,
                                       funcSetAttribute=lambda ptr, attr, v: self.attrs.append((ptr, attr, v)))
        def event_query(ptr):
            # like cudaEventQuery: a pending sticky error is returned, else 600 (not ready) or 0
            if fc.pending_error is not None:
                return fc.pending_error
            return 600 if fc.never_done else 0

        def check_status(status):
            if status != 0:
                fc.pending_error = None
                raise RuntimeErr(status)

        runtime = types.SimpleNamespace(CUDARuntimeError=RuntimeErr, eventQuery=event_query,
                                        check_status=check_status,
                                        memsetAsync=lambda ptr, v, n, st: setattr(self, "memsets", self.memsets + 1))
        stream = Stream()
        self.cuda = types.SimpleNamespace(driver=driver, runtime=runtime, Event=Event,
                                          get_current_stream=lambda: stream,
                                          get_elapsed_time=lambda a, b: b.t - a.t)
        self.uint8 = "uint8"

    def empty(self, n, dtype=None):
        import types
        return types.SimpleNamespace(data=types.SimpleNamespace(ptr=1234))

    def kernel(self):
        fc = self

        class Fn:
            ptr = 42
            def __call__(self, grid, block, args, shared_mem=0):
                fc.launches.append((grid, block, args, shared_mem))
                if fc.fail_status is not None:
                    fc.pending_error = fc.fail_status  # asynchronous: surfaces at the next sync
        return Fn()


def _fake_device(**kw):
    from kernels_env.backends.cupy_backend import CupyDevice, CupyProgram
    dev = CupyDevice.__new__(CupyDevice)
    dev.cp = dev.xp = _FakeCupy(**kw)
    dev.healthy, dev.hung, dev.arch, dev.l2_bytes, dev.flush_bytes = True, False, "sm_90", 50 << 20, 100 << 20
    dev.max_smem_optin, dev.flushes, dev.last_timing = 227 * 1024, 0, {}
    prog = CupyProgram(kernels={}, functions={"k": dev.cp.kernel()}, arch="sm_90")
    return dev, prog


def test_launch_opts_in_to_large_shared_memory_once_and_rejects_too_much():
    from kernels_env.backends.base import KernelRuntimeError
    dev, prog = _fake_device()
    for _ in range(2):
        dev.launch(prog, "k", (4, 1, 1), (256, 1, 1), 96 * 1024, [1, 2])
    assert dev.cp.attrs == [(42, 8, 96 * 1024)]
    assert dev.cp.launches[-1] == ((4, 1, 1), (256, 1, 1), (1, 2), 96 * 1024)
    with pytest.raises(KernelRuntimeError, match="too much dynamic shared memory"):
        dev.launch(prog, "k", (1, 1, 1), (1, 1, 1), 228 * 1024, [])
    with pytest.raises(KernelRuntimeError, match="no kernel 'missing'"):
        dev.launch(prog, "missing", (1, 1, 1), (1, 1, 1), 0, [])


def test_asynchronous_sticky_error_surfaces_at_sync_as_fatal():
    from kernels_env.backends.base import FatalDeviceError
    dev, prog = _fake_device(fail_status=716)
    dev.launch(prog, "k", (1, 1, 1), (32, 1, 1), 0, [])
    with pytest.raises(FatalDeviceError, match="716"):
        dev.synchronize()
    assert not dev.healthy
    with pytest.raises(FatalDeviceError, match="unusable"):
        dev.launch(prog, "k", (1, 1, 1), (32, 1, 1), 0, [])


def test_synchronize_with_a_timeout_raises_device_hang():
    from kernels_env.backends.cupy_backend import DeviceHang
    dev, prog = _fake_device(never_done=True)
    dev.launch(prog, "k", (1, 1, 1), (32, 1, 1), 0, [])
    with pytest.raises(DeviceHang, match="still running"):
        dev.synchronize(timeout_s=0.02)
    assert not dev.healthy and dev.hung  # the kernel still runs: the worker keeps its GPU lock


def test_a_fault_seen_while_polling_is_a_fatal_error_not_a_hang():
    # Regression (seen on the H200): a kernel that faulted made the polled event look "not done",
    # so an illegal address was reported as a hang. The raw query returns the sticky error.
    from kernels_env.backends.base import FatalDeviceError
    from kernels_env.backends.cupy_backend import DeviceHang
    dev, prog = _fake_device(fail_status=700, never_done=True)
    dev.launch(prog, "k", (1, 1, 1), (32, 1, 1), 0, [])
    with pytest.raises(FatalDeviceError, match="700") as info:
        dev.synchronize(timeout_s=5.0)
    assert not isinstance(info.value, DeviceHang)
    assert not dev.healthy and not dev.hung  # the faulted kernel has stopped: the GPU lock is released


def test_time_ms_flushes_before_every_run_and_syncs_only_at_the_end():
    dev, prog = _fake_device()
    times = dev.time_ms(lambda: dev.launch(prog, "k", (1, 1, 1), (32, 1, 1), 0, []), 3, 7, True)
    assert len(times) == 7 and all(t == 1.0 for t in times)  # one fake clock tick between the events
    assert dev.cp.memsets == 10 and dev.flushes == 10 and dev.cp.syncs == 1  # no sync before a run
    assert len(dev.cp.launches) == 10 and dev.last_timing["flush_bytes"] == 100 << 20
    dev.time_ms(lambda: None, 0, 2, False)
    assert dev.cp.memsets == 10 and dev.last_timing["flush_bytes"] == 0


def evaluate_text(device, task, submission_text, config=CONFIG, sizes=None):
    """parse -> NVRTC -> load -> harness, as the pipeline does, but returning the harness's Result."""
    from kernels_env.compiler.compile import compile_cuda
    from kernels_env.source.submission import parse_submission
    sub = parse_submission(submission_text)
    compiled = compile_cuda(sub.cuda_source, device.arch, config)
    program = device.load(compiled, config)
    return harness.evaluate(device, program, task, sub, sizes or task.size_set("eval"), config)


@pytest.fixture(scope="module")
def device():
    from kernels_env.backends.cupy_backend import CupyDevice
    dev = CupyDevice()
    yield dev
    dev.close()


# ---- in-process (no sticky errors) ------------------------------------------------------------------
@gpu
def test_inputs_are_generated_on_the_gpu_deterministically(device):
    import cupy
    import numpy as np
    from kernels_env.execute.inputs import make_inputs
    task = Task(name="gpu_inputs", level=1, description="", sizes={"eval": {"N": N}, "small": {"N": 4096}},
                inputs=(Buffer("x", "float16", ("N",)),
                        Buffer("i", "int64", ("N",), distributions=("indices",), high="N")),
                outputs=(), reference=lambda xp, **k: (), solution="")
    for trial in range(3):
        a = make_inputs(task, {"N": N}, trial, 5, cupy)
        b = make_inputs(task, {"N": N}, trial, 5, cupy)
        assert isinstance(a["x"], cupy.ndarray) and a["x"].dtype == cupy.float16 and a["x"].shape == (N,)
        assert bool(cupy.all(a["x"] == b["x"])) and bool(cupy.all(a["i"] == b["i"]))
        assert bool(cupy.all(cupy.isfinite(a["x"])))
        assert 0 <= int(a["i"].min()) and int(a["i"].max()) < N
    # trial 1 draws the rotation's normal(0, 1); with input domains (the default) it is also the edges
    # trial (1 in 32 elements at +-8..16, std ~1.5), so the distribution is checked on the plain draws
    x = make_inputs(task, {"N": N}, 1, 5, cupy, domains=False)["x"].astype(cupy.float32)
    assert bool(cupy.all(x == make_inputs(task, {"N": N}, 1, 5, cupy, domains=False)["x"].astype(cupy.float32)))
    assert abs(float(x.mean())) < 0.01 and abs(float(x.std()) - 1) < 0.01
    c = make_inputs(task, {"N": N}, 0, 6, cupy)["x"]
    assert not bool(cupy.all(c == make_inputs(task, {"N": N}, 0, 5, cupy)["x"]))
    assert np.asarray(cupy.asnumpy(x)).shape == (N,)


@gpu
def test_correct_vector_add_is_correct_with_timing(device):
    flushes, known = device.flushes, set(reference_cache.cache_of(device))
    res = evaluate_text(device, add_task(), text(KERNELS["correct"], ADD_LAUNCH))
    assert res.status is Status.CORRECT, res.message
    t = res.timing
    assert t.device == "cuda" and t.comparable and CONFIG.min_timed_runs <= t.runs <= CONFIG.timed_runs
    assert t.kernel_median_ms > 0 and t.ref_median_ms > 0 and t.speedup == pytest.approx(
        t.ref_median_ms / t.kernel_median_ms)
    assert t.warmup_runs == CONFIG.warmup_runs and t.checked_runs == t.warmup_runs + t.runs
    assert t.verified_runs >= 2 and t.kernel_ci_ms[0] <= t.kernel_median_ms <= t.kernel_ci_ms[1]
    # the reference measured REFERENCE_OPINIONS times (first sight); the lower median counts
    opinions = list(reference_cache.new_entries(device, known).values())
    assert len(opinions) == REFERENCE_OPINIONS and t.ref_runs in [len(o) for o in opinions]
    # warm-up (the probe included) + timed runs for the kernel and each reference measurement, each
    # after an L2 flush
    assert device.flushes - flushes == (t.checked_runs + REFERENCE_OPINIONS * CONFIG.warmup_runs
                                        + sum(len(o) for o in opinions))
    assert device.last_timing["flush_bytes"] >= 2 * device.l2_bytes > 0
    # the probes of a slowed window: the flush's own time, the host's lateness past the hold
    assert t.flush_median_ms is not None and 0 < t.flush_median_ms < t.kernel_median_ms + 1.0
    assert t.launch_late_ms is not None and t.launch_late_ms >= 0
    print(f"\nvector add N={N}: {res.message}")


@gpu
def test_pipeline_score_on_cupy(device):
    from kernels_env.execute.score import score
    res = score(add_task(), text(KERNELS["correct"], ADD_LAUNCH), CONFIG.replace(timed_runs=100), device=device)
    assert res.status is Status.CORRECT, res.message
    assert res.resources.get("add") is not None and res.backend == "cupy"


@gpu
def test_unwritten_last_element_is_wrong_output(device):
    res = evaluate_text(device, add_task(), text(KERNELS["unwritten_last"], ADD_LAUNCH))
    assert res.status is Status.WRONG_OUTPUT
    assert res.mismatch.reason == "unwritten" and res.mismatch.first_bad_index == [N - 1]
    assert device.healthy


@gpu
def test_kernel_writing_its_input_is_input_modified(device):
    res = evaluate_text(device, add_task(), text(KERNELS["writes_input"], ADD_LAUNCH))
    assert res.status is Status.WRONG_OUTPUT and res.mismatch.reason == "input_modified"
    assert res.mismatch.buffer == "a" and res.mismatch.first_bad_index == [0]


@gpu
def test_fp16_kernel(device):
    cuda = r'''
#include <cuda_fp16.h>
extern "C" __global__ void add(const __half* a, const __half* b, __half* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __hadd(a[i], b[i]);
}'''
    res = evaluate_text(device, add_task("float16"), text(cuda, ADD_LAUNCH), CONFIG.replace(timing=False))
    assert res.status is Status.CORRECT, res.message


@gpu
def test_dynamic_shared_memory_above_48k(device):
    cuda = r'''
extern "C" __global__ void add(const float* a, const float* b, float* y, int n) {
  extern __shared__ float s[];  // 64 KiB: 64 slots per thread of a 256-thread block
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int slot = threadIdx.x + 63 * blockDim.x;
  s[slot] = (i < n) ? a[i] + b[i] : 0.f;
  __syncthreads();
  if (i < n) y[i] = s[slot];
}'''
    res = evaluate_text(device, add_task(), text(cuda, "add<<<cdiv(N, 256), 256, 65536>>>(a, b, y, N);"),
                        CONFIG.replace(timing=False))
    assert res.status is Status.CORRECT, res.message
    # past the device's opt-in limit: refused before launch when it is also past the largest limit
    # of any GPU (launch.MAX_SHARED_BYTES, a format_error like every launch configuration CUDA
    # rejects), else the device's runtime_error at launch (launch.py, check_plan's rule)
    request = device.max_smem_optin + 1024
    too_much = evaluate_text(device, add_task(), text(cuda, f"add<<<cdiv(N, 256), 256, {request}>>>(a, b, y, N);"),
                             CONFIG.replace(timing=False))
    expected = Status.FORMAT_ERROR if request > MAX_SHARED_BYTES else Status.RUNTIME_ERROR
    assert too_much.status is expected and "shared memory" in too_much.message, too_much.message
    assert device.healthy


@gpu
def test_two_kernel_plan_with_scratch(device):
    cuda = r'''
extern "C" __global__ void partial(const float* x, float* acc, int n) {
  __shared__ float s[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : 0.f;
  __syncthreads();
  for (int k = 128; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(acc, s[0]);  // relies on the zero-initialised scratch
}
extern "C" __global__ void finish(const float* acc, float* y) { y[0] = acc[0]; }'''
    launch = ("scratch float acc[1];\npartial<<<cdiv(N, 256), 256>>>(x, acc, N);\n"
              "finish<<<1, 1>>>(acc, y);")
    task = Task(name="gpu_sum", level=1, description="y = sum(x)", sizes={"eval": {"N": 1 << 20}, "small": {"N": 4096}},
                inputs=(Buffer("x", "float32", ("N",)),), outputs=(Buffer("y", "float32", (1,)),),
                reference=lambda xp, x: x.astype(xp.float64).sum().reshape(1), solution="",
                tolerance={"float32": (0.5, 1e-3)})
    res = evaluate_text(device, task, text(cuda, launch), CONFIG.replace(timed_runs=100))
    assert res.status is Status.CORRECT, res.message
    assert res.trials == 5


# ---- sticky errors: one fresh process each ---------------------------------------------------------
def run_scenario(name: str, timeout: float = 180.0) -> dict:
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), name], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"scenario {name} printed no result; rc={proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return json.loads(lines[-1])


@gpu
def test_misaligned_access_is_runtime_error_and_poisons_the_process():
    out = run_scenario("misaligned")
    assert out["raised"] == "FatalDeviceError" and out["status"] == "runtime_error"
    assert "misaligned address" in out["message"]
    assert out["healthy"] is False and out["raw_cuda_after"] == "error"
    assert out["next_eval"] == "FatalDeviceError"
    # a new process recovers
    assert run_scenario("correct")["status"] == "correct"


@gpu
def test_null_pointer_write_is_runtime_error():
    out = run_scenario("null_write")
    assert out["status"] == "runtime_error" and "illegal memory access" in out["message"]


@gpu
def test_out_of_bounds_write_far_past_the_end():
    # 32 GiB past the end of y: unmapped on an H200, so an illegal address (runtime_error). A write
    # that lands in memory the process owns would instead be caught as wrong_output or
    # input_modified by the poison / input checks.
    out = run_scenario("oob_far")
    print(f"\nout-of-bounds far write: {out}")
    assert out["status"] in ("runtime_error", "wrong_output")


@gpu
def test_hang_is_timeout_and_marks_the_worker_for_replacement():
    out = run_scenario("hang")
    assert out["status"] == "timeout" and out["raised"] == "FatalDeviceError" and out["healthy"] is False


def _scenario(name: str) -> dict:
    import cupy
    from kernels_env.backends.base import FatalDeviceError
    from kernels_env.backends.cupy_backend import CupyDevice
    dev = CupyDevice()
    config = CONFIG.replace(timing=name == "correct")
    if name == "hang":
        config = config.replace(limits=StageLimits(correctness=1.0))
    out: dict = {"scenario": name}
    try:
        res = evaluate_text(dev, add_task(), text(KERNELS[name], ADD_LAUNCH), config)
        out.update(raised=None, status=res.status.value, message=res.message)
    except FatalDeviceError as e:
        res = e.result
        out.update(raised="FatalDeviceError", status=res.status.value, message=res.message)
    out["healthy"] = dev.healthy
    if not dev.healthy:
        try:
            evaluate_text(dev, add_task(), text(KERNELS["correct"], ADD_LAUNCH), config)
            out["next_eval"] = "ok"
        except FatalDeviceError:
            out["next_eval"] = "FatalDeviceError"
        if name == "hang":
            return out  # the kernel is still running; os._exit tears the context down
        try:
            float(cupy.arange(4, dtype=cupy.float32).sum())
            cupy.cuda.get_current_stream().synchronize()
            out["raw_cuda_after"] = "ok"
        except Exception:
            out["raw_cuda_after"] = "error"
    return out


if __name__ == "__main__":
    print(json.dumps(_scenario(sys.argv[1])), flush=True)
    os._exit(0)  # skip CUDA teardown of a poisoned (or still busy) context
