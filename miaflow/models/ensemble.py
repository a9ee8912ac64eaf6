"""Train a shard of torch models as one vectorised ensemble.

The M members of a shard run as one network: grouped layers where the architecture is a
sequence of layers `miaflow.models.grouped` knows, else one widened copy of the member's module
(`miaflow.models.wide`); each is checked against the members' own forward on a probe first.

Each member keeps the recipe of the per-model loop (`miaflow.models.training`) exactly: the
same named seed gives the same initialisation (the member's module is built under
`torch.manual_seed(seed)`) and the same shuffling generator; members train on their own subsets,
so they may have different numbers of batches per epoch, a smaller last batch, and their own
early stopping. An optimizer step is masked per member: a member without a batch at a step (or
already stopped) is left untouched, Adam state and step count included (one fused optimizer call
per run of neighbouring members with equal step counts). Only floating-point summation order
differs from the loop.

In the widened network (WideResNet, ResNet18, VGG11, MobileNetV2) batch-norm running statistics
are per member, put back for a member without a batch at a step, and counted per member; the
last batch of one sample is left out as the loop's `trainable_batches` does; crop-and-flip
augmentation draws from each member's own generator as the loop does, and crops all members at
once. Anything else (e.g. dropout) trains one by one.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from miaflow.defenses import TRAINING, defense_kind
from miaflow.models.architectures import IMAGE_MODELS, augment_draws, crop_and_flip
from miaflow.models.grouped import GroupedEnsemble, Weights, grouped_layers
from miaflow.models.optimizers import ADAM_BETAS, ADAM_EPS
from miaflow.models.recipe import SGD_MOMENTUM, Options, build_module, learning_rates, sgd_momentum
from miaflow.models.wide import TRACKED, WideEnsemble, wide_ensemble
from miaflow.progress import Progress
from miaflow.seeding import derive_seed

log = logging.getLogger(__name__)

BATCHABLE_KINDS = frozenset({"mlp", "torch_lr", "cnn", *IMAGE_MODELS})
EVAL_CHUNK = 2048  # held-out samples per member and forward pass (GPU)
CPU_EVAL_SAMPLES = (
    2048  # on the CPU, held-out samples of all members together per forward (cache-sized)
)


def wants_batched(arch: Mapping[str, Any]) -> bool:
    """`batched` (default true) on a kind the ensembles cover; defenses train per model."""
    return (
        arch["kind"] in BATCHABLE_KINDS
        and arch.get("batched", True)
        and defense_kind(arch) not in TRAINING
    )


def _runs(active: np.ndarray, steps: np.ndarray) -> list[tuple[int, int]]:
    """Maximal [start, stop) runs of consecutive active members with equal step counts."""
    runs: list[tuple[int, int]] = []
    for m in np.flatnonzero(active):
        if runs and runs[-1][1] == m and steps[runs[-1][0]] == steps[m]:
            runs[-1] = (runs[-1][0], int(m) + 1)
        else:
            runs.append((int(m), int(m) + 1))
    return runs


class _MaskedOptimizer:
    """torch's own Adam / SGD (momentum 0.9 unless the recipe says) on runs of members of the
    stacked tensors.

    Each step updates only the members in `active`, and each member has its own step count
    (Adam's bias correction), so a member that skipped steps is in the state it would have
    reached training alone. Members with equal step counts that are neighbours in the stack
    update together: one fused call per run on slices (M_run, *shape) of the stacked tensors.
    `fit_ensemble` sorts members by training-set size, so members with as many batches per
    epoch are neighbours and a step is usually one run."""

    def __init__(
        self,
        params: Mapping[str, torch.Tensor],
        kind: str,
        weight_decay: float,
        momentum: float = SGD_MOMENTUM,
    ) -> None:
        self.params = list(params.values())
        self.kind, self.weight_decay, self.momentum = kind, weight_decay, momentum
        self.first = [torch.zeros_like(p) for p in self.params]  # Adam exp_avg / SGD momentum
        self.second = [torch.zeros_like(p) for p in self.params] if kind == "adam" else []
        self.steps = np.zeros(len(self.params[0]), dtype=np.int64)  # per member, on the host

    def step(self, grads: Sequence[torch.Tensor], active: np.ndarray, lr: float) -> None:
        from torch.optim.adam import adam
        from torch.optim.sgd import sgd

        grads = [g.contiguous() for g in grads]  # the fused kernels read memory flat
        device = self.params[0].device
        fused = device.type in ("cpu", "cuda")
        counts = (
            self.steps if self.kind == "adam" else np.zeros_like(self.steps)
        )  # SGD counts no steps
        with torch.no_grad():
            for start, stop in _runs(active, counts):

                def views(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
                    return [t[start:stop] for t in tensors]

                if self.kind == "adam":  # one step tensor per parameter: the kernel increments each
                    steps = [
                        torch.tensor(float(self.steps[start]), device=device) for _ in self.params
                    ]
                    adam(
                        views(self.params),
                        views(grads),
                        views(self.first),
                        views(self.second),
                        [],
                        steps,
                        fused=fused,
                        amsgrad=False,
                        beta1=ADAM_BETAS[0],
                        beta2=ADAM_BETAS[1],
                        lr=lr,
                        weight_decay=self.weight_decay,
                        eps=ADAM_EPS,
                        maximize=False,
                    )
                else:
                    # zero momentum buffers: the first step sets them to the gradient, as torch does
                    sgd(
                        views(self.params),
                        views(grads),
                        views(self.first),
                        fused=fused,
                        weight_decay=self.weight_decay,
                        momentum=self.momentum,
                        lr=lr,
                        dampening=0.0,
                        nesterov=False,
                        maximize=False,
                    )
        self.steps[active] += 1


def _padded(indices: Sequence[np.ndarray], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, width) int64 sample indices (padding 0) and the bool mask of real entries."""
    out = np.zeros((len(indices), width), dtype=np.int64)
    valid = np.zeros((len(indices), width), dtype=bool)
    for m, idx in enumerate(indices):
        out[m, : len(idx)], valid[m, : len(idx)] = idx, True
    return torch.from_numpy(out), torch.from_numpy(valid)


def fit_ensemble(
    arch: Mapping[str, Any],
    features: np.ndarray,
    labels: np.ndarray,
    train_sets: Sequence[np.ndarray],
    heldout_sets: Sequence[np.ndarray],
    n_classes: int,
    seeds: Sequence[int],
    model_ids: Sequence[str],
    device: str = "cpu",
) -> list[Weights] | None:
    """Train one model per (train set, seed) together; None if the architecture cannot be grouped.

    `train_sets` / `heldout_sets` are sample indices into `features`. Returns each member's
    weights, loadable into `build_module(arch, ...)`. Members train sorted by training-set size
    (see `_MaskedOptimizer`); the weights come back in the given order."""
    order = np.argsort([len(t) for t in train_sets], kind="stable")
    if (order != np.arange(len(order))).any():
        fitted = fit_ensemble(
            arch,
            features,
            labels,
            [train_sets[m] for m in order],
            [heldout_sets[m] for m in order],
            n_classes,
            [seeds[m] for m in order],
            [model_ids[m] for m in order],
            device,
        )
        return None if fitted is None else [fitted[i] for i in np.argsort(order)]
    modules = []
    for seed in seeds:
        torch.manual_seed(seed)
        modules.append(build_module(arch, features.shape[1:], n_classes))
    options = Options.of(arch)
    ensemble = _ensemble(modules, features, device, options.channels_last)
    if ensemble is None:
        return None

    x_all = torch.tensor(features)  # a copy: dataset arrays may be read-only
    x_all = (x_all.pin_memory() if device == "cuda" else x_all).to(device, non_blocking=True)
    y_all = torch.tensor(labels).to(device)
    autocast = torch.autocast(
        torch.device(device).type, dtype=torch.bfloat16, enabled=options.precision == "bf16"
    )

    def member_losses(
        params: dict[str, torch.Tensor],
        x: torch.Tensor,
        y: torch.Tensor,
        weight: torch.Tensor,
        rows: torch.Tensor | None,
    ) -> torch.Tensor:
        with autocast:
            logits = ensemble.forward(x, params, rows)
        losses = F.cross_entropy(
            logits.float().reshape(-1, n_classes), y.reshape(-1), reduction="none"
        )
        return (losses.view_as(weight) * weight).sum(1) / weight.sum(1).clamp(min=1)

    loss_fn = options.compiled(member_losses)
    optimizer = _MaskedOptimizer(
        ensemble.params, arch["optimizer"], arch["weight_decay"], sgd_momentum(arch)
    )
    shuffles = [torch.Generator().manual_seed(seed) for seed in seeds]
    augmenters = (
        [torch.Generator().manual_seed(derive_seed(seed, "augment")) for seed in seeds]
        if arch.get("augment")
        else None
    )
    size, batch_size = ensemble.size, arch["batch_size"]
    norms = bool(ensemble.buffers)  # batch norm: statistics per batch, running statistics
    running = torch.ones(size, dtype=torch.bool)
    best_acc, stale = np.full(size, -1.0), np.zeros(size, dtype=int)
    state = {**ensemble.params, **ensemble.buffers}
    best = {k: v.detach().clone() for k, v in state.items()}
    epochs, patience = arch["epochs"], arch["patience"]
    report_every = max(1, epochs // 5)
    heldout_idx, heldout_valid = _padded(heldout_sets, max(map(len, heldout_sets)))

    with Progress(epochs, f"ensemble of {size} models", "epochs") as progress:
        for epoch, lr in enumerate(learning_rates(arch), start=1):
            order = [
                _epoch_order(train_sets[m], shuffles[m], batch_size, norms)
                if running[m]
                else train_sets[m][:0]
                for m in range(size)
            ]
            n_steps = max(math.ceil(len(o) / batch_size) for o in order)
            idx, valid = _padded(order, n_steps * batch_size)
            counts = valid.view(size, n_steps, batch_size).sum(2).numpy()  # on the host: no sync
            active, widths = counts > 0, counts.max(0)  # a step's rows: its largest batch
            partial = ((counts > 0) & (counts < widths)).any(0) & norms
            crops = None if augmenters is None else _crops(augmenters, counts, batch_size, device)
            idx, valid = idx.to(device), valid.to(device)
            total = torch.zeros(size, device=device)
            for step in range(n_steps):
                batch = slice(step * batch_size, step * batch_size + int(widths[step]))
                weight = valid[:, batch].float()
                rows = idx[:, batch]
                x = _gather(x_all, rows)
                if crops is not None:
                    x = _cropped(x, crops, batch)
                idle = ~active[:, step]
                saved = {k: v.clone() for k, v in ensemble.buffers.items()} if idle.any() else {}
                losses = loss_fn(
                    ensemble.params, x, y_all[rows], weight, weight if partial[step] else None
                )
                grads = torch.autograd.grad(losses.sum(), list(ensemble.params.values()))
                if saved:  # running statistics of members without a batch stay
                    _copy_members(ensemble.buffers, saved, torch.from_numpy(idle))
                optimizer.step(grads, active[:, step], lr)
                total += losses.detach() * weight.sum(1)
                progress.advance(1 / n_steps)
            _count_batches(ensemble.buffers, optimizer.steps)
            if not (patience or epoch % report_every == 0 or epoch == epochs):
                continue
            ensemble.train(False)
            acc = _heldout_accuracy(
                ensemble, autocast, x_all, y_all, heldout_idx.to(device), heldout_valid.to(device)
            )
            ensemble.train(True)
            mean_loss = total.cpu().numpy() / np.maximum([len(o) for o in order], 1)
            log.info(
                "epoch %d/%d: %d/%d members training, mean loss %.4f, held-out acc %.4f..%.4f",
                epoch,
                epochs,
                int(running.sum()),
                size,
                mean_loss[running.numpy()].mean(),
                np.nanmin(acc),
                np.nanmax(acc),
            )
            if patience:
                improved = torch.from_numpy((acc > best_acc) & running.numpy())
                best_acc = np.where(improved.numpy(), acc, best_acc)
                stale = np.where(improved.numpy(), 0, stale + running.numpy())
                _copy_members(best, state, improved)
                stopping = torch.from_numpy(stale > patience) & running
                for m in np.flatnonzero(stopping.numpy()):
                    log.info("%s early stop at epoch %d", model_ids[m], epoch)
                running &= ~stopping
                if not running.any():
                    break
    if patience:  # like the loop: keep each member's best state, if it ever had one
        _copy_members(state, best, torch.from_numpy(best_acc >= 0))
    return [ensemble.member_weights(m) for m in range(size)]


def _ensemble(
    modules: Sequence[nn.Module], features: np.ndarray, device: str, channels_last: bool
) -> GroupedEnsemble | WideEnsemble | None:
    """The grouped ensemble where the modules are a sequence of leaves it knows, else the
    widened one; None where neither gives the modules' own outputs on a probe."""
    layers = grouped_layers(modules[0])
    if layers is not None:
        grouped = GroupedEnsemble(modules, layers, device, channels_last)
        if _matches_modules(grouped, modules, features):
            return grouped
    wide = wide_ensemble(modules, device, channels_last)
    if wide is not None and _wide_matches(modules, features):
        return wide
    if layers is not None or wide is not None:
        log.warning(
            "batched forward differs from %s's own forward: training one by one",
            type(modules[0]).__name__,
        )
    return None


def _wide_matches(modules: Sequence[nn.Module], features: np.ndarray) -> bool:
    """The widened forward gives copies of the modules' own outputs, on the CPU in fp32: in
    training mode (batch statistics, which update the running statistics), then in evaluation
    mode (those running statistics)."""
    copies = [copy.deepcopy(m).train() for m in modules]
    check = wide_ensemble(copies, "cpu", False)
    probe = torch.tensor(features[:4])
    members = probe.expand(len(copies), *probe.shape)
    with torch.no_grad():
        for training in (True, False):
            check.train(training)
            expected = torch.stack([m.train(training)(probe) for m in copies])
            got = check.forward(members)
            if got.shape != expected.shape or not torch.allclose(
                got, expected, rtol=1e-4, atol=1e-5
            ):
                return False
    return True


def _epoch_order(
    train_set: np.ndarray, generator: torch.Generator, batch_size: int, norms: bool
) -> np.ndarray:
    """A member's samples in this epoch's order; with batch norm, without a last batch of one
    sample (as `trainable_batches` leaves it out of the loop)."""
    order = train_set[torch.randperm(len(train_set), generator=generator).numpy()]
    if norms and len(order) > batch_size and len(order) % batch_size == 1:
        return order[:-1]
    return order


def _crops(
    generators: Sequence[torch.Generator], counts: np.ndarray, batch_size: int, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """An epoch's crop offsets (2, M, steps * batch) and flip coins (M, steps * batch), drawn per
    member and batch from the member's generator in the loop's order (padding rows: no crop)."""
    size, n_steps = counts.shape
    offsets = torch.zeros(2, size, n_steps * batch_size, dtype=torch.int64)
    flips = torch.zeros(size, n_steps * batch_size, dtype=torch.bool)
    for m, generator in enumerate(generators):
        for step in np.flatnonzero(counts[m]):
            rows = slice(step * batch_size, step * batch_size + int(counts[m, step]))
            offsets[:, m, rows], flips[m, rows] = augment_draws(int(counts[m, step]), generator)
    return offsets.to(device), flips.to(device)


def _cropped(
    x: torch.Tensor, crops: tuple[torch.Tensor, torch.Tensor], batch: slice
) -> torch.Tensor:
    """(M, B, C, H, W) images cropped and flipped by this batch's share of `_crops`."""
    offsets, flips = crops[0][:, :, batch], crops[1][:, batch]
    return crop_and_flip(x.flatten(0, 1), offsets.flatten(1), flips.flatten()).view_as(x)


def _count_batches(buffers: Mapping[str, torch.Tensor], steps: np.ndarray) -> None:
    """Batch-norm batch counts of each member: one per optimizer step it took, as in the loop."""
    for key, value in buffers.items():
        if key.endswith(TRACKED):
            value.copy_(torch.from_numpy(steps))


def _matches_modules(
    ensemble: GroupedEnsemble, modules: Sequence[nn.Module], features: np.ndarray
) -> bool:
    """Guard against a module whose forward is not its leaves in order (e.g. a skip connection).

    Both forwards run on the CPU in fp32: on a GPU, TF32 convolutions would differ by more than
    the tolerance and silently send every CNN shard to the per-model loop."""
    probe = torch.tensor(features[:4])
    with torch.no_grad():
        expected = torch.stack([m(probe) for m in modules])
        got = ensemble.forward(
            probe.expand(len(modules), *probe.shape),
            {k: v.detach().cpu() for k, v in ensemble.params.items()},
        )
    return got.shape == expected.shape and torch.allclose(got, expected, rtol=1e-4, atol=1e-5)


def _gather(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """x[rows] for (M, B) rows: index_select is several times faster than advanced indexing."""
    return x.index_select(0, rows.reshape(-1)).view(*rows.shape, *x.shape[1:])


def _copy_members(
    target: Mapping[str, torch.Tensor], source: Mapping[str, torch.Tensor], members: torch.Tensor
) -> None:
    with torch.no_grad():
        for key, value in target.items():
            mask = members.to(value.device).view(-1, *[1] * (value.dim() - 1))
            value.copy_(torch.where(mask, source[key], value))


def _heldout_accuracy(
    ensemble: GroupedEnsemble,
    autocast: Any,
    x_all: torch.Tensor,
    y_all: torch.Tensor,
    idx: torch.Tensor,
    valid: torch.Tensor,
) -> np.ndarray:
    """Per-member accuracy on its own held-out samples (NaN for a member without any).

    On the CPU a forward takes 2048 samples of all members together: activations that stay in
    cache make it up to twice as fast as 2048 samples per member."""
    correct = torch.zeros(ensemble.size, device=x_all.device)
    width = max(1, CPU_EVAL_SAMPLES // ensemble.size) if x_all.device.type == "cpu" else EVAL_CHUNK
    with torch.no_grad(), autocast:
        for start in range(0, idx.shape[1], width):
            chunk = idx[:, start : start + width]
            hits = ensemble.forward(_gather(x_all, chunk)).argmax(-1) == y_all[chunk]
            correct += (hits & valid[:, start : start + width]).sum(1)
    counts = valid.sum(1).cpu().numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, correct.cpu().numpy() / counts, np.nan)
