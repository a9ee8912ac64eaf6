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

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from miaflow import io
from miaflow.data import read_dataset
from miaflow.llm.scored import draws
from miaflow.rule_io import Paths
from miaflow.seeding import derive_seed

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

    return StratifiedKFold(n_splits=n_folds, shuffle=True, random_state=seed % 2**32)


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
    paired percentile bootstrap interval (`mean_auroc_difference_ci` of one scored set)."""
    return mean_auroc_difference_ci(
        [(is_member, attack_scores, baseline_scores)], n_resamples, confidence, seed
    )


def mean_auroc_difference_ci(
    scored_sets: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(difference, low, high): the mean over scored sets (target models) of AUROC(attack) -
    AUROC(baseline), each set given as (is_member, attack scores, baseline scores) on the same
    samples, and its paired percentile bootstrap interval. Each resample draws members and
    non-members with replacement within their class and set (stratified, so every resample has
    both classes and the design's class sizes; scipy.stats.bootstrap cannot stratify) and scores
    both on the same draw, so their correlation is kept."""
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(seed)
    observed, differences = [], np.zeros(n_resamples)
    for is_member, attack_scores, baseline_scores in scored_sets:
        member = np.asarray(is_member, dtype=bool)
        attack = np.asarray(attack_scores, dtype=np.float64)
        baseline = np.asarray(baseline_scores, dtype=np.float64)
        observed.append(roc_auc_score(member, attack) - roc_auc_score(member, baseline))
        members, nonmembers = np.flatnonzero(member), np.flatnonzero(~member)
        draws = np.hstack(
            [
                rng.choice(members, (n_resamples, len(members))),
                rng.choice(nonmembers, (n_resamples, len(nonmembers))),
            ]
        )
        n = len(members)
        differences += _aurocs(attack[draws], n) - _aurocs(baseline[draws], n)
    differences /= len(observed)
    tail = (1 - confidence) / 2
    low, high = np.quantile(differences, [tail, 1 - tail])
    return float(np.mean(observed)), float(low), float(high)


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


# How the selection's separability is named where it stands beside the attacks (tables, figure):
# not an attack id, and never among the attacks the verdicts rank.
SELECTION = "selection-alone"
# The out-of-fold scores of both forms, one row per scored text and form.
SELECTION_SCORE_COLUMNS = [
    "dataset",
    "target_model",
    "repeat",
    "sample_id",
    "is_member",
    "form",
    "score",
]
SELECTION_COLUMNS = [
    "dataset",
    "target_model",
    "separability",
    "separability_form",
    "auroc_bag_of_words",
    "auroc_embeddings",
    "n_target_models",
    "best_attack",
    "attack_minus_selection",
    "difference_low",
    "difference_high",
    "selection_flags",
]


def labelled_draws(
    splits: pd.DataFrame,
    texts: np.ndarray,
    settings: pd.DataFrame | None,
    label: str,
    repeats: int,
) -> Iterator[tuple[str, int, np.ndarray, np.ndarray, Sequence[str]]]:
    """(experiment label, repeat, sample ids, membership, texts) of every set a language-model
    experiment's attacks score: each repeat's eval set (labelled `label`), or with the settings
    table each benchmark setting ("<label>/<setting>"), as `miaflow.llm.scored.draws` gives them."""
    for repeat in range(repeats):
        for name, ids, is_member, drawn in draws(splits, texts, repeat, settings):
            yield (label if settings is None else f"{label}/{name}"), repeat, ids, is_member, drawn


def selection_scores(
    scored_sets: Iterable[tuple[str, int, np.ndarray, np.ndarray, Sequence[str]]],
    dataset: str,
    embeddings: pd.Series | None = None,
    n_folds: int = 5,
    seed: int = 0,
) -> pd.DataFrame:
    """Both forms' out-of-fold scores (`SELECTION_SCORE_COLUMNS`) of every scored set, given
    as (experiment label, repeat, sample ids, membership, texts): the embeddings form where
    `embeddings` (a vector per sample id) holds every id of the set. The folds are seeded by
    the dataset, label and repeat, as the attacks' inputs are."""
    frames = []
    for label, repeat, ids, is_member, texts in scored_sets:
        fold_seed = derive_seed(seed, "separability", dataset, label, repeat)
        member = np.asarray(is_member, dtype=bool)
        forms = {"bag_of_words": bag_of_words_scores(texts, member, n_folds, fold_seed)}
        if embeddings is not None and embeddings.index.isin(ids).sum() == len(set(ids)):
            vectors = np.stack([np.asarray(v) for v in embeddings.loc[ids]])
            forms["embeddings"] = embedding_scores(vectors, member, n_folds, fold_seed)
        for form, scores in forms.items():
            frames.append(
                pd.DataFrame(
                    {
                        "dataset": dataset,
                        "target_model": label,
                        "repeat": repeat,
                        "sample_id": ids,
                        "is_member": member,
                        "form": form,
                        "score": scores,
                    }
                )
            )
    return pd.concat(frames, ignore_index=True)[SELECTION_SCORE_COLUMNS]


def selection_table(
    separable: pd.DataFrame,
    attack_scores: pd.DataFrame,
    best_attacks: Mapping[tuple[str, str], str],
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """One row (`SELECTION_COLUMNS`) per experiment of `separable` (`selection_scores`): each
    form's mean AUROC over target models, the higher one (first of FORMS on equal means) as the
    separability, and the best attack's (`best_attacks`, by (dataset, target_model)) mean AUROC
    minus it, with the paired bootstrap interval (`mean_auroc_difference_ci`) on the samples both
    scored, and `separability_flags`."""
    from sklearn.metrics import roc_auc_score

    rows = []
    for (dataset, label), sets in separable.groupby(["dataset", "target_model"], sort=True):
        aurocs = {
            form: np.mean(
                [roc_auc_score(s["is_member"], s["score"]) for _, s in by_form.groupby("repeat")]
            )
            for form, by_form in sets.groupby("form", sort=False)
        }
        form = max((f for f in FORMS if f in aurocs), key=aurocs.get)
        row = {
            "dataset": dataset,
            "target_model": label,
            "separability": aurocs[form],
            "separability_form": form,
            "auroc_bag_of_words": aurocs.get("bag_of_words", np.nan),
            "auroc_embeddings": aurocs.get("embeddings", np.nan),
            "n_target_models": sets["repeat"].nunique(),
            "best_attack": best_attacks.get((dataset, label)),
        }
        attack = attack_scores[
            (attack_scores["dataset"] == dataset)
            & (attack_scores["target_model"] == label)
            & (attack_scores["attack"] == row["best_attack"])
        ]
        paired = sets[sets["form"] == form].merge(
            attack[["repeat", "sample_id", "score"]],
            on=["repeat", "sample_id"],
            suffixes=("", "_a"),
        )
        difference = low = high = np.nan
        if len(paired):
            difference, low, high = mean_auroc_difference_ci(
                [
                    (s["is_member"], s["score_a"], s["score"])
                    for _, s in paired.groupby("repeat", sort=True)
                ],
                n_resamples,
                confidence,
                derive_seed(seed, "separability-ci", dataset, label),
            )
        rows.append(
            row
            | {
                "attack_minus_selection": difference,
                "difference_low": low,
                "difference_high": high,
                "selection_flags": separability_flags(
                    row["separability"], low if len(paired) else np.inf
                ),
            }
        )
    return pd.DataFrame(rows, columns=SELECTION_COLUMNS)


def write_separability(
    *,
    data: str | Path,
    splits: str | Path,
    settings: Paths = (),
    embeddings: Paths = (),
    setting_embeddings: Paths = (),
    separability: str | Path,
    dataset: str,
    label: str,
    repeats: int,
    seed: int,
) -> None:
    """What the selection alone gives: a labelled model-free classifier's cross-fitted scores
    of the texts of every scored set, on words and, where the blind baselines embedded the
    texts, on their sentence embeddings (not an attack): the llm stage's `llm_separability`."""
    from miaflow.llm.blind import embedding_rows

    table, texts = io.read_parquet(splits), read_dataset(data).features
    frames = [
        selection_scores(
            labelled_draws(table, texts, drawn, label, repeats), dataset, vectors, seed=seed
        )
        for drawn, vectors in [(None, embedding_rows(embeddings))]
        + ([(io.read_parquet(settings[0]), embedding_rows(setting_embeddings))] if settings else [])
    ]
    io.write_parquet(separability, pd.concat(frames, ignore_index=True))
