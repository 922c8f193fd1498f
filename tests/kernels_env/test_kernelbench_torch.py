"""The tasks named after KernelBench problems compute what the KernelBench PyTorch models compute:
on the same inputs (CuPy arrays shared with torch through DLPack), the task's CuPy reference and the
torch model of `kernels_env.tasks.torch_models` agree within the task's tolerance. GPU only; skips
without torch, CuPy or a GPU."""
from __future__ import annotations

import numpy as np
import pytest

import kernels_env.tasks as T
from kernels_env.execute.inputs import make_inputs
from kernels_env.tasks.torch_models import TORCH_MODELS

NAMES = sorted(TORCH_MODELS)


def test_every_torch_model_names_a_task():
    for n in NAMES:
        T.get_task(n)


@pytest.fixture(scope="module")
def torch_cuda():
    torch = pytest.importorskip("torch")
    cp = pytest.importorskip("cupy")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible to torch")
    try:
        cp.cuda.runtime.getDeviceCount()
    except Exception as e:
        pytest.skip(f"no CUDA GPU visible to CuPy: {e}")
    torch.backends.cudnn.allow_tf32 = False  # full fp32, as the references
    torch.backends.cuda.matmul.allow_tf32 = False
    return torch, cp


@pytest.mark.gpu
@pytest.mark.parametrize("which", ["small", "eval"])
@pytest.mark.parametrize("name", NAMES)
def test_cupy_reference_agrees_with_kernelbench_torch_model(name, which, torch_cuda):
    torch, cp = torch_cuda
    task = T.get_task(name)
    sizes = task.size_set(which)
    scalars = {s.name: s.value for s in task.scalars}
    for trial in range(2):  # two input distributions
        inputs = make_inputs(task, sizes, trial, 0, cp)
        ref = task.reference(cp, **{k: v.copy() for k, v in inputs.items()}, **scalars)
        ref = list(ref) if isinstance(ref, (tuple, list)) else [ref]
        got = TORCH_MODELS[name](torch, {k: torch.from_dlpack(v) for k, v in inputs.items()}, scalars)
        got = list(got) if isinstance(got, (tuple, list)) else [got]
        torch.cuda.synchronize()
        assert len(got) == len(ref) == len(task.outputs)
        for b, r, g in zip(task.outputs, ref, got, strict=False):
            g = cp.from_dlpack(g.contiguous())
            shape = b.resolve_shape(sizes)
            assert tuple(g.shape) == shape, f"{name}: torch output {b.name} has shape {g.shape}, task {shape}"
            if b.dtype in ("int32", "int64"):
                assert g.dtype == cp.int64 and cp.asarray(r).dtype == np.dtype(b.dtype), name
                np.testing.assert_array_equal(cp.asnumpy(g), cp.asnumpy(cp.asarray(r).reshape(shape)))
            else:
                atol = cp.asnumpy(cp.asarray(task.atol_for(cp, inputs, sizes)[task.outputs.index(b)]))
                _assert_close(cp.asnumpy(g), cp.asnumpy(cp.asarray(r).reshape(shape)), atol, task.tol(b.dtype)[1],
                              f"{name} {which} trial {trial}")


@pytest.mark.parametrize("name", NAMES)
def test_numpy_reference_agrees_with_torch_model_on_cpu(name):
    """The same agreement at small sizes with torch on the CPU (where torch is installed)."""
    torch = pytest.importorskip("torch")
    task = T.get_task(name)
    sizes = task.size_set("small")
    scalars = {s.name: s.value for s in task.scalars}
    for trial in range(3):
        inputs = make_inputs(task, sizes, trial, 0, np)
        ref = task.reference(np, **{k: v.copy() for k, v in inputs.items()}, **scalars)
        ref = list(ref) if isinstance(ref, (tuple, list)) else [ref]
        got = TORCH_MODELS[name](torch, {k: torch.from_numpy(v.copy()) for k, v in inputs.items()}, scalars)
        got = list(got) if isinstance(got, (tuple, list)) else [got]
        for b, r, g in zip(task.outputs, ref, got, strict=False):
            g = g.detach().numpy()
            shape = b.resolve_shape(sizes)
            assert g.shape == shape, f"{name}: torch output {b.name} has shape {g.shape}, task {shape}"
            if b.dtype in ("int32", "int64"):
                assert g.dtype == np.int64 and np.asarray(r).dtype == np.dtype(b.dtype)
                np.testing.assert_array_equal(g, np.asarray(r).reshape(shape))
            else:
                atol = task.atol_for(np, inputs, sizes)[task.outputs.index(b)]  # the judge's atol
                _assert_close(g, np.asarray(r).reshape(shape), atol, task.tol(b.dtype)[1], f"{name} trial {trial}")


def _assert_close(got, expected, atol, rtol, what):
    """|got - expected| <= atol + rtol * |expected| everywhere (atol: a number or, with a task's
    input-derived term, an array): the judge's rule."""
    g, e = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    ratio = np.abs(g - e) / (atol + rtol * np.abs(e))
    worst = int(np.argmax(np.where(np.isnan(ratio), np.inf, ratio)))
    assert ratio.ravel()[worst] <= 1.0, (f"{what}: {ratio.ravel()[worst]:.3g}x the tolerance at flat index "
                                         f"{worst}: got {g.ravel()[worst]!r}, expected {e.ravel()[worst]!r}")
