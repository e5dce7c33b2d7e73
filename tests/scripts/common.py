"""What the style scripts share: their arguments, a tiny model and its step, a CPU cost per item."""

from __future__ import annotations

import argparse
import hashlib

import torch
from torch import nn


def arguments(workers: int = 0, epochs: int = 1) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=workers)
    parser.add_argument("--epochs", type=int, default=epochs)
    parser.add_argument("--batch-size", type=int, default=16)
    return parser.parse_args()


def work(units: int, seed: int) -> int:
    """About ``units`` x 0.06 ms of CPU on this thread (sha256 over a 96 KiB block, measured on the
    course's 2-core machine): an item's decoding. hashlib lets go of the GIL meanwhile."""
    block = seed.to_bytes(8, "little") * 12288
    for _ in range(units):
        block = hashlib.sha256(block).digest() * 3072
    return block[0]


class Tiny(nn.Module):
    def __init__(self, features: int, classes: int = 10) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.LazyLinear(64), nn.ReLU(), nn.Linear(64, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def trainer(features: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    model = Tiny(features)
    model(torch.zeros(1, features))  # the lazy layer takes its shape
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x.flatten(1).float()), y)
    loss.backward()
    optimizer.step()
    return float(loss.detach())
