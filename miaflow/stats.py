"""Paired one-sided tests "attack A beats attack B" (ALGORITHMS.md, Section 7).

The KL-LiRA protocol, reused for attack comparisons: values are paired by repeat (target model)
within one dataset and target architecture, both a paired t-test and an exact sign-flip
permutation test are run, and p-values are adjusted with Benjamini–Yekutieli, which is valid
under the arbitrary dependence between comparisons that share attacks and repeats.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.stats import false_discovery_control, permutation_test, ttest_rel

TESTED_METRICS = ("auroc", "tpr_at_0.1pct_fpr", "tpr_at_1pct_fpr", "tpr_at_10pct_fpr")
TEST_COLUMNS = [
    "dataset", "target_model", "metric", "attack_a", "attack_b", "n_pairs", "mean_diff",
    "t_statistic", "p_ttest", "p_ttest_by", "reject_ttest", "p_perm", "p_perm_by", "reject_perm",
]


def _mean_difference(a: np.ndarray, b: np.ndarray, axis: int) -> np.ndarray:
    return np.mean(a - b, axis=axis)


def _compare(a: np.ndarray, b: np.ndarray, n_resamples: int | None, seed: int) -> dict[str, float]:
    """One-sided (H1: A > B) paired t-test and permutation test on paired values a, b."""
    with warnings.catch_warnings():
        # Identical nonzero differences make scipy warn about precision, yet it returns the right
        # limit (t = +inf, p = 0 or t = -inf, p = 1); the warning would only be noise.
        warnings.simplefilter("ignore", RuntimeWarning)
        ttest = ttest_rel(a, b, alternative="greater")
    permutation = permutation_test(
        (a, b),
        _mean_difference,
        permutation_type="samples",
        vectorized=True,
        alternative="greater",
        n_resamples=np.inf if n_resamples is None else n_resamples,
        rng=np.random.default_rng(seed),
    )
    return {
        "n_pairs": len(a),
        "mean_diff": float(np.mean(a - b)),
        "t_statistic": float(ttest.statistic),
        # All differences zero: t is 0/0 (NaN) and there is no evidence at all for A > B.
        "p_ttest": 1.0 if np.isnan(ttest.pvalue) else float(ttest.pvalue),
        "p_perm": float(permutation.pvalue),
    }


def paired_tests(
    metrics: pd.DataFrame,
    metrics_tested: Sequence[str] = TESTED_METRICS,
    alpha: float = 0.05,
    n_resamples: int | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """Test H1: "attack A scores higher than attack B" for every ordered pair of attacks.

    `metrics` is the long table of `miaflow.metrics.score_metrics` (dataset, target_model,
    attack, repeat, metric, value). For each (dataset, target_model, metric in `metrics_tested`)
    and each ordered pair (A, B), A != B, the values are paired by `repeat` (repeats missing for
    either attack are dropped) and tested one-sided, H0: mean(A - B) <= 0 against H1: A > B:

    * paired t-test, `ttest_rel(A, B, alternative="greater")`; p = 1 when all differences are 0;
    * paired permutation test of mean(A - B) by sign flips: exact over all 2^R flips when
      `n_resamples` is None (fine up to R = 16 or so), otherwise `n_resamples` random flips drawn
      from `seed` (scipy still enumerates when n_resamples >= 2^R). Exact p >= 1 / 2^R.

    The family for the Benjamini–Yekutieli adjustment is every row of the result (all datasets,
    target models, metrics and ordered pairs), adjusted separately per test type; `reject_*` is
    adjusted p <= `alpha`. Both directions of a pair are in the family, so a large p for (A, B)
    means "no evidence that A > B", not "B > A". Pairs with fewer than 2 common repeats cannot be
    tested and give no row.
    """
    rows = []
    tested = metrics[metrics["metric"].isin(metrics_tested)]
    for (dataset, target_model, metric), group in tested.groupby(
        ["dataset", "target_model", "metric"], sort=True
    ):
        values = group.pivot(index="repeat", columns="attack", values="value")
        for attack_a, attack_b in itertools.permutations(values.columns, 2):
            pairs = values[[attack_a, attack_b]].dropna()
            if len(pairs) < 2:
                continue
            result = _compare(
                pairs[attack_a].to_numpy(np.float64), pairs[attack_b].to_numpy(np.float64),
                n_resamples, seed,
            )
            rows.append({"dataset": dataset, "target_model": target_model, "metric": metric,
                         "attack_a": attack_a, "attack_b": attack_b, **result})

    tests = pd.DataFrame(rows).reindex(columns=TEST_COLUMNS)
    for test in ("ttest", "perm"):
        raw = tests[f"p_{test}"].to_numpy(np.float64)
        tests[f"p_{test}_by"] = false_discovery_control(raw, method="by")
        tests[f"reject_{test}"] = tests[f"p_{test}_by"] <= alpha
    return tests
