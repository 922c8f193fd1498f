"""1-D convolution with stride 3 and dilation 4, no bias."""
import torch
import torch.nn as nn
import torch.nn.functional as F

N, C, L, O, KW = 16, 64, 16384, 128, 3  # noqa: E741 (the names the suite task uses)
LO = 5459
stride, dilation = 3, 4
SMALL_SIZES = {"N": 2, "C": 3, "L": 50, "O": 4, "LO": 14}
OUTPUT_NAMES = ("y",)
TOLERANCE = (1e-3, 1e-3)


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.w = nn.Parameter(torch.randn(out_channels, in_channels, kernel_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv1d(x, self.w, stride=stride, dilation=dilation)


def get_inputs():
    return [torch.randn(N, C, L)]


def get_init_inputs():
    return [C, O, KW]
