"""What every stage's jobs share: reading the membership matrix, compute sessions, and finding an
experiment's rows and files (a per-experiment file is found among a rule's outputs by
`Experiment.file_name`; other list inputs and outputs: `miaflow.rule_io`)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from miaflow import io
from miaflow.models.kinds import KINDS
from miaflow.rule_io import Paths, file_named
from miaflow.splits import Splits

if TYPE_CHECKING:
    from miaflow.plan import Experiment

log = logging.getLogger(__name__)


def read_splits(path: str | Path) -> Splits:
    return Splits.from_table(io.read_table(path))


@contextmanager
def compute_session(arch: Mapping[str, Any], threads: int) -> Iterator[None]:
    """For torch models: `torch_session`. Other kinds (LR, CatBoost) run on CPU and never take a
    GPU slot."""
    if not KINDS[arch["kind"]].torch:
        yield
        return
    with torch_session(threads, compiled=bool(arch.get("compile"))):
        yield


@contextmanager
def torch_session(threads: int, compiled: bool = False) -> Iterator[None]:
    """Hold a free GPU (if any), use the job's threads, stay deterministic."""
    from miaflow.compute import gpu_slot, use_deterministic_algorithms

    with gpu_slot():
        os.environ.setdefault(
            "CUBLAS_WORKSPACE_CONFIG", ":4096:8"
        )  # needed by deterministic cuBLAS
        import torch

        torch.set_num_threads(threads)
        use_deterministic_algorithms(compiled=compiled)
        torch.backends.cudnn.benchmark = False
        yield


def rows_of(frame: pd.DataFrame, experiment: Experiment) -> pd.DataFrame:
    """The rows of `frame` (columns dataset and target_model) that belong to `experiment`."""
    return frame[
        (frame["dataset"] == experiment.dataset) & (frame["target_model"] == experiment.label)
    ]


def experiment_file(paths: Paths, experiment: Experiment, prefix: str, suffix: str) -> Path:
    """The output among `paths` that holds `experiment`'s figure (`Experiment.file_name`)."""
    return file_named(paths, experiment.file_name(prefix, suffix))


def experiment_table(paths: Paths, experiment: Experiment, prefix: str) -> list[str]:
    """The files among `paths` (csv, md, tex) of `experiment`'s table named `prefix`."""
    stem = experiment.file_name(prefix, "")
    return [str(p) for p in paths if Path(p).with_suffix("").name == stem]
