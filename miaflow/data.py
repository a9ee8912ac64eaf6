"""Dataset registry: every benchmark dataset as one in-memory `Dataset`, and its Parquet form.

A loader turns (options, seed) into a `Dataset` in a canonical sample order; that order defines
the `sample_id`s every later artifact (splits, scores) refers to. Embedded datasets (`offline`)
come from installed packages or are generated from the seed, so the default run needs no files.
Local ones read a real data file given by the `path` option.

Heavy libraries (scikit-learn, pandas, pyarrow) are imported inside the functions that use them:
the Snakefile imports this module just to validate params.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from miaflow.seeding import derive_seed, rng

MODALITIES = ("image", "tabular")
FEATURE_NDIM = {"image": 4, "tabular": 2}  # (N, C, H, W) and (N, F)

# Relative to the working directory, which is the repo root when Snakemake runs.
DEFAULT_PATHS = {
    "location30": "../shared/data/location30/dataset_location.tgz",
    "students_dropout": "../shared/data/students_dropout/students_dropout_academic_success.csv",
}
# Where to get each local file when it is missing (named in the FileNotFoundError).
DATA_SOURCES = {
    "location30": "dataset_location.tgz from https://github.com/privacytrustlab/datasets",
    "students_dropout": (
        "students_dropout_academic_success.csv from https://github.com/zahraafandii/"
        "ML-Unveiling-Academic-Trajectories-Through-Machine-Learning-Analysis "
        "(comma-separated re-export of UCI dataset 697)"
    ),
}
PURCHASE_DEFAULTS = {"n_samples": 4000, "n_features": 600, "n_classes": 50, "density": 0.05}


# eq=False: the fields are arrays, so generated __eq__/__hash__ would fail; compare content_hash().
@dataclass(frozen=True, eq=False)
class Dataset:
    """All samples of one dataset in canonical order (index = sample_id)."""

    name: str
    modality: str  # "image" | "tabular"
    features: np.ndarray  # float32; tabular (N, F); image (N, C, H, W)
    labels: np.ndarray  # int64 (N,), classes 0..n_classes-1
    n_classes: int

    def __post_init__(self) -> None:
        """Reject malformed loader output here, before it is hashed and written."""
        if self.modality not in MODALITIES:
            raise ValueError(f"{self.name}: modality must be one of {MODALITIES}, "
                             f"got {self.modality!r}")
        if self.features.dtype != np.float32 or self.features.ndim != FEATURE_NDIM[self.modality]:
            raise ValueError(f"{self.name}: {self.modality} features must be float32 with "
                             f"{FEATURE_NDIM[self.modality]} dims, got {self.features.dtype} "
                             f"{self.features.shape}")
        if self.labels.dtype != np.int64 or self.labels.shape != self.features.shape[:1]:
            raise ValueError(f"{self.name}: labels must be int64, shape {self.features.shape[:1]};"
                             f" got {self.labels.dtype} {self.labels.shape}")
        if self.labels.size and not 0 <= self.labels.min() <= self.labels.max() < self.n_classes:
            raise ValueError(f"{self.name}: labels must lie in 0..{self.n_classes - 1}")

    @property
    def feature_shape(self) -> tuple[int, ...]:
        """Shape of one sample's features."""
        return tuple(self.features.shape[1:])

    def content_hash(self) -> str:
        """sha256 over name, shapes and the little-endian bytes of features and labels."""
        digest = hashlib.sha256()
        header = {"name": self.name, "features_shape": list(self.features.shape),
                  "labels_shape": list(self.labels.shape)}
        digest.update(json.dumps(header, sort_keys=True).encode())
        digest.update(np.ascontiguousarray(self.features, dtype="<f4").tobytes())
        digest.update(np.ascontiguousarray(self.labels, dtype="<i8").tobytes())
        return digest.hexdigest()


@dataclass(frozen=True)
class DatasetSpec:
    """A registered dataset: how to load it, and what it needs."""

    name: str
    modality: str
    description: str  # one line, with source/citation
    loader: Callable[[Mapping[str, Any], int], Dataset]  # (options, seed) -> Dataset
    offline: bool  # True when it needs no file outside installed packages
    defaults: Mapping[str, Any] = field(default_factory=dict)  # every accepted option, with default


def _options(name: str, options: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults overridden by `options`; an unknown key is an error, so params typos fail loudly."""
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise ValueError(f"{name}: unknown options {unknown}; accepted: {sorted(defaults)}")
    return {**defaults, **options}


def _standardise(features: np.ndarray) -> np.ndarray:
    """z-score each column over the whole dataset (constant columns become 0), as float32."""
    features = features.astype(np.float64)
    std = features.std(axis=0)
    return ((features - features.mean(axis=0)) / np.where(std > 0, std, 1.0)).astype(np.float32)


def _local_file(name: str, options: Mapping[str, Any]) -> Path:
    """The data file named by option `path`; missing -> FileNotFoundError saying where to get it."""
    path = Path(_options(name, options, {"path": DEFAULT_PATHS[name]})["path"])
    if not path.is_file():
        raise FileNotFoundError(
            f"{name}: data file not found at '{path}' (resolved: {path.resolve()}). "
            f"Get {DATA_SOURCES[name]} and set the dataset option `path` to it "
            f"(default {DEFAULT_PATHS[name]!r}, relative to the repo root)."
        )
    return path


def _load_digits(options: Mapping[str, Any], seed: int) -> Dataset:
    """sklearn digits as 1x8x8 images, pixels mapped to [-1, 1] (TDDBench's mean=std=0.5)."""
    from sklearn.datasets import load_digits

    _options("digits", options, {})
    bunch = load_digits()
    pixels = bunch.images[:, None, :, :] / 16.0  # raw grey levels are 0..16
    return Dataset("digits", "image", ((pixels - 0.5) / 0.5).astype(np.float32),
                   bunch.target.astype(np.int64), 10)


def _load_purchase(options: Mapping[str, Any], seed: int) -> Dataset:
    """Synthetic Purchase-100-style data, labelled the way Shokri et al. labelled the real one.

    Customers of `n_classes` latent types (uneven sizes) buy each product independently; a type's
    per-product probability is Beta-distributed with mean `density` and a small first parameter,
    so each type buys a few products often and most almost never. Labels are k-means clusters of
    the binary purchase vectors (not the latent types), renumbered by first appearance so they do
    not depend on KMeans' internal centre order.
    """
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    opts = _options("purchase", options, PURCHASE_DEFAULTS)
    n_samples, n_features = int(opts["n_samples"]), int(opts["n_features"])
    n_classes, density = int(opts["n_classes"]), float(opts["density"])
    if not 0 < density < 1 or not 2 <= n_classes <= n_samples:
        raise ValueError(f"purchase: need 0 < density < 1 and 2 <= n_classes <= n_samples, "
                         f"got {opts}")

    generator = rng(seed, "purchase", "customers")
    type_sizes = generator.dirichlet(np.full(n_classes, 20.0))
    types = generator.choice(n_classes, size=n_samples, p=type_sizes)
    shape_a = 0.05
    shape_b = shape_a * (1 - density) / density  # Beta mean a / (a + b) = density
    buy_prob = generator.beta(shape_a, shape_b, size=(n_classes, n_features))
    bought = (generator.random((n_samples, n_features)) < buy_prob[types]).astype(np.float32)

    kmeans = KMeans(n_clusters=n_classes, n_init=4,
                    random_state=derive_seed(seed, "purchase", "kmeans") % 2**32)
    # One thread: OpenMP threads spin badly on a busy machine (10x slower), and Snakemake already
    # runs jobs in parallel.
    with threadpool_limits(limits=1):
        clusters = kmeans.fit_predict(bought.astype(np.float64))
    present, first_index = np.unique(clusters, return_index=True)
    if len(present) != n_classes:
        raise ValueError(f"purchase: k-means left {n_classes - len(present)} of {n_classes} "
                         "clusters empty; use fewer classes or more samples")
    renumber = np.empty(n_classes, dtype=np.int64)
    renumber[np.argsort(first_index)] = np.arange(n_classes)
    return Dataset("purchase", "tabular", bought, renumber[clusters], n_classes)


def _load_breast_cancer(options: Mapping[str, Any], seed: int) -> Dataset:
    """sklearn breast cancer (Wisconsin diagnostic), 30 z-scored features, 2 classes."""
    from sklearn.datasets import load_breast_cancer

    _options("breast_cancer", options, {})
    bunch = load_breast_cancer()
    return Dataset("breast_cancer", "tabular", _standardise(bunch.data),
                   bunch.target.astype(np.int64), 2)


def _load_location30(options: Mapping[str, Any], seed: int) -> Dataset:
    """Shokri et al.'s Location: read `bangkok` straight from the tgz (lines `"label",f1..f446`)."""
    path = _local_file("location30", options)
    with tarfile.open(path, "r:gz") as archive, archive.extractfile("bangkok") as handle:
        rows = np.loadtxt(handle, delimiter=",", quotechar='"', dtype=np.int64, ndmin=2)
    return Dataset("location30", "tabular", rows[:, 1:].astype(np.float32), rows[:, 0] - 1, 30)


def _load_students_dropout(options: Mapping[str, Any], seed: int) -> Dataset:
    """UCI students' dropout: 36 z-scored features; labels are the class names in sorted order
    (Dropout=0, Enrolled=1, Graduate=2)."""
    import pandas as pd

    frame = pd.read_csv(_local_file("students_dropout", options))
    frame.columns = frame.columns.str.strip().str.lower()  # UCI: `Target`; re-export: `target`
    names, labels = np.unique(frame.pop("target").to_numpy(dtype=str), return_inverse=True)
    return Dataset("students_dropout", "tabular", _standardise(frame.to_numpy(dtype=np.float64)),
                   labels.astype(np.int64), len(names))


DATASETS: dict[str, DatasetSpec] = {spec.name: spec for spec in [
    DatasetSpec("digits", "image",
                "sklearn digits: 1797 8x8 grey handwritten digits, 10 classes "
                "(UCI Optical Recognition of Handwritten Digits, Alpaydin & Kaynak 1998)",
                _load_digits, offline=True),
    DatasetSpec("purchase", "tabular",
                "synthetic Purchase-100-style binary purchase vectors labelled by k-means "
                "(after Shokri et al., S&P 2017), generated from the seed",
                _load_purchase, offline=True, defaults=PURCHASE_DEFAULTS),
    DatasetSpec("breast_cancer", "tabular",
                "sklearn breast cancer: 569 samples, 30 features, 2 classes "
                "(UCI Breast Cancer Wisconsin Diagnostic, Street et al. 1993)",
                _load_breast_cancer, offline=True),
    DatasetSpec("location30", "tabular",
                "Location: 5010 Foursquare Bangkok check-in profiles, 446 binary features, "
                "30 classes (Shokri et al., S&P 2017; privacytrustlab/datasets)",
                _load_location30, offline=False, defaults={"path": DEFAULT_PATHS["location30"]}),
    DatasetSpec("students_dropout", "tabular",
                "UCI Predict Students' Dropout and Academic Success: 4424 students, 36 features, "
                "3 classes (Realinho et al. 2022, doi:10.24432/C5MC89)",
                _load_students_dropout, offline=False,
                defaults={"path": DEFAULT_PATHS["students_dropout"]}),
]}


def load_dataset(name: str, options: Mapping[str, Any], seed: int) -> Dataset:
    """Load a registered dataset; an unknown name raises KeyError listing the known ones."""
    if name not in DATASETS:
        raise KeyError(f"unknown dataset {name!r}; known: {sorted(DATASETS)}")
    return DATASETS[name].loader(options, seed)


def write_dataset(path: str | os.PathLike, dataset: Dataset) -> None:
    """One row per sample; shapes and hash go in the schema metadata (deterministic bytes)."""
    import pyarrow as pa

    from miaflow.io import write_parquet

    n_samples, width = dataset.features.shape[0], int(np.prod(dataset.feature_shape))
    flat = pa.array(dataset.features.reshape(n_samples * width), type=pa.float32())
    table = pa.table({
        "sample_id": pa.array(np.arange(n_samples, dtype=np.int64)),
        "label": pa.array(dataset.labels, type=pa.int64()),
        "features": pa.FixedSizeListArray.from_arrays(flat, width),
    })
    write_parquet(path, table, {
        "name": dataset.name,
        "modality": dataset.modality,
        "n_classes": str(dataset.n_classes),
        "feature_shape": json.dumps(list(dataset.feature_shape)),
        "content_hash": dataset.content_hash(),
    })


def read_dataset(path: str | os.PathLike) -> Dataset:
    """Read a `write_dataset` file, restore shapes, check the content hash (ValueError if not)."""
    import pyarrow.parquet as pq

    from miaflow.io import read_parquet_metadata

    meta = read_parquet_metadata(path)
    table = pq.read_table(path)
    n_samples = table.num_rows
    if not np.array_equal(table.column("sample_id").to_numpy(), np.arange(n_samples)):
        raise ValueError(f"{path}: sample ids must be 0..N-1 in order")
    flat = table.column("features").combine_chunks().flatten().to_numpy()
    dataset = Dataset(
        name=meta["name"],
        modality=meta["modality"],
        features=flat.reshape(n_samples, *json.loads(meta["feature_shape"])),
        labels=table.column("label").to_numpy(),
        n_classes=int(meta["n_classes"]),
    )
    if dataset.content_hash() != meta["content_hash"]:
        raise ValueError(f"{path}: content hash mismatch (file {meta['content_hash']}, "
                         f"data {dataset.content_hash()}); the file was altered or corrupted")
    return dataset
