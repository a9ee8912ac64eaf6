"""Known-answer tests of the language-model membership scores (miaflow.llm.scores)."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest
from scipy.stats import kendalltau
from sklearn.metrics import roc_auc_score

from miaflow.llm import scores as S


def arrays(*texts):
    return [np.array(t, dtype=float) for t in texts]


def test_finite_replaces_infinities_and_nan(caplog):
    with caplog.at_level(logging.WARNING, logger="miaflow.llm"):
        out = S.finite(np.array([np.inf, -np.inf, np.nan, 1.0, 2.0]))
    np.testing.assert_array_equal(out, [2.0 + 1e-6, 1.0 - 1e-6, 0.0, 1.0, 2.0])
    assert "replaced 3 non-finite" in caplog.text


def test_mean_log_likelihood_and_loss():
    ll = S.mean_log_likelihood(arrays([-1, -2, -3], []))
    assert ll[0] == -2.0 and np.isnan(ll[1])
    np.testing.assert_array_equal(S.loss(arrays([-1, -3])), [-2.0])


def test_zlib_bytes_known_values():
    # zlib stream = 2-byte header + deflate + 4-byte Adler-32. "a" as one fixed-Huffman block:
    # 3 header bits + 8 literal bits + 7 end-of-block bits = 18 bits -> 3 bytes, 9 in all.
    assert S.zlib_bytes("a") == 9
    assert S.zlib_bytes("") == 8  # empty block: 10 bits -> 2 bytes
    # "é" is two bytes in UTF-8: 3 + 8 + 8 + 7 = 26 bits -> 4 bytes (Latin-1 would give 9).
    assert S.zlib_bytes("é") == 10


def test_zlib_score_divides_ll_by_bytes():
    np.testing.assert_allclose(S.zlib(arrays([-2, -4], [-9]), ["a", "é"]), [-3 / 9, -9 / 10])
    with pytest.raises(ValueError):
        S.zlib(arrays([-1]), ["a", "b"])


def test_lowercase_is_ratio_lower_over_original():
    # LL(lower) = -3, LL(x) = -1.5: a member-like small |LL(x)| gives a large ratio.
    np.testing.assert_allclose(S.lowercase(arrays([-4, -2]), arrays([-1, -2])), [2.0])


@pytest.mark.parametrize(
    ("n", "k", "compat", "expected"),
    [
        (10, 0.3, False, 3),
        (100, 0.29, False, 29),  # 0.29 * 100 = 28.999999999999996 in floating point
        (100, 0.57, True, 57),  # 56.99999999999999
        (5, 0.1, False, 1),
        (5, 0.1, True, 0),
        (7, 1.0, False, 7),
        (0, 0.2, False, 1),
    ],
)
def test_k_count(n, k, compat, expected):
    assert S.k_count(n, k, compat) == expected


def test_k_count_rejects_k_outside_unit_interval():
    for k in (0.0, 1.5):
        with pytest.raises(ValueError):
            S.k_count(10, k)


def test_min_k_hand_computed():
    lp = arrays([-1, -5, -2, -8, -3])
    np.testing.assert_array_equal(S.min_k(lp, k=0.4), [-6.5])  # n_k = 2: mean(-8, -5)
    np.testing.assert_array_equal(S.min_k(lp, k=1.0), [-3.8])


def test_min_k_with_no_token_selected(caplog):
    lp = arrays([-1, -5, -2, -8, -3], [])
    ours = S.min_k(lp, k=0.1)  # floor(0.5) = 0 -> our rule keeps 1 token
    assert ours[0] == -8.0 and np.isnan(ours[1])
    with caplog.at_level(logging.WARNING, logger="miaflow.llm"):
        compat = S.min_k(lp, k=0.1, compat=True)  # the originals' NaN, replaced by 0
    assert compat[0] == 0.0 and np.isnan(compat[1])
    assert "1 of 2 texts have n_k = 0" in caplog.text


def test_min_k_plus_plus_hand_computed():
    # s = ((-1 + 2) / 1, (-6 + 3) / 3) = (1, -1)
    lp, mu, var = arrays([-1, -6]), arrays([-2, -3]), arrays([1, 9])
    np.testing.assert_allclose(S.min_k_plus_plus(lp, mu, var, k=0.5), [-1.0])
    np.testing.assert_allclose(S.min_k_plus_plus(lp, mu, var, k=1.0), [0.0])


def test_min_k_plus_plus_zero_sigma(caplog):
    # s = ((-1 + 2) / 2, sigma = 0 -> 0, (-4 + 2) / 1) = (0.5, 0, -2); n_k = floor(2.1) = 2
    lp, mu, var = arrays([-1, -3, -4]), arrays([-2, -2, -2]), arrays([4, 0, 1])
    with caplog.at_level(logging.WARNING, logger="miaflow.llm"):
        score = S.min_k_plus_plus(lp, mu, var, k=0.7)
    np.testing.assert_allclose(score, [-1.0])
    assert "1 tokens with sigma_t = 0" in caplog.text


def test_reference_neighbor_recall_arithmetic():
    np.testing.assert_array_equal(S.reference(np.array([-1, -2]), np.array([-3, -1])), [2, -1])
    neighbours = np.array([[-2.0, -4.0], [np.nan, -3.0], [np.nan, np.nan]])
    out = S.neighbor(np.array([-1.0, -2.0, -1.0]), neighbours)
    np.testing.assert_array_equal(out[:2], [2.0, 1.0])
    assert np.isnan(out[2])
    np.testing.assert_array_equal(S.recall(np.array([-3.0]), np.array([-2.0])), [1.5])


def test_recall_prefix_drops_oldest_shots():
    # target 10, then shots from the newest: 3 + 1 -> 14, 4 + 1 -> 19, 5 + 1 -> 25 > 20
    assert S.recall_prefix([5, 4, 3], separator_length=1, target_length=10, context=20) == 2
    assert S.recall_prefix([5, 4, 3], separator_length=1, target_length=10, context=19) == 2
    assert S.recall_prefix([5, 4, 3], separator_length=1, target_length=10, context=25) == 3
    # the newest shot does not fit: nothing is kept, even though the oldest alone would fit
    assert S.recall_prefix([1, 10], separator_length=0, target_length=5, context=10) == 0
    assert S.recall_prefix([5, 4, 3], separator_length=1, target_length=10, context=13) == 0


def test_recall_avg_and_avgp():
    R = np.array([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(S.recall_avg(R), [2.0, 3.0])
    np.testing.assert_array_equal(S.recall_avgp(R), [1.5, 3.5])


def test_row_auroc_equals_sklearn_with_ties():
    rng = np.random.default_rng(0)
    R = rng.integers(0, 4, size=(20, 30)).astype(float)  # many ties
    labels = rng.random(30) < 0.4
    expected = [roc_auc_score(labels, row) for row in R]
    np.testing.assert_allclose(S.row_auroc(R, labels), expected, rtol=0, atol=1e-12)
    assert np.isnan(S.row_auroc(R, np.ones(30, dtype=bool))).all()


def test_prefix_scores_kendall_equals_scipy():
    rng = np.random.default_rng(1)
    R = rng.integers(0, 5, size=(6, 12)).astype(float)
    f = rng.integers(0, 4, size=12).astype(float)
    expected = [kendalltau(row, f).statistic for row in R]
    np.testing.assert_allclose(S.prefix_scores(R, f, "kendall"), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("n", [2, 7, S.PAIRWISE_KENDALL_MAX, S.PAIRWISE_KENDALL_MAX + 1])
def test_row_kendall_is_scipys_statistic_bit_for_bit(n, monkeypatch):
    """All pairs at once (in chunks of rows) up to PAIRWISE_KENDALL_MAX scores, scipy's own
    beyond: ties, a constant row, a row with a NaN and a constant f as scipy has them."""
    monkeypatch.setattr(S, "PAIRWISE_ELEMENTS", 3 * n)  # several chunks
    rng = np.random.default_rng(n)
    R = np.vstack([rng.normal(size=(4, n)), rng.integers(0, 3, size=(4, n)), np.ones((1, n))])
    R[2, -1] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns of a constant input
        for f in (rng.normal(size=n), rng.integers(0, 3, size=n).astype(float), np.ones(n)):
            expected = np.array([kendalltau(row, f).statistic for row in R])
            np.testing.assert_array_equal(S.row_kendall(R, f), expected)


def test_prefix_scores_rankdist_by_hand():
    R = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0], [1.0, 1.0, 2.0]])
    f = np.array([10.0, 20.0, 30.0])  # ranks 1, 2, 3
    # row 0: distance 0 -> 1; row 1: mean(2, 0, 2) = 4/3 -> 1 - 2/3; row 2: ranks (1.5, 1.5, 3),
    # mean(0.5, 0.5, 0) = 1/3 -> 1 - 1/6
    np.testing.assert_allclose(S.prefix_scores(R, f, "rankdist"), [1.0, 1 / 3, 5 / 6])
    assert S.SCORING_FUNCTIONS == ("auroc", "kendall", "rankdist")
    with pytest.raises(ValueError):
        S.prefix_scores(R, f, "spearman")


# R for the hand-computed EM-MIA iterations; rows are prefixes, columns targets.
R_HAND = np.array(
    [
        [4.0, 1.0, 3.0, 2.0],
        [1.0, 2.0, 3.0, 4.0],
        [2.0, 2.0, 2.0, 2.0],
        [1.0, 4.0, 2.0, 3.0],
    ]
)


def test_em_mia_iterations_by_hand():
    f, history = S.em_mia(R_HAND, np.array([0.9, 0.1, 0.8, 0.2]), iterations=2)
    # Iteration 1: median 0.5, pseudo-members {0, 2}.
    #   row 0: members (4, 3) beat non-members (1, 2) in all 4 pairs      -> AUROC 1
    #   row 1: members (1, 3) vs (2, 4): only 3 > 2 wins                  -> 1/4
    #   row 2: all tied                                                   -> 1/2
    #   row 3: members (1, 2) vs (4, 3): no wins                          -> 0
    #   f = -r = (-1, -0.25, -0.5, 0)
    # Iteration 2: median -0.375, pseudo-members {1, 3}.
    #   row 0: (1, 2) vs (4, 3) -> 0; row 1: (2, 4) vs (1, 3): 3 of 4 pairs -> 3/4;
    #   row 2 -> 1/2; row 3: (4, 3) vs (1, 2) -> 1; f = (0, -0.75, -0.5, -1)
    assert history.shape == (3, 4)
    np.testing.assert_array_equal(history[0], [0.9, 0.1, 0.8, 0.2])
    np.testing.assert_array_equal(history[1], [-1.0, -0.25, -0.5, 0.0])
    np.testing.assert_array_equal(history[2], [0.0, -0.75, -0.5, -1.0])
    np.testing.assert_array_equal(f, history[2])


def test_em_mia_sanitises_initial_scores():
    _, history = S.em_mia(R_HAND, np.array([np.inf, np.nan, -np.inf, 0.5]), iterations=1)
    np.testing.assert_array_equal(history[0], [0.5 + 1e-6, 0.0, 0.5 - 1e-6, 0.5])
    with pytest.raises(ValueError):
        S.em_mia(R_HAND[:3], np.zeros(4))


def test_em_mia_constant_initial_scores_give_zero(caplog):
    with caplog.at_level(logging.WARNING, logger="miaflow.llm"):
        f, history = S.em_mia(R_HAND, np.full(4, 0.3), iterations=1)
    np.testing.assert_array_equal(f, np.zeros(4))
    np.testing.assert_array_equal(history[1], np.zeros(4))
    assert "pseudo-labels have one class" in caplog.text


def synthetic_recall_matrix(seed: int, n: int = 200):
    """R where non-member prefixes raise members' ReCaLL scores and member prefixes are noise."""
    rng = np.random.default_rng(seed)
    member = np.arange(n) < n // 2
    R = 1.0 + rng.normal(0.0, 0.3, size=(n, n))
    R[~member] += 0.5 * member[None, :]
    weak = member + rng.normal(0.0, 2.0, size=n)
    return R, member, weak


@pytest.mark.parametrize("scoring", S.SCORING_FUNCTIONS)
def test_em_mia_recovers_members_from_weak_init(scoring):
    R, member, weak = synthetic_recall_matrix(seed=3)
    assert roc_auc_score(member, weak) < 0.75
    f, history = S.em_mia(R, weak, scoring=scoring)
    assert history.shape == (11, member.size)
    assert roc_auc_score(member, f) > 0.9


def test_recall_top_prefix_picks_best_non_member_row():
    is_member = np.array([True, True, False, False])
    R = np.array(
        [
            [9.0, 8.0, 1.0, 2.0],  # member row separating perfectly: never chosen
            [1.0, 2.0, 3.0, 4.0],
            [2.0, 2.0, 2.0, 2.0],  # AUROC 1/2
            [5.0, 4.0, 1.0, 0.0],  # AUROC 1
        ]
    )
    np.testing.assert_array_equal(S.recall_top_prefix(R, is_member), R[3])
    R[2] = [7.0, 6.0, 0.0, 1.0]  # tie at AUROC 1: the lowest index wins
    np.testing.assert_array_equal(S.recall_top_prefix(R, is_member), R[2])


def test_recall_random_prefix_draws_from_the_asked_group():
    R = np.arange(36, dtype=float).reshape(6, 6)
    is_member = np.array([True, False, True, False, False, True])
    for member in (True, False):
        candidates = np.flatnonzero(is_member == member)
        for seed in range(5):
            row = S.recall_random_prefix(R, is_member, member=member, seed=seed)
            expected = candidates[np.random.default_rng(seed).choice(candidates.size)]
            np.testing.assert_array_equal(row, R[expected])
