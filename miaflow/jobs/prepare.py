"""Jobs of the prepare stage: datasets in canonical order and their membership matrices."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from miaflow import io

log = logging.getLogger(__name__)


def download_dataset(
    *, file: str | Path, dataset: str, filename: str, options: Mapping[str, Any]
) -> None:
    """Fetch the upstream file `filename` of `dataset` to `file` (retries, sha256, atomic)."""
    from miaflow.data import download_source

    download_source(dataset, options, filename, file)


def prepare_dataset(
    *,
    sources: Sequence[str | Path],
    data: str | Path,
    splits: str | Path,
    dataset: str,
    options: Mapping[str, Any],
    split_settings: Mapping[str, Any],
    seed: int,
) -> None:
    """Load (or generate) a dataset from its upstream files `sources` (none for embedded ones)
    and store it, then draw its target/auxiliary pools and every model's membership
    (`split_settings`: `miaflow.splits.make_splits`' keywords) from it, in one job."""
    from miaflow.data import load_dataset, write_dataset
    from miaflow.splits import make_splits

    loaded = load_dataset(dataset, options, seed, sources)
    log.info(
        "%s: %s samples, %d classes, features %s",
        dataset,
        len(loaded.labels),
        loaded.n_classes,
        loaded.features.shape[1:],
    )
    write_dataset(data, loaded)
    drawn = make_splits(len(loaded.labels), seed=seed, dataset=dataset, **split_settings)
    log.info(
        "%s: |T| = %d, |A| = %d, %d in reserve, %d models, shadow %s",
        dataset,
        len(drawn.target_samples),
        len(drawn.auxiliary_samples),
        drawn.n_samples - len(drawn.target_samples) - len(drawn.auxiliary_samples),
        len(drawn.model_ids),
        drawn.shadow_model,
    )
    # The hash of the data as stored: read_dataset checks that it equals the in-memory one.
    io.write_parquet(splits, drawn.to_table(), metadata={"data_hash": loaded.content_hash()})
