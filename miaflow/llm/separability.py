"""How separable a setting's member/non-member selection is without any model: a labelled
classifier of the texts alone (Das, Zhang, Tramèr, "Blind Baselines Beat Membership Inference
Attacks for Foundation Models", IEEE S&P DLSP 2025; their ethz-spylab/Blind-MIA bag_of_words.py
at commit 853c50ec).

`miaflow.llm.blind` scores with what an attacker knows (no membership labels). This module asks
the reviewer's question instead: given the labels, can a model-free classifier tell the
selected members from the non-members? If it can (AUROC near 1), the selection differs by
time, topic or length, and an attack's AUROC on it measures that shift as much as membership.
Das et al. show such classifiers beat published attacks on several text benchmarks.

Two forms, each stratified k-fold cross-fitted (every text scored by a classifier that never
saw it; folds seeded) and judged by the AUROC of the pooled out-of-fold scores:

* bag of words as Das et al. fit it: TF-IDF word features (their "tf" vectorizer) and
  multinomial naive Bayes (their "multi" model). The vocabulary and IDF are fit on the training
  folds only; Das et al.'s per-dataset choice of vocabulary size and model, tuned on a test
  split, is not reproduced (it would leak), so the whole vocabulary is used;
* sentence embeddings (e.g. MiniLM vectors from `miaflow.pretrained`, given as an array) and
  logistic regression (lbfgs, deterministic).

Scores are log-odds (higher = member); naive Bayes probabilities saturate at 0 and 1 on long
texts and would tie. The higher of the two AUROCs is the setting's separability.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

FORMS = ("bag_of_words", "embeddings")  # on equal AUROCs the first is reported
SEPARABLE_AUROC = 0.9  # a selection this separable without a model makes an attack's AUROC moot


@dataclass(frozen=True)
class Separability:
    """The AUROCs of both forms (NaN for embeddings when none were given), the higher one, its
    form and its pooled out-of-fold scores (one per text, higher = member)."""

    auroc_bag_of_words: float
    auroc_embeddings: float
    auroc: float
    form: str
    scores: np.ndarray


def _folds(n_folds: int, seed: int):
    from sklearn.model_selection import StratifiedKFold

    return StratifiedKFold(n_splits=n_folds, shuffle=True, random_state=seed)


def bag_of_words_scores(
    texts: Sequence[str], is_member: np.ndarray, n_folds: int = 5, seed: int = 0
) -> np.ndarray:
    """Out-of-fold log-odds of membership from TF-IDF words and multinomial naive Bayes."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.model_selection import cross_val_predict
    from sklearn.naive_bayes import MultinomialNB
    from sklearn.pipeline import make_pipeline

    model = make_pipeline(TfidfVectorizer(), MultinomialNB())
    labels = np.asarray(is_member, dtype=int)
    log_proba = cross_val_predict(
        model, list(texts), labels, cv=_folds(n_folds, seed), method="predict_log_proba"
    )
    return log_proba[:, 1] - log_proba[:, 0]


def embedding_scores(
    embeddings: np.ndarray, is_member: np.ndarray, n_folds: int = 5, seed: int = 0
) -> np.ndarray:
    """Out-of-fold log-odds of membership from a logistic regression on sentence embeddings."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_predict

    labels = np.asarray(is_member, dtype=int)
    return cross_val_predict(
        LogisticRegression(max_iter=1000),
        np.asarray(embeddings, dtype=np.float64),
        labels,
        cv=_folds(n_folds, seed),
        method="decision_function",
    )


def separability(
    texts: Sequence[str],
    is_member: np.ndarray,
    embeddings: np.ndarray | None = None,
    n_folds: int = 5,
    seed: int = 0,
) -> Separability:
    """Both forms' AUROCs on one setting's texts and membership, and the higher one."""
    from sklearn.metrics import roc_auc_score

    member = np.asarray(is_member, dtype=bool)
    candidates = {"bag_of_words": bag_of_words_scores(texts, member, n_folds, seed)}
    if embeddings is not None:
        candidates["embeddings"] = embedding_scores(embeddings, member, n_folds, seed)
    aurocs = {form: float(roc_auc_score(member, s)) for form, s in candidates.items()}
    form = max(aurocs, key=aurocs.get)  # the first of FORMS on equal AUROCs
    return Separability(
        auroc_bag_of_words=aurocs["bag_of_words"],
        auroc_embeddings=aurocs.get("embeddings", np.nan),
        auroc=aurocs[form],
        form=form,
        scores=candidates[form],
    )


def _aurocs(scores: np.ndarray, n_members: int) -> np.ndarray:
    """AUROC of each row of `scores` whose first `n_members` columns are members: the
    Mann–Whitney U from midranks over n1 n0 (ties 1/2), sklearn's AUROC."""
    from scipy.stats import rankdata

    n_nonmembers = scores.shape[1] - n_members
    member_ranks = rankdata(scores, axis=1)[:, :n_members].sum(axis=1)
    return (member_ranks - n_members * (n_members + 1) / 2) / (n_members * n_nonmembers)


def auroc_difference_ci(
    is_member: np.ndarray,
    attack_scores: np.ndarray,
    baseline_scores: np.ndarray,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(difference, low, high): AUROC(attack) - AUROC(baseline) on the same samples and its
    paired percentile bootstrap interval. Each resample draws members and non-members with
    replacement within their class (stratified, so every resample has both classes and the
    design's class sizes; scipy.stats.bootstrap cannot stratify) and scores both on the same
    draw, so their correlation is kept."""
    from sklearn.metrics import roc_auc_score

    member = np.asarray(is_member, dtype=bool)
    attack = np.asarray(attack_scores, dtype=np.float64)
    baseline = np.asarray(baseline_scores, dtype=np.float64)
    observed = roc_auc_score(member, attack) - roc_auc_score(member, baseline)
    members, nonmembers = np.flatnonzero(member), np.flatnonzero(~member)
    rng = np.random.default_rng(seed)
    draws = np.hstack(
        [
            rng.choice(members, (n_resamples, len(members))),
            rng.choice(nonmembers, (n_resamples, len(nonmembers))),
        ]
    )
    differences = _aurocs(attack[draws], len(members)) - _aurocs(baseline[draws], len(members))
    tail = (1 - confidence) / 2
    low, high = np.quantile(differences, [tail, 1 - tail])
    return float(observed), float(low), float(high)


def separability_flags(
    separability_auroc: float, difference_low: float, separable_auroc: float = SEPARABLE_AUROC
) -> list[str]:
    """Why a setting's attack AUROCs need the selection's caveat, if they do:
    "selection_separable" when the model-free AUROC is >= `separable_auroc`;
    "attack_not_above_selection" when the best attack does not beat it beyond the interval
    (the lower bound of `auroc_difference_ci` is <= 0)."""
    flags = []
    if separability_auroc >= separable_auroc:
        flags.append("selection_separable")
    if difference_low <= 0:
        flags.append("attack_not_above_selection")
    return flags
