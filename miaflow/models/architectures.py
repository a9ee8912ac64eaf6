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
    """Fully connected classifier (TDDBench tabular MLP: hidden [512, 256, 128, 64], tanh).

    `init`: torch's default initialisation, or `glorot_uniform` weights with zero biases, Keras'
    default, which the Keras-trained targets of MemGuard and Song & Mittal (Location30) start
    from; without it their recipe, plain SGD, trains far worse
    (docs/algorithms.md#model-training)."""

    def __init__(
        self,
        in_features: int,
        hidden: Sequence[int],
        n_classes: int,
        activation: str = "tanh",
        init: str = "default",
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = in_features
        for size in hidden:
            layers += [nn.Linear(width, size), ACTIVATIONS[activation]()]
            width = size
        layers.append(nn.Linear(width, n_classes))
        self.net = nn.Sequential(*layers)
        if init == "glorot_uniform":
            for layer in self.net:
                if isinstance(layer, nn.Linear):
                    nn.init.xavier_uniform_(layer.weight)
                    nn.init.zeros_(layer.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class SmallCNN(nn.Module):
    """Conv(3x3)-ReLU-MaxPool stages, then one hidden dense layer: a CPU-sized image model."""

    def __init__(
        self, input_shape: Sequence[int], channels: Sequence[int], hidden: int, n_classes: int
    ) -> None:
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
            nn.Flatten(),
            nn.Linear(in_channels * height * width, hidden),
            nn.ReLU(),
            nn.Linear(hidden, n_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def _conv_bn(
    in_channels: int, out_channels: int, kernel: int = 3, stride: int = 1, groups: int = 1
) -> list[nn.Module]:
    return [
        nn.Conv2d(
            in_channels, out_channels, kernel, stride, kernel // 2, groups=groups, bias=False
        ),
        nn.BatchNorm2d(out_channels),
    ]


# TDDBench's torch port of the objax WRN keeps objax's BN momentum 0.9; in torch's convention
# that weights the newest batch by 0.9 (objax's 0.9 is torch's 0.1). compat keeps the port's value.
WRN_BN_MOMENTUM = 0.9


class WideResNetBlock(nn.Module):
    """Pre-activation block (BN-ReLU-conv twice); a 1x1 projection of the activated input when
    shapes change."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.norm_1 = nn.BatchNorm2d(in_channels, momentum=WRN_BN_MOMENTUM)
        self.conv_1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.norm_2 = nn.BatchNorm2d(out_channels, momentum=WRN_BN_MOMENTUM)
        self.conv_2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.projection = (
            nn.Conv2d(in_channels, out_channels, 1, stride, bias=False)
            if in_channels != out_channels or stride > 1
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        activated = torch.relu(self.norm_1(x))
        out = self.conv_2(torch.relu(self.norm_2(self.conv_1(activated))))
        return out + (self.projection(activated) if self.projection is not None else x)


class WideResNet(nn.Module):
    """WRN-depth-width as in the LiRA (objax) and TDDBench code: 3 groups of (depth-4)/6 blocks,
    widths 16k, 32k, 64k."""

    def __init__(self, in_channels: int, n_classes: int, depth: int = 28, width: int = 2) -> None:
        super().__init__()
        if (depth - 4) % 6:
            raise ValueError(f"WRN depth must be 6n+4, got {depth}")
        layers: list[nn.Module] = [nn.Conv2d(in_channels, 16, 3, padding=1, bias=False)]
        channels = 16
        for group in range(3):
            out_channels = 16 * 2**group * width
            for block in range((depth - 4) // 6):
                stride = 2 if group > 0 and block == 0 else 1
                layers.append(WideResNetBlock(channels, out_channels, stride))
                channels = out_channels
        layers += [
            nn.BatchNorm2d(channels, momentum=WRN_BN_MOMENTUM),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(channels, n_classes),
        ]
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class BasicBlock(nn.Module):
    """ResNet basic block (post-activation); 1x1 conv + BN shortcut when shapes change."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.residual = nn.Sequential(
            *_conv_bn(in_channels, out_channels, stride=stride),
            nn.ReLU(),
            *_conv_bn(out_channels, out_channels),
        )
        self.shortcut = (
            nn.Sequential(*_conv_bn(in_channels, out_channels, kernel=1, stride=stride))
            if in_channels != out_channels or stride > 1
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.residual(x) + self.shortcut(x))


class ResNet18(nn.Module):
    """CIFAR ResNet18 (kuangliu/TDDBench): 3x3 stride-1 stem and no max-pool, so 32x32 ends at
    4x4."""

    def __init__(self, in_channels: int, n_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [*_conv_bn(in_channels, 64), nn.ReLU()]
        channels = 64
        for stage, out_channels in enumerate((64, 128, 256, 512)):
            for block in range(2):
                stride = 2 if stage > 0 and block == 0 else 1
                layers.append(BasicBlock(channels, out_channels, stride))
                channels = out_channels
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, n_classes)]
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


VGG11_LAYOUT = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


class VGG11(nn.Module):
    """CIFAR VGG11 with batch norm (TDDBench's vgg.py): conv(with bias)-BN-ReLU stages, one linear
    layer.

    A max-pool is skipped once the map is 1 pixel wide, so inputs from 8x8 up work; at 32x32 the
    five pools reach 1x1 exactly as in the original.
    """

    def __init__(self, input_shape: Sequence[int], n_classes: int) -> None:
        super().__init__()
        channels, height, width = input_shape
        layers: list[nn.Module] = []
        for item in VGG11_LAYOUT:
            if item == "M":
                if min(height, width) >= 2:
                    layers.append(nn.MaxPool2d(2))
                    height, width = height // 2, width // 2
            else:
                layers += [
                    nn.Conv2d(channels, int(item), 3, padding=1),
                    nn.BatchNorm2d(int(item)),
                    nn.ReLU(),
                ]
                channels = int(item)
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, n_classes)]
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand, 3x3 depthwise, linear 1x1 project; identity skip when shapes
    match."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, expansion: int) -> None:
        super().__init__()
        hidden = in_channels * expansion
        layers: list[nn.Module] = []
        if expansion != 1:
            layers += [*_conv_bn(in_channels, hidden, kernel=1), nn.ReLU6()]
        layers += [
            *_conv_bn(hidden, hidden, stride=stride, groups=hidden),
            nn.ReLU6(),
            *_conv_bn(hidden, out_channels, kernel=1),
        ]
        self.block = nn.Sequential(*layers)
        self.skip = stride == 1 and in_channels == out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x) if self.skip else self.block(x)


# (expansion t, channels c, repeats n, first stride s) of Sandler et al. Table 2, with the CIFAR
# changes (stride-1 stem and second stage) so that 32x32 inputs end at 4x4.
MOBILENETV2_LAYOUT = (
    (1, 16, 1, 1),
    (6, 24, 2, 1),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


class MobileNetV2(nn.Module):
    """CIFAR MobileNetV2 (width 1.0): torchvision's layer structure with the CIFAR strides."""

    def __init__(self, in_channels: int, n_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [*_conv_bn(in_channels, 32), nn.ReLU6()]
        channels = 32
        for expansion, out_channels, repeats, stride in MOBILENETV2_LAYOUT:
            for i in range(repeats):
                layers.append(
                    InvertedResidual(channels, out_channels, stride if i == 0 else 1, expansion)
                )
                channels = out_channels
        layers += [
            *_conv_bn(channels, 1280, kernel=1),
            nn.ReLU6(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(1280, n_classes),
        ]
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


IMAGE_MODELS = {
    "wrn28_2": lambda shape, n_classes: WideResNet(shape[0], n_classes, depth=28, width=2),
    "resnet18": lambda shape, n_classes: ResNet18(shape[0], n_classes),
    "vgg11": lambda shape, n_classes: VGG11(shape, n_classes),
    "mobilenetv2": lambda shape, n_classes: MobileNetV2(shape[0], n_classes),
}

# Black after TDDBench's mean = std = 0.5 normalisation: torchvision pads the raw image with 0.
CROP_PAD_VALUE = -1.0


def trainable_batches(order: Any, batch_size: int, model: Any) -> list[Any]:
    """`order` split into minibatches of `batch_size`, without a last batch of one sample when
    the model has batch norm: in training mode it cannot normalise a single value per channel
    (the last spatial map of VGG11 is 1x1), so that sample sits this epoch out."""
    batches = list(order.split(batch_size))
    norms = any(
        isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)) for m in model.modules()
    )
    return batches[:-1] if norms and len(batches) > 1 and len(batches[-1]) == 1 else batches


def augment_images(
    x: torch.Tensor, generator: torch.Generator, padding: int = 4, pad_value: float = CROP_PAD_VALUE
) -> torch.Tensor:
    """Train-time augmentation of a batch (N, C, H, W): random crop after `padding` and a
    horizontal flip.

    Each image gets its own offsets and coin from `generator` (a CPU generator, so draws are the
    same on every device); the batch stays on its device.
    """
    offsets, flips = augment_draws(len(x), generator, padding)
    return crop_and_flip(x, offsets.to(x.device), flips.to(x.device), padding, pad_value)


def augment_draws(
    n: int, generator: torch.Generator, padding: int = 4
) -> tuple[torch.Tensor, torch.Tensor]:
    """`augment_images`' random draws for n images: (2, n) crop offsets and n flip coins, apart
    from the crop itself so that an ensemble can draw per member and crop all members at once."""
    offsets = torch.randint(0, 2 * padding + 1, (2, n), generator=generator)
    flips = torch.rand(n, generator=generator) < 0.5
    return offsets, flips


def crop_and_flip(
    x: torch.Tensor,
    offsets: torch.Tensor,
    flips: torch.Tensor,
    padding: int = 4,
    pad_value: float = CROP_PAD_VALUE,
) -> torch.Tensor:
    """Crop each image of (N, C, H, W) at its (row, column) offset into the padded image, and
    mirror the images whose coin says so."""
    n, _, height, width = x.shape
    padded = nn.functional.pad(x, (padding,) * 4, value=pad_value)
    rows = offsets[0, :, None] + torch.arange(height, device=x.device)
    cols = offsets[1, :, None] + torch.arange(width, device=x.device)
    batch = torch.arange(n, device=x.device)[:, None, None]
    cropped = padded[batch, :, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)
    return torch.where(flips[:, None, None, None], cropped.flip(-1), cropped).contiguous()


def build_torch_model(
    arch: Mapping[str, Any], input_shape: Sequence[int], n_classes: int
) -> nn.Module:
    """A new, randomly initialised module for an `architectures` entry of a torch image or tabular
    kind."""
    kind = arch["kind"]
    if kind == "mlp":
        return MLP(
            prod(input_shape),
            arch["hidden"],
            n_classes,
            arch["activation"],
            arch.get("init", "default"),
        )
    if kind == "cnn" or kind in IMAGE_MODELS:
        if len(input_shape) != 3:
            raise ValueError(
                f"{kind} needs image inputs (C, H, W), got per-sample shape {tuple(input_shape)}"
            )
        if kind == "cnn":
            return SmallCNN(input_shape, arch["channels"], arch["hidden"], n_classes)
        if min(input_shape[1:]) < 8:
            raise ValueError(f"{kind} needs images of at least 8x8, got {tuple(input_shape)}")
        return IMAGE_MODELS[kind](input_shape, n_classes)
    raise ValueError(f"not a torch architecture kind: {kind!r}")
