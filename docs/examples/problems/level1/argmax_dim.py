"""Argmax over dimension 1 of a 3-D tensor."""
import torch
import torch.nn as nn

B, D, I = 256, 256, 2048  # noqa: E741 (the names the suite task uses)
SMALL_SIZES = {"B": 3, "D": 17, "I": 67}
OUTPUT_NAMES = ("out",)


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=self.dim)


def get_inputs():
    return [torch.randn(B, D, I)]


def get_init_inputs():
    return [1]
