"""M sequential torch models of one architecture as one network of grouped layers.

Small models leave most of a CPU's (or GPU's) matmul throughput unused when run one by one:
per-call overhead dominates. Here the M members' parameters are stacked: a linear layer becomes
one batched matmul (`baddbmm`) over M weight matrices and a convolution one grouped convolution
with M groups, so every step does M models' work in a few large kernels. Layers it knows:
Linear, Conv2d, ReLU, Tanh, MaxPool2d, Flatten, Identity, applied in registration order;
networks with batch norm or skip connections are widened instead (`miaflow.models.wide`).
`miaflow.models.ensemble` trains either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

Weights = dict[str, np.ndarray]

ELEMENTWISE = (nn.ReLU, nn.Tanh, nn.MaxPool2d, nn.Identity)


@dataclass(frozen=True)
class _Layer:
    module: nn.Module
    weight: str | None = None  # state-dict keys of the stacked parameters (Linear, Conv2d)
    bias: str | None = None


def grouped_layers(module: nn.Module) -> list[_Layer] | None:
    """The module's leaves in order, or None if one is not a layer the ensemble can group.

    Only sequential compositions are grouped; `fit_ensemble` also checks the grouped forward
    against the module's own forward before training."""
    layers = []
    for name, leaf in module.named_modules():
        if list(leaf.children()):
            continue
        prefix = f"{name}." if name else ""
        if isinstance(leaf, (nn.Linear, nn.Conv2d)):
            if leaf.bias is None or (isinstance(leaf, nn.Conv2d) and leaf.padding_mode != "zeros"):
                return None
            layers.append(_Layer(leaf, prefix + "weight", prefix + "bias"))
        elif isinstance(leaf, ELEMENTWISE) or (
            isinstance(leaf, nn.Flatten) and leaf.start_dim == 1 and leaf.end_dim == -1
        ):
            layers.append(_Layer(leaf))
        else:
            return None
    if sum(1 for _ in module.buffers()):
        return None
    return layers


class GroupedEnsemble:
    """M models of one architecture as stacked parameters (M, *shape) and a grouped forward.

    Linear weights are stored transposed, (M, in, out), so that `baddbmm` and its backward run
    on contiguous operands (measurably faster on CPU, and the gradients need no copy).

    On the CPU the grouped convolutions always run NHWC (channels_last), a ReLU followed by a
    max-pool runs as the pool then the ReLU (the same values and gradients; a quarter of the
    elements after a 2x2 pool), and tanh as 2 sigmoid(2x) - 1 (torch's CPU tanh is ~6x slower
    than its sigmoid; the results agree to ~2e-7). On a GPU the layers run as registered, NHWC
    only with the `channels_last` option."""

    def __init__(
        self,
        modules: Sequence[nn.Module],
        layers: list[_Layer],
        device: str,
        channels_last: bool = False,
    ) -> None:
        states = [m.state_dict() for m in modules]
        self.keys = list(states[0])
        self.transposed = {layer.weight for layer in layers if isinstance(layer.module, nn.Linear)}
        self.params = {
            k: self._stored(torch.stack([s[k] for s in states]), k).to(device).requires_grad_()
            for k in self.keys
        }
        cpu = torch.device(device).type == "cpu"
        self.layers = _tanh_by_sigmoid(_pool_before_relu(layers)) if cpu else layers
        self.size = len(modules)
        self.channels_last = channels_last or cpu
        self.buffers: dict[str, torch.Tensor] = {}  # `grouped_layers` refuses modules with any

    def train(self, mode: bool) -> None:
        """No layer here behaves differently in training and in evaluation."""

    def forward(
        self,
        x: torch.Tensor,
        params: Mapping[str, torch.Tensor] | None = None,
        rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(M, B, *input_shape) member-major inputs -> (M, B, n_classes) logits.

        Convolutions run on (B, M*C, H, W) with M groups; Flatten returns to member-major.
        `rows` is not needed: no layer here has batch statistics."""
        params = self.params if params is None else params
        members, batch = x.shape[:2]
        h, grouped = x, False
        for layer in self.layers:
            module = layer.module
            if isinstance(module, nn.Linear):
                if grouped:
                    h, grouped = _ungroup(h, members), False
                weight, bias = params[layer.weight], params[layer.bias]
                h = torch.baddbmm(bias.unsqueeze(1).to(h.dtype), h, weight.to(h.dtype))
            elif isinstance(module, nn.Conv2d):
                if not grouped:
                    h = h.transpose(0, 1).reshape(batch, members * h.shape[2], *h.shape[3:])
                    if self.channels_last:
                        h = h.contiguous(memory_format=torch.channels_last)
                    grouped = True
                weight, bias = params[layer.weight], params[layer.bias]
                h = F.conv2d(
                    h,
                    weight.reshape(-1, *weight.shape[2:]),
                    bias.reshape(-1),
                    module.stride,
                    module.padding,
                    module.dilation,
                    members * module.groups,
                )
            elif isinstance(module, nn.Flatten):
                h, grouped = (_ungroup(h, members), False) if grouped else (h.flatten(2), False)
            else:
                h = module(h)
        return _ungroup(h, members) if grouped else h

    def member_weights(self, index: int) -> Weights:
        """One member's state dict as float32 numpy arrays (the keys of its torch module)."""
        return {
            k: self._stored(self.params[k][index : index + 1].detach(), k)[0].float().cpu().numpy()
            for k in self.keys
        }

    def _stored(self, stacked: torch.Tensor, key: str) -> torch.Tensor:
        """Swap a linear weight between torch's (out, in) and the stored (in, out), both ways."""
        return (
            stacked.transpose(1, 2).contiguous() if key in self.transposed else stacked.contiguous()
        )


def _pool_before_relu(layers: list[_Layer]) -> list[_Layer]:
    """The layers with every ReLU that a max-pool follows moved after it (they commute)."""
    layers = list(layers)
    for i in range(len(layers) - 1):
        if isinstance(layers[i].module, nn.ReLU) and isinstance(layers[i + 1].module, nn.MaxPool2d):
            layers[i], layers[i + 1] = layers[i + 1], layers[i]
    return layers


class _SigmoidTanhFunction(torch.autograd.Function):
    """tanh(x) as 2 sigmoid(2x) - 1, with tanh's own backward on the saved output."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        out = torch.sigmoid(x * 2).mul_(2).sub_(1)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (out,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, out)


class _SigmoidTanh(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _SigmoidTanhFunction.apply(x)


def _tanh_by_sigmoid(layers: list[_Layer]) -> list[_Layer]:
    """The layers with every Tanh as a `_SigmoidTanh`."""
    return [
        _Layer(_SigmoidTanh()) if isinstance(layer.module, nn.Tanh) else layer for layer in layers
    ]


def _ungroup(h: torch.Tensor, members: int) -> torch.Tensor:
    """(B, M*C, H, W) -> (M, B, C*H*W)."""
    return h.reshape(h.shape[0], members, -1).transpose(0, 1)
