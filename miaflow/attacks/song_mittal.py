"""Song & Mittal: threshold attacks (class-dependent or global) and the privacy risk score
(docs/algorithms.md#song--mittal).

The shadow model is reference model 0: its shadow-train set is its members in the target pool T,
its shadow-test set the rest of T; with `shadow: auxiliary` in the splits it is population model 0
on the auxiliary pool A, disjoint from the targets' data, as in Song & Mittal's evaluation.
Thresholds and histograms are learned on the shadow's values and applied to the target's.
Threshold attacks score S = v − τ_y, so the learned decision "member iff v ≥ τ_y" is exactly
S ≥ 0 (`DECISION_THRESHOLDS`), while the ROC still sweeps S.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np

from miaflow.attacks.inputs import AttackInputs

log = logging.getLogger(__name__)

LN_2 = float(np.log(2.0))  # stored entropy is base 2; Song & Mittal use the natural log
LOG_BIN_FLOOR = 1e-10  # values are clamped to this before log-spaced binning
RISK_THRESHOLDS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5)
LEAKAGE_PRIORS = (0.1, 0.3, 0.7, 0.9)
RISK_SIGNALS = ("mentr", "loss", "entropy")


# --- value functions, higher = member ------------------------------------------------------------


def _value(signals: Mapping[str, np.ndarray], name: str) -> np.ndarray:
    """v_conf = p_y, v_ent = −H (natural log), v_ment = −Mentr."""
    if name == "conf":
        return np.asarray(signals["confidence"], dtype=np.float64)
    if name == "ent":
        return -LN_2 * np.asarray(signals["entropy"], dtype=np.float64)
    if name == "ment":
        return -np.asarray(signals["mentr"], dtype=np.float64)
    raise ValueError(f"unknown Song & Mittal value {name!r}")


def _shadow(inputs: AttackInputs, signal: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Shadow values of `signal` on its pool, its labels, and its membership (train set)."""
    shadow, members = inputs.shadow()
    return np.asarray(shadow[signal]), np.asarray(shadow["label"]), members


# --- thresholds (`_thre_setting`) -----------------------------------------------------------------


def best_threshold(train_values: np.ndarray, test_values: np.ndarray) -> float:
    """Song & Mittal's `_thre_setting`: the threshold maximising
    ½(frac(train ≥ τ) + frac(test < τ)).

    Candidates are the train values then the test values, in that order; the first candidate that
    strictly improves on the best so far (initially accuracy 0 at τ = 0) is kept, i.e. the first
    candidate reaching the maximum.
    """
    train, test = np.sort(train_values), np.sort(test_values)
    candidates = np.concatenate([train_values, test_values]).astype(np.float64)
    train_at_or_above = (len(train) - np.searchsorted(train, candidates, side="left")) / len(train)
    test_below = np.searchsorted(test, candidates, side="left") / len(test)
    accuracy = 0.5 * (train_at_or_above + test_below)
    best = int(np.argmax(accuracy))
    return float(candidates[best]) if accuracy[best] > 0 else 0.0


def class_thresholds(
    values: np.ndarray, labels: np.ndarray, is_member: np.ndarray, classes: np.ndarray
) -> dict[int, float]:
    """Threshold per class of `classes` from shadow values; a class without shadow members or
    non-members gets the global threshold over all classes (logged)."""
    fallback = best_threshold(values[is_member], values[~is_member])
    thresholds = {}
    for c in map(int, classes):
        of_class = labels == c
        train, test = values[of_class & is_member], values[of_class & ~is_member]
        if len(train) and len(test):
            thresholds[c] = best_threshold(train, test)
        else:
            log.info(
                "class %d has %d shadow members and %d non-members: global threshold %g",
                c,
                len(train),
                len(test),
                fallback,
            )
            thresholds[c] = fallback
    return thresholds


def _threshold_scores(inputs: AttackInputs, value: str, per_class: bool) -> np.ndarray:
    signal = {"conf": "confidence", "ent": "entropy", "ment": "mentr"}[value]
    shadow_raw, shadow_labels, shadow_member = _shadow(inputs, signal)
    shadow_values = _value({signal: shadow_raw}, value)
    target_values = _value(inputs.target, value)
    if not per_class:
        return target_values - best_threshold(
            shadow_values[shadow_member], shadow_values[~shadow_member]
        )
    labels = np.asarray(inputs.target["label"])
    thresholds = class_thresholds(shadow_values, shadow_labels, shadow_member, np.unique(labels))
    return target_values - np.array([thresholds[int(c)] for c in labels])


def sm_corr(inputs: AttackInputs) -> np.ndarray:
    """Song & Mittal correctness attack: member iff correctly classified (score = correctness)."""
    return np.asarray(inputs.target["correct"], dtype=np.float64)


def sm_conf(inputs: AttackInputs) -> np.ndarray:
    """Song & Mittal confidence attack, class-dependent thresholds: p_y − τ_y."""
    return _threshold_scores(inputs, "conf", per_class=True)


def sm_ent(inputs: AttackInputs) -> np.ndarray:
    """Song & Mittal entropy attack, class-dependent thresholds: −H − τ_y."""
    return _threshold_scores(inputs, "ent", per_class=True)


def sm_ment(inputs: AttackInputs) -> np.ndarray:
    """Song & Mittal modified-entropy attack, class-dependent thresholds: −Mentr − τ_y."""
    return _threshold_scores(inputs, "ment", per_class=True)


def sm_conf_global(inputs: AttackInputs) -> np.ndarray:
    """Song & Mittal confidence attack, one threshold for all classes: p_y − τ."""
    return _threshold_scores(inputs, "conf", per_class=False)


def sm_ent_global(inputs: AttackInputs) -> np.ndarray:
    """Song & Mittal entropy attack, one threshold for all classes: −H − τ."""
    return _threshold_scores(inputs, "ent", per_class=False)


def sm_ment_global(inputs: AttackInputs) -> np.ndarray:
    """Song & Mittal modified-entropy attack, one threshold for all classes: −Mentr − τ."""
    return _threshold_scores(inputs, "ment", per_class=False)


# Decision rule of each threshold attack on its scores: member iff S ≥ threshold.
DECISION_THRESHOLDS = {
    "sm-corr": 1.0,
    "sm-conf": 0.0,
    "sm-ent": 0.0,
    "sm-ment": 0.0,
    "sm-conf-global": 0.0,
    "sm-ent-global": 0.0,
    "sm-ment-global": 0.0,
}
# Class-dependent attack -> its class-independent counterpart (sm-corr has none).
GLOBAL_COUNTERPART = {
    "sm-corr": None,
    "sm-conf": "sm-conf-global",
    "sm-ent": "sm-ent-global",
    "sm-ment": "sm-ment-global",
}


def decision_accuracy(attack: str, scores: np.ndarray, is_member: np.ndarray) -> float:
    """½(TPR + TNR) of a threshold attack's learned decision on the target's members/non-members."""
    predicted = np.asarray(scores) >= DECISION_THRESHOLDS[attack]
    is_member = np.asarray(is_member, dtype=bool)
    return 0.5 * (predicted[is_member].mean() + (~predicted[~is_member]).mean())


# --- privacy risk score (docs/algorithms.md#privacy-risk-score) -----------------------------------


def risk_histograms(
    train_values: np.ndarray, test_values: np.ndarray, bins: int = 5, log_bins: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bin edges over both sets and the train/test histograms, each normalised by its own count.

    With log bins, values ≤ 1e-10 are clamped to 1e-10 first. If every value is equal (no range
    to split) there is one bin holding everything.
    """
    train = np.asarray(train_values, dtype=np.float64)
    test = np.asarray(test_values, dtype=np.float64)
    if log_bins:
        train, test = np.maximum(train, LOG_BIN_FLOOR), np.maximum(test, LOG_BIN_FLOOR)
    low, high = min(train.min(), test.min()), max(train.max(), test.max())
    if low == high:
        return np.array([low, high]), np.ones(1), np.ones(1)
    if log_bins:
        edges = np.logspace(np.log10(low), np.log10(high), bins + 1)
        edges[[0, -1]] = low, high  # 10**log10(v) can miss v by an ulp and drop it from the counts
    else:
        edges = np.linspace(low, high, bins + 1)
    return (
        edges,
        np.histogram(train, edges)[0] / len(train),
        np.histogram(test, edges)[0] / len(test),
    )


def bin_index(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin of each value: the last bin at or beyond the last edge, bin 0 at or below the first,
    else the largest b with edge_b ≤ v (left-closed bins)."""
    values = np.asarray(values, dtype=np.float64)
    n_bins = len(edges) - 1
    inside = np.searchsorted(edges, values, side="right") - 1
    return np.where(values >= edges[-1], n_bins - 1, np.where(values <= edges[0], 0, inside))


def bin_risks(train_hist: np.ndarray, test_hist: np.ndarray, prior: float = 0.5) -> np.ndarray:
    """Risk π·h_tr / (π·h_tr + (1−π)·h_te) of every bin; an empty bin takes the ratio of the
    nearest non-empty bin, searching b−1, b+1, b−2, b+2, … (lower side first)."""
    weighted_train, weighted_test = prior * train_hist, (1.0 - prior) * test_hist
    total = weighted_train + weighted_test
    occupied = np.flatnonzero(train_hist + test_hist > 0)
    risks = np.empty(len(total))
    for b in range(len(total)):
        # Nearest occupied bin; on a tie in distance the lower one (it sorts first).
        source = occupied[np.argmin(np.abs(occupied - b) * 2 + (occupied > b))]
        risks[b] = weighted_train[source] / total[source]
    return risks


def risk_scores(
    train_values: np.ndarray,
    test_values: np.ndarray,
    values: np.ndarray,
    bins: int = 5,
    log_bins: bool = True,
    prior: float = 0.5,
) -> np.ndarray:
    """Privacy risk of `values` from one class's shadow train (member) and test values."""
    edges, train_hist, test_hist = risk_histograms(train_values, test_values, bins, log_bins)
    return bin_risks(train_hist, test_hist, prior)[bin_index(values, edges)]


def risk_signal(signals: Mapping[str, np.ndarray], name: str) -> np.ndarray:
    """The one-dimensional output O (loss-like: lower for members); entropy in natural log."""
    values = np.asarray(signals[name], dtype=np.float64)
    return LN_2 * values if name == "entropy" else values


def privacy_risk(
    inputs: AttackInputs,
    bins: int = 5,
    log_bins: bool = True,
    prior: float = 0.5,
    signal: str = "mentr",
) -> np.ndarray:
    """Per-class risk r(z) = P(z ∈ D_tr | O) of each target sample, histograms from the shadow.

    A class without shadow members or non-members uses histograms over all classes (logged).
    """
    if signal not in RISK_SIGNALS:
        raise ValueError(f"risk-score signal must be one of {RISK_SIGNALS}, not {signal!r}")
    shadow_raw, shadow_labels, shadow_member = _shadow(inputs, signal)
    shadow_values = risk_signal({signal: shadow_raw}, signal)
    values = risk_signal(inputs.target, signal)
    labels = np.asarray(inputs.target["label"])
    risk = np.empty(len(values))
    for c in np.unique(labels):
        of_class, shadow_of_class = labels == c, shadow_labels == c
        train = shadow_values[shadow_of_class & shadow_member]
        test = shadow_values[shadow_of_class & ~shadow_member]
        if not (len(train) and len(test)):
            log.info(
                "class %d has %d shadow members and %d non-members: histograms over all classes",
                c,
                len(train),
                len(test),
            )
            train, test = shadow_values[shadow_member], shadow_values[~shadow_member]
        risk[of_class] = risk_scores(train, test, values[of_class], bins, log_bins, prior)
    return risk


def sm_risk(inputs: AttackInputs) -> np.ndarray:
    """Song & Mittal privacy risk score: P(member | signal) from per-class shadow histograms.

    Options (`SmRiskOptions`): `bins`, `log_bins`, `prior`, `signal` (mentr, loss or entropy).
    """
    options = inputs.options
    return privacy_risk(
        inputs,
        bins=options.bins,
        log_bins=options.log_bins,
        prior=options.prior,
        signal=options.signal,
    )


# --- analyses of risk scores (docs/algorithms.md#analyses) ----------------------------------------


def risk_cdf(risk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Empirical CDF of risk scores: sorted values x and F(x) = fraction of scores ≤ x."""
    values = np.sort(np.asarray(risk, dtype=np.float64))
    return values, np.arange(1, len(values) + 1) / len(values)


def risk_precision_recall(
    risk: np.ndarray, is_member: np.ndarray, thresholds: Sequence[float] = RISK_THRESHOLDS
) -> list[tuple[float, float, float]]:
    """(τ, precision, recall) of "member iff r ≥ τ"; precision is NaN when nothing is predicted."""
    risk, is_member = np.asarray(risk), np.asarray(is_member, dtype=bool)
    rows = []
    for tau in thresholds:
        predicted = risk >= tau
        true_positives = int((predicted & is_member).sum())
        precision = true_positives / predicted.sum() if predicted.any() else float("nan")
        rows.append((float(tau), float(precision), true_positives / is_member.sum()))
    return rows


def leakage_distance(member_risk: np.ndarray, prior: float) -> float:
    """mean over the target's members of (r(z) − π), for risks computed with prior π."""
    return float(np.mean(np.asarray(member_risk, dtype=np.float64) - prior))
