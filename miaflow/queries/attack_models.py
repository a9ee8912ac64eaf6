"""Models that query attacks train themselves (docs/algorithms.md#query-based-attacks): Query-transfer's surrogates,
Query-qrm's quantile regressors and Query-ref's canaries.

These are the only attacks that fit models or optimise inputs, so their work runs as training
jobs; each writes its per-sample outputs on the target pool T as a Parquet table
(docs/algorithms.md#who-reads-what), and the scores in `miaflow.attacks.query_models` only read those tables.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from miaflow.models.kinds import KINDS
from miaflow.models.optimizers import AdamW
from miaflow.compute import torch_device
from miaflow.models.architectures import trainable_batches
from miaflow.models.training import LEARNERS, Weights, predict
from miaflow.progress import tracked

log = logging.getLogger(__name__)

# Defaults of each attack's `attack_options` (params.yaml documents the paper values).
TRANSFER_DEFAULTS = {"val_ratio": 0.1}
QRM_DEFAULTS = {"epochs": 30, "catboost_iterations": 200}
REF_DEFAULTS = {"boundary_eva_num": 1000, "n_canaries": 10, "steps": 30}

QRM_LR, QRM_WEIGHT_DECAY, QRM_GRAD_CLIP, QRM_VAL_RATIO = 1e-3, 1e-4, 1.0, 0.1
CANARY_LR, CANARY_WEIGHT_DECAY = 0.05, 1e-3
CANARY_EPSILON = 1.0 / (255 * 0.5)  # 1/255 in pixel units, for inputs normalised to [-1, 1]
CANARY_IN_LOGIT, CANARY_OUT_LOGIT = 10.0, 0.0  # true-class logits the canary pushes towards
CROP_PADDING = 4


def options_with_defaults(options: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """`defaults` overridden by `options`; an unknown key is an error (params typos fail loudly)."""
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise ValueError(f"unknown options {unknown}; accepted: {sorted(defaults)}")
    return {**defaults, **options}


# --- Query-transfer: a surrogate trained on the target's predicted labels ---------------------

def surrogate_logits(arch: Mapping[str, Any], features: np.ndarray, predicted: np.ndarray,
                     n_classes: int, val_ratio: float, seed: int, threads: int,
                     model_id: str) -> np.ndarray:
    """Logits on `features` of a surrogate trained on them relabelled by the target (`predicted`).

    A Bernoulli(`val_ratio`) part is the validation split (the recipe's early-stopping set); the
    rest trains the surrogate with the architecture's full recipe, as references are trained.
    """
    from miaflow.seeding import rng

    validation = rng(seed, "validation").random(len(features)) < val_ratio
    learner = LEARNERS[arch["kind"]]
    weights = learner.fit(arch, features[~validation], predicted[~validation],
                          features[validation], predicted[validation], n_classes,
                          seed, threads, model_id)
    return learner.logits(arch, weights, features, n_classes)


# --- Query-qrm: (mu, log sigma) of the target's score on known non-members ---------------------

def quantile_regression(arch: Mapping[str, Any], x_train: np.ndarray, score: np.ndarray,
                        x_eval: np.ndarray, options: Mapping[str, Any], seed: int,
                        threads: int) -> tuple[np.ndarray, np.ndarray]:
    """(mu, log sigma) on `x_eval` of a Gaussian regressor of `score` fitted on `x_train`.

    The regressor follows the reference architecture's kind: a 2-output network for torch kinds,
    CatBoost with RMSEWithUncertainty, or linear regression with one global variance.
    """
    regressor = KINDS[arch["kind"]].qrm
    if regressor == "network":
        return _regress_torch(arch, x_train, score, x_eval, int(options["epochs"]), seed, threads)
    # GBDT/LR path: TDDBench regresses -phi; the predicted mean of phi is minus its prediction.
    if regressor == "catboost":
        mu, log_sigma = _regress_catboost(x_train, -score, x_eval,
                                          int(options["catboost_iterations"]), seed, threads)
        return -mu, log_sigma
    if regressor == "linear":
        from sklearn.linear_model import LinearRegression

        flat_train, flat_eval = x_train.reshape(len(x_train), -1), x_eval.reshape(len(x_eval), -1)
        model = LinearRegression().fit(flat_train, -score)
        log_sigma = 0.5 * np.log(np.var(-score))  # global variance over A, as the spec says
        return -model.predict(flat_eval), np.full(len(x_eval), log_sigma)
    raise ValueError(f"no quantile regressor for architecture kind {arch['kind']!r}")


def gaussian_nll(output: Any, target: Any) -> Any:
    """Per-sample Gaussian NLL of `target` under (mu, log sigma) = output[:, 0], output[:, 1]."""
    mu, log_sigma = output[:, 0], output[:, 1]
    return log_sigma + 0.5 * (target - mu) ** 2 * (-2 * log_sigma).exp()


def _regress_torch(arch: Mapping[str, Any], x_train: np.ndarray, score: np.ndarray,
                   x_eval: np.ndarray, epochs: int, seed: int,
                   threads: int) -> tuple[np.ndarray, np.ndarray]:
    """Network of the reference architecture with outputs (mu, log sigma): AdamW, clipped
    gradients, 90/10 split, weights of the epoch with the lowest validation loss."""
    import torch

    from miaflow.models.ensemble import build_module
    from miaflow.seeding import rng

    device = torch_device()
    torch.manual_seed(seed)
    model = build_module(arch, x_train.shape[1:], 2).to(device)
    optimizer = AdamW(model.parameters(), lr=QRM_LR, weight_decay=QRM_WEIGHT_DECAY)
    order = rng(seed, "validation").permutation(len(x_train))
    n_val = max(1, round(QRM_VAL_RATIO * len(x_train)))
    x = torch.from_numpy(x_train).to(device)
    s = torch.from_numpy(score.astype(np.float32)).to(device)
    val, train = torch.from_numpy(order[:n_val]).to(device), torch.from_numpy(order[n_val:]).to(device)
    shuffle = torch.Generator().manual_seed(seed)
    best_loss, best_state = float("inf"), None
    for epoch in tracked(range(1, epochs + 1), "quantile regressor training", "epochs"):
        model.train()
        for batch in trainable_batches(train[torch.randperm(len(train), generator=shuffle).to(device)],
                                       arch["batch_size"], model):
            loss = gaussian_nll(model(x[batch]), s[batch]).mean()
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), QRM_GRAD_CLIP)
            optimizer.step()
        model.eval()
        with torch.no_grad():
            val_loss = gaussian_nll(model(x[val]), s[val]).mean().item()
        if val_loss < best_loss:
            best_loss = val_loss
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if epoch % max(1, epochs // 5) == 0 or epoch == epochs:
            log.info("qrm epoch %d/%d validation NLL %.4f (best %.4f)", epoch, epochs, val_loss,
                     best_loss)
    if best_state is not None:  # None only if every validation loss was NaN
        model.load_state_dict(best_state)
    output = predict(model, x_eval).astype(np.float64)
    return output[:, 0], output[:, 1]


def _regress_catboost(x_train: np.ndarray, target: np.ndarray, x_eval: np.ndarray,
                      iterations: int, seed: int, threads: int) -> tuple[np.ndarray, np.ndarray]:
    from catboost import CatBoostRegressor

    model = CatBoostRegressor(iterations=iterations, learning_rate=0.05,
                              loss_function="RMSEWithUncertainty", posterior_sampling=True,
                              random_seed=seed % 2**31, thread_count=threads, verbose=False,
                              allow_writing_files=False)
    model.fit(x_train.reshape(len(x_train), -1), target)
    mean, variance = model.predict(x_eval.reshape(len(x_eval), -1)).T  # columns: mean, variance
    return mean, 0.5 * np.log(variance)


# --- Query-ref: canaries optimised against IN and OUT references -------------------------------

def evaluated_points(target_samples: np.ndarray, limit: int, seed: int) -> np.ndarray:
    """The first min(|T|, limit) sample ids of T after a seeded shuffle, ascending.

    The cap is the option's meaning, not a silent correction: `boundary_eva_num` is a budget
    ("at most"), as in TDDBench, which sets it to 1e8 for "every point", and one value serves
    image datasets of every size."""
    from miaflow.seeding import rng

    return np.sort(rng(seed, "points").permutation(target_samples)[:limit])


def crop_and_flip(images: Any, generator: np.random.Generator, padding: int = CROP_PADDING,
                  fill: float = -1.0) -> Any:
    """Train-time augmentation of (B, C, H, W) torch images: random crop of the image padded by
    `padding` (with `fill`, black in [-1, 1] units), then a horizontal flip with probability ½."""
    import torch
    import torch.nn.functional as F

    _, _, height, width = images.shape
    padded = F.pad(images, (padding,) * 4, value=fill)
    top = generator.integers(0, 2 * padding + 1, size=len(images))
    left = generator.integers(0, 2 * padding + 1, size=len(images))
    flip = generator.random(len(images)) < 0.5
    crops = torch.stack([padded[b, :, t:t + height, l:l + width]
                         for b, (t, l) in enumerate(zip(top, left))])
    return torch.where(torch.from_numpy(flip).to(images.device)[:, None, None, None],
                       crops.flip(-1), crops)


def canary_anchors(images: np.ndarray, n_canaries: int, generator: np.random.Generator) -> np.ndarray:
    """(n, K, C, H, W) independent train-time augmentations of each image: the canaries' start
    points and the centres of their epsilon balls."""
    import torch

    start = torch.from_numpy(images).repeat_interleave(n_canaries, dim=0)
    return crop_and_flip(start, generator).numpy().reshape(len(images), n_canaries, *images.shape[1:])


def optimise_canaries(references: Sequence[Any], keep: np.ndarray, anchors: np.ndarray,
                      labels: np.ndarray, steps: int, generator: np.random.Generator) -> np.ndarray:
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
    picks = {"in": _pick_models(keep, steps, generator),
             "out": _pick_models(~keep, steps, generator)}
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
            canaries.copy_(torch.maximum(torch.minimum(canaries, anchors_flat + CANARY_EPSILON),
                                         anchors_flat - CANARY_EPSILON).clamp_(-1.0, 1.0))
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


def canary_table(model_ids: Sequence[str], models: Sequence[Any], canaries: np.ndarray,
                 sample_ids: np.ndarray, labels: np.ndarray) -> pd.DataFrame:
    """phi of every canary (n, K, ...) under every model: columns model_id, sample_id, canary,
    phi (float64 from float32 logits, as every stored signal)."""
    from miaflow.signals import signals_from_logits

    n, k = canaries.shape[:2]
    flat = np.ascontiguousarray(canaries.reshape(n * k, *canaries.shape[2:]), dtype=np.float32)
    frames = []
    for model_id, model in zip(model_ids, models):
        phi = signals_from_logits(predict(model, flat), np.repeat(labels, k))["phi"]
        frames.append(pd.DataFrame({"model_id": model_id, "sample_id": np.repeat(sample_ids, k),
                                    "canary": np.tile(np.arange(k), n), "phi": phi}))
    return pd.concat(frames, ignore_index=True)


def torch_models(weights: Mapping[str, Weights], arch: Mapping[str, Any],
                 input_shape: Sequence[int], n_classes: int) -> dict[str, Any]:
    """Frozen eval-mode torch modules from stored weights, on the job's device."""
    import torch

    from miaflow.models.ensemble import build_module

    models = {}
    for model_id, model_weights in weights.items():
        model = build_module(arch, input_shape, n_classes)
        model.load_state_dict({k: torch.from_numpy(v) for k, v in model_weights.items()})
        models[model_id] = model.to(torch_device()).eval().requires_grad_(False)
    return models
