"""Attacks that calibrate the target by reference models: TDDBench's model-based family
(docs/algorithms.md#model-based-attacks) and the LiRA variants of the literature
(docs/algorithms.md#lira-variants), all with Q = 1.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from miaflow.attacks.inputs import AttackInputs

STD_EPS = 1e-30  # added to every Gaussian standard deviation, as the reference code does


# --- IN/OUT statistics over the reference-model axis ----------------------------------------------
# (docs/algorithms.md#notation, #lira-variants)


@dataclass(frozen=True)
class SideStats:
    """Statistics of one side (IN or OUT) of reference values, per sample and pooled."""

    median: np.ndarray  # (n,)
    mean: np.ndarray  # (n,)
    std: np.ndarray  # (n,), ddof 0
    pooled_std: float  # std of all values of this side over samples and models (uncentred)
    residual_std: float  # std of (value - its sample's median), pooled over samples and models


def in_out_stats(values: np.ndarray, keep: np.ndarray) -> tuple[SideStats, SideStats]:
    """IN and OUT statistics of (M, n) reference values, using all models of each side.

    A sample with no model on one side gets that side's mean over samples (the nanmedian /
    nanstd rule of TF-Privacy and KL-LiRA), so Bernoulli designs need no special case.
    """
    return _side(np.where(keep, values, np.nan)), _side(np.where(keep, np.nan, values))


def _side(values: np.ndarray) -> SideStats:
    def fill(stat: np.ndarray) -> np.ndarray:
        return np.where(np.isnan(stat), np.nanmean(stat), stat)

    with warnings.catch_warnings():  # all-NaN columns are expected: `fill` replaces them
        warnings.simplefilter("ignore", RuntimeWarning)
        median = fill(np.nanmedian(values, axis=0))
        return SideStats(
            median=median,
            mean=fill(np.nanmean(values, axis=0)),
            std=fill(np.nanstd(values, axis=0)),
            pooled_std=float(np.nanstd(values)),
            residual_std=float(np.nanstd(values - median)),
        )


def _norm():
    """scipy.stats.norm, imported on first use (importing this module stays cheap)."""
    from scipy.stats import norm

    return norm


def log_likelihood_ratio(
    x: np.ndarray,
    mu_in: np.ndarray,
    sd_in: np.ndarray | float,
    mu_out: np.ndarray,
    sd_out: np.ndarray | float,
) -> np.ndarray:
    """log N(x; IN) − log N(x; OUT): LiRA's online score, positive for members."""
    return _norm().logpdf(x, mu_in, np.add(sd_in, STD_EPS)) - _norm().logpdf(
        x, mu_out, np.add(sd_out, STD_EPS)
    )


# --- Model family: target calibrated by reference models ------------------------------------------
# (docs/algorithms.md#model-based-attacks)


def model_loss(inputs: AttackInputs) -> np.ndarray:
    """Sablayrolles: midpoint of IN and OUT median reference losses minus the target loss."""
    loss_in, loss_out = in_out_stats(inputs.reference["loss"], inputs.reference_keep)
    return 0.5 * (loss_in.median + loss_out.median) - inputs.target["loss"]


def model_calibration(inputs: AttackInputs) -> np.ndarray:
    """Watson: median OUT reference loss minus the target loss."""
    _, loss_out = in_out_stats(inputs.reference["loss"], inputs.reference_keep)
    return loss_out.median - inputs.target["loss"]


def model_lira(inputs: AttackInputs) -> np.ndarray:
    """TDDBench LiRA on phi: median locations, global IN and OUT spreads ("tdd" fixed variance)."""
    phi_in, phi_out = in_out_stats(inputs.reference["phi"], inputs.reference_keep)
    return log_likelihood_ratio(
        inputs.target["phi"], phi_in.median, phi_in.pooled_std, phi_out.median, phi_out.pooled_std
    )


def model_robust(inputs: AttackInputs) -> np.ndarray:
    """RMIA (online): share of population points z with r(x)/r(z) > gamma, r = p_y / mean ref p_y.

    Reference means are ½(mean IN + mean OUT), on the target pool for x and on A for z.
    """
    gamma = inputs.options.gamma  # ModelRobustOptions

    def ratio(target: np.ndarray, values: np.ndarray, keep: np.ndarray) -> np.ndarray:
        conf_in, conf_out = in_out_stats(values, keep)
        return target / (0.5 * (conf_in.mean + conf_out.mean))

    r_x = ratio(inputs.target["confidence"], inputs.reference["confidence"], inputs.reference_keep)
    r_z = ratio(
        inputs.target_on_population["confidence"],
        inputs.population["confidence"],
        inputs.population_keep,
    )
    # r(z) > 0, so #{z : r(x)/r(z) > gamma} = #{z : r(z) < r(x)/gamma}.
    return np.searchsorted(np.sort(r_z), r_x / gamma, side="left") / r_z.size


# --- LiRA family on phi, Q = 1 (docs/algorithms.md#lira-variants) ---------------------------------


def lira_online(inputs: AttackInputs) -> np.ndarray:
    """Online LiRA: Gaussian likelihood ratio of IN vs OUT phi, per-example variance."""
    phi_in, phi_out = in_out_stats(inputs.reference["phi"], inputs.reference_keep)
    return log_likelihood_ratio(
        inputs.target["phi"], phi_in.median, phi_in.std, phi_out.median, phi_out.std
    )


def lira_online_fixvar(inputs: AttackInputs) -> np.ndarray:
    """Online LiRA with Carlini's fixed variance: both spreads are the std of all IN phi values."""
    phi_in, phi_out = in_out_stats(inputs.reference["phi"], inputs.reference_keep)
    return log_likelihood_ratio(
        inputs.target["phi"], phi_in.median, phi_in.pooled_std, phi_out.median, phi_in.pooled_std
    )


def lira_online_residual(inputs: AttackInputs) -> np.ndarray:
    """Online LiRA with TF-Privacy's fixed variance: spreads of phi around each sample's median."""
    phi_in, phi_out = in_out_stats(inputs.reference["phi"], inputs.reference_keep)
    return log_likelihood_ratio(
        inputs.target["phi"],
        phi_in.median,
        phi_in.residual_std,
        phi_out.median,
        phi_out.residual_std,
    )


def lira_offline(inputs: AttackInputs) -> np.ndarray:
    """Offline LiRA (two-sided pdf form): −log N(phi; OUT median, per-example OUT std)."""
    _, phi_out = in_out_stats(inputs.reference["phi"], inputs.reference_keep)
    return -_norm().logpdf(inputs.target["phi"], phi_out.median, phi_out.std + STD_EPS)


def lira_offline_fixvar(inputs: AttackInputs) -> np.ndarray:
    """Offline LiRA (two-sided pdf form) with one global OUT std."""
    _, phi_out = in_out_stats(inputs.reference["phi"], inputs.reference_keep)
    return -_norm().logpdf(inputs.target["phi"], phi_out.median, phi_out.pooled_std + STD_EPS)


def lira_offline_onesided(inputs: AttackInputs) -> np.ndarray:
    """Offline LiRA, one-sided test of the paper: Phi((phi − OUT median) / per-example OUT std)."""
    _, phi_out = in_out_stats(inputs.reference["phi"], inputs.reference_keep)
    return _norm().cdf(inputs.target["phi"], phi_out.median, phi_out.std + STD_EPS)


# --- Model-fpr and offline RMIA (docs/algorithms.md#model-based-attacks) --------------------------


def model_fpr(inputs: AttackInputs) -> np.ndarray:
    """Ye et al. Attack R, parametric: Phi((phi − OUT median) / OUT std), the target's percentile.

    Thresholding at 1 − α puts a per-sample threshold at the OUT models' (1 − α)-quantile of phi.
    """
    _, phi_out = in_out_stats(inputs.reference["phi"], inputs.reference_keep)
    return _norm().cdf((inputs.target["phi"] - phi_out.median) / (phi_out.std + STD_EPS))


def offline_reference_mean(values: np.ndarray, keep: np.ndarray, a: float) -> np.ndarray:
    """RMIA's offline estimate of the IN+OUT mean from OUT models: ½((1 + a)·mean_OUT + (1 − a))."""
    _, out = in_out_stats(values, keep)
    return 0.5 * ((1.0 + a) * out.mean + (1.0 - a))


def rmia_offline(inputs: AttackInputs) -> np.ndarray:
    """RMIA offline (corrected): as model-robust, with p̄ from OUT models only, for x and for z.

    Options (`RmiaOfflineOptions`): `a` (TDDBench's per-dataset values in its docs), `gamma`.
    Unlike TDDBench, the linear correction is applied to positive probabilities on both sides.
    """
    a, gamma = inputs.options.a, inputs.options.gamma
    r_x = inputs.target["confidence"] / offline_reference_mean(
        inputs.reference["confidence"], inputs.reference_keep, a
    )
    r_z = inputs.target_on_population["confidence"] / offline_reference_mean(
        inputs.population["confidence"], inputs.population_keep, a
    )
    return np.searchsorted(np.sort(r_z), r_x / gamma, side="left") / r_z.size
