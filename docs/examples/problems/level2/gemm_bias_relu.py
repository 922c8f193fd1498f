"""A bias-free linear layer, a bias added, then ReLU."""
import torch
import torch.nn as nn

batch_size = 128
in_features = 1024
out_features = 512
SMALL_SIZES = {"batch_size": 5, "in_features": 33, "out_features": 17}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias_shape: tuple[int, ...]):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.gemm(x) + self.bias)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, (out_features,)]
