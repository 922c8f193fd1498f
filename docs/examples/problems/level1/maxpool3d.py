"""3-D max pooling (kernel 3, stride 2, padding 1, dilation 3)."""
import torch
import torch.nn as nn

N, C, D, H, W = 8, 16, 64, 64, 64
OD, OH, OW = 30, 30, 30
kernel_size, stride, padding, dilation = 3, 2, 1, 3
SMALL_SIZES = {"N": 2, "C": 2, "D": 9, "H": 10, "W": 11, "OD": 3, "OH": 3, "OW": 4}
OUTPUT_NAMES = ("y",)


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int, dilation: int):
        super().__init__()
        self.pool = nn.MaxPool3d(kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(N, C, D, H, W)]


def get_init_inputs():
    return [kernel_size, stride, padding, dilation]
