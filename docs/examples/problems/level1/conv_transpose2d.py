"""Transposed 2-D convolution, 3x3 kernel, stride 1, no bias."""
import torch
import torch.nn as nn
import torch.nn.functional as F

N, C, H, W, O = 8, 32, 128, 128, 32  # noqa: E741 (the names the suite task uses)
KH, KW = 3, 3
OH, OW = 130, 130
SMALL_SIZES = {"N": 2, "C": 3, "H": 7, "W": 8, "O": 4, "OH": 9, "OW": 10}
OUTPUT_NAMES = ("y",)
TOLERANCE = (1e-3, 1e-3)


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.w = nn.Parameter(torch.randn(in_channels, out_channels, KH, KW))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv_transpose2d(x, self.w)


def get_inputs():
    return [torch.randn(N, C, H, W)]


def get_init_inputs():
    return [C, O]
