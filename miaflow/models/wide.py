"""M members of a network with batch norm and residual blocks as one network M times as wide.

The grouped ensemble of `miaflow.models.grouped` interprets a sequence of leaves; WideResNet,
ResNet18, VGG11 and MobileNetV2 have skip connections and batch norm. Here the member's own
module is copied and every leaf is widened instead, so its forward code (additions, ReLUs,
pooling) runs unchanged on activations (B, M*C, H, W) in which member m owns channels
[m*C, (m+1)*C): a convolution becomes one grouped convolution (M times the groups), a batch norm
one batch norm over M*C channels (per channel statistics are per member), a linear layer one
batched matmul. Members never mix, so every member's outputs and gradients are the ones its own
module would give on its own batch; `fit_ensemble` checks that on a probe before training.

Members whose batch at a step is only partly filled (a smaller last batch) need batch statistics
over their real rows only: the widened batch norms then take a row mask (`rows`) and compute the
masked statistics themselves; full (or empty) batches run torch's own kernel.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

Weights = dict[str, np.ndarray]

# Leaves that act on each channel (or each element) alone, so they run on widened activations as
# they are. Dropout is not one: its random mask would differ from the member's own.
CHANNELWISE = (
    nn.ReLU,
    nn.ReLU6,
    nn.Tanh,
    nn.Identity,
    nn.MaxPool2d,
    nn.AvgPool2d,
    nn.AdaptiveAvgPool2d,
)
TRACKED = "num_batches_tracked"


class _GroupedLinear(nn.Module):
    """M linear layers on (B, M*F) inputs, parameters stacked as (M, out, in) and (M, out)."""

    def __init__(self, layer: nn.Linear, members: int) -> None:
        super().__init__()
        self.members = members
        self.weight = nn.Parameter(torch.empty(members, *layer.weight.shape, device="meta"))
        self.bias = nn.Parameter(torch.empty(members, *layer.bias.shape, device="meta"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch = x.shape[0]
        h = x.reshape(batch, self.members, -1).transpose(0, 1)
        out = torch.baddbmm(
            self.bias.unsqueeze(1).to(h.dtype), h, self.weight.transpose(1, 2).to(h.dtype)
        )
        return out.transpose(0, 1).reshape(batch, -1)


class _GroupedBatchNorm(nn.BatchNorm2d):
    """Batch norm over M*C channels; with `rows` set ((B, M) weights of real rows), training
    statistics over each member's real rows only, as its own batch norm would see them."""

    rows: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.rows is None:
            return super().forward(x)
        members = self.rows.shape[1]
        mask = self.rows.to(x.dtype).repeat_interleave(x.shape[1] // members, 1)[:, :, None, None]
        count = mask.sum(0).flatten() * x.shape[2] * x.shape[3]
        mean = (x * mask).sum((0, 2, 3)) / count.clamp(min=1)
        centred = x - mean[:, None, None]
        var = (centred.square() * mask).sum((0, 2, 3)) / count.clamp(min=1)
        with torch.no_grad():
            unbiased = var * count / (count - 1).clamp(min=1)
            self.running_mean.lerp_(mean.to(self.running_mean.dtype), self.momentum)
            self.running_var.lerp_(unbiased.to(self.running_var.dtype), self.momentum)
        out = centred * torch.rsqrt(var + self.eps)[:, None, None]
        return out * self.weight[:, None, None] + self.bias[:, None, None]


def _wide_leaf(leaf: nn.Module, members: int) -> nn.Module | None:
    """The widened counterpart of one leaf, or None if it cannot be widened."""
    if isinstance(leaf, nn.Conv2d) and leaf.padding_mode == "zeros":
        return nn.Conv2d(
            leaf.in_channels * members,
            leaf.out_channels * members,
            leaf.kernel_size,
            leaf.stride,
            leaf.padding,
            leaf.dilation,
            leaf.groups * members,
            leaf.bias is not None,
            device="meta",
        )
    if isinstance(leaf, nn.BatchNorm2d) and leaf.affine and leaf.track_running_stats:
        if leaf.momentum is None:  # a cumulative average would need per-member batch counts
            return None
        return _GroupedBatchNorm(
            leaf.num_features * members, leaf.eps, leaf.momentum, device="meta"
        )
    if isinstance(leaf, nn.Linear) and leaf.bias is not None:
        return _GroupedLinear(leaf, members)
    if isinstance(leaf, CHANNELWISE) or (
        isinstance(leaf, nn.Flatten) and leaf.start_dim == 1 and leaf.end_dim == -1
    ):
        return leaf
    return None


def widen(module: nn.Module, members: int) -> nn.Module | None:
    """A copy of `module` with every leaf widened for `members` members, or None if a leaf
    cannot be (dropout, layer norm, ...). Its widened layers are empty ("meta" tensors, no random
    initialisation drawn): `WideEnsemble` passes the members' stacked tensors to every forward."""
    wide = copy.deepcopy(module)
    for name, leaf in list(wide.named_modules()):
        if list(leaf.children()):
            continue
        replacement = _wide_leaf(leaf, members)
        if replacement is None or not name:
            return None
        if replacement is not leaf:
            parent, _, child = name.rpartition(".")
            setattr(wide.get_submodule(parent), child, replacement)
    return wide


class WideEnsemble:
    """M models of one architecture as stacked tensors (M, *shape) and a widened module.

    `params` (trained) and `buffers` (batch-norm running statistics) are the members' own
    tensors stacked; a forward reshapes them into the widened module's layout (views, no copy),
    so the optimizer and early stopping see one tensor per name as in the grouped ensemble.
    Batch-norm batch counts (`num_batches_tracked`, (M,)) are the trainer's to set: the widened
    module counts its own forwards, not each member's batches."""

    def __init__(
        self, modules: Sequence[nn.Module], wide: nn.Module, device: str, channels_last: bool
    ) -> None:
        states = [m.state_dict() for m in modules]
        names = dict(modules[0].named_parameters())
        self.keys = list(states[0])
        self.linear = {
            f"{name}.{p}"
            for name, leaf in wide.named_modules()
            if isinstance(leaf, _GroupedLinear)
            for p in ("weight", "bias")
        }
        self.params = {
            k: torch.stack([s[k] for s in states]).to(device).requires_grad_() for k in names
        }
        self.buffers = {
            k: torch.stack([s[k] for s in states]).to(device) for k in self.keys if k not in names
        }
        self.wide = wide.to_empty(device=device)
        self.norms = [m for m in self.wide.modules() if isinstance(m, _GroupedBatchNorm)]
        self.size = len(modules)
        self.channels_last = channels_last

    def train(self, mode: bool) -> None:
        self.wide.train(mode)

    def forward(
        self,
        x: torch.Tensor,
        params: Mapping[str, torch.Tensor] | None = None,
        rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(M, B, *input_shape) member-major inputs -> (M, B, n_classes) logits; `rows` (M, B)
        weights of real rows when some member's batch is only partly filled."""
        params = self.params if params is None else params
        members, batch = x.shape[:2]
        h = x.transpose(0, 1).reshape(batch, members * x.shape[2], *x.shape[3:])
        if self.channels_last and h.dim() == 4:
            h = h.contiguous(memory_format=torch.channels_last)
        tensors = {
            k: self._wide(k, v)
            for k, v in {**params, **self.buffers}.items()
            if not k.endswith(TRACKED)
        }
        with self._rows(None if rows is None else rows.t()):
            out = torch.func.functional_call(self.wide, tensors, (h,))
        return out.reshape(batch, members, -1).transpose(0, 1)

    def member_weights(self, index: int) -> Weights:
        """One member's state dict as numpy arrays (the keys and dtypes of its torch module)."""
        tensors = {**self.params, **self.buffers}
        return {k: tensors[k][index].detach().cpu().contiguous().numpy() for k in self.keys}

    def _wide(self, key: str, stacked: torch.Tensor) -> torch.Tensor:
        """A stacked tensor in the widened module's layout: members folded into dimension 0."""
        return stacked if key in self.linear else stacked.flatten(0, 1)

    @contextmanager
    def _rows(self, rows: torch.Tensor | None) -> Iterator[None]:
        for norm in self.norms:
            norm.rows = rows
        try:
            yield
        finally:
            for norm in self.norms:
                norm.rows = None


def wide_ensemble(
    modules: Sequence[nn.Module], device: str, channels_last: bool
) -> WideEnsemble | None:
    """The members as a `WideEnsemble`, or None if a leaf of theirs cannot be widened."""
    wide = widen(modules[0], len(modules))
    return None if wide is None else WideEnsemble(modules, wide, device, channels_last)
