from __future__ import annotations

import itertools
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.stats import false_discovery_control, norm, permutation_test, ttest_rel

from miaflow.evaluation import stats
from miaflow.evaluation.metrics import attack_metrics, roc, tpr_at_fpr
from miaflow.evaluation.multiplicity import min_permutation_p
from miaflow.evaluation.stats import (
    TEST_COLUMNS,
    comparisons,
    delong_test,
    one_sided_tests,
    paired_tests,
    permutation_pvalues,
    sample_permutation_pvalues,
    sign_flips,
)

# Per-repeat AUROC of two attacks on one dataset/model: "strong" beats "weak" in every repeat by
# distinct margins.
WEAK = np.array([0.60, 0.62, 0.58, 0.61, 0.59])
STRONG = WEAK + np.array([0.10, 0.12, 0.08, 0.11, 0.09])
FAMILIES = {
    "strong": "lira",
    "weak": "metric",
    "copy": "metric",
    "noise": "model",
    "noise2": "model",
}


def test_one_sided_tests_direction_and_exact_permutation_p():
    t, p_ttest, p_perm = one_sided_tests([STRONG, WEAK], [WEAK, STRONG])
    assert t[0] > 0 and p_ttest[0] < 1e-4 and p_ttest[1] > 0.9999
    # All 5 differences positive and distinct: only the identity of 2^5 sign flips is as extreme.
    assert p_perm[0] == pytest.approx(1 / 2**5) and p_perm[1] == 1.0
    t, p_ttest, p_perm = one_sided_tests([WEAK, np.full(4, 0.7)], [WEAK.copy(), np.full(4, 0.6)])
    assert np.isnan(t[0]) and p_ttest[0] == 1.0 and p_perm[0] == 1.0  # all differences zero
    assert t[1] == np.inf and p_ttest[1] == 0.0  # zero variance: t = +inf, no NaN, no crash


def test_one_sided_tests_equal_scipy_pair_by_pair():
    gen = np.random.default_rng(8)
    a_rows = [np.round(gen.uniform(0.5, 0.8, n) * 20) / 20 for n in (5, 5, 9, 9, 3)]
    b_rows = [np.round(gen.uniform(0.5, 0.8, len(a)) * 20) / 20 for a in a_rows]
    for n_resamples in (None, 99):
        t, p_ttest, p_perm = one_sided_tests(a_rows, b_rows, n_resamples, seed=4)
        for k, (a, b) in enumerate(zip(a_rows, b_rows)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                ttest = ttest_rel(a, b, alternative="greater")
            assert t[k] == ttest.statistic or np.isnan(t[k])
            assert p_ttest[k] == (1.0 if np.isnan(ttest.pvalue) else ttest.pvalue)
            assert p_perm[k] == _scipy_p(a, b, n_resamples, 4)


# --- the vectorised permutation test against scipy.stats.permutation_test, pair by pair ---------


def _scipy_p(d_a: np.ndarray, d_b: np.ndarray, n_resamples: int | None, seed: int) -> float:
    return float(
        permutation_test(
            (d_a, d_b),
            lambda a, b, axis: np.mean(a - b, axis=axis),
            permutation_type="samples",
            vectorized=True,
            alternative="greater",
            n_resamples=np.inf if n_resamples is None else n_resamples,
            rng=np.random.default_rng(seed),
        ).pvalue
    )


def _tied_pairs(gen: np.random.Generator, rows: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Metric-like values on coarse grids (k / 50, k / 7), so differences tie and cancel."""
    a = np.round(gen.uniform(0.4, 0.9, (rows, n)) * 50) / 50
    b = np.round(gen.uniform(0.4, 0.9, (rows, n)) * 7) / 7
    b[: rows // 4] = a[: rows // 4]  # all differences zero
    b[rows // 4 : rows // 2, ::2] = a[rows // 4 : rows // 2, ::2]  # some differences zero
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


# --- questions, sample-level tests and the table ----------------------------------------------


def test_comparisons_ask_the_best_and_the_families_bests():
    means = pd.DataFrame(
        {
            "dataset": "toy",
            "target_model": "mlp",
            "metric": "auroc",
            "attack": ["weak", "strong", "copy", "noise"],
            "mean": [0.6, 0.7, 0.6, 0.5],
        }
    )
    table = comparisons(means, FAMILIES)
    best = table[table.family == "vs-best"]
    assert set(best.attack_a) == {"strong"} and set(best.attack_b) == {"weak", "copy", "noise"}
    # Families' bests: lira (strong), metric (copy before weak: ties go by name), model (noise).
    pairs = table.loc[table.family == "family-best", ["attack_a", "attack_b"]]
    assert [tuple(p) for p in pairs.to_numpy()] == [
        ("strong", "copy"),
        ("strong", "noise"),
        ("copy", "noise"),
    ]
    assert table.attack_family_a.tolist()[:1] == ["lira"]


def test_rank_metrics_equal_the_library_metrics():
    gen = np.random.default_rng(1)
    for n in (20, 57, 400):
        member = gen.random(n) < 0.4
        scores = np.round(gen.normal(member * 0.5, 1), 1)  # ties
        levels = [0.001, 0.01, 0.1, 0.3]
        fpr, tpr, _ = roc(member, scores)
        ranks = stats._doubled_midranks(scores)[np.argsort(~member, kind="stable")]
        got = stats._rank_metrics(ranks[None], int(member.sum()), [None, *levels])
        # the canonical rule at every level (the tables leave the unresolved ones out)
        expected = [attack_metrics(member, scores)["auroc"]]
        np.testing.assert_allclose(got[0], expected + [tpr_at_fpr(fpr, tpr, x) for x in levels])


def _samples(
    gen: np.random.Generator,
    repeats: int = 3,
    n: int = 200,
) -> tuple[list[np.ndarray], dict[str, list[np.ndarray]]]:
    """Membership and scores per repeat: "strong" separates members, "weak" a little, "copy"
    is "weak" exactly, "noise" and "noise2" are independent noise."""
    member = [gen.random(n) < 0.5 for _ in range(repeats)]
    scores = {
        "strong": [gen.normal(1.5 * m, 1) for m in member],
        "weak": [gen.normal(0.2 * m, 1) for m in member],
    }
    scores["copy"] = [s.copy() for s in scores["weak"]]
    scores["noise"] = [gen.normal(0, 1, n) for _ in range(repeats)]
    scores["noise2"] = [gen.normal(0, 1, n) for _ in range(repeats)]
    return member, scores


def test_sample_tests_reject_a_large_difference_and_not_equal_attacks():
    member, scores = _samples(np.random.default_rng(3))
    metrics = ["auroc", "tpr_at_10pct_fpr", "precision"]
    strong = sample_permutation_pvalues(scores["strong"], scores["weak"], member, metrics, 199, 0)
    assert strong[:2].tolist() == [1 / 200, 1 / 200] and np.isnan(strong[2])
    assert delong_test(scores["strong"], scores["weak"], member)[1] < 1e-10
    same = sample_permutation_pvalues(scores["weak"], scores["copy"], member, metrics, 199, 0)
    assert same[:2].tolist() == [1.0, 1.0]  # every swap leaves the statistic at 0
    assert delong_test(scores["weak"], scores["copy"], member) == (0.0, 1.0)
    reverse = sample_permutation_pvalues(scores["weak"], scores["strong"], member, metrics, 199, 0)
    assert (reverse[:2] == 1.0).all()


def test_sample_permutation_p_is_valid_under_h0():
    # Two equally (un)informative attacks: P(p <= 0.1) is about 0.1, not more.
    gen = np.random.default_rng(4)
    p = []
    for trial in range(200):
        member, scores = _samples(gen, repeats=2, n=40)
        p.append(
            sample_permutation_pvalues(
                scores["noise"], scores["noise2"], member, ["auroc", "tpr_at_10pct_fpr"], 99, trial
            )
        )
    p = np.array(p)
    assert (np.mean(p <= 0.1, axis=0) < 0.1 + 4 * np.sqrt(0.09 / 200)).all()
    assert (np.mean(p <= 0.5, axis=0) > 0.3).all()  # not degenerate


def test_delong_equals_the_pairwise_definition():
    gen = np.random.default_rng(6)
    member, scores = _samples(gen, repeats=2, n=60)
    a, b = scores["strong"], scores["weak"]
    total_d = total_v = 0.0
    for x, y, m in zip(a, b, member):

        def placements(s):
            kernel = (s[m][:, None] > s[~m][None]) + 0.5 * (s[m][:, None] == s[~m][None])
            return kernel.mean(axis=1), kernel.mean(axis=0)

        (x10, x01), (y10, y01) = placements(x), placements(y)
        total_d += x10.mean() - y10.mean()
        total_v += np.var(x10 - y10, ddof=1) / m.sum() + np.var(x01 - y01, ddof=1) / (~m).sum()
    z, p = delong_test(a, b, member)
    assert z == pytest.approx(total_d / np.sqrt(total_v))
    assert p == pytest.approx(norm.sf(total_d / np.sqrt(total_v)))


def _scores_and_metrics(gen: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame]:
    member, scores = _samples(gen, repeats=4)
    score_rows, metric_rows = [], []
    for attack, per_repeat in scores.items():
        for repeat, (s, m) in enumerate(zip(per_repeat, member)):
            score_rows.append(
                pd.DataFrame(
                    {
                        "dataset": "toy",
                        "target_model": "mlp",
                        "attack": attack,
                        "repeat": repeat,
                        "sample_id": np.arange(len(s)),
                        "score": s,
                        "is_member": m,
                    }
                )
            )
            metric_rows += [
                {
                    "dataset": "toy",
                    "target_model": "mlp",
                    "attack": attack,
                    "repeat": repeat,
                    "metric": name,
                    "value": value,
                }
                for name, value in attack_metrics(m, s).items()
            ]
    return pd.concat(score_rows, ignore_index=True), pd.DataFrame(metric_rows)


def test_paired_tests_families_and_adjustment():
    scores, metrics = _scores_and_metrics(np.random.default_rng(7))
    tests = paired_tests(
        metrics, scores, FAMILIES, ("auroc", "tpr_at_10pct_fpr"), n_resamples=99, seed=1
    )
    assert list(tests.columns) == TEST_COLUMNS
    assert set(tests.metric) == {"auroc", "tpr_at_10pct_fpr"}
    assert (tests.mean_diff >= 0).all() and (tests.n_repeats == 4).all()
    for _, family in tests.groupby(["family", "metric"]):
        for test in ("ttest", "perm"):
            np.testing.assert_allclose(
                family[f"p_{test}_by"], false_discovery_control(family[f"p_{test}"], method="by")
            )
            assert family[f"reject_{test}"].equals(family[f"p_{test}_by"] <= 0.05)
        assert (family.min_p_perm_by == min_permutation_p(99, len(family))).all()
    auroc = tests[(tests.metric == "auroc") & (tests.family == "vs-best")].set_index("attack_b")
    assert set(auroc.attack_a) == {"strong"}
    assert auroc.loc["noise", ["reject_ttest", "reject_perm", "reject_delong"]].all()
    assert tests.loc[tests.metric != "auroc", "p_delong"].isna().all()
    same = tests[(tests.attack_a == "copy") | (tests.attack_b == "copy")]
    assert not same.query("attack_a == 'weak' or attack_b == 'weak'")[
        ["reject_ttest", "reject_perm", "reject_delong"]
    ].any(axis=None)
    again = paired_tests(
        metrics, scores, FAMILIES, ("auroc", "tpr_at_10pct_fpr"), n_resamples=99, seed=1
    )
    pd.testing.assert_frame_equal(tests, again)


def test_paired_tests_without_scores_test_over_repeats_only():
    metrics = pd.DataFrame(
        [
            {
                "dataset": "toy",
                "target_model": "mlp",
                "attack": attack,
                "repeat": repeat,
                "metric": "auroc",
                "value": value,
            }
            for attack, values in {"strong": STRONG, "weak": WEAK}.items()
            for repeat, value in enumerate(values)
        ]
    )
    tests = paired_tests(metrics, None, FAMILIES)
    assert len(tests) == 2 and set(tests.family) == {"vs-best", "family-best"}
    assert tests.reject_ttest.all() and tests.p_perm.isna().all() and tests.p_delong.isna().all()
    single = paired_tests(metrics[metrics.repeat == 0], None, FAMILIES)
    assert single.p_ttest.isna().all() and not single.reject_ttest.any()
