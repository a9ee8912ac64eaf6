from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest

from miaflow.evaluation.metrics import (
    METRIC_NAMES,
    METRICS_COLUMNS,
    attack_metrics,
    clopper_pearson,
    metric_names,
    roc,
    roc_table,
    score_metrics,
    summary,
    tpr_at_fpr,
)

# Hand-worked example: 4 members, 5 non-members, distinct scores. In decreasing score order:
#   0.9 m, 0.8 m, 0.7 n, 0.6 m, 0.5 n, 0.3 m, 0.2 n, 0.1 n, 0.05 n
# ROC points: TPR 0 .25 .5 .5 .75 .75 1 1 1 1, FPR 0 0 0 .2 .2 .4 .4 .6 .8 1.
# TPR + 1 - FPR peaks (1.6) at threshold 0.3: TP 4, FP 2, FN 0, TN 3.
# AUROC: member 0.9 and 0.8 beat all 5, 0.6 beats 4, 0.3 beats 3 -> 17 / 20.
HAND_MEMBER = np.array([1, 1, 0, 1, 0, 1, 0, 0, 0], dtype=bool)
HAND_SCORES = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.3, 0.2, 0.1, 0.05])


def test_metric_names_contract():
    assert METRIC_NAMES == (
        "auroc",
        "tpr_at_0.1pct_fpr",
        "tpr_at_1pct_fpr",
        "tpr_at_10pct_fpr",
        "precision",
        "recall",
        "f1",
        "accuracy",
        "plain_accuracy",
        "fpr",
        "fnr",
        "advantage",
    )
    assert metric_names() == METRIC_NAMES


def test_hand_example():
    m = attack_metrics(HAND_MEMBER, HAND_SCORES)
    expected = {
        "auroc": 17 / 20,
        # 5 non-members resolve no FPR below 1/5: not a TPR of 0.5 at FPR 0, but not resolved
        "tpr_at_0.1pct_fpr": np.nan,
        "tpr_at_1pct_fpr": np.nan,
        "tpr_at_10pct_fpr": np.nan,
        "precision": 4 / 6,
        "recall": 1.0,
        "f1": 2 * (4 / 6) * 1.0 / (4 / 6 + 1.0),
        "accuracy": 0.5 * (1.0 + 1 - 0.4),
        "fpr": 0.4,
        "fnr": 0.0,
        "advantage": 0.6,
        "plain_accuracy": 7 / 9,
    }
    assert m.keys() == expected.keys()
    for name, value in expected.items():
        assert m[name] == pytest.approx(value, abs=1e-12, nan_ok=True), name
    assert attack_metrics(HAND_MEMBER, HAND_SCORES, [0.2])["tpr_at_20pct_fpr"] == 0.5


def test_operating_threshold_is_first_maximiser():
    # 4 members and 4 non-members: TPR + 1 - FPR ties at 1.5 for thresholds 0.8, 0.6 and 0.3;
    # the first in sklearn order (highest threshold, 0.8) is tau*: TP 2, FP 0.
    member = HAND_MEMBER[:-1]
    m = attack_metrics(member, HAND_SCORES[:-1])
    assert (m["precision"], m["recall"], m["fpr"], m["fnr"]) == (1.0, 0.5, 0.0, 0.5)
    assert m["accuracy"] == m["plain_accuracy"] == 0.75  # equal because P = N
    assert m["advantage"] == pytest.approx(2 * m["accuracy"] - 1)


def test_tpr_at_fpr_uses_strict_inequality():
    fpr, tpr, _ = roc(HAND_MEMBER, HAND_SCORES)
    assert tpr_at_fpr(fpr, tpr, 0.2) == 0.5  # the point at FPR = 0.2 itself is excluded
    assert tpr_at_fpr(fpr, tpr, 0.2 + 1e-9) == 0.75
    assert tpr_at_fpr(fpr, tpr, 1e-6) == 0.5  # TPR reached at FPR = 0
    assert tpr_at_fpr(fpr, tpr, 1.0) == 1.0


def test_roc_keeps_every_threshold():
    fpr, tpr, thresholds = roc(HAND_MEMBER, HAND_SCORES)
    assert len(fpr) == len(HAND_SCORES) + 1  # +inf first, then each distinct score
    assert thresholds[0] == np.inf
    np.testing.assert_allclose(tpr, [0, 0.25, 0.5, 0.5, 0.75, 0.75, 1, 1, 1, 1])
    np.testing.assert_allclose(fpr, [0, 0, 0, 0.2, 0.2, 0.4, 0.4, 0.6, 0.8, 1])


def test_roc_needs_both_classes():
    with pytest.raises(ValueError, match="both"):
        roc(np.ones(3, dtype=bool), np.arange(3.0))


def test_perfect_reversed_and_tied_scores():
    member = np.array([True] * 5 + [False] * 5)
    levels = [0.001, 0.2]  # 5 non-members resolve 20% FPR, not 0.1%
    perfect = attack_metrics(member, member.astype(float), levels)
    assert perfect["auroc"] == 1.0
    assert perfect["tpr_at_20pct_fpr"] == 1.0
    assert np.isnan(perfect["tpr_at_0.1pct_fpr"])
    assert perfect["accuracy"] == perfect["precision"] == perfect["advantage"] == 1.0

    reversed_ = attack_metrics(member, -member.astype(float), levels)
    assert reversed_["auroc"] == 0.0
    assert reversed_["tpr_at_20pct_fpr"] == 0.0

    tied = attack_metrics(member, np.zeros(10), levels)
    assert tied["auroc"] == 0.5
    assert tied["tpr_at_20pct_fpr"] == 0.0
    assert tied["advantage"] == 0.0  # every threshold gives TPR = FPR


def test_negated_scores_flip_auroc():
    gen = np.random.default_rng(1)
    member = gen.random(300) < 0.5
    scores = gen.normal(size=300) + member  # members score higher
    auroc = attack_metrics(member, scores)["auroc"]
    assert auroc > 0.6
    assert attack_metrics(member, -scores)["auroc"] == pytest.approx(1 - auroc, abs=1e-12)


@pytest.mark.parametrize(
    "successes, trials", [(0, 10), (1, 10), (7, 10), (10, 10), (3, 500), (0, 1)]
)
@pytest.mark.parametrize("confidence", [0.9, 0.95])
def test_clopper_pearson_matches_scipy(successes, trials, confidence):
    ci = binomtest(successes, trials).proportion_ci(confidence_level=confidence, method="exact")
    assert clopper_pearson(successes, trials, confidence) == pytest.approx(
        (ci.low, ci.high), abs=1e-12
    )


def test_clopper_pearson_edges():
    low, high = clopper_pearson(0, 20)
    assert low == 0.0 and 0 < high < 0.2
    low, high = clopper_pearson(20, 20)
    assert high == 1.0 and 0.8 < low < 1
    with pytest.raises(ValueError):
        clopper_pearson(3, 2)


def _scores_frame(seed: int = 0) -> pd.DataFrame:
    gen = np.random.default_rng(seed)
    frames = []
    for attack, signal in [("loss", 1.0), ("random", 0.0)]:
        for repeat in range(3):
            member = gen.random(200) < 0.4
            frames.append(
                pd.DataFrame(
                    {
                        "dataset": "toy",
                        "target_model": "mlp",
                        "attack": attack,
                        "repeat": repeat,
                        "sample_id": np.arange(200),
                        "score": gen.normal(size=200) + signal * member,
                        "is_member": member,
                    }
                )
            )
    return pd.concat(frames, ignore_index=True)


def test_score_metrics_shape_and_intervals():
    scores = _scores_frame()
    table = score_metrics(scores)
    assert list(table.columns) == METRICS_COLUMNS
    per_run = table.groupby(["dataset", "target_model", "attack", "repeat"])["metric"]
    assert all(tuple(names) == METRIC_NAMES for _, names in per_run)
    assert len(table) == 2 * 3 * len(METRIC_NAMES)

    tpr_rows = table["metric"].str.startswith("tpr_at_")
    assert table.loc[~tpr_rows, ["ci_low", "ci_high"]].isna().all().all()
    # ~120 non-members per run do not resolve 0.1% FPR: no value, no interval
    unresolved = table["metric"] == "tpr_at_0.1pct_fpr"
    assert table.loc[unresolved, ["value", "ci_low", "ci_high"]].isna().all().all()
    for row in table[tpr_rows & ~unresolved].itertuples():
        run = scores[(scores.attack == row.attack) & (scores.repeat == row.repeat)]
        positives = int(run.is_member.sum())
        expected = clopper_pearson(round(row.value * positives), positives)
        assert (row.ci_low, row.ci_high) == pytest.approx(expected)
        assert row.ci_low <= row.value <= row.ci_high

    auroc = table[table.metric == "auroc"].set_index(["attack", "repeat"])["value"]
    assert (auroc["loss"] > 0.65).all()  # direction: the informative attack scores well


def test_score_metrics_ignores_row_order():
    scores = _scores_frame()
    shuffled = scores.sample(frac=1.0, random_state=3)
    pd.testing.assert_frame_equal(score_metrics(scores), score_metrics(shuffled))


def test_summary_uses_ddof_1():
    metrics = score_metrics(_scores_frame())
    result = summary(metrics)
    assert list(result.columns) == [
        "dataset",
        "target_model",
        "attack",
        "metric",
        "mean",
        "std",
        "n_repeats",
    ]
    row = result[(result.attack == "loss") & (result.metric == "auroc")].iloc[0]
    values = metrics[(metrics.attack == "loss") & (metrics.metric == "auroc")]["value"].to_numpy()
    assert row["mean"] == pytest.approx(values.mean())
    assert row["std"] == pytest.approx(values.std(ddof=1))
    assert row["n_repeats"] == 3


def test_roc_table_short_curves_whole():
    table = roc_table(_scores_frame())
    assert list(table.columns) == ["dataset", "target_model", "attack", "repeat", "fpr", "tpr"]
    one = table[(table.attack == "loss") & (table.repeat == 0)]
    run = _scores_frame().query("attack == 'loss' and repeat == 0")
    fpr, tpr, _ = roc(run.is_member.to_numpy(), run.score.to_numpy())
    np.testing.assert_array_equal(one.fpr, fpr)
    np.testing.assert_array_equal(one.tpr, tpr)


def test_roc_table_thins_long_curves_above_one_percent():
    gen = np.random.default_rng(2)
    member = gen.random(20_000) < 0.5
    scores = pd.DataFrame(
        {
            "dataset": "toy",
            "target_model": "mlp",
            "attack": "loss",
            "repeat": 0,
            "sample_id": np.arange(member.size),
            "score": gen.normal(size=member.size) + member,
            "is_member": member,
        }
    )
    fpr, tpr, _ = roc(member, scores.score.to_numpy())
    table = roc_table(scores)
    assert len(table) < 2500 < len(fpr)
    low = fpr <= 0.01
    np.testing.assert_array_equal(table.fpr[: low.sum()], fpr[low])
    np.testing.assert_array_equal(table.tpr[: low.sum()], tpr[low])
    assert (table.fpr.iloc[-1], table.tpr.iloc[-1]) == (1.0, 1.0)
    assert table.fpr.is_monotonic_increasing
