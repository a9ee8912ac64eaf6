"""One-sided tests "attack A beats attack B" (docs/algorithms.md#statistical-tests).

Attack comparisons (`paired_tests`) ask two questions per experiment and metric: is the best
attack better than each other one (vs-best), and is one attack family's best better than
another's (family-best). Each comparison is tested over target models (paired t-test) and over
samples (a permutation test that swaps the two attacks' score ranks per sample, and DeLong's
test of AUROC); Benjamini–Yekutieli adjusts within each question on one experiment and metric.

The exact sign-flip permutation test over repeats (`permutation_pvalues`, with the t-test in
`one_sided_tests`) serves the hyperparameter study's TD- vs ED-HPO tests: one numpy pass applies
a single sign-flip matrix to every pair's difference vector and reproduces
`scipy.stats.permutation_test((a, b), mean(a - b), permutation_type="samples",
alternative="greater")` bit for bit.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy.stats import false_discovery_control, ttest_rel

from miaflow.evaluation.multiplicity import min_permutation_p
from miaflow.seeding import derive_seed

TESTED_METRICS = ("auroc", "tpr_at_0.1pct_fpr", "tpr_at_1pct_fpr", "tpr_at_10pct_fpr")
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


def permutation_pvalues(
    differences: np.ndarray, n_resamples: int | None = None, seed: int = 0
) -> np.ndarray:
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
        rows = differences[start : start + step]
        total = np.multiply.outer(rows[:, 0], signs[:, 0])
        for i in range(1, n):
            total += np.multiply.outer(rows[:, i], signs[:, i])
        counts[start : start + step] = np.count_nonzero(
            total / n >= threshold[start : start + step, None], axis=1
        )
    adjustment = 0 if exact else 1
    return np.clip((counts + adjustment) / (len(signs) + adjustment), 0.0, 1.0)


def one_sided_tests(
    a_rows: Sequence[np.ndarray],
    b_rows: Sequence[np.ndarray],
    n_resamples: int | None = None,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Test H1: mean(a - b) > 0 for every pair of paired samples (`a_rows[k]`, `b_rows[k]`).

    Returns the t statistics and p-values of the paired t-test and the p-values of the sign-flip
    permutation test (`permutation_pvalues`), one per pair. Pairs of the same length are tested
    at once: one `ttest_rel` call and one permutation pass each.
    """
    t_statistic, p_ttest = paired_ttests(a_rows, b_rows)
    lengths = np.array([len(a) for a in a_rows], dtype=np.int64)
    p_perm = np.empty(len(lengths))
    for n in np.unique(lengths):
        rows = np.flatnonzero(lengths == n)
        differences = np.stack([a_rows[r] - b_rows[r] for r in rows])
        p_perm[rows] = permutation_pvalues(differences, n_resamples, seed)
    return t_statistic, p_ttest, p_perm


def adjust_by(tests: pd.DataFrame, alpha: float) -> None:
    """Add the Benjamini–Yekutieli-adjusted p-values of `tests`' p_ttest and p_perm columns,
    each over all rows, as p_ttest_by and p_perm_by, and reject_ttest and reject_perm (adjusted
    p <= `alpha`)."""
    for test in ("ttest", "perm"):
        adjusted = false_discovery_control(tests[f"p_{test}"].to_numpy(np.float64), method="by")
        tests[f"p_{test}_by"] = adjusted
        tests[f"reject_{test}"] = adjusted <= alpha


# --- attack comparisons: families of questions, tested over repeats and over samples ----------

QUESTIONS = ("family-best", "vs-best")  # the families of comparisons, in table order
TEST_COLUMNS = [
    "family",
    "dataset",
    "target_model",
    "metric",
    "attack_a",
    "attack_b",
    "attack_family_a",
    "attack_family_b",
    "n_repeats",
    "n_samples",
    "mean_a",
    "mean_b",
    "mean_diff",
    "t_statistic",
    "p_ttest",
    "p_ttest_by",
    "reject_ttest",
    "p_perm",
    "p_perm_by",
    "reject_perm",
    "n_resamples",
    "min_p_perm_by",
    "z_delong",
    "p_delong",
    "p_delong_by",
    "reject_delong",
    "alpha",
]
BY_FAMILY = ["family", "dataset", "target_model", "metric"]  # one Benjamini–Yekutieli family
# Swapped scores (resamples x samples) handled at a time in the sample permutation test.
_SWAP_ELEMENTS = 1 << 22


def comparisons(means: pd.DataFrame, family_of: Mapping[str, str]) -> pd.DataFrame:
    """The comparisons worth a test, per (dataset, target_model, metric) of `means` (columns
    dataset, target_model, metric, attack, mean):

    * "vs-best": the attack with the highest mean (ties: the first by name) against every other;
    * "family-best": for every two attack families (`family_of`), the better of the two families'
      best attacks against the other.

    attack_a always has the higher mean, so every test is one-sided, H1: A > B.
    """
    rows = []
    for (dataset, target_model, metric), group in means.groupby(
        ["dataset", "target_model", "metric"], sort=True
    ):
        ranked = group.sort_values(["mean", "attack"], ascending=[False, True])
        attacks = ranked["attack"].tolist()
        key = {"dataset": dataset, "target_model": target_model, "metric": metric}
        rows += [
            {"family": "vs-best", **key, "attack_a": attacks[0], "attack_b": other}
            for other in attacks[1:]
        ]
        bests = list(dict.fromkeys(family_of[a] for a in attacks))  # families, best first
        best_of = {f: next(a for a in attacks if family_of[a] == f) for f in bests}
        rows += [
            {"family": "family-best", **key, "attack_a": best_of[f], "attack_b": best_of[g]}
            for f, g in itertools.combinations(bests, 2)
        ]
    table = pd.DataFrame(
        rows, columns=["family", "dataset", "target_model", "metric", "attack_a", "attack_b"]
    )
    return table.assign(
        attack_family_a=table["attack_a"].map(family_of),
        attack_family_b=table["attack_b"].map(family_of),
    )


def tpr_level(metric: str) -> float | None:
    """The FPR level of a "tpr_at_<pct>pct_fpr" metric name, None for any other name."""
    from miaflow.evaluation.metrics import tpr_metric_name

    if not (metric.startswith("tpr_at_") and metric.endswith("pct_fpr")):
        return None
    level = float(metric[len("tpr_at_") : -len("pct_fpr")]) / 100
    return level if tpr_metric_name(level) == metric else None


def _doubled_midranks(scores: np.ndarray) -> np.ndarray:
    """2 x the midranks of `scores` (1-based): integers in [2, 2n], ties sharing their mean."""
    from scipy.stats import rankdata

    return np.rint(2 * rankdata(scores)).astype(np.int32)


def _rank_metrics(ranks: np.ndarray, n_members: int, levels: Sequence[float | None]) -> np.ndarray:
    """The metrics (AUROC for a level None, else TPR at that FPR level) of each row of `ranks`:
    integer scores in [0, 2n], the first `n_members` of each row members. Returns (rows, levels).

    Integer scores need no sort. AUROC is the Mann–Whitney count (ties 1/2) read off the
    cumulative counts of non-member scores. TPR at FPR < level (as in
    miaflow.evaluation.metrics.tpr_at_fpr) is the member share above the (K+1)-th largest
    non-member score, K the most non-members whose share stays below the level.
    """
    rows, n = ranks.shape
    members, others = ranks[:, :n_members], ranks[:, n_members:]
    n0 = n - n_members
    result = np.empty((rows, len(levels)))
    for k, level in enumerate(levels):
        if level is None:
            size = 2 * n + 2
            offsets = (np.arange(rows) * size)[:, None]
            counts = np.bincount((others + offsets).ravel(), minlength=rows * size)
            at_most = np.cumsum(counts.reshape(rows, size), axis=1).ravel()  # non-members <= v
            at = (members + offsets).ravel()
            pairs = (at_most[at] + at_most[at - 1]).reshape(rows, n_members)
            result[:, k] = pairs.sum(axis=1) / (2 * n_members * n0)
        else:
            allowed = np.count_nonzero(np.arange(n0 + 1) / n0 < level) - 1
            cut = np.partition(others, n0 - allowed - 1, axis=1)[:, n0 - allowed - 1]
            result[:, k] = np.count_nonzero(members > cut[:, None], axis=1) / n_members
    return result


def sample_permutation_pvalues(
    a: Sequence[np.ndarray],
    b: Sequence[np.ndarray],
    member: Sequence[np.ndarray],
    metrics: Sequence[str],
    n_resamples: int,
    seed: int,
) -> np.ndarray:
    """One-sided (H1: A > B) p-values of the sample permutation test, one per metric.

    a[r], b[r], member[r]: the two attacks' scores and the membership of the samples of repeat
    (target model) r. Each attack's scores become midranks within the repeat (AUROC and TPR at
    FPR depend on the order only, and ranks put both attacks on one scale). Under H0 the two
    attacks' ranks of a sample are exchangeable, so each resample swaps them per sample with
    probability 1/2, independently within each repeat (stratified by target model); the
    statistic is the metric difference summed over repeats. p = (1 + #{null >= observed}) /
    (n_resamples + 1), "as extreme" with scipy's relative tolerance. Metrics other than AUROC
    and TPR at FPR give NaN.
    """
    levels = [None if m == "auroc" else tpr_level(m) for m in metrics]
    usable = [m == "auroc" or level is not None for m, level in zip(metrics, levels)]
    rng = np.random.default_rng(seed)
    observed = np.zeros(len(metrics))
    null = np.zeros((n_resamples, len(metrics)))
    for scores_a, scores_b, is_member in zip(a, b, member):
        order = np.argsort(~is_member, kind="stable")  # members first
        n_members = int(is_member.sum())
        ranks_a = _doubled_midranks(scores_a)[order]
        ranks_b = _doubled_midranks(scores_b)[order]
        both = _rank_metrics(np.stack([ranks_a, ranks_b]), n_members, levels)
        observed += both[0] - both[1]
        step = max(1, _SWAP_ELEMENTS // len(ranks_a))
        for start in range(0, n_resamples, step):
            swap = rng.integers(0, 2, (min(step, n_resamples - start), len(ranks_a)), dtype=bool)
            mixed_a = np.where(swap, ranks_b, ranks_a)
            mixed_b = (ranks_a + ranks_b) - mixed_a  # the rank A did not take
            null[start : start + len(swap)] += _rank_metrics(
                mixed_a, n_members, levels
            ) - _rank_metrics(mixed_b, n_members, levels)
    threshold = observed - np.abs(_TIE_TOLERANCE * observed)
    counts = np.count_nonzero(null >= threshold, axis=0)
    return np.where(usable, (counts + 1) / (n_resamples + 1), np.nan)


def delong_test(
    a: Sequence[np.ndarray], b: Sequence[np.ndarray], member: Sequence[np.ndarray]
) -> tuple[float, float]:
    """DeLong's test of H1: AUROC(A) > AUROC(B) on the same samples, combined over repeats.

    Per repeat r, DeLong's placement values give the difference d_r of the two AUROCs and its
    variance v_r (correlated AUROCs, the same samples scored twice). Target models are
    independent, so z = sum(d_r) / sqrt(sum(v_r)) is standard normal under H0; p = 1 - Phi(z).
    Returns (z, p); p = 1 when every difference and variance is 0.
    """
    from scipy.stats import norm, rankdata

    difference = variance = 0.0
    for scores_a, scores_b, is_member in zip(a, b, member):
        n1, n0 = int(is_member.sum()), int((~is_member).sum())
        placements = []
        for scores in (scores_a, scores_b):
            ranks = rankdata(scores)
            # Share of non-members below each member, share of members above each non-member.
            v10 = (ranks[is_member] - rankdata(scores[is_member])) / n0
            v01 = 1 - (ranks[~is_member] - rankdata(scores[~is_member])) / n1
            placements.append((v10, v01))
        (a10, a01), (b10, b01) = placements
        difference += float(np.mean(a10) - np.mean(b10))
        variance += float(np.var(a10 - b10, ddof=1) / n1 + np.var(a01 - b01, ddof=1) / n0)
    if variance == 0 and difference == 0:
        return 0.0, 1.0  # the same AUROC contributions: no evidence either way
    if variance == 0:
        z = math.copysign(math.inf, difference)
    else:
        z = difference / math.sqrt(variance)
    return z, float(norm.sf(z))


def paired_ttests(
    a_rows: Sequence[np.ndarray], b_rows: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """t statistics and one-sided (H1: mean(a - b) > 0) p-values of `ttest_rel` for every pair
    (`a_rows[k]`, `b_rows[k]`); pairs of the same length are tested in one call. p = 1 when all
    differences are 0."""
    lengths = np.array([len(a) for a in a_rows], dtype=np.int64)
    t_statistic, p_ttest = np.empty(len(lengths)), np.empty(len(lengths))
    for n in np.unique(lengths):
        rows = np.flatnonzero(lengths == n)
        with warnings.catch_warnings():
            # Identical nonzero differences make scipy warn about precision, yet it returns the
            # right limit (t = +inf, p = 0 or t = -inf, p = 1); the warning would only be noise.
            warnings.simplefilter("ignore", RuntimeWarning)
            ttest = ttest_rel(
                np.stack([a_rows[r] for r in rows]),
                np.stack([b_rows[r] for r in rows]),
                axis=-1,
                alternative="greater",
            )
        t_statistic[rows] = ttest.statistic
        p_ttest[rows] = np.where(np.isnan(ttest.pvalue), 1.0, ttest.pvalue)
    return t_statistic, p_ttest


def _adjust_within(tests: pd.DataFrame, test: str, alpha: float) -> None:
    """p_<test>_by and reject_<test>: Benjamini–Yekutieli within each `BY_FAMILY` group, over
    the rows that have a p-value (the others stay NaN and do not reject)."""
    adjusted = pd.Series(np.nan, index=tests.index)
    for _, group in tests.groupby(BY_FAMILY, sort=False):
        p = group[f"p_{test}"].dropna()
        if len(p):
            adjusted[p.index] = false_discovery_control(p.to_numpy(np.float64), method="by")
    tests[f"p_{test}_by"] = adjusted
    tests[f"reject_{test}"] = adjusted <= alpha


def paired_tests(
    metrics: pd.DataFrame,
    scores: pd.DataFrame | None,
    family_of: Mapping[str, str],
    metrics_tested: Sequence[str] = TESTED_METRICS,
    alpha: float = 0.05,
    n_resamples: int = 999,
    seed: int = 0,
) -> pd.DataFrame:
    """The `comparisons` of every experiment, each tested one-sided (H1: A > B) three ways
    (docs/algorithms.md#statistical-tests):

    * over repeats: paired t-test of the per-target-model metric values of `metrics` (the long
      table of `miaflow.evaluation.metrics.score_metrics`);
    * over samples: the sample permutation test (`sample_permutation_pvalues`) of every tested
      metric and DeLong's test (`delong_test`) of AUROC, on the per-sample `scores` (columns
      dataset, target_model, attack, repeat, sample_id, score, is_member; experiments without
      scores get NaN there).

    Each test's p-values are Benjamini–Yekutieli adjusted within each family of questions on
    one experiment and metric (`BY_FAMILY`); min_p_perm_by is the least p_perm_by that family
    can reach (`min_permutation_p`). The permutation draws come from `seed` and the experiment's
    name (`miaflow.seeding.derive_seed`), the same swaps for all its comparisons.
    """
    tested = metrics[metrics["metric"].isin(metrics_tested)]
    keys = ["dataset", "target_model", "metric", "attack"]
    means = tested.groupby(keys, sort=True)["value"].mean().rename("mean").reset_index()
    means = means.dropna(subset=["mean"])  # a TPR at a level no target model resolves
    tests = comparisons(means, family_of)
    indexed = means.set_index(keys)["mean"]
    tests["mean_a"] = [indexed[k] for k in zip(*(tests[c] for c in keys[:3]), tests["attack_a"])]
    tests["mean_b"] = [indexed[k] for k in zip(*(tests[c] for c in keys[:3]), tests["attack_b"])]
    tests["mean_diff"] = tests["mean_a"] - tests["mean_b"]

    values = tested.set_index([*keys[:3], "repeat", "attack"])["value"].unstack("attack")
    column = {attack: k for k, attack in enumerate(values.columns)}
    rows_of = values.groupby(level=[0, 1, 2], sort=False).indices  # (dataset, model, metric)
    repeats_by_attack = values.to_numpy(np.float64)
    a_rows, b_rows = [], []
    for row in tests.itertuples():
        pair = repeats_by_attack[rows_of[(row.dataset, row.target_model, row.metric)]]
        pair = pair[:, [column[row.attack_a], column[row.attack_b]]]
        pair = pair[~np.isnan(pair).any(axis=1)]
        a_rows.append(pair[:, 0])
        b_rows.append(pair[:, 1])
    tests["n_repeats"] = [len(a) for a in a_rows]
    testable = tests["n_repeats"].to_numpy() >= 2
    tests["t_statistic"], tests["p_ttest"] = np.nan, np.nan
    if testable.any():
        chosen = np.flatnonzero(testable)
        t, p = paired_ttests([a_rows[k] for k in chosen], [b_rows[k] for k in chosen])
        tests.loc[testable, "t_statistic"], tests.loc[testable, "p_ttest"] = t, p

    _sample_tests(tests, scores, n_resamples, seed)
    for test in ("ttest", "perm", "delong"):
        _adjust_within(tests, test, alpha)
    sizes = tests.groupby(BY_FAMILY)["p_perm"].transform("count")
    tests["min_p_perm_by"] = [min_permutation_p(n_resamples, m) if m else np.nan for m in sizes]
    tests["alpha"] = alpha
    order = {q: k for k, q in enumerate(QUESTIONS)}
    tests = tests.sort_values(
        ["dataset", "target_model", "metric", "family", "mean_a", "mean_b"],
        ascending=[True, True, True, True, False, False],
        key=lambda c: c.map(order) if c.name == "family" else c,
    )
    return tests.reindex(columns=TEST_COLUMNS).reset_index(drop=True)


def _sample_tests(
    tests: pd.DataFrame, scores: pd.DataFrame | None, n_resamples: int, seed: int
) -> None:
    """Fill n_samples, p_perm, n_resamples, z_delong and p_delong of `tests` in place. Each pair
    of attacks of an experiment is tested once, for the metrics it has rows for, on the samples
    both attacks scored in each repeat."""
    filled = {
        c: np.full(len(tests), np.nan) for c in ("n_samples", "p_perm", "z_delong", "p_delong")
    }
    tests["n_resamples"] = n_resamples
    experiments = [] if scores is None else scores.groupby(["dataset", "target_model"], sort=True)
    for (dataset, target_model), experiment in experiments:
        mine = tests[(tests["dataset"] == dataset) & (tests["target_model"] == target_model)]
        if mine.empty:
            continue
        wide = experiment.pivot_table(
            index=["repeat", "sample_id"], columns="attack", values="score", aggfunc="first"
        )
        member = experiment.groupby(["repeat", "sample_id"])["is_member"].first()
        member = member.reindex(wide.index).to_numpy(bool)
        values = wide.to_numpy(np.float64)
        column = {attack: k for k, attack in enumerate(wide.columns)}
        _, starts = np.unique(wide.index.get_level_values("repeat"), return_index=True)
        repeats = np.split(np.arange(len(wide)), starts[1:])
        for (attack_a, attack_b), rows in mine.groupby(["attack_a", "attack_b"], sort=True):
            a, b, members = [], [], []
            for at in repeats:
                pair = values[at][:, [column[attack_a], column[attack_b]]]
                kept = ~np.isnan(pair).any(axis=1)
                if not 2 <= member[at][kept].sum() <= kept.sum() - 2:
                    continue  # DeLong's variances need two members and two non-members
                a.append(pair[kept, 0])
                b.append(pair[kept, 1])
                members.append(member[at][kept])
            if not a:
                continue
            metrics = list(dict.fromkeys(rows["metric"]))
            p_perm = sample_permutation_pvalues(
                a,
                b,
                members,
                metrics,
                n_resamples,
                seed=derive_seed(seed, "paired_tests", dataset, target_model),
            )
            positions = tests.index.get_indexer(rows.index)
            filled["p_perm"][positions] = rows["metric"].map(dict(zip(metrics, p_perm))).to_numpy()
            filled["n_samples"][positions] = sum(len(x) for x in a)
            auroc = positions[(rows["metric"] == "auroc").to_numpy()]
            if len(auroc):
                filled["z_delong"][auroc], filled["p_delong"][auroc] = delong_test(a, b, members)
    tests[list(filled)] = pd.DataFrame(filled, index=tests.index)
