"""Query-transfer's surrogates (docs/algorithms.md#query-transfer): per target model, a model
trained on the target pool T relabelled by the target's predictions.

The attack fits these models itself, so they are trained by a job of the queries stage (rule
`query_surrogates`), which writes their outputs on T (docs/algorithms.md#who-reads-what); the
score in `miaflow.attacks.query` only reads that table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from miaflow.models.training import LEARNERS


def surrogate_logits(
    arch: Mapping[str, Any],
    features: np.ndarray,
    predicted: np.ndarray,
    n_classes: int,
    val_ratio: float,
    seed: int,
    threads: int,
    model_id: str,
) -> np.ndarray:
    """Logits on `features` of a surrogate trained on them relabelled by the target (`predicted`).

    A Bernoulli(`val_ratio`) part is the validation split (the recipe's early-stopping set); the
    rest trains the surrogate with the architecture's full recipe, as references are trained.
    """
    from miaflow.seeding import rng

    validation = rng(seed, "validation").random(len(features)) < val_ratio
    learner = LEARNERS[arch["kind"]]
    weights = learner.fit(
        arch,
        features[~validation],
        predicted[~validation],
        features[validation],
        predicted[validation],
        n_classes,
        seed,
        threads,
        model_id,
    )
    return learner.logits(arch, weights, features, n_classes)


def surrogates_logits(
    arch: Mapping[str, Any],
    features: np.ndarray,
    predicted: Mapping[str, np.ndarray],
    n_classes: int,
    val_ratio: float,
    seed_of: Callable[[str], int],
    threads: int,
) -> np.ndarray:
    """(targets, n, C): each target's surrogate (`surrogate_logits` on the target's `predicted`
    labels of `features`), seeded by `seed_of(target)`."""
    from miaflow.progress import tracked

    return np.stack(
        [
            surrogate_logits(
                arch,
                features,
                labels,
                n_classes,
                val_ratio,
                seed_of(target),
                threads,
                f"surrogate-of-{target}",
            )
            for target, labels in tracked(
                predicted.items(), "surrogates", "targets", len(predicted)
            )
        ]
    )
