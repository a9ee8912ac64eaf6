"""ε lower bounds from attack scores on canaries (higher = member), with thresholds and guess
counts chosen without peeking, as records a table can hold.

Two settings, four estimators (the counts-level theorems are in `miaflow.privacy.bounds`):

- many independent training runs, one canary trial per run (the canary in w.p. 1/2): `scores`
  and `included` hold one entry per run. `clopper_pearson` (Jagielski, Ullman & Oprea 2020) and
  `gdp` (Gaussian DP, as Nasr et al. 2023 audit). Pooling one run's many canaries here would
  treat dependent outcomes as independent trials, which these bounds do not allow.
- one run with m canaries, each in w.p. 1/2: one entry per canary. `one_run` (Steinke, Nasr &
  Jagielski 2023) and `one_run_fdp` (Mahloujifar, Melis & Chaudhuri 2024), whose theorems are
  made for exactly that dependence.

`gdp` and `one_run_fdp` assume the mechanism's trade-off curve is Gaussian (μ-GDP); they are
tighter, but only `clopper_pearson` and `one_run` can refute an (ε, δ) claim as such, and only
they count in `falsified`.

No peeking: a bound is valid only if the threshold (or guess count) it is read at was not chosen
on the outcomes it counts. The threshold estimators split by default: the runs are shuffled
(seeded) into halves, the threshold that maximises the bound on the first half is applied to the
second, and only the second half's counts give the bound; given `thresholds` fixed in advance,
each is tried on all runs at confidence 1 − β/T (Bonferroni over the T tried) and the best kept.
The one-run estimators use Bonferroni over a grid of guess counts fixed in advance (halving one
run's canaries would halve the ceiling). Every record keeps `tests`, the number of hypotheses its
selection was corrected for, so `falsified` can correct once more over a target's rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields

import numpy as np
import pandas as pd

from miaflow.privacy.bounds import (
    clopper_pearson_bound,
    epsilon_from_rates,
    gdp_bound,
    gdp_epsilon,
    gdp_mu,
    gdp_mu_bound,
    one_run_bound,
    one_run_fdp_bound,
)

CLOPPER_PEARSON, GDP, ONE_RUN, ONE_RUN_FDP = "clopper-pearson", "gdp", "one-run", "one-run-fdp"
# The two settings above as tables of trials name them: one canary trial per independent run
# (read by clopper_pearson and gdp), and one run's canaries (one_run, one_run_fdp).
RUNS, ONE_RUN_TRIALS = "runs", "one-run"
# Fractions of the canaries guessed about, each half "in" (top scores), half "out" (bottom).
DEFAULT_GUESS_FRACTIONS = (0.05, 0.1, 0.2, 0.5, 1.0)


@dataclass(frozen=True)
class EpsilonBound:
    """One estimator's answer. `epsilon_lower` is the bound at `confidence`; `epsilon_point` the
    raw estimate at the same threshold or guesses (inf when error-free; never for decisions);
    `epsilon_max` the most this estimator can give with these trials. `tests` is the Bonferroni
    factor already applied (1 for a split). Threshold estimators fill `threshold` and the counts
    of the runs the bound reads; one-run estimators the guesses and how many were right."""

    method: str
    epsilon_lower: float
    epsilon_point: float
    epsilon_max: float
    canaries: int
    delta: float
    confidence: float
    tests: int
    threshold: float | None = None
    positives: int | None = None
    negatives: int | None = None
    false_negatives: int | None = None
    false_positives: int | None = None
    guesses_in: int | None = None
    guesses_out: int | None = None
    correct: int | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, object]) -> EpsilonBound:
        """Back from a table row, where missing counts read as NaN and counts as floats."""
        kinds = {f.name: f.type for f in fields(cls)}
        values: dict[str, object] = {}
        for name, kind in kinds.items():
            value = row[name]
            if isinstance(value, float) and math.isnan(value) and "None" in str(kind):
                value = None
            elif value is not None and str(kind).startswith("int"):
                value = int(value)
            values[name] = value
        return cls(**values)


def bounds_table(bounds: Iterable[EpsilonBound]) -> pd.DataFrame:
    """Records as rows, one column per field."""
    return pd.DataFrame([asdict(b) for b in bounds], columns=[f.name for f in fields(EpsilonBound)])


def _checked(
    scores: Sequence[float], included: Sequence[bool], runs: Sequence[int] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Scores as finite floats and inclusion bits as booleans, one of each per trial; with the
    trials' training-run ids, at most one trial per run."""
    scores, included = np.asarray(scores, dtype=np.float64), np.asarray(included)
    if scores.ndim != 1 or scores.shape != included.shape:
        raise ValueError(f"need one score per trial, got {scores.shape} and {included.shape}")
    if runs is not None and (len(runs) != scores.size or len(np.unique(runs)) != scores.size):
        raise ValueError(
            "need exactly one trial per independent run: one run's canaries are not "
            "independent trials (use one_run or one_run_fdp for them)"
        )
    if not np.all(np.isfinite(scores)):
        raise ValueError("scores must be finite")
    if not np.isin(included, [0, 1]).all():
        raise ValueError("included must be 0/1 or boolean")
    return scores, included.astype(bool)


def _counts(
    scores: np.ndarray, included: np.ndarray, thresholds: np.ndarray
) -> tuple[np.ndarray, int, np.ndarray, int]:
    """(false positives, negatives, false negatives, positives) of "in iff score ≥ t" for each
    threshold t."""
    inside, outside = np.sort(scores[included]), np.sort(scores[~included])
    false_negatives = np.searchsorted(inside, thresholds, side="left")
    false_positives = outside.size - np.searchsorted(outside, thresholds, side="left")
    return false_positives, outside.size, false_negatives, inside.size


def _candidates(scores: np.ndarray) -> np.ndarray:
    """Thresholds worth trying: midway between neighbouring distinct scores, so a threshold that
    separates one half's scores sits where it is least likely to misplace the other's."""
    distinct = np.unique(scores)
    return (distinct[:-1] + distinct[1:]) / 2 if distinct.size > 1 else distinct


Strength = Callable[[tuple[np.ndarray, int, np.ndarray, int], float], np.ndarray]


def _chosen_threshold(
    scores: np.ndarray,
    included: np.ndarray,
    confidence: float,
    thresholds: Sequence[float] | None,
    seed: int,
    strength: Strength,
) -> tuple[float, tuple[int, int, int, int], int, float]:
    """The threshold, the counts the bound may read there, the Bonferroni factor and the
    confidence to read them at; `strength(counts, confidence)` ranks thresholds (the bound, or
    something that grows with it)."""
    if thresholds is None:
        if scores.size < 2:
            raise ValueError("a split needs at least 2 trials")
        order = np.random.default_rng(seed).permutation(scores.size)
        select, evaluate = order[: scores.size // 2], order[scores.size // 2 :]
        candidates = _candidates(scores[select])
        ranks = strength(_counts(scores[select], included[select], candidates), confidence)
        best = float(candidates[int(np.argmax(ranks))])
        fp, negatives, fn, positives = _counts(scores[evaluate], included[evaluate], [best])
        return best, (int(fp[0]), negatives, int(fn[0]), positives), 1, confidence
    candidates = np.asarray(thresholds, dtype=np.float64)
    if candidates.ndim != 1 or not candidates.size:
        raise ValueError("thresholds must be a non-empty sequence")
    level = 1.0 - (1.0 - confidence) / candidates.size
    fp, negatives, fn, positives = _counts(scores, included, candidates)
    best = int(np.argmax(strength((fp, negatives, fn, positives), level)))
    counts = (int(fp[best]), negatives, int(fn[best]), positives)
    return float(candidates[best]), counts, candidates.size, level


def _rates(counts: tuple[int, int, int, int]) -> tuple[float, float]:
    """Empirical (FPR, FNR); NaN for a class without trials."""
    fp, negatives, fn, positives = counts
    return (fp / negatives if negatives else math.nan, fn / positives if positives else math.nan)


def clopper_pearson(
    scores: Sequence[float],
    included: Sequence[bool],
    delta: float,
    confidence: float = 0.95,
    thresholds: Sequence[float] | None = None,
    seed: int = 0,
    runs: Sequence[int] | None = None,
) -> EpsilonBound:
    """ε lower bound from one canary trial per independent run (Jagielski, Ullman & Oprea 2020):
    Clopper–Pearson upper bounds on FPR and FNR of "in iff score ≥ threshold" into
    max(log((1 − δ − FNR̄)/FPR̄), log((1 − δ − FPR̄)/FNR̄)). Threshold by a seeded split, or
    Bonferroni over `thresholds` fixed in advance (module docstring). Given each trial's `runs`
    (training-run ids), refuses two trials from one run."""
    scores, included = _checked(scores, included, runs)

    def strength(counts: tuple, level: float) -> np.ndarray:
        return clopper_pearson_bound(*counts, delta, level)

    threshold, counts, tests, level = _chosen_threshold(
        scores, included, confidence, thresholds, seed, strength
    )
    fp, negatives, fn, positives = counts
    return EpsilonBound(
        method=CLOPPER_PEARSON,
        epsilon_lower=float(clopper_pearson_bound(*counts, delta, level)),
        epsilon_point=float(epsilon_from_rates(*_rates(counts), delta)),
        epsilon_max=float(clopper_pearson_bound(0, negatives, 0, positives, delta, level)),
        canaries=scores.size,
        delta=delta,
        confidence=confidence,
        tests=tests,
        threshold=threshold,
        positives=positives,
        negatives=negatives,
        false_negatives=fn,
        false_positives=fp,
    )


def gdp(
    scores: Sequence[float],
    included: Sequence[bool],
    delta: float,
    confidence: float = 0.95,
    thresholds: Sequence[float] | None = None,
    seed: int = 0,
    runs: Sequence[int] | None = None,
) -> EpsilonBound:
    """ε lower bound from one canary trial per independent run, assuming the mechanism's
    trade-off curve is Gaussian (μ-GDP): the Clopper–Pearson bounds of `clopper_pearson` give
    μ ≥ Φ⁻¹(1 − FPR̄) − Φ⁻¹(FNR̄), reported as μ-GDP's ε at δ. Threshold selection and
    `runs` as there."""
    scores, included = _checked(scores, included, runs)

    def strength(counts: tuple, level: float) -> np.ndarray:
        return gdp_mu_bound(*counts, level)  # ε(μ) grows with μ: rank by μ

    threshold, counts, tests, level = _chosen_threshold(
        scores, included, confidence, thresholds, seed, strength
    )
    fp, negatives, fn, positives = counts
    return EpsilonBound(
        method=GDP,
        epsilon_lower=gdp_bound(*counts, delta, level),
        epsilon_point=gdp_epsilon(float(gdp_mu(*_rates(counts))), delta),
        epsilon_max=gdp_bound(0, negatives, 0, positives, delta, level),
        canaries=scores.size,
        delta=delta,
        confidence=confidence,
        tests=tests,
        threshold=threshold,
        positives=positives,
        negatives=negatives,
        false_negatives=fn,
        false_positives=fp,
    )


def guess_grid(
    canaries: int, fractions: Sequence[float] = DEFAULT_GUESS_FRACTIONS
) -> list[tuple[int, int]]:
    """(in, out) guess counts fixed before any score is seen: for each fraction f, round(f·m)
    guesses (at least 1), the larger half "in"; duplicates dropped, order kept."""
    grid: list[tuple[int, int]] = []
    for fraction in fractions:
        total = min(canaries, max(1, round(fraction * canaries)))
        pair = (total - total // 2, total // 2)
        if pair not in grid:
            grid.append(pair)
    return grid


def _correct_guesses(
    scores: np.ndarray, included: np.ndarray, guesses_in: int, guesses_out: int
) -> int:
    """Right guesses of "in" for the `guesses_in` highest scores and "out" for the `guesses_out`
    lowest; ties are broken by canary order, which the inclusion bits do not depend on."""
    order = np.argsort(-scores, kind="stable")
    inside = order[:guesses_in]
    outside = order[scores.size - guesses_out :] if guesses_out else order[:0]
    return int(included[inside].sum() + (~included[outside]).sum())


def _one_run_estimate(
    method: str,
    bound: Callable[[int, int, int, float, float], float],
    point: Callable[[int, int], float],
    scores: Sequence[float],
    included: Sequence[bool],
    delta: float,
    confidence: float,
    guesses: Sequence[tuple[int, int]] | None,
) -> EpsilonBound:
    """The one-run estimators' shared procedure: every (in, out) guess count of the grid read at
    confidence 1 − β/(grid size), the best kept; `point(correct, guesses)` is the raw estimate."""
    scores, included = _checked(scores, included)
    canaries = scores.size
    grid = list(guesses) if guesses is not None else guess_grid(canaries)
    if not grid or any(
        k_in < 0 or k_out < 0 or k_in + k_out > canaries or k_in + k_out == 0
        for k_in, k_out in grid
    ):
        raise ValueError(f"guess counts must be >= 0, sum to 1..{canaries}: {grid}")
    level = 1.0 - (1.0 - confidence) / len(grid)
    answers = []
    for k_in, k_out in grid:
        correct = _correct_guesses(scores, included, k_in, k_out)
        answers.append((bound(canaries, k_in + k_out, correct, delta, level), correct, k_in, k_out))
    lower, correct, k_in, k_out = max(answers, key=lambda answer: answer[0])
    return EpsilonBound(
        method=method,
        epsilon_lower=lower,
        epsilon_point=point(correct, k_in + k_out),
        epsilon_max=max(bound(canaries, k + j, k + j, delta, level) for k, j in grid),
        canaries=canaries,
        delta=delta,
        confidence=confidence,
        tests=len(grid),
        guesses_in=k_in,
        guesses_out=k_out,
        correct=correct,
    )


def one_run(
    scores: Sequence[float],
    included: Sequence[bool],
    delta: float,
    confidence: float = 0.95,
    guesses: Sequence[tuple[int, int]] | None = None,
) -> EpsilonBound:
    """ε lower bound from one run's canaries (Steinke, Nasr & Jagielski 2023): guess "in" for
    the k+ highest scores and "out" for the k− lowest, abstain on the rest; from r = k+ + k−
    guesses with v right, the largest ε (with δ, by their theorem) not consistent with v.
    Bonferroni over the (k+, k−) of `guesses` (default `guess_grid`). The point estimate is the
    ε of randomised response with the guesses' accuracy, log(v/(r − v))."""
    return _one_run_estimate(
        ONE_RUN,
        one_run_bound,
        _randomised_response_epsilon,
        scores,
        included,
        delta,
        confidence,
        guesses,
    )


def _randomised_response_epsilon(correct: int, guesses: int) -> float:
    """ε whose randomised response is right with the guesses' accuracy; 0 below 1/2."""
    if correct == guesses:
        return math.inf
    return max(0.0, math.log(correct / (guesses - correct))) if correct else 0.0


def one_run_fdp(
    scores: Sequence[float],
    included: Sequence[bool],
    delta: float,
    confidence: float = 0.95,
    guesses: Sequence[tuple[int, int]] | None = None,
) -> EpsilonBound:
    """ε lower bound from one run's canaries by the f-DP audit of Mahloujifar, Melis & Chaudhuri
    (2024), assuming the mechanism's trade-off curve is Gaussian (μ-GDP): the largest μ the
    guesses refute, as μ-GDP's ε at δ. Guesses as in `one_run`. The point estimate is the ε of
    the μ whose best balanced test has the guesses' accuracy, Φ(μ/2) = v/r."""

    def point(correct: int, total: int) -> float:
        from scipy.special import ndtri

        accuracy = correct / total
        return (
            gdp_epsilon(max(0.0, 2 * float(ndtri(accuracy))), delta) if accuracy < 1 else math.inf
        )

    return _one_run_estimate(
        ONE_RUN_FDP, one_run_fdp_bound, point, scores, included, delta, confidence, guesses
    )


def refuting(
    rows: Iterable[EpsilonBound] | pd.DataFrame, epsilon: float, confidence: float = 0.95
) -> list[bool]:
    """For each of a target's rows, whether it refutes the claimed ε at the Bonferroni-corrected
    level `falsified` reads it at; False for a Gaussian-assuming row (`gdp`, `one_run_fdp`:
    they refute μ-GDP, not (ε, δ)-DP), which never decides."""
    if isinstance(rows, pd.DataFrame):
        rows = [EpsilonBound.from_row(row) for row in rows.to_dict("records")]
    rows = list(rows)
    deciding = [row for row in rows if row.method in (CLOPPER_PEARSON, ONE_RUN)]
    beta = 1.0 - confidence
    verdicts = []
    for row in rows:
        if row.method not in (CLOPPER_PEARSON, ONE_RUN):
            verdicts.append(False)
            continue
        level = 1.0 - beta / (len(deciding) * row.tests)
        if row.method == CLOPPER_PEARSON:
            lower = float(
                clopper_pearson_bound(
                    row.false_positives,
                    row.negatives,
                    row.false_negatives,
                    row.positives,
                    row.delta,
                    level,
                )
            )
        else:
            total = row.guesses_in + row.guesses_out
            lower = one_run_bound(row.canaries, total, row.correct, row.delta, level)
        verdicts.append(lower > epsilon)
    return verdicts


def falsified(
    rows: Iterable[EpsilonBound] | pd.DataFrame, epsilon: float, confidence: float = 0.95
) -> bool:
    """Whether a target's audit refutes its claimed ε, from its `clopper_pearson` and `one_run`
    rows only (the Gaussian-assuming rows refute μ-GDP, not (ε, δ)-DP, and are skipped).

    A target is declared falsified when any of its k rows refutes ε (`refuting`). Each row is
    read again at confidence 1 − β/(k·tests) (its own selection's correction times k), so each
    refutes a true claim with probability at most β/k and an honest target is declared falsified
    with probability at most β (Bonferroni): without the correction, auditing a target with many
    estimators, canary kinds or attacks would make some row exceed ε by chance."""
    return any(refuting(rows, epsilon, confidence))
