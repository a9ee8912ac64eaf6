"""Paired one-sided tests "attack A beats attack B" (docs/algorithms.md#statistical-tests).

The KL-LiRA protocol, reused for attack comparisons: values are paired by repeat (target model)
within one dataset and target architecture, both a paired t-test and an exact sign-flip
permutation test are run, and p-values are adjusted with Benjamini–Yekutieli, which is valid
under the arbitrary dependence between comparisons that share attacks and repeats.

All comparisons are computed at once: the t-test is one `scipy.stats.ttest_rel` call per number
of pairs, the permutation test one numpy pass that applies a single sign-flip matrix to every
pair's difference vector. The permutation test reproduces `scipy.stats.permutation_test((a, b),
mean(a - b), permutation_type="samples", alternative="greater")` bit for bit (see
`permutation_pvalues`).
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.stats import false_discovery_control, ttest_rel

TESTED_METRICS = ("auroc", "tpr_at_0.1pct_fpr", "tpr_at_1pct_fpr", "tpr_at_10pct_fpr")
TEST_COLUMNS = [
    "dataset", "target_model", "metric", "attack_a", "attack_b", "n_pairs", "mean_diff",
    "t_statistic", "p_ttest", "p_ttest_by", "reject_ttest", "p_perm", "p_perm_by", "reject_perm",
]
# Null-distribution entries (pairs x sign patterns) computed at a time; bounds memory to ~32 MB.
_CHUNK_ELEMENTS = 1 << 22
# scipy.stats.permutation_test's relative tolerance for "as extreme as the observed statistic".
_TIE_TOLERANCE = np.finfo(np.float64).eps * 100


def sign_flips(n: int, n_resamples: int | None, seed: int) -> tuple[np.ndarray, bool]:
    """Sign patterns (one row each, entries +1/-1) for a paired permutation test on n pairs.

    All 2^n patterns when `n_resamples` is None or >= 2^n (exact test), otherwise `n_resamples`
    random ones. The random ones are scipy's own draws: `permutation_test` with
    `rng=np.random.default_rng(seed)` permutes the two values of every pair with one
    `rng.permuted` call on an (n_resamples, n, 2) index array, and a pair whose values swap
    flips the sign of its difference. Returns (patterns, exact).
    """
    if n_resamples is None or n_resamples >= 2**n:
        bits = (np.arange(2**n)[:, None] >> np.arange(n)) & 1
        return np.where(bits == 1, -1.0, 1.0), True
    indices = np.tile(np.arange(2), (int(n_resamples), n, 1))
    swapped = np.random.default_rng(seed).permuted(indices, axis=-1)[..., 0] == 1
    return np.where(swapped, -1.0, 1.0), False


def permutation_pvalues(differences: np.ndarray, n_resamples: int | None = None,
                        seed: int = 0) -> np.ndarray:
    """One-sided (H1: mean > 0) sign-flip permutation p-values of mean(d), one per row of the
    (pairs, n) array `differences`.

    The same sign patterns (`sign_flips`) are applied to every row. Exact test: p = #{patterns
    with statistic >= observed} / 2^n; random patterns: (# + 1) / (n_resamples + 1). As in
    scipy, "as extreme" allows a relative tolerance of 100 eps for theoretically equal values,
    and the sums follow scipy's order (the observed mean is numpy's mean of a contiguous row,
    the null means add the signed differences left to right), so that p-values near such ties
    come out identical to scipy's.
    """
    differences = np.ascontiguousarray(differences, dtype=np.float64)
    n_rows, n = differences.shape
    signs, exact = sign_flips(n, n_resamples, seed)
    observed = np.mean(differences, axis=-1)
    threshold = observed - np.abs(_TIE_TOLERANCE * observed)
    counts = np.empty(n_rows, dtype=np.int64)
    step = max(1, _CHUNK_ELEMENTS // len(signs))
    for start in range(0, n_rows, step):
        rows = differences[start:start + step]
        total = np.multiply.outer(rows[:, 0], signs[:, 0])
        for i in range(1, n):
            total += np.multiply.outer(rows[:, i], signs[:, i])
        counts[start:start + step] = np.count_nonzero(
            total / n >= threshold[start:start + step, None], axis=1)
    adjustment = 0 if exact else 1
    return np.clip((counts + adjustment) / (len(signs) + adjustment), 0.0, 1.0)


def one_sided_tests(a_rows: Sequence[np.ndarray], b_rows: Sequence[np.ndarray],
                    n_resamples: int | None = None,
                    seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Test H1: mean(a - b) > 0 for every pair of paired samples (`a_rows[k]`, `b_rows[k]`).

    Returns the t statistics and p-values of the paired t-test and the p-values of the sign-flip
    permutation test (`permutation_pvalues`), one per pair. Pairs of the same length are tested
    at once: one `ttest_rel` call and one permutation pass each.
    """
    lengths = np.array([len(a) for a in a_rows], dtype=np.int64)
    t_statistic, p_ttest, p_perm = (np.empty(len(lengths)) for _ in range(3))
    for n in np.unique(lengths):
        rows = np.flatnonzero(lengths == n)
        a = np.stack([a_rows[r] for r in rows])
        b = np.stack([b_rows[r] for r in rows])
        with warnings.catch_warnings():
            # Identical nonzero differences make scipy warn about precision, yet it returns the
            # right limit (t = +inf, p = 0 or t = -inf, p = 1); the warning would only be noise.
            warnings.simplefilter("ignore", RuntimeWarning)
            ttest = ttest_rel(a, b, axis=-1, alternative="greater")
        t_statistic[rows] = ttest.statistic
        # All differences zero: t is 0/0 (NaN) and there is no evidence at all for A > B.
        p_ttest[rows] = np.where(np.isnan(ttest.pvalue), 1.0, ttest.pvalue)
        p_perm[rows] = permutation_pvalues(a - b, n_resamples, seed)
    return t_statistic, p_ttest, p_perm


def adjust_by(tests: pd.DataFrame, alpha: float) -> None:
    """Add the Benjamini–Yekutieli-adjusted p-values of `tests`' p_ttest and p_perm columns,
    each over all rows, as p_ttest_by and p_perm_by, and reject_ttest and reject_perm (adjusted
    p <= `alpha`)."""
    for test in ("ttest", "perm"):
        adjusted = false_discovery_control(tests[f"p_{test}"].to_numpy(np.float64), method="by")
        tests[f"p_{test}_by"] = adjusted
        tests[f"reject_{test}"] = adjusted <= alpha


def _pair_arrays(values: np.ndarray) -> tuple[list[tuple[int, int]], list[np.ndarray], list[np.ndarray]]:
    """For every ordered pair (i, j) of columns of the (repeats, attacks) array `values`, the
    values of both columns at the repeats where neither is NaN, in repeat order."""
    ordered = list(itertools.permutations(range(values.shape[1]), 2))
    firsts = [a for a, _ in ordered]
    seconds = [b for _, b in ordered]
    present = ~np.isnan(values)
    common = (present[:, firsts] & present[:, seconds]).T  # (pairs, repeats)
    a_rows: list[np.ndarray] = [None] * len(ordered)  # type: ignore[list-item]
    b_rows: list[np.ndarray] = [None] * len(ordered)  # type: ignore[list-item]
    patterns, inverse = np.unique(common, axis=0, return_inverse=True)
    for k, pattern in enumerate(patterns):
        members = np.flatnonzero(inverse.ravel() == k)
        a = values[pattern][:, [firsts[m] for m in members]].T
        b = values[pattern][:, [seconds[m] for m in members]].T
        for position, member in enumerate(members):
            a_rows[member], b_rows[member] = a[position], b[position]
    return ordered, a_rows, b_rows


def paired_tests(
    metrics: pd.DataFrame,
    metrics_tested: Sequence[str] = TESTED_METRICS,
    alpha: float = 0.05,
    n_resamples: int | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """Test H1: "attack A scores higher than attack B" for every ordered pair of attacks.

    `metrics` is the long table of `miaflow.evaluation.metrics.score_metrics` (dataset, target_model,
    attack, repeat, metric, value). For each (dataset, target_model, metric in `metrics_tested`)
    and each ordered pair (A, B), A != B, the values are paired by `repeat` (repeats missing for
    either attack are dropped) and tested one-sided, H0: mean(A - B) <= 0 against H1: A > B:

    * paired t-test, `ttest_rel(A, B, alternative="greater")`; p = 1 when all differences are 0;
    * paired permutation test of mean(A - B) by sign flips: exact over all 2^R flips when
      `n_resamples` is None (fine up to R = 16 or so), otherwise `n_resamples` random flips drawn
      from `seed`, the same flips for every pair with R common repeats (still exact when
      n_resamples >= 2^R). Exact p >= 1 / 2^R. Identical to `scipy.stats.permutation_test` with
      `rng=np.random.default_rng(seed)`, bit for bit (`permutation_pvalues`).

    The family for the Benjamini–Yekutieli adjustment is every row of the result (all datasets,
    target models, metrics and ordered pairs), adjusted separately per test type; `reject_*` is
    adjusted p <= `alpha`. Both directions of a pair are in the family, so a large p for (A, B)
    means "no evidence that A > B", not "B > A". Pairs with fewer than 2 common repeats cannot be
    tested and give no row.
    """
    keys: list[tuple[str, str, str, str, str]] = []
    a_rows: list[np.ndarray] = []
    b_rows: list[np.ndarray] = []
    tested = metrics[metrics["metric"].isin(metrics_tested)]
    for (dataset, target_model, metric), group in tested.groupby(
        ["dataset", "target_model", "metric"], sort=True
    ):
        values = group.pivot(index="repeat", columns="attack", values="value")
        ordered, a_group, b_group = _pair_arrays(values.to_numpy(np.float64))
        for (i, j), a, b in zip(ordered, a_group, b_group):
            if len(a) < 2:
                continue
            keys.append((dataset, target_model, metric, values.columns[i], values.columns[j]))
            a_rows.append(a)
            b_rows.append(b)

    t_statistic, p_ttest, p_perm = one_sided_tests(a_rows, b_rows, n_resamples, seed)
    columns = ["dataset", "target_model", "metric", "attack_a", "attack_b"]
    tests = pd.DataFrame([dict(zip(columns, key)) for key in keys])
    if keys:
        tests = tests.assign(n_pairs=[len(a) for a in a_rows],
                             mean_diff=[np.mean(a - b) for a, b in zip(a_rows, b_rows)],
                             t_statistic=t_statistic, p_ttest=p_ttest, p_perm=p_perm)
    tests = tests.reindex(columns=TEST_COLUMNS)
    adjust_by(tests, alpha)
    return tests
