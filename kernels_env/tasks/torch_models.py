"""The KernelBench-style PyTorch computation of each task aligned with a KernelBench problem.

Each entry takes `torch`, the task's inputs as torch tensors (by buffer name) and its scalars, and
returns the outputs in the order of `Task.outputs`, computed the way the KernelBench level-1/2 model of
the same name computes them (torch.nn modules with their defaults; the task's input buffers stand for
the module's parameters where it has some). Used by the GPU agreement test (the CuPy reference and
this must agree within the task's tolerance) and, where torch is installed, for the informational
`Timing.baseline` (torch eager time; the reward uses the CuPy reference's). torch is imported by the
caller, never here.
"""
from __future__ import annotations

from typing import Any
from collections.abc import Callable

TorchModel = Callable[[Any, dict[str, Any], dict[str, Any]], Any]


def _layer_norm(torch: Any, a: dict[str, Any], s: dict[str, Any]) -> Any:
    ln = torch.nn.LayerNorm(normalized_shape=tuple(a["x"].shape[1:])).to(a["x"].device)  # eps 1e-5
    with torch.no_grad():
        ln.weight.copy_(a["weight"])
        ln.bias.copy_(a["bias"])
        return ln(a["x"])


def _conv2d_relu_bias_add(torch: Any, a: dict[str, Any], s: dict[str, Any]) -> Any:
    o, c, kh, kw = a["w"].shape
    conv = torch.nn.Conv2d(c, o, (kh, kw)).to(a["x"].device)
    with torch.no_grad():
        conv.weight.copy_(a["w"])
        conv.bias.copy_(a["conv_bias"])
        return torch.relu(conv(a["x"])) + a["bias"].view(-1, 1, 1)


def _matmul_scale_residual(torch: Any, a: dict[str, Any], s: dict[str, Any]) -> Any:
    k, n = a["w"].shape
    lin = torch.nn.Linear(k, n).to(a["x"].device)
    with torch.no_grad():
        lin.weight.copy_(a["w"].t())
        lin.bias.copy_(a["bias"])
        x = lin(a["x"])
        original_x = x.clone().detach()
        return x * s["scale"] + original_x


def _batch_norm(torch: Any, a: dict[str, Any], s: dict[str, Any]) -> Any:
    bn = torch.nn.BatchNorm2d(a["x"].shape[1]).to(a["x"].device)  # eps 1e-5, training mode: batch statistics
    with torch.no_grad():
        bn.weight.copy_(a["weight"])
        bn.bias.copy_(a["bias"])
        return bn(a["x"])


def _group_norm(torch: Any, a: dict[str, Any], s: dict[str, Any]) -> Any:
    gn = torch.nn.GroupNorm(num_groups=s["num_groups"], num_channels=a["x"].shape[1]).to(a["x"].device)  # eps 1e-5
    with torch.no_grad():
        gn.weight.copy_(a["weight"])
        gn.bias.copy_(a["bias"])
        return gn(a["x"])


def _conv(torch: Any, module: Any, weight: Any, x: Any) -> Any:
    """Run a bias-free conv module (KernelBench's bias=False) with `weight` as its parameter."""
    module = module.to(x.device)
    with torch.no_grad():
        module.weight.copy_(weight)
        return module(x)


def _conv3d(torch: Any, a: dict[str, Any], s: dict[str, Any]) -> Any:
    o, c, kd, kh, kw = a["w"].shape
    return _conv(torch, torch.nn.Conv3d(c, o, (kd, kh, kw), bias=False), a["w"], a["x"])


def _conv_transpose2d(torch: Any, a: dict[str, Any], s: dict[str, Any]) -> Any:
    c, o, kh, kw = a["w"].shape
    return _conv(torch, torch.nn.ConvTranspose2d(c, o, (kh, kw), bias=False), a["w"], a["x"])


def _conv_depthwise2d(torch: Any, a: dict[str, Any], s: dict[str, Any]) -> Any:
    c, _, kh, kw = a["w"].shape
    return _conv(torch, torch.nn.Conv2d(c, c, (kh, kw), groups=c, bias=False), a["w"], a["x"])


def _conv1d_dilated_strided(torch: Any, a: dict[str, Any], s: dict[str, Any]) -> Any:
    o, c, k = a["w"].shape
    return _conv(torch, torch.nn.Conv1d(c, o, k, stride=s["stride"], dilation=s["dilation"], bias=False),
                 a["w"], a["x"])


def _cumsum_exclusive(torch: Any, a: dict[str, Any], s: dict[str, Any]) -> Any:
    x, dim = a["x"], 1  # KernelBench 92's forward
    exclusive = torch.cat((torch.zeros_like(x.select(dim, 0).unsqueeze(dim)), x), dim=dim).narrow(dim, 0, x.size(dim))
    return torch.cumsum(exclusive, dim=dim)


TORCH_MODELS: dict[str, TorchModel] = {
    # level 1
    "hardtanh": lambda torch, a, s: torch.nn.Hardtanh()(a["x"]),  # module defaults: (-1, 1)
    "argmax_dim": lambda torch, a, s: torch.argmax(a["x"], dim=1),
    "argmin_dim": lambda torch, a, s: torch.argmin(a["x"], dim=1),
    "rms_norm": lambda torch, a, s: a["x"] / torch.sqrt(torch.mean(a["x"] ** 2, dim=1, keepdim=True) + 1e-5),
    "layer_norm": _layer_norm,
    "kl_div_batchmean": lambda torch, a, s: torch.nn.functional.kl_div(
        torch.log(a["predictions"]), a["targets"], reduction="batchmean").reshape(1),
    "conv3d": _conv3d,
    "conv_transpose2d": _conv_transpose2d,
    "conv_depthwise2d": _conv_depthwise2d,
    "conv1d_dilated_strided": _conv1d_dilated_strided,
    "maxpool3d": lambda torch, a, s: torch.nn.MaxPool3d(kernel_size=s["kernel_size"], stride=s["stride"],
                                                        padding=s["padding"], dilation=s["dilation"])(a["x"]),
    "avgpool3d": lambda torch, a, s: torch.nn.AvgPool3d(kernel_size=s["kernel_size"], stride=s["stride"],
                                                        padding=s["padding"])(a["x"]),
    "batch_norm": _batch_norm,
    "instance_norm": lambda torch, a, s: torch.nn.InstanceNorm2d(a["x"].shape[1]).to(a["x"].device)(a["x"]),
    "group_norm": _group_norm,
    "matrix_scalar_mul": lambda torch, a, s: a["A"] * s["s"],
    "matmul_tall_skinny": lambda torch, a, s: torch.matmul(a["A"], a["B"]),
    "matmul_3d_tensor": lambda torch, a, s: torch.matmul(a["A"], a["B"]),
    "matmul_diag": lambda torch, a, s: a["A"].unsqueeze(1) * a["B"],
    # KernelBench 15 feeds lower-triangular inputs (torch.tril in get_inputs); the task's inputs are full
    "matmul_lower_triangular": lambda torch, a, s: torch.tril(torch.matmul(torch.tril(a["A"]), torch.tril(a["B"]))),
    "scaled_dot_product_attention": lambda torch, a, s: torch.nn.functional.scaled_dot_product_attention(
        a["Q"], a["K"], a["V"]),
    "cumsum_exclusive": _cumsum_exclusive,
    "masked_cumsum": lambda torch, a, s: torch.cumsum(a["x"] * a["mask"].bool(), dim=1),
    "triplet_margin_loss": lambda torch, a, s: torch.nn.TripletMarginLoss(margin=s["margin"])(
        a["anchor"], a["positive"], a["negative"]).reshape(1),
    # level 2
    "conv2d_relu_bias_add": _conv2d_relu_bias_add,
    "matmul_scale_residual": _matmul_scale_residual,
    # already KernelBench's semantics
    "relu": lambda torch, a, s: torch.relu(a["x"]),
    "sigmoid": lambda torch, a, s: torch.sigmoid(a["x"]),
    "tanh": lambda torch, a, s: torch.tanh(a["x"]),
    "softmax": lambda torch, a, s: torch.softmax(a["x"], dim=1),
    "log_softmax": lambda torch, a, s: torch.log_softmax(a["x"], dim=1),
}
