"""Jobs of the train stage: shards of target, reference and population models, and their outputs
on every sample (the signal store the attacks read)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from miaflow import io
from miaflow.data import Dataset
from miaflow.jobs.common import compute_session, read_splits


def train_shard(*, data: str | Path, splits: str | Path, models: str | Path,
                records: str | Path, signals: str | Path, model_ids: Sequence[str],
                arch_name: str, arch: Mapping[str, Any], seed: int, threads: int) -> None:
    """Train one shard, save it, and cache its models' outputs on all samples (`signals`) in
    the same job and GPU slot, so that data and torch load once. The signals are computed from
    the shard as saved, so they equal those `compute_signals` computes from the file."""
    from miaflow.data import read_dataset
    from miaflow.models.training import save_shard, train_models

    loaded = read_dataset(data)
    with compute_session(arch, threads):
        weights, trained = train_models(loaded, read_splits(splits), model_ids, arch_name, arch,
                                        seed, threads)
        data_hash = loaded.content_hash()
        save_shard(models, weights, {"arch_name": arch_name, "arch": dict(arch),
                                     "n_classes": loaded.n_classes, "data_hash": data_hash,
                                     "seed": seed})
        io.write_json(records, [{"dataset": loaded.name, "arch": arch_name, **asdict(r)}
                                for r in trained])
        _write_signals(loaded, data_hash, models, signals)


def compute_signals(*, data: str | Path, models: str | Path, signals: str | Path,
                    threads: int) -> None:
    """Every model's outputs on all samples (logits and derived signals) of a saved shard."""
    from miaflow.data import read_dataset
    from miaflow.models.training import load_shard

    _, metadata = load_shard(models)
    with compute_session(metadata["arch"], threads):
        loaded = read_dataset(data)
        _write_signals(loaded, loaded.content_hash(), models, signals)


def _write_signals(loaded: Dataset, data_hash: str, models: str | Path, output: str | Path) -> None:
    """The signal shard of the saved model shard `models` (run inside a compute session);
    `data_hash` is `loaded`'s content hash, passed in so that a job computes it once."""
    from miaflow.models.training import load_shard, shard_logits
    from miaflow.signals import outputs_table, write_signal_shard

    weights, metadata = load_shard(models)
    logits = shard_logits(weights, metadata, loaded.features)
    table = outputs_table(metadata["model_ids"], np.arange(len(loaded.labels)), loaded.labels, logits)
    write_signal_shard(output, table, {"data_hash": data_hash,
                                       "models_sha256": io.file_hash(models)})
