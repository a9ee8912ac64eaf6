"""ε lower bounds of the privacy audit: the counts-level theorems against hand arithmetic and
Steinke et al.'s ceiling, the estimators' threshold and guess selection, and `falsified`."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest, norm

from miaflow.privacy import bounds, estimators
from miaflow.privacy.estimators import EpsilonBound


def test_clopper_pearson_upper_is_the_exact_one_sided_bound():
    # 0 errors of 100 at 97.5%: (1 - p)^100 = 0.025, p = 1 - exp(ln 0.025 / 100)
    #   ln 0.025 = -3.688879, / 100 = -0.03688879, exp = 0.963783, p = 0.036217
    assert bounds.clopper_pearson_upper(0, 100, 0.975) == pytest.approx(0.036217, abs=1e-6)
    # agrees with scipy's exact binomial interval of the one-sided test
    for errors, trials in [(3, 50), (17, 40), (39, 40)]:
        exact = binomtest(errors, trials, alternative="less").proportion_ci(0.95).high
        assert bounds.clopper_pearson_upper(errors, trials, 0.95) == pytest.approx(exact)
    # no rate below 1 is excluded when every trial erred, or there were none
    assert bounds.clopper_pearson_upper(np.array([5, 0]), np.array([5, 0]), 0.95).tolist() == [1, 1]


def test_epsilon_from_rates_takes_the_tighter_of_the_two_dp_inequalities():
    # FPR 0.1, FNR 0.2, δ 0: max(log(0.8 / 0.1), log(0.9 / 0.2)) = max(2.079442, 1.504077)
    assert bounds.epsilon_from_rates(0.1, 0.2, 0.0) == pytest.approx(math.log(8))
    # δ 0.05: log((1 - 0.05 - 0.2) / 0.1) = log 7.5 = 2.014903
    assert bounds.epsilon_from_rates(0.1, 0.2, 0.05) == pytest.approx(math.log(7.5))
    # a test no better than chance constrains nothing: log(0.4/0.5) and log(0.5/0.6) are < 0
    assert bounds.epsilon_from_rates(0.5, 0.6, 0.0) == 0.0
    # error-free point estimate
    assert bounds.epsilon_from_rates(0.0, 0.3, 0.0) == math.inf


def test_clopper_pearson_bound_with_no_errors_in_100_and_100_runs():
    # FPR and FNR bounds at 97.5% each (95% together): 0.036217 (above)
    # ε = log((1 - 1e-5 - 0.036217) / 0.036217) = log(0.963773 / 0.036217) = log 26.6111 = 3.2813
    assert bounds.clopper_pearson_bound(0, 100, 0, 100, 1e-5) == pytest.approx(3.2813, abs=1e-4)
    # the ceiling grows with the number of runs
    ceilings = [bounds.clopper_pearson_bound(0, n, 0, n, 1e-5) for n in (50, 100, 500, 2000)]
    assert np.all(np.diff(ceilings) > 0)


def test_gdp_mu_and_its_epsilon():
    # μ ≥ Φ⁻¹(1 - 0.1) - Φ⁻¹(0.2) = 1.281552 + 0.841621 = 2.123173
    assert bounds.gdp_mu(0.1, 0.2) == pytest.approx(2.123173, abs=1e-6)
    assert bounds.gdp_mu(0.6, 0.5) == 0.0  # rates summing past 1 bound nothing
    assert bounds.gdp_mu(1.0, 0.0) == 0.0  # Φ⁻¹(0) - Φ⁻¹(0): guessing "in" for all
    assert math.isnan(bounds.gdp_mu(math.nan, 0.2))  # no canary-out runs: no rate
    assert math.isnan(bounds.gdp_epsilon(math.nan, 1e-5))
    # δ(0) of 1-GDP: Φ(0.5) - Φ(-0.5) = 0.691462 - 0.308538 = 0.382925
    assert bounds.gdp_delta(0.0, 1.0) == pytest.approx(0.382925, abs=1e-6)
    # δ(1) of 1-GDP: Φ(-0.5) - e·Φ(-1.5) = 0.308538 - 2.718282 · 0.066807 = 0.126936
    assert bounds.gdp_delta(1.0, 1.0) == pytest.approx(0.126936, abs=1e-5)
    assert bounds.gdp_epsilon(1.0, 0.126936) == pytest.approx(1.0, abs=1e-4)
    eps = bounds.gdp_epsilon(1.0, 1e-5)
    assert bounds.gdp_delta(eps, 1.0) == pytest.approx(1e-5, rel=1e-6)
    assert bounds.gdp_epsilon(0.0, 1e-5) == 0.0
    assert bounds.gdp_epsilon(1.0, 0.5) == 0.0  # 1-GDP already meets δ = 0.5 at ε = 0


def test_one_run_p_value_by_hand():
    # r = 2 guesses, both right, ε = log 3: q = 3/4, P[Bin(2, 3/4) ≥ 2] = 9/16
    assert bounds.one_run_p_value(10, 2, 2, math.log(3), 0.0) == pytest.approx(9 / 16)
    # δ = 0.01, m = 10: f(1) - f(2) = P[B = 1] = 2·(3/4)(1/4) = 6/16, over i = 1: 0.375;
    # f(0) - f(2) = 7/16, over i = 2: 0.21875; so 9/16 + 2·10·0.01·0.375 = 0.5625 + 0.075
    assert bounds.one_run_p_value(10, 2, 2, math.log(3), 0.01) == pytest.approx(0.6375)
    with pytest.raises(ValueError):
        bounds.one_run_p_value(10, 2, 3, 1.0, 0.0)


def test_one_run_ceiling_is_steinke_et_al_s():
    # all r = 100 guesses right at 95%: q = 0.05^(1/100) = exp(-2.995732 / 100) = 0.970487,
    # ε = log(0.970487 / 0.029513) = log 32.884 = 3.4930 (the paper's "about 3.5")
    assert bounds.one_run_ceiling(100) == pytest.approx(3.4930, abs=1e-4)
    assert bounds.one_run_bound(1000, 100, 100, 0.0) == pytest.approx(bounds.one_run_ceiling(100))
    assert bounds.one_run_bound(1000, 100, 100, 1e-5) <= bounds.one_run_ceiling(100)
    ceilings = [bounds.one_run_ceiling(r) for r in (10, 100, 1000)]
    assert np.all(np.diff(ceilings) > 0)  # more guesses, higher attainable bound
    assert bounds.one_run_ceiling(0) == 0.0


def test_one_run_bound_edges():
    assert bounds.one_run_bound(1000, 100, 0, 1e-5) == 0.0  # no right guess
    assert bounds.one_run_bound(1000, 100, 50, 1e-5) == 0.0  # chance
    # the bound is the ε where the p-value meets β
    eps = bounds.one_run_bound(1000, 200, 160, 1e-5)
    assert 0 < eps
    assert bounds.one_run_p_value(1000, 200, 160, eps, 1e-5) == pytest.approx(0.05, abs=1e-6)


def test_fdp_refutation_recursion_by_hand():
    # m = 4 canaries, r = 2 guesses both right, β = 0.5, μ = 1:
    # r_2 = 0.5·2/4 = 0.25, h_2 = 0
    # i = 1: h_1 = Φ(Φ⁻¹(0.25) - 1), r_1 = 0.25 + 1/(2 - 1)·h_1
    # i = 0: h_0 = max(h_1, Φ(Φ⁻¹(r_1) - 1)), r_0 = r_1; excess r_0 + h_0 - 2/4
    h1 = norm.cdf(norm.ppf(0.25) - 1)
    r1 = 0.25 + h1
    h0 = max(h1, norm.cdf(norm.ppf(r1) - 1))
    assert bounds._gdp_refuted_excess(4, 2, 2, 1.0, 0.5) == pytest.approx(r1 + h0 - 0.5)
    # at μ = 0: h_1 = 0.25, r_1 = 0.5, h_0 = 0.5: excess 1.0 - 0.5, μ = 0 is refuted
    assert bounds._gdp_refuted_excess(4, 2, 2, 0.0, 0.5) == pytest.approx(0.5)
    mu = bounds.one_run_fdp_mu(4, 2, 2, confidence=0.5)
    assert bounds._gdp_refuted_excess(4, 2, 2, mu, 0.5) == pytest.approx(0.0, abs=1e-7)


def test_one_run_fdp_bound_edges():
    assert bounds.one_run_fdp_bound(1000, 100, 0, 1e-5) == 0.0
    assert bounds.one_run_fdp_bound(1000, 100, 50, 1e-5) == 0.0
    # one guess refutes nothing at 95% (a perfectly private mechanism is right w.p. 1/2)
    assert bounds.one_run_fdp_bound(1000, 1, 1, 1e-5) == 0.0
    more = [bounds.one_run_fdp_bound(1000, r, r, 1e-5) for r in (10, 100, 1000)]
    assert 0 < more[0] < more[1] < more[2]


def test_clopper_pearson_estimator_at_a_fixed_threshold_by_hand():
    scores = [0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9]
    included = [0, 0, 0, 1, 0, 1, 1, 1]
    bound = estimators.clopper_pearson(scores, included, 0.0, thresholds=[0.5])
    # guessed in: 0.6, 0.7, 0.8, 0.9 (one of them out: 1 false positive of 4 negatives);
    # 0.4 is in but below: 1 false negative of 4 positives
    assert (bound.false_positives, bound.negatives, bound.false_negatives, bound.positives) == (
        1,
        4,
        1,
        4,
    )
    assert bound.epsilon_point == pytest.approx(math.log(0.75 / 0.25))  # log 3 = 1.098612
    # bounds at 97.5%: 1 of 4 -> 0.8059, so (1 - 0.8059)/0.8059 < 1: no bound from 8 runs
    assert bound.epsilon_lower == 0.0
    assert (bound.tests, bound.threshold, bound.canaries) == (1, 0.5, 8)


def test_clopper_pearson_estimator_bonferroni_over_the_thresholds_tried():
    rng = np.random.default_rng(0)
    included = rng.random(400) < 0.5
    scores = rng.normal(size=400) + 3 * included
    tried = [0.5, 1.5, 2.5]
    bound = estimators.clopper_pearson(scores, included, 1e-5, thresholds=tried)
    assert bound.tests == 3 and bound.threshold in tried
    counts = (bound.false_positives, bound.negatives, bound.false_negatives, bound.positives)
    assert bound.positives + bound.negatives == 400  # every run counts, none was spent choosing
    # each threshold read at 1 - 0.05/3, the best kept
    each = [
        estimators.clopper_pearson(
            scores, included, 1e-5, 1 - 0.05 / 3, thresholds=[t]
        ).epsilon_lower
        for t in tried
    ]
    assert bound.epsilon_lower == pytest.approx(max(each))
    assert bound.epsilon_lower == pytest.approx(
        bounds.clopper_pearson_bound(*counts, 1e-5, 1 - 0.05 / 3)
    )


def test_split_selection_reads_only_the_other_half_and_repeats():
    rng = np.random.default_rng(1)
    included = rng.random(257) < 0.5
    scores = rng.normal(size=257) + 4 * included
    first = estimators.clopper_pearson(scores, included, 1e-5, seed=3)
    assert first == estimators.clopper_pearson(scores, included, 1e-5, seed=3)
    assert first.positives + first.negatives == 257 - 128
    assert 0 < first.epsilon_lower <= first.epsilon_max
    assert first.epsilon_max == pytest.approx(
        bounds.clopper_pearson_bound(0, first.negatives, 0, first.positives, 1e-5)
    )


def test_perfect_separation_reaches_the_ceiling_and_more_runs_raise_it():
    reached = []
    for runs in (64, 256, 1024):
        included = np.arange(runs) % 2 == 0
        bound = estimators.clopper_pearson(included.astype(float), included, 1e-5)
        assert bound.epsilon_lower == pytest.approx(bound.epsilon_max)
        assert bound.epsilon_point == math.inf
        reached.append(bound.epsilon_lower)
    assert reached[0] < reached[1] < reached[2]


def test_uninformative_scores_bound_nothing_even_where_fpr_plus_fnr_exceeds_one():
    """The lowest threshold guesses nearly everything "in" (FPR, FNR bounds near 1 and 0): the
    μ there is negative, which must not count as evidence (flipping its sign would)."""
    rng = np.random.default_rng(2)
    for trial in range(5):
        included = rng.random(300) < 0.5
        scores = rng.normal(size=300)
        grid = np.quantile(scores, [0.01, 0.25, 0.5, 0.75, 0.99])  # extreme thresholds included
        assert estimators.gdp(scores, included, 1e-5, thresholds=grid).epsilon_lower == 0.0
        assert estimators.gdp(scores, included, 1e-5, seed=trial).epsilon_lower == 0.0
        assert estimators.clopper_pearson(scores, included, 1e-5, seed=trial).epsilon_lower == 0.0


def test_gdp_estimator_by_hand():
    scores = np.r_[np.zeros(50), np.ones(50)]
    included = np.r_[np.zeros(45, bool), np.ones(5, bool), np.ones(45, bool), np.zeros(5, bool)]
    bound = estimators.gdp(scores, included, 1e-5, thresholds=[0.5])
    # FP 5 of 50 negatives, FN 5 of 50 positives, bounds at 97.5% each
    fpr = fnr = bounds.clopper_pearson_upper(5, 50, 0.975)
    mu = norm.ppf(1 - fpr) - norm.ppf(fnr)
    assert bound.epsilon_lower == pytest.approx(bounds.gdp_epsilon(mu, 1e-5))
    # point: μ = Φ⁻¹(0.9) - Φ⁻¹(0.1) = 2·1.281552
    assert bound.epsilon_point == pytest.approx(bounds.gdp_epsilon(2 * 1.2815516, 1e-5), abs=1e-5)


def test_guess_grid():
    # 5% of 500 = 25 guesses: 13 in, 12 out; 10%: 50; 20%: 100; 50%: 250; all: 500
    assert estimators.guess_grid(500) == [(13, 12), (25, 25), (50, 50), (125, 125), (250, 250)]
    assert estimators.guess_grid(4) == [(1, 0), (1, 1), (2, 2)]  # rounded, at least 1, no repeats


def test_one_run_estimator_counts_guesses_on_both_sides():
    scores = np.array([5.0, 4.0, 3.0, 2.0, 1.0, 0.0])
    included = np.array([1, 0, 1, 0, 1, 0], bool)
    bound = estimators.one_run(scores, included, 0.0, guesses=[(2, 2)])
    # "in" for 5, 4 (one right); "out" for 1, 0 (0 is out: one right)
    assert (bound.guesses_in, bound.guesses_out, bound.correct, bound.tests) == (2, 2, 2, 1)
    assert bound.epsilon_point == 0.0  # 2 of 4 right: log(2/2) = 0
    assert bound.epsilon_lower == 0.0


def test_one_run_estimator_all_right_stays_under_the_ceiling():
    included = np.arange(500) % 2 == 0
    scores = included + np.linspace(0, 0.5, 500)  # every member above every non-member
    bound = estimators.one_run(scores, included, 1e-5)
    grid = estimators.guess_grid(500)
    assert bound.correct == bound.guesses_in + bound.guesses_out
    assert bound.epsilon_lower == pytest.approx(bound.epsilon_max)
    # Bonferroni over the 5 guess counts: the ceiling at 1 - 0.05/5 for the most guesses
    assert bound.epsilon_max <= bounds.one_run_ceiling(500, 1 - 0.05 / len(grid))
    assert bound.epsilon_point == math.inf
    fdp = estimators.one_run_fdp(scores, included, 1e-5)
    assert fdp.epsilon_lower == pytest.approx(fdp.epsilon_max) and fdp.epsilon_lower > 0


def test_one_run_estimators_with_every_guess_wrong_give_zero():
    included = np.arange(200) % 2 == 0
    scores = -included.astype(float)  # members score lowest: every guess is wrong
    for estimate in (estimators.one_run, estimators.one_run_fdp):
        bound = estimate(scores, included, 1e-5)
        assert bound.correct == 0 and bound.epsilon_lower == 0.0


def test_inputs_are_checked():
    with pytest.raises(ValueError):
        estimators.clopper_pearson([0.1, 0.2], [1], 1e-5)  # one score per trial
    with pytest.raises(ValueError):
        estimators.one_run([0.1, math.nan], [1, 0], 1e-5)
    with pytest.raises(ValueError):
        estimators.one_run([0.1, 0.2], [1, 0], 1e-5, guesses=[(2, 1)])
    with pytest.raises(ValueError):
        estimators.clopper_pearson([0.1], [1], 1e-5)  # no split of one run
    # two canaries of one training run are not two independent trials
    with pytest.raises(ValueError, match="one trial per independent run"):
        estimators.gdp([0.1, 0.2, 0.3], [1, 0, 1], 1e-5, runs=[0, 0, 1])
    assert estimators.clopper_pearson([0.1, 0.2], [1, 0], 1e-5, runs=[4, 7]).canaries == 2


def _row(method: str, **fields) -> EpsilonBound:
    common = dict(epsilon_lower=0.0, epsilon_point=0.0, epsilon_max=0.0, confidence=0.95)
    return EpsilonBound(method=method, **{**common, **fields})


def test_falsified_corrects_over_the_target_s_deciding_rows():
    # one-run row: all 100 guesses right, δ = 0: alone 3.4930 at 95% (above); with a second
    # deciding row each is read at 97.5%: q = 0.025^(1/100) = 0.963783, log(q/(1-q)) = 3.2813
    one_run = _row(
        "one-run", canaries=1000, delta=0.0, tests=1, guesses_in=50, guesses_out=50, correct=100
    )
    runs = _row(
        "clopper-pearson",
        canaries=200,
        delta=0.0,
        tests=1,
        positives=100,
        negatives=100,
        false_positives=50,
        false_negatives=50,
    )
    gaussian = _row("gdp", canaries=200, delta=0.0, tests=1, epsilon_lower=50.0)
    assert estimators.falsified([one_run], 3.4)
    assert not estimators.falsified([one_run, runs], 3.4)
    assert estimators.falsified([one_run, runs], 3.2)
    assert not estimators.falsified([one_run, runs, gaussian], 3.4)  # Gaussian rows don't count
    assert not estimators.falsified([gaussian], 10.0)
    # a row's own selection correction multiplies in: tests = 2 is read at 1 - 0.05/2 alone
    assert not estimators.falsified([_row(**{**one_run.__dict__, "tests": 2})], 3.4)
    table = estimators.bounds_table([one_run, runs, gaussian])
    assert [EpsilonBound.from_row(r) for r in table.to_dict("records")] == [one_run, runs, gaussian]
    assert estimators.falsified(table, 3.2) and not estimators.falsified(table, 3.4)
