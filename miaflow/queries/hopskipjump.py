"""Untargeted L2 HopSkipJump (Chen et al.), label-only, for Query-adv on images
(docs/algorithms.md#query-based-attacks).

Follows the outline of ART's `HopSkipJump` (the implementation TDDBench calls) step by step, but
runs a whole batch of points in lockstep so that every model call is one large batch: the uniform
initialisation, the boundary binary searches, the Monte-Carlo gradient estimate and the geometric
step-size search are vectorised over points.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from miaflow.progress import Progress

log = logging.getLogger(__name__)

INIT_TOLERANCE = 0.001  # binary search towards the initial adversarial point
MAX_HALVINGS = 40  # guard of the step-size search (ART loops until success)


@dataclass(frozen=True)
class Budget:
    """Query budget of one HopSkipJump run (defaults: the paper's, i.e. ART's)."""

    max_iter: int = 50
    max_eval: int = 10000
    init_eval: int = 100
    init_size: int = 100


def hopskipjump(
    is_adversarial: Callable,
    x,
    clip: tuple[float, float],
    budget: Budget,
    generator,
    progress: Progress,
) -> tuple[np.ndarray, np.ndarray]:
    """Adversarial points near `x` (torch (B, D) float32) and whether each one is adversarial.

    `is_adversarial(points, rows)` says, for flattened points (N, D) and the batch row each
    belongs to (N,), whether the model's label differs from that row's original label.
    Points for which `init_size` uniform draws find no adversarial start are returned unchanged.
    `progress` (in batches) advances by one, in steps of 1 / max_iter: a batch can take minutes.
    """
    import torch

    batch, dim = x.shape
    low, high = clip
    theta = 0.01 / np.sqrt(dim)
    rows = torch.arange(batch)

    noise = torch.rand(batch, budget.init_size, dim, generator=generator) * (high - low) + low
    found = is_adversarial(noise.reshape(-1, dim), rows.repeat_interleave(budget.init_size))
    found = found.reshape(batch, budget.init_size)
    started = found.any(dim=1)
    current = x.clone()
    if not started.any():
        progress.advance(1)
        return current.numpy(), started.numpy()
    live = torch.nonzero(started).flatten()
    origin = x[live]
    start = noise[live, found[live].int().argmax(dim=1)]
    current_live = _boundary(is_adversarial, origin, start, live, INIT_TOLERANCE)

    for k in range(budget.max_iter):
        distance = torch.linalg.vector_norm(current_live - origin, dim=1)
        delta = (
            torch.full_like(distance, 0.1 * (high - low))
            if k == 0
            else np.sqrt(dim) * theta * distance
        )
        current_live = _boundary(is_adversarial, origin, current_live, live, theta)
        n_eval = min(int(budget.init_eval * np.sqrt(k + 1)), budget.max_eval)
        direction = _gradient_direction(
            is_adversarial, current_live, live, delta, n_eval, (low, high), generator
        )
        distance = torch.linalg.vector_norm(current_live - origin, dim=1)
        current_live = _step(
            is_adversarial,
            current_live,
            live,
            direction,
            2.0 * distance / np.sqrt(k + 1),
            (low, high),
        )
        progress.advance(1 / budget.max_iter)

    current[live] = current_live
    success = torch.zeros(batch, dtype=torch.bool)
    success[live] = is_adversarial(current_live, live)
    return current.numpy(), success.numpy()


def _boundary(is_adversarial, origin, adversarial, rows, tolerance: float):
    """Binary search on the segment origin -> adversarial; returns the adversarial-side end."""
    import torch

    lower = torch.zeros(len(origin), 1)
    upper = torch.ones(len(origin), 1)
    while float((upper - lower).max()) > tolerance:
        alpha = (upper + lower) / 2
        hit = is_adversarial((1 - alpha) * origin + alpha * adversarial, rows)[:, None]
        lower = torch.where(hit, lower, alpha)
        upper = torch.where(hit, alpha, upper)
    return (1 - upper) * origin + upper * adversarial


def _gradient_direction(is_adversarial, current, rows, delta, n_eval: int, clip, generator):
    """Monte-Carlo estimate of the boundary normal at `current` from n_eval label queries."""
    import torch

    batch, dim = current.shape
    u = torch.randn(batch, n_eval, dim, generator=generator)
    u = u / torch.linalg.vector_norm(u, dim=2, keepdim=True)
    samples = (current[:, None] + delta[:, None, None] * u).clamp(*clip)
    u = (samples - current[:, None]) / delta[:, None, None]
    hits = is_adversarial(samples.reshape(-1, dim), rows.repeat_interleave(n_eval))
    f_val = 2.0 * hits.reshape(batch, n_eval).float() - 1.0
    mean = f_val.mean(dim=1, keepdim=True)
    centred = torch.where(mean.abs() == 1.0, mean, f_val - mean)  # all equal: ±mean(u)
    grad = (centred[:, :, None] * u).mean(dim=1)
    return grad / torch.linalg.vector_norm(grad, dim=1, keepdim=True).clamp_min(1e-30)


def _step(is_adversarial, current, rows, direction, epsilon, clip):
    """Halve ε (before every trial) until the clipped current + ε·direction is adversarial."""
    import torch

    epsilon = epsilon.clone()
    result = current.clone()
    pending = torch.ones(len(current), dtype=torch.bool)
    for _ in range(MAX_HALVINGS):
        epsilon[pending] /= 2.0
        index = torch.nonzero(pending).flatten()
        trial = (current[index] + epsilon[index, None] * direction[index]).clamp(*clip)
        hit = is_adversarial(trial, rows[index])
        result[index[hit]] = trial[hit]
        pending[index[hit]] = False
        if not pending.any():
            break
    return result


def boundary_distances(
    logits_of: Callable,
    features: np.ndarray,
    labels: np.ndarray,
    budget: Budget,
    batch_size: int,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Query-adv distance d_i and HSJ success per point (docs/algorithms.md#query-based-attacks),
    float64 and bool.

    `logits_of` maps a float32 torch batch (N, *feature_shape) to logits. Misclassified points
    get d = 0; a failed attack gets d = (max(x_0) − min(x_0))·sqrt(dim) of the first point x_0.
    The clip range is the global [min, max] over the evaluated points.
    """
    import torch

    shape, dim = features.shape[1:], int(np.prod(features.shape[1:]))
    flat = torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32).reshape(-1, dim))

    def predict(points):
        with torch.no_grad():
            return torch.cat(
                [logits_of(part.reshape(-1, *shape)).argmax(dim=1) for part in points.split(8192)]
            )

    predicted = predict(flat)
    correct = (predicted == torch.from_numpy(np.asarray(labels))).numpy()
    clip = (float(flat.min()), float(flat.max()))
    failed = float(flat[0].max() - flat[0].min()) * np.sqrt(dim)
    distance = np.zeros(len(flat))
    success = np.zeros(len(flat), dtype=bool)
    generator = torch.Generator().manual_seed(seed % 2**63)
    evaluated = np.flatnonzero(correct)
    chunks = [
        c for c in np.array_split(evaluated, max(1, -(-len(evaluated) // batch_size))) if len(c)
    ]
    with Progress(len(chunks), f"HopSkipJump on {len(evaluated)} points", "batches") as progress:
        for chunk in chunks:
            original = predicted[chunk]

            def is_adversarial(points, rows, original=original):
                return predict(points) != original[rows]

            adversarial, hit = hopskipjump(
                is_adversarial, flat[chunk], clip, budget, generator, progress
            )
            gap = np.linalg.norm(adversarial.astype(np.float64) - flat[chunk].numpy(), axis=1)
            distance[chunk] = np.where(hit, gap, failed)
            success[chunk] = hit
    return distance, success


DISTANCE_COLUMNS = {"model_id": str, "sample_id": np.int64, "distance": np.float64, "success": bool}


def empty_distances() -> pd.DataFrame:
    """The distances table with no rows (other modalities than images need none)."""
    return pd.DataFrame({name: pd.Series(dtype=kind) for name, kind in DISTANCE_COLUMNS.items()})


def model_distances(
    model_id: str,
    logits_of: Callable,
    features: np.ndarray,
    labels: np.ndarray,
    sample_ids: np.ndarray,
    budget: Budget,
    batch_size: int,
    seed: int,
) -> pd.DataFrame:
    """One model's rows of the distances table: its HopSkipJump distance to the boundary from
    each sample (`boundary_distances`) and whether the attack succeeded."""
    distance, success = boundary_distances(logits_of, features, labels, budget, batch_size, seed)
    log.info(
        "%s: %d points, %d attacks succeeded, mean distance %.4f",
        model_id,
        len(sample_ids),
        success.sum(),
        distance.mean(),
    )
    return pd.DataFrame(
        {"model_id": model_id, "sample_id": sample_ids, "distance": distance, "success": success}
    )
