"""Datasets: the `Dataset` type and its Parquet form, the registry of benchmark datasets, their
downloads, and one module of loaders per kind of source (embedded, tabular, images, text)."""

from miaflow.data.dataset import MODALITIES, Dataset, read_dataset, write_dataset
from miaflow.data.download import ChecksumError, DownloadError, download
from miaflow.data.registry import (
    DATASETS,
    DatasetSpec,
    checksum_mismatches,
    dataset_options,
    dataset_size,
    download_source,
    load_dataset,
    source_paths,
)
from miaflow.data.sources import RAW_DIR, DatasetSize, RemoteFile

__all__ = [
    "DATASETS",
    "MODALITIES",
    "RAW_DIR",
    "ChecksumError",
    "Dataset",
    "DatasetSize",
    "DatasetSpec",
    "DownloadError",
    "RemoteFile",
    "checksum_mismatches",
    "dataset_options",
    "dataset_size",
    "download",
    "download_source",
    "load_dataset",
    "read_dataset",
    "source_paths",
    "write_dataset",
]
