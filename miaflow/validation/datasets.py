"""Section `datasets`: generator options and local files, plus the dataset sizes (from the
registry, `miaflow.data.dataset_size`) that the other sections' checks measure counts against."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from miaflow.data import DatasetSize


def size(config: Mapping[str, Any], dataset: str) -> DatasetSize | None:
    """The registry's size of `dataset` under its options (None where it is not known)."""
    from miaflow.data import dataset_size

    return dataset_size(dataset, config.get("datasets", {}).get(dataset, {}))


def counted(dataset: str, count: int, unit: str = "samples") -> str:
    """`the N samples of 'name'`, naming the option that sets N where one does."""
    from miaflow.data import DATASETS

    option = f" (datasets.{dataset}.n_samples)" if "n_samples" in DATASETS[dataset].defaults else ""
    return f"the {count} {unit} of {dataset!r}{option}"


def problems(config: Mapping[str, Any]) -> list[str]:
    """For every dataset the run prepares: options its generator cannot honour, and local copies
    that are missing or differ from the published files.

    A checksum mismatch stops the run (it is not a warning): results computed on a different or
    corrupted file would be reported under the dataset's name. Files without a published checksum
    (see the dataset table in docs/datasets.md) are only checked to exist.
    """
    from miaflow.data import DATASETS, checksum_mismatches, dataset_options, source_paths
    from miaflow.plan import datasets

    found = []
    for dataset in [d for d in datasets(config) if d in DATASETS]:  # others: audits.problems
        spec, options = DATASETS[dataset], config.get("datasets", {}).get(dataset, {})
        dataset_size = size(config, dataset)
        if (
            "n_classes" in spec.defaults
            and dataset_size is not None
            and dataset_size.n_classes > dataset_size.n_samples
        ):
            found.append(
                f"datasets.{dataset}.n_classes: {dataset_size.n_classes} is more than "
                f"datasets.{dataset}.n_samples {dataset_size.n_samples}"
            )
        if spec.offline:
            continue
        local = options.get("path") is not None
        key = f"datasets.{dataset}.path" if local else f"datasets.{dataset}"
        missing = [str(path) for path in source_paths(dataset, options) if not path.is_file()]
        if missing and local:
            files = spec.files(dataset_options(dataset, options))
            names = ", ".join(remote.name for remote in files)
            found.append(
                f"{key}: {', '.join(missing)} not found (working directory "
                f"{Path.cwd()}); point it at a local copy (the file, or a directory "
                f"holding {names}) or remove it to download into "
                f"data/raw/{dataset}/"
            )
        fix = (
            "replace it with the publisher's file, or remove the path to download it"
            if local
            else "delete it, and rule download_dataset fetches the published one"
        )
        for path, actual, published in checksum_mismatches(dataset, options):
            found.append(
                f"{key}: {path} has sha256 {actual}, but the published file has {published}; {fix}"
            )
    return found
