"""The learners that are no neural networks: scikit-learn's logistic regression (kind `lr`) and
CatBoost's gradient-boosted trees (kind `catboost`), each as a fit and a logits function of the
shape `miaflow.models.training.Learner` expects.

Their weights are plain arrays like every model's: the LR's coefficients, and CatBoost's own
`cbm` model file as a byte tensor.
"""

from __future__ import annotations

import logging
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

Weights = dict[str, np.ndarray]


# --- logistic regression (scikit-learn) -------------------------------------------------------


def fit_lr(
    arch: Mapping[str, Any],
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_heldout: np.ndarray,
    y_heldout: np.ndarray,
    n_classes: int,
    seed: int,
    threads: int,
    model_id: str,
) -> Weights:
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=arch["C"], max_iter=arch["max_iter"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        model.fit(x_train.reshape(len(x_train), -1), y_train)
    if any(issubclass(w.category, ConvergenceWarning) for w in caught):
        log.info("%s: lbfgs stopped at max_iter=%d before converging", model_id, arch["max_iter"])
    return {
        "coef": model.coef_.astype(np.float64),
        "intercept": model.intercept_.astype(np.float64),
        "classes": model.classes_.astype(np.int64),
    }


def lr_logits(
    arch: Mapping[str, Any], weights: Weights, features: np.ndarray, n_classes: int
) -> np.ndarray:
    """Log-probabilities over all classes; classes absent from training get log(0) = -inf."""
    from scipy.special import log_softmax

    decision = features.reshape(len(features), -1) @ weights["coef"].T + weights["intercept"]
    if weights["coef"].shape[0] == 1:  # binary: sklearn stores one decision function
        decision = np.hstack([np.zeros_like(decision), decision])
    out = np.full((len(features), n_classes), -np.inf)
    out[:, weights["classes"]] = log_softmax(decision, axis=1)
    return out.astype(np.float32)


# --- CatBoost ---------------------------------------------------------------------------------


def fit_catboost(
    arch: Mapping[str, Any],
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_heldout: np.ndarray,
    y_heldout: np.ndarray,
    n_classes: int,
    seed: int,
    threads: int,
    model_id: str,
) -> Weights:
    from catboost import CatBoostClassifier

    rounds = arch["early_stopping_rounds"]
    model = CatBoostClassifier(
        iterations=arch["iterations"],
        learning_rate=arch["learning_rate"],
        depth=arch["depth"],
        loss_function="MultiClass",
        class_names=list(range(n_classes)),
        random_seed=seed % 2**31,
        thread_count=threads,
        verbose=False,
        allow_writing_files=False,
    )
    eval_set = (x_heldout, y_heldout) if rounds else None
    model.fit(
        x_train.reshape(len(x_train), -1),
        y_train,
        eval_set=eval_set,
        early_stopping_rounds=rounds or None,
    )
    info = model.get_metadata()  # drop the random guid and the clock: same seed, same bytes
    info["model_guid"] = f"miaflow-{model_id}-{seed}"
    del info["train_finish_time"]
    with tempfile.TemporaryDirectory() as tmp:
        model.save_model(f"{tmp}/model.cbm", format="cbm")
        blob = Path(f"{tmp}/model.cbm").read_bytes()
    return {"cbm": np.frombuffer(blob, dtype=np.uint8).copy()}


def catboost_logits(
    arch: Mapping[str, Any], weights: Weights, features: np.ndarray, n_classes: int
) -> np.ndarray:
    from catboost import CatBoostClassifier

    model = CatBoostClassifier().load_model(blob=weights["cbm"].tobytes())
    proba = model.predict_proba(features.reshape(len(features), -1))
    with np.errstate(divide="ignore"):
        return np.log(proba).astype(np.float32)
