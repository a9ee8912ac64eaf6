from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import false_discovery_control

from miaflow.stats import TEST_COLUMNS, paired_tests

# Per-repeat AUROC of three attacks on one dataset/model: "strong" beats "weak" in every repeat by
# distinct margins; "copy" equals "weak" exactly.
WEAK = np.array([0.60, 0.62, 0.58, 0.61, 0.59])
STRONG = WEAK + np.array([0.10, 0.12, 0.08, 0.11, 0.09])


def _metrics(values: dict[str, np.ndarray], dataset: str = "toy", metric: str = "auroc") -> pd.DataFrame:
    return pd.DataFrame([
        {"dataset": dataset, "target_model": "mlp", "attack": attack, "repeat": repeat,
         "metric": metric, "value": value}
        for attack, per_repeat in values.items()
        for repeat, value in enumerate(per_repeat)
    ])


def _row(tests: pd.DataFrame, a: str, b: str) -> pd.Series:
    match = tests[(tests.attack_a == a) & (tests.attack_b == b)]
    assert len(match) == 1
    return match.iloc[0]


def test_direction_and_exact_permutation_p():
    tests = paired_tests(_metrics({"strong": STRONG, "weak": WEAK}))
    assert list(tests.columns) == TEST_COLUMNS
    assert len(tests) == 2  # both ordered pairs

    better = _row(tests, "strong", "weak")
    assert better.n_pairs == 5
    assert better.mean_diff == pytest.approx(0.1)
    assert better.t_statistic > 0
    assert better.p_ttest < 1e-4
    # All 5 differences positive and distinct: only the identity of 2^5 sign flips is as extreme.
    assert better.p_perm == pytest.approx(1 / 2**5)

    worse = _row(tests, "weak", "strong")
    assert worse.mean_diff == pytest.approx(-0.1)
    assert worse.p_ttest > 0.9999
    assert worse.p_perm == 1.0
    assert not worse.reject_ttest and not worse.reject_perm


def test_zero_differences_give_p_one():
    tests = paired_tests(_metrics({"weak": WEAK, "copy": WEAK.copy()}))
    for a, b in [("weak", "copy"), ("copy", "weak")]:
        row = _row(tests, a, b)
        assert row.mean_diff == 0.0
        assert np.isnan(row.t_statistic)
        assert row.p_ttest == 1.0 and row.p_perm == 1.0
        assert row.p_ttest_by == 1.0 and row.p_perm_by == 1.0


def test_constant_nonzero_difference():
    # Zero variance of the differences: t = +inf, p = 0 (no NaN, no crash).
    tests = paired_tests(_metrics({"a": np.full(4, 0.7), "b": np.full(4, 0.6)}))
    row = _row(tests, "a", "b")
    assert row.t_statistic == np.inf and row.p_ttest == 0.0
    assert row.p_perm == pytest.approx(1 / 2**4)


def test_by_adjustment_over_whole_family():
    gen = np.random.default_rng(0)
    metrics = pd.concat([
        _metrics({"strong": STRONG, "weak": WEAK, "noise": WEAK + gen.normal(0, 0.02, 5)}),
        _metrics({"strong": STRONG, "weak": WEAK}, metric="tpr_at_1pct_fpr"),
        _metrics({"strong": STRONG, "weak": WEAK}, dataset="other"),
        _metrics({"strong": STRONG, "weak": WEAK}, metric="precision"),  # not tested
    ])
    tests = paired_tests(metrics)
    assert len(tests) == 6 + 2 + 2
    assert set(tests.metric) == {"auroc", "tpr_at_1pct_fpr"}
    for test in ("ttest", "perm"):
        assert (tests[f"p_{test}_by"] >= tests[f"p_{test}"] - 1e-15).all()
        np.testing.assert_allclose(
            tests[f"p_{test}_by"], false_discovery_control(tests[f"p_{test}"], method="by"))
        assert tests[f"reject_{test}"].equals(tests[f"p_{test}_by"] <= 0.05)
    # the strong > weak comparisons survive the adjustment, their reverses do not
    assert tests[(tests.attack_a == "strong") & (tests.attack_b == "weak")].reject_ttest.all()
    assert not tests[(tests.attack_a == "weak") & (tests.attack_b == "strong")].reject_ttest.any()


def test_pairs_by_repeat_and_skips_fewer_than_two():
    metrics = _metrics({"strong": STRONG, "weak": WEAK})
    # Drop two repeats of "weak": only the 3 repeats both attacks have are paired.
    metrics = metrics[~((metrics.attack == "weak") & metrics.repeat.isin([0, 4]))]
    assert (paired_tests(metrics).n_pairs == 3).all()

    single = _metrics({"strong": STRONG[:1], "weak": WEAK[:1]})
    tests = paired_tests(single)
    assert tests.empty and list(tests.columns) == TEST_COLUMNS


def test_random_permutations_are_seeded():
    # 12 repeats: 4096 sign patterns > 999 resamples, so scipy samples instead of enumerating.
    gen = np.random.default_rng(0)
    weak = gen.uniform(0.5, 0.7, 12)
    metrics = _metrics({"strong": weak + gen.uniform(0.05, 0.15, 12), "weak": weak})
    first = paired_tests(metrics, n_resamples=999, seed=7)
    pd.testing.assert_frame_equal(first, paired_tests(metrics, n_resamples=999, seed=7))
    # Randomised p-values count the observed statistic: (0 + 1) / (999 + 1) at best.
    assert _row(first, "strong", "weak").p_perm == pytest.approx(1 / 1000)
    assert _row(paired_tests(metrics), "strong", "weak").p_perm == pytest.approx(1 / 2**12)
