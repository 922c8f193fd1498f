"""diag(A) @ B: each row of B scaled by the matching element of A."""
import torch
import torch.nn as nn

N, M = 16384, 6144
SMALL_SIZES = {"N": 37, "M": 300}
OUTPUT_NAMES = ("C",)


class Model(nn.Module):
    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return A.unsqueeze(1) * B


def get_inputs():
    return [torch.randn(N), torch.randn(N, M)]


def get_init_inputs():
    return []
