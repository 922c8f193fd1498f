"""Triplet margin loss (margin 1, L2 distance), averaged over the batch."""
import torch
import torch.nn as nn

B, D = 8192, 2048
margin = 1.0
eps = 1e-6
SMALL_SIZES = {"B": 9, "D": 1000}
OUTPUT_NAMES = ("loss",)


class Model(nn.Module):
    def __init__(self, margin: float):
        super().__init__()
        self.loss = nn.TripletMarginLoss(margin=margin, eps=eps)

    def forward(self, anchor: torch.Tensor, positive: torch.Tensor, negative: torch.Tensor) -> torch.Tensor:
        return self.loss(anchor, positive, negative)


def get_inputs():
    return [torch.randn(B, D), torch.randn(B, D), torch.randn(B, D)]


def get_init_inputs():
    return [margin]
