"""The privacy audit's experiments on the study's linear heads (DP-Adam, `miaflow.models.heads`)
on a dataset's flattened features: per head target, `runs` independent runs with one canary of
each kind of `run_kinds` (the Clopper–Pearson and GDP estimators), and one run with the
`canaries` (the one-run estimators); `miaflow.privacy.trials` trains them batched. An honest
target trains with the accountant's σ for its claimed ε (`claimed_noise`), a miscalibrated
control with `noise_scale` times that σ while claiming the same ε, a non-private one (ε = ∞)
without clipping or noise. A canary's score is its log-probability of its label (HEAD_ATTACK).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from miaflow.privacy.estimators import ONE_RUN_TRIALS, RUNS
from miaflow.privacy.experiments import canary_table, drawn_canaries, split, trial_rows
from miaflow.seeding import derive_seed

if TYPE_CHECKING:
    from miaflow.privacy.canaries import CanarySet

HEAD_ATTACK = "metric-loss"  # the heads' trials score a canary by log p(label), as metric-loss
DIRAC = "dirac"  # the white-box canary of linear heads (`miaflow.privacy.canaries`)


def _padded(inputs: np.ndarray, width: int) -> np.ndarray:
    """Rows of `inputs` (m, d) with zero columns up to `width` (the Dirac canaries' axes)."""
    return np.concatenate([inputs, np.zeros((len(inputs), width - inputs.shape[1]))], axis=1)


def head_canaries(
    features: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    base: np.ndarray,
    pool: np.ndarray,
    counts: Mapping[str, int],
    seed: int,
    first_id: int,
) -> tuple[np.ndarray, CanarySet]:
    """One run's canaries for linear heads on flat `features` (n, d): natural, mislabelled and
    ood ones from the pool, then `counts["dirac"]` Dirac canaries on axes of their own, with ids
    from `first_id` on. Returns the base set's features padded with those axes, and the
    canaries."""
    from miaflow.privacy.canaries import CanarySet, dirac_canaries

    ordinary = {kind: n for kind, n in counts.items() if kind != DIRAC and n}
    drawn = drawn_canaries(features, labels, n_classes, pool, ordinary, seed, first_id)
    padded, dirac = dirac_canaries(
        features[base],
        n_classes,
        counts.get(DIRAC, 0),
        derive_seed(seed, DIRAC),
        first_id=first_id + len(drawn.table),
    )
    width = padded.shape[1]
    return padded, CanarySet(
        pd.concat([drawn.table, dirac.table], ignore_index=True),
        np.concatenate([_padded(drawn.inputs, width), dirac.inputs]),
    )


def run_canary(
    features: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    base: np.ndarray,
    pool: np.ndarray,
    kind: str,
    seed: int,
    sample_id: int,
) -> tuple[np.ndarray, CanarySet]:
    """The one canary of kind `kind` that independent runs put in or leave out (its `included`
    is meaningless: each run draws its own bit), with the base set's features (padded by its axis
    for a Dirac canary)."""
    return head_canaries(features, labels, n_classes, base, pool, {kind: 1}, seed, sample_id)


def head_trials(
    dataset: str,
    features: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    spec: Mapping[str, Any],
    delta: float,
    seed: int,
    device: str = "cpu",
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The head audit `spec` (an entry of `privacy.heads`) on a dataset's features: canaries and
    trials of every head target, trained on `device`. One σ per claimed ε (`claimed_noise`),
    shared by the targets that claim it; the canaries are the same for every target, each
    training with its own seeds."""
    from miaflow.models.heads import HeadRecipe
    from miaflow.privacy.trials import claimed_noise, one_run_trials, repeated_trials

    flat = np.asarray(features, np.float64).reshape(len(labels), -1)
    base, pool = split(len(labels), spec["train_size"], derive_seed(seed, dataset, "heads"))
    padded, canaries = head_canaries(
        flat,
        labels,
        n_classes,
        base,
        pool,
        spec["canaries"],
        derive_seed(seed, dataset, ONE_RUN_TRIALS),
        len(labels),
    )
    after = len(labels) + len(canaries.table)  # the runs' canaries' ids follow one run's
    per_kind = {
        kind: run_canary(
            flat, labels, n_classes, base, pool, kind, derive_seed(seed, dataset, kind), after + j
        )
        for j, kind in enumerate(spec["run_kinds"])
    }
    tables = [canary_table(canaries, ONE_RUN_TRIALS)]
    tables += [canary_table(canary, RUNS) for _, canary in per_kind.values()]
    sigmas: dict[float, float] = {}
    trials = []
    for target in spec["targets"]:
        epsilon, name = float(target["epsilon"]), target["name"]
        if math.isinf(epsilon):
            recipe = HeadRecipe(spec["batch_size"], spec["lr"])
        else:
            if epsilon not in sigmas:
                sigmas[epsilon] = claimed_noise(
                    epsilon, delta, spec["train_size"], spec["batch_size"], spec["epochs"]
                )
            noise = sigmas[epsilon] * target.get("noise_scale", 1.0)
            recipe = HeadRecipe(spec["batch_size"], spec["lr"], spec["clip_norm"], noise)
        identity = {
            "dataset": dataset,
            "target_model": name,
            "attack": HEAD_ATTACK,
            "epsilon": epsilon,
            "delta": delta,
            "noise_multiplier": recipe.noise_multiplier,
        }
        one = one_run_trials(
            padded,
            labels[base],
            n_classes,
            canaries,
            recipe,
            spec["epochs"],
            derive_seed(seed, dataset, name, ONE_RUN_TRIALS),
            device,
        )
        trials.append(trial_rows(one, identity, ONE_RUN_TRIALS, one["kind"].to_numpy()))
        for kind, (kind_features, canary) in per_kind.items():
            runs = repeated_trials(
                kind_features,
                labels[base],
                n_classes,
                canary.inputs[0],
                int(canary.table["label"].iloc[0]),
                recipe,
                spec["epochs"],
                spec["runs"],
                derive_seed(seed, dataset, name, kind),
                device,
            )
            runs["sample_id"] = int(canary.table["sample_id"].iloc[0])
            trials.append(trial_rows(runs, identity, RUNS, kind))
    return pd.concat(tables, ignore_index=True), pd.concat(trials, ignore_index=True)
