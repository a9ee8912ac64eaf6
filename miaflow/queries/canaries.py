"""Query-ref's canaries (docs/algorithms.md#query-ref): per evaluated point of the target pool T,
inputs optimised so that IN and OUT reference models answer them differently.

The attack optimises these inputs itself, so they are made by a job of the queries stage (rule
`query_canaries`), which writes phi of every canary under every model
(docs/algorithms.md#who-reads-what); the score in `miaflow.attacks.query` only reads that table.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from miaflow.models.optimizers import AdamW
from miaflow.models.training import predict
from miaflow.progress import tracked

log = logging.getLogger(__name__)

CANARY_LR, CANARY_WEIGHT_DECAY = 0.05, 1e-3
CANARY_EPSILON = 1.0 / (255 * 0.5)  # 1/255 in pixel units, for inputs normalised to [-1, 1]
CANARY_IN_LOGIT, CANARY_OUT_LOGIT = 10.0, 0.0  # true-class logits the canary pushes towards
CROP_PADDING = 4


def evaluated_points(target_samples: np.ndarray, limit: int, seed: int) -> np.ndarray:
    """The first min(|T|, limit) sample ids of T after a seeded shuffle, ascending.

    The cap is the option's meaning, not a silent correction: `boundary_eva_num` is a budget
    ("at most"), as in TDDBench, which sets it to 1e8 for "every point", and one value serves
    image datasets of every size."""
    from miaflow.seeding import rng

    return np.sort(rng(seed, "points").permutation(target_samples)[:limit])


def crop_and_flip(
    images: Any, generator: np.random.Generator, padding: int = CROP_PADDING, fill: float = -1.0
) -> Any:
    """Train-time augmentation of (B, C, H, W) torch images: random crop of the image padded by
    `padding` (with `fill`, black in [-1, 1] units), then a horizontal flip with probability ½."""
    import torch
    import torch.nn.functional as F

    _, _, height, width = images.shape
    padded = F.pad(images, (padding,) * 4, value=fill)
    top = generator.integers(0, 2 * padding + 1, size=len(images))
    left = generator.integers(0, 2 * padding + 1, size=len(images))
    flip = generator.random(len(images)) < 0.5
    crops = torch.stack(
        [
            padded[b, :, row : row + height, col : col + width]
            for b, (row, col) in enumerate(zip(top, left))
        ]
    )
    return torch.where(
        torch.from_numpy(flip).to(images.device)[:, None, None, None], crops.flip(-1), crops
    )


def canary_anchors(
    images: np.ndarray, n_canaries: int, generator: np.random.Generator
) -> np.ndarray:
    """(n, K, C, H, W) independent train-time augmentations of each image: the canaries' start
    points and the centres of their epsilon balls."""
    import torch

    start = torch.from_numpy(images).repeat_interleave(n_canaries, dim=0)
    return (
        crop_and_flip(start, generator).numpy().reshape(len(images), n_canaries, *images.shape[1:])
    )


def optimise_canaries(
    references: Sequence[Any],
    keep: np.ndarray,
    anchors: np.ndarray,
    labels: np.ndarray,
    steps: int,
    generator: np.random.Generator,
) -> np.ndarray:
    """Canaries (Wen et al.) from `anchors` (n, K, C, H, W): AdamW pushes each image's K canaries
    towards true-class logit 10 on one random IN and 0 on one random OUT reference per step,
    keeping them within the L-inf ball CANARY_EPSILON around their anchor and within [-1, 1].

    `keep` (M, n) says which references trained on each image. The loss sums independent
    per-image losses and AdamW updates every coordinate on its own, so optimising all images
    together gives each the updates it would get alone.
    """
    import torch

    device = next(references[0].parameters()).device
    n, n_canaries = anchors.shape[:2]
    picks = {
        "in": _pick_models(keep, steps, generator),
        "out": _pick_models(~keep, steps, generator),
    }
    anchors_flat = torch.from_numpy(anchors.reshape(n * n_canaries, *anchors.shape[2:])).to(device)
    canaries = anchors_flat.clone().requires_grad_(True)
    y = torch.from_numpy(labels).to(device).repeat_interleave(n_canaries)
    optimizer = AdamW([canaries], lr=CANARY_LR, weight_decay=CANARY_WEIGHT_DECAY)
    goal = {"in": CANARY_IN_LOGIT, "out": CANARY_OUT_LOGIT}
    for step in tracked(range(steps), f"{n * n_canaries} canaries", "steps"):
        loss = torch.zeros((), device=device)
        for side in ("in", "out"):
            chosen = np.repeat(picks[side][step], n_canaries)
            for m in np.unique(chosen):
                rows = torch.from_numpy(np.flatnonzero(chosen == m)).to(device)
                logit = references[m](canaries[rows]).gather(1, y[rows, None])[:, 0]
                loss = loss + ((logit - goal[side]) ** 2).sum() / n_canaries  # MSE per image
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            canaries.copy_(
                torch.maximum(
                    torch.minimum(canaries, anchors_flat + CANARY_EPSILON),
                    anchors_flat - CANARY_EPSILON,
                ).clamp_(-1.0, 1.0)
            )
        if step == 0 or step == steps - 1:
            log.info("canary step %d/%d loss per image %.4f", step + 1, steps, loss.item() / n)
    return canaries.detach().cpu().numpy().reshape(anchors.shape)


def _pick_models(eligible: np.ndarray, steps: int, generator: np.random.Generator) -> np.ndarray:
    """(steps, n) index of one uniformly drawn eligible model (rows of `eligible` (M, n)) per
    sample and step."""
    counts = eligible.sum(axis=0)
    if np.any(counts == 0):
        raise ValueError("Query-ref needs an IN and an OUT reference model for every point")
    rank = np.floor(generator.random((steps, eligible.shape[1])) * counts).astype(np.int64)
    ordered = np.argsort(~eligible, axis=0, kind="stable")  # eligible model indices first
    return np.take_along_axis(ordered, rank, axis=0)


def canary_table(
    model_ids: Sequence[str],
    models: Sequence[Any],
    canaries: np.ndarray,
    sample_ids: np.ndarray,
    labels: np.ndarray,
) -> pd.DataFrame:
    """phi of every canary (n, K, ...) under every model: columns model_id, sample_id, canary,
    phi (float64 from float32 logits, as every stored signal)."""
    from miaflow.signals import signals_from_logits

    n, k = canaries.shape[:2]
    flat = np.ascontiguousarray(canaries.reshape(n * k, *canaries.shape[2:]), dtype=np.float32)
    frames = []
    for model_id, model in zip(model_ids, models):
        phi = signals_from_logits(predict(model, flat), np.repeat(labels, k))["phi"]
        frames.append(
            pd.DataFrame(
                {
                    "model_id": model_id,
                    "sample_id": np.repeat(sample_ids, k),
                    "canary": np.tile(np.arange(k), n),
                    "phi": phi,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def reference_canaries(
    modules: Mapping[str, Any],
    references: Sequence[str],
    targets: Sequence[str],
    reference_keep: np.ndarray,
    features: np.ndarray,
    labels: np.ndarray,
    sample_ids: np.ndarray,
    n_canaries: int,
    steps: int,
    seed: int,
) -> pd.DataFrame:
    """Query-ref's table: `n_canaries` canaries per evaluated point (`features`, `labels`,
    `sample_ids`), optimised on the `references` (their membership `reference_keep`, one row a
    reference), with phi of each under every reference and target module."""
    from miaflow.seeding import rng

    anchors = canary_anchors(features, n_canaries, rng(seed, "augmentations"))
    optimised = optimise_canaries(
        [modules[m] for m in references],
        reference_keep,
        anchors,
        labels,
        steps,
        rng(seed, "reference-draws"),
    )
    ids = [*references, *targets]
    log.info("query-ref: %d points x %d canaries", len(sample_ids), n_canaries)
    return canary_table(ids, [modules[m] for m in ids], optimised, sample_ids, labels)
