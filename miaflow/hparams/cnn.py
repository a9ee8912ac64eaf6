"""Small CNNs trained from scratch, many at a time, each with its own hyperparameters.

The twin of `miaflow.models.heads.fit_heads` for the hyperparameter study's models trained from
scratch (Pradhan et al., SaTML 2025, Figure A2: a CNN on MNIST). The same recipes, batch
schedules (`batch_schedules`), noise generators (seed ^ 0x5EED) and per-member Adam
(`StackedAdam`): a member trains to the same weights whichever members share its steps, up to
floating-point summation order.

Members are stacked and the network is written out as batched matrix products, which measured
faster on CPU than `torch.func.functional_call` + `vmap` over an `nn.Module` and than a grouped
`conv2d` (`bench/study_cnn.py --forms`, one step of 65 members at batch size 10: 55 ms against
97 and 119 ms; with per-sample clipping 70 ms against 148 ms for a vmap of per-sample `grad`):
the convolution is one `baddbmm` of each member's weights with its images' 3x3 patches,
producing activations with channels last (max pooling in that layout is about 5x faster than in
NCHW), and the dense layer's weights are kept in the matching (height, width, channel) order
while training. Per-sample gradients for DP-Adam come from one backward pass to the activations,
as Opacus' grad-sample hooks do: the convolution's per-sample weight gradient is a small
(16, c·9) product per sample, and the dense layer's per-sample norm is ‖δ_i‖²·(‖a_i‖² + 1) for
its output gradient δ_i and input a_i, so clipping costs little more than the plain step. A
step's members are chunked, sorted by batch length (Poisson batches vary under DP), each chunk
padded to its own longest batch.

On CPU a step is bound by memory traffic over the convolution's output (16·(h−2)·(w−2) floats
per image, written and read several times), not by per-call overhead, so training members
together gains little over one member alone; the gain over a plain torch loop (and over Opacus
under DP) comes from the kernels above.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from miaflow.models.heads import (
    CLIP_EPS,
    DpNoise,
    HeadRecipe,
    StackedAdam,
    batch_schedules,
)

FILTERS, KERNEL, POOL = 16, 3, 2
ACTIVATIONS = 1 << 21  # convolution outputs per chunk (8 MB): memory bounded, cache-sized
NAMES = ("0.weight", "0.bias", "4.weight", "4.bias")  # cnn_module's parameters, in order


def cnn_module(image_shape: Sequence[int], n_classes: int) -> nn.Sequential:
    """The paper's network for MNIST: one convolution of 16 filters, then a dense layer of
    `n_classes` units (the classifier). The paper names no kernel, padding or pooling; we take a
    3x3 kernel without padding, ReLU and 2x2 max pooling (each output ⌊(side − 2) / 2⌋ wide)."""
    channels, height, width = image_shape
    features = FILTERS * _pooled(height) * _pooled(width)
    return nn.Sequential(
        nn.Conv2d(channels, FILTERS, KERNEL),
        nn.ReLU(),
        nn.MaxPool2d(POOL),
        nn.Flatten(),
        nn.Linear(features, n_classes),
    )


def _pooled(side: int) -> int:
    return (side - KERNEL + 1) // POOL


@dataclass(frozen=True)
class CnnStack:
    """K trained CNNs: `params` maps cnn_module's parameter names to float32 arrays (K, ...)."""

    image_shape: tuple[int, int, int]
    params: dict[str, np.ndarray]

    def logits(self, images: np.ndarray, device: str = "cpu") -> np.ndarray:
        """Logits (K, n, C) of every member on images (n, c, h, w), in float64 for the signals;
        evaluated in chunks of images so memory stays bounded. The members see the same images,
        so their convolutions are one matrix product with all K·16 filters."""
        conv_w, conv_b, dense_w, dense_b = inner_layout(
            [torch.from_numpy(self.params[name]).to(device) for name in NAMES], self.image_shape
        )
        size, (_, height, width) = len(conv_w), self.image_shape
        filters = conv_w.transpose(0, 1).reshape(conv_w.shape[1], size * FILTERS)
        out_h, out_w = height - KERNEL + 1, width - KERNEL + 1
        x_all = torch.as_tensor(np.asarray(images, dtype=np.float32)).to(device)
        chunk = max(1, ACTIVATIONS // (size * FILTERS * out_h * out_w))
        out = []
        with torch.no_grad():
            for start in range(0, len(x_all), chunk):
                x = x_all[start : start + chunk]
                conv = torch.addmm(conv_b.reshape(-1), _patches(x).flatten(0, 1), filters)
                grid = conv.view(len(x), out_h, out_w, size * FILTERS).permute(0, 3, 1, 2)
                pooled = F.relu(F.max_pool2d(grid, POOL)).permute(0, 2, 3, 1)
                pooled = pooled.reshape(len(x), -1, size, FILTERS).permute(2, 0, 1, 3)
                features = pooled.reshape(size, len(x), -1)
                logits = torch.baddbmm(dense_b[:, None, :], features, dense_w.transpose(1, 2))
                out.append(logits.double().cpu())
        return torch.cat(out, dim=1).numpy()


def fit_cnns(
    images: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    train_sets: Sequence[np.ndarray],
    recipes: Sequence[HeadRecipe],
    epochs: int,
    seeds: Sequence[int],
    device: str = "cpu",
) -> CnnStack:
    """Train one `cnn_module` per (train set, recipe, seed) together, as `fit_heads` trains heads.

    `images` (n, c, h, w) and `labels` (n,) are the whole pool; `train_sets` index into them.
    Member k starts from torch's default initialisation under `torch.manual_seed(seeds[k])`.
    Returns the K members' parameters as float32 arrays in cnn_module's shapes.
    """
    size = len(train_sets)
    if not (size == len(recipes) == len(seeds)):
        raise ValueError("need one recipe and one seed per training set")
    # a copy: stored arrays are read-only, which torch warns about
    x_all = torch.tensor(np.asarray(images, dtype=np.float32)).to(device)
    y_all = torch.as_tensor(np.asarray(labels, dtype=np.int64)).to(device)
    image_shape = tuple(int(s) for s in x_all.shape[1:])
    initial = []
    with torch.random.fork_rng(devices=[]):  # the caller's global generator is left as it was
        for seed in seeds:
            torch.manual_seed(seed)
            initial.append([p.detach() for p in cnn_module(image_shape, n_classes).parameters()])
    params = inner_layout([torch.stack(p).to(device) for p in zip(*initial)], image_shape)
    adam = StackedAdam(params, [r.lr for r in recipes], device)

    schedules = batch_schedules(train_sets, recipes, epochs, seeds)
    noise = DpNoise.of(train_sets, recipes, seeds, device)
    for step in range(max(len(s) for s in schedules)):
        members = np.flatnonzero([step < len(s) for s in schedules])
        batches = [schedules[k][step] for k in members]
        grads = _step_gradients(params, x_all, y_all, members, batches, noise.clip_norms)
        noise.add(grads, members)
        index = None if len(members) == size else torch.from_numpy(members).to(device)
        adam.step(grads, index)
    outer = module_layout(params, image_shape)
    return CnnStack(image_shape, {n: p.cpu().numpy() for n, p in zip(NAMES, outer)})


def _step_gradients(
    params: Sequence[torch.Tensor],
    x_all: torch.Tensor,
    y_all: torch.Tensor,
    members: np.ndarray,
    batches: Sequence[np.ndarray],
    clip_norms: torch.Tensor,
) -> list[torch.Tensor]:
    """`clipped_gradients` of one step's members on their batches, in chunks of members sorted by
    batch length: each chunk pads to its own longest batch (Poisson batches under DP vary: one
    width for all would pad ~2x at batch size 10) and holds at most ACTIVATIONS outputs."""
    device, image_shape = x_all.device, x_all.shape[1:]
    per_image = FILTERS * (image_shape[1] - KERNEL + 1) * (image_shape[2] - KERNEL + 1)
    lengths = np.array([len(b) for b in batches])
    grads = [torch.empty(len(members), *p.shape[1:], device=device) for p in params]
    for positions in _chunks(lengths, per_image):
        width = max(1, int(lengths[positions].max()))
        rows = np.zeros((len(positions), width), dtype=np.int64)
        valid = np.zeros((len(positions), width), dtype=bool)
        for row, position in enumerate(positions):
            rows[row, : lengths[position]] = batches[position]
            valid[row, : lengths[position]] = True
        at = torch.from_numpy(members[positions]).to(device)
        flat = torch.from_numpy(rows.ravel()).to(device)
        part = clipped_gradients(
            [p.index_select(0, at) for p in params],
            x_all.index_select(0, flat).view(len(positions), width, *image_shape),
            y_all.index_select(0, flat).view(len(positions), width),
            torch.from_numpy(valid).to(device),
            clip_norms.index_select(0, at),
        )
        where = torch.from_numpy(positions).to(device)
        for grad, value in zip(grads, part):
            grad.index_copy_(0, where, value)
    return grads


def _chunks(lengths: np.ndarray, per_image: int) -> list[np.ndarray]:
    """Positions of members in chunks, sorted by batch length, of at most ACTIVATIONS outputs
    when padded to the chunk's longest batch (one member at least)."""
    chunks: list[list[int]] = [[]]
    for position in np.argsort(lengths, kind="stable"):
        padded = (len(chunks[-1]) + 1) * max(1, lengths[position]) * per_image
        if chunks[-1] and padded > ACTIVATIONS:
            chunks.append([])
        chunks[-1].append(int(position))
    return [np.array(chunk) for chunk in chunks]


def clipped_gradients(
    params: Sequence[torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    valid: torch.Tensor,
    clip_norms: torch.Tensor,
) -> list[torch.Tensor]:
    """Gradients of M members' cross-entropy in their inner layout (`inner_layout`) on padded
    batches x (M, B, c, h, w), y (M, B), `valid` (M, B): the batch mean for members whose
    clipping norm is NaN, else the sum of per-sample gradients each clipped to that norm over all
    parameters (Opacus' flat clipping, before noise)."""
    conv_w, conv_b, dense_w, dense_b = params
    public = torch.isnan(clip_norms)
    real = valid.to(x.dtype)
    # The loss weights each sample so that its activation gradients are its own gradient's:
    # 1 / batch size for a mean, 1 for a private member's per-sample gradient.
    weight = torch.where(public[:, None], real / real.sum(1, keepdim=True).clamp(min=1.0), real)
    leaves = [p.detach().requires_grad_() for p in params]
    logits, conv, patches, pooled = _forward(leaves, x)
    loss = (F.cross_entropy(logits.transpose(1, 2), y, reduction="none") * weight).sum()
    if bool(public.all()):
        return list(torch.autograd.grad(loss, leaves))
    grad_conv, grad_logits = torch.autograd.grad(loss, [conv, logits])
    with torch.no_grad():
        members, batch = y.shape
        # Per-sample gradients of the convolution: (M·B, 16, c·9) and (M·B, 16)
        per_conv = grad_conv.view(members * batch, -1, FILTERS)
        patches = patches.view(members * batch, per_conv.shape[1], -1)
        sample_w = torch.bmm(patches.transpose(1, 2), per_conv)
        sample_b = per_conv.sum(1)
        squares = (
            sample_w.square().sum((1, 2)).view(members, batch)
            + sample_b.square().sum(1).view(members, batch)
            + grad_logits.square().sum(2) * (pooled.square().sum(2) + 1.0)
        )
        clipped = (clip_norms[:, None] / (squares.sqrt() + CLIP_EPS)).clamp(max=1.0)
        scale = torch.where(public[:, None], real, clipped * real)
        scaled_w = (sample_w.view(members, batch, -1) * scale[:, :, None]).sum(1)
        scaled_logits = grad_logits * scale[:, :, None]
        return [
            scaled_w.view_as(conv_w),
            (sample_b.view(members, batch, -1) * scale[:, :, None]).sum(1),
            torch.bmm(scaled_logits.transpose(1, 2), pooled),
            scaled_logits.sum(1),
        ]


def _forward(
    params: Sequence[torch.Tensor], x: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Logits (M, B, C) of M members on their batches x (M, B, c, h, w), with the convolution's
    output (M, B·P, 16), its input patches (M, B·P, c·9) and the dense layer's input (M, B, F)."""
    conv_w, conv_b, dense_w, dense_b = params
    members, batch, channels, height, width = x.shape
    out_h, out_w = height - KERNEL + 1, width - KERNEL + 1
    patches = _patches(x.reshape(members * batch, channels, height, width))
    patches = patches.view(members, batch * out_h * out_w, -1)
    conv = torch.baddbmm(conv_b[:, None, :], patches, conv_w)  # channels last
    grid = conv.view(members * batch, out_h, out_w, FILTERS).permute(0, 3, 1, 2)
    # ReLU after pooling: the same values (both monotone), on a quarter of the elements
    pooled = F.relu(F.max_pool2d(grid, POOL))
    pooled = pooled.permute(0, 2, 3, 1).reshape(members, batch, -1)
    logits = torch.baddbmm(dense_b[:, None, :], pooled, dense_w.transpose(1, 2))
    return logits, conv, patches, pooled


def _patches(x: torch.Tensor) -> torch.Tensor:
    """The 3x3 patches (N, P, c·9) of images x (N, c, h, w) at every output position."""
    channels = x.shape[1]
    patches = x.unfold(2, KERNEL, 1).unfold(3, KERNEL, 1)  # (N, c, out_h, out_w, 3, 3)
    return patches.permute(0, 2, 3, 1, 4, 5).reshape(len(x), -1, channels * KERNEL * KERNEL)


def inner_layout(params: Sequence[torch.Tensor], image_shape: Sequence[int]) -> list[torch.Tensor]:
    """cnn_module's parameters stacked (K, ...) in the layout training uses: the convolution's
    weights (K, c·9, 16), the dense weights (K, C, F) with F in (height, width, channel) order."""
    conv_w, conv_b, dense_w, dense_b = params
    size, classes = dense_w.shape[:2]
    grid = (FILTERS, _pooled(image_shape[1]), _pooled(image_shape[2]))
    return [
        conv_w.reshape(size, FILTERS, -1).transpose(1, 2).contiguous(),
        conv_b.contiguous(),
        dense_w.view(size, classes, *grid).permute(0, 1, 3, 4, 2).reshape(size, classes, -1),
        dense_b.contiguous(),
    ]


def module_layout(params: Sequence[torch.Tensor], image_shape: Sequence[int]) -> list[torch.Tensor]:
    """The inverse of `inner_layout` (for parameters or their gradients): cnn_module's shapes,
    stacked (K, ...)."""
    conv_w, conv_b, dense_w, dense_b = params
    size, classes = dense_w.shape[:2]
    grid = (_pooled(image_shape[1]), _pooled(image_shape[2]), FILTERS)
    return [
        conv_w.transpose(1, 2).reshape(size, FILTERS, image_shape[0], KERNEL, KERNEL),
        conv_b,
        dense_w.view(size, classes, *grid).permute(0, 1, 4, 2, 3).reshape(size, classes, -1),
        dense_b,
    ]
