"""Torch architectures of the benchmark, defined here because torchvision cannot load on CPU.

Each builder takes the architecture's params.yaml entry, the per-sample input shape and the
number of classes, and returns a freshly initialised module that maps inputs to logits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from math import prod
from typing import Any

import torch
from torch import nn

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


class MLP(nn.Module):
    """Fully connected classifier (TDDBench tabular MLP: hidden [512, 256, 128, 64], tanh)."""

    def __init__(self, in_features: int, hidden: Sequence[int], n_classes: int,
                 activation: str = "tanh") -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = in_features
        for size in hidden:
            layers += [nn.Linear(width, size), ACTIVATIONS[activation]()]
            width = size
        layers.append(nn.Linear(width, n_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class SmallCNN(nn.Module):
    """Conv(3x3)-ReLU-MaxPool stages, then one hidden dense layer: a CPU-sized image model."""

    def __init__(self, input_shape: Sequence[int], channels: Sequence[int], hidden: int,
                 n_classes: int) -> None:
        super().__init__()
        in_channels, height, width = input_shape
        stages: list[nn.Module] = []
        for out_channels in channels:
            stages += [nn.Conv2d(in_channels, out_channels, 3, padding=1), nn.ReLU()]
            if min(height, width) >= 2:
                stages.append(nn.MaxPool2d(2))
                height, width = height // 2, width // 2
            in_channels = out_channels
        self.features = nn.Sequential(*stages)
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(in_channels * height * width, hidden), nn.ReLU(),
            nn.Linear(hidden, n_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def build_torch_model(arch: Mapping[str, Any], input_shape: Sequence[int], n_classes: int) -> nn.Module:
    """A new, randomly initialised module for an `architectures` entry of kind mlp or cnn."""
    if arch["kind"] == "mlp":
        return MLP(prod(input_shape), arch["hidden"], n_classes, arch["activation"])
    if arch["kind"] == "cnn":
        if len(input_shape) != 3:
            raise ValueError(f"cnn needs image inputs (C, H, W), got per-sample shape {tuple(input_shape)}")
        return SmallCNN(input_shape, arch["channels"], arch["hidden"], n_classes)
    raise ValueError(f"not a torch architecture kind: {arch['kind']!r}")
