from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from miaflow.llm.separability import (
    auroc_difference_ci,
    bag_of_words_scores,
    embedding_scores,
    mean_auroc_difference_ci,
    selection_scores,
    selection_table,
    separability,
    separability_flags,
)

VOCABULARY = np.array([f"w{k}" for k in range(200)])


def _texts(rng: np.random.Generator, words: np.ndarray, n: int) -> list[str]:
    return [" ".join(rng.choice(words, 12)) for _ in range(n)]


def _selection(n: int, separable: bool, seed: int = 0) -> tuple[list[str], np.ndarray]:
    """n texts of 12 words, half members: members and non-members draw their words from
    disjoint halves of the vocabulary (separable) or all from the same one (a random draw)."""
    rng = np.random.default_rng(seed)
    member = np.r_[np.ones(n // 2, bool), np.zeros(n - n // 2, bool)]
    if separable:
        texts = _texts(rng, VOCABULARY[:100], n // 2) + _texts(rng, VOCABULARY[100:], n - n // 2)
    else:
        texts = _texts(rng, VOCABULARY, n)
    return texts, member


def test_bag_of_words_separable_selection():
    texts, member = _selection(48, separable=True)
    scores = bag_of_words_scores(texts, member)
    assert roc_auc_score(member, scores) == 1.0


def test_bag_of_words_random_selection_is_near_chance_and_cheap():
    texts, member = _selection(600, separable=False)
    started = time.process_time()
    scores = bag_of_words_scores(texts, member)
    assert time.process_time() - started < 1.0  # 600 texts, 5 folds
    # Chance: the null sd of an AUROC on 300 + 300 is sqrt(601 / (12 * 300 * 300)) ~ 0.024.
    assert abs(roc_auc_score(member, scores) - 0.5) < 0.1


def test_embeddings_separable_and_random():
    rng = np.random.default_rng(1)
    member = np.r_[np.ones(100, bool), np.zeros(100, bool)]
    vectors = rng.normal(size=(200, 16))
    shifted = vectors + 4.0 * member[:, None] * np.eye(16)[0]  # members moved 4 sd along axis 0
    assert roc_auc_score(member, embedding_scores(shifted, member)) > 0.99
    # Null sd on 100 + 100: sqrt(201 / (12 * 100 * 100)) ~ 0.041.
    assert abs(roc_auc_score(member, embedding_scores(vectors, member)) - 0.5) < 0.15


def test_separability_reports_both_forms_and_the_higher():
    texts, member = _selection(60, separable=False, seed=2)
    vectors = np.random.default_rng(3).normal(size=(60, 8)) + 4.0 * member[:, None]
    result = separability(texts, member, vectors)
    assert result.form == "embeddings" and result.auroc == result.auroc_embeddings
    assert result.auroc_embeddings > result.auroc_bag_of_words
    assert roc_auc_score(member, result.scores) == result.auroc
    alone = separability(texts, member)
    assert alone.form == "bag_of_words" and np.isnan(alone.auroc_embeddings)
    assert alone.auroc == result.auroc_bag_of_words


def test_seeded_folds_are_deterministic():
    texts, member = _selection(60, separable=False, seed=4)
    first = bag_of_words_scores(texts, member, seed=7)
    np.testing.assert_array_equal(bag_of_words_scores(texts, member, seed=7), first)
    assert not np.array_equal(bag_of_words_scores(texts, member, seed=8), first)


def test_difference_by_hand():
    # Members score (4, 3), non-members (2, 1) for the attack: every pair ordered, AUROC 1.
    # Baseline: members (1, 3), non-members (2, 4): only 3 > 2 of the 4 pairs -> 1/4.
    member = np.array([1, 1, 0, 0], bool)
    difference, low, high = auroc_difference_ci(
        member, np.array([4.0, 3, 2, 1]), np.array([1.0, 3, 2, 4]), n_resamples=200
    )
    assert difference == 1 - 1 / 4
    assert low <= difference <= high


def test_bootstrap_equals_sklearn_on_the_same_draws():
    rng = np.random.default_rng(5)
    member = rng.random(40) < 0.5
    attack = np.round(rng.normal(member * 1.0, 1.0), 1)  # ties: midranks must match sklearn
    baseline = rng.normal(size=40)
    difference, low, high = auroc_difference_ci(member, attack, baseline, n_resamples=300, seed=9)
    # The same stratified draws, AUROCs from sklearn one resample at a time.
    draws_rng = np.random.default_rng(9)
    members, nonmembers = np.flatnonzero(member), np.flatnonzero(~member)
    draws = np.hstack(
        [
            draws_rng.choice(members, (300, members.size)),
            draws_rng.choice(nonmembers, (300, nonmembers.size)),
        ]
    )
    labels = np.r_[np.ones(members.size, bool), np.zeros(nonmembers.size, bool)]
    differences = [
        roc_auc_score(labels, attack[d]) - roc_auc_score(labels, baseline[d]) for d in draws
    ]
    assert (low, high) == pytest.approx(tuple(np.quantile(differences, [0.025, 0.975])))
    assert difference == roc_auc_score(member, attack) - roc_auc_score(member, baseline)


def test_interval_of_identical_and_of_clearly_better_scores():
    rng = np.random.default_rng(6)
    member = np.r_[np.ones(100, bool), np.zeros(100, bool)]
    baseline = rng.normal(size=200)
    assert auroc_difference_ci(member, baseline, baseline) == (0.0, 0.0, 0.0)
    better = baseline + 3.0 * member
    difference, low, high = auroc_difference_ci(member, better, baseline)
    assert 0 < low < difference < high
    assert auroc_difference_ci(member, better, baseline) == (difference, low, high)  # seeded


def test_flags():
    assert separability_flags(0.93, 0.05) == ["selection_separable"]
    assert separability_flags(0.70, -0.02) == ["attack_not_above_selection"]
    assert separability_flags(0.90, 0.0) == ["selection_separable", "attack_not_above_selection"]
    assert separability_flags(0.60, 0.10) == []


def test_the_mean_interval_of_one_scored_set_is_its_own_interval():
    rng = np.random.default_rng(3)
    member = np.r_[np.ones(30, bool), np.zeros(30, bool)]
    attack, baseline = member + rng.normal(size=60), rng.normal(size=60)
    one = mean_auroc_difference_ci([(member, attack, baseline)], 300, seed=5)
    assert one == auroc_difference_ci(member, attack, baseline, 300, seed=5)
    two = mean_auroc_difference_ci([(member, attack, baseline)] * 2, 300, seed=5)
    assert two[0] == pytest.approx(one[0])  # the same set twice: the same mean difference
    assert two[2] - two[1] < one[2] - one[1]  # and, resampled twice, a narrower interval


def _selection_inputs(separable: bool, attack_signal: float) -> tuple:
    texts, member = _selection(60, separable, seed=2)
    rng = np.random.default_rng(4)
    sets = [("lm/easy", r, np.arange(60), member, texts) for r in (0, 1)]
    separable_scores = selection_scores(sets, "text")
    attack = pd.DataFrame(
        {
            "dataset": "text",
            "target_model": "lm/easy",
            "attack": "llm-loss",
            "repeat": np.repeat([0, 1], 60),
            "sample_id": np.tile(np.arange(60), 2),
            "score": np.tile(attack_signal * member, 2) + rng.normal(size=120),
        }
    )
    return separable_scores, attack


def test_a_separable_selection_is_flagged_beside_a_weak_attack():
    separable_scores, attack = _selection_inputs(separable=True, attack_signal=0.0)
    assert set(separable_scores["form"]) == {"bag_of_words"}  # no embeddings given
    (row,) = selection_table(
        separable_scores, attack, {("text", "lm/easy"): "llm-loss"}, n_resamples=300
    ).itertuples()
    assert row.separability > 0.95 and row.separability_form == "bag_of_words"
    assert row.n_target_models == 2 and row.difference_high < 0
    assert row.selection_flags == ["selection_separable", "attack_not_above_selection"]


def test_an_attack_beyond_a_random_selection_has_no_flag():
    separable_scores, attack = _selection_inputs(separable=False, attack_signal=4.0)
    (row,) = selection_table(
        separable_scores, attack, {("text", "lm/easy"): "llm-loss"}, n_resamples=300
    ).itertuples()
    assert row.separability < 0.8 and row.difference_low > 0 and row.selection_flags == []
