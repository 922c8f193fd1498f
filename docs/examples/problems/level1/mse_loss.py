"""Mean squared error between predictions and targets, over every element."""
import torch
import torch.nn as nn

batch_size = 4096
dim = 8192
SMALL_SIZES = {"batch_size": 7, "dim": 300}


class Model(nn.Module):
    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.mean((predictions - targets) ** 2)


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
