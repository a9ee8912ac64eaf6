"""The least p-value a family of tests can report after Benjamini–Yekutieli
(docs/algorithms.md#statistical-tests).

Pure arithmetic without numpy or scipy: the config validation (parsed with the Snakefile) warns
with these numbers, and the report stage's tests (miaflow.evaluation.stats) state them per
family, so both agree.
"""

from __future__ import annotations


def by_factor(m: int) -> float:
    """Benjamini–Yekutieli's c(m) = 1 + 1/2 + ... + 1/m: with all m p-values equal to p, every
    adjusted p-value is c(m)·p, the least a family of m tests can report."""
    return sum(1.0 / i for i in range(1, m + 1)) if m > 0 else 1.0


def min_permutation_p(n_resamples: int, family_size: int) -> float:
    """The smallest BY-adjusted p-value a family of `family_size` random permutation tests with
    `n_resamples` resamples each can reach: c(m) / (n_resamples + 1)."""
    return by_factor(family_size) / (n_resamples + 1)
