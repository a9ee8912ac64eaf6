"""Jobs of the train stage: shards of target, reference and population models, and their outputs
on every sample (the signal store the attacks read)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from miaflow import io
from miaflow.data import Dataset
from miaflow.defenses import defense_kind
from miaflow.jobs.common import compute_session, read_splits
from miaflow.progress import tracked
from miaflow.seeding import derive_seed
from miaflow.splits import Splits


def train_shard(
    *,
    data: str | Path,
    splits: str | Path,
    models: str | Path,
    records: str | Path,
    signals: str | Path,
    model_ids: Sequence[str],
    arch_name: str,
    arch: Mapping[str, Any],
    seed: int,
    threads: int,
) -> None:
    """Train one shard, save it, and cache its models' outputs on all samples (`signals`) in
    the same job and GPU slot, so that data and torch load once. The signals are computed from
    the shard as saved, so they equal those `compute_signals` computes from the file."""
    from miaflow.data import read_dataset
    from miaflow.models.shards import save_shard
    from miaflow.models.training import train_models

    loaded = read_dataset(data)
    with compute_session(arch, threads):
        weights, trained = train_models(
            loaded, read_splits(splits), model_ids, arch_name, arch, seed, threads
        )
        data_hash = loaded.content_hash()
        save_shard(
            models,
            weights,
            {
                "arch_name": arch_name,
                "arch": dict(arch),
                "n_classes": loaded.n_classes,
                "data_hash": data_hash,
                "seed": seed,
            },
        )
        io.write_json(
            records, [{"dataset": loaded.name, "arch": arch_name, **asdict(r)} for r in trained]
        )
        release = (
            partial(
                memguard_release,
                loaded,
                read_splits(splits),
                arch=arch,
                arch_name=arch_name,
                seed=seed,
            )
            if defense_kind(arch) == "memguard"
            else None
        )
        _write_signals(loaded, data_hash, models, signals, release)


def compute_signals(
    *, data: str | Path, models: str | Path, signals: str | Path, threads: int
) -> None:
    """Every model's outputs on all samples (logits and derived signals) of a saved shard."""
    from miaflow.data import read_dataset
    from miaflow.models.shards import load_shard

    _, metadata = load_shard(models)
    with compute_session(metadata["arch"], threads):
        loaded = read_dataset(data)
        _write_signals(loaded, loaded.content_hash(), models, signals)


def memguard_release(
    loaded: Dataset,
    splits: Splits,
    model_ids: Sequence[str],
    logits: np.ndarray,
    arch: Mapping[str, Any],
    arch_name: str,
    seed: int,
) -> np.ndarray:
    """What each MemGuard-defended model releases (log-probabilities, (models, samples, C)): its
    defender's classifier learns the model's members against its defense reference set."""
    from miaflow.defenses.memguard import EPOCHS, LEARNING_RATE, defend_outputs
    from miaflow.models.training import defense_reference

    defense = arch["defense"]
    released = []
    for model_id, model_logits in tracked(
        list(zip(model_ids, logits)), f"MemGuard {loaded.name}/{arch_name}", "models"
    ):
        model_seed = derive_seed(seed, "memguard", loaded.name, arch_name, model_id)
        released.append(
            defend_outputs(
                model_logits,
                np.flatnonzero(splits.members(model_id)),
                defense_reference(splits, model_id, model_seed),
                defense["budget"],
                model_seed,
                epochs=defense.get("classifier_epochs", EPOCHS),
                learning_rate=defense.get("classifier_lr", LEARNING_RATE),
            )
        )
    return np.stack(released)


def _write_signals(
    loaded: Dataset,
    data_hash: str,
    models: str | Path,
    output: str | Path,
    release: Callable[[Sequence[str], np.ndarray], np.ndarray] | None = None,
) -> None:
    """The signal shard of the saved model shard `models` (run inside a compute session);
    `data_hash` is `loaded`'s content hash, passed in so that a job computes it once. `release`
    turns the models' logits into what they release (a defense such as MemGuard)."""
    from miaflow.models.shards import load_shard, shard_logits
    from miaflow.signals import outputs_table, write_signal_shard

    weights, metadata = load_shard(models)
    logits = shard_logits(weights, metadata, loaded.features)
    if release is not None:
        logits = release(metadata["model_ids"], logits)
    table = outputs_table(
        metadata["model_ids"], np.arange(len(loaded.labels)), loaded.labels, logits
    )
    write_signal_shard(
        output, table, {"data_hash": data_hash, "models_sha256": io.file_hash(models)}
    )
