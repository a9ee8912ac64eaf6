"""Real tabular datasets, read from their publishers' files (Shokri et al.'s archives, UCI)."""

from __future__ import annotations

import tarfile
from collections.abc import Mapping
from typing import Any

import numpy as np

from miaflow.data.dataset import Dataset
from miaflow.data.sources import Sources


def standardise(features: np.ndarray) -> np.ndarray:
    """z-score each column over the whole dataset (constant columns become 0), as float32."""
    features = features.astype(np.float64)
    std = features.std(axis=0)
    return ((features - features.mean(axis=0)) / np.where(std > 0, std, 1.0)).astype(np.float32)


def load_location30(opts: Mapping[str, Any], seed: int, sources: Sources) -> Dataset:
    """Shokri et al.'s Location: read `bangkok` straight from the tgz (lines `"label",f1..f446`)."""
    [path] = sources()
    with tarfile.open(path, "r:gz") as archive, archive.extractfile("bangkok") as handle:
        rows = np.loadtxt(handle, delimiter=",", quotechar='"', dtype=np.int64, ndmin=2)
    return Dataset("location30", "tabular", rows[:, 1:].astype(np.float32), rows[:, 0] - 1, 30)


# TDDBench's preprocessing (`preprocessing: tddbench`) keeps raw values and drops these columns
# of students' dropout; the codes of `course` (up to ~9,000) saturate a tanh network unscaled.
TDDBENCH_DROPPED_STUDENT_COLUMNS = ["marital status", "application mode", "course", "nacionality"]


def _scaled(features: np.ndarray, opts: Mapping[str, Any]) -> np.ndarray:
    """z-scored (`preprocessing: miaflow`, the default) or raw, as TDDBench feeds them."""
    if opts["preprocessing"] == "tddbench":
        return features.astype(np.float32)
    return standardise(features)


def load_students_dropout(opts: Mapping[str, Any], seed: int, sources: Sources) -> Dataset:
    """UCI students' dropout; labels are the class names in sorted order (Dropout=0, Enrolled=1,
    Graduate=2). `preprocessing: miaflow`: all 36 features, z-scored; `tddbench`: TDDBench's 32
    raw features (without marital status, application mode, course and nationality)."""
    import pandas as pd

    [path] = sources()
    frame = pd.read_csv(path)
    frame.columns = frame.columns.str.strip().str.lower()  # UCI: `Target`; re-export: `target`
    names, labels = np.unique(frame.pop("target").to_numpy(dtype=str), return_inverse=True)
    if opts["preprocessing"] == "tddbench":
        frame = frame.drop(columns=TDDBENCH_DROPPED_STUDENT_COLUMNS)
    return Dataset(
        "students_dropout",
        "tabular",
        _scaled(frame.to_numpy(dtype=np.float64), opts),
        labels.astype(np.int64),
        len(names),
    )


ADULT_COLUMNS = [
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education-num",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
    "native-country",
    "income",
]
ADULT_FEATURES = [
    "age",
    "education-num",
    "marital-status",
    "sex",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
]
MARRIED = {
    "Married-civ-spouse": 1,
    "Married-spouse-absent": 1,
    "Married-AF-spouse": 1,
    "Never-married": 0,
    "Divorced": 0,
    "Separated": 0,
    "Widowed": 0,
}


def load_adult(opts: Mapping[str, Any], seed: int, sources: Sources) -> Dataset:
    """UCI Adult, train then test rows (48,842), preprocessed as TDDBench does (after Hui et al.'s
    blind-MIA paper): income >50K = 1; married and sex as 0/1; keeps age, education-num,
    marital-status, sex, capital-gain, capital-loss, hours-per-week. `preprocessing: miaflow`
    (default) z-scores the 7 columns, as for the other tabular datasets here; `tddbench` feeds
    the raw values, as TDDBench does."""
    import pandas as pd

    train, test = sources()
    # adult.test opens with the line `|1x3 Cross validator`
    frames = [
        pd.read_csv(
            path,
            header=None,
            names=ADULT_COLUMNS,
            skipinitialspace=True,
            na_values="?",
            skiprows=skip,
        )
        for path, skip in ((train, 0), (test, 1))
    ]
    frame = pd.concat(frames, ignore_index=True)
    income = frame["income"].str.rstrip(".")  # test labels end with '.'
    labels = income.map({"<=50K": 0, ">50K": 1})
    frame["marital-status"] = frame["marital-status"].map(MARRIED)
    frame["sex"] = frame["sex"].map({"Male": 0, "Female": 1})
    features = frame[ADULT_FEATURES]
    if labels.isna().any() or features.isna().any().any():
        raise ValueError("adult: unexpected label, marital status or sex value in the data files")
    return Dataset(
        "adult",
        "tabular",
        _scaled(features.to_numpy(dtype=np.float64), opts),
        labels.to_numpy(dtype=np.int64),
        2,
    )


def load_purchase100(opts: Mapping[str, Any], seed: int, sources: Sources) -> Dataset:
    """Shokri et al.'s Purchase-100: `dataset_purchase` in the tgz, lines `label,f1..f600`,
    labels 1..100 (TDDBench: label - 1, binary features as float32)."""
    import pandas as pd

    [path] = sources()
    with tarfile.open(path, "r:gz") as archive, archive.extractfile("dataset_purchase") as handle:
        rows = pd.read_csv(handle, header=None, dtype=np.int16).to_numpy()
    return Dataset(
        "purchase100",
        "tabular",
        rows[:, 1:].astype(np.float32),
        rows[:, 0].astype(np.int64) - 1,
        100,
    )


def load_texas100(opts: Mapping[str, Any], seed: int, sources: Sources) -> Dataset:
    """Shokri et al.'s Texas-100: `texas/100/feats` (comma-separated binary features) and
    `texas/100/labels` (1..100, one a line) in the tgz (TDDBench: label - 1)."""
    import pandas as pd

    [path] = sources()
    with tarfile.open(path, "r:gz") as archive:
        with archive.extractfile("texas/100/feats") as handle:
            features = pd.read_csv(handle, header=None, dtype=np.float32).to_numpy()
        with archive.extractfile("texas/100/labels") as handle:
            labels = pd.read_csv(handle, header=None, dtype=np.int64).to_numpy().reshape(-1)
    return Dataset("texas100", "tabular", features, labels - 1, 100)
