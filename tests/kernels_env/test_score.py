"""score(): stages, statuses and bookkeeping, with real parsing + NVRTC and a numpy FakeDevice."""
from __future__ import annotations

import pytest

from kernels_env.backends.base import FatalDeviceError
from kernels_env.execute.result_cache import cache_key
from kernels_env.compiler.compile import CompileError
from kernels_env.core.config import EnvConfig
from kernels_env.execute import score as scoring
from kernels_env.execute.score import Prepared, execute, prepare, score
from kernels_env.core.status import Status
from kernels_env.tasks.spec import Buffer, Task
from kernels_env.testing.fake_device import FakeDevice

CUDA = r'''
extern "C" __global__ void add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
'''
TASK = Task(name="vec_add_test", level=1, description="c = a + b",
            sizes={"eval": {"N": 1000}, "small": {"N": 300}},
            inputs=(Buffer("a", "float32", ("N",)), Buffer("b", "float32", ("N",))),
            outputs=(Buffer("c", "float32", ("N",)),),
            reference=lambda xp, a, b: a + b, solution="")
CFG = EnvConfig(sizes="small", correctness_trials=2, warmup_runs=1, timed_runs=3)


def submission(launch: str, cuda: str = CUDA) -> str:
    return f"Here you go.\n```cuda\n{cuda}\n```\n```launch\n{launch}\n```\n"


def fake_add(grid, block, shared, a, b, c, n):
    """What the CUDA kernel does: only threads inside the grid write."""
    covered = min(int(n), grid[0] * block[0])
    c[:covered] = a[:covered] + b[:covered]


def device(**kw) -> FakeDevice:
    d = FakeDevice()
    d.register("add", kw.get("fn", fake_add), ms=0.5)
    return d


def test_correct_submission_fills_everything():
    text = submission("add<<<cdiv(N, 128), 128>>>(a, b, c, N);")
    r = score(TASK, text, CFG, device())
    assert r.status is Status.CORRECT, r.message
    assert r.task == "vec_add_test" and r.backend == "fake" and r.trials == 2
    assert r.key == cache_key("vec_add_test", text, CFG)
    assert {"parse", "compile", "load", "correctness", "timing"} <= set(r.stage_seconds)
    assert r.resources["add"].registers > 0  # from the real NVRTC/ptxas run
    assert r.timing is not None and r.timing.speedup == pytest.approx(1.0 / 0.5)


def test_too_small_grid_is_wrong_output():
    r = score(TASK, submission("add<<<1, 128>>>(a, b, c, N);"), CFG, device())
    assert r.status is Status.WRONG_OUTPUT
    assert r.mismatch.reason == "unwritten" and r.mismatch.first_bad_index == [128]
    from kernels_env.judge.feedback import render_feedback
    text = render_feedback(r, 400)
    assert text.startswith("wrong_output:") and "output 'c' is wrong" in text and "never written" in text
    assert "first bad index [128]" in text and len(text) <= 400


def test_format_error_stops_before_compile():
    r = score(TASK, "```cuda\n" + CUDA + "\n```\nno launch", CFG, device())
    assert r.status is Status.FORMAT_ERROR and "no ```launch block" in r.message
    assert "compile" not in r.stage_seconds and r.backend == "fake"


def test_bytes_are_decoded_and_invalid_utf8_is_a_format_error_naming_the_offset():
    """score() takes a file's bytes: UTF-8 scores as the text does; anything else is format_error
    naming the byte offset, never an exception or env_error."""
    text = submission("add<<<cdiv(N, 128), 128>>>(a, b, c, N);")
    r = score(TASK, text.encode(), CFG, device())
    assert r.status is Status.CORRECT, r.message
    assert r.key == cache_key("vec_add_test", text, CFG)  # the same submission as the text
    bad = text.encode().replace(b"Here", b"H\xffre", 1)
    r = score(TASK, bad, CFG, device())
    assert r.status is Status.FORMAT_ERROR and "compile" not in r.stage_seconds
    assert r.message == ("the answer is not valid UTF-8 text: byte offset 1 (0xff): invalid start byte; "
                         "expected UTF-8 Markdown"), r.message
    assert r.key == cache_key("vec_add_test", bad, CFG) != cache_key("vec_add_test", text, CFG)
    cut = "é".encode()[:1] + text.encode()  # a truncated two-byte sequence
    assert "byte offset 0 (0xc3)" in prepare(TASK, cut, CFG).message
    assert "must be text, got int" in score(TASK, 42, CFG, device()).message  # type: ignore[arg-type]


def test_static_check_error_names_the_line():
    r = score(TASK, submission("// comment\nadd<<<1, 128>>>(a, b, c);"), CFG, device())
    assert r.status is Status.FORMAT_ERROR
    assert r.message.startswith("launch block line 2: kernel 'add' takes 4 arguments "
                                "(const float* a, const float* b, float* c, int n), the launch passes 3")


MANGLED = CUDA + "__global__ void mangled(float* c) {}\n"


@pytest.mark.parametrize("launch, cuda, fragment", [
    ("add<<<cdiv(N, 2048), 2048>>>(a, b, c, N);", CUDA, "line 1: block.x = 2048; expected 1..1024"),
    ("add<<<1, dim3(64, 32)>>>(a, b, c, N);", CUDA, "block has 2048 threads (64x32x1); at most 1024"),
    ("add<<<N - N, 128>>>(a, b, c, N);", CUDA, "grid.x = 0; expected 1..2147483647"),
    ("add<<<dim3(1, 70000), 128>>>(a, b, c, N);", CUDA, "grid.y = 70000; expected 1..65535"),
    ("add<<<1, 128, 300000>>>(a, b, c, N);", CUDA, "dynamic shared memory = 300000 bytes"),
    ("add<<<1, 128>>>(a, b, c, N * 0.5);", CUDA, "is an integer; got the non-integer value 150.0"),
    ("add<<<1, 128>>>(a, b, c, N * 10000000);", CUDA, "value 3000000000 does not fit int"),
    ("add<<<1, 128>>>(a, 3, c, N);", CUDA, "is a pointer; expected a buffer name"),
    ("add<<<1, 128>>>(a, b, c, a);", CUDA, "is a scalar; expected a number or size, got buffer 'a'"),
    ("add<<<1, 128>>>(a, b, c);", CUDA, "the launch passes 3 arguments"),
    ("scratch float t[N - N];\nadd<<<1, 128>>>(a, b, c, N);", CUDA, "line 1: scratch 't' has 0 elements"),
    ("add<<<1, 128>>>(a, b, nullptr, NULL);", CUDA, "NULL can only be passed to a pointer parameter"),
    ("\nmangled<<<1, 1>>>(c);", MANGLED, "line 2: kernel 'mangled' is not declared extern \"C\""),
])
def test_a_bad_plan_gets_one_status_and_message_through_score_and_evaluate(launch, cuda, fragment):
    """launch.check_plan is the one resolver: the static checks of `score` and the binding of
    `harness.evaluate` say the same about the same plan (a configuration CUDA would reject
    included: format_error, decided before anything runs)."""
    from kernels_env.execute.harness import evaluate
    from kernels_env.source.submission import parse_submission
    text = submission(launch, cuda)
    scored = score(TASK, text, CFG, device())
    dev = device()
    evaluated = evaluate(dev, None, TASK, parse_submission(text), TASK.size_set(CFG.sizes), CFG)
    assert scored.status is evaluated.status is Status.FORMAT_ERROR, (scored.message, evaluated.message)
    assert scored.message == evaluated.message and fragment in scored.message, scored.message
    assert scored.message.startswith("launch block line ")
    assert "compile" not in scored.stage_seconds and dev.launches == []


def test_compile_error_has_cleaned_log():
    bad = CUDA.replace("a[i] + b[i]", "a[i] + bogus[i]")
    r = score(TASK, submission("add<<<cdiv(N, 128), 128>>>(a, b, c, N);", bad), CFG, device())
    assert r.status is Status.COMPILE_ERROR
    assert 'kernel.cu(4): error: identifier "bogus" is undefined' in r.details
    assert r.message.startswith("compilation failed: kernel.cu(4): error")


def test_backend_refusing_the_code_is_compile_error():
    class Refusing(FakeDevice):
        def load(self, compiled, config):
            raise CompileError("cpu backend: inline PTX (asm) is not supported")
    d = Refusing()
    r = score(TASK, submission("add<<<cdiv(N, 128), 128>>>(a, b, c, N);"), CFG, d)
    assert r.status is Status.COMPILE_ERROR and "inline PTX" in r.details


def test_fatal_device_error_is_reported_and_flagged():
    def crash(grid, block, shared, *args):
        raise FatalDeviceError("an illegal memory access was encountered")
    prep = prepare(TASK, submission("add<<<cdiv(N, 128), 128>>>(a, b, c, N);"), CFG)
    assert isinstance(prep, Prepared)
    r, fatal = execute(prep, device(fn=crash), CFG, task=TASK)
    assert fatal and r.status is Status.RUNTIME_ERROR and "illegal memory access" in r.message
    assert r.task == "vec_add_test" and r.key == prep.key


def test_unusable_device_keeps_the_program_loaded():
    """After a hang the kernel is still running: releasing the program would unload its module,
    which waits for that kernel forever. The program must stay referenced by the device."""
    import weakref
    loaded = []

    class Tracking(FakeDevice):
        def load(self, compiled, config):
            program = super().load(compiled, config)
            loaded.append(weakref.ref(program))
            return program

    def hang(grid, block, shared, *args):
        raise FatalDeviceError("the kernel is still running after 4 s")
    d = Tracking()
    d.register("add", hang, ms=0.5)
    prep = prepare(TASK, submission("add<<<cdiv(N, 128), 128>>>(a, b, c, N);"), CFG)
    r, fatal = execute(prep, d, CFG, task=TASK)
    assert fatal and r.status is Status.RUNTIME_ERROR
    del d  # the device going away (score() closes its own) must not release the program either
    assert loaded and loaded[0]() is not None and any(p is loaded[0]() for p in scoring._RETAINED)
    ok = Tracking()
    ok.register("add", fake_add, ms=0.5)
    before = len(scoring._RETAINED)
    r, fatal = execute(prep, ok, CFG, task=TASK)
    assert not fatal and r.status is Status.CORRECT and len(scoring._RETAINED) == before


def test_harness_bug_is_env_error_with_traceback():
    def broken_evaluate(*args):
        raise ZeroDivisionError("harness bug")
    r = score(TASK, submission("add<<<cdiv(N, 128), 128>>>(a, b, c, N);"), CFG, device(),
              evaluate=broken_evaluate)
    assert r.status is Status.ENV_ERROR and "ZeroDivisionError: harness bug" in r.message
    assert "Traceback" in r.details and r.task == "vec_add_test"


def test_unknown_task_name_is_env_error_not_a_raise():
    r = score("no_such_task_xyz", submission("add<<<1, 1>>>(a, b, c, N);"), CFG, device())
    assert r.status is Status.ENV_ERROR and "unknown task 'no_such_task_xyz'" in r.message


def test_prepare_is_picklable():
    import pickle
    prep = prepare(TASK, submission("add<<<cdiv(N, 128), 128>>>(a, b, c, N);"), CFG)
    back = pickle.loads(pickle.dumps(prep))
    assert back.compiled.cubin == prep.compiled.cubin and back.submission == prep.submission
    assert back.sizes == {"N": 300}


def test_get_device_names():
    from kernels_env.backends import get_device, gpu_count, resolve_backend
    with pytest.raises(ValueError, match="unknown backend 'tpu'; expected one of auto, cupy, cpu"):
        get_device("tpu")
    assert resolve_backend("cpu") == "cpu"
    assert resolve_backend("auto") == ("cupy" if gpu_count() > 0 else "cpu")
    dev = get_device("cpu", EnvConfig(backend="cpu"))
    try:
        assert dev.name == "cpu" and dev.timing_comparable is False
    finally:
        dev.close()


def test_score_on_cpu_backend_by_task_name():
    """The real path: a suite task by name, NVRTC, the CPU backend, the harness."""
    from kernels_env.tasks import list_tasks
    t = list_tasks(level=1)[0]
    r = score(t.name, t.solution, EnvConfig(backend="cpu", sizes="small", timing=False, correctness_trials=2))
    assert r.status is Status.CORRECT, r.message
    assert r.backend == "cpu" and r.trials == 2 and r.resources


@pytest.mark.gpu
def test_score_on_gpu_reports_speedup_and_arch():
    from kernels_env.backends import get_device
    from kernels_env.tasks import list_tasks
    dev = get_device("cupy")
    try:
        for t in list_tasks(level=1)[:3]:
            r = score(t, t.solution, EnvConfig(backend="cupy", timed_runs=20), dev)
            assert r.status is Status.CORRECT, (t.name, r.message)
            assert r.timing.comparable and r.speedup > 0 and r.resources
    finally:
        dev.close()


def test_warm_up_task_scores_correct_on_the_cpu_backend():
    from kernels_env.backends import get_device
    from kernels_env.schedule.warmup import warm_up
    device = get_device("cpu")
    try:
        result = warm_up(device)
    finally:
        device.close()
    assert result.status is Status.CORRECT, (result.message, result.details)
    assert result.trials == 4


def test_env_error_over_a_lost_context_is_fatal():
    """An environment fault can hide a kernel's sticky error that nobody synchronized on; the
    worker must be replaced, not handed the next job (seen on the H200: every later job failed)."""
    class LostContext(FakeDevice):
        def synchronize(self, timeout_s=None):
            raise FatalDeviceError("an illegal memory access was encountered")

    def broken_evaluate(*args):
        raise ZeroDivisionError("harness bug")
    prep = prepare(TASK, submission("add<<<cdiv(N, 128), 128>>>(a, b, c, N);"), CFG)
    d = LostContext()
    d.register("add", fake_add, ms=0.5)
    r, fatal = execute(prep, d, CFG, evaluate=broken_evaluate, task=TASK)
    assert r.status is Status.ENV_ERROR and fatal
    r, fatal = execute(prep, device(), CFG, evaluate=broken_evaluate, task=TASK)
    assert r.status is Status.ENV_ERROR and not fatal
