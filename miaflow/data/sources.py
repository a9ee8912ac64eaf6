"""Where a dataset's upstream files come from, how a loader gets them, and what their publisher
states about them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

RAW_DIR = Path("data/raw")  # relative to the repo root, Snakemake's working directory

# What a loader calls to get its files: the local paths, each checked to exist (a missing one
# raises FileNotFoundError saying how to get it). Called after the loader has checked its options.
Sources = Callable[[], list[Path]]


@dataclass(frozen=True)
class RemoteFile:
    """One upstream file of a dataset, as its publisher distributes it."""

    name: str  # path below the dataset's directory (data/raw/<dataset>/<name>)
    url: str
    sha256: str | None = None  # None where no published checksum is known (the hash is logged)


@dataclass(frozen=True)
class DatasetSize:
    """A dataset's size as its publisher (or its generator's options) states it: what validation
    checks the splits and sample counts against before any file is read."""

    n_samples: int
    n_classes: int
    smallest_class: int | None = None  # samples of the rarest class, where that is known
