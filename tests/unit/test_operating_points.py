from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from miaflow.evaluation.metrics import roc, tpr_at_fpr
from miaflow.evaluation.operating_points import (
    OPERATING_POINT_COLUMNS,
    counts_at,
    lowest_resolved_fpr,
    operating_point_table,
    operating_points,
    ppv,
    ppv_column,
    resolves,
    shadow_of,
)

# The hand example of tests/unit/test_metrics.py, in decreasing score order (m member, n
# non-member):
#   0.9 m, 0.8 m, 0.7 n, 0.6 m, 0.5 n, 0.3 m, 0.2 n, 0.1 n, 0.05 n      (4 members, 5 non-members)
# ROC points (FPR, TPR): (0,0) (0,.25) (0,.5) (.2,.5) (.2,.75) (.4,.75) (.4,1) (.6,1) (.8,1) (1,1)
HAND_MEMBER = np.array([1, 1, 0, 1, 0, 1, 0, 0, 0], dtype=bool)
HAND_SCORES = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.3, 0.2, 0.1, 0.05])


def _row(points: pd.DataFrame, level: float) -> pd.Series:
    return points.set_index("requested_fpr").loc[level]


def test_hand_example_points():
    points = operating_points(HAND_SCORES, HAND_MEMBER, [0.1, 0.2, 0.3, 0.5])
    # 0.1 < 1/5: one false positive is already 20% of the non-members -> not resolved, not 0.
    unresolved = _row(points, 0.1)
    assert not unresolved["resolved"] and np.isnan(unresolved["tpr"])
    assert np.isnan(unresolved["threshold"]) and pd.isna(unresolved["false_positives"])
    # FPR < 0.2 admits no false positive: the last FPR-0 point is threshold 0.8 (0.9, 0.8 flagged).
    at_20 = _row(points, 0.2)
    assert (at_20["realized_fpr"], at_20["tpr"], at_20["threshold"]) == (0.0, 2 / 4, 0.8)
    assert (at_20["ties_members"], at_20["ties_nonmembers"]) == (1, 0)  # 0.8 is a member's score
    # FPR < 0.3 admits 1 of 5: the last point with FPR .2 is threshold 0.6 -> 3 of 4 members.
    at_30 = _row(points, 0.3)
    assert (at_30["realized_fpr"], at_30["tpr"], at_30["threshold"]) == (1 / 5, 3 / 4, 0.6)
    assert (at_30["false_positives"], at_30["true_positives"]) == (1, 3)
    # FPR < 0.5 admits 2 of 5: threshold 0.3 flags all 4 members and 0.7, 0.5.
    at_50 = _row(points, 0.5)
    assert (at_50["realized_fpr"], at_50["tpr"], at_50["threshold"]) == (2 / 5, 1.0, 0.3)
    assert (points["n_nonmembers"] == 5).all() and (points["n_members"] == 4).all()


def test_ties_at_the_threshold_are_counted():
    # Non-members: 5, 2 and eight 1s (10); members: 6, 5, 5, 2 (4).
    member = np.r_[np.zeros(10, bool), np.ones(4, bool)]
    scores = np.r_[5, 2, [1] * 8, 6, 5, 5, 2].astype(float)
    points = operating_points(scores, member, [0.05, 0.1, 0.15])
    assert not _row(points, 0.05)["resolved"]  # 0.05 * 10 < 1
    # FPR < 0.1 admits no false positive: threshold 6 flags one member.
    at_10 = _row(points, 0.1)
    assert (at_10["threshold"], at_10["tpr"], at_10["realized_fpr"]) == (6.0, 1 / 4, 0.0)
    # FPR < 0.15 admits 1 of 10: threshold 5 flags 6, 5, 5 (members) and one non-member's 5.
    at_15 = _row(points, 0.15)
    assert (at_15["threshold"], at_15["tpr"], at_15["realized_fpr"]) == (5.0, 3 / 4, 1 / 10)
    assert (at_15["ties_nonmembers"], at_15["ties_members"]) == (1, 2)


def test_tpr_equals_the_canonical_rule_and_realized_stays_below():
    rng = np.random.default_rng(7)
    member = rng.random(400) < 0.4
    scores = np.round(rng.normal(member * 0.8, 1.0), 1)  # rounded: many ties
    n_nonmembers = int((~member).sum())
    levels = [lowest_resolved_fpr(n_nonmembers), 0.01, 0.05, 0.1, 0.3, 0.9]
    points = operating_points(scores, member, levels)
    fpr, tpr, _ = roc(member, scores)
    assert points["resolved"].all()
    assert points["tpr"].tolist() == [tpr_at_fpr(fpr, tpr, level) for level in levels]
    assert (points["realized_fpr"] < points["requested_fpr"]).all()
    # The counts re-derive the rates from the threshold alone.
    for row in points.itertuples():
        flagged = scores >= row.threshold
        assert row.false_positives == np.sum(flagged & ~member)
        assert row.tpr == np.sum(flagged & member) / member.sum()


def test_lowest_resolved_fpr_is_resolved_and_just_below_is_not():
    assert resolves(lowest_resolved_fpr(12), 12)
    assert resolves(0.0833333, 12)  # 1/12 as a metric name writes it (6 significant digits)
    assert not resolves(0.08, 12)
    assert not resolves(0.5, 0)


def test_coarse_score_gives_tpr_zero_at_one_percent():
    # 9 distinct values; the top value 9 holds 23 of 100 non-members (23%) and 40 of 100 members.
    member = np.r_[np.zeros(100, bool), np.ones(100, bool)]
    nonmember_scores = np.r_[[9] * 23, np.repeat(np.arange(1, 9), [10, 10, 10, 10, 10, 10, 10, 7])]
    member_scores = np.r_[[9] * 40, np.repeat(np.arange(1, 9), [5, 5, 5, 5, 10, 10, 10, 10])]
    scores = np.r_[nonmember_scores, member_scores].astype(float)
    assert np.unique(scores).size == 9
    point = _row(operating_points(scores, member, [0.01]), 0.01)
    # The first cut below +inf flags 23% of the non-members, so FPR < 1% only at (0, 0).
    assert point["resolved"] and point["tpr"] == 0.0 and point["realized_fpr"] == 0.0
    assert point["threshold"] == np.inf


def test_counts_at_a_given_threshold():
    counts = counts_at(np.array([3.0, 2, 2, 1]), np.array([1, 0, 1, 0], bool), 2.0)
    # >= 2 flags 3 (member), 2 (non-member), 2 (member): TPR 2/2, FPR 1/2; both 2s tie.
    assert counts == {
        "realized_fpr": 0.5,
        "tpr": 1.0,
        "false_positives": 1,
        "true_positives": 2,
        "ties_nonmembers": 1,
        "ties_members": 1,
    }


def test_ppv_at_priors():
    # prior 0.1, TPR 0.25, FPR 0.5: 0.025 / (0.025 + 0.9 * 0.5) = 0.025 / 0.475
    assert ppv(np.array([0.25]), np.array([0.5]), 0.1)[0] == pytest.approx(0.025 / 0.475)
    # prior 0.01, TPR 0.5, FPR 0.01: 0.005 / (0.005 + 0.99 * 0.01) = 0.005 / 0.0149
    assert ppv(np.array([0.5]), np.array([0.01]), 0.01)[0] == pytest.approx(0.005 / 0.0149)
    # FPR 0 (or unresolved) is no evidence of precision 1.
    assert np.isnan(ppv(np.array([0.5, np.nan]), np.array([0.0, np.nan]), 0.1)).all()
    assert ppv_column(0.01) == "ppv_at_1pct_prior" and ppv_column(0.1) == "ppv_at_10pct_prior"


def test_rotation():
    assert shadow_of([2, 0, 1]) == {0: 1, 1: 2, 2: 0}
    assert shadow_of([3, 5]) == {3: 5, 5: 3}
    assert shadow_of([4]) == {}


def _scores_frame(runs: dict[int, tuple[list[float], list[float]]]) -> pd.DataFrame:
    """One attack's per-sample scores: runs[repeat] = (member scores, non-member scores)."""
    frames = []
    for repeat, (members, nonmembers) in runs.items():
        frames.append(
            pd.DataFrame(
                {
                    "dataset": "toy",
                    "target_model": "mlp",
                    "attack": "loss",
                    "repeat": repeat,
                    "sample_id": np.arange(len(members) + len(nonmembers)),
                    "score": np.r_[members, nonmembers].astype(float),
                    "is_member": np.r_[np.ones(len(members)), np.zeros(len(nonmembers))] == 1,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


# Repeat 0: members 7, 5, 2, 1; non-members 8, 6, 3, 0.
# Repeat 1: members 10, 8, 6, 4; non-members 9, 5, 3, 1.
SHADOW_RUNS = {0: ([7, 5, 2, 1], [8, 6, 3, 0]), 1: ([10, 8, 6, 4], [9, 5, 3, 1])}


def test_shadow_threshold_applied_to_the_other_target():
    table = operating_point_table(_scores_frame(SHADOW_RUNS), fpr_levels=[0.5])
    assert table.columns[:10].tolist() == OPERATING_POINT_COLUMNS[:10]
    rows = table.set_index(["calibration", "repeat"])
    # Own threshold of repeat 1 at FPR < 0.5 (1 of 4 non-members): 10 m, 9 n, 8 m, 6 m -> 6.
    assert rows.loc[("target", 1), "threshold"] == 6.0
    assert rows.loc[("target", 1), "tpr"] == 3 / 4
    # Own threshold of repeat 0: 8 n, 7 m, then 6 n would make FPR 2/4 -> 7.
    assert rows.loc[("target", 0), "threshold"] == 7.0
    # Repeat 0 with repeat 1's threshold 6: flags 7 (m), 8 and 6 (n): TPR 1/4, FPR 2/4, which
    # is not below the requested 0.5: the attacker's calibration overshoots.
    shadow_0 = rows.loc[("shadow", 0)]
    assert (shadow_0["threshold"], shadow_0["threshold_repeat"]) == (6.0, 1)
    assert (shadow_0["tpr"], shadow_0["realized_fpr"]) == (1 / 4, 2 / 4)
    assert shadow_0["ties_nonmembers"] == 1  # the non-member scoring 6
    # Repeat 1 with repeat 0's threshold 7: flags 10, 8 (m) and 9 (n): TPR 2/4, FPR 1/4.
    shadow_1 = rows.loc[("shadow", 1)]
    assert (shadow_1["threshold"], shadow_1["threshold_repeat"]) == (7.0, 0)
    assert (shadow_1["tpr"], shadow_1["realized_fpr"]) == (2 / 4, 1 / 4)
    # PPV at prior 10% of the shadow row of repeat 0: 0.1 * 0.25 / (0.025 + 0.9 * 0.5)
    assert shadow_0["ppv_at_10pct_prior"] == pytest.approx(0.025 / 0.475)


def test_shadow_unresolved_when_the_shadow_cannot_resolve():
    # Repeat 1 has 4 non-members, repeat 0 has 10: FPR 0.15 is resolved on 0 only.
    runs = {0: ([5, 4], [3, 2, 1, 0, 0, 0, 0, 0, 0, 0]), 1: ([10, 8, 6, 4], [9, 5, 3, 1])}
    rows = operating_point_table(_scores_frame(runs), fpr_levels=[0.15])
    rows = rows.set_index(["calibration", "repeat"])
    assert rows.loc[("target", 0), "resolved"] and not rows.loc[("target", 1), "resolved"]
    assert not rows.loc[("shadow", 0), "resolved"]  # its threshold would come from repeat 1
    assert np.isnan(rows.loc[("shadow", 0), "tpr"])
    assert rows.loc[("shadow", 1), "resolved"]


def test_one_target_has_no_shadow_rows_and_order_does_not_matter():
    frame = _scores_frame({0: ([7, 5, 2, 1], [8, 6, 3, 0])})
    table = operating_point_table(frame, fpr_levels=[0.3, 0.6])
    assert set(table["calibration"]) == {"target"}
    shuffled = frame.sample(frac=1.0, random_state=3)
    pd.testing.assert_frame_equal(operating_point_table(shuffled, fpr_levels=[0.3, 0.6]), table)
