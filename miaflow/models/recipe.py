"""The torch training recipe of an architecture entry, shared by the per-model loop
(`miaflow.models.training`) and the batched ensemble (`miaflow.models.ensemble`), which must
train the same models: the module, the learning rate of every epoch, SGD's momentum and the
GPU-path options.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from miaflow.models.optimizers import cosine_annealing

SGD_MOMENTUM = 0.9  # the image recipe's (TDDBench)


def module_arch(arch: Mapping[str, Any]) -> dict[str, Any]:
    """The `build_torch_model` entry of an architecture: `torch_lr` is an MLP without hidden layers
    (logistic regression with L2 penalty `weight_decay`), so its weights load into that module."""
    if arch["kind"] == "torch_lr":
        return {"kind": "mlp", "hidden": [], "activation": "tanh"}
    return dict(arch)


def build_module(arch: Mapping[str, Any], input_shape: Sequence[int], n_classes: int) -> nn.Module:
    from miaflow.models.architectures import build_torch_model

    return build_torch_model(module_arch(arch), input_shape, n_classes)


def learning_rates(arch: Mapping[str, Any]) -> list[float]:
    """Learning rate of every epoch under the recipe's `lr_schedule`: constant (Adam's default),
    torch's cosine annealing (SGD's default), or torch's StepLR `{step_size, gamma}`."""
    lr, epochs = arch["lr"], arch["epochs"]
    schedule = arch.get("lr_schedule", "cosine" if arch["optimizer"] == "sgd" else "constant")
    if schedule == "constant":
        return [lr] * epochs
    if schedule == "cosine":
        return cosine_annealing(lr, epochs)
    return [lr * schedule["gamma"] ** (epoch // schedule["step_size"]) for epoch in range(epochs)]


def sgd_momentum(arch: Mapping[str, Any]) -> float:
    """The recipe's SGD momentum (`momentum`, default SGD_MOMENTUM)."""
    return arch.get("momentum", SGD_MOMENTUM)


@dataclass(frozen=True)
class Options:
    """GPU-path options of an architecture entry (all no-ops at their defaults)."""

    precision: str = "fp32"  # "bf16": autocast forward (weights and optimizer stay fp32)
    channels_last: bool = False  # NHWC convolutions (CNN)
    compile: bool | str = False  # torch.compile the forward and loss: true, or a torch.compile mode

    @classmethod
    def of(cls, arch: Mapping[str, Any]) -> Options:
        return cls(
            arch.get("precision", "fp32"),
            arch.get("channels_last", False),
            arch.get("compile", False),
        )

    def compiled(self, function: Any) -> Any:
        """`function` through torch.compile (in the configured mode), or as it is."""
        if not self.compile:
            return function
        return torch.compile(function, mode=None if self.compile is True else self.compile)
