from __future__ import annotations

import itertools
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.stats import false_discovery_control, permutation_test, ttest_rel

from miaflow.evaluation import stats
from miaflow.evaluation.stats import TEST_COLUMNS, paired_tests, permutation_pvalues, sign_flips

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


# --- the vectorised permutation test against scipy.stats.permutation_test, pair by pair ---------

def _scipy_p(d_a: np.ndarray, d_b: np.ndarray, n_resamples: int | None, seed: int) -> float:
    return float(permutation_test(
        (d_a, d_b), lambda a, b, axis: np.mean(a - b, axis=axis), permutation_type="samples",
        vectorized=True, alternative="greater",
        n_resamples=np.inf if n_resamples is None else n_resamples,
        rng=np.random.default_rng(seed)).pvalue)


def _tied_pairs(gen: np.random.Generator, rows: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Metric-like values on coarse grids (k / 50, k / 7), so differences tie and cancel."""
    a = np.round(gen.uniform(0.4, 0.9, (rows, n)) * 50) / 50
    b = np.round(gen.uniform(0.4, 0.9, (rows, n)) * 7) / 7
    b[: rows // 4] = a[: rows // 4]                          # all differences zero
    b[rows // 4: rows // 2, ::2] = a[rows // 4: rows // 2, ::2]  # some differences zero
    return a, b


@pytest.mark.parametrize("n", range(2, 11))
def test_exact_enumeration_equals_scipy(n):
    a, b = _tied_pairs(np.random.default_rng(n), 40, n)
    ours = permutation_pvalues(a - b)
    assert np.array_equal(ours, [_scipy_p(a[r], b[r], None, 0) for r in range(len(a))])
    assert set(ours * 2**n) <= set(range(1, 2**n + 1))  # exact: multiples of 1 / 2^R, >= 1 / 2^R


@pytest.mark.parametrize("n", [8, 12])
def test_random_sign_flips_are_scipys_draws(n):
    a, b = _tied_pairs(np.random.default_rng(n), 30, n)
    ours = permutation_pvalues(a - b, n_resamples=199, seed=11)
    assert np.array_equal(ours, [_scipy_p(a[r], b[r], 199, 11) for r in range(len(a))])


def test_random_p_agrees_with_scipy_within_monte_carlo_error():
    # Independent draws (different seeds) still estimate the same exact p-value.
    gen = np.random.default_rng(5)
    d = gen.normal(0.3, 1.0, (12, 14))
    n_resamples = 4000
    ours = permutation_pvalues(d, n_resamples=n_resamples, seed=1)
    theirs = np.array([_scipy_p(row, np.zeros(14), n_resamples, 2) for row in d])
    exact = permutation_pvalues(d)
    assert len(np.unique(exact)) > 6  # a spread of p-values, not all 0 or 1
    sd = np.sqrt(exact * (1 - exact) / n_resamples) + 1 / n_resamples
    assert (np.abs(ours - exact) <= 5 * sd).all()
    assert (np.abs(theirs - exact) <= 5 * sd).all()
    assert not np.array_equal(ours, theirs)


def test_sign_flips():
    signs, exact = sign_flips(3, None, 0)
    assert exact and signs.shape == (8, 3)
    assert {tuple(row) for row in signs} == set(itertools.product([1.0, -1.0], repeat=3))
    assert sign_flips(3, 8, 0)[1]  # n_resamples >= 2^R enumerates, as scipy does
    signs, exact = sign_flips(12, 500, 4)
    assert not exact and signs.shape == (500, 12) and set(np.unique(signs)) == {-1.0, 1.0}
    assert np.array_equal(signs, sign_flips(12, 500, 4)[0])
    assert not np.array_equal(signs, sign_flips(12, 500, 5)[0])
    assert abs(signs.mean()) < 0.05  # fair coins


def test_known_effect_gives_small_p():
    d = np.random.default_rng(1).normal(1.0, 0.5, (50, 10))
    p = permutation_pvalues(d)
    assert (p <= 4 / 2**10).all()
    assert (permutation_pvalues(-d) > 0.99).all()


def test_no_effect_gives_uniform_p():
    # Under H0 (symmetric differences) the exact p-value is uniform on {1, ..., 1024} / 1024.
    p = permutation_pvalues(np.random.default_rng(2).normal(0.0, 1.0, (4000, 10)))
    for level in (0.05, 0.25, 0.5, 0.75):
        expected = np.floor(level * 1024) / 1024
        assert abs(np.mean(p <= level) - expected) < 4 * np.sqrt(expected * (1 - expected) / 4000)


def test_chunks_do_not_change_p(monkeypatch):
    a, b = _tied_pairs(np.random.default_rng(3), 37, 6)
    whole = permutation_pvalues(a - b)
    monkeypatch.setattr(stats, "_CHUNK_ELEMENTS", 5 * 64)  # 5 rows of 2^6 patterns per chunk
    assert np.array_equal(stats.permutation_pvalues(a - b), whole)


def test_table_equals_pair_by_pair_scipy():
    """Every row equals scipy's ttest_rel and permutation_test on that pair's values alone."""
    gen = np.random.default_rng(8)
    frames = []
    for dataset, repeats in [("five", 5), ("nine", 9)]:
        values = {f"att{k}": np.round(gen.uniform(0.5, 0.8, repeats) * 20) / 20 for k in range(4)}
        values["att0"][1] = np.nan  # att0 misses a repeat: its pairs have one pair less
        frames.append(_metrics(values, dataset=dataset).dropna())
        frames.append(_metrics(values, dataset=dataset, metric="tpr_at_1pct_fpr").dropna())
    metrics = pd.concat(frames)
    for n_resamples in (None, 99):
        tests = paired_tests(metrics, n_resamples=n_resamples, seed=4)
        assert len(tests) == 2 * 2 * 4 * 3
        assert tests[["dataset", "metric", "attack_a", "attack_b"]].apply(tuple, axis=1).is_monotonic_increasing
        for row in tests.itertuples():
            group = metrics[(metrics.dataset == row.dataset) & (metrics.metric == row.metric)]
            pairs = group.pivot(index="repeat", columns="attack", values="value")[
                [row.attack_a, row.attack_b]].dropna()
            a, b = pairs[row.attack_a].to_numpy(), pairs[row.attack_b].to_numpy()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                ttest = ttest_rel(a, b, alternative="greater")
            assert row.n_pairs == len(a)
            assert row.mean_diff == np.mean(a - b)
            assert row.t_statistic == ttest.statistic or np.isnan(row.t_statistic)
            assert row.p_ttest == (1.0 if np.isnan(ttest.pvalue) else ttest.pvalue)
            assert row.p_perm == _scipy_p(a, b, n_resamples, 4)
