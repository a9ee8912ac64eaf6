"""What every stage's jobs share: the job's log, reading the membership matrix, compute sessions."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from miaflow import io
from miaflow.models.kinds import KINDS
from miaflow.splits import Splits

log = logging.getLogger(__name__)
Paths = Sequence[str | Path]


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
