"""A 2-D convolution with its bias, then ReLU, then a per-channel bias added."""
import torch
import torch.nn as nn
import torch.nn.functional as F

N, C, H, W, O = 8, 32, 128, 128, 64  # noqa: E741 (the names the suite task uses)
KH, KW = 3, 3
OH, OW = 126, 126
SMALL_SIZES = {"N": 2, "C": 3, "H": 11, "W": 12, "O": 4, "OH": 9, "OW": 10}
OUTPUT_NAMES = ("y",)
TOLERANCE = (1e-3, 1e-3)


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.w = nn.Parameter(torch.randn(out_channels, in_channels, KH, KW))
        self.conv_bias = nn.Parameter(torch.randn(out_channels))
        self.bias = nn.Parameter(torch.randn(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(F.conv2d(x, self.w, self.conv_bias)) + self.bias.view(-1, 1, 1)


def get_inputs():
    return [torch.randn(N, C, H, W)]


def get_init_inputs():
    return [C, O]
