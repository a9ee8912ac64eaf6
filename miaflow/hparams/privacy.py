"""Differential privacy of the study's DP-Adam heads: noise from ε, and the bound on any attack.

Opacus' PRV accountant turns (ε, δ, sample rate, steps) into the noise multiplier σ
(`make_private_with_epsilon` does the same search), and (σ, sample rate, steps) back into ε(δ).
With sample rate 1 / (batches per epoch) and a fixed number of epochs, σ depends only on ε, δ and
the batches per epoch, so one table of σ per batch count serves every head of a study (a search
takes seconds; a study trains thousands of heads).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from miaflow.accounting import shared_rdp
from miaflow.progress import tracked

NOISE_COLUMNS = [
    "epsilon",
    "delta",
    "epochs",
    "batches_per_epoch",
    "sample_rate",
    "steps",
    "noise_multiplier",
]


def noise_multiplier(epsilon: float, delta: float, batches_per_epoch: int, epochs: int) -> float:
    """σ for (ε, δ)-DP after `epochs` epochs of Poisson sampling at rate 1 / batches_per_epoch."""
    from opacus.accountants.utils import get_noise_multiplier

    with warnings.catch_warnings(), np.errstate(all="ignore"), shared_rdp():
        warnings.simplefilter("ignore")
        return float(
            get_noise_multiplier(
                target_epsilon=epsilon,
                target_delta=delta,
                sample_rate=1.0 / batches_per_epoch,
                steps=epochs * batches_per_epoch,
                accountant="prv",
            )
        )


def noise_table(epsilon: float, delta: float, epochs: int, max_batches: int) -> pd.DataFrame:
    """σ for every batch count 1..max_batches (NOISE_COLUMNS)."""
    rows = [
        (
            epsilon,
            delta,
            epochs,
            nb,
            1.0 / nb,
            epochs * nb,
            noise_multiplier(epsilon, delta, nb, epochs),
        )
        for nb in tracked(
            range(1, max_batches + 1), f"noise multipliers at epsilon {epsilon:g}", "batch counts"
        )
    ]
    return pd.DataFrame(rows, columns=NOISE_COLUMNS)


def epsilons(noise: float, sample_rate: float, steps: int, deltas: Sequence[float]) -> list[float]:
    """ε(δ) of the PRV accountant for each δ, after `steps` steps at (σ, sample rate)."""
    from opacus.accountants import PRVAccountant

    accountant = PRVAccountant()
    accountant.history = [(noise, sample_rate, steps)]
    with warnings.catch_warnings(), np.errstate(all="ignore"), shared_rdp():
        warnings.simplefilter("ignore")
        return [float(accountant.get_epsilon(delta)) for delta in deltas]


def tpr_bound(fpr: np.ndarray, guarantees: Iterable[tuple[float, float]]) -> np.ndarray:
    """The highest TPR any membership test can reach at `fpr` against a mechanism that is
    (ε, δ)-DP for every given pair (Kairouz et al. 2015): the minimum over pairs of
    min(e^ε·fpr + δ, 1 − e^−ε·(1 − δ − fpr)), clipped to [0, 1]."""
    fpr = np.asarray(fpr, dtype=np.float64)
    bound = np.ones_like(fpr)
    for epsilon, delta in guarantees:
        first = math.exp(epsilon) * fpr + delta
        second = 1.0 - math.exp(-epsilon) * (1.0 - delta - fpr)
        bound = np.minimum(bound, np.minimum(first, second))
    return np.clip(bound, 0.0, 1.0)
