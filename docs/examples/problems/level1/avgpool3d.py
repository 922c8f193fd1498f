"""3-D average pooling (kernel 3, stride 2, padding 1; padded cells count in the mean)."""
import torch
import torch.nn as nn

N, C, D, H, W = 8, 16, 64, 64, 64
OD, OH, OW = 32, 32, 32
kernel_size, stride, padding = 3, 2, 1
SMALL_SIZES = {"N": 2, "C": 2, "D": 9, "H": 10, "W": 11, "OD": 5, "OH": 5, "OW": 6}
OUTPUT_NAMES = ("y",)


class Model(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.AvgPool3d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(N, C, D, H, W)]


def get_init_inputs():
    return [kernel_size, stride, padding]
