"""The `Dataset` type every stage passes around, and its Parquet form.

A `Dataset` holds all samples of one benchmark dataset in a canonical order; that order defines
the `sample_id`s every later artifact (splits, signals, scores) refers to. Its content hash is
stored with it and checked on reading, so a corrupted or altered file is never used.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

import numpy as np

MODALITIES = ("image", "tabular", "text")
# (N, C, H, W), (N, F) and embedded text (N, D); raw text is a 1-D object array of str.
FEATURE_NDIM = {"image": 4, "tabular": 2, "text": 2}


# eq=False: the fields are arrays, so generated __eq__/__hash__ would fail; compare content_hash().
@dataclass(frozen=True, eq=False)
class Dataset:
    """All samples of one dataset in canonical order (index = sample_id)."""

    name: str
    modality: str  # "image" | "tabular" | "text"
    # float32: tabular (N, F), image (N, C, H, W), embedded text (N, D); raw text: object (N,) str
    features: np.ndarray
    labels: np.ndarray  # int64 (N,), classes 0..n_classes-1
    n_classes: int

    def __post_init__(self) -> None:
        """Reject malformed loader output here, before it is hashed and written."""
        if self.modality not in MODALITIES:
            raise ValueError(
                f"{self.name}: modality must be one of {MODALITIES}, got {self.modality!r}"
            )
        if self.is_raw_text:
            if self.features.ndim != 1 or not all(isinstance(t, str) for t in self.features):
                raise ValueError(
                    f"{self.name}: raw text features must be a 1-D object array "
                    f"of str, got shape {self.features.shape}"
                )
        elif self.features.dtype != np.float32 or self.features.ndim != FEATURE_NDIM[self.modality]:
            raise ValueError(
                f"{self.name}: {self.modality} features must be float32 with "
                f"{FEATURE_NDIM[self.modality]} dims, got {self.features.dtype} "
                f"{self.features.shape}"
            )
        if self.labels.dtype != np.int64 or self.labels.shape != self.features.shape[:1]:
            raise ValueError(
                f"{self.name}: labels must be int64, shape {self.features.shape[:1]};"
                f" got {self.labels.dtype} {self.labels.shape}"
            )
        if self.labels.size and not 0 <= self.labels.min() <= self.labels.max() < self.n_classes:
            raise ValueError(f"{self.name}: labels must lie in 0..{self.n_classes - 1}")

    @property
    def is_raw_text(self) -> bool:
        return self.modality == "text" and self.features.dtype == object

    @property
    def feature_shape(self) -> tuple[int, ...]:
        """Shape of one sample's features (() for raw text)."""
        return tuple(self.features.shape[1:])

    def content_hash(self) -> str:
        """sha256 over name, shapes and the little-endian bytes of features and labels (raw
        text: each string's UTF-8 bytes, length-prefixed so that boundaries count)."""
        digest = hashlib.sha256()
        header = {
            "name": self.name,
            "features_shape": list(self.features.shape),
            "labels_shape": list(self.labels.shape),
        }
        digest.update(json.dumps(header, sort_keys=True).encode())
        if self.is_raw_text:
            for text in self.features:
                data = text.encode("utf-8")
                digest.update(len(data).to_bytes(8, "little"))
                digest.update(data)
        else:
            digest.update(np.ascontiguousarray(self.features, dtype="<f4").tobytes())
        digest.update(np.ascontiguousarray(self.labels, dtype="<i8").tobytes())
        return digest.hexdigest()


def write_dataset(path: str | os.PathLike, dataset: Dataset) -> None:
    """One row per sample; shapes and hash go in the schema metadata (deterministic bytes).
    Raw text is a string column, everything else a fixed-size list of float32."""
    import pyarrow as pa

    from miaflow.io import write_parquet

    n_samples = dataset.features.shape[0]
    if dataset.is_raw_text:
        features = pa.array(list(dataset.features), type=pa.string())
    else:
        width = int(np.prod(dataset.feature_shape))
        flat = pa.array(dataset.features.reshape(n_samples * width), type=pa.float32())
        features = pa.FixedSizeListArray.from_arrays(flat, width)
    table = pa.table(
        {
            "sample_id": pa.array(np.arange(n_samples, dtype=np.int64)),
            "label": pa.array(dataset.labels, type=pa.int64()),
            "features": features,
        }
    )
    write_parquet(
        path,
        table,
        {
            "name": dataset.name,
            "modality": dataset.modality,
            "n_classes": str(dataset.n_classes),
            "feature_shape": json.dumps(list(dataset.feature_shape)),
            "content_hash": dataset.content_hash(),
        },
    )


def read_dataset(path: str | os.PathLike) -> Dataset:
    """Read a `write_dataset` file, restore shapes, check the content hash (ValueError if not)."""
    import pyarrow as pa

    from miaflow.io import read_parquet_metadata, read_table

    meta = read_parquet_metadata(path)
    table = read_table(path)
    n_samples = table.num_rows
    if not np.array_equal(table.column("sample_id").to_numpy(), np.arange(n_samples)):
        raise ValueError(f"{path}: sample ids must be 0..N-1 in order")
    column = table.column("features")
    if pa.types.is_string(column.type):
        features = np.empty(n_samples, dtype=object)
        features[:] = column.to_pylist()
    else:
        flat = column.combine_chunks().flatten().to_numpy()
        features = flat.reshape(n_samples, *json.loads(meta["feature_shape"]))
    dataset = Dataset(
        name=meta["name"],
        modality=meta["modality"],
        features=features,
        labels=table.column("label").to_numpy(),
        n_classes=int(meta["n_classes"]),
    )
    if dataset.content_hash() != meta["content_hash"]:
        raise ValueError(
            f"{path}: content hash mismatch (file {meta['content_hash']}, "
            f"data {dataset.content_hash()}); the file was altered or corrupted"
        )
    return dataset
