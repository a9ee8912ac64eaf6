"""Jobs that write several artifacts in one process write what the separate steps would."""

from __future__ import annotations

import pytest

from miaflow import io, jobs
from miaflow.data import write_dataset
from miaflow.splits import make_splits
from test_training import ARCHS, toy_dataset


@pytest.mark.parametrize("arch_name", ["mlp", "cnn", "lr"])
def test_train_shard_writes_the_signals_of_its_saved_models(tmp_path, arch_name):
    dataset = toy_dataset(image=arch_name == "cnn")
    data, splits = tmp_path / "data.parquet", tmp_path / "splits.parquet"
    write_dataset(data, dataset)
    drawn = make_splits(240, seed=1, dataset="toy", repeats=2, n_reference=2, n_population=0)
    io.write_parquet(splits, drawn.to_table(), {"data_hash": dataset.content_hash()})
    models, signals = tmp_path / "shard-0.safetensors", tmp_path / "shard-0.parquet"
    jobs.train_shard(data, splits, ["target-0", "target-1", "reference-1"], "toy", arch_name,
                     ARCHS[arch_name], 3, 1, models, tmp_path / "shard-0.json", signals)

    separately = tmp_path / "separately.parquet"
    jobs.compute_signals(data, models, 1, separately)
    assert signals.read_bytes() == separately.read_bytes()
