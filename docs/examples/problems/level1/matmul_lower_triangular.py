"""The product of two lower-triangular matrices (the lower triangles of A and B), lower triangle kept."""
import torch
import torch.nn as nn

N = 4096
SMALL_SIZES = {"N": 67}
OUTPUT_NAMES = ("C",)


class Model(nn.Module):
    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.tril(torch.matmul(torch.tril(A), torch.tril(B)))


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
