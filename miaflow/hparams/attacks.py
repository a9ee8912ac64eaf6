"""LiRA, ACC-LiRA and KL-LiRA on MIA-Grid with leave-one-out target rotation
(docs/algorithms.md#mia-grid).

`stats[i, j]` is the statistic φ of grid model (i, j) = train(D_i, η_j) on every universe sample.
Each diagonal model (i, i) (TD-HPO) or external-tuned model train(D_i, η_i^e) (ED-HPO) is the
target once, with members D_i; its shadows are always the rows k ≠ i of one column: the target's
(LiRA), each row's own tuned column (ACC-LiRA, the diagonal), or the column Algorithm 2 picks
(KL-LiRA). Scores are online LiRA with per-example variance and median location: the paper's
Algorithm 1 says means, the authors' code takes medians, and miaflow follows the code. The scores
and labels of all M+1 targets of a run form one pooled ROC. The statistics φ arrive stored as
float32 (the authors' code keeps float64): measured harmless, with the same KL-LiRA picks and
TPRs, scores within 6e-4 relative.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from miaflow.attacks.reference import in_out_stats, log_likelihood_ratio
from miaflow.evaluation.metrics import roc
from miaflow.evaluation.operating_points import operating_points
from miaflow.hparams.selection import grid_moments, select
from miaflow.seeding import rng

ATTACKS = ("lira", "acc-lira", "kl-lira")


@dataclass(frozen=True)
class Budget:
    """KL-LiRA's selection budget: C candidate columns, each judged by N shadow rows (None: the
    full grid, C = N = M), drawn for each target (`_budget_choice`)."""

    candidates: int | None = None
    models_per_candidate: int | None = None

    def name(self) -> str:
        if self.candidates is None:
            return "kl-lira"
        return f"kl-lira-c{self.candidates}-n{self.models_per_candidate}"

    def sizes(self, n_shadow: int) -> tuple[int, int]:
        return (self.candidates or n_shadow, self.models_per_candidate or n_shadow)


def cost(attack: str, n_shadow: int, trials: int, budget: Budget = Budget()) -> int:
    """Models the attacker trains (docs/algorithms.md#kl-lira-selection): LiRA M, ACC-LiRA M·T,
    KL-LiRA C·T + C·(N − 1) + M − N."""
    if attack == "lira":
        return n_shadow
    if attack == "acc-lira":
        return n_shadow * trials
    c, n = budget.sizes(n_shadow)
    return c * trials + c * (n - 1) + n_shadow - n


def lira_scores(target: np.ndarray, shadows: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Online LiRA (per-example variance, median location, Q = 1): higher = member."""
    inside, outside = in_out_stats(shadows, keep)
    return log_likelihood_ratio(target, inside.median, inside.std, outside.median, outside.std)


def others(i: int, size: int) -> np.ndarray:
    """The rows k ≠ i: the shadows of target i."""
    return np.delete(np.arange(size), i)


def _budget_choice(
    i: int, size: int, budget: Budget, seed: int, tag: Sequence[object]
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Candidate columns and their judging rows for target i (all others for the full grid).

    A deviation from the paper (docs/algorithms.md#kl-lira-selection): its Section 3.3 fixes C+1
    seed hyperparameters once for all targets; here each target draws its own C columns, and each
    column its own N rows, seeded by the target."""
    pool = others(i, size)
    if budget.candidates is None:
        return pool, [pool] * len(pool)
    generator = rng(seed, *tag, "budget", budget.name(), i)
    # Validation keeps budgets within the M shadows of `pool`; the min guards direct callers.
    columns = np.sort(generator.choice(pool, size=min(budget.candidates, len(pool)), replace=False))
    return columns, [
        np.sort(
            generator.choice(pool, size=min(budget.models_per_candidate, len(pool)), replace=False)
        )
        for _ in columns
    ]


def rotate(
    stats: np.ndarray,
    targets: np.ndarray,
    members: np.ndarray,
    attack: str,
    budget: Budget = Budget(),
    divergence: str = "kl",
    seed: int = 0,
    tag: Sequence[object] = (),
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pooled (scores, is_member) of every target of a run, and the column each used.

    `stats` (M+1, M+1, n) grid statistics, `targets` (M+1, n) the targets' statistics,
    `members` (M+1, n) membership of D_i.
    """
    size = len(targets)
    moments = grid_moments(stats, members) if attack == "kl-lira" else None
    scores, labels, used = [], [], []
    for i in range(size):
        rows = others(i, size)
        if attack == "lira":
            column = i
        elif attack == "acc-lira":
            column = -1
        else:
            candidates, judges = _budget_choice(i, size, budget, seed, tag)
            column, _ = select(targets[i], moments, members, candidates, judges, divergence)
        shadows = stats[rows, rows] if column == -1 else stats[rows, column]
        scores.append(lira_scores(targets[i], shadows, members[rows]))
        labels.append(members[i])
        used.append(column)
    return np.concatenate(scores), np.concatenate(labels), np.array(used)


def roc_metrics(
    scores: np.ndarray, is_member: np.ndarray, fpr_levels: Sequence[float]
) -> list[dict]:
    """TPR at each FPR level (the canonical rule, NaN where the pooled non-members do not
    resolve the level, and the paper's interpolation), tp, positives and AUROC of one pooled
    ROC, with the operating point behind the TPR: the FPR it reaches, its threshold, the
    non-members and how many of them score exactly the threshold (a top value shared by more
    than the level's share of non-members is why a TPR is 0)."""
    from sklearn.metrics import auc

    fpr, tpr, _ = roc(is_member, scores)
    positives = int(np.sum(is_member))
    area = float(auc(fpr, tpr))
    points = operating_points(scores, is_member, fpr_levels)
    rows = []
    for level, point in zip(fpr_levels, points.itertuples()):
        rows.append(
            {
                "fpr": level,
                "tpr": point.tpr,
                "tpr_interp": float(np.interp(level, fpr, tpr)),
                "tp": point.true_positives if point.resolved else np.nan,
                "positives": positives,
                "auroc": area,
                "realized_fpr": point.realized_fpr,
                "threshold": point.threshold,
                "n_nonmembers": point.n_nonmembers,
                "ties_nonmembers": point.ties_nonmembers if point.resolved else np.nan,
            }
        )
    return rows


def roc_on_grid(scores: np.ndarray, is_member: np.ndarray, grid: np.ndarray) -> pd.DataFrame:
    """The pooled ROC interpolated on a common FPR grid (for averaging runs in figures)."""
    fpr, tpr, _ = roc(is_member, scores)
    return pd.DataFrame({"fpr": grid, "tpr": np.interp(grid, fpr, tpr)})
