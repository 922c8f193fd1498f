"""Each world family's reference against an independent formulation (einsum index strings, torch's
CPU operators, Python loops), on the small sizes of a few tasks per composition kind."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kernels_env.execute.inputs import make_inputs
from kernels_env.tasks.world import get_world_task
from kernels_env.tasks.world.base import PREFIX


def _run(name: str, trial: int = 0):
    t = get_world_task(name)
    sizes = t.size_set("small")
    arrays = make_inputs(t, sizes, trial, 0, np)
    scalars = {s.name: s.value for s in t.scalars}
    out = np.asarray(t.reference(np, **arrays, **scalars))
    assert out.shape == t.outputs[0].resolve_shape(sizes) and out.dtype == np.dtype(t.outputs[0].dtype)
    return t, sizes, arrays, out


def _close(t, got, want):
    atol, rtol = t.tol(t.outputs[0].dtype)
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64),
                               atol=atol, rtol=rtol)
    assert np.isfinite(np.asarray(want, dtype=np.float64)).all()


def _T(a):
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


_MM = {"sq": "mk,kn->mn", "rect": "mk,kn->mn", "bat": "lmk,lkn->lmn", "ta": "km,kn->mn", "tb": "mk,nk->mn",
       "mv": "mk,k->m"}


@pytest.mark.parametrize("variant", sorted(_MM))
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_matmul_against_einsum(variant, dtype):
    t, _, a, out = _run(f"{PREFIX}mm_{variant}_{dtype}_s1", trial=1)
    want = np.einsum(_MM[variant], a["a"].astype(np.float64), a["b"].astype(np.float64))
    _close(t, out, want.astype(out.dtype))


def _torch_conv(mode, nd, x, w, s, di, p, groups):
    if mode == "tr":
        fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d}[nd]
        return fn(x, w, stride=s, padding=p, dilation=di)
    fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]
    return fn(x, w, stride=s, padding=p, dilation=di, groups=groups)


@pytest.mark.parametrize("name", [f"{PREFIX}cv_{d}_{m}{f}_f32_s{k % 8}" for k, (d, m, f) in enumerate(
    [("1d", "std", "_str_dil"), ("2d", "std", "_dil"), ("3d", "std", "_str"), ("1d", "dw", "_dil"),
     ("2d", "dw", "_str_dil"), ("3d", "dw", ""), ("1d", "tr", "_str_dil"), ("2d", "tr", "_str"), ("2d", "tr", "")])])
def test_conv_against_torch(name):
    t, sz, a, out = _run(name)
    mode, nd = t.tags[3], len(t.inputs[0].shape) - 2
    want = _torch_conv(mode, nd, _T(a["x"]), _T(a["w"]), sz["S"], sz["DI"], sz["P"], sz["C"] if mode == "dw" else 1)
    _close(t, out, want.numpy())


@pytest.mark.parametrize("name", [f"{PREFIX}pl_{d}_{m}{f}_f32_s{k % 8}" for k, (d, m, f) in enumerate(
    [("1d", "max", "_str_pad"), ("2d", "max", "_pad"), ("3d", "max", "_str"), ("1d", "avg", "_pad"),
     ("2d", "avg", "_str_pad"), ("3d", "avg", "_pad")])])
def test_pool_against_torch(name):
    t, sz, a, out = _run(name, trial=2)
    mode, nd = t.tags[3], len(t.inputs[0].shape) - 2
    x = _T(a["x"])
    if mode == "max":
        fn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[nd]
    else:
        fn = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[nd]
    _close(t, out, fn(x, sz["K"], stride=sz["S"], padding=sz["P"]).numpy())


@pytest.mark.parametrize("op", ["sum", "prod"])
@pytest.mark.parametrize("feats", ["", "_rev", "_exc", "_rev_exc"])
def test_scan_against_loops(op, feats):
    t, _, a, out = _run(f"{PREFIX}sc_{op}{feats}_f32_s2")
    x = a["x"].astype(np.float64)
    want = np.empty_like(x)
    for m in range(x.shape[0]):
        order = range(x.shape[1] - 1, -1, -1) if "rev" in feats else range(x.shape[1])
        acc = 0.0 if op == "sum" else 1.0
        for j in order:
            if "exc" in feats:
                want[m, j] = acc
            acc = acc + x[m, j] if op == "sum" else acc * x[m, j]
            if "exc" not in feats:
                want[m, j] = acc
    _close(t, out, want)


@pytest.mark.parametrize("kind", ["mse", "huber", "hinge", "ce", "kl"])
def test_loss_against_torch(kind):
    t, _, a, out = _run(f"{PREFIX}ls_{kind}_f32_s3", trial=1)
    p = _T(a["a"])
    if kind == "mse":
        want = F.mse_loss(p, _T(a["b"]))
    elif kind == "huber":
        want = F.smooth_l1_loss(p, _T(a["b"]), beta=1.0)
    elif kind == "hinge":
        want = torch.clamp(1 - (2 * _T(a["b"]) - 1) * p, min=0).mean()
    elif kind == "ce":
        want = F.cross_entropy(p, torch.from_numpy(a["b"].astype(np.int64)))
    else:
        want = F.kl_div(F.log_softmax(_T(a["b"]), 1), F.log_softmax(p, 1), log_target=True, reduction="batchmean")
    _close(t, out, want.reshape(1).numpy())


@pytest.mark.parametrize("kind", ["bn", "in", "gn", "ln"])
def test_norm_against_torch(kind):
    t, sz, a, out = _run(f"{PREFIX}nm_{kind}_f32_s4", trial=2)
    x, eps = _T(a["x"]), t.scalars[0].value
    if kind == "bn":
        want = F.batch_norm(x, None, None, _T(a["w"]), _T(a["b"]), training=True, eps=eps)
    elif kind == "in":
        want = F.instance_norm(x, eps=eps)
    elif kind == "gn":
        want = F.group_norm(x, sz["G"], _T(a["w"]), _T(a["b"]), eps=eps)
    else:
        want = F.layer_norm(x, x.shape[1:], eps=eps)
    _close(t, out, want.numpy())


@pytest.mark.parametrize("mask", ["full", "causal"])
def test_attention_against_torch(mask):
    t, _, a, out = _run(f"{PREFIX}at_{mask}_f32_s5", trial=1)
    want = F.scaled_dot_product_attention(_T(a["q"]), _T(a["k"]), _T(a["v"]), is_causal=mask == "causal")
    _close(t, out, want.numpy())


_EPI = {"relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
        "gelu": lambda z: F.gelu(z, approximate="tanh"), "scale": lambda z: 1.5 * z}


@pytest.mark.parametrize("tokens", ["mm_bias_relu", "mm_res_gelu_rsum", "mm_scale_sigmoid_tanh", "mm_rmax",
                                    "cv2_scale_sigmoid", "cv2_bias_res_rmean", "cv2_tanh_rsum", "cv2_gelu_bias_relu"])
def test_fusion_against_torch(tokens):
    t, _, a, out = _run(f"{PREFIX}fu_{tokens}_f32_s6", trial=1)
    main, *epis = tokens.split("_")
    x, w = _T(a["x"]), _T(a["w"])
    z = x @ w if main == "mm" else F.conv2d(x, w)
    for e in epis:
        if e == "bias":
            z = z + (_T(a["v"]) if main == "mm" else _T(a["v"]).reshape(1, -1, 1, 1))
        elif e == "res":
            z = z + _T(a["r"])
        elif e in _EPI:
            z = _EPI[e](z)
        else:
            z = {"rsum": z.sum(1), "rmax": z.amax(1), "rmean": z.mean(1)}[e]
    _close(t, out, z.numpy())
