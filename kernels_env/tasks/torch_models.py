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


TORCH_MODELS: dict[str, TorchModel] = {
    # level 1
    "hardtanh": lambda torch, a, s: torch.nn.Hardtanh()(a["x"]),  # module defaults: (-1, 1)
    "argmax_dim": lambda torch, a, s: torch.argmax(a["x"], dim=1),
    "argmin_dim": lambda torch, a, s: torch.argmin(a["x"], dim=1),
    "rms_norm": lambda torch, a, s: a["x"] / torch.sqrt(torch.mean(a["x"] ** 2, dim=1, keepdim=True) + 1e-5),
    "layer_norm": _layer_norm,
    "kl_div_batchmean": lambda torch, a, s: torch.nn.functional.kl_div(
        torch.log(a["predictions"]), a["targets"], reduction="batchmean").reshape(1),
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
