"""Layer normalization over the last three dimensions, with an elementwise affine."""
import torch
import torch.nn as nn

B, F, D1, D2 = 16, 64, 128, 128
eps = 1e-5
SMALL_SIZES = {"B": 3, "F": 4, "D1": 5, "D2": 7}
OUTPUT_NAMES = ("y",)
TOLERANCE = (1e-3, 1e-3)


class Model(nn.Module):
    def __init__(self, features: int, d1: int, d2: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(features, d1, d2))
        self.bias = nn.Parameter(torch.zeros(features, d1, d2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.layer_norm(x, tuple(x.shape[1:]), self.weight, self.bias, eps=eps)


def get_inputs():
    return [torch.randn(B, F, D1, D2)]


def get_init_inputs():
    return [F, D1, D2]
