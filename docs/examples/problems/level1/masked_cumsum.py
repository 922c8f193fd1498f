"""Prefix sum along dimension 1 of x where mask is set (masked-out elements add zero)."""
import torch
import torch.nn as nn

M, N = 8192, 8192
SMALL_SIZES = {"M": 5, "N": 1000}
OUTPUT_NAMES = ("y",)
TOLERANCE = (1e-2, 1e-3)


class Model(nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x * mask.bool(), dim=1)


def get_inputs():
    return [torch.randn(M, N), torch.randint(0, 2, (M, N), dtype=torch.int32)]


def get_init_inputs():
    return []
