"""Attack metrics from per-sample membership scores (docs/algorithms.md#metrics).

scikit-learn and scipy.stats are imported inside the functions that use them: params validation
imports this module for the metric names, and should stay fast.

Every score is "higher = member". The ROC is sklearn's with `drop_intermediate=False`, so every
distinct score is a threshold and a sample counts as a predicted member iff its score is >= the
threshold. Metrics are computed per (dataset, target model, attack, repeat); `summary` aggregates
over repeats with ddof = 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

FPR_LEVELS = (0.001, 0.01, 0.1)
# Metrics at the operating threshold tau* (see `attack_metrics`).
TAU_STAR_METRICS = (
    "precision",
    "recall",
    "f1",
    "accuracy",
    "plain_accuracy",
    "fpr",
    "fnr",
    "advantage",
)
METRIC_NAMES = (
    "auroc",
    "tpr_at_0.1pct_fpr",
    "tpr_at_1pct_fpr",
    "tpr_at_10pct_fpr",
    *TAU_STAR_METRICS,
)
RUN_KEYS = ["dataset", "target_model", "attack", "repeat"]
METRICS_COLUMNS = [*RUN_KEYS, "metric", "value", "ci_low", "ci_high"]
ROC_COLUMNS = [*RUN_KEYS, "fpr", "tpr"]
SCORES_COLUMNS = [*RUN_KEYS, "sample_id", "score", "is_member"]  # every stage's scores tables

# roc_table keeps curves with at most this many points whole; longer ones keep every point with
# FPR <= EXACT_FPR (where MIA results live) and one point per log-spaced FPR value above it.
MAX_ROC_POINTS = 2000
EXACT_FPR = 0.01
ROC_GRID_POINTS = 1000


def tpr_metric_name(level: float) -> str:
    """0.001 -> "tpr_at_0.1pct_fpr": the name says the FPR level in percent."""
    return f"tpr_at_{level * 100:g}pct_fpr"


def metric_names(fpr_levels: Sequence[float] = FPR_LEVELS) -> tuple[str, ...]:
    """The metric names `attack_metrics` reports, in order; `METRIC_NAMES` for the default
    levels."""
    return ("auroc", *map(tpr_metric_name, fpr_levels), *TAU_STAR_METRICS)


def roc(is_member: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fpr, tpr, thresholds) with every distinct score kept, so low-FPR points are never
    dropped."""
    from sklearn.metrics import roc_curve

    member = np.asarray(is_member, dtype=bool)
    if member.all() or not member.any():
        raise ValueError("a ROC needs both members and non-members")
    return roc_curve(member, np.asarray(scores, dtype=np.float64), drop_intermediate=False)


# Levels are written with six significant digits in metric names (tpr_metric_name), so a level
# of 1/n read back from a name may fall below 1/n by that much and still count as resolved.
_LEVEL_TOLERANCE = 1e-6


def resolves(level: float, n_nonmembers: int) -> bool:
    """Whether `n_nonmembers` non-members resolve an FPR `level`: one false positive is a share
    1/n, so a level below 1/n cannot be told apart from 0 (up to the naming tolerance)."""
    return n_nonmembers > 0 and level * n_nonmembers >= 1 - _LEVEL_TOLERANCE


def tpr_at_fpr(fpr: np.ndarray, tpr: np.ndarray, level: float) -> float:
    """TPR at the last ROC point with FPR strictly below `level` (the canonical rule).

    The ROC starts at (0, 0), so the value exists for every level > 0; both arrays are
    non-decreasing, so this is also max{TPR : FPR < level}.
    """
    return float(tpr[fpr < level][-1])


def resolved_tpr(fpr: np.ndarray, tpr: np.ndarray, level: float, n_nonmembers: int) -> float:
    """`tpr_at_fpr`, or NaN where the non-members do not resolve `level` (`resolves`): below
    1/n the rule can only return the TPR at FPR 0, which is not a TPR at that level."""
    return tpr_at_fpr(fpr, tpr, level) if resolves(level, n_nonmembers) else float("nan")


def attack_metrics(
    is_member: np.ndarray, scores: np.ndarray, fpr_levels: Sequence[float] = FPR_LEVELS
) -> dict[str, float]:
    """All of `metric_names(fpr_levels)` for one attack on one target model.

    The operating threshold tau* maximises balanced accuracy (TDDBench); the first maximiser in
    sklearn order is the highest threshold among ties. Counts at tau* are exact (TDDBench's
    truncation of TPR*P is not reproduced). `accuracy` is balanced accuracy, as in TDDBench;
    `plain_accuracy` is (TP + TN) / n at tau*, which differs when members and non-members are
    unbalanced.
    """
    from sklearn.metrics import auc

    member = np.asarray(is_member, dtype=bool)
    scores = np.asarray(scores, dtype=np.float64)
    fpr, tpr, thresholds = roc(member, scores)

    best = int(np.argmax(tpr + 1 - fpr))
    predicted = scores >= thresholds[best]
    positives = int(member.sum())
    negatives = member.size - positives
    tp = int(np.sum(predicted & member))
    fp = int(np.sum(predicted & ~member))
    tn = negatives - fp

    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / positives
    fpr_star = fp / negatives
    return {
        "auroc": float(auc(fpr, tpr)),
        **{
            tpr_metric_name(level): resolved_tpr(fpr, tpr, level, negatives) for level in fpr_levels
        },
        "precision": precision,
        "recall": recall,
        "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
        "accuracy": 0.5 * (recall + 1 - fpr_star),
        "fpr": fpr_star,
        "fnr": (positives - tp) / positives,
        "advantage": recall - fpr_star,
        "plain_accuracy": (tp + tn) / member.size,
    }


def clopper_pearson(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper–Pearson) interval for a binomial proportion, from Beta quantiles."""
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials and trials >= 1, got {successes}/{trials}")
    from scipy.stats import beta

    alpha = 1 - confidence
    low = beta.ppf(alpha / 2, successes, trials - successes + 1) if successes > 0 else 0.0
    high = beta.ppf(1 - alpha / 2, successes + 1, trials - successes) if successes < trials else 1.0
    return float(low), float(high)


def score_metrics(
    scores: pd.DataFrame, fpr_levels: Sequence[float] = FPR_LEVELS, confidence: float = 0.95
) -> pd.DataFrame:
    """Long table of `metric_names(fpr_levels)` per (dataset, target_model, attack, repeat).

    `scores` has columns dataset, target_model, attack, repeat, sample_id, score, is_member.
    TPR@FPR rows carry a Clopper–Pearson interval for tp = round(TPR * P) out of the P members;
    the other rows, and TPRs at levels the non-members do not resolve (NaN), have NaN bounds.
    Rows are sorted by the run keys, metrics in name order.
    """
    tpr_names = set(map(tpr_metric_name, fpr_levels))
    rows = []
    for key, run in scores.groupby(RUN_KEYS, sort=True):
        member = run["is_member"].to_numpy(dtype=bool)
        values = attack_metrics(member, run["score"].to_numpy(dtype=np.float64), fpr_levels)
        positives = int(member.sum())
        for name in metric_names(fpr_levels):
            low, high = np.nan, np.nan
            if name in tpr_names and not np.isnan(values[name]):
                low, high = clopper_pearson(round(values[name] * positives), positives, confidence)
            rows.append((*key, name, values[name], low, high))
    return pd.DataFrame(rows, columns=METRICS_COLUMNS)


def _plot_points(fpr: np.ndarray) -> np.ndarray:
    """Indices of the ROC points `roc_table` keeps: all of a short curve, else the low-FPR region
    whole plus, for each log-spaced FPR value above it, the last point at or below that value."""
    if fpr.size <= MAX_ROC_POINTS:
        return np.arange(fpr.size)
    grid = np.geomspace(EXACT_FPR, 1.0, ROC_GRID_POINTS)
    on_grid = np.searchsorted(fpr, grid, side="right") - 1
    return np.union1d(np.flatnonzero(fpr <= EXACT_FPR), on_grid)


def roc_table(scores: pd.DataFrame) -> pd.DataFrame:
    """ROC points per (dataset, target_model, attack, repeat), for plots; long curves are thinned
    above FPR = 1% only, so log-scale plots of the low-FPR region stay exact."""
    frames = []
    for key, run in scores.groupby(RUN_KEYS, sort=True):
        fpr, tpr, _ = roc(run["is_member"].to_numpy(dtype=bool), run["score"].to_numpy(np.float64))
        keep = _plot_points(fpr)
        frames.append(
            pd.DataFrame({**dict(zip(RUN_KEYS, key)), "fpr": fpr[keep], "tpr": tpr[keep]})
        )
    if not frames:
        return pd.DataFrame(columns=ROC_COLUMNS)
    return pd.concat(frames, ignore_index=True)[ROC_COLUMNS]


def summary(metrics: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation (ddof = 1) of each metric over repeats (target models)."""
    grouped = metrics.groupby(["dataset", "target_model", "attack", "metric"], sort=True)["value"]
    return grouped.agg(mean="mean", std="std", n_repeats="count").reset_index()
