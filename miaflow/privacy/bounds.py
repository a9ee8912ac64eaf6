"""Lower bounds on ε from what a privacy audit counted: the theorems behind the estimators.

An (ε, δ)-DP mechanism limits how well any membership test can do, so error counts (over
independent training runs) or correct-guess counts (over one run's canaries) that are too good
refute ε. Each `*_bound` takes counts and a confidence and returns the largest ε so refuted: a
mechanism that really is (ε', δ)-DP for an ε' below the result produces counts this good with
probability at most 1 − confidence. Which counts may be passed (independent trials, thresholds
and guess counts chosen without peeking) is `miaflow.privacy.estimators`' business.

`gdp_bound` and `one_run_fdp_bound` assume more than (ε, δ)-DP: that the mechanism's trade-off
curve is Gaussian (μ-GDP; Dong, Roth & Su 2022), as DP-SGD's nearly is. They bound μ and report
the ε of the μ-GDP curve at δ: tighter than the others, and valid only under that assumption.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

# Bracket searches double their upper end until it is refuted no more; beyond this, give up.
SEARCH_LIMIT = 1e3


def clopper_pearson_upper(errors: np.ndarray, trials: np.ndarray, confidence: float) -> np.ndarray:
    """One-sided Clopper–Pearson upper bound on a rate seen `errors` times in `trials`: the rate
    under which at most `errors` has probability 1 − confidence, a Beta(errors + 1, trials −
    errors) quantile. 1 where errors = trials (also for no trials): no rate below 1 is excluded."""
    from scipy.stats import beta

    errors, trials = np.asarray(errors, dtype=np.int64), np.asarray(trials, dtype=np.int64)
    below = errors < trials
    quantile = beta.ppf(confidence, errors + 1, np.where(below, trials - errors, 1))
    return np.where(below, quantile, 1.0)


def _log_ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """log(numerator / denominator) for rates: −inf where the numerator is not positive, +inf
    where only the denominator is 0."""
    numerator, denominator = np.asarray(numerator, float), np.asarray(denominator, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.log(numerator) - np.log(denominator)
    return np.where(numerator > 0, ratio, -np.inf)


def epsilon_from_rates(fpr: np.ndarray, fnr: np.ndarray, delta: float) -> np.ndarray:
    """The least ε at which (ε, δ)-DP allows a test with these error rates. DP requires
    FPR + e^ε·FNR ≥ 1 − δ and FNR + e^ε·FPR ≥ 1 − δ (Kairouz, Oh & Viswanath 2015), so
    ε ≥ max(log((1 − δ − FNR)/FPR), log((1 − δ − FPR)/FNR)); 0 where neither binds, inf where a
    rate is 0 against a positive numerator (a point estimate from error-free counts)."""
    fpr, fnr = np.asarray(fpr, float), np.asarray(fnr, float)
    first = _log_ratio(1.0 - delta - fnr, fpr)
    second = _log_ratio(1.0 - delta - fpr, fnr)
    return np.maximum(np.maximum(first, second), 0.0)


def clopper_pearson_bound(
    false_positives: np.ndarray,
    negatives: np.ndarray,
    false_negatives: np.ndarray,
    positives: np.ndarray,
    delta: float,
    confidence: float = 0.95,
) -> np.ndarray:
    """ε lower bound of Jagielski, Ullman & Oprea (NeurIPS 2020) from one test's errors over
    independent runs: upper bounds on FPR (of `negatives` canary-out runs) and FNR (of
    `positives` canary-in runs), each at 1 − β/2 so that both hold together at the confidence
    1 − β (a union bound), put into `epsilon_from_rates`. Works elementwise on arrays."""
    half = 1.0 - (1.0 - confidence) / 2
    fpr = clopper_pearson_upper(false_positives, negatives, half)
    fnr = clopper_pearson_upper(false_negatives, positives, half)
    return epsilon_from_rates(fpr, fnr, delta)


def gdp_mu(fpr: np.ndarray, fnr: np.ndarray) -> np.ndarray:
    """The least μ at which μ-GDP allows a test with these error rates. μ-GDP's trade-off curve
    is G_μ(α) = Φ(Φ⁻¹(1 − α) − μ) (Dong, Roth & Su 2022), and FNR ≥ G_μ(FPR) gives
    μ ≥ Φ⁻¹(1 − FPR) − Φ⁻¹(FNR); 0 where the rates sum to 1 or more (NaN for NaN rates). The
    curve is symmetric, so the reversed inequality adds nothing: a negative μ is no evidence."""
    from scipy.special import ndtri

    fpr, fnr = np.asarray(fpr, float), np.asarray(fnr, float)
    with np.errstate(invalid="ignore"):
        mu = ndtri(1.0 - fpr) - ndtri(fnr)  # NaN only where both are infinite: FPR 1, FNR 0
    return np.where(
        np.isnan(fpr) | np.isnan(fnr), np.nan, np.where(np.isnan(mu), 0.0, np.maximum(mu, 0.0))
    )


def gdp_mu_bound(
    false_positives: np.ndarray,
    negatives: np.ndarray,
    false_negatives: np.ndarray,
    positives: np.ndarray,
    confidence: float = 0.95,
) -> np.ndarray:
    """Lower bound on μ from one test's errors over independent runs: `gdp_mu` of the
    Clopper–Pearson upper bounds on FPR and FNR, each at 1 − β/2 (as `clopper_pearson_bound`)."""
    half = 1.0 - (1.0 - confidence) / 2
    fpr = clopper_pearson_upper(false_positives, negatives, half)
    fnr = clopper_pearson_upper(false_negatives, positives, half)
    return gdp_mu(fpr, fnr)


def gdp_delta(epsilon: float, mu: float) -> float:
    """δ(ε) of μ-GDP: Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2) (Dong, Roth & Su 2022, Corollary 2.13),
    its second term in logs (e^ε overflows where the Φ underflows)."""
    from scipy.special import log_ndtr, ndtr

    if mu <= 0:
        return 0.0
    return float(
        ndtr(-epsilon / mu + mu / 2) - math.exp(epsilon + log_ndtr(-epsilon / mu - mu / 2))
    )


def gdp_epsilon(mu: float, delta: float) -> float:
    """ε of μ-GDP at δ: the root of `gdp_delta`(ε) = δ, which falls in ε. It lies below
    μ²/2 + μ·Φ⁻¹(1 − δ), where the first term of δ(ε) alone is δ, so that brackets the search.
    0 for μ = 0 or a δ that μ-GDP meets at ε = 0; inf for infinite μ, NaN for NaN."""
    from scipy.optimize import brentq
    from scipy.special import ndtri

    if math.isnan(mu):
        return math.nan
    if not mu > 0 or gdp_delta(0.0, mu) <= delta:
        return 0.0
    if math.isinf(mu):
        return math.inf
    high = mu * mu / 2 + mu * float(ndtri(1.0 - delta))
    return float(brentq(lambda eps: gdp_delta(eps, mu) - delta, 0.0, high, xtol=1e-10))


def gdp_bound(
    false_positives: int,
    negatives: int,
    false_negatives: int,
    positives: int,
    delta: float,
    confidence: float = 0.95,
) -> float:
    """ε lower bound through Gaussian DP, assuming the mechanism's trade-off curve is Gaussian:
    the lower bound on μ of `gdp_mu_bound`, reported as μ-GDP's ε at δ (`gdp_epsilon`), as
    Nasr et al. (USENIX Security 2023) audit DP-SGD."""
    mu = gdp_mu_bound(false_positives, negatives, false_negatives, positives, confidence)
    return gdp_epsilon(float(mu), delta)


def one_run_p_value(
    canaries: int, guesses: int, correct: int, epsilon: float, delta: float
) -> float:
    """The bound of Steinke, Nasr & Jagielski (NeurIPS 2023) for (ε, δ)-DP on the probability
    of `correct` or more right guesses among `guesses` about `canaries` canaries each included
    w.p. 1/2 (the p-value their paper's code computes). With f(v) = P[Binomial(r, q) ≥ v] and
    q = e^ε/(1 + e^ε), the accuracy of ε-randomised response, it is
    f(v) + 2mδ·max_{1≤i≤v} (f(v − i) − f(v))/i, at most 1; for δ = 0 the binomial tail alone."""
    from scipy.stats import binom

    if not 0 <= correct <= guesses <= canaries:
        raise ValueError(
            f"need 0 <= correct <= guesses <= canaries, got {correct}, {guesses}, {canaries}"
        )
    q = 1.0 / (1.0 + math.exp(-epsilon))
    tail = float(binom.sf(correct - 1, guesses, q))
    if correct == 0 or delta == 0:
        return min(tail, 1.0)
    steps = np.arange(1, correct + 1)
    # f(v − i) − f(v) = P[v − i ≤ B < v] = cdf(v − 1) − cdf(v − i − 1)
    mass = binom.cdf(correct - 1, guesses, q) - binom.cdf(correct - steps - 1, guesses, q)
    return min(tail + 2 * canaries * delta * float(np.max(mass / steps)), 1.0)


def _largest_refuted(excess: Callable[[float], float], low: float = 0.0) -> float:
    """The largest x ≥ low with excess(x) > 0 for a function that is positive for small x and
    falls (an ε or μ refuted by the counts): `low` if excess(low) ≤ 0, else a root found by
    doubling an upper end and Brent's method; inf past SEARCH_LIMIT."""
    from scipy.optimize import brentq

    if excess(low) <= 0:
        return low
    high = max(1.0, 2 * low)
    while excess(high) > 0:
        low, high = high, 2 * high
        if high > SEARCH_LIMIT:
            return math.inf
    return float(brentq(excess, low, high, xtol=1e-9))


def one_run_bound(
    canaries: int, guesses: int, correct: int, delta: float, confidence: float = 0.95
) -> float:
    """ε lower bound of Steinke, Nasr & Jagielski from one run: the largest ε whose p-value
    (`one_run_p_value`) for these counts is below 1 − confidence; 0 if even ε = 0 is not
    refuted. The p-value grows with ε, so the refuted ε form an interval from 0."""
    beta = 1.0 - confidence
    return _largest_refuted(
        lambda eps: beta - one_run_p_value(canaries, guesses, correct, eps, delta)
    )


def one_run_ceiling(guesses: int, confidence: float = 0.95) -> float:
    """The most `one_run_bound` can give with `guesses` guesses, reached when all are right and
    δ = 0: q^r = β at q = β^(1/r), so ε = log(q/(1 − q)): 3.49 at r = 100 and 95%, the reason
    Steinke, Nasr & Jagielski's audits need many canaries. δ > 0 only lowers it."""
    if guesses < 1:
        return 0.0
    log_q = math.log(1.0 - confidence) / guesses
    return log_q - math.log(-math.expm1(log_q))


def _gdp_refuted_excess(canaries: int, guesses: int, correct: int, mu: float, beta: float) -> float:
    """Positive when μ-GDP is refuted at level β by `correct` of `guesses` right guesses about
    `canaries` canaries: the audit with abstentions (`audit_rh_with_cap`) of Mahloujifar, Melis &
    Chaudhuri (2024). From r_v = β·v/m and h_v = β·(r − v)/m it runs i = v − 1, ..., 0:
    h_i = max(h_{i+1}, f̄⁻¹(r_{i+1})), r_i = r_{i+1} + i/(r − i)·(h_i − h_{i+1}), where
    f̄⁻¹(x) = Φ(Φ⁻¹(x) − μ) inverts 1 − G_μ, and refutes when r_0 + h_0 > r/m. Once h stops
    growing neither changes again, so the loop stops there; r is capped at 1 (it bounds a
    probability), which can only make refuting harder."""
    from scipy.special import ndtr, ndtri

    right, wrong = beta * correct / canaries, beta * (guesses - correct) / canaries
    for i in range(correct - 1, -1, -1):
        widened = max(wrong, float(ndtr(ndtri(right) - mu)))
        if widened == wrong:
            break
        right = min(1.0, right + i / (guesses - i) * (widened - wrong))
        wrong = widened
    return right + wrong - guesses / canaries


def one_run_fdp_mu(canaries: int, guesses: int, correct: int, confidence: float = 0.95) -> float:
    """The largest μ refuted by one run's counts under the f-DP audit of Mahloujifar, Melis &
    Chaudhuri (`_gdp_refuted_excess`); a larger μ bends the curve further, so the refuted μ
    form an interval from 0."""
    if not 0 <= correct <= guesses <= canaries:
        raise ValueError(
            f"need 0 <= correct <= guesses <= canaries, got {correct}, {guesses}, {canaries}"
        )
    if correct == 0:
        return 0.0
    beta = 1.0 - confidence
    return _largest_refuted(lambda mu: _gdp_refuted_excess(canaries, guesses, correct, mu, beta))


def one_run_fdp_bound(
    canaries: int, guesses: int, correct: int, delta: float, confidence: float = 0.95
) -> float:
    """ε lower bound of the one-run f-DP audit, assuming a Gaussian trade-off curve: the ε at δ
    of the largest refuted μ (`one_run_fdp_mu`, `gdp_epsilon`)."""
    return gdp_epsilon(one_run_fdp_mu(canaries, guesses, correct, confidence), delta)
