"""Differential privacy of the study's DP-Adam heads: noise from ε, and the bound on any attack.

Opacus' PRV accountant turns (σ, sample rate, steps) into ε(δ), and a search over σ finds the
noise multiplier for a target (ε, δ). With sample rate 1 / (batches per epoch) and a fixed number
of epochs, σ depends only on ε, δ and the batches per epoch, so one table of σ per batch count
serves every head of a study (a search takes about a second; a study trains thousands of heads).

The search accepts what Opacus' `get_noise_multiplier` (behind `make_private_with_epsilon`)
accepts, a σ whose ε lies within EPSILON_TOLERANCE below the target, but finds it by regula falsi
on log σ, started from the σ of the previous batch count, instead of bisecting [0, 20]: about 4
evaluations of the accountant instead of 10 to 15 (each a fraction of a second).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from miaflow.accounting import shared_rdp
from miaflow.progress import tracked

MAX_SIGMA = 1e6  # as Opacus' search: beyond it, the budget is too low for any noise

NOISE_COLUMNS = [
    "epsilon",
    "delta",
    "epochs",
    "batches_per_epoch",
    "sample_rate",
    "steps",
    "noise_multiplier",
]


EPSILON_TOLERANCE = 0.01  # Opacus' default for its σ search
FIRST_GUESS = 2.0  # where a search without a neighbouring σ starts


def noise_multiplier(
    epsilon: float,
    delta: float,
    batches_per_epoch: int,
    epochs: int,
    guess: float = FIRST_GUESS,
) -> float:
    """σ for (ε, δ)-DP after `epochs` epochs of Poisson sampling at rate 1 / batches_per_epoch:
    ε(σ) in (epsilon - EPSILON_TOLERANCE, epsilon], searched from `guess`.

    On log scales ε(σ) is close to a line of slope -1, so the search works on the gap
    log ε(σ) - log(the accepted interval's middle) against log σ: a first step along that slope,
    secant steps (50% longer) until the gap changes sign, then regula falsi (Illinois)."""
    from opacus.accountants import PRVAccountant

    accountant = PRVAccountant()
    middle = epsilon - EPSILON_TOLERANCE / 2
    rate, steps = 1.0 / batches_per_epoch, epochs * batches_per_epoch

    def gap(log_sigma: float) -> tuple[float, bool]:
        """The gap at σ (> 0: too little noise) and whether ε(σ) is accepted."""
        if abs(log_sigma) > math.log(MAX_SIGMA):
            raise ValueError(f"no noise multiplier up to {MAX_SIGMA:g} reaches epsilon {epsilon}")
        accountant.history = [(math.exp(log_sigma), rate, steps)]
        spent = accountant.get_epsilon(delta)
        if not math.isfinite(spent):
            return 10.0, False
        return math.log(spent / middle), epsilon - EPSILON_TOLERANCE < spent <= epsilon

    with warnings.catch_warnings(), np.errstate(all="ignore"), shared_rdp():
        warnings.simplefilter("ignore")
        x0 = math.log(guess)
        g0, done = gap(x0)
        if done:
            return guess
        x1 = x0 + g0
        while True:
            g1, done = gap(x1)
            if done:
                return math.exp(x1)
            if (g1 > 0) != (g0 > 0):
                break
            slope = (g1 - g0) / (x1 - x0)
            step = -g1 / slope if slope < 0 else g1
            x0, g0, x1 = x1, g1, x1 + 1.5 * max(-2.0, min(2.0, step))
        (low, g_low), (high, g_high) = sorted([(x0, g0), (x1, g1)])
        kept = 0  # Illinois: halve the gap of the end kept twice in a row, so both ends move
        while high - low > 1e-12:
            x = high - g_high * (high - low) / (g_high - g_low)
            g, done = gap(x)
            if done:
                return math.exp(x)
            if g > 0:
                low, g_low = x, g
                g_high, kept = (g_high / 2 if kept == 1 else g_high), 1
            else:
                high, g_high = x, g
                g_low, kept = (g_low / 2 if kept == -1 else g_low), -1
        return math.exp(high)


def noise_table(epsilon: float, delta: float, epochs: int, max_batches: int) -> pd.DataFrame:
    """σ for every batch count 1..max_batches (NOISE_COLUMNS), each search started from the σ
    of the batch count before (close: σ changes slowly with the batch count)."""
    rows, sigma = [], FIRST_GUESS
    for nb in tracked(
        range(1, max_batches + 1), f"noise multipliers at epsilon {epsilon:g}", "batch counts"
    ):
        sigma = noise_multiplier(epsilon, delta, nb, epochs, guess=sigma)
        rows.append((epsilon, delta, epochs, nb, 1.0 / nb, epochs * nb, sigma))
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


def targets_tpr_bound(
    configs: Iterable[tuple[float, int]], epochs: int, deltas: Sequence[float], fpr: np.ndarray
) -> np.ndarray:
    """The TPR no attack can exceed at each `fpr` against any of the targets trained with these
    (σ, batches per epoch) configurations: each configuration's tightest bound over the
    accountant's (ε(δ), δ) pairs, maximised over the configurations."""
    curve = np.zeros_like(fpr)
    for noise, batches in tracked(sorted(configs), "DP bound", "target configurations"):
        guarantees = zip(epsilons(noise, 1.0 / batches, epochs * batches, deltas), deltas)
        curve = np.maximum(curve, tpr_bound(fpr, guarantees))
    return curve
