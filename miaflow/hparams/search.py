"""Hyperparameter optimisation of linear heads with Optuna (docs/algorithms.md#hpo).

η_j = HPO(D_j): shuffle D_j, train on the first 70 %, keep the trial with the best accuracy on
the last 30 %. Batch size (integer in [10, min(|train|, upper)]) and learning rate (uniform, not
log, as in the paper's code) are searched; under DP also the clipping norm, while the noise
multiplier follows from ε and the trial's batches per epoch. Many splits are tuned at once: every
split has its own seeded study, and trial t of all studies trains as one batch of heads
(ask, train together, tell), so the cost is that of `trials` batched trainings.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from miaflow.hparams.models import fit_models
from miaflow.models.heads import HeadRecipe, batches_per_epoch
from miaflow.progress import tracked
from miaflow.seeding import derive_seed

log = logging.getLogger(__name__)

SAMPLERS = ("tpe", "gp", "random", "botorch")
TRIAL_COLUMNS = [
    "split",
    "trial",
    "batch_size",
    "lr",
    "clip_norm",
    "noise_multiplier",
    "accuracy",
    "best",
]


def make_sampler(name: str, seed: int) -> Any:
    """A seeded Optuna sampler: TPE (default), Optuna's Gaussian process, random, or BoTorch
    (needs optuna-integration, botorch and gpytorch installed)."""
    import optuna

    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "botorch":
        try:
            from optuna_integration import BoTorchSampler
        except ImportError as error:
            raise RuntimeError(
                "sampler botorch needs `pip install optuna-integration botorch gpytorch`"
            ) from error
        return BoTorchSampler(seed=seed)
    raise ValueError(f"unknown sampler {name!r} (known: {', '.join(SAMPLERS)})")


def holdout(train_set: np.ndarray, val_ratio: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(first 1 − val_ratio, last val_ratio) of the shuffled split."""
    order = train_set[np.random.default_rng(seed).permutation(len(train_set))]
    cut = len(order) - round(val_ratio * len(order))
    return order[:cut], order[cut:]


def tune(
    features: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    train_sets: Sequence[np.ndarray],
    space: Mapping[str, Any],
    seeds: Sequence[int],
    noise_for: Callable[[int], float] | None = None,
    device: str = "cpu",
    model: str = "head",
) -> pd.DataFrame:
    """Tune one model (`miaflow.hparams.models`: a head by default) per training set; every
    trial of every split (TRIAL_COLUMNS), `best` marking each split's chosen trial (the first
    with the highest validation accuracy).

    `space` holds trials, epochs, sampler, val_ratio, batch_size [low, high], lr [low, high] and
    clip_norm [low, high]; `noise_for(batches_per_epoch)` gives σ under DP (None: non-private).
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    holdouts = [
        holdout(s, space["val_ratio"], derive_seed(seed, "holdout"))
        for s, seed in zip(train_sets, seeds)
    ]
    studies = [
        optuna.create_study(
            direction="maximize",
            sampler=make_sampler(space["sampler"], derive_seed(seed, "sampler") % 2**32),
        )
        for seed in seeds
    ]
    rows = []
    for number in tracked(range(space["trials"]), f"HPO of {len(train_sets)} splits", "trials"):
        trials = [study.ask() for study in studies]
        recipes = [
            _suggest(trial, len(fit), space, noise_for) for trial, (fit, _) in zip(trials, holdouts)
        ]
        trained = fit_models(
            model,
            features,
            labels,
            n_classes,
            [fit for fit, _ in holdouts],
            recipes,
            space["epochs"],
            [derive_seed(s, "trial", number) for s in seeds],
            device,
        )
        for split, (study, trial, recipe, (_, val)) in enumerate(
            zip(studies, trials, recipes, holdouts)
        ):
            logits = trained.logits(features[val], [split])[0]
            accuracy = float(np.mean(logits.argmax(-1) == labels[val])) if len(val) else 0.0
            study.tell(trial, accuracy)
            rows.append(
                (
                    split,
                    number,
                    recipe.batch_size,
                    recipe.lr,
                    np.nan if recipe.clip_norm is None else recipe.clip_norm,
                    recipe.noise_multiplier,
                    accuracy,
                )
            )
    table = pd.DataFrame(rows, columns=TRIAL_COLUMNS[:-1])
    best = table.loc[table.groupby("split", sort=True)["accuracy"].idxmax()]  # first maximum
    table["best"] = table.index.isin(best.index)
    log.info(
        "tuned %d splits x %d trials: best validation accuracy %.3f..%.3f",
        len(train_sets),
        space["trials"],
        best["accuracy"].min(),
        best["accuracy"].max(),
    )
    return table.sort_values(["split", "trial"], ignore_index=True)


def _suggest(
    trial: Any, n_fit: int, space: Mapping[str, Any], noise_for: Callable[[int], float] | None
) -> HeadRecipe:
    low, high = space["batch_size"]
    high = max(min(high, n_fit), 1)
    batch_size = trial.suggest_int("batch_size", min(low, high), high)
    lr = trial.suggest_float("lr", *space["lr"])
    if noise_for is None:
        return HeadRecipe(batch_size, lr)
    clip_norm = trial.suggest_float("clip_norm", *space["clip_norm"])
    return HeadRecipe(batch_size, lr, clip_norm, noise_for(batches_per_epoch(n_fit, batch_size)))


def chosen(trials: pd.DataFrame) -> pd.DataFrame:
    """Each split's chosen hyperparameters (the `best` trials), indexed by split."""
    return trials[trials["best"]].set_index("split").sort_index()
