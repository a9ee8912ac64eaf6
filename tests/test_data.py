"""Dataset registry: loader output, determinism, Parquet round trip, and the real local files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from miaflow.data import (DATASETS, DEFAULT_PATHS, Dataset, load_dataset, read_dataset,
                          write_dataset)
from miaflow.io import read_parquet_metadata

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
LOCAL_FILES = {
    "location30": SHARED_DATA / "location30" / "dataset_location.tgz",
    "students_dropout": SHARED_DATA / "students_dropout" / "students_dropout_academic_success.csv",
}
# name -> (modality, features shape, n_classes), for default options
EXPECTED = {
    "digits": ("image", (1797, 1, 8, 8), 10),
    "purchase": ("tabular", (4000, 600), 50),
    "breast_cancer": ("tabular", (569, 30), 2),
    "location30": ("tabular", (5010, 446), 30),
    "students_dropout": ("tabular", (4424, 36), 3),
}
SMALL_PURCHASE = {"n_samples": 300, "n_features": 40, "n_classes": 5}


def _needs_file(name: str):
    return pytest.mark.skipif(not LOCAL_FILES[name].is_file(),
                              reason=f"real data file absent: {LOCAL_FILES[name]}")


@pytest.fixture(scope="module")
def loaded() -> dict[str, Dataset]:
    """Each dataset loaded once (default options; local ones from ../shared/data when present)."""
    out = {name: load_dataset(name, {}, seed=0) for name, spec in DATASETS.items() if spec.offline}
    out.update({name: load_dataset(name, {"path": str(path)}, seed=0)
                for name, path in LOCAL_FILES.items() if path.is_file()})
    return out


def test_registry_matches_expected_datasets() -> None:
    assert set(DATASETS) == set(EXPECTED)
    for name, spec in DATASETS.items():
        assert spec.name == name and spec.modality == EXPECTED[name][0]
        assert spec.description and "\n" not in spec.description
        assert spec.offline == (name not in LOCAL_FILES)
    for name in LOCAL_FILES:
        assert DATASETS[name].defaults == {"path": DEFAULT_PATHS[name]}


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=_needs_file(name)) if name in LOCAL_FILES else name
    for name in EXPECTED
])
def test_dataset_shapes_dtypes_and_classes(loaded: dict[str, Dataset], name: str) -> None:
    dataset = loaded[name]
    modality, shape, n_classes = EXPECTED[name]
    assert (dataset.name, dataset.modality, dataset.n_classes) == (name, modality, n_classes)
    assert dataset.features.shape == shape and dataset.features.dtype == np.float32
    assert dataset.labels.shape == shape[:1] and dataset.labels.dtype == np.int64
    assert np.isfinite(dataset.features).all()
    assert dataset.labels.min() == 0 and dataset.labels.max() == n_classes - 1
    assert (np.bincount(dataset.labels, minlength=n_classes) > 0).all()


def test_digits_scaled_to_minus_one_one(loaded: dict[str, Dataset]) -> None:
    pixels = loaded["digits"].features
    assert pixels.min() == -1.0 and pixels.max() == 1.0
    # grey level 8 of 16 maps to 0: check the affine map on one known value
    assert np.isclose(np.sort(np.unique(pixels))[8], 0.0)


@pytest.mark.parametrize("name", [
    "breast_cancer", pytest.param("students_dropout", marks=_needs_file("students_dropout"))
])
def test_standardised_features(loaded: dict[str, Dataset], name: str) -> None:
    features = loaded[name].features.astype(np.float64)
    np.testing.assert_allclose(features.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(features.std(axis=0), 1.0, atol=1e-5)


def test_purchase_is_binary_sparse_and_not_degenerate(loaded: dict[str, Dataset]) -> None:
    purchase = loaded["purchase"]
    assert set(np.unique(purchase.features)) == {0.0, 1.0}
    assert 0.04 < purchase.features.mean() < 0.06  # default density 0.05
    counts = np.bincount(purchase.labels, minlength=50)
    assert counts.min() >= 5 and counts.max() < 0.1 * counts.sum()  # no tiny or dominant class


def test_purchase_deterministic_per_seed(loaded: dict[str, Dataset]) -> None:
    again = load_dataset("purchase", {}, seed=0)
    np.testing.assert_array_equal(again.features, loaded["purchase"].features)
    np.testing.assert_array_equal(again.labels, loaded["purchase"].labels)
    assert again.content_hash() == loaded["purchase"].content_hash()

    other = load_dataset("purchase", {}, seed=1)
    assert not np.array_equal(other.features, again.features)
    assert other.content_hash() != again.content_hash()
    assert (np.bincount(other.labels, minlength=50) > 0).all()


def test_purchase_options() -> None:
    small = load_dataset("purchase", {**SMALL_PURCHASE, "density": 0.2}, seed=3)
    assert small.features.shape == (300, 40) and small.n_classes == 5
    assert (np.bincount(small.labels, minlength=5) > 0).all()
    assert 0.15 < small.features.mean() < 0.25
    with pytest.raises(ValueError, match="unknown options.*n_sample"):
        load_dataset("purchase", {"n_sample": 10}, seed=0)
    with pytest.raises(ValueError, match="density"):
        load_dataset("purchase", {**SMALL_PURCHASE, "density": 1.5}, seed=0)


def test_parquet_byte_identical_and_layout(loaded: dict[str, Dataset], tmp_path: Path) -> None:
    dataset = loaded["digits"]
    write_dataset(tmp_path / "a.parquet", dataset)
    write_dataset(tmp_path / "b.parquet", load_dataset("digits", {}, seed=0))
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()

    schema = pq.read_schema(tmp_path / "a.parquet")
    assert schema.field("sample_id").type == pa.int64()
    assert schema.field("label").type == pa.int64()
    assert schema.field("features").type == pa.list_(pa.float32(), 64)
    meta = read_parquet_metadata(tmp_path / "a.parquet")
    assert meta == {"name": "digits", "modality": "image", "n_classes": "10",
                    "feature_shape": "[1, 8, 8]", "content_hash": dataset.content_hash()}
    sample_ids = pq.read_table(tmp_path / "a.parquet").column("sample_id").to_numpy()
    np.testing.assert_array_equal(sample_ids, np.arange(1797))


@pytest.mark.parametrize("name", ["digits", "breast_cancer", "purchase"])
def test_parquet_round_trip(loaded: dict[str, Dataset], tmp_path: Path, name: str) -> None:
    dataset = loaded[name]
    write_dataset(tmp_path / "d.parquet", dataset)
    back = read_dataset(tmp_path / "d.parquet")
    assert (back.name, back.modality, back.n_classes) == (name, dataset.modality, dataset.n_classes)
    assert back.features.dtype == np.float32 and back.labels.dtype == np.int64
    np.testing.assert_array_equal(back.features, dataset.features)
    np.testing.assert_array_equal(back.labels, dataset.labels)
    assert back.content_hash() == dataset.content_hash()


def test_tampered_file_rejected(tmp_path: Path) -> None:
    dataset = load_dataset("purchase", SMALL_PURCHASE, seed=0)
    write_dataset(tmp_path / "d.parquet", dataset)
    table = pq.read_table(tmp_path / "d.parquet")
    meta = table.schema.metadata

    wrong_hash = table.replace_schema_metadata({**meta, b"content_hash": b"0" * 64})
    pq.write_table(wrong_hash, tmp_path / "hash.parquet")
    with pytest.raises(ValueError, match="content hash mismatch"):
        read_dataset(tmp_path / "hash.parquet")

    labels = table.column("label").to_numpy().copy()
    labels[0] = (labels[0] + 1) % dataset.n_classes
    wrong_label = table.set_column(1, "label", pa.array(labels)).replace_schema_metadata(meta)
    pq.write_table(wrong_label, tmp_path / "label.parquet")
    with pytest.raises(ValueError, match="content hash mismatch"):
        read_dataset(tmp_path / "label.parquet")


def test_content_hash_covers_name_shape_and_values() -> None:
    features = np.zeros((4, 1, 1, 3), dtype=np.float32)
    labels = np.array([0, 1, 0, 1], dtype=np.int64)
    base = Dataset("x", "image", features, labels, 2).content_hash()
    assert base == Dataset("x", "image", features.copy(), labels.copy(), 2).content_hash()
    assert base != Dataset("y", "image", features, labels, 2).content_hash()
    assert base != Dataset("x", "image", features.reshape(4, 1, 3, 1), labels, 2).content_hash()
    assert base != Dataset("x", "image", features + 1, labels, 2).content_hash()
    assert base != Dataset("x", "image", features, 1 - labels, 2).content_hash()


def test_dataset_rejects_malformed_arrays() -> None:
    labels = np.array([0, 1], dtype=np.int64)
    with pytest.raises(ValueError, match="float32"):
        Dataset("x", "tabular", np.zeros((2, 3)), labels, 2)
    with pytest.raises(ValueError, match="float32"):
        Dataset("x", "image", np.zeros((2, 3), dtype=np.float32), labels, 2)
    with pytest.raises(ValueError, match="int64"):
        Dataset("x", "tabular", np.zeros((2, 3), dtype=np.float32), labels.astype(np.int32), 2)
    with pytest.raises(ValueError, match="labels must lie"):
        Dataset("x", "tabular", np.zeros((2, 3), dtype=np.float32), labels + 1, 2)
    with pytest.raises(ValueError, match="modality"):
        Dataset("x", "text", np.zeros((2, 3), dtype=np.float32), labels, 2)


@_needs_file("location30")
def test_location30_real_file(loaded: dict[str, Dataset]) -> None:
    location = loaded["location30"]
    counts = np.bincount(location.labels, minlength=30)
    assert len(counts) == 30 and counts.sum() == 5010
    assert counts.min() == 97 and counts.max() == 308
    assert set(np.unique(location.features)) == {0.0, 1.0}


@_needs_file("students_dropout")
def test_students_dropout_real_file(loaded: dict[str, Dataset]) -> None:
    counts = np.bincount(loaded["students_dropout"].labels, minlength=3)
    assert counts.tolist() == [1421, 794, 2209]  # Dropout, Enrolled, Graduate (sorted names)


@pytest.mark.parametrize("name", sorted(LOCAL_FILES))
def test_default_paths_point_at_shared_data_beside_repo(name: str) -> None:
    assert (REPO / DEFAULT_PATHS[name]).resolve() == LOCAL_FILES[name].resolve()


@pytest.mark.parametrize("name", sorted(LOCAL_FILES))
def test_missing_file_names_path(tmp_path: Path, name: str) -> None:
    missing = tmp_path / "nowhere" / "data.file"
    with pytest.raises(FileNotFoundError) as caught:
        load_dataset(name, {"path": str(missing)}, seed=0)
    assert str(missing) in str(caught.value) and "https://" in str(caught.value)


def test_unknown_dataset_lists_known_names() -> None:
    with pytest.raises(KeyError) as caught:
        load_dataset("cifar1000", {}, seed=0)
    assert "cifar1000" in str(caught.value)
    assert all(name in str(caught.value) for name in DATASETS)


def test_embedded_loaders_reject_options() -> None:
    with pytest.raises(ValueError, match="unknown options"):
        load_dataset("digits", {"path": "x"}, seed=0)


def test_import_stays_light() -> None:
    """The Snakefile imports miaflow.data to validate params; heavy libraries must load lazily."""
    code = ("import sys, miaflow.data; "
            "print([m for m in ('sklearn', 'pandas', 'pyarrow', 'torch') if m in sys.modules])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=REPO)
    assert json.loads(result.stdout.replace("'", '"')) == []
