"""The privacy audit's experiments on models of an architecture recipe
(`miaflow.models.training.LEARNERS`): one model trained on `train_size` samples and the included
canaries, its claim the recipe's `dp_sgd` defense (DP-SGD through Opacus; ε = ∞ without one),
its canaries scored by attacks on the target alone (`miaflow.privacy.scoring`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from miaflow.privacy.estimators import ONE_RUN_TRIALS
from miaflow.privacy.experiments import canary_table, drawn_canaries, split
from miaflow.privacy.scoring import canary_scores, scored_trials
from miaflow.seeding import derive_seed


def claim(arch: Mapping[str, Any], delta: float) -> tuple[float, float]:
    """The (ε, δ) a recipe claims: its `dp_sgd` defense's, (∞, `delta`) without one."""
    defense = arch.get("defense") or {}
    if defense.get("kind") == "dp_sgd":
        return float(defense["epsilon"]), float(defense["delta"])
    return math.inf, delta


def model_trials(
    dataset: str,
    features: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    spec: Mapping[str, Any],
    arch: Mapping[str, Any],
    attacks: Sequence[str],
    options: Mapping[str, Mapping[str, Any]],
    delta: float,
    seed: int,
    threads: int,
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, float]]:
    """The model audit `spec` (an entry of `privacy.models`): one model of recipe `arch` trained
    on the base set and the included canaries (its `dp_sgd` defense, if any, through Opacus),
    its canaries scored by `attacks`. Returns the canaries, the trials and the model's accuracy
    on its training set and on the pool's held-out samples (the pool minus the canaries)."""
    from miaflow.models.training import LEARNERS

    label = spec["arch"]
    base, pool = split(len(labels), spec["train_size"], derive_seed(seed, dataset, label))
    canaries = drawn_canaries(
        features,
        labels,
        n_classes,
        pool,
        spec["canaries"],
        derive_seed(seed, dataset, label, ONE_RUN_TRIALS),
        len(labels),
    )
    heldout = np.setdiff1d(pool, canaries.table["source"].to_numpy())
    x, y = canaries.training_set(features[base], labels[base])
    learner = LEARNERS[arch["kind"]]
    weights = learner.fit(
        arch,
        x,
        y,
        features[heldout],
        labels[heldout],
        n_classes,
        derive_seed(seed, dataset, label, "train"),
        threads,
        f"{label} (privacy audit)",
    )
    inputs = canaries.inputs.astype(features.dtype)
    logits = learner.logits(arch, weights, inputs, n_classes)
    accuracy = {
        "train_acc": float(np.mean(learner.logits(arch, weights, x, n_classes).argmax(1) == y)),
        "test_acc": float(
            np.mean(
                learner.logits(arch, weights, features[heldout], n_classes).argmax(1)
                == labels[heldout]
            )
        ),
    }
    epsilon, claimed_delta = claim(arch, delta)
    table = canaries.table
    scores = canary_scores(
        logits, table["label"].to_numpy(), attacks, options, derive_seed(seed, dataset, label)
    )
    identity = {
        "dataset": dataset,
        "target_model": label,
        "epsilon": epsilon,
        "delta": claimed_delta,
        "noise_multiplier": math.nan,
    }
    return canary_table(canaries, ONE_RUN_TRIALS), scored_trials(identity, table, scores), accuracy
