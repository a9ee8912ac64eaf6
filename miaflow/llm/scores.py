"""Membership scores of the language-model attacks (docs/algorithms.md#language-model-attacks).

Everything here is a cheap function of cached token statistics or of the ReCaLL matrix, so the
attacks never run a model. A text's statistics come as one 1-D array per text over its scored
tokens t = 2..T: `logprobs[i]` holds l_t = log p(x_t | x_<t), `means[i]` and `variances[i]` the
mean and variance of log p_t(v) under p_t. Every score is higher = more likely a member.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from zlib import compress

import numpy as np

log = logging.getLogger("miaflow.llm")

SCORING_FUNCTIONS = ("auroc", "kendall", "rankdist")


def finite(scores: np.ndarray) -> np.ndarray:
    """Copy of `scores` with +inf -> finite max + 1e-6, -inf -> finite min - 1e-6, NaN -> 0.

    Non-finite scores must not reach the metrics or EM-MIA's median; this keeps their rank.
    """
    scores = np.array(scores, dtype=np.float64)
    bad = ~np.isfinite(scores)
    if bad.any():
        ok = scores[~bad]
        high, low = (ok.max(), ok.min()) if ok.size else (0.0, 0.0)
        scores[np.isposinf(scores)] = high + 1e-6
        scores[np.isneginf(scores)] = low - 1e-6
        scores[np.isnan(scores)] = 0.0
        log.warning("replaced %d non-finite scores of %d", bad.sum(), scores.size)
    return scores


def mean_log_likelihood(logprobs: Sequence[np.ndarray]) -> np.ndarray:
    """LL(x), the mean of l_t per text (minus the causal-LM loss); NaN for a text with no token."""
    return np.array([np.mean(lp) if len(lp) else np.nan for lp in logprobs], dtype=np.float64)


def loss(logprobs: Sequence[np.ndarray]) -> np.ndarray:
    """Loss attack: LL(x). Members are predicted better, so their LL is higher."""
    return mean_log_likelihood(logprobs)


def zlib_bytes(text: str) -> int:
    """Z(x): bytes of the UTF-8 text compressed by zlib at Python's default level."""
    return len(compress(text.encode("utf-8")))


def zlib(logprobs: Sequence[np.ndarray], texts: Sequence[str]) -> np.ndarray:
    """Zlib attack: LL(x) / Z(x), which discounts texts that are likely only because redundant."""
    if len(logprobs) != len(texts):
        raise ValueError(f"{len(logprobs)} token statistics for {len(texts)} texts")
    return mean_log_likelihood(logprobs) / np.array([zlib_bytes(t) for t in texts], dtype=float)


def lowercase(logprobs_lower: Sequence[np.ndarray], logprobs: Sequence[np.ndarray]) -> np.ndarray:
    """Lowercase attack: LL(lower(x)) / LL(x).

    Both LLs are negative, so the ratio is |LL(lower(x))| / |LL(x)|. A member's exact casing is
    memorised: its |LL(x)| is small while lower-casing destroys what was memorised, so the ratio is
    larger for members and the formula is used as it stands.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        return mean_log_likelihood(logprobs_lower) / mean_log_likelihood(logprobs)


def k_count(n: int, k: float, compat: bool = False) -> int:
    """n_k, the number of tokens Min-K% averages: max(1, floor(k*n)); with `compat` floor(k*n).

    The 1e-9 guards floating error (0.29 * 100 = 28.999999999999996 must give 29), so n_k is the
    exact floor for any real text length; the original codes' int(k*n) can be one lower there.
    """
    if not 0.0 < k <= 1.0:
        raise ValueError(f"k must lie in (0, 1], got {k}")
    count = math.floor(k * n + 1e-9)
    return count if compat else max(1, count)


def _mean_smallest(values: Sequence[np.ndarray], k: float, compat: bool, name: str) -> np.ndarray:
    """Mean of the n_k smallest values per text; NaN with no token, NaN -> 0 when compat n_k = 0."""
    out = np.full(len(values), np.nan)
    zero = 0
    for i, v in enumerate(values):
        count = k_count(len(v), k, compat)
        if len(v) and count:
            out[i] = np.partition(np.asarray(v, dtype=np.float64), count - 1)[:count].mean()
        elif len(v):
            out[i], zero = 0.0, zero + 1
    if zero:
        log.warning(
            "%s (compat, k=%g): %d of %d texts have n_k = 0, scored 0 (NaN -> 0)",
            name,
            k,
            zero,
            len(values),
        )
    return out


def min_k(logprobs: Sequence[np.ndarray], k: float = 0.2, compat: bool = False) -> np.ndarray:
    """Min-K%: mean of the n_k smallest l_t. A member has few very unlikely tokens."""
    return _mean_smallest(logprobs, k, compat, "Min-K%")


def min_k_plus_plus(
    logprobs: Sequence[np.ndarray],
    means: Sequence[np.ndarray],
    variances: Sequence[np.ndarray],
    k: float = 0.2,
    compat: bool = False,
) -> np.ndarray:
    """Min-K%++: mean of the n_k smallest s_t = (l_t - mu_t) / sigma_t.

    s_t asks whether x_t is a local mode of p_t, which training pushes members towards. A
    degenerate (one-hot) p_t has sigma_t = 0 and l_t = mu_t, so s_t is set to 0.
    """
    standardised, degenerate = [], 0
    for lp, mu, var in zip(logprobs, means, variances, strict=True):
        lp, mu, var = (np.asarray(a, dtype=np.float64) for a in (lp, mu, var))
        ok = var > 0
        degenerate += int((~ok).sum())
        standardised.append(np.where(ok, (lp - mu) / np.sqrt(np.where(ok, var, 1.0)), 0.0))
    if degenerate:
        log.warning("Min-K%%++: %d tokens with sigma_t = 0 scored s_t = 0", degenerate)
    return _mean_smallest(standardised, k, compat, "Min-K%++")


def reference(ll_target: np.ndarray, ll_reference: np.ndarray) -> np.ndarray:
    """Reference attack: LL_target(x) - LL_ref(x), calibrating away how easy x is in general."""
    return np.asarray(ll_target, dtype=np.float64) - np.asarray(ll_reference, dtype=np.float64)


def neighbor(ll: np.ndarray, ll_neighbors: np.ndarray) -> np.ndarray:
    """Neighbour attack: LL(x) minus the mean LL of its J neighbours (n, J), ignoring NaN ones.

    A member is a sharp local maximum of the likelihood, so it beats its perturbed neighbours.
    """
    ll_neighbors = np.asarray(ll_neighbors, dtype=np.float64)
    valid = ~np.isnan(ll_neighbors)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(valid, ll_neighbors, 0.0).sum(axis=1) / valid.sum(axis=1)
    return np.asarray(ll, dtype=np.float64) - mean


def recall(ll_conditional: np.ndarray, ll: np.ndarray) -> np.ndarray:
    """ReCaLL: LL(x; P) / LL(x). A non-member prefix P lowers a member's LL more, so the ratio of
    the two negative LLs is larger for members."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(ll_conditional, dtype=np.float64) / np.asarray(ll, dtype=np.float64)


def recall_prefix(
    shot_lengths: Sequence[int], separator_length: int, target_length: int, context: int
) -> int:
    """How many of the most recent ReCaLL shots fit in the context; the oldest are dropped first.

    Layout (lengths in tokens): shot_1 sep shot_2 sep ... shot_m sep target, i.e. one separator
    after every kept shot. Returns the largest m such that the last m shots of `shot_lengths`
    (oldest first) fit together with the target in `context`; 0 when none fits, in which case the
    caller uses an empty prefix (unlike the official code, whose prefix[-0:] keeps every shot).
    """
    used, kept = target_length, 0
    for length in reversed(shot_lengths):
        if used + length + separator_length > context:
            break
        used, kept = used + length + separator_length, kept + 1
    return kept


def recall_avg(R: np.ndarray) -> np.ndarray:
    """ReCaLL-Avg (label-free): mean_p R[p, x], the ReCaLL score of x averaged over all prefixes."""
    return np.asarray(R, dtype=np.float64).mean(axis=0)


def recall_avgp(R: np.ndarray) -> np.ndarray:
    """ReCaLL-AvgP (label-free): mean_x R[p, x], the score of text p as a prefix.

    Kept unnegated, as specified and as in EM-MIA's code. The direction is not obvious: if a
    non-member prefix lowered every target's LL more, the mean would be higher for non-members.
    The workflow tests check the direction on a memorising model.
    """
    return np.asarray(R, dtype=np.float64).mean(axis=1)


def row_auroc(R: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """AUROC of every row of R as a score against binary labels, NaN if labels have one class.

    Mann-Whitney U / (P * Nn) with average ranks, equal to sklearn's roc_auc_score, computed for
    all rows at once since EM-MIA needs N of them per iteration.
    """
    R = np.atleast_2d(np.asarray(R, dtype=np.float64))
    labels = np.asarray(labels, dtype=bool)
    positives, negatives = labels.sum(), (~labels).sum()
    if positives == 0 or negatives == 0:
        return np.full(R.shape[0], np.nan)
    from scipy.stats import rankdata  # imported here: parsing the workflow imports this module

    ranks = rankdata(R, axis=1)
    u = ranks[:, labels].sum(axis=1) - positives * (positives + 1) / 2
    return u / (positives * negatives)


PAIRWISE_KENDALL_MAX = 128  # up to this many scores, row_kendall compares all pairs at once
PAIRWISE_ELEMENTS = 2**20  # pair signs held at once (rows x pairs), 8 MiB of float64


def row_kendall(R: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Kendall tau-b of every row of R with f: scipy.stats.kendalltau's statistic, NaN where a
    row or f is constant or holds a NaN.

    EM-MIA asks for N of them per iteration, and scipy's call costs about 0.3 ms whatever N
    (its exact p-value, unused here, most of it at N <= 33). Up to PAIRWISE_KENDALL_MAX scores
    the pairs' signs of all rows are compared at once (O(N^3) per call, in chunks of rows);
    beyond, scipy's O(N log N) per row wins, without its exact p-value."""
    R = np.atleast_2d(np.asarray(R, dtype=np.float64))
    f = np.asarray(f, dtype=np.float64)
    n = f.size
    if np.isnan(f).any():
        return np.full(R.shape[0], np.nan)
    if n > PAIRWISE_KENDALL_MAX:
        from scipy.stats import kendalltau

        return np.array(
            [kendalltau(row, f, method="asymptotic").statistic for row in R], dtype=np.float64
        )
    first, second = np.triu_indices(n, 1)
    pairs = first.size
    f_signs = np.sign(f[first] - f[second])
    f_untied = pairs - np.count_nonzero(f_signs == 0)
    result = np.empty(R.shape[0])
    step = max(1, PAIRWISE_ELEMENTS // max(pairs, 1))
    for start in range(0, R.shape[0], step):
        rows = R[start : start + step]
        signs = np.sign(rows[:, first] - rows[:, second])
        untied = pairs - np.count_nonzero(signs == 0, axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            # as scipy: (concordant - discordant) / sqrt(untied in x) / sqrt(untied in y)
            tau = (signs @ f_signs) / np.sqrt(untied) / np.sqrt(f_untied)
        tau = np.clip(tau, -1.0, 1.0)
        tau[(untied == 0) | (f_untied == 0) | np.isnan(rows).any(axis=1)] = np.nan
        result[start : start + step] = tau
    return result


def prefix_scores(R: np.ndarray, f: np.ndarray, scoring: str) -> np.ndarray:
    """r(p) = Sfun(R[p, :], f) for every prefix p: how well p's ReCaLL row agrees with scores f.

    "auroc": AUROC of the row against the pseudo-labels f > median(f) (NaN if one class);
    "kendall": Kendall tau-b between the row and f; "rankdist": 1 - mean |rank(row) - rank(f)|
    / (N - 1), with average ranks.
    """
    from scipy.stats import rankdata  # imported here: slow, and parse-time reachable

    R, f = np.asarray(R, dtype=np.float64), np.asarray(f, dtype=np.float64)
    if scoring == "auroc":
        return row_auroc(R, f > np.median(f))
    if scoring == "kendall":
        return row_kendall(R, f)
    if scoring == "rankdist":
        distance = np.abs(rankdata(R, axis=1) - rankdata(f)).mean(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            return 1.0 - distance / (R.shape[1] - 1)
    raise ValueError(f"unknown scoring {scoring!r}; expected one of {SCORING_FUNCTIONS}")


def em_mia(
    R: np.ndarray, initial: np.ndarray, scoring: str = "auroc", iterations: int = 10
) -> tuple[np.ndarray, np.ndarray]:
    """EM-MIA: alternate prefix scores r = Sfun(R[p, :], f) and membership scores f = -r.

    A good ReCaLL prefix behaves like a non-member, so the negated prefix score is a membership
    score. Label-free; the diagonal of R is kept and there is no convergence test. Returns the
    final f and the history (iterations + 1, N): row 0 the sanitised initial scores, row t the
    scores after iteration t.
    """
    R, f = np.asarray(R, dtype=np.float64), finite(initial)
    if R.shape != (f.size, f.size):
        raise ValueError(f"R has shape {R.shape}, expected ({f.size}, {f.size})")
    history = [f]
    for t in range(1, iterations + 1):
        r = prefix_scores(R, f, scoring)
        undefined = np.isnan(r)
        if undefined.any():
            one_class = scoring == "auroc" and len(set(f > np.median(f))) == 1
            reason = " (the pseudo-labels have one class)" if one_class else ""
            log.warning(
                "EM-MIA %s iteration %d: %d of %d prefix scores undefined%s, set to 0",
                scoring,
                t,
                undefined.sum(),
                r.size,
                reason,
            )
        f = np.where(undefined, 0.0, -r)
        history.append(f)
    return f, np.stack(history)


def recall_top_prefix(R: np.ndarray, is_member: np.ndarray) -> np.ndarray:
    """ORACLE (uses true labels): the ReCaLL row of the non-member prefix whose row separates the
    true labels best (highest AUROC; ties to the lowest index). An upper bound for one shot."""
    is_member = np.asarray(is_member, dtype=bool)
    candidates = np.flatnonzero(~is_member)
    aurocs = row_auroc(np.asarray(R)[candidates], is_member)
    return np.asarray(R, dtype=np.float64)[candidates[np.nanargmax(aurocs)]].copy()


def recall_random_prefix(
    R: np.ndarray, is_member: np.ndarray, member: bool, seed: int
) -> np.ndarray:
    """LABEL-USING baseline (RandM / RandNM): the ReCaLL row of one prefix drawn uniformly, with
    default_rng(seed), among the members (`member=True`) or the non-members."""
    candidates = np.flatnonzero(np.asarray(is_member, dtype=bool) == member)
    prefix = np.random.default_rng(seed).choice(candidates)
    return np.asarray(R, dtype=np.float64)[prefix].copy()
