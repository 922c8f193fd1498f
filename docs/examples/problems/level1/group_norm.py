"""Group normalization with 8 groups and a per-channel affine."""
import torch
import torch.nn as nn
import torch.nn.functional as F

N, C, H, W = 16, 64, 128, 128
num_groups = 8
eps = 1e-5
SMALL_SIZES = {"N": 3, "C": 16, "H": 3, "W": 5}
OUTPUT_NAMES = ("y",)
TOLERANCE = (1e-3, 1e-3)


class Model(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.group_norm(x, num_groups, self.weight, self.bias, eps=eps)


def get_inputs():
    return [torch.randn(N, C, H, W)]


def get_init_inputs():
    return [C]
