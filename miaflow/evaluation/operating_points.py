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

from miaflow.evaluation.metrics import FPR_LEVELS, METRICS_COLUMNS, RUN_KEYS, resolves

PRIORS = (0.01, 0.1)  # membership priors of the PPV columns: 1% and 10% of candidates are members
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


def lowest_resolved_fpr(n_nonmembers: int) -> float:
    """The lowest FPR level `n_nonmembers` non-members resolve: 1 / n."""
    return 1.0 / n_nonmembers


class _Run:
    """One attack's scores on one target, sorted once per class so that any threshold's counts
    are two binary searches (the table holds thousands of runs)."""

    def __init__(self, scores: np.ndarray, is_member: np.ndarray) -> None:
        scores = np.asarray(scores, dtype=np.float64)
        member = np.asarray(is_member, dtype=bool)
        self.members = np.sort(scores[member])
        self.nonmembers = np.sort(scores[~member])
        self.distinct = np.unique(scores)

    def threshold(self, level: float) -> float:
        """The threshold of the last ROC point with FPR < `level` (`metrics.tpr_at_fpr`'s
        point): the lowest distinct score above the (k+1)-th highest non-member score, k the
        most false positives that stay below the level (as sklearn's fps / n computes FPR);
        +inf (sklearn's first threshold, flagging nobody) when no score is above it, NaN when
        the non-members do not resolve the level."""
        n = self.nonmembers.size
        if not resolves(level, n):
            return np.nan
        allowed = int(np.count_nonzero(np.arange(n + 1) / n < level)) - 1
        if allowed >= n:
            return float(self.distinct[0])
        cut = self.nonmembers[n - 1 - allowed]
        above = np.searchsorted(self.distinct, cut, side="right")
        return float(self.distinct[above]) if above < self.distinct.size else np.inf

    def counts(self, threshold: float) -> tuple[int, int, int, int]:
        """(false positives, true positives, non-members and members scoring exactly
        `threshold`) of the rule "member iff score >= threshold"."""
        counts = []
        for values in (self.nonmembers, self.members):
            below, upto = (
                np.searchsorted(values, threshold, side="left"),
                np.searchsorted(values, threshold, side="right"),
            )
            counts.append((values.size - below, upto - below))
        (fp, ties_nonmembers), (tp, ties_members) = counts
        return int(fp), int(tp), int(ties_nonmembers), int(ties_members)

    def rows(self, fpr_levels: Sequence[float], thresholds: Sequence[float]) -> list[tuple]:
        """`POINT_COLUMNS` tuples of each level at its given threshold (NaN: unresolved)."""
        n0, n1 = self.nonmembers.size, self.members.size
        rows = []
        for level, threshold in zip(fpr_levels, thresholds):
            if np.isnan(threshold):
                rows.append((float(level), np.nan, np.nan, np.nan, n0, n1, *[pd.NA] * 4, False))
                continue
            fp, tp, ties_nonmembers, ties_members = self.counts(threshold)
            rate = (fp / n0, tp / n1, float(threshold), n0, n1, fp, tp)
            rows.append((float(level), *rate, ties_nonmembers, ties_members, True))
        return rows


def threshold_at(scores: np.ndarray, is_member: np.ndarray, level: float) -> float:
    """The threshold of `operating_points` at one level (NaN where it is not resolved)."""
    return _Run(scores, is_member).threshold(level)


def tpr_at(scores: np.ndarray, is_member: np.ndarray, level: float) -> float:
    """The TPR of `operating_points` at one level (NaN where it is not resolved)."""
    run = _Run(scores, is_member)
    threshold = run.threshold(level)
    return np.nan if np.isnan(threshold) else run.counts(threshold)[1] / run.members.size


def counts_at(scores: np.ndarray, is_member: np.ndarray, threshold: float) -> dict[str, float]:
    """What the rule "member iff score >= threshold" gives on one target: realized FPR and TPR,
    the false and true positives, and how many non-members and members score exactly the
    threshold (ties decide whether a nearby FPR is reachable at all)."""
    run = _Run(scores, is_member)
    fp, tp, ties_nonmembers, ties_members = run.counts(threshold)
    return {
        "realized_fpr": fp / run.nonmembers.size,
        "tpr": tp / run.members.size,
        "false_positives": fp,
        "true_positives": tp,
        "ties_nonmembers": ties_nonmembers,
        "ties_members": ties_members,
    }


def operating_points(
    scores: np.ndarray, is_member: np.ndarray, fpr_levels: Sequence[float] = FPR_LEVELS
) -> pd.DataFrame:
    """One row (`POINT_COLUMNS`) per requested FPR level for one attack on one target: the ROC
    point `metrics.tpr_at_fpr` reads (the last with FPR < level), its threshold and counts.
    Unresolved levels (`resolves`) get NaN rates, threshold and counts. The threshold of the
    (0, 0) point is +inf (sklearn's), which flags nobody."""
    run = _Run(scores, is_member)
    return _table(run.rows(fpr_levels, [run.threshold(level) for level in fpr_levels]))


def points_at(
    scores: np.ndarray,
    is_member: np.ndarray,
    fpr_levels: Sequence[float],
    thresholds: Sequence[float],
) -> pd.DataFrame:
    """`POINT_COLUMNS` rows for the given threshold of each requested level on this target
    (NaN threshold: the level is unresolved, and so are the row's rates and counts)."""
    return _table(_Run(scores, is_member).rows(fpr_levels, thresholds))


def _table(rows: list[tuple], columns: Sequence[str] = POINT_COLUMNS) -> pd.DataFrame:
    """Rows as a typed table: counts as nullable integers (NA where unresolved), rates and
    thresholds as floats."""
    counts = ["false_positives", "true_positives", "ties_nonmembers", "ties_members"]
    floats = ["requested_fpr", "realized_fpr", "tpr", "threshold"]
    table = pd.DataFrame(rows, columns=list(columns))
    return table.astype(
        {
            **dict.fromkeys(counts, "Int64"),
            **dict.fromkeys(floats, "float64"),
            "n_nonmembers": "int64",
            "n_members": "int64",
            "resolved": bool,
        }
    )


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
    values = scores["score"].to_numpy(np.float64)
    member = scores["is_member"].to_numpy(bool)
    positions = scores.groupby(RUN_KEYS, sort=True).indices
    by_attack: dict[tuple, dict[int, _Run]] = {}
    for (dataset, target_model, attack, repeat), at in positions.items():
        by_attack.setdefault((dataset, target_model, attack), {})[int(repeat)] = _Run(
            values[at], member[at]
        )
    rows = []
    for key, runs in by_attack.items():
        own = {r: [run.threshold(level) for level in fpr_levels] for r, run in runs.items()}
        for repeat, run in runs.items():
            points = run.rows(fpr_levels, own[repeat])
            rows += [(*key, repeat, "target", *p, repeat) for p in points]
        for repeat, shadow in shadow_of(list(runs)).items():
            points = runs[repeat].rows(fpr_levels, own[shadow])
            rows += [(*key, repeat, "shadow", *p, shadow) for p in points]
    columns = ["dataset", "target_model", "attack", "repeat", "calibration", *POINT_COLUMNS]
    table = _table(rows, [*columns, "threshold_repeat"])[OPERATING_POINT_COLUMNS]
    table = table.astype({"repeat": "int64", "threshold_repeat": "int64"})
    for prior in priors:
        table[ppv_column(prior)] = ppv(table["tpr"], table["realized_fpr"], prior)
    return table


def ppv_metric_name(level: float, prior: float) -> str:
    """(0.01, 0.1) -> "ppv_at_1pct_fpr_10pct_prior": the metric of the PPV at that requested
    FPR and membership prior."""
    return f"ppv_at_{level * 100:g}pct_fpr_{prior * 100:g}pct_prior"


def ppv_metrics(points: pd.DataFrame, priors: Sequence[float] = PRIORS) -> pd.DataFrame:
    """The target-calibrated PPVs of `operating_point_table` as rows of the long metrics table
    (`metrics.METRICS_COLUMNS`, no interval): one metric per requested FPR and prior."""
    own = points[points["calibration"] == "target"]
    frames = [
        own[RUN_KEYS].assign(
            metric=[ppv_metric_name(level, prior) for level in own["requested_fpr"]],
            value=own[ppv_column(prior)].to_numpy(),
            ci_low=np.nan,
            ci_high=np.nan,
        )
        for prior in priors
    ]
    return pd.concat(frames, ignore_index=True).reindex(columns=METRICS_COLUMNS)
