"""3-D convolution, 3x3x3 kernel, no padding, no bias."""
import torch
import torch.nn as nn
import torch.nn.functional as F

N, C, D, H, W, O = 4, 8, 34, 34, 34, 32  # noqa: E741 (the names the suite task uses)
KD, KH, KW = 3, 3, 3
OD, OH, OW = 32, 32, 32
SMALL_SIZES = {"N": 2, "C": 2, "D": 5, "H": 6, "W": 7, "O": 3, "OD": 3, "OH": 4, "OW": 5}
OUTPUT_NAMES = ("y",)
TOLERANCE = (1e-3, 1e-3)


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.w = nn.Parameter(torch.randn(out_channels, in_channels, KD, KH, KW))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv3d(x, self.w)


def get_inputs():
    return [torch.randn(N, C, D, H, W)]


def get_init_inputs():
    return [C, O]
