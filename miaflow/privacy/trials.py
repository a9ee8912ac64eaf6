"""The cheap target of a DP audit: the hyperparameter study's linear heads (DP-Adam, per-sample
clipping, Poisson sampling; `miaflow.models.heads`) on fixed features, hundreds of training runs
in one batched `fit_heads` call.

- `repeated_trials`: independent runs of one recipe, each with one canary in or out by its own
  fair coin; one (score, included) per run, the input `estimators.clopper_pearson` and
  `estimators.gdp` need (200+ runs cost seconds because the heads train as one batch).
- `one_run_trials`: one run with a canary set; one (score, included) per canary, the input of
  `estimators.one_run` and `estimators.one_run_fdp`.

The score is the canary's log-probability of its label under the trained head (the negative
cross-entropy loss): higher = member. The noise the heads train with is the recipe's
`noise_multiplier`, chosen by the caller apart from the ε claimed: `claimed_noise` gives the
accountant's σ for a claimed (ε, δ) (the study's own σ search), so an honest target trains with
it and a miscalibrated control with a fraction of it, or none, while the audit still compares
with the claimed ε.

The heads' DP-Adam samples at rate 1 / ⌈n / batch size⌉, so canaries must not change the batch
count: a run with a canary would otherwise sample, and take steps, differently from a run
without, and neither would be the mechanism the accountant analysed. Both functions check it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from miaflow.models.heads import HeadRecipe
    from miaflow.privacy.canaries import CanarySet


def claimed_noise(
    epsilon: float, delta: float, n_train: int, batch_size: int, epochs: int
) -> float:
    """The noise multiplier Opacus' PRV accountant needs for (ε, δ) after `epochs` epochs of the
    heads' sampling on `n_train` samples (`miaflow.hparams.privacy.noise_multiplier`)."""
    from miaflow.hparams.privacy import noise_multiplier
    from miaflow.models.heads import batches_per_epoch

    return noise_multiplier(epsilon, delta, batches_per_epoch(n_train, batch_size), epochs)


def _check_batch_count(smallest: int, largest: int, recipe: HeadRecipe) -> None:
    """Raise unless every training-set size in smallest..largest has the same DP batch count."""
    from miaflow.models.heads import batches_per_epoch

    if not recipe.private:
        return
    low, high = (batches_per_epoch(n, recipe.batch_size) for n in (smallest, largest))
    if low != high:
        raise ValueError(
            f"with batch size {recipe.batch_size}, {smallest} to {largest} training samples give "
            f"{low} to {high} batches per epoch: the canaries would change the sample rate; "
            "choose a batch size (or a base set) whose batch count they leave alone"
        )


def _label_log_probabilities(
    inputs: np.ndarray, labels: np.ndarray, weight: np.ndarray, bias: np.ndarray
) -> np.ndarray:
    """log p(label | input) of every head (K, m) for inputs (m, d) and their labels (m,)."""
    from scipy.special import log_softmax

    from miaflow.models.heads import head_logits

    logits = log_softmax(head_logits(inputs, weight, bias), axis=-1)  # (K, m, C)
    return np.take_along_axis(logits, np.asarray(labels)[None, :, None], axis=-1)[..., 0]


def repeated_trials(
    features: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    canary_input: np.ndarray,
    canary_label: int,
    recipe: HeadRecipe,
    epochs: int,
    runs: int,
    seed: int,
    device: str = "cpu",
) -> pd.DataFrame:
    """`runs` independent trainings of `recipe` on `features`/`labels` (the fixed training set),
    each with the canary added by a fair coin, trained in one batched call. Each run has its own
    seeds (batches, noise). Returns one row per run: run, included, score."""
    from miaflow.models.heads import fit_heads

    n = len(features)
    _check_batch_count(n, n + 1, recipe)
    pool = np.concatenate([np.asarray(features), np.asarray(canary_input)[None]])
    pool_labels = np.append(np.asarray(labels), canary_label)
    rng = np.random.default_rng(seed)
    included = rng.random(runs) < 0.5
    seeds = rng.integers(0, 2**62, size=runs)
    base = np.arange(n)
    train_sets = [np.append(base, n) if bit else base for bit in included]
    weight, bias = fit_heads(
        pool, pool_labels, n_classes, train_sets, [recipe] * runs, epochs, seeds.tolist(), device
    )
    scores = _label_log_probabilities(pool[n:], pool_labels[n:], weight, bias)[:, 0]
    return pd.DataFrame({"run": np.arange(runs), "included": included, "score": scores})


def one_run_trials(
    features: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    canaries: CanarySet,
    recipe: HeadRecipe,
    epochs: int,
    seed: int,
    device: str = "cpu",
) -> pd.DataFrame:
    """One training of `recipe` on `features`/`labels` plus the included canaries (their
    `included` column). Returns the canaries' table columns sample_id, kind, included and each
    canary's score."""
    from miaflow.models.heads import fit_heads

    n, table = len(features), canaries.table
    _check_batch_count(n, n + len(table), recipe)
    pool = np.concatenate([np.asarray(features), canaries.inputs.astype(np.float64)])
    pool_labels = np.concatenate([np.asarray(labels), table["label"].to_numpy()])
    train = np.concatenate([np.arange(n), n + np.flatnonzero(table["included"].to_numpy())])
    weight, bias = fit_heads(
        pool, pool_labels, n_classes, [train], [recipe], epochs, [seed], device
    )
    scores = _label_log_probabilities(canaries.inputs, table["label"].to_numpy(), weight, bias)[0]
    result = table[["sample_id", "kind", "included"]].reset_index(drop=True)
    return result.assign(score=scores)
