"""Linear heads on frozen features, thousands at a time, each with its own hyperparameters.

The hyperparameter study (docs/algorithms.md#hyperparameter-study) trains grids of linear heads
(weights and bias initialised to zero, Adam, a fixed number of epochs) whose batch size, learning
rate and, under differential privacy, clipping norm and noise differ per head. Heads are
independent, so one step of K heads is a handful of batched matrix products: softmax
cross-entropy of a linear model has the closed-form gradient Xᵀ(P − Y), and its per-sample
gradient norm is ‖g_i‖² = (‖x_i‖² + 1)·‖p_i − y_i‖², which makes per-sample clipping (DP-SGD /
DP-Adam, as Opacus does it) cost no more than the plain step.

Sampling follows Opacus and the paper's code: without DP each epoch shuffles a head's training set
and cuts it into batches of `batch_size` (the last one smaller); with DP every step is a Poisson
sample with rate q = 1 / (batches per epoch), the clipped gradients are summed, Gaussian noise of
standard deviation σ·C is added and the sum is divided by the expected batch size q·n. Every head
draws from its own seeded generators, so a head trains to the same weights whichever heads share
its batch (up to floating-point summation order).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from miaflow.models.optimizers import ADAM_BETAS, ADAM_EPS

CLIP_EPS = 1e-6  # Opacus' clip factor is C / (‖g‖ + 1e-6)


@dataclass(frozen=True)
class HeadRecipe:
    """How one head trains: batch size and Adam learning rate; clipping norm and noise multiplier
    for DP-Adam (`clip_norm` None: non-private)."""

    batch_size: int
    lr: float
    clip_norm: float | None = None
    noise_multiplier: float = 0.0

    @property
    def private(self) -> bool:
        return self.clip_norm is not None


def batches_per_epoch(n_train: int, batch_size: int) -> int:
    """Batches of one epoch; under DP also 1 / sample rate (Opacus' `1 / len(data_loader)`)."""
    return max(1, math.ceil(n_train / batch_size))


def batch_schedules(
    train_sets: Sequence[np.ndarray],
    recipes: Sequence[HeadRecipe],
    epochs: int,
    seeds: Sequence[int],
) -> list[list[np.ndarray]]:
    """Every head's batches (sample indices), in order: shuffled cuts of each epoch without DP,
    Poisson samples with rate 1 / batches_per_epoch with DP."""
    schedules = []
    for train, recipe, seed in zip(train_sets, recipes, seeds):
        rng = np.random.default_rng(seed)
        n_batches = batches_per_epoch(len(train), recipe.batch_size)
        steps: list[np.ndarray] = []
        for _ in range(epochs):
            if recipe.private:
                keep = rng.random((n_batches, len(train))) < 1.0 / n_batches
                steps.extend(train[row] for row in keep)
            else:
                order = train[rng.permutation(len(train))]
                steps.extend(
                    order[b * recipe.batch_size : (b + 1) * recipe.batch_size]
                    for b in range(n_batches)
                )
        schedules.append(steps)
    return schedules


def fit_heads(
    features: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    train_sets: Sequence[np.ndarray],
    recipes: Sequence[HeadRecipe],
    epochs: int,
    seeds: Sequence[int],
    device: str = "cpu",
) -> tuple[np.ndarray, np.ndarray]:
    """Train one zero-initialised linear head per (train set, recipe, seed) together.

    `features` (n, d) and `labels` (n,) are the whole pool; `train_sets` index into them.
    Returns weights (K, d, C) and biases (K, C) as float32 arrays.

    Heads train in groups of similar batches per epoch (within a factor of 2): a step pads every
    head's batch to the widest, and runs as long as the head with the most steps, so mixing
    batch sizes 10 and 1000 (as HPO's trials do) would pad the small batches and keep finished
    heads waiting. Heads are independent, so the grouping changes no result.
    """
    size = len(train_sets)
    if not (size == len(recipes) == len(seeds)):
        raise ValueError("need one recipe and one seed per training set")
    steps = [batches_per_epoch(len(t), r.batch_size) for t, r in zip(train_sets, recipes)]
    groups = np.floor(np.log2(steps)).astype(int)
    weight = np.zeros((size, np.shape(features)[1], n_classes), dtype=np.float32)
    bias = np.zeros((size, n_classes), dtype=np.float32)
    for group in np.unique(groups):
        heads = np.flatnonzero(groups == group)
        weight[heads], bias[heads] = _fit_group(
            features,
            labels,
            n_classes,
            [train_sets[k] for k in heads],
            [recipes[k] for k in heads],
            epochs,
            [seeds[k] for k in heads],
            device,
        )
    return weight, bias


def _fit_group(
    features: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    train_sets: Sequence[np.ndarray],
    recipes: Sequence[HeadRecipe],
    epochs: int,
    seeds: Sequence[int],
    device: str,
) -> tuple[np.ndarray, np.ndarray]:
    """`fit_heads` of one group of heads, all in every step they have."""
    size = len(train_sets)
    # a copy: stored arrays are read-only, which torch warns about
    x_all = torch.tensor(np.asarray(features, dtype=np.float32)).to(device)
    y_all = torch.tensor(np.asarray(labels, dtype=np.int64)).to(device)
    squares_all = x_all.square().sum(1)  # ‖x‖² of every sample, for the per-sample norms
    # (K, C, d), rows per class as in torch.nn.Linear: both products of a step then read the
    # gathered batch in its stored order, several times faster than (K, d, C) on CPU.
    weight = torch.zeros(size, n_classes, x_all.shape[1], device=device)
    bias = torch.zeros(size, n_classes, device=device)
    adam = StackedAdam((weight, bias), [r.lr for r in recipes], device)

    schedules = batch_schedules(train_sets, recipes, epochs, seeds)
    noise = DpNoise.of(train_sets, recipes, seeds, device)
    clip_norms = noise.clip_norms
    n_steps = max(len(s) for s in schedules)
    for step in range(n_steps):
        # Only heads with steps left compute: heads with large batches finish their epochs first.
        active = np.array([step < len(s) for s in schedules])
        heads = np.flatnonzero(active)
        batches = [schedules[k][step] for k in heads]
        width = max(1, max(len(b) for b in batches))
        rows = np.zeros((len(heads), width), dtype=np.int64)
        valid = np.zeros((len(heads), width), dtype=bool)
        for position, batch in enumerate(batches):
            rows[position, : len(batch)], valid[position, : len(batch)] = batch, True
        flat = torch.from_numpy(rows.ravel()).to(device)
        index = torch.from_numpy(heads).to(device)
        every = len(heads) == size
        grad_w, grad_b = head_gradients(
            weight if every else weight.index_select(0, index),
            bias if every else bias.index_select(0, index),
            x_all.index_select(0, flat).view(*rows.shape, -1),
            y_all.index_select(0, flat).view(rows.shape),
            torch.from_numpy(valid).to(device),
            clip_norms if every else clip_norms.index_select(0, index),
            squares_all.index_select(0, flat).view(rows.shape),
        )
        noise.add((grad_w, grad_b), heads)
        adam.step((grad_w, grad_b), None if every else index)
    return weight.transpose(1, 2).cpu().numpy(), bias.cpu().numpy()


@dataclass(frozen=True)
class DpNoise:
    """The DP side of K members' recipes, shared by the heads and the study's CNNs: each member's
    noise generator (seed ^ 0x5EED), clipping norm (NaN: non-private), noise std σ·C and
    expected batch size (Opacus divides the noisy sum by q·n = n / batches per epoch)."""

    generators: list[torch.Generator]
    private: np.ndarray
    clip_norms: torch.Tensor
    sigma: torch.Tensor
    expected: torch.Tensor

    @classmethod
    def of(
        cls,
        train_sets: Sequence[np.ndarray],
        recipes: Sequence[HeadRecipe],
        seeds: Sequence[int],
        device: str,
    ) -> DpNoise:
        return cls(
            [torch.Generator(device=device).manual_seed(seed ^ 0x5EED) for seed in seeds],
            np.array([r.private for r in recipes]),
            torch.tensor([r.clip_norm if r.private else math.nan for r in recipes], device=device),
            torch.tensor([r.noise_multiplier * (r.clip_norm or 0.0) for r in recipes]),
            torch.tensor(
                [
                    len(t) / batches_per_epoch(len(t), r.batch_size)
                    for t, r in zip(train_sets, recipes)
                ]
            ),
        )

    def add(self, grads: Sequence[torch.Tensor], members: np.ndarray) -> None:
        """Noise and the expected-batch division, in place, on the gradients (one row per
        position of `members`, this step's members) of the private members among them."""
        noisy = np.flatnonzero(self.private[members])  # positions among this step's members
        if not len(noisy):
            return
        where, of = torch.from_numpy(noisy).to(grads[0].device), members[noisy]
        values = _noisy_mean(
            [g[where] for g in grads],
            [self.generators[k] for k in of],
            self.sigma[of],
            self.expected[of],
        )
        for grad, value in zip(grads, values):
            grad[where] = value


def _noisy_mean(
    grads: Sequence[torch.Tensor],
    generators: Sequence[torch.Generator],
    sigma: torch.Tensor,
    expected_batch: torch.Tensor,
) -> list[torch.Tensor]:
    """DP-Adam's step of P private members: Gaussian noise of std σ·C on each summed clipped
    gradient (P, ...), one draw per member from its own generator over all its parameters in the
    order given, then division by the expected batch size."""
    device = grads[0].device
    sizes = [g[0].numel() for g in grads]
    draws = torch.stack([torch.randn(sum(sizes), generator=g, device=device) for g in generators])
    sigma, expected_batch = sigma.to(device), expected_batch.to(device)
    noisy = []
    for grad, noise in zip(grads, draws.split(sizes, dim=1)):
        shape = (-1,) + (1,) * (grad.dim() - 1)
        noise = sigma.view(shape) * noise.view(grad.shape)
        noisy.append((grad + noise) / expected_batch.view(shape))
    return noisy


def head_gradients(
    weight: torch.Tensor,
    bias: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    valid: torch.Tensor,
    clip_norms: torch.Tensor,
    squares: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of the softmax cross-entropy of K heads (K, C, d), (K, C) on padded batches
    x (K, B, d), y (K, B), `valid` (K, B): the batch mean for heads whose clipping norm is NaN,
    else the sum of per-sample gradients clipped to that norm (DP-SGD, before noise).
    `squares` (K, B) are the samples' ‖x‖² when the caller has them."""
    # (K, C, B) throughout: classes by samples, the layout both products want
    logits = torch.baddbmm(bias[:, :, None], weight, x.transpose(1, 2))
    residual = torch.softmax(logits, dim=1)
    residual -= torch.nn.functional.one_hot(y, weight.shape[1]).transpose(1, 2)
    real = valid.to(residual.dtype)
    residual *= real[:, None, :]  # p − y of every real sample, 0 for padding
    mean = 1.0 / real.sum(1, keepdim=True).clamp(min=1.0)
    if squares is None:
        squares = x.square().sum(-1)
    norms = torch.sqrt((squares + 1.0) * residual.square().sum(1))
    clipped = (clip_norms[:, None] / (norms + CLIP_EPS)).clamp(max=1.0)
    scale = torch.where(torch.isnan(clip_norms)[:, None], mean, clipped)
    scaled = residual * scale[:, None, :]
    return torch.bmm(scaled, x), scaled.sum(2)


def head_logits(features: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Logits (K, n, C) of K heads on features (n, d), in float64 for the signals."""
    x = np.asarray(features, dtype=np.float64)
    return np.einsum("nd,kdc->knc", x, weight.astype(np.float64)) + bias.astype(np.float64)[:, None]


class StackedAdam:
    """Adam over stacked members (heads, CNNs), each with its own learning rate and step count:
    torch.optim.Adam's update (defaults, no weight decay, the same in-place operations), applied
    only to the members active in a step."""

    def __init__(self, params: Sequence[torch.Tensor], lrs: Sequence[float], device: str) -> None:
        self.params = list(params)
        self.first = [torch.zeros_like(p) for p in self.params]
        self.second = [torch.zeros_like(p) for p in self.params]
        self.lrs = torch.tensor(lrs, dtype=torch.float32, device=device)
        self.steps = torch.zeros(len(lrs), dtype=torch.float32, device=device)

    def step(self, grads: Sequence[torch.Tensor], heads: torch.Tensor | None) -> None:
        """One update of the members at `heads` (None: all), whose gradients `grads` are."""
        beta1, beta2 = ADAM_BETAS
        if heads is None:
            self.steps += 1.0
            steps, lrs = self.steps, self.lrs
        else:
            self.steps.index_add_(0, heads, torch.ones_like(heads, dtype=self.steps.dtype))
            steps, lrs = self.steps.index_select(0, heads), self.lrs.index_select(0, heads)
        correction1, correction2 = 1 - beta1**steps, (1 - beta2**steps).sqrt()
        for param, grad, first, second in zip(self.params, grads, self.first, self.second):
            shape = (-1,) + (1,) * (param.dim() - 1)
            if heads is not None:
                param_, first_, second_ = (t.index_select(0, heads) for t in (param, first, second))
            else:
                param_, first_, second_ = param, first, second
            first_.lerp_(grad, 1 - beta1)
            second_.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = (second_.sqrt() / correction2.view(shape)).add_(ADAM_EPS)
            param_.addcdiv_(first_ * (-lrs / correction1).view(shape), denom)
            if heads is not None:
                for whole, part in ((param, param_), (first, first_), (second, second_)):
                    whole.index_copy_(0, heads, part)
