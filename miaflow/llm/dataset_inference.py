"""Dataset inference (Maini, Jia, Papernot and Dziedzic, NeurIPS 2024, "LLM Dataset Inference:
Did you train on my dataset?"): whether a suspect SET of texts was trained on, as a test.

Single-text attacks are weak on large models, but their features, aggregated over many texts
of one set, separate a trained-on set from an IID set of known non-members (the validation
set). A linear model learns on one half of each set which combination of the features tells
them apart; on the other halves, a one-sided t-test asks whether the suspect texts score
higher. If the suspect set is not trained on, the two halves are exchangeable and the p-value
is uniform, which holds only if the validation set is truly IID with the suspect set: a shifted
validation set is rejected as readily as a trained-on one.

Follows the authors' code, pratyushmaini/llm_dataset_inference linear_di.py at 4a90baa9: per
feature and set, the 2.5 % lowest and highest values clipped (its default "clip"),
standardised, a linear classifier on the first halves, a t-test on the held-out halves.
Differences: standardisation fitted on the training halves of both sets (the code uses the
whole suspect set, held-out half included); scikit-learn's logistic regression (L2, C = 1,
solved exactly by Newton steps) for the code's 1,000 Adam steps on the same logistic loss;
Welch's t-test for the code's pooled-variance one (`ttest_ind` default), so unequal score
variances of the two sets do not inflate false positives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from miaflow import io
from miaflow.data import read_dataset
from miaflow.rule_io import Paths
from miaflow.seeding import derive_seed, rng

ROW_COLUMNS = ["suspect", "size", "repeat", "iid", "p_value"]


@dataclass(frozen=True)
class DatasetInferenceResult:
    """The test's outcome: its p-value (small = the suspect set was trained on), Welch's t
    statistic, and the linear model's weight per feature (on standardised features)."""

    p_value: float
    statistic: float
    weights: np.ndarray


def clip_outliers(features: np.ndarray, fraction: float = 0.05) -> np.ndarray:
    """Each column winsorised: its floor(fraction / 2 * n) lowest and highest values set to the
    nearest kept value, so a few extreme texts cannot steer the linear model or the t-test. The
    values of scipy.stats.mstats.winsorize (the same cut indices) on finite features, without
    its masked arrays, which cost most of a test's time."""
    features = np.asarray(features, dtype=np.float64)
    n = features.shape[0]
    low, high = int(fraction / 2 * n), n - int(n * fraction / 2)
    ordered = np.sort(features, axis=0)
    return np.clip(features, ordered[low], ordered[high - 1])


def _halves(n: int, generator: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    order = generator.permutation(n)
    return order[: n // 2], order[n // 2 :]


def dataset_inference(
    suspect: np.ndarray, validation: np.ndarray, *, seed: int, outlier_fraction: float = 0.05
) -> DatasetInferenceResult:
    """Test whether `suspect` (n_s, d) MIA features of a suspect set come from training data,
    against `validation` (n_v, d) features of known non-members IID with it.

    Each set is clipped (`clip_outliers`) and split into two random halves (default_rng from
    `seed`); a logistic regression learns suspect (1) against validation (0) on the first
    halves, on features standardised with the first halves' mean and deviation; its decision
    values on the second halves enter a one-sided Welch t-test (scipy.stats.ttest_ind,
    alternative "greater": suspect above validation). Any feature direction works: the model
    learns the signs. At least 4 texts per set (two per half)."""
    from scipy.stats import ttest_ind
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    suspect, validation = np.atleast_2d(suspect), np.atleast_2d(validation)
    if suspect.shape[1] != validation.shape[1]:
        raise ValueError(
            f"{suspect.shape[1]} suspect and {validation.shape[1]} validation features"
        )
    if min(len(suspect), len(validation)) < 4:
        raise ValueError("dataset inference needs at least 4 texts in each set")
    suspect = clip_outliers(suspect, outlier_fraction)
    validation = clip_outliers(validation, outlier_fraction)
    generator = np.random.default_rng(seed)
    suspect_fit, suspect_test = _halves(len(suspect), generator)
    validation_fit, validation_test = _halves(len(validation), generator)
    fit = np.vstack([suspect[suspect_fit], validation[validation_fit]])
    labels = np.r_[np.ones(suspect_fit.size), np.zeros(validation_fit.size)]
    scaler = StandardScaler().fit(fit)
    model = LogisticRegression(solver="newton-cholesky").fit(scaler.transform(fit), labels)
    held_suspect = model.decision_function(scaler.transform(suspect[suspect_test]))
    held_validation = model.decision_function(scaler.transform(validation[validation_test]))
    test = ttest_ind(held_suspect, held_validation, equal_var=False, alternative="greater")
    return DatasetInferenceResult(float(test.pvalue), float(test.statistic), model.coef_[0].copy())


def simulate(
    members: np.ndarray,
    non_members: np.ndarray,
    *,
    sizes: Sequence[int],
    repeats: int,
    seed: int,
    shifted_non_members: np.ndarray | None = None,
    outlier_fraction: float = 0.05,
    shifted: np.ndarray | None = None,
) -> pd.DataFrame:
    """Dataset inference on drawn suspect sets: the power and false-positive rate at each size.

    For every size n and repeat r, a suspect set of n member texts (rows of `members`) and, as
    the negative control, one of n non-member texts; each tested against a validation set of n
    other non-members (disjoint from the non-member suspect set), IID with the suspects. With
    `shifted_non_members` (features of non-members from another distribution) each suspect set
    is also tested against n of those: rows with iid False, where a validation set that is not
    IID makes even non-member suspects look trained on. `shifted` does the same from within the
    pool: a mask over the rows of `non_members` (e.g. the texts of some of the corpus' classes),
    the shifted validation set drawn among them outside the non-member suspect set, at the sizes
    where n of them are left (no iid False rows at the others). Draws and splits are seeded by
    derive_seed(seed, "dataset-inference", ..., size, repeat), the same split for every test
    of a size and repeat.

    Returns one row per test: suspect ("members" or "non-members"), size, repeat, iid, p_value.
    """
    members, non_members = np.atleast_2d(members), np.atleast_2d(non_members)
    rows = []
    for size in sizes:
        if len(members) < size or len(non_members) < 2 * size:
            raise ValueError(
                f"a suspect set of {size} needs {size} members and {2 * size} non-members, "
                f"the pools hold {len(members)} and {len(non_members)}"
            )
        if shifted_non_members is not None and len(shifted_non_members) < size:
            raise ValueError(f"{len(shifted_non_members)} shifted non-members for size {size}")
        for repeat in range(repeats):
            draw = rng(seed, "dataset-inference", "draw", size, repeat)
            suspects = {
                "members": members[draw.choice(len(members), size, replace=False)],
            }
            order = draw.permutation(len(non_members))
            suspects["non-members"] = non_members[order[:size]]
            validations = {True: non_members[order[size : 2 * size]]}
            if shifted_non_members is not None:
                pick = draw.choice(len(shifted_non_members), size, replace=False)
                validations[False] = np.atleast_2d(shifted_non_members)[pick]
            elif shifted is not None:
                left = np.setdiff1d(np.flatnonzero(shifted), order[:size])
                if left.size >= size:
                    validations[False] = non_members[draw.choice(left, size, replace=False)]
            for name, suspect in suspects.items():
                for iid, validation in validations.items():
                    result = dataset_inference(
                        suspect,
                        validation,
                        seed=derive_seed(seed, "dataset-inference", "split", size, repeat),
                        outlier_fraction=outlier_fraction,
                    )
                    rows.append((name, size, repeat, iid, result.p_value))
    return pd.DataFrame(rows, columns=ROW_COLUMNS)


# --- dataset inference in the llm stage -----------------------------------------------------------

FEATURE_KS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6)  # Min-K% and Min-K%++ at Maini et al.'s k's
FEATURES = (
    "loss",
    "zlib",
    *(f"mink_{k:g}" for k in FEATURE_KS),
    *(f"minkpp_{k:g}" for k in FEATURE_KS),
    "polarized_distance",
)


def mia_features(stats: Any, texts: Sequence[str]) -> np.ndarray:
    """The MIA features of each text (rows; columns FEATURES) from a target's token statistics
    (`miaflow.llm.tokens.TokenStats` with μ and σ²): LL(x), the zlib ratio, Min-K% and Min-K%++
    at each k of FEATURE_KS, PAC's polarized distance; non-finite values made finite
    (`scores.finite`). Maini et al. aggregate such per-text scores of one model; attacks that
    need a reference model, perturbations or prefixes are left out (one pass over the texts)."""
    from miaflow.llm import recent, scores

    logprobs = stats.logprobs
    columns = [
        scores.loss(logprobs),
        scores.zlib(logprobs, texts),
        *(scores.min_k(logprobs, k) for k in FEATURE_KS),
        *(scores.min_k_plus_plus(logprobs, stats.means, stats.variances, k) for k in FEATURE_KS),
        recent.polarized_distance(logprobs),
    ]
    return np.column_stack([scores.finite(column) for column in columns])


def shifted_classes(labels: np.ndarray) -> np.ndarray:
    """The classes of a shifted validation set: the first half (rounded down) of the corpus'
    classes, so that it is drawn from part of the distribution the suspects come from; none
    with fewer than two classes."""
    classes = np.unique(labels)
    return classes[: classes.size // 2]


def experiment_tests(
    features: Sequence[tuple[np.ndarray, np.ndarray]],
    non_member_classes: Sequence[np.ndarray],
    classes: np.ndarray,
    *,
    sizes: Sequence[int],
    draws: int,
    seed: int,
) -> pd.DataFrame:
    """`simulate` on every target of an experiment: per target r the MIA features of its
    members and of its non-members (`features[r]`, rows per text) and the non-members' classes
    (`non_member_classes[r]`); the shifted validation sets drawn from the non-members of the
    `shifted_classes` of `classes` (the corpus' labels). Seeded per target by derive_seed(seed,
    "dataset-inference", r). One row per test: `target_repeat` (r), then ROW_COLUMNS."""
    shift = shifted_classes(np.asarray(classes))
    frames = []
    for target, ((member_rows, non_member_rows), own_classes) in enumerate(
        zip(features, non_member_classes, strict=True)
    ):
        frame = simulate(
            member_rows,
            non_member_rows,
            sizes=sizes,
            repeats=draws,
            seed=derive_seed(seed, "dataset-inference", target),
            shifted=np.isin(own_classes, shift) if shift.size else None,
        )
        frame.insert(0, "target_repeat", target)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def tests_of(
    splits: pd.DataFrame,
    dataset: Any,
    n_texts: int | None,
    stats: Sequence[Any],
    options: Mapping[str, Any],
    seed: int,
) -> pd.DataFrame:
    """`experiment_tests` of a trained language-model experiment on `dataset` (its
    `n_texts` texts: `miaflow.llm.corpus.texts_used`): per repeat r the MIA features of target
    r's members and non-members (`miaflow.llm.scored.inference_ids`) from its token statistics
    on them (`stats[r]`); the corpus' labels are the classes of the shifted validation sets.
    `options`: sizes and draws (llm.dataset_inference)."""
    from miaflow.llm import corpus
    from miaflow.llm.scored import inference_ids

    texts, labels = dataset.features, np.asarray(dataset.labels)
    used = corpus.texts_used(len(labels), n_texts, seed)
    features, classes = [], []
    for repeat, own in enumerate(stats):
        members, non_members = inference_ids(splits, repeat, used)
        features.append(
            tuple(mia_features(own.select(ids), list(texts[ids])) for ids in (members, non_members))
        )
        classes.append(labels[non_members])
    return experiment_tests(
        features,
        classes,
        labels[used],
        sizes=options["sizes"],
        draws=options["draws"],
        seed=derive_seed(seed, "llm", "dataset-inference"),
    )


def write_tests(
    *,
    data: str | Path,
    splits: str | Path,
    tokens: Paths,
    inference: str | Path,
    dataset: str,
    label: str,
    options: Mapping[str, Any],
    n_texts: int | None,
    seed: int,
) -> None:
    """Dataset inference (`tests_of`) on every target of a trained experiment from its
    statistics on its members and non-members (`tokens`): a row per test (the llm stage's
    `llm_dataset_inference`)."""
    from miaflow.llm.tokens import TokenStats

    stats = [TokenStats.from_table(io.read_table(path)) for path in tokens]
    tests = tests_of(io.read_parquet(splits), read_dataset(data), n_texts, stats, options, seed)
    io.write_parquet(inference, tests.assign(dataset=dataset, target_model=label))
