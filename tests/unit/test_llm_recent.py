"""The recent language-model attacks' formulas (DC-PDD, PAC, Con-ReCall, SaMIA, EZ-MIA, CAMIA)
against values computed by hand from each paper's definition on small fixtures, their edge
cases, and the model-free inputs (PAC's swaps, Con-ReCall's member shots)."""

from __future__ import annotations

import logging
import math
import zlib

import numpy as np
import pandas as pd
import pytest

from miaflow.llm import camia, recent
from miaflow.llm.recent_inputs import member_shots, swap_augment

# --- DC-PDD ---------------------------------------------------------------------------------------


def test_token_frequencies_are_laplace_smoothed_over_the_reference_tokens():
    # counts of tokens 0..3 in [0 1 1] [1 2]: 1, 3, 1, 0 over N' = 5 tokens, |V| = 4
    frequencies = recent.token_frequencies([[0, 1, 1], [1, 2]], vocab_size=4)
    np.testing.assert_allclose(frequencies, [2 / 9, 4 / 9, 2 / 9, 1 / 9])
    with pytest.raises(ValueError, match="outside a vocabulary"):
        recent.token_frequencies([[4]], vocab_size=4)


def test_dc_pdd_averages_the_clipped_calibrated_probability_of_first_occurrences():
    frequencies = np.array([2 / 9, 4 / 9, 2 / 9, 1 / 9])
    token_ids = [[3, 0, 2, 0, 1]]  # scored tokens 0 2 0 1; the second 0 is not a first occurrence
    logprobs = [np.log([0.5, 0.25, 0.9, 0.1])]
    # alpha_t = p_t * log(1 / f(x_t)): 0.5 log 4.5 = 0.752 (clipped to a = 0.5), 0.25 log 4.5 =
    # 0.376, 0.1 log 2.25 = 0.081
    expected = (0.5 + 0.25 * math.log(4.5) + 0.1 * math.log(2.25)) / 3
    np.testing.assert_allclose(recent.dc_pdd(logprobs, token_ids, frequencies, a=0.5), [expected])
    np.testing.assert_allclose(recent.dc_pdd(logprobs, token_ids, frequencies, a=0.01), [0.01])


def test_dc_pdd_needs_one_log_probability_per_scored_token_and_gives_nan_without_one():
    frequencies = np.full(4, 0.25)
    assert np.isnan(recent.dc_pdd([np.array([])], [[2]], frequencies))[0]
    with pytest.raises(ValueError, match="3 scored tokens"):
        recent.dc_pdd([np.zeros(2)], [[0, 1, 2, 3]], frequencies)


# --- PAC ------------------------------------------------------------------------------------------


def test_polarized_distance_contrasts_the_likeliest_and_least_likely_tokens():
    logprobs = np.array([-0.1, -0.2, -3.0, -0.5, -1.0, -0.05, -2.0, -0.3, -0.4, -0.6])
    # n = 10: far region max(1, floor(0.5)) = 1 token: -0.05; local floor(3.0) = 3 tokens:
    # -3, -2, -1, mean -2
    np.testing.assert_allclose(recent.polarized_distance([logprobs]), [-0.05 - -2.0])


def test_pac_is_the_augmentations_mean_distance_minus_the_texts_own():
    logprobs = np.array([-0.1, -0.2, -3.0, -0.5, -1.0, -0.05, -2.0, -0.3, -0.4, -0.6])
    augmented = [[np.full(4, -1.0), np.array([0.0, -4.0])]]  # distances 0 and 0 - -4 = 4
    np.testing.assert_allclose(recent.pac([logprobs], augmented), [(0 + 4) / 2 - 1.95])
    with pytest.raises(ValueError, match="augmentations for 0 of 1"):
        recent.pac([logprobs], [])


def test_swap_augment_permutes_words_with_the_papers_number_of_swaps_seeded_per_text():
    text = "the quick brown fox jumps over the lazy dog today"  # 10 words: 3 swaps each
    augmented = swap_augment([text, "alone"], [7, 8], n_augment=4, seed=1)
    assert len(augmented[0]) == 4 and augmented[1] == ["alone"] * 4
    for edited in augmented[0]:
        assert sorted(edited.split(" ")) == sorted(text.split(" "))
        moved = sum(a != b for a, b in zip(edited.split(" "), text.split(" ")))
        assert moved <= 2 * 3  # at most two positions change per swap
    assert any(edited != text for edited in augmented[0])
    assert swap_augment([text], [7], n_augment=4, seed=1) == augmented[:1]  # alone or in a batch
    assert swap_augment([text], [9], n_augment=4, seed=1) != augmented[:1]
    assert swap_augment([text], [7], n_augment=4, seed=2) != augmented[:1]


# --- Con-ReCall -----------------------------------------------------------------------------------


def test_con_recall_contrasts_the_non_member_and_member_prefix_likelihoods():
    # (LL(x; P_nm) - gamma LL(x; P_m)) / LL(x) = (-3 - 0.5 * -1) / -2 = 1.25
    score = recent.con_recall(np.array([-3.0]), np.array([-1.0]), np.array([-2.0]), gamma=0.5)
    np.testing.assert_allclose(score, [1.25])
    np.testing.assert_allclose(recent.con_recall([-3.0], [-1.0], [-2.0], gamma=0.0), [1.5])


def test_member_shots_never_include_a_scored_text_and_are_seeded():
    members, scored = np.arange(20), np.arange(0, 20, 2)
    shots = member_shots(members, scored, 5, seed=3)
    assert len(set(shots)) == 5 and not set(shots) & set(scored) and set(shots) <= set(members)
    np.testing.assert_array_equal(shots, member_shots(members, scored, 5, seed=3))
    with pytest.raises(ValueError, match="only 10 members are not scored"):
        member_shots(members, scored, 11, seed=3)


# --- SaMIA ----------------------------------------------------------------------------------------


def test_rouge_1_counts_each_word_at_most_as_often_as_in_both_lists():
    # overlap of {a, b, b, c} and {b, b, b, d}: b twice
    assert recent.rouge_1(list("abbc"), list("bbbd")) == (2 / 4, 2 / 4, 0.5)
    recall, precision, f1 = recent.rouge_1(["x", "y"], ["x", "y", "z", "w"])
    assert (recall, precision) == (0.5, 1.0)
    assert f1 == pytest.approx(2 * 0.5 * 1.0 / (0.5 + 1.0))
    assert recent.rouge_1([], ["x"]) == recent.rouge_1(["x"], []) == (0.0, 0.0, 0.0)


def test_split_prefix_cuts_at_the_floor_of_the_ratio():
    assert recent.split_prefix("one two three four five") == ("one two", ["three", "four", "five"])
    assert recent.split_prefix("alone") == ("", ["alone"])


def test_samia_averages_the_samples_recall_of_the_true_continuation():
    texts = ["a b c d e f"]  # prompt "a b c", continuation d e f
    samples = [[" d e x", "f"]]  # recalls 2/3 and 1/3
    np.testing.assert_allclose(recent.samia(texts, samples), [0.5])
    zipped = (2 / 3 * len(zlib.compress(b"d e x")) + 1 / 3 * len(zlib.compress(b"f"))) / 2
    np.testing.assert_allclose(recent.samia(texts, samples, zlib=True), [zipped])
    assert np.isnan(recent.samia(texts, [[]]))[0]


# --- EZ-MIA ---------------------------------------------------------------------------------------


def test_ez_mia_is_the_positive_over_negative_shift_on_the_target_errors():
    target = np.array([-1.0, -2.0, -0.5, -3.0, -1.0])
    reference = np.array([-5.0, -3.0, -1.0, -2.5, -0.2])
    top1 = np.array([False, False, True, False, False])
    # error zone: tokens 1, 3, 4 (token 0 is left out, token 2 is the target's top-1)
    # shifts +1, -0.5, -0.8: P / N = 1 / 1.3
    np.testing.assert_allclose(recent.ez_mia([target], [reference], [top1]), [1 / 1.3])


def test_ez_mia_degenerate_texts_are_memorised_unbounded_or_undefined_and_zero_in_compat(caplog):
    # one error token (the target's top-1 elsewhere): memorised, +inf above every ratio
    few = (np.array([0.0, -1.0, -1.0]), np.array([0.0, -2.0, -2.0]), np.array([0, 0, 1]))
    positive = (np.array([0.0, -1.0, -1.0]), np.array([0.0, -2.0, -3.0]), np.zeros(3))
    unshifted = (np.array([0.0, -1.0, -2.0]), np.array([0.0, -1.0, -2.0]), np.zeros(3))
    arrays = [list(texts) for texts in zip(few, positive, unshifted)]
    with caplog.at_level(logging.WARNING, logger="miaflow.llm"):
        scores = recent.ez_mia(*arrays)
    assert scores[0] == scores[1] == np.inf and np.isnan(scores[2])
    assert "1 of 3 texts with fewer than 2 error tokens and 1 with only positive" in caplog.text
    np.testing.assert_array_equal(recent.ez_mia(*arrays, compat=True), [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="one tokenizer"):
        recent.ez_mia([np.zeros(3)], [np.zeros(4)], [np.zeros(3)])


# --- CAMIA ----------------------------------------------------------------------------------------


def test_lempel_ziv_complexity_counts_distinct_phrases_per_token():
    # levels on [min, 0] = [-4, 0]: -4 -> 0, 0 -> 99; two bins: 0 1 0 1 0 1, parsed into
    # the phrases 0 | 1 | 0 1 (the last 0 1 repeats one): 3 phrases over 6 tokens
    alternating = np.array([-4.0, 0.0, -4.0, 0.0, -4.0, 0.0])
    assert camia.lempel_ziv_complexity(alternating, bins=2) == 3 / 6
    # a constant sequence is one symbol: 0 | 0 0 | (0 0 0 would overrun): 2 phrases over 4
    assert camia.lempel_ziv_complexity(np.full(4, -1.0), bins=3) == 2 / 4


def test_approximate_entropy_follows_pincus_with_a_tolerance_in_standard_deviations():
    x = np.array([1.0, 2.0, 1.0, 2.0, 1.0])  # std 0.49, tolerance 0.8 * 0.49 < 1: exact matches
    # m = 1: the three 1s match 3/5 templates, the two 2s 2/5; m = 2: each pair matches 2/4
    phi_1 = (3 * math.log(3 / 5) + 2 * math.log(2 / 5)) / 5
    phi_2 = 4 * math.log(2 / 4) / 4
    assert camia.approximate_entropy(x, m=1, r=0.8) == pytest.approx(abs(phi_1 - phi_2))
    assert camia.approximate_entropy(np.arange(3.0), m=2) == 0.0  # at most m + 1 values


def test_slope_and_share_above_the_previous_mean():
    assert camia.slope(np.array([1.0, 3.0, 5.0])) == pytest.approx(2.0)
    assert camia.slope(np.array([4.0])) == 0.0
    # -1 > -2 (mean of -2), -3 < -1.5 (mean of -2, -1), -1.5 > -2 (mean of -2, -1, -3)
    assert camia.share_above_previous_mean(np.array([-2.0, -1.0, -3.0, -1.5])) == 2 / 3


def test_camia_signals_are_oriented_so_that_low_means_member():
    p = np.array([0.5, 0.25, 0.5, 0.9])
    logprobs, token_ids = np.log(p), [7, 1, 2, 1, 3]  # scored tokens 1 2 1 3: diversity 3/4
    repeated = np.vstack([np.log(p), np.log(p) + 0.5, np.log(p) + 0.25])
    signals = camia.camia_signals([logprobs], [token_ids], [repeated]).iloc[0]
    loss = -np.log(p).mean()
    assert signals["loss_all"] == pytest.approx(loss)
    assert signals["cal_ppl_200"] == pytest.approx(math.exp(loss) / (3 / 4))
    assert signals["cal_loss_all"] == pytest.approx(loss / (3 / 4))
    assert signals["below_1"] == -3 / 4  # losses 0.69, 1.39, 0.69, 0.11: three at most 1
    assert signals["above_mean_all"] == -3 / 4  # all l_t but log 0.25 above their mean
    assert signals["above_prev_all"] == -2 / 3  # log .25 < log .5; log .5 > mean; log .9 > mean
    # the second copy's losses are 0.5 lower and the third's 0.25
    assert signals["repeat1_loss_all"] == pytest.approx(0.5)
    assert signals["repeat2_loss_300"] == pytest.approx(0.25)
    assert {"slope_600", "apen_1000", "lz_5", "repeat2_lz_3"} <= set(signals.index)
    assert "repeat1_loss_all" not in camia.camia_signals([logprobs], [token_ids]).columns


def test_camia_repeat_signals_flag_a_text_that_the_context_teaches():
    # a non-member copied from the context: high losses, then low; a member: low throughout
    non_member = np.vstack([np.full(8, -4.0), np.full(8, -0.5), np.full(8, -0.4)])
    member = np.vstack([np.full(8, -0.5), np.full(8, -0.45), np.full(8, -0.4)])
    signals = camia.camia_signals(
        [non_member[0], member[0]], [list(range(9))] * 2, [non_member, member]
    )
    for name in ("repeat1_loss_all", "repeat2_cal_ppl_all", "repeat1_below_2", "slope_600"):
        assert signals[name][1] < signals[name][0], name


def test_camia_combines_empirical_p_values_under_the_non_member_population():
    population = pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0], "b": [10.0, 20.0, 30.0, 40.0]})
    signals = pd.DataFrame({"a": [0.5, 4.0], "b": [25.0, 5.0]})
    # p-values (share of the population at or below, ties counted half as percentileofscore's
    # "rank"): text 1: 0 and 2/4; text 2: (3 + 4 + 1) / 8 = 1 and 0
    np.testing.assert_allclose(camia.camia(signals, population), [-0.25, -0.5])
    fisher = -2 * (math.log(1e-10) + math.log(0.5))  # p = 0 clipped to 1e-10
    assert camia.camia(signals, population, "fisher")[0] == pytest.approx(fisher)
    with pytest.raises(ValueError, match="lacks signals"):
        camia.camia(signals.assign(c=1.0), population)
    with pytest.raises(ValueError, match="unknown method"):
        camia.camia(signals, population, "tippett")
