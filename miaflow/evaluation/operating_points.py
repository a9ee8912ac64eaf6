"""Operating points behind every "TPR at FPR" number: the FPR actually reached, the threshold,
how many non-members stand behind it, and the ties at it (issue #43).

A TPR at 1% FPR says little without its operating point: on 50 non-members the only FPR below
1% is 0, and a score whose top value holds a quarter of the non-members cannot be cut there at
all. Each row here states the point a TPR cell comes from, with the rule of
`miaflow.evaluation.metrics.tpr_at_fpr`: the last ROC point (sklearn's, every distinct score a
threshold, member iff score >= threshold) whose FPR is strictly below the requested level, so the
TPR values are the tables' own. No interpolation: realized FPR < requested, and a requested FPR
below 1 / n_nonmembers is not resolved (NaN TPR, `resolved` False), never a TPR of 0.

Two calibrations per target model (repeat):

* "target": the threshold is chosen on this target's own membership labels (the oracle every
  table uses);
* "shadow": the attacker's threshold, chosen where the same attack on another target model of
  the rotation, whose membership the attacker knows, reaches the requested FPR, then applied to
  this target; its realized FPR may exceed the requested one.

Precision (PPV) at a membership prior pi (Jayaraman et al., "Revisiting Membership Inference
Under Realistic Assumptions", PETS 2021, who report PPV at imbalanced priors) is computed from the
realized rates: pi TPR / (pi TPR + (1 - pi) FPR), NaN where the realized FPR is 0 (no false
positive among n non-members bounds the FPR by about 1/n, not by 0, so a PPV of 1 would
overclaim).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from miaflow.evaluation.metrics import FPR_LEVELS, RUN_KEYS, roc

PRIORS = (0.01, 0.1)  # membership priors of the PPV columns: 1% and 10% of candidates are members
# Levels are written with six significant digits in metric names (tpr_metric_name), so a level
# of 1/n read back from a name may fall below 1/n by that much and still count as resolved.
_LEVEL_TOLERANCE = 1e-6
POINT_COLUMNS = [
    "requested_fpr",
    "realized_fpr",
    "tpr",
    "threshold",
    "n_nonmembers",
    "n_members",
    "false_positives",
    "true_positives",
    "ties_nonmembers",
    "ties_members",
    "resolved",
]
OPERATING_POINT_COLUMNS = [
    "dataset",
    "target_model",
    "attack",
    "repeat",
    "calibration",
    "requested_fpr",
    "realized_fpr",
    "tpr",
    "threshold",
    "n_nonmembers",
    "n_members",
    "false_positives",
    "true_positives",
    "ties_nonmembers",
    "ties_members",
    "resolved",
    "threshold_repeat",
]


def ppv_column(prior: float) -> str:
    """0.01 -> "ppv_at_1pct_prior": the column of the PPV at that membership prior."""
    return f"ppv_at_{prior * 100:g}pct_prior"


def resolves(level: float, n_nonmembers: int) -> bool:
    """Whether `n_nonmembers` non-members resolve an FPR `level`: one false positive is a share
    1/n, so a level below 1/n cannot be told apart from 0 (up to the naming tolerance)."""
    return n_nonmembers > 0 and level * n_nonmembers >= 1 - _LEVEL_TOLERANCE


def lowest_resolved_fpr(n_nonmembers: int) -> float:
    """The lowest FPR level `n_nonmembers` non-members resolve: 1 / n."""
    return 1.0 / n_nonmembers


def counts_at(scores: np.ndarray, is_member: np.ndarray, threshold: float) -> dict[str, float]:
    """What the rule "member iff score >= threshold" gives on one target: realized FPR and TPR,
    the false and true positives, and how many non-members and members score exactly the
    threshold (ties decide whether a nearby FPR is reachable at all)."""
    scores = np.asarray(scores, dtype=np.float64)
    member = np.asarray(is_member, dtype=bool)
    flagged = scores >= threshold
    at = scores == threshold
    n_members = int(member.sum())
    n_nonmembers = member.size - n_members
    fp, tp = int(np.sum(flagged & ~member)), int(np.sum(flagged & member))
    return {
        "realized_fpr": fp / n_nonmembers,
        "tpr": tp / n_members,
        "false_positives": fp,
        "true_positives": tp,
        "ties_nonmembers": int(np.sum(at & ~member)),
        "ties_members": int(np.sum(at & member)),
    }


def operating_points(
    scores: np.ndarray, is_member: np.ndarray, fpr_levels: Sequence[float] = FPR_LEVELS
) -> pd.DataFrame:
    """One row (`POINT_COLUMNS`) per requested FPR level for one attack on one target: the ROC
    point `metrics.tpr_at_fpr` reads (the last with FPR < level), its threshold and counts.
    Unresolved levels (`resolves`) get NaN rates, threshold and counts. The threshold of the
    (0, 0) point is +inf (sklearn's), which flags nobody."""
    member = np.asarray(is_member, dtype=bool)
    scores = np.asarray(scores, dtype=np.float64)
    fpr, _, thresholds = roc(member, scores)
    n_nonmembers = int((~member).sum())
    chosen = [
        float(thresholds[np.flatnonzero(fpr < level)[-1]])
        if resolves(level, n_nonmembers)
        else np.nan
        for level in fpr_levels
    ]
    return points_at(scores, member, fpr_levels, chosen)


def points_at(
    scores: np.ndarray,
    is_member: np.ndarray,
    fpr_levels: Sequence[float],
    thresholds: Sequence[float],
) -> pd.DataFrame:
    """`POINT_COLUMNS` rows for the given threshold of each requested level on this target
    (NaN threshold: the level is unresolved, and so are the row's rates and counts)."""
    member = np.asarray(is_member, dtype=bool)
    n_members = int(member.sum())
    rows = []
    for level, threshold in zip(fpr_levels, thresholds):
        row = {
            "requested_fpr": float(level),
            "n_nonmembers": member.size - n_members,
            "n_members": n_members,
        }
        if not np.isnan(threshold):
            row |= {"threshold": threshold, **counts_at(scores, member, threshold)}
        rows.append(row)
    table = pd.DataFrame(rows).reindex(columns=POINT_COLUMNS)
    table["resolved"] = table["threshold"].notna()
    return _typed(table)


def _typed(table: pd.DataFrame) -> pd.DataFrame:
    """Counts as nullable integers (NaN where unresolved), rates and thresholds as floats."""
    counts = ["false_positives", "true_positives", "ties_nonmembers", "ties_members"]
    floats = ["requested_fpr", "realized_fpr", "tpr", "threshold"]
    return table.astype({**dict.fromkeys(counts, "Int64"), **dict.fromkeys(floats, "float64")})


def ppv(tpr: np.ndarray, fpr: np.ndarray, prior: float) -> np.ndarray:
    """Precision at membership prior `prior` from realized rates: pi TPR / (pi TPR + (1 - pi)
    FPR); NaN where the FPR is 0 or NaN (see the module docstring)."""
    tpr = np.asarray(tpr, dtype=np.float64)
    fpr = np.asarray(fpr, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        value = prior * tpr / (prior * tpr + (1 - prior) * fpr)
    return np.where(fpr > 0, value, np.nan)


def shadow_of(repeats: Sequence[int]) -> dict[int, int]:
    """The rotation: in sorted order, target r takes its threshold from target r+1 mod R. Every
    target serves as the attacker's known model exactly once and never for itself, and the
    choice is fixed by the repeat ids alone. Empty for fewer than two targets."""
    ordered = sorted(repeats)
    if len(ordered) < 2:
        return {}
    return {r: ordered[(k + 1) % len(ordered)] for k, r in enumerate(ordered)}


def operating_point_table(
    scores: pd.DataFrame,
    fpr_levels: Sequence[float] = FPR_LEVELS,
    priors: Sequence[float] = PRIORS,
) -> pd.DataFrame:
    """Target- and shadow-calibrated operating points of every (dataset, target_model, attack,
    repeat) of `scores` (columns dataset, target_model, attack, repeat, score, is_member; one
    row per scored sample, as for `metrics.score_metrics`).

    Columns `OPERATING_POINT_COLUMNS` then one PPV column per prior (`ppv_column`).
    `threshold_repeat` is the repeat whose labels chose the threshold: the row's own for
    "target", its `shadow_of` for "shadow". A shadow row is unresolved when its level is not
    resolved on the shadow target. Experiments with one target model have no shadow rows (no
    other model's membership to calibrate on). FPRs are fractions.
    """
    frames = []
    for (dataset, target_model, attack), runs in scores.groupby(RUN_KEYS[:3], sort=True):
        by_repeat = {
            int(r): (run["score"].to_numpy(np.float64), run["is_member"].to_numpy(bool))
            for r, run in runs.groupby("repeat", sort=True)
        }
        own = {r: operating_points(s, m, fpr_levels) for r, (s, m) in by_repeat.items()}
        key = {"dataset": dataset, "target_model": target_model, "attack": attack}
        for repeat, points in own.items():
            frames.append(
                points.assign(**key, repeat=repeat, calibration="target", threshold_repeat=repeat)
            )
        for repeat, shadow in shadow_of(list(by_repeat)).items():
            known = own[shadow]
            applied = points_at(*by_repeat[repeat], known["requested_fpr"], known["threshold"])
            frames.append(
                applied.assign(**key, repeat=repeat, calibration="shadow", threshold_repeat=shadow)
            )
    if not frames:
        return pd.DataFrame(columns=[*OPERATING_POINT_COLUMNS, *map(ppv_column, priors)])
    table = pd.concat(frames, ignore_index=True)[OPERATING_POINT_COLUMNS]
    for prior in priors:
        table[ppv_column(prior)] = ppv(table["tpr"], table["realized_fpr"], prior)
    return table
